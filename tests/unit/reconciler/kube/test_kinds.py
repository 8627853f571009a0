"""Stories of the kinds registry (reconciler.kube.kinds): where each kind lives in the REST API,
which kinds are cached, looked up before use or never pruned, and what the caches keep of the
kinds the reconciler only reads."""

from __future__ import annotations

import pytest

from reconciler.kube import kinds as k
from reconciler.kube.kinds import KINDS, kind_of, slim


def test_request_paths_of_core_grouped_namespaced_and_cluster_wide_kinds() -> None:
    assert k.POD.path() == "/api/v1/pods"
    assert k.POD.path("shop") == "/api/v1/namespaces/shop/pods"
    assert k.POD.path("shop", "orders-0") == "/api/v1/namespaces/shop/pods/orders-0"
    assert k.STATEFUL_SET.path("shop", "orders") == \
        "/apis/apps/v1/namespaces/shop/statefulsets/orders"
    assert k.NODE.path("shop", "node-1") == "/api/v1/nodes/node-1", "Nodes have no namespace"
    assert k.VALIDATING_WEBHOOK.path(None, "kaiwu") == \
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kaiwu"
    assert k.PVC.path("a b", "data/0") == \
        "/api/v1/namespaces/a%20b/persistentvolumeclaims/data/0"
    assert (k.POD.group, k.LEASE.group, k.KAIWU_CLUSTER.group) == (
        "", "coordination.k8s.io", "kaiwu.inspur.com")


def test_objects_are_looked_up_by_api_version_and_kind() -> None:
    assert kind_of({"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget"}) \
        is k.PDB_V1BETA1
    assert kind_of({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"}) is k.PDB_V1
    with pytest.raises(KeyError):
        kind_of({"apiVersion": "apps/v1", "kind": "Deployment"})


def test_claims_secrets_backups_and_the_webhook_are_never_pruned() -> None:
    # The start-flags ConfigMap is never rendered: it goes with its KaiwuCluster (owner).
    never = {"PersistentVolumeClaim", "Secret", "ConfigMap", "KaiwuBackup",
             "KaiwuBackupSchedule", "ValidatingWebhookConfiguration"}
    assert set(k.NEVER_PRUNED) == never


def test_what_is_cached_and_what_is_looked_up_before_use() -> None:
    assert {kind.kind for kind in k.CACHED_KINDS} == {
        "ServiceAccount", "Service", "Secret", "Pod", "PersistentVolumeClaim", "StatefulSet",
        "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor"}
    assert len(k.CACHED_KINDS) == 10, "both PodDisruptionBudget versions"
    optional = {(kind.api_version, kind.kind) for kind in KINDS.values()} - {
        (kind.api_version, kind.kind) for kind in k.ALWAYS_SERVED}
    assert optional == {
        ("kaiwu.inspur.com/v1", "KaiwuCluster"), ("kaiwu.inspur.com/v1", "KaiwuBackup"),
        ("kaiwu.inspur.com/v1", "KaiwuBackupSchedule"), ("policy/v1", "PodDisruptionBudget"),
        ("monitoring.coreos.com/v1", "ServiceMonitor")}
    assert not k.NODE.namespaced and not k.PV.namespaced and k.PVC.namespaced


def test_a_pod_is_kept_down_to_what_its_readers_use() -> None:
    full = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "orders-0", "uid": "u", "managedFields": [{"manager": "x"}]},
            "spec": {"nodeName": "node-1", "volumes": [{"name": "data"}],
                     "containers": [{"name": "kwbase", "image": "kwdb/kwdb:3.2.1",
                                     "args": ["start"]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5",
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "t", "lastProbeTime": None}],
                       "containerStatuses": [{"name": "kwbase", "ready": True,
                                              "restartCount": 2, "state": {"running": {}},
                                              "lastState": {}, "imageID": "sha"}]},
            "extra": "dropped"}
    assert slim(full) == {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-0", "uid": "u"},
        "spec": {"nodeName": "node-1",
                 "containers": [{"name": "kwbase", "image": "kwdb/kwdb:3.2.1"}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True",
                                   "lastTransitionTime": "t"}],
                   "containerStatuses": [{"name": "kwbase", "ready": True, "restartCount": 2,
                                          "state": {"running": {}}, "lastState": {}}]}}
    assert "managedFields" in full["metadata"], "the original is left as it was"


def test_objects_without_metadata_or_with_odd_values_are_kept_as_far_as_they_go() -> None:
    assert slim({"kind": "Node", "status": {"conditions": "odd"}}) == {
        "kind": "Node", "status": {"conditions": "odd"}}
    assert slim({"kind": "Pod", "metadata": None, "spec": "odd"}) == {
        "kind": "Pod", "spec": "odd"}
    service = {"kind": "Service", "metadata": {"managedFields": []}}
    assert slim(service) is service


def test_a_secret_is_cached_with_its_data_only_when_a_kaiwucluster_controls_it_and_it_is_small(
        ) -> None:
    """Anyone may label a Secret as ours: the cache keeps data only of a cluster's own."""
    owner = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster", "name": "orders",
             "uid": "u", "controller": True}

    def secret(owners: list[dict[str, object]], size: int) -> dict[str, object]:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "s", "namespace": "db", "uid": "1",
                             "resourceVersion": "9", "labels": {"a": "b"},
                             "annotations": {"big": "x" * 1000}, "ownerReferences": owners},
                "data": {"ca.crt": "A" * size}}

    ours = k.slim(secret([owner], 4096))
    assert ours["data"] == {"ca.crt": "A" * 4096}
    for kept in (k.slim(secret([], 4096)), k.slim(secret([{**owner, "controller": False}], 10)),
                 k.slim(secret([owner], k.SECRET_DATA_CAP + 1))):
        assert "data" not in kept and "annotations" not in kept["metadata"]
        assert kept["metadata"]["name"] == "s" and kept["metadata"]["resourceVersion"] == "9"
    assert k.SECRET.list_page == 25, "a page of labelled Secrets is held whole while read"


def test_a_clusters_certificate_secret_owned_by_nobody_is_cached_with_its_data() -> None:
    """The certificate Secrets outlive their cluster (no ownerReference); marked as the
    reconciler marks them, they keep their data in the cache, so a pass reads none of them."""
    labels = {"app.kubernetes.io/managed-by": "kaiwu-operator",
              "app.kubernetes.io/instance": "orders", k.TLS_SECRET_LABEL: "true"}

    def secret(labels: dict[str, str], size: int = 4096) -> dict[str, object]:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "orders-ca", "namespace": "db", "labels": labels},
                "data": {"ca.crt": "A" * size}}

    assert k.slim(secret(labels))["data"] == {"ca.crt": "A" * 4096}
    for partial in ({**labels, k.TLS_SECRET_LABEL: "yes"},
                    {key: v for key, v in labels.items() if key != "app.kubernetes.io/instance"},
                    {key: v for key, v in labels.items()
                     if key != "app.kubernetes.io/managed-by"}):
        assert "data" not in k.slim(secret(partial)), partial
    assert "data" not in k.slim(secret(labels, k.SECRET_DATA_CAP + 1))
