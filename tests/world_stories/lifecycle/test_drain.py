"""Stories: a scale-in and stray nodes decide "drained" from what KWDB really counts.

KWDB's `node status --decommission` shows gossiped_replicas: the range count a node last
gossiped, which expires to 0 two minutes after the node stops gossiping. A node that dies in the
middle of a long drain would look empty while range descriptors still list replicas on it. The
reconciler asks the meta scan instead (`node decommission <id> --wait=none`, its `replicas`
column): these stories set that trap (a short gossip TTL, a drain too slow to finish, the node
killed) and check no claim is deleted while KWDB counts a replica on its node. A single-replica
cluster cannot decommission at all: its stray node is kept, with its claim, and Stalled says
how to bring it back. A decommissioned node that comes back while its pod is wanted is
recommissioned. Timings are printed (pytest -s).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from renderer.schema import apply_defaults
from renderer.spec import Cluster
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

GOSSIP_TTL_S = 3.0  # KWDB: 120 s; short, so the trap springs within the story


def claim(kube: k8s.ApiClient, namespace: str, pod: str) -> Obj | None:
    found = Kube(kube, "test").get(kk.PVC, namespace, f"data-{pod}")
    if found is None or found["metadata"].get("deletionTimestamp"):
        return None
    return found


def replicas_on(sim_world: SimWorld, namespace: str, node_id: int) -> int:
    """What range descriptors list on node_id: the simulator's truth, not a gossip estimate."""
    nodes = sim_world.kwdb.nodes((namespace, NAME), sim_world.clock.now())
    return next(n.replicas for n in nodes if n.node_id == node_id)


def admin(kube: k8s.ApiClient, namespace: str, **spec: object) -> KwbaseAdmin:
    cluster = Cluster.from_object(apply_defaults(small_cluster(namespace, **spec)))
    return KwbaseAdmin.for_cluster(Kube(kube, "test"), cluster)


def test_a_node_that_dies_mid_drain_keeps_its_claim_until_no_replica_is_left(
        sim_world: SimWorld, faults: Faults, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace, replicas=4))
    report("apply -> Ready (4 nodes)", took)
    leaving_pod = f"{NAME}-3"
    leaving = live_nodes(obj)[leaving_pod]
    wait_for("replication to be healthy", lambda: sim_world.kwdb.replication(
        (namespace, NAME), sim_world.clock.now()).underreplicated == 0, 30, 0.1)
    # Big ranges: the drain crawls. And gossip expires in seconds instead of two minutes.
    sim_world.kwdb.tune((namespace, NAME), sim_world.clock.now(), snapshot_rate_per_s=0.02,
                        gossip_stores_interval_s=1.0, store_gossip_ttl_s=GOSSIP_TTL_S)

    scale(kube, namespace, 3)
    # Not before every node's range metrics were written 20 s after the newest start (KWDB
    # rewrites them every 10 s): node 4 started moments ago.
    wait_for("node 4's decommission to start", lambda: (
        status(reconciler).get("operation") or {}).get("phase") == "Decommissioning", 60, 0.05)
    held = replicas_on(sim_world, namespace, leaving)
    assert held > 20

    # The node being removed dies mid-drain and stays dead (its container crash-loops).
    started = time.monotonic()
    faults.crash_loop(namespace, leaving_pod, exit_code=1, message="disk on fire")
    kwbase = admin(kube, namespace)

    def gossip_says_empty() -> bool:
        (row,) = kwbase.node_status(f"{NAME}-0", leaving, decommission=True)
        return row.gossiped_replicas == 0 and not row.is_live
    wait_for("the dead node to be not live, its gossiped count expired to 0", gossip_says_empty,
             30, 0.2)
    report("node killed -> not live, gossiped_replicas 0", time.monotonic() - started)
    # The trap is set: gossip says empty, descriptors still list replicas there. For several
    # more passes nothing is removed.
    deadline = time.monotonic() + 3 * GOSSIP_TTL_S
    while time.monotonic() < deadline:
        assert replicas_on(sim_world, namespace, leaving) > 0
        assert claim(kube, namespace, leaving_pod) is not None, "claim deleted with replicas left"
        assert statefulset_replicas(kube, namespace) == 4
        operation = status(reconciler).get("operation") or {}
        assert operation.get("phase") == "Decommissioning", operation
        time.sleep(0.2)
    conditions = status(reconciler).get("conditions") or []
    assert any("replicas left on it" in c.get("message", "") for c in conditions), conditions

    # Snapshots speed up: KWDB replaces the dead node's replicas from the live copies.
    started = time.monotonic()
    sim_world.kwdb.tune((namespace, NAME), sim_world.clock.now(), snapshot_rate_per_s=10.0)
    while claim(kube, namespace, leaving_pod) is not None:
        assert time.monotonic() - started < 60, status(reconciler).get("conditions")
        time.sleep(0.05)
    assert replicas_on(sim_world, namespace, leaving) == 0, "claim deleted before drained"

    # The removed pod's crash loop ends with the pod: nothing is remembered about it.
    def scaled_in() -> bool:
        st = status(reconciler)
        return "operation" not in st and len(live_nodes({"status": st})) == 3 and any(
            a["action"] == "ScaledIn" for a in st.get("lastActions") or ())
    wait_for("the scale-in to end with 3 live nodes", scaled_in, 60, 0.1)
    report("drain finishes -> claim deleted, scaled in", time.monotonic() - started)
    assert "failures" not in status(reconciler)
    wait_ready(reconciler, 30)
    report("drain finishes -> Ready with 3 nodes", time.monotonic() - started)
    assert statefulset_replicas(kube, namespace) == 3
    assert lifecycle_count(reconciler, "decommission") == 1


