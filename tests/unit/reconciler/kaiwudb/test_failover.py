"""Stories about the failover step's decisions, on small fakes (no test world, milliseconds each).

A cluster `dev` of three pods runs on Kubernetes nodes n0..n2, each pod's volume pinned to its
node. Each story sets up what the cluster shows (Nodes, pods, claims, what KaiwuDB answers),
runs one failover pass and checks the writes it made and what it told the user. The same world
must give the same step whatever came before: several stories run the pass with and without
`status.failures` and expect the same writes. (The same decisions against the real apiserver:
tests/world_stories/failover/.)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, get_args

import pytest

from reconciler.kaiwudb.crashloop import CRASH_RESTARTS, crash_restarts, crash_state
from reconciler.kaiwudb.failover import Failover
from reconciler.kaiwudb.kwbase.replication import ReplicationHealth
from reconciler.kaiwudb.lifecycle import Lifecycle
from reconciler.kaiwudb.lookout import Finding, replaced_stores
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.model import NodeEntry, Obj, Pass
from reconciler.reasons import CRASH_LOOP, NODE_LOST, FailoverStage
from renderer.schema import apply_defaults
from renderer.spec import Cluster
from tests.support.context import step_context
from tests.support.failover_world import (
    NAME,
    NOW,
    NS,
    TIMEOUT,
    FakeAdmin,
    FakeView,
    World,
    claim,
    healthy_world,
    kw_node,
    node,
    pod,
    stamp,
)
from tests.support.fake_api import FakeApi


def lose(world: World, ordinal: int, since: float, *, kwdb_live: bool = False) -> None:
    """Node n<ordinal> stops reporting at `since`; its pod is marked not Ready; KaiwuDB's node
    for it stops being live (unless kwdb_live)."""
    world.put(k.NODE, node(f"n{ordinal}", "Unknown", since))
    world.put(k.POD, pod(ordinal, f"n{ordinal}", ready=False, since=since))
    world.kwdb[ordinal] = kw_node(ordinal + 1, f"{NAME}-{ordinal}", live=kwdb_live)


def cluster_obj(*, single: bool = False, **failover: Any) -> Obj:
    spec: Obj = {"replicas": 3, "tls": {"enabled": False},
                 "failover": {"nodeLostTimeout": f"{TIMEOUT:g}s", **failover}}
    if single:
        spec["startMode"] = "single-replica"
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": NAME, "namespace": NS, "uid": "cluster-uid"}, "spec": spec}


def failover_step(world: World) -> Failover:
    return failover_over(world, world.kube, FakeView(world))


def failover_over(world: World, kube: Any, view: Any) -> Failover:
    """The failover step (and the lifecycle it asks) over `kube` and `view`, with the world's
    metrics and KaiwuDB."""
    ctx = step_context(kube, view, metrics=world.metrics,
                       admin_factory=lambda *_: FakeAdmin(world))  # type: ignore[arg-type]
    return Failover(ctx, Lifecycle(ctx))


def new_pass(obj: Obj, now: float, previous: dict[str, Any]) -> Pass:
    p = Pass(ClusterKey(NS, NAME), obj, now, {"initialized": True, **previous})
    p.cluster = Cluster.from_object(apply_defaults(copy.deepcopy(obj)))
    return p


def status_nodes(world: World) -> list[dict[str, Any]]:
    """status.nodes as the lifecycle step's last probe wrote it."""
    return [{"nodeId": n.id, "address": n.address, "state": "live" if n.is_live else
             "not-live", "pod": n.pod_name} for n in world.kwdb
            if not (n.is_decommissioning and not n.is_live)]


def run_pass(world: World, *, now: float = NOW, previous: dict[str, Any] | None = None,
             single: bool = False, **failover: Any) -> Pass:
    p = new_pass(cluster_obj(single=single, **failover), now,
                 {"nodes": status_nodes(world), **(previous or {})})
    step = failover_step(world)
    assert step.wanted(p)
    step.run(p)
    return p


def reasons(p: Pass) -> list[str]:
    return [reason for reason, _ in p.not_ready]


def said(p: Pass) -> str:
    """Everything the pass said in Ready, one reason per line."""
    return "\n".join(f"{reason}: {message}" for reason, message in p.not_ready)


def counted(world: World, metric: str, **labels: str) -> float:
    """A counter of the reconciler's metrics (0 when never counted)."""
    value = world.metrics.registry.get_sample_value(f"kaiwu_{metric}_total", labels)
    return value or 0.0


# ---- a node is lost ---------------------------------------------------------------------------

def test_nothing_happens_before_node_lost_timeout_then_pod_and_claim_go_in_one_step() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT + 1)
    early = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert reasons(early)[0] == "NodeLost"
    assert min(early.requeue) == 1.0, "looks again when the timeout runs out"
    assert (early.kaiwu.failures or {})["dev-1"]["stage"] == "NodeLost"

    done = run_pass(world, now=NOW + 1, replaceLostVolumes=True)
    assert world.writes == [("delete", "PersistentVolumeClaim", "data-dev-1"),
                            ("delete", "Pod", "dev-1")]
    assert [a.action for a in done.actions] == ["PodForceDeleted", "VolumeReplaced"]
    assert done.actions[1].message == (
        "its volume is on the lost node n1: deleted with pod dev-1, so a fresh store starts on "
        "a live node; the lost store's KaiwuDB node is decommissioned once the new one is live")


