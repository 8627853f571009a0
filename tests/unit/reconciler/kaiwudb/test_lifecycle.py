"""Stories about the lifecycle step's decisions, on small fakes (no test world, milliseconds each).

The same cluster `dev` as tests/unit/reconciler/kaiwudb/test_failover.py (its fakes are reused):
three pods on Kubernetes nodes n0..n2, KaiwuDB nodes 1..3. Each story sets what the cluster and
KaiwuDB show, runs one part of the lifecycle step (init and node probes, rollout, scale-in,
stray nodes) and checks what it wrote, asked KaiwuDB to do, and told the user. Every boundary is
tested on both sides (one pod fewer, one replica left, one version older), so a decision
inverted or off by one fails a story. (The same decisions against the real apiserver:
tests/world_stories/.)
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.admin import InitOutcome, KwbaseSettings
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.kwbase.jobs import RunningJobs
from reconciler.kaiwudb.kwbase.nodes import DecommissionStatus, NodeStatus
from reconciler.kaiwudb.kwbase.replication import ReplicationHealth
from reconciler.kaiwudb.lifecycle import Lifecycle, StatusMemory
from reconciler.kaiwudb.nodes import node_entries, node_state
from reconciler.kaiwudb.pods import (
    claim_of,
    exec_pod,
    kwbase_running,
    ordinal,
    partition_of,
    pod_ready,
)
from reconciler.kaiwudb.rollout import (
    template_changed_by_others,
    version_change_problem,
    version_tuple,
)
from reconciler.kaiwudb.tools import LifecycleSettings
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.client import Kube as KubeClient
from reconciler.kube.kinds import Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj, Pass, ScaleIn
from reconciler.reasons import DECOMMISSIONING, REMOVING, ScaleInPhase, Wait
from reconciler.settings import Settings
from renderer.schema import apply_defaults
from renderer.spec import Cluster
from tests.support.context import step_context
from tests.support.failover_world import (
    NAME,
    NOW,
    NS,
    FakeView,
    World,
    claim,
    kw_node,
    node,
    pod,
    stamp,
)
from tests.support.fake_api import FakeApi
from tests.support.kwbase_view import node_status_shows

POLL = LifecycleSettings().poll_s
PROBE_EVERY = LifecycleSettings().probe_every_s


class Kube(FakeApi):
    """The world's API (its store, resourceVersions and record of writes)."""

    def __init__(self, world: World) -> None:
        self.__dict__.update(world.kube.__dict__)  # the same store (FakeApi.sharing)


class Admin:
    """KaiwuDB's answers: node status from world.kwdb, the replicas the meta scan lists per
    node id from `replicas`, replication health and running jobs; `failing` names commands
    that fail. Every command asked is recorded in `asked` as (command, pod, node ids)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.replicas: dict[int, int] = {}
        self.health = ReplicationHealth(0, 0, 0)
        # As on every KWDB 3.2.1 cluster: the TS TXN job runs for ever.
        self.jobs = RunningJobs((("TS TXN", 1),))
        self.init_outcome = InitOutcome.INITIALIZED
        self.failing: set[str] = set()
        self.asked: list[tuple[str, str, tuple[int, ...]]] = []
        # Gateways whose view lists only the nodes named here (restarted moments ago).
        self.partial_views: dict[str, set[int]] = {}
        self.failing_at: set[tuple[str, str]] = set()  # (command, pod) that fail
        self.upgrading: set[int] = set()  # node ids KWDB marks UPGRADING
        self.answers: dict[str, str] = {}  # command -> the error KWDB answers it with

    def _ask(self, command: str, pod: str, ids: Sequence[int] = ()) -> None:
        self.asked.append((command, pod, tuple(ids)))
        if command in self.failing or (command, pod) in self.failing_at:
            raise KwbaseError(f"{command}: connection refused", pod, [command])
        if command in self.answers:
            raise KwbaseError(self.answers[command], pod, [command])

    def commands(self) -> list[str]:
        return [command for command, _, _ in self.asked]

    def init(self, pod: str) -> InitOutcome:
        self._ask("init", pod)
        return self.init_outcome

    def node_status(self, pod: str, node_id: int | None = None, *, ranges: bool = False,
                    decommission: bool = False) -> tuple[NodeStatus, ...]:
        self._ask("node status --decommission" if decommission else "node status", pod)
        shown = node_status_shows(self.world.kwdb, decommission=decommission)
        if pod in self.partial_views:
            shown = tuple(n for n in shown if n.id in self.partial_views[pod])
        return shown

    def decommission(self, pod: str, node_ids: Sequence[int]) -> tuple[DecommissionStatus, ...]:
        self._ask("decommission", pod, node_ids)
        return tuple(DecommissionStatus(i, True, self.replicas.get(i, 0), True, False)
                     for i in node_ids)

    def recommission(self, pod: str, node_ids: Sequence[int]) -> tuple[DecommissionStatus, ...]:
        self._ask("recommission", pod, node_ids)
        return tuple(DecommissionStatus(i, True, 0, False, False) for i in node_ids)

    def replication_health(self, pod: str) -> ReplicationHealth:
        self._ask("replication health", pod)
        return self.health

    def upgrade(self, pod: str, node_id: int) -> None:
        self._ask("node upgrade", pod, [node_id])
        self.upgrading.add(node_id)

    def upgrading_nodes(self, pod: str) -> frozenset[int]:
        self._ask("upgrading nodes", pod)
        return frozenset(self.upgrading)

    def running_jobs(self, pod: str) -> RunningJobs:
        self._ask("jobs", pod)
        return self.jobs


class Cluster3:
    """One cluster's world with the lifecycle step wired to the fakes."""

    def __init__(self, *, pods: int = 3, sts_replicas: int = 3) -> None:
        self.world = World()
        for i in range(max(pods, sts_replicas) + 1):
            self.world.put(k.NODE, node(f"n{i}"))
        for i in range(pods):
            self.world.put(k.POD, pod(i, f"n{i}"))
            self.world.put(k.PVC, claim(i, f"n{i}"))
        self.world.put(k.STATEFUL_SET, statefulset(sts_replicas))
        self.world.kwdb = [kw_node(i + 1, f"{NAME}-{i}") for i in range(pods)]
        self.admin = Admin(self.world)
        self.metrics = Metrics()
        self.admins_for: list[tuple[str, float]] = []  # (cluster, exec time-out) per adapter

        def factory(kube: Any, cluster: Cluster, settings: KwbaseSettings) -> Admin:
            self.admins_for.append((cluster.name, settings.timeout_s))
            return self.admin

        self.lifecycle = Lifecycle(step_context(Kube(self.world), FakeView(self.world),
                                                metrics=self.metrics,
                                                admin_factory=factory))  # type: ignore[arg-type]

    def counted(self, metric: str, **labels: str) -> float:
        """A counter of the reconciler's metrics (0 when never counted)."""
        value = self.metrics.registry.get_sample_value(f"kaiwu_{metric}_total", labels)
        return value or 0.0

    def action(self, name: str) -> float:
        return self.counted("lifecycle_actions", action=name)

    def kaiwu(self, i: int, *, live: bool | None = None, decommissioning: bool | None = None,
              available: bool | None = None) -> None:
        """KaiwuDB node i+1 (of pod dev-i) changes: live, decommissioning, available."""
        current = self.world.kwdb[i]
        updated = kw_node(current.id, str(current.pod_name),
                          current.is_live if live is None else live,
                          bool(current.is_decommissioning) if decommissioning is None
                          else decommissioning)
        if available is not None:
            updated = dataclasses.replace(updated, is_available=available)
        self.world.kwdb[i] = updated

    def sts(self) -> Obj:
        found = self.world.find(k.STATEFUL_SET, NS, NAME)
        assert found is not None
        return found

    def run(self, *, replicas: int = 3, now: float = NOW, status: dict[str, Any] | None = None,
            **spec: Any) -> Pass:
        p = new_pass(replicas=replicas, now=now, status=status, **spec)
        self.lifecycle.run(p)
        return p


def statefulset(replicas: int, *, partition: int | None = None, current: str = "rev1",
                update: str = "rev1", image: str = "") -> Obj:
    spec: Obj = {"replicas": replicas}
    if image:
        spec["template"] = {"spec": {"containers": [{"name": "kwbase", "image": image}]}}
    if partition is not None:
        spec["updateStrategy"] = {"rollingUpdate": {"partition": partition}}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": NAME, "namespace": NS}, "spec": spec,
            "status": {"currentRevision": current, "updateRevision": update}}


def new_pass(*, replicas: int = 3, now: float = NOW, status: dict[str, Any] | None = None,
             **spec: Any) -> Pass:
    obj: Obj = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                "metadata": {"name": NAME, "namespace": NS, "uid": "cluster-uid",
                             "resourceVersion": "1"},
                "spec": {"replicas": replicas, "tls": {"enabled": False}, **spec},
                "status": status if status is not None else {"initialized": True}}
    p = Pass(ClusterKey(NS, NAME), obj, now, obj["status"])
    p.cluster = Cluster.from_object(apply_defaults(copy.deepcopy(obj)))
    return p


def reasons(items: Sequence[tuple[str, str]]) -> list[str]:
    return [reason for reason, _ in items]


def text(items: Sequence[tuple[str, str]]) -> str:
    return "\n".join(message for _, message in items)


def running(ordinal_: int, *, version: str = "3.2.1", revision: str = "rev1",
            ready: bool = True) -> Obj:
    found = pod(ordinal_, f"n{ordinal_}", ready=ready, revision=revision)
    found["spec"]["containers"] = [{"name": "kwbase", "image": f"kwdb/kwdb:{version}"}]
    return found


# ---- pods: which pod answers, which one is Ready -----------------------------------------------

def test_pod_ordinals_are_read_from_the_name_and_anything_else_has_none() -> None:
    assert [ordinal("dev-0"), ordinal("dev-12"), ordinal("my-db-3")] == [0, 12, 3]
    assert [ordinal("dev"), ordinal("dev-x")] == [-1, -1]


