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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from reconciler.kaiwudb.failover import CRASH_RESTARTS, Failover
from reconciler.kaiwudb.kwbase import NodeStatus, ReplicationHealth
from reconciler.kaiwudb.lifecycle import Lifecycle
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind, slim
from reconciler.metrics import Metrics
from reconciler.model import Obj, Pass
from renderer.schema import apply_defaults
from renderer.spec import Cluster

NS, NAME = "db", "dev"
NOW = 1_800_000_000.0
TIMEOUT = 60.0  # nodeLostTimeout in these stories
LABELS = {"app.kubernetes.io/instance": NAME, "app.kubernetes.io/name": "kaiwudb"}


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class World:
    """What the API server holds (the fake Kube reads and writes it; the cache view reads it)
    and what KaiwuDB answers."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.writes: list[tuple[str, str, str]] = []  # (verb, kind, name)
        self.kwdb: list[NodeStatus] = []
        self.decommissioned: list[int] = []
        # What KaiwuDB says of its ranges (a lost node's ranges keep a quorum: available).
        self.health = ReplicationHealth(unavailable=0, underreplicated=10)

    def put(self, kind: Kind, obj: Obj) -> Obj:
        meta = obj["metadata"]
        self.objects[(kind.kind, str(meta.get("namespace") or ""), meta["name"])] = obj
        return obj

    def find(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        found = self.objects.get((kind.kind, namespace or "", name))
        return copy.deepcopy(found) if found is not None else None


class FakeView:
    def __init__(self, world: World) -> None:
        self.world = world

    """The watch caches: the world's objects, slimmed as the caches keep them."""

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        found = self.world.find(kind, namespace, name)
        return slim(found) if found is not None else None

    def peek(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return self.get(kind, namespace, name)

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        return [copy.deepcopy(slim(obj)) for (kind_, ns, _), obj in self.world.objects.items()
                if kind_ == kind.kind and ns == namespace and all(
                    (obj["metadata"].get("labels") or {}).get(key) == value
                    for key, value in labels.items())]


class FakeKube:
    field_manager = "kaiwu-reconciler"

    def __init__(self, world: World) -> None:
        self.world = world

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        return self.world.find(kind, namespace or "", name)

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None, propagation: str | None = None) -> bool:
        found = self.world.find(kind, namespace or "", name)
        if found is None:
            return False
        if uid and found["metadata"]["uid"] != uid:
            raise ApiError(409, "Conflict", "Precondition failed: UID")
        self.world.writes.append(("delete", kind.kind, name))
        del self.world.objects[(kind.kind, namespace or "", name)]
        return True

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
              subresource: str = "") -> Obj:
        key = (kind.kind, namespace or "", name)
        obj = self.world.objects[key]
        annotations = obj["metadata"].setdefault("annotations", {})
        for key_, value in patch["metadata"]["annotations"].items():
            if value is None:
                annotations.pop(key_, None)
            else:
                annotations[key_] = value
        self.world.writes.append(("patch", kind.kind, name))
        return copy.deepcopy(obj)


class FakeAdmin:
    """The kwbase adapter's answers, from World.kwdb."""

    def __init__(self, world: World) -> None:
        self.world = world

    def node_status(self, pod: str, node_id: int | None = None, *, ranges: bool = False,
                    decommission: bool = False) -> tuple[NodeStatus, ...]:
        return tuple(self.world.kwdb)

    def replication_health(self, pod: str) -> ReplicationHealth:
        return self.world.health

    def decommission(self, pod: str, node_ids: Sequence[int]) -> tuple[()]:
        self.world.decommissioned.extend(node_ids)
        self.world.writes.append(("decommission", "KaiwuDB", ",".join(map(str, node_ids))))
        return ()


def kw_node(node_id: int, pod: str, live: bool = True,
            decommissioning: bool = False) -> NodeStatus:
    return NodeStatus(id=node_id, address=f"{pod}.{NAME}.{NS}.svc.cluster.local:26257",
                      sql_address="", build="V3.2.1", started_at=None, updated_at=None,
                      locality="", start_mode="start", is_available=live, is_live=live,
                      gossiped_replicas=0, is_decommissioning=decommissioning,
                      is_draining=False)


def node(name: str, ready: str = "True", since: float = NOW - 3600) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": stamp(since)}]}}