def test_without_the_policy_the_pod_is_force_deleted_and_its_claim_kept() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    run_pass(world)
    assert world.writes == [("delete", "Pod", "dev-1")]
    world.put(k.POD, pod(1, uid="successor"))  # the StatefulSet recreates it: Pending
    waiting = run_pass(world)
    assert world.writes == [("delete", "Pod", "dev-1")], "nothing more"
    assert waiting.not_ready[0] == ("VolumeOnLostNode", (
        "pod dev-1 cannot start elsewhere: its volume (data-dev-1) is on the lost node n1. "
        "Bring the node back, or set spec.failover.replaceLostVolumes to give up that copy of "
        "the data and start a fresh store"))


def test_the_claim_is_kept_while_kaiwudb_still_counts_the_pods_node_live() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1, kwdb_live=True)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert "still counts node(s) 2" in " ".join(m for _, m in p.not_ready)


def test_the_claim_is_kept_while_another_kaiwudb_node_is_not_live() -> None:
    """The other copies of the lost store's data must be reachable before it is given up."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.kwdb[0] = kw_node(1, "dev-0", live=False)  # its pod still looks Ready to Kubernetes
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert "KaiwuDB nodes not live: 1 (dev-0)" in " ".join(m for _, m in p.not_ready)


def test_a_node_missing_from_the_gateways_view_is_not_taken_for_live() -> None:
    """A gateway restarted moments ago lists only the nodes gossip has told it of: node 1,
    dead or alive, is not in its view. Its absence is no evidence that the other copies of the
    lost store's data are reachable."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.unseen = {3}
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert "KaiwuDB's view from pod dev-0 lists no pod dev-2: a node missing from one " \
        "gateway's view is neither live nor dead; asking again" in " ".join(
            m for _, m in p.not_ready)
    world.unseen = set()  # the view filled in
    run_pass(world, replaceLostVolumes=True)
    assert ("delete", "PersistentVolumeClaim", "data-dev-1") in world.writes


def test_the_lost_pods_own_node_missing_from_the_view_is_not_taken_for_dead() -> None:
    """KaiwuDB still counts dev-1's node live, but the gateway asked does not list it: the
    store is kept until a view says the node is not live."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1, kwdb_live=True)
    world.unseen = {2}
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert "lists no node 2 of this pod" in " ".join(m for _, m in p.not_ready)


def test_a_pod_on_its_way_out_or_a_copy_with_our_labels_needs_no_live_node() -> None:
    """A pod left from a scale-in, stuck Terminating, and a `kubectl debug --copy-to` copy
    carry the cluster's labels but are not its nodes: they never hold a failover back."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    leaving = pod(3, "n3")
    leaving["metadata"]["deletionTimestamp"] = stamp(NOW - 60)
    world.put(k.POD, leaving)
    copy_ = pod(0, "n3")
    copy_["metadata"]["name"] = "dev-0-debug"
    world.put(k.POD, copy_)
    run_pass(world, replaceLostVolumes=True)
    assert ("delete", "PersistentVolumeClaim", "data-dev-1") in world.writes


def test_a_node_back_in_the_api_before_the_cache_knows_keeps_its_pod_and_volume() -> None:
    """The watch cache still shows n1 lost past the timeout; the API already has it Ready
    again. Nothing is force-deleted or given up on that stale look (the soak saw a volume
    given up 0.1 s after its node came back)."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.cached[("Node", "n1")] = world.find(k.NODE, "", "n1") or {}
    world.cached[("Pod", "dev-1")] = world.find(k.POD, NS, "dev-1") or {}
    world.put(k.NODE, node("n1"))  # Ready again, in the API
    run_pass(world, replaceLostVolumes=True)
    assert world.writes == []


def test_the_claim_is_kept_while_a_range_has_lost_its_quorum() -> None:
    """A store given up a moment ago has not re-replicated yet: ranges with copies on it and on
    this lost node have one live copy left. This store may hold their last copies: kept. (The
    chaos soak found charlie losing 3 ranges for good this way, two volumes given up 9 s
    apart.)"""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.health = ReplicationHealth(unavailable=3, underreplicated=16, catching_up=0)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert "3 unavailable and 16 under-replicated ranges" in " ".join(
        m for _, m in p.not_ready)
    # Re-replicated enough:
    world.health = ReplicationHealth(unavailable=0, underreplicated=16, catching_up=0)
    run_pass(world, replaceLostVolumes=True)
    assert ("delete", "PersistentVolumeClaim", "data-dev-1") in world.writes


def test_the_claim_is_kept_while_a_range_has_its_only_copies_on_the_lost_node() -> None:
    """A cluster lost node 2 while still up-replicating: a range on nodes 1 and 2 and ranges
    on node 2 alone (after a rebalance) have no quorum left. The range metrics count a range
    with no live replica nowhere and show nothing unavailable; the range descriptors list
    them: the store is kept."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.health = ReplicationHealth(unavailable=0, underreplicated=30, catching_up=0)
    world.replica_sets = {(1, 2, 3): 5, (1, 2): 1, (2,): 4, (1,): 30}
    p = run_pass(world, replaceLostVolumes=True)
    assert ("delete", "PersistentVolumeClaim", "data-dev-1") not in world.writes
    assert "5 ranges have no quorum of their replicas on live KaiwuDB nodes" in " ".join(
        m for _, m in p.not_ready)
    # KaiwuDB moved them (the node came back a while, say): the store may go.
    world.replica_sets = {(1, 2, 3): 5, (1, 3): 5, (1,): 30}
    run_pass(world, replaceLostVolumes=True)
    assert ("delete", "PersistentVolumeClaim", "data-dev-1") in world.writes