def test_kwbase_runs_only_in_a_running_pod_whose_kwbase_container_runs() -> None:
    assert kwbase_running(pod(0, "n0"))
    assert not kwbase_running(None)
    assert not kwbase_running(pod(0, ""))  # pending, no container yet
    assert not kwbase_running(pod(0, "n0", crashing=True))
    terminating = pod(0, "n0")
    terminating["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    assert not kwbase_running(terminating)
    sidecar_only = pod(0, "n0")
    sidecar_only["status"]["containerStatuses"][0]["name"] = "exporter"
    assert not kwbase_running(sidecar_only)


def test_a_pod_is_ready_when_kwbase_runs_and_its_ready_condition_is_true() -> None:
    assert pod_ready(pod(0, "n0"))
    assert not pod_ready(pod(0, "n0", ready=False))
    assert not pod_ready(pod(0, "n0", crashing=True))  # Ready says True, kwbase does not run


def test_commands_run_in_the_lowest_ready_pod_and_never_in_the_one_being_removed() -> None:
    pods = {f"{NAME}-{i}": pod(i, f"n{i}") for i in (10, 2, 1)}
    assert exec_pod(pods) == f"{NAME}-1"  # by ordinal, not by name: dev-10 sorts last
    assert exec_pod(pods, avoid=f"{NAME}-1") == f"{NAME}-2"
    pods[f"{NAME}-1"] = pod(1, "n1", ready=False)
    assert exec_pod(pods) == f"{NAME}-2"  # a Ready pod before one that only runs kwbase
    alone = {f"{NAME}-0": pod(0, "n0")}
    assert exec_pod(alone, avoid=f"{NAME}-0") == f"{NAME}-0"  # rather than nowhere
    leaving_ready = {f"{NAME}-0": pod(0, "n0", ready=False), f"{NAME}-2": pod(2, "n2")}
    assert exec_pod(leaving_ready, avoid=f"{NAME}-2") == f"{NAME}-0", \
        "a pod that runs kwbase before the one being removed, even a Ready one"
    not_ready = {f"{NAME}-0": pod(0, "n0", ready=False)}
    assert exec_pod(not_ready) == f"{NAME}-0"  # kwbase runs: it can still answer
    assert exec_pod({f"{NAME}-0": pod(0, "")}) is None


def test_the_partition_is_read_from_the_rolling_update_strategy() -> None:
    assert partition_of(statefulset(3, partition=2)) == 2
    assert partition_of(statefulset(3, partition=0)) == 0
    assert partition_of(statefulset(3)) is None
    assert partition_of(None) is None


# ---- nodes: what status.nodes shows, init, probes ----------------------------------------------

def test_status_nodes_list_live_not_live_and_decommissioning_but_not_decommissioned_nodes() -> None:
    nodes = [kw_node(3, "dev-2", live=False), kw_node(1, "dev-0"),
             kw_node(2, "dev-1", decommissioning=True),
             kw_node(4, "dev-3", live=False, decommissioning=True)]
    unavailable = dataclasses.replace(kw_node(5, "dev-4"), is_available=False)
    entries = node_entries([*nodes, unavailable])
    assert [(e.node_id, e.state, e.pod) for e in entries] == [
        (1, "live", "dev-0"), (2, "decommissioning", "dev-1"), (3, "not-live", "dev-2"),
        (5, "not-live", "dev-4")]  # live but not available is not healthy; 4 is gone for good
    assert node_state(kw_node(9, "dev-0", live=False, decommissioning=True)) == "decommissioning"


def test_init_waits_for_every_pod_of_the_spec_then_runs_once_in_the_first_pod() -> None:
    c = Cluster3(pods=2)
    p = c.run(status={})
    assert not p.kaiwu.initialized and c.admin.asked == []
    assert reasons(p.not_ready)[0] == "WaitingForInit"
    assert f"{NAME}-2" in text(p.not_ready) and f"{NAME}-1" not in text(p.not_ready)

    c.world.put(k.POD, pod(2, "n2"))
    c.world.kwdb.append(kw_node(3, f"{NAME}-2"))
    p = c.run(status={})
    assert p.kaiwu.initialized
    assert c.admin.asked[0] == ("init", f"{NAME}-0", ())
    assert [a.action for a in p.actions][:1] == ["Initialized"]
    assert p.events and "successfully initialized" in p.events[0][2]


def test_an_init_that_finds_the_cluster_initialised_counts_as_done_without_an_event() -> None:
    c = Cluster3()
    c.admin.init_outcome = InitOutcome.ALREADY_INITIALIZED
    p = c.run(status={})
    assert p.kaiwu.initialized
    assert "already" in p.actions[0].message and not p.events


def test_a_failed_init_is_retried_after_poll_s_and_nothing_else_happens() -> None:
    c = Cluster3()
    c.admin.failing.add("init")
    p = c.run(status={})
    assert not p.kaiwu.initialized
    assert reasons(p.not_ready) == ["WaitingForInit"] and "retrying" in text(p.not_ready)
    assert p.requeue == [POLL]
    assert c.admin.commands() == ["init"]


def test_a_single_node_cluster_is_initialised_once_its_pod_runs() -> None:
    c = Cluster3(pods=0, sts_replicas=1)
    p = c.run(replicas=1, status={}, startMode="single-node")
    assert not p.kaiwu.initialized and reasons(p.not_ready) == ["WaitingForPods"]
    c.world.put(k.POD, pod(0, "n0"))
    c.world.kwdb = [kw_node(1, f"{NAME}-0")]
    p = c.run(replicas=1, status={}, startMode="single-node")
    assert p.kaiwu.initialized and "init" not in c.admin.commands()


def test_ready_waits_for_every_node_live_and_one_fewer_is_still_joining() -> None:
    c = Cluster3()
    p = c.run()
    assert p.not_ready == [] and p.requeue == []
    assert [e.state for e in p.kaiwu.nodes or ()] == ["live"] * 3
    assert c.admin.asked == [("node status --decommission", f"{NAME}-0", ())]

    c.world.kwdb.pop()  # dev-2 runs but its node has not joined yet
    c.lifecycle.forget(NS, NAME)
    p = c.run()
    assert p.not_ready == [("NodesJoining", "2/3 KaiwuDB nodes live")]
    assert p.requeue == [POLL]


def test_a_node_that_is_live_but_not_available_is_not_live_for_readiness() -> None:
    c = Cluster3()
    c.kaiwu(1, available=False)
    p = c.run()
    assert reasons(p.not_ready) == ["NodesNotLive"] and "2 (dev-1)" in text(p.not_ready)
    assert p.requeue == [POLL]


def test_a_live_node_whose_pod_is_gone_keeps_the_cluster_not_ready() -> None:
    c = Cluster3()
    c.world.kwdb.append(kw_node(4, f"{NAME}-3"))  # live, but no pod dev-3
    p = c.run()
    assert reasons(p.not_ready) == ["NodesWithoutPods"] and "4 (dev-3)" in text(p.not_ready)


def test_a_replaced_stores_old_id_still_live_is_probed_until_it_dies() -> None:
    # dev-1's volume was replaced: its new store joined as node 4 while node 2 (the lost store)
    # still counts live for the liveness TTL. Everything else looks steady; were the probe not
    # repeated, node 2 would show live, undecommissioned, for probe_every_s (five minutes).
    c = Cluster3()
    c.world.kwdb.append(kw_node(4, f"{NAME}-1"))
    p = c.run()
    assert p.not_ready == [("NodesReplaced", "KaiwuDB nodes sharing a pod (a replaced store "
                            f"whose old id is not yet dead): 2 ({NAME}-1), 4 ({NAME}-1)")]
    assert p.requeue == [POLL]
    status = {"initialized": True, "nodes": [n.to_status() for n in p.kaiwu.nodes or ()]}
    c.kaiwu(1, live=False)  # the TTL ran out
    again = c.run(now=NOW + POLL, status=status)
    # A node down may be UPGRADING (a marked node that stopped is not even live): KWDB's
    # marks are read whenever a node is not healthy.
    assert c.admin.commands() == ["node status --decommission"] * 2 + ["upgrading nodes"]
    assert [(n.node_id, n.state) for n in again.kaiwu.nodes or ()][1] == (2, "not-live")


def test_a_steady_cluster_is_probed_again_only_after_probe_every_s() -> None:
    c = Cluster3()
    first = c.run()
    status = {"initialized": True, "nodes": [n.to_status() for n in first.kaiwu.nodes or ()]}
    c.run(now=NOW + PROBE_EVERY - 1, status=status)
    assert c.admin.commands() == ["node status --decommission"]
    c.run(now=NOW + PROBE_EVERY, status=status)
    assert c.admin.commands() == ["node status --decommission"] * 2


def test_a_cluster_unpaused_is_probed_at_once_for_what_happened_while_paused() -> None:
    # While paused, someone scaled the StatefulSet up and down by hand: the pods look as they
    # did, but KaiwuDB now lists a fourth node, gone without a decommission.
    c = Cluster3()
    first = c.run()
    status = {"initialized": True, "nodes": [n.to_status() for n in first.kaiwu.nodes or ()]}
    assert not c.lifecycle.wanted(new_pass(paused=True, status=status))
    c.world.kwdb.append(kw_node(4, f"{NAME}-3", live=False))
    p = c.run(now=NOW + 1, status=status)
    assert c.admin.commands()[:2] == ["node status --decommission"] * 2
    assert ("decommission", f"{NAME}-0", (4,)) in c.admin.asked
    assert [a.action for a in p.actions] == ["StrayNodeDecommissioned"]


def test_a_probe_is_repeated_at_once_when_the_pods_change_or_the_last_found_a_node_down() -> None:
    c = Cluster3()
    first = c.run()
    status = {"initialized": True, "nodes": [n.to_status() for n in first.kaiwu.nodes or ()]}
    c.world.put(k.POD, pod(1, "n1", uid="a-new-pod"))
    c.run(now=NOW + 1, status=status)
    assert c.admin.commands() == ["node status --decommission"] * 2

    c.kaiwu(2, live=False)
    c.lifecycle.forget(NS, NAME)
    c.run(now=NOW + 2, status=status)  # finds node 3 down
    c.kaiwu(2, live=True)
    c.run(now=NOW + 3, status=status)  # looks again at once: finds it back
    c.run(now=NOW + 4, status=status)  # steady again: no exec
    assert c.admin.commands() == ["node status --decommission"] * 3 + ["upgrading nodes"] + [
        "node status --decommission"]


def test_a_failed_probe_says_why_and_looks_again_after_poll_s() -> None:
    c = Cluster3()
    c.admin.failing.add("node status --decommission")
    p = c.run()
    assert reasons(p.not_ready) == ["NodeStatusUnknown"] and p.requeue == [POLL]


# ---- rollout: versions and the partition -----------------------------------------------------

def test_plain_versions_are_read_from_tags_and_anything_else_is_no_version() -> None:
    assert version_tuple("3.2.1") == (3, 2, 1)
    assert version_tuple("v3.2.0-rc1") == (3, 2, 0)
    assert version_tuple("latest") is None
    assert version_tuple("3..1") is None


@pytest.mark.parametrize(("wanted", "refused"), [
    ("3.2.1", ""),  # the version they run
    ("3.2.2", ""),  # an upgrade within the major version
    ("3.3.0", ""),
    ("3.2.0", "cannot be downgraded"),  # one patch older than the oldest node
    ("2.9.9", "cannot be downgraded"),
    ("4.0.0", "changes the major version"),
    ("latest", ""),  # not a plain version: nothing to compare
])
def test_downgrades_and_major_version_changes_are_refused(wanted: str, refused: str) -> None:
    pods = {f"{NAME}-{i}": running(i, version="3.2.1") for i in range(3)}
    problem = version_change_problem(wanted, pods)
    assert (refused in problem) if refused else problem == ""
    if refused:
        assert "3.2.1" in problem


def test_the_oldest_version_a_node_runs_is_the_floor_during_a_rollout() -> None:
    pods = {f"{NAME}-0": running(0, version="3.2.0"), f"{NAME}-1": running(1, version="3.2.1")}
    assert version_change_problem("3.2.0", pods) == ""  # back to where the rollout started
    assert "3.2.0" in version_change_problem("3.1.9", pods)
    assert version_change_problem("3.1.9", {}) == ""  # no pod runs: nothing to compare


def test_a_template_edited_by_someone_else_is_drift_not_a_rollout() -> None:
    sts = statefulset(3)
    sts["metadata"]["managedFields"] = [
        {"manager": "kaiwu-reconciler", "fieldsV1": {"f:spec": {"f:template": {}}}},
        {"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {"f:template": {}}}},
        {"manager": "kubectl-edit", "fieldsV1": {"f:spec": {"f:template": {}}}},
        {"manager": "kubectl-scale", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
    ]
    assert template_changed_by_others(sts, "kaiwu-reconciler") == ["kubectl-edit"]


def rolling_cluster(partition: int = 3) -> Cluster3:
    """A rollout from rev1 to rev2 gated at `partition`; pods from `partition` up are moved."""
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=partition, update="rev2"))
    for i in range(3):
        c.world.put(k.POD, running(i, revision="rev2" if i >= partition else "rev1"))
    return c


def test_a_rollout_moves_one_pod_per_pass_once_the_moved_pods_are_ready() -> None:
    c = rolling_cluster(partition=2)
    p = c.run(version="3.2.1")
    assert p.live.partition == 1
    assert c.sts()["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 1
    assert [a.action for a in p.actions] == ["Upgrading"]
    assert f"{NAME}-1" in p.actions[0].target
    assert p.actions[0].message == ("every KaiwuDB node live and replication healthy: pod "
                                    f"{NAME}-1 moves to revision rev2 (1/3 there before it)")
    assert p.progressing == [("Upgrading", "rolling update to revision rev2: 1/3 pods moved")]
    assert p.requeue == [POLL]


def test_the_last_pod_moved_leaves_the_partition_at_zero_not_below() -> None:
    c = rolling_cluster(partition=0)
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=0, update="rev2"))
    p = c.run(version="3.2.1")
    assert p.live.partition == 0 and p.actions == []