def pod(ordinal: int, node_name: str = "", *, ready: bool = True, uid: str = "",
        crashing: bool = False, revision: str = "rev1", since: float = NOW - 3600) -> Obj:
    name = f"{NAME}-{ordinal}"
    state: dict[str, Any] = {"running": {}} if not crashing else {
        "waiting": {"reason": "CrashLoopBackOff"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}",
                         "labels": {**LABELS, "controller-revision-hash": revision},
                         "creationTimestamp": stamp(since)},
            "spec": {"nodeName": node_name} if node_name else {},
            "status": {"phase": "Running" if node_name else "Pending",
                       "conditions": [{"type": "Ready", "status": str(ready),
                                       "lastTransitionTime": stamp(since)}],
                       "containerStatuses": [{
                           "name": "kwbase", "state": state, "restartCount": 3 if crashing
                           else 0, "lastState": {"terminated": {
                               "exitCode": 3, "message": "invalid --cache"}}
                           if crashing else {}}] if node_name else []}}


def claim(ordinal: int, node_name: str, uid: str = "") -> Obj:
    name = f"data-{NAME}-{ordinal}"
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}",
                         "labels": LABELS,
                         "annotations": {"volume.kubernetes.io/selected-node": node_name}},
            "spec": {"volumeName": f"pv-{ordinal}"}}


def healthy_world() -> World:
    """Three Ready pods on n0..n2 (n3 spare), KaiwuDB nodes 1..3 live."""
    world = World()
    for i in range(4):
        world.put(k.NODE, node(f"n{i}"))
    for i in range(3):
        world.put(k.POD, pod(i, f"n{i}"))
        world.put(k.PVC, claim(i, f"n{i}"))
    world.put(k.STATEFUL_SET, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                               "metadata": {"name": NAME, "namespace": NS},
                               "spec": {"replicas": 3}})
    world.kwdb = [kw_node(i + 1, f"{NAME}-{i}") for i in range(3)]
    return world


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
    view, kube = FakeView(world), FakeKube(world)
    lifecycle = Lifecycle(kube, view, Metrics(),  # type: ignore[arg-type]
                          admin_factory=lambda *_: FakeAdmin(world))  # type: ignore[arg-type]
    return Failover(kube, view, Metrics(), lifecycle)  # type: ignore[arg-type]


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
    assert done.wrote


def test_without_the_policy_the_pod_is_force_deleted_and_its_claim_kept() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    run_pass(world)
    assert world.writes == [("delete", "Pod", "dev-1")]
    world.put(k.POD, pod(1, uid="successor"))  # the StatefulSet recreates it: Pending
    waiting = run_pass(world)
    assert world.writes == [("delete", "Pod", "dev-1")], "nothing more"
    assert reasons(waiting)[0] == "VolumeOnLostNode"
    assert "spec.failover.replaceLostVolumes" in waiting.not_ready[0][1]


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


def test_the_claim_is_kept_while_a_range_has_lost_its_quorum() -> None:
    """A store given up a moment ago has not re-replicated yet: ranges with copies on it and on
    this lost node have one live copy left. This store may hold their last copies: kept. (The
    chaos soak found charlie losing 3 ranges for good this way, two volumes given up 9 s
    apart.)"""
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 1)
    world.health = ReplicationHealth(unavailable=3, underreplicated=16)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]
    assert "3 unavailable and 16 under-replicated ranges" in " ".join(
        m for _, m in p.not_ready)
    world.health = ReplicationHealth(unavailable=0, underreplicated=16)  # re-replicated enough
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
    run_pass(world, replaceLostVolumes=True)
    assert world.writes == [("delete", "Pod", "dev-1")]


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
    assert reasons(p)[0] == "FailoverWaiting"
    assert "other pods are failing too" in p.not_ready[0][1]


def test_a_second_loss_waits_until_the_first_replacement_is_ready() -> None:
    world = healthy_world()
    world.put(k.POD, pod(1, "n3", ready=False, uid="replacement"))  # starting, not Ready yet
    lose(world, 2, since=NOW - TIMEOUT - 5)
    p = run_pass(world, replaceLostVolumes=True)
    assert world.writes == []
    assert "pods dev-1 are not Ready yet" in " ".join(m for _, m in p.not_ready)


def test_no_failover_step_while_a_scale_in_runs() -> None:
    world = healthy_world()
    lose(world, 1, since=NOW - TIMEOUT - 5)
    p = run_pass(world, previous={"operation": {
        "type": "ScaleIn", "replicas": 3, "targetReplicas": 2, "pod": "dev-2",
        "startedAt": stamp(NOW - 5), "phase": "Decommissioning", "nodeId": 3}},
        replaceLostVolumes=True)
    assert world.writes == []
    assert "a scale-in is in progress" in " ".join(m for _, m in p.not_ready)


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