def test_an_administrators_force_delete_leads_to_the_same_replacement() -> None:
    """The usual StatefulSet runbook: the pod on the dead node is force-deleted by hand before
    the timeout; the recreated pod is Pending for good (its volume is on the dead node)."""
    for failures in ({}, {"failures": {"dev-1": {"stage": "PodDeleted", "node": "n1"}}}):
        world = healthy_world()
        lose(world, 1, since=NOW - TIMEOUT - 1)
        world.put(k.POD, pod(1, uid="recreated"))  # admin deleted it; Pending, unscheduled
        p = run_pass(world, previous=failures, replaceLostVolumes=True)
        assert world.writes == [("delete", "PersistentVolumeClaim", "data-dev-1"),
                                ("delete", "Pod", "dev-1")], failures
        assert [a.action for a in p.actions] == ["VolumeReplaced"]


def test_a_volume_on_a_lost_node_is_replaced_even_with_no_pod_at_all() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    del world.objects[("Pod", NS, "dev-1")]
    run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "PersistentVolumeClaim", "data-dev-1")]


def test_a_pod_recreated_against_a_deleted_claim_is_deleted_once_the_claim_is_gone() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.put(k.POD, pod(1, uid="recreated"))
    going = claim(1, "n1")
    going["metadata"]["deletionTimestamp"] = stamp(NOW - 1)
    world.put(k.PVC, going)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [], "a terminating claim is waited for"
    assert reasons(p)[0] == "Replacing"
    del world.objects[("PersistentVolumeClaim", NS, "data-dev-1")]
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert said(p).startswith("Replacing: pod dev-1 is recreated with a new claim")


def test_after_a_crash_the_pod_recreated_with_a_fresh_claim_is_left_alone() -> None:
    """The reconciler died right after deleting the pending pod; the StatefulSet made a new
    claim and pod (not yet scheduled: the new volume is not provisioned). A new reconciler,
    knowing nothing, must not delete anything again."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 30)
    world.put(k.POD, pod(1, uid="third"))
    fresh = claim(1, "", uid="fresh")
    del fresh["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    del fresh["spec"]["volumeName"]
    world.put(k.PVC, fresh)
    p = run_pass(world, previous={}, replaceLostVolumes=True)
    assert world.writes == []
    assert p.kaiwu.failures is None, "Kubernetes is scheduling it: nothing failing"


def test_two_lost_nodes_at_once_touch_nothing() -> None:
    world = healthy_world()
    lose(world, 0, since=NOW - TIMEOUT - 5)
    lose(world, 2, since=NOW - TIMEOUT - 5)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert p.not_ready[0] == ("FailoverWaiting", (
        "pod dev-2: other pods are failing too (dev-0): one node at a time, and never below "
        "quorum; bring nodes back or replace pods by hand"))


def test_a_second_loss_waits_until_the_first_replacement_is_ready() -> None:
    world = healthy_world()
    world.put(k.POD, pod(1, "n3", ready=False, uid="replacement"))  # starting, not Ready yet
    lose(world, 2, since=NOW - TIMEOUT - 5)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert "pods dev-1 are not Ready yet" in " ".join(m for _, m in p.not_ready)


def test_a_node_lost_during_a_scale_in_is_failed_over_for_the_drain_needs_it() -> None:
    """dev-2 drains and dev-1's node is lost: KaiwuDB moves replicas only onto live nodes, so
    the drain may need dev-1 back. Waiting for the scale-in would wait forever."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 5)
    draining = {"operation": {
        "type": "ScaleIn", "replicas": 3, "targetReplicas": 2, "pod": "dev-2",
        "startedAt": stamp(NOW - 5), "phase": "Decommissioning", "nodeId": 3}}
    p = run_pass(world, previous=draining)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert [a.action for a in p.actions] == ["PodForceDeleted"]


def test_the_pod_a_scale_in_removes_is_left_to_the_scale_in() -> None:
    """dev-2 is the scale-in's pod and its node is lost: a fresh store in its place would join
    and then be removed undrained when the StatefulSet shrinks. Failover keeps its hands off."""
    world = healthy_world()
    lose(world, 2, since=NOW - TIMEOUT - 5)
    p = run_pass(world, previous={"operation": {
        "type": "ScaleIn", "replicas": 3, "targetReplicas": 2, "pod": "dev-2",
        "startedAt": stamp(NOW - 5), "phase": "Decommissioning", "nodeId": 3}},
        replaceLostVolumes=True)
    assert world.writes == []
    assert ("FailoverWaiting", "pod dev-2: it is the pod a scale-in removes") in p.not_ready


def test_no_failover_step_while_a_backup_runs_and_it_goes_on_once_the_backup_ends() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 5)
    running = world.put(k.KAIWU_BACKUP, {
        "apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackup",
        "metadata": {"name": "nightly", "namespace": NS},
        "spec": {"cluster": {"name": NAME}}, "status": {"phase": "running"}})
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert "KaiwuBackup nightly is running" in " ".join(m for _, m in p.not_ready)
    running["status"]["phase"] = "failed"  # its node was the lost one, say
    world.put(k.KAIWU_BACKUP, running)
    run_pass(world, replaceLostVolumes=True)
    assert ("delete", "Pod", "dev-1") in world.writes