@pytest.mark.parametrize("why", ["not ready", "not moved, not ready", "old revision",
                                 "node not live",
                                 "under-replicated", "health unknown", "drift", "busy",
                                 "backup running"])
def test_a_rollout_waits_while_anything_is_not_healthy(why: str) -> None:
    c = rolling_cluster(partition=2)
    if why == "not ready":
        c.world.put(k.POD, running(2, revision="rev2", ready=False))
    elif why == "not moved, not ready":  # KaiwuDB may still count its node live
        c.world.put(k.POD, running(0, revision="rev1", ready=False))
    elif why == "old revision":
        c.world.put(k.POD, running(2, revision="rev1"))
    elif why == "node not live":
        c.kaiwu(0, live=False)
    elif why == "under-replicated":
        c.admin.health = ReplicationHealth(0, 4, 0)
    elif why == "health unknown":
        c.admin.failing.add("replication health")
    elif why == "drift":
        sts = c.sts()
        sts["metadata"]["managedFields"] = [
            {"manager": "kubectl-edit", "fieldsV1": {"f:spec": {"f:template": {}}}}]
        c.world.put(k.STATEFUL_SET, sts)
    elif why == "busy":
        c.world.put(k.NODE, node("n1", "Unknown"))  # pod dev-1 is down
    elif why == "backup running":
        c.world.put(k.KAIWU_BACKUP, backup("nightly", "running"))
    p = c.run(version="3.2.1")
    assert p.live.partition == 2, why
    assert p.actions == [] and "next pod waits" in text(p.not_ready)
    assert "partition" not in str(c.world.writes)


def backup(name: str, phase: str, cluster: str = NAME) -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackup",
            "metadata": {"name": name, "namespace": NS,
                         "creationTimestamp": "2027-01-15T07:00:00Z"},
            "spec": {"cluster": {"name": cluster}}, "status": {"phase": phase}}


@pytest.mark.parametrize("phase", ["completed", "failed", "pending"])
def test_a_rollout_goes_on_beside_a_backup_that_is_not_running_or_another_clusters(
        phase: str) -> None:
    c = rolling_cluster(partition=2)
    c.world.put(k.KAIWU_BACKUP, backup("earlier", phase))
    c.world.put(k.KAIWU_BACKUP, backup("theirs", "running", cluster="other"))
    p = c.run(version="3.2.1")
    assert p.live.partition == 1, "the rollout moved the next pod"
    assert "KaiwuBackup" not in text(p.not_ready)


def test_a_rollout_that_cannot_ask_kaiwudb_says_why_and_counts_the_error() -> None:
    c = rolling_cluster(partition=2)
    c.admin.failing.add("replication health")
    p = c.run(version="3.2.1")
    assert "next pod waits: replication health unknown: " in text(p.not_ready)
    assert c.counted("errors", stage="lifecycle") == 1
    # With no pod left to run kwbase in, the rollout step has no one to ask.
    rollouts = c.lifecycle.rollouts
    admin: Any = c.admin
    cluster = new_pass().cluster
    assert cluster is not None
    assert rollouts.rollout_blocker(cluster, c.sts(), {}, admin, [], frozenset(), 3,
                                    "rev2") == "no pod runs kwbase"


def test_a_rollout_held_by_a_backup_says_which_backup() -> None:
    c = rolling_cluster(partition=2)
    c.world.put(k.KAIWU_BACKUP, backup("nightly", "running"))
    p = c.run(version="3.2.1")
    assert "KaiwuBackup nightly is running" in text(p.not_ready)


def test_a_downgrade_is_refused_stalled_with_no_pod_moved() -> None:
    c = rolling_cluster(partition=3)
    p = c.run(version="3.1.0")
    assert reasons(p.stalled) == ["VersionChangeRefused"]
    assert "cannot be downgraded" in text(p.stalled)
    assert p.live.partition == 3 and p.actions == []


def test_without_a_rollout_the_partition_closes_at_the_replica_count() -> None:
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=1))
    p = c.run()
    assert p.live.partition == 3
    assert c.sts()["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 3
    assert c.world.writes
    c.world.writes.clear()
    p = c.run()
    assert c.world.writes == []  # already closed: nothing to write


# ---- version upgrades as KWDB does them (reconciler.kaiwudb.upgrade) ------------------------

FLAGS = f"{NAME}-start-flags"


def flag(c: Cluster3) -> str | None:
    """What the start-flags ConfigMap tells the next kwbase start (None: there is none)."""
    found = c.world.find(k.CONFIG_MAP, NS, FLAGS)
    return None if found is None else found["data"]["upgrade-complete"]


def version_upgrade(partition: int = 2, *, image: str = "kwdb/kwdb:3.2.1") -> Cluster3:
    """3.2.0 -> `image`: the pods from `partition` up run it already, the others 3.2.0."""
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=partition, update="rev2", image=image))
    for i in range(3):
        moved = i >= partition
        c.world.put(k.POD, running(i, revision="rev2" if moved else "rev1",
                                   version=image.rsplit(":", 1)[1] if moved else "3.2.0"))
    return c


def upgrading(c: Cluster3, node_id: int) -> None:
    """KWDB marks node `node_id` UPGRADING: live, not available (cli/node.go:174)."""
    c.admin.upgrading.add(node_id)
    c.kaiwu(node_id - 1, available=False)


def test_a_new_version_marks_the_next_pods_node_upgrading_before_it_moves() -> None:
    """KWDB's own upgrade: `kwbase node upgrade`, then the restart with --upgrade-complete,
    which the start-flags ConfigMap turns on for the starts to come."""
    c = version_upgrade(partition=2)
    p = c.run(version="3.2.1")
    assert flag(c) == "true"
    assert ("node upgrade", f"{NAME}-0", (2,)) in c.admin.asked
    assert [a.action for a in p.actions] == ["NodeUpgrading", "Upgrading"]
    assert p.actions[0].target == f"Pod/{NAME}-1"
    assert p.live.partition == 1


def test_a_pass_that_finds_the_next_node_already_upgrading_moves_the_pod_without_asking_again(
) -> None:
    """The reconciler stopped between `node upgrade` and the partition: KWDB refuses a second
    `node upgrade`, so the mark read back is the memory, and the pod moves."""
    c = version_upgrade(partition=2)
    upgrading(c, 2)
    p = c.run(version="3.2.1")
    assert "node upgrade" not in c.admin.commands()
    assert p.live.partition == 1 and [a.action for a in p.actions] == ["Upgrading"]


def test_a_moved_node_still_upgrading_holds_the_next_pod() -> None:
    c = version_upgrade(partition=2)
    upgrading(c, 3)  # dev-2 moved; its start has not cleared the mark yet
    c.world.put(k.POD, running(2, revision="rev2", version="3.2.1") | {
        "status": {**running(2)["status"], "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": stamp(NOW - 5)}]}})
    p = c.run(version="3.2.1")
    assert p.live.partition == 2 and "node upgrade" not in c.admin.commands()
    assert "next pod waits: KaiwuDB nodes not live: 3" in text(p.not_ready)
    assert flag(c) == "true"


def test_a_refused_node_upgrade_holds_the_pod_and_says_kwdbs_answer() -> None:
    c = version_upgrade(partition=2)
    c.admin.failing.add("node upgrade")
    p = c.run(version="3.2.1")
    assert p.live.partition == 2
    assert "next pod waits: `kwbase node upgrade 2` failed: node upgrade: connection refused" \
        in text(p.not_ready)
    assert c.counted("errors", stage="lifecycle") == 1


def test_kwdbs_refusal_while_a_dead_node_is_decommissioning_is_explained_as_a_wait() -> None:
    """A node lost and decommissioned just before the upgrade: KWDB refuses to mark any node
    until that one reads DECOMMISSIONED (server.go:2833-2837). The status says the wait ends by
    itself, and why, so nobody at 3 a.m. goes looking for a fault."""
    c = version_upgrade(partition=2)
    c.admin.answers["node upgrade"] = ("ERROR: rpc error: code = Unknown desc = can not upgrade "
                                       "nodes when cluster has node DECOMMISSIONING")
    p = c.run(version="3.2.1")
    assert p.live.partition == 2
    reason = text(p.not_ready)
    assert "can not upgrade nodes when cluster has node DECOMMISSIONING" in reason
    assert "server.time_until_store_dead (30 min by default)" in reason
    assert "goes on by itself" in reason
    c.admin.answers.clear()
    c.admin.failing.add("node upgrade")
    assert "by itself" not in text(c.run(version="3.2.1").not_ready), "only KWDB's own refusal"