def test_a_decommissioned_node_that_comes_back_in_a_wanted_pod_is_recommissioned(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    three = live_nodes(obj)
    api = Kube(kube, "kubectl-patch")
    pause(reconciler, kube, namespace)

    # Someone decommissions node 2 by hand; then its pod restarts. KWDB V3.2.1 lets the
    # decommissioned store rejoin: live, and still decommissioning.
    kwbase = admin(kube, namespace)
    kwbase.decommission(f"{NAME}-0", [three[f"{NAME}-1"]])
    old = Kube(kube, "test").get(kk.POD, namespace, f"{NAME}-1")
    assert old is not None
    old_uid = old["metadata"]["uid"]
    k8s.CoreV1Api(kube).delete_namespaced_pod(f"{NAME}-1", namespace)
    wait_for("the pod to come back, its node live and decommissioning", lambda: (
        (pod := Kube(kube, "test").get(kk.POD, namespace, f"{NAME}-1")) is not None
        and pod["metadata"]["uid"] != old_uid and any(
            n.id == three[f"{NAME}-1"] and n.is_live and n.is_decommissioning
            for n in kwbase.node_status(f"{NAME}-0", decommission=True))), 30, 0.2)

    started = time.monotonic()
    api.patch(kk.KAIWU_CLUSTER, namespace, NAME, {"spec": {"paused": False}})
    # Asked of KaiwuDB and of the status's last actions too: the cluster may read Ready with
    # the same three live nodes (a status written before the unpause) before the reconciler
    # has recommissioned the node and said so.
    obj = wait_for("Ready with the same three nodes, none decommissioning", lambda: (
        o := wait_ready(reconciler, 30)) and live_nodes(o) == three
        and "Recommissioned" in [a["action"] for a in o["status"].get("lastActions") or ()]
        and not any(n.is_decommissioning for n in kwbase.node_status(
            f"{NAME}-0", decommission=True)) and o, 30, 0.1)
    report("unpaused: node recommissioned, Ready", time.monotonic() - started)
    assert lifecycle_count(reconciler, "recommission") == 1
    assert "Recommissioned" in [a["action"] for a in obj["status"]["lastActions"]]
    assert not any(n.is_decommissioning for n in kwbase.node_status(f"{NAME}-0",
                                                                    decommission=True))


def test_a_stray_node_of_a_single_replica_cluster_is_kept_and_stalled(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace, startMode="single-replica"))
    report("apply -> Ready (3 single-replica nodes)", took)
    three = live_nodes(obj)
    api = Kube(kube, "kubectl-patch")
    pause(reconciler, kube, namespace)
    k8s.AppsV1Api(kube).patch_namespaced_stateful_set_scale(
        NAME, namespace, {"spec": {"replicas": 4}}, field_manager="kubectl-scale")
    wait_for("the extra pod's node to be live", lambda: any(
        n.pod_name == f"{NAME}-3" and n.is_live
        for n in sim_world.kwdb.nodes((namespace, NAME), sim_world.clock.now())), 60, 0.2)
    # ... and back down, still by hand: the pod goes without a decommission (a StatefulSet
    # left scaled up would be a scale-in, refused in this mode with the pod kept).
    k8s.AppsV1Api(kube).patch_namespaced_stateful_set_scale(
        NAME, namespace, {"spec": {"replicas": 3}}, field_manager="kubectl-scale")
    wait_for("the extra pod to go", lambda: Kube(kube, "test").get(
        kk.POD, namespace, f"{NAME}-3") is None, 30, 0.1)

    # Unpaused: its node is a stray. KWDB refuses to decommission in this mode, and the store
    # may hold data with no other copy (relational ranges stay on node 1,
    # replicate_queue.go:248-250, but KWDB spreads time-series data over the nodes; the
    # simulator models relational ranges only): the reconciler keeps the claim and says so.
    started = time.monotonic()
    api.patch(kk.KAIWU_CLUSTER, namespace, NAME, {"spec": {"paused": False}})
    stalled = wait_for("Stalled, naming the stray node", lambda: (c := condition(
        reconciler.cluster(NAME), "Stalled")).get("status") == "True" and c, 45, 0.1)
    report("unpaused: Stalled", time.monotonic() - started)
    assert stalled["reason"] == "StrayNodeNotRemovable"
    assert "Set spec.replicas to 4 to bring the pods back" in stalled["message"]
    time.sleep(1.0)  # a few passes later, nothing decommissioned, the claim kept
    assert lifecycle_count(reconciler, "decommission-stray-node") == 0
    assert claim(kube, namespace, f"{NAME}-3") is not None
    assert not any(n.decommissioning for n in sim_world.kwdb.nodes(
        (namespace, NAME), sim_world.clock.now()))

    # The user follows the advice: the pod comes back on its claim, with its node id.
    started = time.monotonic()
    scale(kube, namespace, 4)
    obj = wait_for("Ready with four live nodes", lambda: (o := wait_ready(reconciler, 45))
                   and len(live_nodes(o)) == 4 and o, 45, 0.1)
    report("spec.replicas 4 -> the stray pod back, Ready", time.monotonic() - started)
    assert {pod: live_nodes(obj)[pod] for pod in three} == three
    assert condition(reconciler.cluster(NAME), "Stalled").get("status") != "True"