def test_a_node_object_that_is_gone_is_lost_from_the_first_pass_that_saw_it_missing() -> None:
    world = healthy_world()
    del world.objects[("Node", "", "n1")]
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    step = failover_step(world)
    obj = cluster_obj(replaceLostVolumes=True)
    for now in (NOW, NOW + TIMEOUT - 1, NOW + TIMEOUT + 1):
        step.run(new_pass(obj, now, {"nodes": status_nodes(world)}))
        if now < NOW + TIMEOUT:
            assert world.writes == [], now
    assert ("delete", "Pod", "dev-1") in world.writes


# ---- the lost store's node id ----------------------------------------------------------------

def test_the_lost_stores_node_id_is_decommissioned_once_its_successor_is_live() -> None:
    world = healthy_world()
    world.put(k.POD, pod(1, "n3", uid="replacement"))
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    world.kwdb.append(kw_node(4, "dev-1"))
    p = run_pass(world, replaceLostVolumes=True)
    assert world.decommissioned == [2]
    assert [a.action for a in p.actions] == ["DeadNodeDecommissioned"]
    # Decommissioned and not live: KaiwuDB lists it no more as a node; nothing more to do.
    world.kwdb[1] = kw_node(2, "dev-1", live=False, decommissioning=True)
    run_pass(world, replaceLostVolumes=True)
    assert world.decommissioned == [2]


def test_a_node_id_is_never_decommissioned_on_a_stale_look() -> None:
    """status.nodes still shows node 2 not live, but KaiwuDB now says it is live again."""
    world = healthy_world()
    world.kwdb.append(kw_node(4, "dev-1"))
    stale = [{"nodeId": 2, "address": "x", "state": "not-live", "pod": "dev-1"},
             {"nodeId": 4, "address": "x", "state": "live", "pod": "dev-1"}]
    failover_step(world).run(new_pass(cluster_obj(), NOW, {"nodes": stale}))
    assert world.decommissioned == []


def test_single_replica_never_asks_for_a_decommission_and_later_failovers_go_on() -> None:
    world = healthy_world()
    world.replica_sets = {(1,): 40}  # single-replica: every range on the bootstrap node
    world.put(k.POD, pod(1, "n3", uid="replacement"))
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    world.kwdb.append(kw_node(4, "dev-1"))
    p = run_pass(world, single=True, replaceLostVolumes=True)
    assert world.decommissioned == []
    assert p.stalled and p.stalled[0][0] == "StoreReplaced"
    assert "cannot decommission" in p.stalled[0][1]
    # Another node is lost later: its pod is replaced although node 2 stays dead for good.
    lose(world, 2, since=NOW - TIMEOUT - 1)
    run_pass(world, single=True, replaceLostVolumes=True)
    assert ("delete", "PersistentVolumeClaim", "data-dev-2") in world.writes


# ---- crash loops -------------------------------------------------------------------------------

def test_a_crash_loop_is_restarted_up_to_the_limit_counted_on_the_claim() -> None:
    world = healthy_world()
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 700))
    run_pass(world, maxCrashRestarts=2, podNotReadyTimeout="600s")
    assert world.writes == [("patch", "PersistentVolumeClaim", "data-dev-2"),
                            ("delete", "Pod", "dev-2")], "counted before the delete"
    assert world.objects[("PersistentVolumeClaim", NS, "data-dev-2")]["metadata"][
        "annotations"][CRASH_RESTARTS] == "rev1:1"
    # The new pod crashes too, but only for 599 s: not yet.
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 599, uid="2nd"))
    run_pass(world, maxCrashRestarts=2, podNotReadyTimeout="600s")
    assert len(world.writes) == 2
    run_pass(world, now=NOW + 2, maxCrashRestarts=2, podNotReadyTimeout="600s")
    assert len(world.writes) == 4
    # At the limit: Stalled, and status.failures deleted by hand changes nothing.
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 700, uid="3rd"))
    for previous in ({"failures": {"dev-2": {"stage": "CrashLoop", "restarts": 0}}}, {}):
        p = run_pass(world, previous=previous, maxCrashRestarts=2, podNotReadyTimeout="600s")
        assert len(world.writes) == 4
        assert p.stalled[0][0] == "CrashLoop" and "restarted it 2 times" in p.stalled[0][1]
    # A new revision of the template allows new restarts.
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 700, uid="4th",
                         revision="rev2"))
    run_pass(world, maxCrashRestarts=2, podNotReadyTimeout="600s")
    assert world.objects[("PersistentVolumeClaim", NS, "data-dev-2")]["metadata"][
        "annotations"][CRASH_RESTARTS] == "rev2:1"


def test_a_crash_loop_without_a_ready_condition_is_timed_from_the_pods_creation() -> None:
    # A pod that never got a Ready condition (the kubelet writes none until it reports): how
    # long it has crashed is how old it is.
    world = healthy_world()
    crashing = pod(2, "n2", ready=False, crashing=True, since=NOW - 599)
    crashing["status"]["conditions"] = []
    world.put(k.POD, crashing)
    run_pass(world, maxCrashRestarts=2, podNotReadyTimeout="600s")
    assert world.writes == [], "599 s old: not yet"
    run_pass(world, now=NOW + 2, maxCrashRestarts=2, podNotReadyTimeout="600s")
    assert world.writes == [("patch", "PersistentVolumeClaim", "data-dev-2"),
                            ("delete", "Pod", "dev-2")]