def test_the_next_pod_waits_while_range_metrics_may_predate_the_last_restart() -> None:
    """The pod moved last came back seconds ago: the metrics KWDB last wrote may not show
    it yet (computed and written every 10 s), so "0 under-replicated" is not evidence."""
    c = version_upgrade(partition=2, image="kwdb/kwdb:3.2.0")
    c.admin.health = ReplicationHealth(0, 0, 0, stale="node 3 started at 00:01:40 and the store "
                                       "metrics of node 1 were written less than 20 s after that")
    p = c.run(version="3.2.0")
    assert p.live.partition == 2
    assert "replication health not known yet: node 3 started at 00:01:40" in text(p.not_ready)
    c.admin.health = ReplicationHealth(0, 0, 0)
    assert c.run(version="3.2.0").live.partition == 1


def test_a_template_change_that_keeps_the_image_is_a_plain_rolling_restart() -> None:
    c = version_upgrade(partition=2, image="kwdb/kwdb:3.2.0")
    p = c.run(version="3.2.0")
    assert "node upgrade" not in c.admin.commands()
    assert flag(c) == "false" and p.live.partition == 1


def test_a_node_left_upgrading_with_no_rollout_restarts_once_ready_a_while() -> None:
    """A mark made by hand (or before spec.version went back): its pod runs the template's
    image, so no rollout restarts it; the lifecycle does, with the flag on."""
    c = version_upgrade(partition=0)
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=3, image="kwdb/kwdb:3.2.1"))
    upgrading(c, 2)
    fresh = running(1, version="3.2.1")
    fresh["status"]["conditions"][0]["lastTransitionTime"] = stamp(NOW - 10)
    c.world.put(k.POD, fresh)
    p = c.run(version="3.2.1")
    assert flag(c) == "true" and c.world.find(k.POD, NS, f"{NAME}-1") is not None
    assert "KaiwuDB node 2 of pod dev-1 is UPGRADING" in text(p.not_ready)

    p = c.run(version="3.2.1", now=NOW + 30)
    going = c.world.find(k.POD, NS, f"{NAME}-1")
    assert going is not None and going["metadata"]["deletionGracePeriodSeconds"] == 30, \
        "a plain delete: the kubelet stops kwbase within the pod's grace period (it drains)"
    assert [a.action for a in p.actions] == ["UpgradeCompleting"]


def test_the_flag_goes_off_once_no_pod_is_to_move_and_no_node_is_upgrading() -> None:
    c = version_upgrade(partition=2)
    c.run(version="3.2.1")
    assert flag(c) == "true"
    c.admin.upgrading.clear()
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=0, update="rev2", current="rev2",
                                            image="kwdb/kwdb:3.2.1"))
    for i in range(3):
        c.world.put(k.POD, running(i, revision="rev2", version="3.2.1"))
    c.run(version="3.2.1", now=NOW + PROBE_EVERY + 1)
    assert flag(c) == "false"


def test_a_pod_that_cannot_start_for_want_of_its_flags_gets_them_back() -> None:
    c = Cluster3()
    c.run()
    assert flag(c) == "false"
    c.world.objects.pop(("ConfigMap", NS, FLAGS))
    c.run()
    assert flag(c) is None, "a steady pass reads nothing"
    stuck = running(1)
    stuck["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "CreateContainerConfigError",
                    "message": f'configmap "{FLAGS}" not found'}}
    c.world.put(k.POD, stuck)
    c.run()
    assert flag(c) == "false"


def test_a_new_cluster_gets_its_flags_before_its_pods_can_start() -> None:
    c = Cluster3()
    c.run(status={})
    assert flag(c) == "false"
    made = c.world.find(k.CONFIG_MAP, NS, FLAGS)
    assert made is not None and made["metadata"]["ownerReferences"][0]["uid"] == "cluster-uid"


def test_the_flag_stays_on_while_a_marked_node_is_down_and_its_pod_already_new() -> None:
    """The last pod of an upgrade is re-made on the new image before its container starts:
    no pod differs from the spec any more, but its node, marked and down, is not even live.
    Its mark is read (any node not healthy is a suspect), so its start gets the flag."""
    c = version_upgrade(partition=1)  # dev-0 still on 3.2.0
    c.run(version="3.2.1")
    assert flag(c) == "true"
    upgrading(c, 1)
    c.kaiwu(0, live=False)  # dev-0 stopped: marked, not live, not available
    c.world.put(k.POD, running(0, revision="rev2", version="3.2.1", ready=False))  # re-made
    c.run(version="3.2.1", now=NOW + PROBE_EVERY + 1)
    assert "upgrading nodes" in c.admin.commands()
    assert flag(c) == "true"


def test_a_flag_another_replica_turned_off_is_read_again_before_a_node_is_marked() -> None:
    c = version_upgrade(partition=2)
    c.run(version="3.2.1")  # this replica saw (and wrote) "true"
    c.admin.upgrading.clear()
    c.world.objects[("ConfigMap", NS, FLAGS)]["data"]["upgrade-complete"] = "false"
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=2, update="rev2",
                                            image="kwdb/kwdb:3.2.1"))
    c.run(version="3.2.1", now=NOW + 1)
    assert flag(c) == "true", "read afresh before `node upgrade`, not taken from memory"


def test_a_marked_pod_the_rollout_moves_next_is_left_to_it_but_one_a_scale_in_holds_restarts(
) -> None:
    """A mark made just before the pass stopped (`node upgrade`, then no partition move):
    the rollout moves that pod itself, so it is not restarted; but when a scale-in holds the
    rollout, waiting would be for ever (KWDB refuses the decommission), so it restarts."""
    c = version_upgrade(partition=2)
    upgrading(c, 2)
    p = c.run(version="3.2.1", now=NOW + 60)
    assert [a.action for a in p.actions] == ["Upgrading"], "moved by the rollout, not restarted"

    held = version_upgrade(partition=2)
    held.world.put(k.STATEFUL_SET, statefulset(4, partition=2, update="rev2",
                                               image="kwdb/kwdb:3.2.1"))
    held.world.put(k.POD, running(3, revision="rev2", version="3.2.1"))
    held.world.kwdb.append(kw_node(4, f"{NAME}-3"))
    upgrading(held, 2)
    p = held.run(version="3.2.1", now=NOW + 60)  # spec.replicas 3 < 4: a scale-in
    assert "UpgradeCompleting" in [a.action for a in p.actions]
    going = held.world.find(k.POD, NS, f"{NAME}-1")
    assert going is not None and going["metadata"].get("deletionTimestamp"), "restarted"


def test_two_marked_nodes_are_restarted_one_after_another_and_never_twice() -> None:
    c = version_upgrade(partition=0)
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=3, image="kwdb/kwdb:3.2.1"))
    upgrading(c, 1)
    upgrading(c, 3)
    p = c.run(version="3.2.1", now=NOW + 60)
    assert [a.target for a in p.actions] == [f"Pod/{NAME}-0"]
    gone = running(0, version="3.2.1")  # the cache still shows it a moment longer
    c.world.put(k.POD, gone)
    p = c.run(version="3.2.1", now=NOW + 61)
    assert [a.target for a in p.actions] == [f"Pod/{NAME}-2"], "the next, not the same again"


# ---- scale-in ---------------------------------------------------------------------------------

def scale_in_status(phase: ScaleInPhase = DECOMMISSIONING,
                    node_id: int | None = 3) -> dict[str, Any]:
    operation = ScaleIn(replicas=3, target_replicas=2, pod=f"{NAME}-2",
                        started_at="2027-01-15T08:00:00Z", phase=phase, node_id=node_id)
    return {"initialized": True, "operation": operation.to_status()}


def test_a_scale_in_decommissions_the_highest_ordinals_node_from_another_pod() -> None:
    c = Cluster3()
    p = c.run(replicas=2)
    assert ("decommission", f"{NAME}-0", (3,)) in c.admin.asked
    assert p.kaiwu.operation is not None
    assert (p.kaiwu.operation.phase, p.kaiwu.operation.node_id) == (DECOMMISSIONING, 3)
    assert p.live.replicas == 3  # the StatefulSet keeps every pod while the node drains
    assert [a.action for a in p.actions] == ["Decommissioning"]
    assert reasons(p.progressing) == ["ScalingIn"]


@pytest.mark.parametrize("why", ["node not live", "unavailable", "another decommissioning",
                                 "under-replicated", "jobs", "health unknown"])
def test_a_scale_in_does_not_start_while_the_cluster_is_not_healthy(why: str) -> None:
    c = Cluster3()
    if why == "node not live":
        c.kaiwu(0, live=False)
    elif why == "unavailable":
        c.kaiwu(0, available=False)
    elif why == "another decommissioning":
        c.kaiwu(1, decommissioning=True)
    elif why == "under-replicated":
        c.admin.health = ReplicationHealth(0, 1, 0)
    elif why == "jobs":
        c.admin.jobs = RunningJobs((("IMPORT", 1), ("TS TXN", 1)))
    elif why == "health unknown":
        c.admin.failing.add("replication health")
    p = c.run(replicas=2)
    assert "decommission" not in c.admin.commands(), why
    assert p.kaiwu.operation is None
    assert reasons(p.progressing) == ["ScaleInWaiting"]
    assert POLL in p.requeue


def test_a_scale_in_waits_for_a_running_backup_and_says_which() -> None:
    c = Cluster3()
    c.world.put(k.KAIWU_BACKUP, backup("nightly", "running"))
    p = c.run(replicas=2)
    assert "decommission" not in c.admin.commands()
    assert p.kaiwu.operation is None and p.live.replicas == 3, "never scaled down undrained"
    waits = ("BackupRunning", "scale-in waits for KaiwuBackup nightly to finish")
    assert waits in p.not_ready and p.progressing == [waits]
    assert POLL in p.requeue


def test_the_scale_ins_own_target_may_already_be_decommissioning() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    p = c.run(replicas=2)
    assert p.kaiwu.operation is not None and p.kaiwu.operation.node_id == 3


def test_a_single_replica_cluster_refuses_to_scale_in() -> None:
    c = Cluster3()
    p = c.run(replicas=2, startMode="single-replica")
    assert reasons(p.stalled) == ["ScaleInRefused"]
    assert "set spec.replicas to 3" in text(p.stalled)
    assert "decommission" not in c.admin.commands() and p.live.replicas == 3


