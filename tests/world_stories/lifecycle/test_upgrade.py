"""Story: a user upgrades KaiwuDB by changing spec.version; the pods roll one at a time.

The StatefulSet's partition keeps every pod on the old image until the reconciler lets the next
one go: the highest ordinal first, each only once the pods already moved are Ready on the new
revision, every KaiwuDB node is live and no range is under-replicated. The user sees the cluster
Upgrading, then Ready on the new version with the same KaiwuDB node ids (stores survive the
restart), and at no moment were two nodes down. Timings are printed (pytest -s).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import (
    NAME,
    bring_up,
    lifecycle_count,
    live_nodes,
    report,
    small_cluster,
)
from tests.world.simworld import SimWorld


def pods(kube: k8s.ApiClient, namespace: str) -> list[Obj]:
    items, _ = Kube(kube, "test").list_objects(kk.POD, namespace,
                                               f"app.kubernetes.io/instance={NAME}")
    return items


def image(pod: Obj) -> str:
    return str(pod["spec"]["containers"][0]["image"])


def ready(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ())


def test_a_version_change_rolls_one_pod_at_a_time_gated_on_kaiwudb_health(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes on 3.2.1)", took)
    nodes = live_nodes(obj)

    started = time.monotonic()
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"version": "3.2.2"}})
    fewest_ready = 3
    order: list[str] = []

    def upgraded() -> Obj | None:
        nonlocal fewest_ready
        current = pods(kube, namespace)
        fewest_ready = min(fewest_ready, sum(ready(pod) for pod in current))
        for pod in current:
            name = pod["metadata"]["name"]
            if image(pod).endswith(":3.2.2") and name not in order:
                order.append(name)
        found = reconciler.cluster(NAME)
        done = len(current) == 3 and all(
            image(pod).endswith(":3.2.2") and ready(pod) for pod in current)
        return found if done and condition(found, "Ready").get("status") == "True" and (
            found or {}).get("status", {}).get("version") == "3.2.2" else None
    obj = wait_for("every pod Ready on 3.2.2 and the cluster Ready", upgraded, 75, 0.1)
    report("version 3.2.1 -> 3.2.2: rolled and Ready", time.monotonic() - started)

    assert order == [f"{NAME}-2", f"{NAME}-1", f"{NAME}-0"], "highest ordinal first"
    assert fewest_ready >= 2, "never two pods down at once"
    assert live_nodes(obj) == nodes, "stores survive the restart: the same node ids"
    assert lifecycle_count(reconciler, "upgrade-step") == 3
    sts = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert sts is not None
    assert sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 3, \
        "the gate is closed again for the next change"


def test_a_downgrade_is_refused_and_no_pod_moves(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, _, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes on 3.2.1)", took)
    uids = sorted(pod["metadata"]["uid"] for pod in pods(kube, namespace))

    started = time.monotonic()
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"version": "3.2.0"}})
    stalled = wait_for("the downgrade to be refused", lambda: (c := condition(
        reconciler.cluster(NAME), "Stalled")).get("status") == "True" and c, 30, 0.1)
    report("version 3.2.1 -> 3.2.0: refused", time.monotonic() - started)
    # Refused as the admission webhook refuses it, before any step acts (the rollout's own
    # check against the pods' versions is the second guard).
    assert stalled["reason"] == "InvalidSpec"
    assert "spec.version: the version cannot go back (3.2.1 -> 3.2.0): KaiwuDB cannot be " \
        "downgraded (keep 3.2.1 or later)" in stalled["message"]
    time.sleep(2.0)  # passes go by: still nothing moves
    current = pods(kube, namespace)
    assert sorted(pod["metadata"]["uid"] for pod in current) == uids
    assert all(image(pod).endswith(":3.2.1") and ready(pod) for pod in current)
    assert lifecycle_count(reconciler, "upgrade-step") == 0

    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"version": "3.2.1"}})
    wait_for("Ready and no longer Stalled", lambda: (
        found := reconciler.cluster(NAME)) and condition(found, "Ready").get(
        "status") == "True" and condition(found, "Stalled").get("status") == "False", 30, 0.1)
    assert sorted(pod["metadata"]["uid"] for pod in pods(kube, namespace)) == uids