def test_a_pod_that_turns_ready_clears_its_restart_count() -> None:
    world = healthy_world()
    world.objects[("PersistentVolumeClaim", NS, "data-dev-0")]["metadata"]["annotations"][
        CRASH_RESTARTS] = "rev1:2"
    run_pass(world)
    assert world.writes == [("patch", "PersistentVolumeClaim", "data-dev-0")]
    assert CRASH_RESTARTS not in world.objects[("PersistentVolumeClaim", NS, "data-dev-0")][
        "metadata"]["annotations"]
    run_pass(world)
    assert len(world.writes) == 1, "at rest: no write"


def test_a_healthy_cluster_makes_no_write_and_reports_nothing() -> None:
    world = healthy_world()
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [] and p.not_ready == [] and p.kaiwu.failures is None


# ---- boundaries: each decision on both sides of its edge -------------------------------------

def test_the_node_lost_timeout_is_met_on_the_second_it_runs_out_not_a_second_before() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT + 1)
    p = run_pass(world)
    assert world.writes == [] and p.requeue == [1.0]
    assert said(p).startswith("NodeLost: pod dev-1: Kubernetes node n1 is Unknown")
    lose(world, 1, since=NOW - TIMEOUT)
    p = run_pass(world)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert world.find(k.POD, NS, "dev-1") is None, \
        "force-deleted (grace 0): no kubelet will confirm a graceful delete"
    assert counted(world, "lifecycle_actions", action="force-delete-pod") == 1
    assert counted(world, "writes", verb="delete", kind="Pod") == 1
    assert p.events[0] == ("Warning", "PodForceDeleted", (
        f"Pod/dev-1: its node n1 has been Unknown since {stamp(NOW - TIMEOUT)} (longer than "
        "nodeLostTimeout 60s): force-deleted so the StatefulSet recreates it"))
    assert (p.kaiwu.failures or {})["dev-1"] == {
        "stage": NODE_LOST, "node": "n1", "nodeReady": "Unknown", "since": stamp(NOW - TIMEOUT)}


def test_a_node_whose_ready_condition_is_false_is_lost_too_and_a_ready_one_is_not() -> None:
    world = healthy_world()
    world.put(k.NODE, node("n1", "False", NOW - TIMEOUT))
    run_pass(world)
    assert world.writes == [("delete", "Pod", "dev-1")]
    world = healthy_world()
    world.put(k.NODE, node("n1", "True", NOW - TIMEOUT))
    world.put(k.POD, pod(1, "n1", ready=False, since=NOW - TIMEOUT))
    p = run_pass(world)
    assert world.writes == [] and p.kaiwu.failures is None


def test_a_volume_is_replaced_with_the_claim_and_pod_metrics_and_a_warning() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)
    p = run_pass(world, replaceLostVolumes=True)
    assert counted(world, "writes", verb="delete", kind="PersistentVolumeClaim") == 1
    assert counted(world, "lifecycle_actions", action="replace-volume") == 1
    assert [(e[0], e[1]) for e in p.events] == [("Warning", "PodForceDeleted"),
                                                 ("Warning", "VolumeReplaced")]
    assert "lost node n1" in p.events[1][2] and "pod dev-1" in p.events[1][2]
    assert p.requeue == [1.0]


def test_a_pending_pod_and_its_claim_on_a_lost_node_both_go_and_are_counted() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)
    world.put(k.POD, pod(1, uid="recreated"))  # Pending against the old claim
    p = run_pass(world, replaceLostVolumes=True)
    assert world.find(k.POD, NS, "dev-1") is None
    assert ("delete", "PersistentVolumeClaim", "data-dev-1") in world.writes
    assert [(a.action, a.target) for a in p.actions] == [
        ("VolumeReplaced", "PersistentVolumeClaim/data-dev-1")]
    assert counted(world, "lifecycle_actions", action="replace-volume") == 1
    assert p.requeue == [1.0]


def test_a_volume_on_a_lost_node_waits_while_kaiwudb_cannot_be_asked() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)
    world.put(k.POD, pod(1, uid="recreated"))
    world.kwdb_error = "connection refused"
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert "FailoverWaiting: pod dev-1: the volume is replaced only when KaiwuDB allows: " \
        "KaiwuDB node status unknown: connection refused" in said(p)
    assert counted(world, "errors", stage="failover") == 1
    assert p.requeue == [1.0]


def test_the_claim_waits_when_no_other_pod_runs_kwbase_to_ask() -> None:
    """A StatefulSet of one pod (as during a by-hand scale-down): nobody else to ask."""
    world = healthy_world()
    world.objects[("StatefulSet", NS, NAME)]["spec"]["replicas"] = 1
    for i in (1, 2):
        del world.objects[("Pod", NS, f"dev-{i}")]
    lose(world, 0, since=NOW - TIMEOUT)
    world.put(k.POD, pod(0, uid="recreated"))
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert "no other pod runs kwbase to ask KaiwuDB" in said(p)