def test_the_statefulset_shrinks_only_once_no_replica_is_left_whatever_gossip_says() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)  # kw_node gossips 0 replicas: never evidence
    c.admin.replicas[3] = 1
    p = c.run(replicas=2, status=scale_in_status())
    assert p.live.replicas == 3
    assert p.kaiwu.operation is not None and p.kaiwu.operation.phase == DECOMMISSIONING
    assert "1 replicas left on it" in text(p.progressing)
    # The replica count is asked of another pod, never of the node being removed.
    assert [pod_ for command, pod_, _ in c.admin.asked if command == "decommission"] == [
        f"{NAME}-0"]

    c.admin.replicas[3] = 0
    p = c.run(replicas=2, status=scale_in_status())
    assert p.live.replicas == 2 and p.sync
    assert p.kaiwu.operation is not None and p.kaiwu.operation.phase == REMOVING
    assert [a.action for a in p.actions] == ["NodeDecommissioned"]


def test_once_the_pod_is_gone_its_claim_is_deleted_and_the_scale_in_ends() -> None:
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(2))
    p = c.run(replicas=2, status=scale_in_status(REMOVING))
    assert p.kaiwu.operation is not None  # the pod is still terminating
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-2") not in c.world.writes

    del c.world.objects[("Pod", NS, f"{NAME}-2")]
    p = c.run(replicas=2, status=scale_in_status(REMOVING))
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-2") in c.world.writes
    assert p.kaiwu.operation is None
    assert [a.action for a in p.actions] == ["ClaimDeleted", "ScaledIn"]
    assert min(p.requeue, default=POLL) >= POLL  # 2 was the target: no next node


def test_the_removed_pod_stuck_terminating_on_a_lost_node_is_force_deleted() -> None:
    """dev-2 is drained and the StatefulSet let it go, but its node stopped reporting: no
    kubelet will confirm the deletion, and failover looks only at the pods the StatefulSet
    wants. The scale-in force-deletes it (its store holds nothing) and then finishes."""
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(2))
    condemned = pod(2, "n2")
    condemned["metadata"]["deletionTimestamp"] = stamp(NOW - 60)
    c.world.put(k.POD, condemned)
    p = c.run(replicas=2, status=scale_in_status(REMOVING))
    assert pod_deletes(c) == [], "its node is Ready: the kubelet finishes the deletion"

    c.world.put(k.NODE, node("n2", "Unknown", NOW - 30))
    p = c.run(replicas=2, status=scale_in_status(REMOVING))
    assert pod_deletes(c) == [("delete", "Pod", f"{NAME}-2")]
    assert [a.action for a in p.actions] == ["PodForceDeleted"]
    assert "n2 is Unknown" in p.actions[0].message
    assert p.kaiwu.operation is not None and p.kaiwu.operation.phase == REMOVING
    assert c.action("force-delete-removed-pod") == 1


def test_a_removed_pod_not_yet_let_go_by_the_statefulset_is_not_force_deleted() -> None:
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(2))
    c.world.put(k.NODE, node("n2", "Unknown", NOW - 30))
    c.run(replicas=2, status=scale_in_status(REMOVING))
    assert pod_deletes(c) == [], "the StatefulSet controller deletes it first"


def pod_deletes(c: Cluster3) -> list[tuple[str, str, str]]:
    return [write for write in c.world.writes if write[:2] == ("delete", "Pod")]


def test_a_scale_in_by_two_goes_on_to_the_next_node_at_once() -> None:
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(2))
    del c.world.objects[("Pod", NS, f"{NAME}-2")]
    p = c.run(replicas=1, status=scale_in_status(REMOVING))
    assert p.kaiwu.operation is None and min(p.requeue) < POLL


def test_a_scale_out_while_a_node_decommissions_recommissions_it() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    p = c.run(replicas=3, status=scale_in_status())
    assert ("recommission", f"{NAME}-0", (3,)) in c.admin.asked
    assert p.kaiwu.operation is None and p.live.replicas == 3
    assert [a.action for a in p.actions] == ["Recommissioned"]


def test_a_statefulset_raised_by_hand_during_a_scale_in_ends_it_and_shrinks_nothing() -> None:
    # Scaling 3 -> 2, node 3 draining (or drained), when someone scales the StatefulSet to 4:
    # shrinking now would take dev-3 undrained. The operation ends as a scale-out's does;
    # the next pass starts again from the highest pod.
    for phase in (DECOMMISSIONING, REMOVING):
        c = Cluster3()
        c.kaiwu(2, decommissioning=True)
        c.world.put(k.STATEFUL_SET, statefulset(4))
        c.world.put(k.POD, pod(3, "n3"))
        c.world.kwdb.append(kw_node(4, f"{NAME}-3"))
        p = c.run(replicas=2, status=scale_in_status(phase))
        assert ("recommission", f"{NAME}-0", (3,)) in c.admin.asked, phase
        assert p.kaiwu.operation is None and p.live.replicas == 4, phase
        assert p.actions[-1].message.startswith(
            "the StatefulSet was raised to 4 during the scale-in: KaiwuDB node 3 recommissioned")


def test_a_node_recommissioned_by_hand_restarts_the_scale_in_from_its_checks() -> None:
    c = Cluster3()  # node 3 is no longer decommissioning
    c.admin.jobs = RunningJobs((("SCHEMA CHANGE", 1),))  # and the checks now find a job running
    p = c.run(replicas=2, status=scale_in_status())
    assert p.kaiwu.operation is None and min(p.requeue) < POLL
    assert "decommission" not in c.admin.commands()


# ---- stray nodes and wanted nodes that decommission -------------------------------------------

def stray_cluster() -> Cluster3:
    """Pods dev-0..2; KaiwuDB still lists node 4 of dev-3, gone without a decommission."""
    c = Cluster3()
    c.world.kwdb.append(kw_node(4, f"{NAME}-3", live=False))
    c.world.put(k.PVC, claim(3, "n3"))
    return c


def test_a_node_of_a_pod_beyond_the_statefulset_is_decommissioned() -> None:
    c = stray_cluster()
    p = c.run()
    assert ("decommission", f"{NAME}-0", (4,)) in c.admin.asked
    assert [a.action for a in p.actions] == ["StrayNodeDecommissioned"]


def test_a_node_of_the_last_wanted_ordinal_is_not_a_stray() -> None:
    c = Cluster3()
    c.kaiwu(2, live=False)  # dev-2 (ordinal 2 < 3 replicas) is just down
    del c.world.objects[("Pod", NS, f"{NAME}-2")]
    c.run()
    assert "decommission" not in c.admin.commands()


def test_strays_wait_while_another_node_is_not_live() -> None:
    c = stray_cluster()
    c.kaiwu(0, live=False)
    c.run()
    assert "decommission" not in c.admin.commands()


def test_a_single_replica_cluster_keeps_a_strays_claim_and_says_how_to_bring_it_back() -> None:
    c = stray_cluster()
    p = c.run(startMode="single-replica")
    assert "decommission" not in c.admin.commands()
    assert reasons(p.stalled) == ["StrayNodeNotRemovable"]
    assert "Set spec.replicas to 4" in text(p.stalled)


def test_a_decommissioned_strays_claim_goes_once_no_replica_is_left_on_it() -> None:
    c = stray_cluster()
    c.world.kwdb[3] = kw_node(4, f"{NAME}-3", live=False, decommissioning=True)
    c.admin.replicas[4] = 2
    p = c.run()
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-3") not in c.world.writes
    assert "2 left" in text(p.not_ready)
    c.admin.replicas[4] = 0
    p = c.run()
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-3") in c.world.writes
    assert [a.action for a in p.actions] == ["ClaimDeleted"]


def test_no_stray_is_touched_while_pods_are_down() -> None:
    c = stray_cluster()
    c.world.put(k.NODE, node("n1", "Unknown"))
    c.run()
    assert "decommission" not in c.admin.commands()


def test_a_wanted_pods_node_that_came_back_decommissioning_is_recommissioned() -> None:
    c = Cluster3()
    c.kaiwu(1, decommissioning=True)
    p = c.run()
    assert ("recommission", f"{NAME}-0", (2,)) in c.admin.asked
    assert [a.action for a in p.actions] == ["Recommissioned"]


def test_an_older_decommissioning_id_of_a_pod_with_a_new_store_is_left_alone() -> None:
    c = Cluster3()
    c.world.kwdb.append(kw_node(7, f"{NAME}-1", decommissioning=True))
    c.run()
    assert "recommission" not in c.admin.commands()


# ---- the step as a whole ----------------------------------------------------------------------

def test_a_statefulset_scaled_up_by_hand_is_scaled_in_through_decommission() -> None:
    # Someone scaled the StatefulSet to 4 and the new pod joined: its node may hold the second
    # replica of a range still up-replicating, so it is drained before its pod goes, as in
    # any scale-in (the same world as spec.replicas lowered from 4: the same next step).
    c = Cluster3()
    c.run()  # a steady cluster of three
    c.world.put(k.STATEFUL_SET, statefulset(4))
    c.world.put(k.POD, pod(3, "n3"))
    c.world.kwdb.append(kw_node(4, f"{NAME}-3"))
    p = c.run()
    assert p.kaiwu.operation is not None and p.kaiwu.operation.node_id == 4
    assert p.live.replicas == 4  # the StatefulSet keeps the pod until its node is drained
    assert c.action("decommission") == 1


def test_replicas_an_ignore_rule_hands_to_someone_else_are_never_scaled_in() -> None:
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(4))
    c.world.put(k.POD, pod(3, "n3"))
    c.world.kwdb.append(kw_node(4, f"{NAME}-3"))
    p = new_pass()
    p.replicas_owned_elsewhere = True
    c.lifecycle.run(p)
    assert p.kaiwu.operation is None and "decommission" not in c.admin.commands()
    assert p.live.replicas == 4, "every apply of the StatefulSet keeps the owner's replicas"


def test_a_pod_added_by_hand_to_a_single_node_cluster_is_left_to_drift_repair() -> None:
    # It runs a KaiwuDB of its own (start-single-node has no --join): no data of the cluster.
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(2))
    p = c.run(replicas=1, startMode="single-node")
    assert p.kaiwu.operation is None and p.live.replicas is None
    assert not any(reason == "ScaleInRefused" for reason, _ in p.stalled)


def test_fewer_replicas_in_the_spec_than_live_after_a_restart_is_a_scale_in() -> None:
    c = Cluster3()
    p = c.run(replicas=2)
    assert p.kaiwu.operation is not None


def test_the_memory_of_a_decision_outlasts_a_stale_copy_for_the_grace_period_only() -> None:
    memory = Cluster3().lifecycle.memory  # five seconds by default
    decided = new_pass(status={"initialized": False})
    decided.kaiwu.initialized = True
    memory.save(decided)
    stale = new_pass(now=NOW + 5, status={"initialized": False})
    stale.obj["metadata"]["resourceVersion"] = "2"
    memory.recall(stale)
    assert stale.kaiwu.initialized  # an older copy of ours, within the grace period
    late = new_pass(now=NOW + 5.5, status={"initialized": False})
    late.obj["metadata"]["resourceVersion"] = "2"
    memory.recall(late)
    assert not late.kaiwu.initialized  # grace over: the newer object wins


