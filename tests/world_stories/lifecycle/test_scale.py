"""Stories: a user scales a KaiwuCluster out and back in; the reconciler keeps KaiwuDB whole.

Scale-out needs nothing from the reconciler but bookkeeping: the new pod joins through --join and
its node id shows in status.nodes. Scale-in is KaiwuDB's documented procedure, driven by the
reconciler one node at a time: with every node live and replication healthy it decommissions the
node id of the highest ordinal, waits (requeueing, never blocking) until that node holds no
replicas, and only then shrinks the StatefulSet and deletes the removed pod's claim (a
decommissioned store can never rejoin). A single-replica cluster holds one copy of its data: its
scale-in is refused, Stalled, and nothing is removed. A StatefulSet scaled up by hand is scaled
in the same way: its new nodes are drained before their pods go; a node whose pod went without a
decommission (scaled down by hand) is decommissioned as a stray. "Healthy" counts only range
metrics every live node wrote 20 s after the newest node started (KWDB computes and writes them
every 10 s), so a scale-in right after a scale-out starts about 20 s later. Timings are printed
(pytest -s).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.controller.controller import Controller
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as kk
from reconciler.kube.cache import Caches
from reconciler.kube.client import Kube
from reconciler.metrics import Metrics
from renderer.schema import apply_defaults
from renderer.spec import Cluster
from tests.support import world_kube
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import (
    NAME,
    bring_up,
    lifecycle_count,
    live_nodes,
    pause,
    report,
    scale,
    small_cluster,
    statefulset_replicas,
    status,
    wait_ready,
)
from tests.world.faults import Faults
from tests.world.simworld import SimWorld


def scaled_in_to(reconciler: Reconciler, replicas: int) -> bool:
    """Ready, no operation in flight, and that many replicas and live KaiwuDB nodes."""
    st = status(reconciler)
    return (condition(reconciler.cluster(NAME), "Ready").get("status") == "True"
            and "operation" not in st and st.get("replicas") == replicas
            and len(live_nodes({"status": st})) == replicas)


def test_scale_out_then_in_decommissions_exactly_the_removed_node(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    three = live_nodes(obj)

    started = time.monotonic()
    scale(kube, namespace, 4)
    grown = wait_for("4 live KaiwuDB nodes and Ready", lambda: (
        o := wait_ready(reconciler)) and len(live_nodes(o)) == 4 and o, 60, 0.1)
    report("replicas 3 -> 4: new node live, Ready", time.monotonic() - started)
    four = live_nodes(grown)
    assert {pod: four[pod] for pod in three} == three, "existing pods keep their node ids"
    added = four[f"{NAME}-3"]
    assert added not in three.values()
    assert lifecycle_count(reconciler, "init") == 1, "joining needs no init"

    # As on every KWDB 3.2.1 cluster, the TS TXN job runs for ever (handle_ts_txn.go:36-56):
    # the scale-in must not wait for it.
    cluster = Cluster.from_object(apply_defaults(small_cluster(namespace)))
    admin = KwbaseAdmin.for_cluster(Kube(kube, "test"), cluster)
    assert ("TS TXN", 1) in admin.running_jobs(f"{NAME}-0").by_type

    started = time.monotonic()
    scale(kube, namespace, 3)
    # The node is decommissioned while its pod still runs: the StatefulSet keeps 4 replicas.
    operation = wait_for("the scale-in operation in status", lambda: status(reconciler).get(
        "operation"), 60, 0.05)
    assert operation["type"] == "ScaleIn" and operation["pod"] == f"{NAME}-3"
    assert operation.get("nodeId") in (None, added)
    wait_for("the cluster to be Ready with 3 nodes and no operation",
             lambda: scaled_in_to(reconciler, 3), 60, 0.1)
    report("replicas 4 -> 3: decommission, shrink, Ready", time.monotonic() - started)

    obj = wait_ready(reconciler)
    assert live_nodes(obj) == three, "the three original nodes remain, with their ids"
    assert statefulset_replicas(kube, namespace) == 3
    assert lifecycle_count(reconciler, "decommission") == 1
    actions = [a["action"] for a in obj["status"]["lastActions"]]
    assert actions.index("ScaledIn") < actions.index("NodeDecommissioned") < actions.index(
        "Decommissioning"), "newest first: decommission, drained, then shrink"
    wait_for("the removed pod's claim to go", lambda: Kube(kube, "test").get(
        kk.PVC, namespace, f"data-{NAME}-3") is None, 20, 0.1)

    # KaiwuDB agrees: the removed node id is decommissioned and holds nothing; the rest are live.
    rows = {n.id: n for n in admin.node_status(f"{NAME}-0", decommission=True)}
    assert ("TS TXN", 1) in admin.running_jobs(f"{NAME}-0").by_type, 'still running'
    assert rows[added].is_decommissioning and rows[added].gossiped_replicas == 0
    assert all(rows[i].healthy and not rows[i].is_decommissioning for i in three.values())


@world_kube.STORED_ONLY_WITHOUT_CEL
def test_a_single_replica_cluster_refuses_to_scale_in(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, small_cluster(
        namespace, startMode="single-replica"))
    report("apply -> Ready (3 single-replica nodes)", took)
    nodes = live_nodes(obj)

    scale(kube, namespace, 2)
    stalled = wait_for("Stalled", lambda: (c := condition(
        reconciler.cluster(NAME), "Stalled")).get("status") == "True" and c, 20, 0.1)
    # Refused as the admission webhook refuses it, against the spec last applied.
    assert stalled["reason"] == "InvalidSpec"
    assert "spec.replicas: a single-replica cluster cannot scale in (no second copy of the " \
        "data exists) (keep replicas at 3 or more)" in stalled["message"]
    time.sleep(1.0)  # a few passes later, still nothing removed
    assert statefulset_replicas(kube, namespace) == 3
    assert lifecycle_count(reconciler, "decommission") == 0
    assert "operation" not in status(reconciler)

    scale(kube, namespace, 3)
    assert live_nodes(wait_ready(reconciler, 30)) == nodes


def test_scaling_out_during_a_scale_in_recommissions_the_node(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace, replicas=4))
    report("apply -> Ready (4 nodes)", took)
    four = live_nodes(obj)

    scale(kube, namespace, 3)
    operation = wait_for("node 4's decommission to start", lambda: (
        op := status(reconciler).get("operation")) and op.get("phase") == "Decommissioning"
        and op, 60, 0.02)
    # The user changes their mind while the node still drains (draining takes seconds).
    started = time.monotonic()
    scale(kube, namespace, 4)
    wait_for("the operation to be cancelled", lambda: "operation" not in status(reconciler),
             20, 0.02)
    report("replicas back to 4 mid-decommission -> recommissioned", time.monotonic() - started)
    obj = wait_ready(reconciler, 30)
    assert live_nodes(obj) == four, "the same four nodes, none removed"
    assert lifecycle_count(reconciler, "recommission") == 1
    assert statefulset_replicas(kube, namespace) == 4
    actions = [a["action"] for a in obj["status"]["lastActions"]]
    assert "Recommissioned" in actions and "ScaledIn" not in actions

    cluster = Cluster.from_object(apply_defaults(small_cluster(namespace)))
    node = KwbaseAdmin.for_cluster(Kube(kube, "test"), cluster).node_status(
        f"{NAME}-0", operation["nodeId"], decommission=True)[0]
    assert node.healthy and not node.is_decommissioning


def test_a_restarted_reconciler_resumes_the_scale_in_from_status(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace, replicas=4))
    report("apply -> Ready (4 nodes)", took)
    four = live_nodes(obj)

    scale(kube, namespace, 3)
    operation = wait_for("node 4's decommission to start", lambda: (
        op := status(reconciler).get("operation")) and op.get("phase") == "Decommissioning"
        and op, 60, 0.02)
    # The reconciler's process ends mid-operation (a new version is deployed, its node
    # drains): all it knew in memory is gone; status.operation is what remains.
    reconciler.stop()
    assert lifecycle_count(reconciler, "decommission") == 1

    started = time.monotonic()
    metrics = Metrics()
    caches = Caches(reconciler.kube, reconciler.settings, metrics, lambda key: None)
    caches.start()
    try:
        assert caches.wait_synced(30)
        successor = Controller(reconciler.kube, caches, reconciler.settings, metrics)
        key = ClusterKey(namespace, NAME)
        deadline = time.monotonic() + 60
        while True:
            result = successor.reconcile(key)
            st = status(reconciler)
            if "operation" not in st and condition(reconciler.cluster(NAME), "Ready").get(
                    "status") == "True" and len(live_nodes({"status": st})) == 3:
                break
            assert time.monotonic() < deadline, f"no progress: {st.get('conditions')}"
            time.sleep(min(result.requeue_after_s or 0.2, 0.5))
    finally:
        caches.stop()
    report("restart mid-decommission -> resumed, scaled in, Ready", time.monotonic() - started)
    assert metrics.value("kaiwu_lifecycle_actions_total", {"action": "decommission"}) == 0, \
        "the successor did not decommission again"
    assert metrics.value("kaiwu_lifecycle_actions_total", {"action": "scale-in-step"}) == 1
    remaining = {pod: four[pod] for pod in four if pod != operation["pod"]}
    assert live_nodes(reconciler.cluster(NAME) or {}) == remaining
    assert statefulset_replicas(kube, namespace) == 3


def test_the_node_being_removed_dies_mid_drain_and_the_scale_in_still_finishes(
        sim_world: SimWorld, faults: Faults, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    """The Kubernetes node under dev-3 powers off while its KaiwuDB node drains. KaiwuDB moves
    the dead node's replicas off it from their other copies; the StatefulSet then lets dev-3
    go, but no kubelet will ever confirm that pod gone. The scale-in force-deletes it and
    finishes; failover leaves the scale-in's pod alone (a fresh store there would join, then be
    removed undrained)."""
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, small_cluster(
        namespace, replicas=4,
        failover={"nodeLostTimeout": "5s", "replaceLostVolumes": True}))
    report("apply -> Ready (4 nodes)", took)
    four = live_nodes(obj)
    target = f"{NAME}-3"
    lost_node = (Kube(kube, "test").get(kk.POD, namespace, target) or {})["spec"]["nodeName"]

    scale(kube, namespace, 3)
    wait_for("node 4's decommission to start", lambda: (
        op := status(reconciler).get("operation")) and op.get("phase") == "Decommissioning",
        60, 0.02)
    started = time.monotonic()
    faults.lose_node(lost_node)
    wait_for("the cluster to be Ready with 3 nodes and no operation",
             lambda: scaled_in_to(reconciler, 3), 90, 0.2)
    report("node of the draining pod lost -> scaled in, Ready", time.monotonic() - started)

    assert live_nodes(reconciler.cluster(NAME) or {}) == {
        pod: four[pod] for pod in four if pod != target}, "the three others, with their ids"
    assert Kube(kube, "test").get(kk.POD, namespace, target) is None
    assert lifecycle_count(reconciler, "force-delete-removed-pod") == 1
    assert lifecycle_count(reconciler, "force-delete-pod") == 0, "failover kept out of it"
    assert lifecycle_count(reconciler, "replace-volume") == 0
    deleted = {(w["objectRef"]["resource"], w["objectRef"]["name"])
               for w in reconciler.writes() if w["verb"] == "delete"}
    assert deleted == {("pods", target), ("persistentvolumeclaims", f"data-{target}")}, deleted


def scale_by_hand(kube: k8s.ApiClient, namespace: str, replicas: int) -> None:
    k8s.AppsV1Api(kube).patch_namespaced_stateful_set_scale(
        NAME, namespace, {"spec": {"replicas": replicas}}, field_manager="kubectl-scale")


def fourth_pod_ready(kube: k8s.ApiClient, namespace: str) -> bool:
    found = Kube(kube, "test").get(kk.POD, namespace, f"{NAME}-3")
    return found is not None and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (found.get("status") or {}).get("conditions") or ())


def test_a_node_added_by_hand_is_drained_before_its_pod_goes(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    three = live_nodes(obj)
    api = Kube(kube, "kubectl-patch")

    # While the reconciler is paused, someone scales the StatefulSet by hand; the new pod
    # joins KaiwuDB as a fourth node, and ranges still up-replicating take replicas on it.
    pause(reconciler, kube, namespace)
    scale_by_hand(kube, namespace, 4)
    wait_for("the extra pod to join and be Ready",
             lambda: fourth_pod_ready(kube, namespace), 30, 0.1)

    # Unpaused, the reconciler takes the StatefulSet back to spec.replicas the only safe way:
    # a scale-in, the new node decommissioned and drained before its pod goes. Killing it at
    # once could take the quorum of a range with two replicas, one on it.
    started = time.monotonic()
    api.patch(kk.KAIWU_CLUSTER, namespace, NAME, {"spec": {"paused": False}})
    cluster = (namespace, NAME)
    worst = 0

    def clean() -> bool:
        nonlocal worst
        worst = max(worst, sim_world.kwdb.replication(cluster, sim_world.clock.now()).unavailable)
        return scaled_in_to(reconciler, 3) and live_nodes({"status": status(reconciler)}) == three
    wait_for("Ready with the original three nodes only", clean, 90, 0.2)
    report("unpaused: the extra node drained and its pod removed, Ready",
           time.monotonic() - started)
    assert worst == 0, f"{worst} ranges lost their quorum on the way"
    assert statefulset_replicas(kube, namespace) == 3
    assert lifecycle_count(reconciler, "decommission") == 1
    assert lifecycle_count(reconciler, "decommission-stray-node") == 0
    wait_for("the removed store's claim to go", lambda: Kube(kube, "test").get(
        kk.PVC, namespace, f"data-{NAME}-3") is None, 20, 0.1)


def test_a_node_whose_pod_went_without_a_decommission_is_decommissioned_as_a_stray(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    three = live_nodes(obj)
    api = Kube(kube, "kubectl-patch")
    cluster = (namespace, NAME)

    # While the reconciler is paused, someone scales the StatefulSet up by hand and, once
    # KaiwuDB has three copies of every range again, back down: the fourth node's pod goes
    # without a decommission and its node id stays, not live, holding replicas.
    pause(reconciler, kube, namespace)
    scale_by_hand(kube, namespace, 4)
    wait_for("the extra pod to join and be Ready",
             lambda: fourth_pod_ready(kube, namespace), 30, 0.1)
    wait_for("three copies of every range", lambda: (
        r := sim_world.kwdb.replication(cluster, sim_world.clock.now())).underreplicated == 0
        and any(n.node_id == 4 and n.replicas for n in sim_world.kwdb.nodes(
            cluster, sim_world.clock.now())) and r, 60, 0.2)
    scale_by_hand(kube, namespace, 3)
    wait_for("the extra pod to go", lambda: Kube(kube, "test").get(
        kk.POD, namespace, f"{NAME}-3") is None, 30, 0.1)

    # Unpaused: the node of a pod beyond the StatefulSet that is no longer live is a stray.
    # It is decommissioned, so its ranges re-replicate, and its claim goes once range
    # descriptors list no replica on it.
    started = time.monotonic()
    api.patch(kk.KAIWU_CLUSTER, namespace, NAME, {"spec": {"paused": False}})

    wait_for("the stray node to be decommissioned", lambda: lifecycle_count(
        reconciler, "decommission-stray-node") == 1, 45, 0.2)
    report("unpaused: stray node decommissioned", time.monotonic() - started)

    def clean() -> bool:
        st = status(reconciler)
        return (condition(reconciler.cluster(NAME), "Ready").get("status") == "True"
                and live_nodes({"status": st}) == three and len(st.get("nodes") or ()) == 3
                and Kube(kube, "test").get(kk.PVC, namespace, f"data-{NAME}-3") is None)
    wait_for("its claim gone, Ready with the original three nodes only", clean, 60, 0.2)
    report("its replicas moved, its claim deleted, Ready", time.monotonic() - started)
    assert lifecycle_count(reconciler, "decommission-stray-node") == 1
    assert lifecycle_count(reconciler, "decommission") == 0, "no pod was removed by us"