def test_a_lost_node_also_holding_another_pods_volume_blocks_both() -> None:
    """Two nodes lost at once, one of them seen only through a pending pod's volume: still two
    failures, still nothing done."""
    world = healthy_world()
    lose(world, 0, since=NOW - TIMEOUT - 5)
    lose(world, 2, since=NOW - TIMEOUT - 5)
    world.put(k.POD, pod(2, uid="recreated"))  # its volume is on lost n2
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert "other pods are failing too (dev-2)" in said(p)
    assert "other pods are failing too (dev-0)" in said(p)
    assert p.requeue and min(p.requeue) == 1.0


def test_a_pod_that_is_down_elsewhere_blocks_a_failover_and_a_ready_one_does_not() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)
    world.put(k.POD, pod(2, ""))  # dev-2 is unscheduled: down
    p = run_pass(world)
    assert world.writes == [] and "pods dev-2 are not Ready yet" in said(p)
    world.put(k.POD, pod(2, "n2"))
    run_pass(world)
    assert world.writes == [("delete", "Pod", "dev-1")]


def test_a_node_gone_before_a_restart_waits_no_longer_than_status_failures_shows() -> None:
    """A new reconciler first sees Node n1 missing now, but status.failures says since when."""
    world = healthy_world()
    del world.objects[("Node", "", "n1")]
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    shown = {"failures": {"dev-1": {"stage": NODE_LOST, "node": "n1",
                                    "since": stamp(NOW - TIMEOUT)}}}
    p = run_pass(world, previous=shown)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert (p.kaiwu.failures or {})["dev-1"]["nodeReady"] == "Missing"
    # What status shows about another node says nothing about this one.
    world = healthy_world()
    del world.objects[("Node", "", "n1")]
    shown["failures"]["dev-1"]["node"] = "n7"
    run_pass(world, previous=shown)
    assert world.writes == []


def test_the_dead_node_decommission_says_which_node_replaces_it_and_looks_again() -> None:
    world = healthy_world()
    world.put(k.POD, pod(1, "n3", uid="replacement"))
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    world.kwdb.append(kw_node(4, "dev-1"))
    p = run_pass(world, replaceLostVolumes=True)
    assert (p.kaiwu.failures or {})["dev-1"] == {"stage": "StoreReplaced", "deadNodeIds": [2]}
    assert "node 4 replaces them" in p.actions[0].message
    assert counted(world, "lifecycle_actions", action="decommission-dead-node") == 1
    assert p.requeue == [1.0]


def test_the_dead_node_decommission_waits_for_a_pod_to_run_it_from_and_for_kaiwudb() -> None:
    world = healthy_world()
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    world.kwdb.append(kw_node(4, "dev-1"))
    for i in range(3):
        world.put(k.POD, pod(i, ""))  # all rescheduling at once: kwbase runs nowhere
    p = run_pass(world)
    assert world.decommissioned == []
    assert "Replacing: no pod runs kwbase to decommission the lost node(s) 2" in said(p)
    world = healthy_world()
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    world.kwdb.append(kw_node(4, "dev-1"))
    world.kwdb_error = "timed out"
    p = run_pass(world)
    assert world.decommissioned == [] and "failed (retrying): timed out" in said(p)
    assert counted(world, "errors", stage="failover") == 1 and p.requeue == [1.0]


def test_replaced_stores_are_dead_ids_beside_a_live_one_at_the_same_pod() -> None:
    entries = [NodeEntry(2, "a", "not-live", "dev-1"), NodeEntry(4, "a", "live", "dev-1"),
               NodeEntry(5, "b", "not-live", "dev-2"),  # no live id there: just down
               NodeEntry(6, "c", "decommissioning", "dev-0"), NodeEntry(1, "c", "live", "dev-0")]
    assert replaced_stores(entries) == {"dev-1": (2,)}


# ---- crash loops: what a crash looks like and the restart bound -------------------------------