# ---- what each decision says and counts ---------------------------------------------------------

def test_init_and_its_failure_are_counted() -> None:
    c = Cluster3()
    c.run(status={})
    assert c.action("init") == 1
    failing = Cluster3()
    failing.admin.failing.add("init")
    p = failing.run(status={})
    assert failing.counted("errors", stage="lifecycle") == 1
    assert p.not_ready == [("WaitingForInit", "kwbase init failed (retrying in 1s): "
                            "init: connection refused")]


def test_a_scale_in_waiting_says_why_in_ready_and_progressing() -> None:
    c = Cluster3()
    c.admin.jobs = RunningJobs((("IMPORT", 2), ("TS TXN", 1)))
    p = c.run(replicas=2)
    assert ("ScaleInWaiting", "scale-in to 2 waits: jobs running (SHOW JOBS): 2 IMPORT") \
        in p.not_ready
    assert p.progressing == [("ScaleInWaiting", "jobs running (SHOW JOBS): 2 IMPORT")]
    assert ("jobs", f"{NAME}-0", ()) in c.admin.asked
    c = Cluster3()
    c.kaiwu(1, decommissioning=True)
    p = c.run(replicas=2)
    assert p.progressing == [("ScaleInWaiting", "KaiwuDB nodes decommissioning: 2")]
    c = Cluster3()
    c.admin.health = ReplicationHealth(1, 2, 0)
    p = c.run(replicas=2)
    assert p.progressing == [("ScaleInWaiting",
                              "1 unavailable and 2 under-replicated ranges")]
    assert "jobs" not in c.admin.commands(), "jobs are asked only once replication is healthy"
    c = Cluster3()
    c.admin.failing.add("replication health")
    p = c.run(replicas=2)
    assert p.progressing == [("ScaleInWaiting", "replication health unknown: "
                              "replication health: connection refused")]
    assert c.counted("errors", stage="lifecycle") == 1


def test_a_started_scale_in_is_counted_and_says_what_it_does() -> None:
    c = Cluster3()
    p = c.run(replicas=2)
    assert c.action("decommission") == 1
    assert p.actions[0].target == f"Pod/{NAME}-2"
    assert p.actions[0].message.startswith("scale-in 3 -> 2: decommissioning KaiwuDB node 3")
    assert p.not_ready == [("ScalingIn", f"scaling in 3 -> 2: decommissioning KaiwuDB node 3 "
                            f"({NAME}-2)")]
    assert p.kaiwu.operation == ScaleIn(3, 2, f"{NAME}-2", "2027-01-15T08:00:00Z",
                                        DECOMMISSIONING, 3) or (
        p.kaiwu.operation is not None and p.kaiwu.operation.target_replicas == 2)


def test_a_pod_that_never_joined_is_removed_without_a_decommission() -> None:
    c = Cluster3()
    c.world.kwdb.pop()  # dev-2 has no KaiwuDB node
    p = c.run(replicas=2)
    assert "decommission" not in c.admin.commands()
    assert p.kaiwu.operation is not None and p.kaiwu.operation.phase == REMOVING
    assert p.kaiwu.operation.node_id is None
    assert p.not_ready[-1] == ("ScalingIn", f"scaling in 3 -> 2: removing pod {NAME}-2")


def test_a_node_missing_from_one_gateways_view_is_no_pod_that_never_joined() -> None:
    """A gateway restarted moments ago lists only the nodes it has heard from. The node of the
    pod being removed missing from that view is no evidence it never joined: the pod's own view
    lists it, so it is decommissioned, never removed undrained."""
    c = Cluster3()
    c.admin.partial_views[f"{NAME}-0"] = {1, 2}  # dev-0's view lacks dev-2's node 3
    p = c.run(replicas=2)
    assert ("decommission", f"{NAME}-0", (3,)) in c.admin.asked
    assert p.kaiwu.operation is not None and p.kaiwu.operation.node_id == 3


def test_a_pod_that_never_joined_and_cannot_answer_is_still_removed() -> None:
    """Scaled out and straight back in: the new pod's kwbase runs but never joined, so it
    cannot answer `node status`; the second gateway's view decides."""
    c = Cluster3()
    c.world.kwdb.pop()  # dev-2 has no KaiwuDB node
    c.admin.failing_at.add(("node status", f"{NAME}-2"))
    p = c.run(replicas=2)
    assert "decommission" not in c.admin.commands()
    assert p.kaiwu.operation is not None and p.kaiwu.operation.phase == REMOVING


def test_a_node_another_view_shows_not_live_holds_the_scale_in() -> None:
    c = Cluster3()
    c.kaiwu(2, live=False)
    c.admin.partial_views[f"{NAME}-0"] = {1, 2}  # lacks node 3; dev-1's view shows it down
    del c.world.objects[("Pod", NS, f"{NAME}-2")]
    p = c.run(replicas=2)
    assert "decommission" not in c.admin.commands()
    assert p.kaiwu.operation is None or p.kaiwu.operation.phase != REMOVING


def test_a_failed_decommission_is_retried_and_no_operation_is_recorded() -> None:
    c = Cluster3()
    c.admin.failing.add("decommission")
    p = c.run(replicas=2)
    assert p.kaiwu.operation is None
    assert ("ScaleInWaiting", "decommission of node 3 failed (retrying in 1s): "
            "decommission: connection refused") in p.not_ready
    assert c.counted("errors", stage="lifecycle") == 1


def test_the_replica_count_unknown_keeps_the_scale_in_waiting_and_says_why() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    c.admin.failing.add("decommission")
    p = c.run(replicas=2, status=scale_in_status())
    assert p.live.replicas == 3 and p.kaiwu.operation is not None
    assert p.progressing == [("ScalingIn", f"scaling in 3 -> 2: decommissioning KaiwuDB node 3 "
                              f"({NAME}-2); replica count unknown (decommission: connection "
                              "refused)")]
    assert c.counted("errors", stage="lifecycle") == 1


def test_the_replica_count_is_never_asked_of_the_node_being_removed() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    for i in (0, 1):
        c.world.put(k.POD, pod(i, f"n{i}", ready=False))  # kwbase runs, readiness fails
    c.admin.replicas[3] = 0
    p = c.run(replicas=2, status=scale_in_status())
    asked = [pod_ for command, pod_, _ in c.admin.asked if command == "decommission"]
    assert asked == [f"{NAME}-0"], "a pod that runs kwbase rather than the one leaving"
    assert p.kaiwu.operation is not None and p.kaiwu.operation.phase == REMOVING


def test_a_node_missing_from_the_decommission_answer_is_not_taken_as_empty() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)

    def nothing(pod_: str, node_ids: Sequence[int]) -> tuple[DecommissionStatus, ...]:
        c.admin.asked.append(("decommission", pod_, tuple(node_ids)))
        return ()

    c.admin.decommission = nothing  # type: ignore[method-assign,assignment]
    p = c.run(replicas=2, status=scale_in_status())
    assert p.live.replicas == 3
    assert "node 3 missing from the decommission status" in text(p.progressing)


def test_a_finished_node_shrinks_the_statefulset_by_exactly_one() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    p = c.run(replicas=2, status=scale_in_status())
    assert p.actions[0].message.endswith("the StatefulSet shrinks to 2")
    assert p.events[0][:2] == ("Normal", "NodeDecommissioned")
    assert p.actions[0].target == f"Pod/{NAME}-2"


def test_the_end_of_a_scale_in_step_is_counted_with_its_claim_deletion() -> None:
    c = Cluster3()
    c.world.put(k.STATEFUL_SET, statefulset(2))
    del c.world.objects[("Pod", NS, f"{NAME}-2")]
    p = c.run(replicas=2, status=scale_in_status(REMOVING))
    assert c.action("delete-claim") == 1 and c.action("scale-in-step") == 1
    assert c.counted("writes", verb="delete", kind="PersistentVolumeClaim") == 1
    assert [(a.action, a.target) for a in p.actions] == [
        ("ClaimDeleted", f"PersistentVolumeClaim/data-{NAME}-2"),
        ("ScaledIn", f"StatefulSet/{NAME}")]
    assert p.actions[1].message == f"3 -> 2 replicas ({NAME}-2 removed)"


def test_a_scale_out_that_cannot_recommission_yet_keeps_the_operation() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    c.admin.failing.add("recommission")
    p = c.run(replicas=3, status=scale_in_status())
    assert p.kaiwu.operation is not None
    assert ("ScalingIn", "recommission of node 3 failed (retrying in 1s): recommission: "
            "connection refused") in p.not_ready
    c.admin.failing.clear()
    p = c.run(replicas=3, status=scale_in_status())
    assert c.action("recommission") == 1 and p.requeue and POLL in p.requeue
    assert p.actions[0].target == f"Pod/{NAME}-2"
    assert p.actions[0].message.startswith("spec.replicas is 3 again: KaiwuDB node 3")


def test_stray_decommission_is_counted_warned_and_its_failure_retried() -> None:
    c = stray_cluster()
    p = c.run()
    assert c.action("decommission-stray-node") == 1
    assert p.events[0][:2] == ("Warning", "StrayNodeDecommissioned")
    assert f"({NAME}-3)" in p.events[0][2] and POLL in p.requeue
    c = stray_cluster()
    c.admin.failing.add("decommission")
    p = c.run()
    assert ("StrayNodes", "decommission of nodes [4] whose pods are gone failed (retrying in "
            "1s): decommission: connection refused") in p.not_ready


def test_a_stray_claim_deletion_is_counted_and_says_why() -> None:
    c = stray_cluster()
    c.world.kwdb[3] = kw_node(4, f"{NAME}-3", live=False, decommissioning=True)
    p = c.run()
    assert c.action("delete-claim") == 1
    assert c.counted("writes", verb="delete", kind="PersistentVolumeClaim") == 1
    assert p.actions[0].message.startswith("KaiwuDB node 4 is decommissioned")
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-3") in c.world.writes


def test_recommissioning_a_wanted_node_is_counted_warned_and_retried_on_failure() -> None:
    c = Cluster3()
    c.kaiwu(1, decommissioning=True)
    p = c.run()
    assert c.action("recommission") == 1
    assert p.events[0][:2] == ("Warning", "Recommissioned")
    assert POLL in p.requeue
    c = Cluster3()
    c.kaiwu(1, decommissioning=True)
    c.admin.failing.add("recommission")
    p = c.run()
    assert "NodesDecommissioning" in reasons(p.not_ready)
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    c.run(replicas=2, status=scale_in_status())
    assert "recommission" not in c.admin.commands(), "the scale-in's own target is not wanted"


