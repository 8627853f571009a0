"""The certificate plan's write contract holds against the real kube-apiserver.

Story (reconciler.kaiwudb.certs.rotation module docstring, step 1): the controller creates missing
certificate Secrets with a plain create, so a second reconcile working from a stale cache cannot
overwrite a CA (409 AlreadyExists); renewals go out as server-side apply carrying the live
resourceVersion, so a renewal planned from an out-of-date view is refused (409 Conflict) instead of
silently replacing certificates someone else just wrote.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client as k8s

from reconciler.kaiwudb.certs.layout import ca_secret_name, certs_hash, earliest_expiry
from reconciler.kaiwudb.certs.rotation import certs_action
from reconciler.kube.client import ApiError, Kube
from reconciler.kube.kinds import SECRET
from renderer.schema import apply_defaults
from renderer.spec import Cluster


def test_creates_cannot_overwrite_and_renewals_are_guarded_by_resource_version(
        kube: k8s.ApiClient, namespace: str) -> None:
    api = Kube(kube, "kaiwu-reconciler-test")
    cluster = Cluster.from_object(apply_defaults({
        "apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
        "metadata": {"name": "orders", "namespace": namespace},
        "spec": {"version": "3.2.1", "replicas": 3}}))
    now = datetime.now(UTC)
    names = [ca_secret_name(cluster), cluster.node_secret, cluster.client_secret]

    first = certs_action(cluster, {}, now)
    for write in first.writes:
        assert write.verb == "create"
        api.create(write.secret)
    # A reconcile whose cache has not seen the Secrets yet plans them again: refused.
    again = certs_action(cluster, {}, now)
    with pytest.raises(ApiError) as exists:
        api.create(again.writes[0].secret)
    assert exists.value.status == 409

    def live() -> dict[str, dict[str, object]]:
        found = {name: api.get(SECRET, namespace, name) for name in names}
        return {name: obj for name, obj in found.items() if obj is not None}

    before = live()
    assert certs_action(cluster, before, now).writes == ()
    expiry = earliest_expiry(before[cluster.node_secret])
    assert expiry is not None
    renew_at = expiry - timedelta(days=29)
    renewal = certs_action(cluster, before, renew_at)
    assert [w.name for w in renewal.writes] == [cluster.node_secret, cluster.client_secret]
    for write in renewal.writes:
        api.apply(write.secret)
    after = live()
    assert after[cluster.node_secret]["data"] != before[cluster.node_secret]["data"]
    assert certs_action(cluster, after, renew_at).writes == ()
    assert certs_hash(after[cluster.node_secret], after[cluster.client_secret]) == (
        renewal.certs_hash)

    # The same renewal planned from the view before the first one landed: refused.
    stale = certs_action(cluster, before, renew_at)
    with pytest.raises(ApiError) as conflict:
        api.apply(stale.writes[0].secret)
    assert conflict.value.status == 409
    assert live()[cluster.node_secret]["data"] == after[cluster.node_secret]["data"]