def test_a_crash_is_a_crash_loop_back_off_or_a_terminated_container_that_restarted() -> None:
    assert crash_state(pod(0, "n0", crashing=True)) == (True, "exit code 3: invalid --cache")
    assert crash_state(pod(0, "n0")) == (False, "no exit status yet")
    terminated = pod(0, "n0")
    status = terminated["status"]["containerStatuses"][0]
    status["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    status["restartCount"] = 1
    assert crash_state(terminated) == (True, "exit code 1: Error")
    status["restartCount"] = 0  # its first run ended: not a loop yet
    assert crash_state(terminated)[0] is False
    status["name"] = "exporter"
    assert crash_state(terminated) == (False, "")


def test_a_node_stopped_for_clock_skew_says_to_fix_the_time_not_to_restart() -> None:
    """KWDB stops a node more than --max-offset from half its peers with log.Fatal (exit 255,
    rpc/clock_offset.go:242-246, util/log/clog.go:267): a restart cannot help, and the crash
    loop says what will. The pod is only ever restarted, never its claim deleted."""
    skewed = pod(0, "n0", crashing=True)
    last = skewed["status"]["containerStatuses"][0]["lastState"]["terminated"]
    last.update(exitCode=255, message="F261204 03:00:00.000000 1 server/server.go:462  clock "
                "synchronization error: this node is more than 500ms away from at least half "
                "of the known nodes (0 of 2 are within the offset)")
    crashing, words = crash_state(skewed)
    assert crashing and words.startswith("exit code 255: F261204")
    assert words.endswith("fix the hosts' time sync (NTP, chrony); restarts do not")


def test_restarts_are_counted_per_template_revision() -> None:
    counted_on = claim(0, "n0")
    counted_on["metadata"]["annotations"][CRASH_RESTARTS] = "rev1:2"
    assert crash_restarts(counted_on, "rev1") == 2
    assert crash_restarts(counted_on, "rev2") == 0
    counted_on["metadata"]["annotations"][CRASH_RESTARTS] = "rev1:x"
    assert crash_restarts(counted_on, "rev1") == 0
    assert crash_restarts(None, "rev1") == 0


def test_the_last_restart_allowed_is_made_and_the_next_one_stalls() -> None:
    world = healthy_world()
    world.objects[("PersistentVolumeClaim", NS, "data-dev-2")]["metadata"]["annotations"][
        CRASH_RESTARTS] = "rev1:1"
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 600))
    p = run_pass(world, maxCrashRestarts=2, podNotReadyTimeout="600s")
    assert ("delete", "Pod", "dev-2") in world.writes, "restart 2 of 2 is made"
    assert counted(world, "writes", verb="delete", kind="Pod") == 1
    assert counted(world, "writes", verb="patch", kind="PersistentVolumeClaim") == 1
    assert p.events[0][:2] == ("Warning", "CrashLoopRestarted")
    assert "restart 2 of 2" in p.events[0][2] and p.stalled == []
    assert counted(world, "lifecycle_actions", action="restart-crashing-pod") == 1
    assert (p.kaiwu.failures or {})["dev-2"]["restarts"] == 1
    assert (p.kaiwu.failures or {})["dev-2"]["lastWords"] == "exit code 3: invalid --cache"


def test_a_crash_loop_waits_for_the_whole_pod_not_ready_timeout() -> None:
    world = healthy_world()
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 599))
    p = run_pass(world, podNotReadyTimeout="600s")
    assert world.writes == [] and p.requeue == [1.0], "one second to go"
    assert reasons(p)[0] == CRASH_LOOP and "dev-2 is crash-looping" in said(p)


def test_a_crash_loop_restart_waits_while_another_pod_is_down() -> None:
    world = healthy_world()
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 700))
    world.put(k.POD, pod(0, ""))
    p = run_pass(world, podNotReadyTimeout="600s")
    assert world.writes == []
    assert said(p).startswith("FailoverWaiting: pod dev-2: pods dev-0 are not Ready yet")
    assert p.requeue == [1.0]


def test_a_crash_loop_without_a_claim_is_not_restarted() -> None:
    world = healthy_world()
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 700))
    del world.objects[("PersistentVolumeClaim", NS, "data-dev-2")]
    p = run_pass(world, podNotReadyTimeout="600s")
    assert world.writes == [] and "has no claim to count restarts on" in said(p)


def test_a_restarted_pod_that_is_not_back_yet_is_waited_for() -> None:
    world = healthy_world()
    world.objects[("PersistentVolumeClaim", NS, "data-dev-2")]["metadata"]["annotations"][
        CRASH_RESTARTS] = "rev1:1"
    world.put(k.POD, pod(2, "n2", ready=False))  # running, not Ready, not crashing (yet)
    p = run_pass(world, podNotReadyTimeout="600s")
    assert world.writes == []
    assert said(p).startswith("CrashLoop: pod dev-2 was restarted after crashing; waiting")
    assert Finding("dev-2", CRASH_LOOP, restarts=1).record() == {
        "stage": CRASH_LOOP, "restarts": 1, "lastWords": ""}


class StaleView(FakeView):
    """The watch cache, still showing pod dev-1 as it was before the StatefulSet replaced it."""

    def __init__(self, world: World, stale: Obj) -> None:
        super().__init__(world)
        self.stale = stale

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        if kind.kind == "Pod" and name == "dev-1":
            return copy.deepcopy(self.stale)
        return super().get(kind, namespace, name)

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        found = super().list(kind, namespace, labels)
        if kind.kind != "Pod":
            return found
        return [copy.deepcopy(self.stale) if o["metadata"]["name"] == "dev-1" else o
                for o in found]


def test_a_force_delete_that_finds_a_successor_already_there_leaves_it_alone() -> None:
    """The cache still shows the lost pod; the API has its successor (another uid): the
    delete's uid precondition fails with 409, which means the work is done."""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)
    stale = world.find(k.POD, NS, "dev-1")
    assert stale is not None
    world.put(k.POD, pod(1, "n3", uid="successor"))
    view, kube = StaleView(world, stale), world.kube
    step = failover_over(world, kube, view)
    p = new_pass(cluster_obj(), NOW, {"nodes": status_nodes(world)})
    step.run(p)
    assert world.writes == [] and world.find(k.POD, NS, "dev-1") is not None
    assert [a.action for a in p.actions] == ["PodForceDeleted"]


def test_an_api_error_other_than_a_conflict_is_not_swallowed() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)

    class Refusing(FakeApi):
        def delete(self, kind: Kind, namespace: str | None, name: str, *,
                   uid: str | None = None, grace_period_seconds: int | None = None,
                   propagation: str | None = None) -> bool:
            raise ApiError(403, "Forbidden", "pods is forbidden")

    view, kube = FakeView(world), Refusing.sharing(world.kube)
    step = failover_over(world, kube, view)
    with pytest.raises(ApiError):
        step.run(new_pass(cluster_obj(), NOW, {"nodes": status_nodes(world)}))