def test_a_rollout_step_is_counted_and_patches_the_statefulset() -> None:
    c = rolling_cluster(partition=2)
    c.run(version="3.2.1")
    assert c.action("upgrade-step") == 1
    assert c.counted("writes", verb="patch", kind="StatefulSet") == 1
    assert ("replication health", f"{NAME}-0", ()) in c.admin.asked


def test_an_uninitialised_cluster_rolls_nothing_and_says_so() -> None:
    c = rolling_cluster(partition=2)
    c.world.put(k.POD, running(0, revision="rev1", ready=False))
    c.world.objects.pop(("Pod", NS, f"{NAME}-1"))
    p = c.run(status={}, version="3.2.1")
    assert p.live.partition == 2
    assert "next pod waits: the cluster is not initialised" in text(p.progressing)


def test_pods_down_within_the_live_statefulset_block_the_rollout_and_name_the_pod() -> None:
    c = rolling_cluster(partition=2)
    c.world.put(k.STATEFUL_SET, statefulset(4, partition=2, update="rev2"))
    c.world.put(k.POD, running(3, revision="rev2"))
    c.world.kwdb.append(kw_node(4, f"{NAME}-3"))
    del c.world.objects[("Pod", NS, f"{NAME}-3")]
    p = c.run(replicas=4, version="3.2.1")
    assert p.live.partition == 2
    assert f"next pod waits: pods are down: {NAME}-3" in text(p.progressing)


def test_a_pass_reading_the_version_it_wrote_from_takes_the_remembered_fields() -> None:
    memory = StatusMemory(grace_s=5.0)
    decided = new_pass(status={"initialized": False})
    decided.kaiwu.initialized = True
    memory.save(decided)
    again = new_pass(now=NOW + 60, status={"initialized": False})  # same resourceVersion "1"
    memory.recall(again)
    assert again.kaiwu.initialized, "the cache has not seen our write yet"


def test_a_pass_that_decided_nothing_new_leaves_nothing_pending() -> None:
    memory = StatusMemory(grace_s=5.0)
    steady = new_pass(status={"initialized": True})
    memory.save(steady)
    changed = new_pass(now=NOW + 1, status={"initialized": False})
    changed.obj["metadata"]["resourceVersion"] = "2"
    memory.recall(changed)
    assert not changed.kaiwu.initialized, "someone else's newer object wins at once"
    memory.forget(NS, NAME)
    memory.recall(again := new_pass(status={"initialized": False}))
    assert not again.kaiwu.initialized


def test_each_pass_makes_the_admin_adapter_for_its_cluster_with_the_exec_time_out() -> None:
    c = Cluster3()
    c.run()
    assert c.admins_for and set(c.admins_for) == {(NAME, LifecycleSettings().exec_timeout_s)}


def test_a_running_scale_in_probes_the_nodes_on_every_pass() -> None:
    c = Cluster3()
    first = c.run()
    nodes = [n.to_status() for n in first.kaiwu.nodes or ()]
    c.kaiwu(2, decommissioning=True)
    c.admin.replicas[3] = 5
    c.run(replicas=2, now=NOW + 1, status={**scale_in_status(), "nodes": nodes})
    assert c.admin.commands().count("node status --decommission") == 2


def test_without_a_statefulset_the_spec_says_how_many_nodes_to_wait_for() -> None:
    c = Cluster3()
    del c.world.objects[("StatefulSet", NS, NAME)]
    c.world.kwdb.pop()
    p = c.run()
    assert ("NodesJoining", "2/3 KaiwuDB nodes live") in p.not_ready


def test_the_statefulset_not_the_spec_says_how_many_nodes_to_wait_for() -> None:
    c = Cluster3()  # spec asks for 4; the StatefulSet has not grown yet
    p = c.run(replicas=4)
    assert "NodesJoining" not in reasons(p.not_ready)


def test_an_already_initialised_cluster_goes_on_to_probe_in_the_same_pass() -> None:
    c = Cluster3()
    c.admin.init_outcome = InitOutcome.ALREADY_INITIALIZED
    p = c.run(status={})
    assert c.admin.commands()[:2] == ["init", "node status --decommission"]
    assert [a.action for a in p.actions] == ["Initialized"]
    assert p.actions[0].message == "kwbase init: the cluster was already initialized"


def test_with_no_pod_running_kwbase_the_probe_says_so() -> None:
    c = Cluster3()
    for i in range(3):
        c.world.put(k.POD, pod(i, ""))
    p = c.run()
    assert ("WaitingForPods", "no pod runs kwbase") in p.not_ready
    assert "node status --decommission" not in c.admin.commands()


def test_a_failed_probe_is_retried_at_the_next_pass_even_with_nothing_changed() -> None:
    c = Cluster3()
    first = c.run()
    status = {"initialized": True, "nodes": [n.to_status() for n in first.kaiwu.nodes or ()]}
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=3, update="rev2"))  # forces a probe
    c.admin.failing.add("node status --decommission")
    p = c.run(now=NOW + 1, status=status)
    assert ("NodeStatusUnknown", "kwbase node status failed (retrying in 1s): "
            "node status --decommission: connection refused") in p.not_ready
    c.admin.failing.clear()
    c.world.put(k.STATEFUL_SET, statefulset(3, partition=3))
    c.run(now=NOW + 2, status=status)
    assert c.admin.commands().count("node status --decommission") == 3


def test_every_node_without_a_pod_is_named() -> None:
    c = Cluster3()
    c.world.kwdb += [kw_node(4, f"{NAME}-3"), kw_node(5, f"{NAME}-4")]
    p = c.run()
    assert ("NodesWithoutPods", f"KaiwuDB nodes whose pod is gone: 4 ({NAME}-3), "
            f"5 ({NAME}-4)") in p.not_ready


def test_versions_are_read_from_image_tags_even_behind_a_registry_port() -> None:
    pods = {f"{NAME}-0": running(0), f"{NAME}-1": running(1), f"{NAME}-2": running(2)}
    pods[f"{NAME}-0"]["spec"]["containers"][0]["image"] = "registry.local:5000/kwdb/kwdb:3.2.0"
    pods[f"{NAME}-1"]["spec"]["containers"][0]["image"] = "registry.local:5000/kwdb/kwdb"
    pods[f"{NAME}-2"]["spec"]["containers"].insert(0, {"name": "init", "image": "busybox:1.0"})
    assert "3.2.0" in version_change_problem("3.1.0", pods)
    assert version_change_problem("3.2.0", pods) == ""


def test_our_own_template_writes_are_not_someone_elses_drift() -> None:
    c = rolling_cluster(partition=2)
    sts = c.sts()
    sts["metadata"]["managedFields"] = [
        {"manager": "kaiwu-reconciler", "fieldsV1": {"f:spec": {"f:template": {}}}}]
    c.world.put(k.STATEFUL_SET, sts)
    assert c.run(version="3.2.1").live.partition == 1
    sts["metadata"]["managedFields"] += [
        {"manager": "kubectl-edit", "fieldsV1": {"f:spec": {"f:template": {}}}},
        {"manager": "helm", "fieldsV1": {"f:spec": {"f:template": {}}}}]
    c.world.put(k.STATEFUL_SET, sts)
    p = c.run(version="3.2.1")
    assert "the pod template was changed by kubectl-edit, helm: that is drift" in text(
        p.progressing)


def test_a_rollout_names_every_node_that_is_not_live() -> None:
    c = rolling_cluster(partition=2)
    c.kaiwu(0, live=False)
    c.kaiwu(1, live=False)
    p = c.run(version="3.2.1")
    assert "next pod waits: KaiwuDB nodes not live: 1, 2" in text(p.progressing)


def test_a_rollout_during_a_scale_out_checks_only_the_statefulsets_pods() -> None:
    c = rolling_cluster(partition=2)
    p = c.run(replicas=4, version="3.2.1")  # dev-3 is not made yet
    assert p.live.partition == 1


def test_a_claim_the_cache_lacks_is_read_from_the_api() -> None:
    c = Cluster3()
    view, kube = FakeView(c.world), cast(KubeClient, Kube(c.world))
    assert claim_of(view, kube, NS, f"{NAME}-1") == c.world.find(k.PVC, NS, f"data-{NAME}-1")

    class Empty(FakeView):
        def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
            return None

    assert claim_of(Empty(c.world), kube, NS, f"{NAME}-1") is not None
    cached = copy.deepcopy(c.world.find(k.PVC, NS, f"data-{NAME}-1"))
    del c.world.objects[("PersistentVolumeClaim", NS, f"data-{NAME}-1")]

    class Cached(FakeView):
        def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
            return cached

    assert claim_of(Cached(c.world), kube, NS, f"{NAME}-1") == cached, "the cache is enough"


def test_a_rollout_waits_while_a_scale_in_runs() -> None:
    c = rolling_cluster(partition=3)
    p = c.run(replicas=2, version="3.2.1")
    assert p.live.partition == 3
    assert "next pod waits: a scale-in is in progress" in text(p.progressing)


def test_a_scale_in_does_not_start_beside_a_pod_that_is_not_ready() -> None:
    # KaiwuDB still counts the node live (its readiness probe fails, or its process died
    # seconds ago): draining another node beside it would be a second disruption.
    c = Cluster3()
    c.world.put(k.POD, pod(1, "n1", ready=False))
    p = c.run(replicas=2)
    assert "decommission" not in c.admin.commands()
    assert p.kaiwu.operation is None and p.live.replicas == 3
    assert p.progressing == [("ScaleInWaiting", f"pods are down: {NAME}-1")]
    assert POLL in p.requeue


def test_a_drain_under_way_is_polled_from_another_pod_than_the_one_leaving() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    for i in (0, 1):
        c.world.put(k.POD, pod(i, f"n{i}", ready=False))  # kwbase runs, readiness fails
    c.run(replicas=2, status=scale_in_status())
    asked = {(command, pod_) for command, pod_, _ in c.admin.asked}
    assert ("decommission", f"{NAME}-0") in asked
    assert not any(pod_ == f"{NAME}-2" for command, pod_ in asked if command != "node status"
                   " --decommission")


def test_a_scale_out_cancel_waits_for_a_pod_that_runs_kwbase() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    for i in range(3):
        c.world.put(k.POD, pod(i, ""))
    p = c.run(replicas=3, status=scale_in_status())
    assert p.kaiwu.operation is not None and "recommission" not in c.admin.commands()
    assert ("ScalingIn", "recommission waits for a pod that runs kwbase") in p.not_ready
    assert POLL in p.requeue


class StaleClaims(FakeView):
    """The watch cache, still showing claim data-dev-3 with the uid it had before."""

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        found = super().get(kind, namespace, name)
        if found is not None and kind.kind == "PersistentVolumeClaim":
            found["metadata"]["uid"] = "an-older-claim"
        return found


