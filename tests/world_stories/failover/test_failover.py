"""Story: a Kubernetes node dies under a running KaiwuCluster; the reconciler replaces its pod.

The cluster runs on node-local volumes (the test world's storage pins each volume to its node),
with `spec.failover.nodeLostTimeout: 5s` and `replaceLostVolumes: true`. One Kubernetes node
powers off. The real node lifecycle controller marks it Unknown; its pod would stay there for
good (the StatefulSet never replaces a pod no kubelet confirms gone). Once the node has been lost
for the timeout, the reconciler force-deletes the pod and gives up its claim in the same step
(its volume is on the dead node), so a fresh store starts on the spare node; the new
KaiwuDB node joins and the lost node id is decommissioned: KaiwuDB itself reports it
decommissioned and not live, and replication heals. The cluster is Ready again, and at no
point was any other pod or claim touched. Timings are printed (pytest -s).

(A crash-looping pod's bounded restarts are lifecycle/test_stories.py's bad-flag story: a real
kwbase refusal rather than an injected crash.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import (
    HEALTH_AFTER_LOSS_S,
    NAME,
    bring_up,
    fully_replicated,
    kaiwudb_admin,
    lifecycle_count,
    live_nodes,
    node_lost_since,
    pod_ready,
    report,
    small_cluster,
    status,
)
from tests.world.faults import Faults
from tests.world.simworld import SimWorld

TIMEOUT_S = 5.0
# The test control plane's node-monitor-grace-period (8 s) plus its monitor period and slack.
NODE_GRACE_S = 8.0


def pod(kube: k8s.ApiClient, namespace: str, name: str) -> Obj | None:
    return Kube(kube, "test").get(kk.POD, namespace, name)


def ready_again(reconciler: Reconciler) -> Obj | None:
    """The cluster, once Ready with no failure left in its status."""
    found = reconciler.cluster(NAME)
    st = (found or {}).get("status") or {}
    return found if condition(found, "Ready").get("status") == "True" and \
        "failures" not in st else None


def ready_with(reconciler: Reconciler, pod_name: str) -> Obj | None:
    """The cluster, once Ready with no failure left and `pod_name`'s KaiwuDB node live in its
    status: a node back from a loss is live a status write after the cluster is Ready again
    (sooner or later, as the machine's load has it)."""
    found = ready_again(reconciler)
    return found if found is not None and pod_name in live_nodes(found) else None


def test_a_pod_on_a_lost_node_is_replaced_on_another_node(
        sim_world: SimWorld, faults: Faults, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    spec = small_cluster(namespace, failover={"nodeLostTimeout": f"{TIMEOUT_S:g}s",
                                              "replaceLostVolumes": True})
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, spec)
    report("apply -> Ready (3 nodes on node-local volumes)", took)
    before = live_nodes(obj)
    victim = f"{NAME}-1"
    dead_id = before[victim]
    others = [f"{NAME}-0", f"{NAME}-2"]
    old = pod(kube, namespace, victim)
    assert old is not None
    lost_node = old["spec"]["nodeName"]
    old_claim = Kube(kube, "test").get(kk.PVC, namespace, f"data-{victim}")
    assert old_claim is not None
    assert (old_claim["metadata"].get("annotations") or {}).get(
        "volume.kubernetes.io/selected-node") == lost_node, "the volume is pinned to the node"
    uids = {name: (pod(kube, namespace, name) or {})["metadata"]["uid"] for name in others}
    claims: dict[str, Any] = {name: Kube(kube, "test").get(kk.PVC, namespace, f"data-{name}")
                              for name in others}

    fully_replicated(sim_world, namespace)
    lost_at = time.monotonic()
    faults.lose_node(lost_node)
    unknown = wait_for("the node to leave Ready", lambda: node_lost_since(kube, lost_node),
                       NODE_GRACE_S + 12, 0.1)
    report("node powered off -> Node not Ready", time.monotonic() - lost_at)

    worst_ready_others = 2

    def replaced() -> Obj | None:
        nonlocal worst_ready_others
        worst_ready_others = min(worst_ready_others, sum(
            pod_ready(pod(kube, namespace, name)) for name in others))
        found = pod(kube, namespace, victim)
        if pod_ready(found) and found is not None and found["spec"]["nodeName"] != lost_node:
            return found
        return None
    new = wait_for("the pod to be Ready on another node", replaced,
                   TIMEOUT_S + 30 + HEALTH_AFTER_LOSS_S, 0.2)
    replaced_after = time.time() - unknown
    report("Node not Ready -> pod Ready on another node", replaced_after)
    # The pod and its claim go in one step once the timeout runs out and KaiwuDB's range
    # metrics were written after the lost node stopped counting as live (before that they
    # count its replicas up to date: giving its store up could drop a range's last copy).
    report("nodeLostTimeout ran out -> pod Ready on another node", replaced_after - TIMEOUT_S)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert replaced_after >= TIMEOUT_S, "not before nodeLostTimeout"
    assert replaced_after < TIMEOUT_S + 20 + HEALTH_AFTER_LOSS_S, \
        "the timeout, fresh range metrics, and a few seconds"

    obj = wait_for("the cluster to be Ready again", lambda: ready_again(reconciler), 30, 0.2)
    report("node powered off -> cluster Ready again", time.monotonic() - lost_at)

    after = live_nodes(obj)
    assert sorted(after) == sorted(before)
    assert {name: after[name] for name in others} == {name: before[name] for name in others}
    assert after[victim] not in before.values(), "a fresh store is a new KaiwuDB node"
    # One disruption only: the other pods and claims were never touched, nor unready.
    assert worst_ready_others == 2
    for name in others:
        assert (pod(kube, namespace, name) or {})["metadata"]["uid"] == uids[name]
        current = Kube(kube, "test").get(kk.PVC, namespace, f"data-{name}")
        assert current is not None and current["metadata"]["uid"] == claims[name][
            "metadata"]["uid"]
    deleted = {(w["objectRef"]["resource"], w["objectRef"]["name"])
               for w in reconciler.writes() if w["verb"] == "delete"}
    assert deleted <= {("pods", victim), ("persistentvolumeclaims", f"data-{victim}")}, deleted
    assert lifecycle_count(reconciler, "force-delete-pod") == 1
    assert lifecycle_count(reconciler, "replace-volume") == 1
    assert lifecycle_count(reconciler, "decommission-dead-node") == 1
    actions = [a["action"] for a in status(reconciler).get("lastActions") or ()]
    assert {"PodForceDeleted", "VolumeReplaced", "DeadNodeDecommissioned"} <= set(actions)
    # Each action is announced on the cluster, as `kubectl describe kwc dev` shows.
    events = k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
    reasons = [e.reason for e in events if e.involved_object.kind == "KaiwuCluster"]
    for reason in ("PodForceDeleted", "VolumeReplaced", "DeadNodeDecommissioned"):
        assert reasons.count(reason) == 1, (reason, reasons)
    assert actions.index("DeadNodeDecommissioned") < actions.index("VolumeReplaced") < \
        actions.index("PodForceDeleted"), "newest first: force-delete, replace, decommission"

    # The new store's volume is on a live node, and the lost id no longer counts as a node.
    new_claim = Kube(kube, "test").get(kk.PVC, namespace, f"data-{victim}")
    assert new_claim is not None and new_claim["metadata"]["uid"] != old_claim["metadata"]["uid"]
    assert (new_claim["metadata"].get("annotations") or {}).get(
        "volume.kubernetes.io/selected-node") != lost_node
    assert dead_id not in [e["nodeId"] for e in obj["status"]["nodes"]]
    # KaiwuDB's own view: the dead id is decommissioned, the new one live, and replication
    # heals (the lost copies re-made on the live stores; checked after the fact: the
    # reconciler decommissions once the new store is live, it does not wait for replication).
    admin = kaiwudb_admin(kube, namespace, spec)
    rows = {n.id: n for n in admin.node_status(f"{NAME}-0", decommission=True)}
    assert rows[dead_id].is_decommissioning and not rows[dead_id].is_live, rows[dead_id]
    assert rows[after[victim]].healthy and not rows[after[victim]].is_decommissioning
    health = wait_for("replication to be healthy", lambda: (
        h := admin.replication_health(f"{NAME}-0")).healthy and h, 60, 0.2)
    report("node powered off -> replication healthy", time.monotonic() - lost_at)
    assert health.unavailable == 0 and health.underreplicated == 0


def test_without_replace_lost_volumes_the_pod_waits_for_its_node(
        sim_world: SimWorld, faults: Faults, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, small_cluster(
        namespace, failover={"nodeLostTimeout": f"{TIMEOUT_S:g}s"}))
    report("apply -> Ready (3 nodes, volumes are never given up)", took)
    before = live_nodes(obj)
    victim = f"{NAME}-0"
    old = pod(kube, namespace, victim)
    assert old is not None
    lost_node = old["spec"]["nodeName"]
    claim = Kube(kube, "test").get(kk.PVC, namespace, f"data-{victim}")
    assert claim is not None

    lost_at = time.monotonic()
    faults.lose_node(lost_node)
    waiting = wait_for("the reason the pod cannot move", lambda: (c := condition(
        reconciler.cluster(NAME), "Ready")).get("reason") == "VolumeOnLostNode" and c,
        NODE_GRACE_S + TIMEOUT_S + 20, 0.2)
    report("node powered off -> pod force-deleted, waiting for its volume's node",
           time.monotonic() - lost_at)
    assert "spec.failover.replaceLostVolumes" in waiting["message"]
    assert lifecycle_count(reconciler, "force-delete-pod") == 1
    assert lifecycle_count(reconciler, "replace-volume") == 0
    current = Kube(kube, "test").get(kk.PVC, namespace, f"data-{victim}")
    assert current is not None and current["metadata"]["uid"] == claim["metadata"]["uid"]

    restored_at = time.monotonic()
    faults.restore_node(lost_node)

    obj = wait_for(f"the cluster to be Ready again, {victim} live",
                   lambda: ready_with(reconciler, victim), 40, 0.2)
    report("node back -> pod back on it with its data, Ready", time.monotonic() - restored_at)
    assert live_nodes(obj) == before, "the same store: the same node id"
    assert (pod(kube, namespace, victim) or {})["spec"]["nodeName"] == lost_node


def test_a_store_lost_while_ranges_still_up_replicate_is_kept_until_its_node_is_back(
        sim_world: SimWorld, faults: Faults, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    """A new cluster loses its first node before KaiwuDB has copied its ranges: most still have
    their one copy there. KWDB's range metrics count a range by its first live replica, so
    those read as available; the range descriptors do not. Volume replacement is allowed, yet
    the store is kept (a fresh one would lose those ranges for good) until the node is back."""
    cluster = (namespace, NAME)
    # Big ranges: up-replication crawls (one replica copied every 2 s).
    sim_world.kwdb.tune(cluster, sim_world.clock.now(), snapshot_rate_per_s=0.5)
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, small_cluster(
        namespace, failover={"nodeLostTimeout": f"{TIMEOUT_S:g}s", "replaceLostVolumes": True}))
    report("apply -> Ready (3 nodes, ranges still being copied)", took)
    before = live_nodes(obj)
    victim = f"{NAME}-0"
    old = pod(kube, namespace, victim)
    assert old is not None
    lost_node = old["spec"]["nodeName"]
    claim = Kube(kube, "test").get(kk.PVC, namespace, f"data-{victim}")
    assert claim is not None
    # Ranges get their copies in order: once node 3 holds one, the liveness range (the first)
    # has its three and the cluster stays available without node 1.
    wait_for("the liveness range's three copies", lambda: any(
        n.node_id == 3 and n.replicas for n in sim_world.kwdb.nodes(
            cluster, sim_world.clock.now())), 30, 0.1)
    assert sim_world.kwdb.replication(cluster, sim_world.clock.now()).underreplicated > 20

    lost_at = time.monotonic()
    faults.lose_node(lost_node)
    # Long enough for the range metrics to be fresh after the loss: they still say nothing.
    kept = wait_for("the failover to say why the store is kept", lambda: (c := condition(
        reconciler.cluster(NAME), "Ready")).get("reason") == "FailoverWaiting"
        and "have no quorum of their replicas on live KaiwuDB nodes" in c.get("message", "")
        and c, NODE_GRACE_S + TIMEOUT_S + 20 + HEALTH_AFTER_LOSS_S, 0.2)
    report("node powered off -> store kept, ranges without a quorum named",
           time.monotonic() - lost_at)
    print(f"  {kept['message']}")
    time.sleep(max(0.0, HEALTH_AFTER_LOSS_S + 5 - (time.monotonic() - lost_at)))
    assert lifecycle_count(reconciler, "replace-volume") == 0
    current = Kube(kube, "test").get(kk.PVC, namespace, f"data-{victim}")
    assert current is not None and current["metadata"]["uid"] == claim["metadata"]["uid"]

    restored_at = time.monotonic()
    faults.restore_node(lost_node)

    obj = wait_for(f"the cluster to be Ready again, {victim} live",
                   lambda: ready_with(reconciler, victim), 60, 0.2)
    report("node back -> its store back, Ready", time.monotonic() - restored_at)
    assert live_nodes(obj) == before, "the same store: the same node id"
    assert sim_world.kwdb.replication(cluster, sim_world.clock.now()).unavailable == 0


def test_a_single_replica_cluster_replaces_a_lost_store_without_a_decommission_and_goes_on(
        sim_world: SimWorld, faults: Faults, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    """In single-replica mode each range has one copy: a store lost with its node loses data,
    and KaiwuDB refuses `node decommission` ("node cannot be decommissioned in mpp mode"). With
    replaceLostVolumes the pod still gets a fresh store; the reconciler never asks KaiwuDB for
    the decommission it would refuse, says Stalled and what to do, and a later lost node of the
    same cluster is still replaced."""
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, small_cluster(
        namespace, startMode="single-replica",
        failover={"nodeLostTimeout": f"{TIMEOUT_S:g}s", "replaceLostVolumes": True}))
    report("apply -> Ready (3 single-replica nodes)", took)
    before = live_nodes(obj)

    def lose_and_replace(victim: str) -> str:
        old = pod(kube, namespace, victim)
        assert old is not None
        lost_node = str(old["spec"]["nodeName"])
        started = time.monotonic()
        faults.lose_node(lost_node)

        def replaced() -> Obj | None:
            found = pod(kube, namespace, victim)
            return found if pod_ready(found) and found is not None and \
                found["spec"]["nodeName"] != lost_node else None
        wait_for(f"{victim} to be Ready on another node", replaced,
                 NODE_GRACE_S + 40 + HEALTH_AFTER_LOSS_S, 0.2)
        report(f"node of {victim} powered off -> pod Ready elsewhere, fresh store",
               time.monotonic() - started)
        return lost_node

    first_lost = lose_and_replace(f"{NAME}-1")
    stalled = wait_for("Stalled: the lost store cannot be decommissioned", lambda: (
        c := condition(reconciler.cluster(NAME), "Stalled")).get("reason") == "StoreReplaced"
        and c, 30, 0.2)
    assert f"KaiwuDB node(s) {before[f'{NAME}-1']} of pod {NAME}-1" in stalled["message"]
    assert "cannot decommission" in stalled["message"]
    # Never asked: KWDB would refuse, and a refused command must not be retried for ever.
    assert lifecycle_count(reconciler, "decommission-dead-node") == 0
    assert reconciler.metrics.value("kaiwu_errors_total", {"stage": "failover"}) == 0
    views = sim_world.kwdb.nodes((namespace, NAME), sim_world.clock.now())
    assert not any(v.decommissioning for v in views), "no decommission reached KaiwuDB"

    # Later, another node is lost (the first came back as the spare): replaced all the same.
    faults.restore_node(first_lost)
    lose_and_replace(f"{NAME}-2")
    assert lifecycle_count(reconciler, "replace-volume") == 2
    assert lifecycle_count(reconciler, "decommission-dead-node") == 0