def test_a_claim_already_going_is_not_deleted_again_when_its_pod_is_evicted() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)
    going = claim(1, "n1")
    going["metadata"]["deletionTimestamp"] = stamp(NOW - 1)
    world.put(k.PVC, going)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert [a.action for a in p.actions] == ["PodForceDeleted"]


def test_failover_reasons_go_before_the_lifecycles_in_ready() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.put(k.POD, pod(1, uid="recreated"))
    going = claim(1, "n1")
    going["metadata"]["deletionTimestamp"] = stamp(NOW - 1)
    world.put(k.PVC, going)
    p = new_pass(cluster_obj(replaceLostVolumes=True), NOW, {"nodes": status_nodes(world)})
    p.not_ready.append(("NodesNotLive", "KaiwuDB nodes not live: 2 (dev-1)"))
    failover_step(world).run(p)
    assert p.not_ready[0] == ("Replacing", "pod dev-1 waits for its old claim to go")


def test_a_pending_pod_deleted_for_a_new_claim_goes_first_in_ready_too() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.put(k.POD, pod(1, uid="recreated"))  # its claim is already gone
    del world.objects[("PersistentVolumeClaim", NS, "data-dev-1")]
    p = new_pass(cluster_obj(replaceLostVolumes=True), NOW, {"nodes": status_nodes(world)})
    p.not_ready.append(("NodesNotLive", "KaiwuDB nodes not live: 2 (dev-1)"))
    failover_step(world).run(p)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert p.not_ready[0] == ("Replacing", "pod dev-1 is recreated with a new claim")


def test_an_unscheduled_pod_already_being_deleted_is_left_to_go() -> None:
    world = healthy_world()
    going = pod(1, uid="recreated")  # Pending, no node, its claim gone: already on its way
    going["metadata"]["deletionTimestamp"] = stamp(NOW - 1)
    world.put(k.POD, going)
    del world.objects[("PersistentVolumeClaim", NS, "data-dev-1")]
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [] and "Replacing" not in reasons(p)


def test_a_crash_restart_whose_pod_was_replaced_meanwhile_goes_on_and_other_errors_stop_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for error, raised in ((ApiError(409, "Conflict", "Precondition failed: UID"), False),
                          (ApiError(500, "InternalError", "etcd timed out"), True)):
        world = healthy_world()
        world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 700))

        def refuse(*args: Any, error: ApiError = error, **kwargs: Any) -> bool:
            raise error
        monkeypatch.setattr(world.kube, "delete", refuse)
        if raised:
            with pytest.raises(ApiError):
                run_pass(world, maxCrashRestarts=2, podNotReadyTimeout="600s")
        else:
            p = run_pass(world, maxCrashRestarts=2, podNotReadyTimeout="600s")
            assert [a.action for a in p.actions] == ["CrashLoopRestarted"]


def test_a_node_that_came_back_and_went_again_is_lost_from_its_second_disappearance() -> None:
    world = healthy_world()
    step = failover_step(world)
    obj = cluster_obj()
    back = world.objects[("Node", "", "n1")]
    del world.objects[("Node", "", "n1")]
    step.run(new_pass(obj, NOW, {"nodes": status_nodes(world)}))
    world.put(k.NODE, back)
    step.run(new_pass(obj, NOW + 10, {"nodes": status_nodes(world)}))
    del world.objects[("Node", "", "n1")]
    step.run(new_pass(obj, NOW + TIMEOUT + 1, {"nodes": status_nodes(world)}))
    assert world.writes == [], "lost for one second, not since the first time"


def test_a_volume_pinned_by_a_local_volumes_affinity_on_a_lost_node_is_replaced() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT)
    world.put(k.POD, pod(1, uid="recreated"))
    local = claim(1, "")
    del local["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    world.put(k.PVC, local)
    world.put(k.PV, {"apiVersion": "v1", "kind": "PersistentVolume",
                     "metadata": {"name": "pv-1"},
                     "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{
                         "matchExpressions": [{"key": "kubernetes.io/hostname",
                                               "operator": "In", "values": ["n1"]}]}]}}}})
    run_pass(world, replaceLostVolumes=True)
    assert ("delete", "PersistentVolumeClaim", "data-dev-1") in world.writes


def test_a_replaced_store_is_found_beside_another_pods_crash_loop() -> None:
    world = healthy_world()
    world.put(k.POD, pod(1, "n3", uid="replacement"))
    world.kwdb[1] = kw_node(2, "dev-1", live=False)
    world.kwdb.append(kw_node(4, "dev-1"))
    world.put(k.POD, pod(2, "n2", ready=False, crashing=True, since=NOW - 5))
    p = run_pass(world, podNotReadyTimeout="600s")
    assert (p.kaiwu.failures or {})["dev-1"] == {"stage": "StoreReplaced", "deadNodeIds": [2]}
    assert world.decommissioned == [2]


def test_a_waiting_volume_says_the_pods_volume_is_on_the_lost_node() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - 5)
    world.put(k.POD, pod(1, uid="recreated"))
    p = run_pass(world)
    assert ("NodeLost", "pod dev-1: Kubernetes node n1 is Unknown (the pod's volume is there)") \
        in p.not_ready


def test_every_failover_stage_has_its_handler() -> None:
    assert set(Failover.STAGES) == set(get_args(FailoverStage))