def test_a_strays_claim_is_deleted_only_as_it_was_judged() -> None:
    """A claim of the same name made since (another uid) is not the one judged empty."""
    c = stray_cluster()
    c.world.kwdb[3] = kw_node(4, f"{NAME}-3", live=False, decommissioning=True)
    c.lifecycle = Lifecycle(step_context(Kube(c.world), StaleClaims(c.world), metrics=c.metrics,
                                         admin_factory=lambda *_: c.admin))  # type: ignore[arg-type]
    c.run()
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-3") not in c.world.writes
    assert c.world.find(k.PVC, NS, f"data-{NAME}-3") is not None


def test_once_our_write_shows_the_memory_ends_and_later_changes_win() -> None:
    memory = StatusMemory(grace_s=5.0)
    decided = new_pass(status={"initialized": False})
    decided.kaiwu.initialized = True
    memory.save(decided)
    arrived = new_pass(now=NOW + 1, status={"initialized": True})
    arrived.obj["metadata"]["resourceVersion"] = "2"
    memory.recall(arrived)
    assert arrived.kaiwu.initialized
    reset = new_pass(now=NOW + 2, status={"initialized": False})  # someone else's change
    reset.obj["metadata"]["resourceVersion"] = "3"
    memory.recall(reset)
    assert not reset.kaiwu.initialized


def test_the_lifecycle_step_runs_for_a_valid_cluster_that_is_not_paused_or_halted() -> None:
    lifecycle = Cluster3().lifecycle
    assert lifecycle.wanted(new_pass())
    assert not lifecycle.wanted(new_pass(paused=True))
    halted = new_pass()
    halted.halted = True
    assert not lifecycle.wanted(halted)
    invalid = new_pass()
    invalid.cluster = None
    assert not lifecycle.wanted(invalid)


def test_every_wanted_node_recommissioned_at_once_is_named() -> None:
    c = Cluster3()
    c.kaiwu(1, decommissioning=True)
    c.kaiwu(2, decommissioning=True)
    p = c.run()
    assert ("recommission", f"{NAME}-0", (2, 3)) in c.admin.asked
    assert p.actions[0].message.startswith(
        f"KaiwuDB node(s) 2, 3 of wanted pods ({NAME}-1, {NAME}-2) were decommissioning")


def test_every_stray_is_named_and_a_claim_already_going_is_left_alone() -> None:
    c = stray_cluster()
    c.world.kwdb.append(kw_node(5, f"{NAME}-4", live=False))
    p = c.run(startMode="single-replica")
    assert f"KaiwuDB node(s) 4, 5 of pod(s) {NAME}-3, {NAME}-4 beyond" in text(p.stalled)
    p = c.run()
    assert p.events[0][2].endswith("their claims go once no replica is left on them")
    c = stray_cluster()
    c.world.kwdb[3] = kw_node(4, f"{NAME}-3", live=False, decommissioning=True)
    going = claim(3, "n3")
    going["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    c.world.put(k.PVC, going)
    c.run()
    assert "decommission" not in c.admin.commands(), "no replica count asked for it"
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-3") not in c.world.writes


def test_versions_are_read_from_short_image_names_and_a_capital_v() -> None:
    pods = {f"{NAME}-0": running(0)}
    pods[f"{NAME}-0"]["spec"]["containers"][0]["image"] = "kwdb:3.2.0"
    assert "3.2.0" in version_change_problem("3.1.0", pods)
    assert version_tuple("V3.2.1") == (3, 2, 1)


def test_a_partition_patch_that_meets_a_conflict_is_tried_again_later() -> None:
    c = rolling_cluster(partition=2)

    class Conflicting(Kube):
        def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
                  subresource: str = "") -> Obj:
            raise ApiError(409, "Conflict", "the object has been modified")

    c.lifecycle.rollouts.kube = Conflicting(c.world)  # type: ignore[assignment]
    p = c.run(version="3.2.1")
    assert p.requeue.count(POLL) >= 2

    class Refusing(Kube):
        def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
                  subresource: str = "") -> Obj:
            raise ApiError(422, "Invalid", "spec.updateStrategy: Invalid value")

    c.lifecycle.rollouts.kube = Refusing(c.world)  # type: ignore[assignment]
    with pytest.raises(ApiError):
        c.run(version="3.2.1")


def test_a_rollout_waits_while_the_node_status_is_unknown_and_says_drift_is_repaired() -> None:
    c = rolling_cluster(partition=2)
    c.admin.failing.add("node status --decommission")
    p = c.run(version="3.2.1")
    assert "next pod waits: KaiwuDB node status unknown" in text(p.progressing)
    c = rolling_cluster(partition=2)
    sts = c.sts()
    sts["metadata"]["managedFields"] = [
        {"manager": "kubectl-edit", "fieldsV1": {"f:spec": {"f:template": {}}}}]
    c.world.put(k.STATEFUL_SET, sts)
    p = c.run(version="3.2.1")
    assert text(p.progressing).endswith(
        "the pod template was changed by kubectl-edit: that is drift, repaired rather than "
        "rolled out")


def test_a_draining_node_with_its_status_unknown_keeps_the_scale_in_going() -> None:
    c = Cluster3()
    c.kaiwu(2, decommissioning=True)
    c.admin.failing.add("node status --decommission")
    p = c.run(replicas=2, status=scale_in_status())
    assert p.live.replicas == 3 and p.kaiwu.operation is not None
    assert ("ScalingIn", f"scaling in 3 -> 2: decommissioning KaiwuDB node 3 ({NAME}-2)") in \
        p.progressing


def test_a_scale_in_needs_a_pod_that_runs_kwbase_to_ask() -> None:
    c = Cluster3()
    assert c.lifecycle.scaling.start_guard(
        c.world.kwdb, c.admin, {}, f"{NAME}-2", []  # type: ignore[arg-type]
    ) == Wait("ScaleInWaiting", "no pod runs kwbase")


def test_a_recommission_of_wanted_nodes_says_why() -> None:
    c = Cluster3()
    c.kaiwu(1, decommissioning=True)
    p = c.run()
    assert p.events[0][2].endswith("recommissioned so they hold replicas again")


def test_each_decommissioned_strays_claim_is_looked_at_past_one_already_going() -> None:
    c = stray_cluster()
    c.world.kwdb[3] = kw_node(4, f"{NAME}-3", live=False, decommissioning=True)
    c.world.kwdb.append(kw_node(5, f"{NAME}-4", live=False, decommissioning=True))
    going = claim(3, "n3")
    going["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    c.world.put(k.PVC, going)
    c.world.put(k.PVC, claim(4, "n4"))
    c.run()
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-4") in c.world.writes
    assert ("delete", "PersistentVolumeClaim", f"data-{NAME}-3") not in c.world.writes


def test_lifecycle_commands_go_through_the_api_exec_with_the_configured_time_out() -> None:
    """StepContext.admin with its default factory: kwbase runs in the cluster's pods through the
    API's exec, secure as the cluster is, and may take exec_timeout_s."""
    seen: list[tuple[str, str, list[str], float]] = []

    class Exec:
        def exec(self, namespace: str, pod: str, container: str, command: list[str],
                 timeout: float = 60.0) -> tuple[str, str, int]:
            seen.append((namespace, pod, command, timeout))
            return "", "", 0

    cluster = Cluster.from_object(apply_defaults({
        "apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {"version": "3.2.1", "replicas": 3, "tls": {"enabled": True}}}))
    ctx = StepContext(kube=cast(KubeClient, Exec()), view=cast(Any, None),
                      settings=Settings(exec_timeout_s=12.5), metrics=Metrics(),
                      events=cast(Any, None))

    ctx.admin(cluster).drain("orders-1")

    assert seen == [("shop", "orders-1", ["/kaiwudb/bin/kwbase", "node", "drain",
                                          "--host=localhost:26257",
                                          "--certs-dir=/kaiwudb/certs"], 12.5)]


# ---- nodes KaiwuDB no longer knows the address of ---------------------------------------------

def long_gone_node(node_id: int, down_for_s: float) -> NodeStatus:
    """A node id as `node status` shows it once KaiwuDB forgot its descriptor: NULL address,
    not live, not available, its liveness record last gossiped `down_for_s` ago."""
    return dataclasses.replace(
        kw_node(node_id, "x", live=False), address="NULL", sql_address="NULL", build="NULL",
        start_mode="NULL", updated_at=datetime.fromtimestamp(NOW - down_for_s, UTC))


def test_a_node_kaiwudb_forgot_the_address_of_is_decommissioned_so_nothing_waits_for_it() -> None:
    """A store replaced while the reconciler was away for hours: its old node id is down and
    KaiwuDB no longer knows its address, so no pod can be paired with it. It would hold every
    scale-in and rollout for ever; it is decommissioned instead."""
    c = Cluster3()
    c.world.kwdb.append(long_gone_node(7, down_for_s=3 * 3600))

    p = c.run()

    assert ("decommission", f"{NAME}-0", (7,)) in c.admin.asked
    assert [a.action for a in p.actions] == ["LongGoneNodeDecommissioned"]
    assert c.counted("lifecycle_actions", action="decommission-long-gone-node") == 1


def test_a_node_without_an_address_that_is_available_or_recent_is_left_alone() -> None:
    """A gateway restarted moments ago can lack a live node's descriptor; the liveness record
    still shows that node available. And a node down for minutes is not long gone."""
    for shown in (dataclasses.replace(long_gone_node(7, 3 * 3600), is_available=True),
                  long_gone_node(8, down_for_s=600)):
        c = Cluster3()
        c.world.kwdb.append(shown)
        c.run()
        assert "decommission" not in c.admin.commands(), shown


def test_a_single_replica_cluster_says_it_cannot_retire_a_long_gone_node() -> None:
    c = Cluster3()
    c.world.kwdb.append(long_gone_node(7, down_for_s=3 * 3600))
    p = c.run(startMode="single-replica")
    assert "decommission" not in c.admin.commands()
    assert [r for r, _ in p.stalled] == ["LongGoneNodes"]


def test_a_single_replica_cluster_with_its_first_node_down_says_the_whole_cluster_is_down(
) -> None:
    """KWDB's single-replica mode keeps every range on node 1 (replicate_queue.go:248-250):
    with it down, every node turns unavailable, and status says why."""
    c = Cluster3()
    for i in range(3):
        c.kaiwu(i, available=False)
    c.kaiwu(0, live=False)
    p = c.run(startMode="single-replica")
    (_, message), = [r for r in p.not_ready if r[0] == "NodesNotLive"]
    assert message.startswith("KaiwuDB nodes not live: 1 (")
    assert "keeps every range, system ranges included, on node 1" in message
    assert "whole cluster is unavailable" in message
    c = Cluster3()
    c.kaiwu(0, live=False)
    p = c.run()
    assert "single-replica" not in str(p.not_ready), "multi-replica: nothing of the kind"
