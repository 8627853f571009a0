"""Stories: the chaos soak's invariant checker (tests/support/chaos.py) catches each kind of
break, and lets the acts the policy allows pass. No test world: the samples, audit lines and
decommissions are made up here, as the Observer, the apiserver and the simulated KaiwuDB would
record them, so a soak that reports 0 breaks is known to be able to report one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tests.support.chaos import (
    STS_CONTROLLER,
    ClusterPlan,
    ClusterSample,
    Decommission,
    DecommissionLog,
    Invariants,
    Ledger,
    NodeLoss,
    Observer,
    Sample,
)
from tests.world.controlplane import ControlPlane

NS = "soak"
RECONCILER = f"system:serviceaccount:{NS}:kaiwu-reconciler"
PLANS = (ClusterPlan("alpha", 3, replace_lost_volumes=True),
         ClusterPlan("bravo", 3, replace_lost_volumes=False))
T0 = 1_000_000.0  # the act happens at T0 + 30


@dataclass
class Plane:
    """The one thing Invariants reads from a ControlPlane: its audit log."""

    audit_log_path: Path


def state(ready: set[int], *, replicas: int = 3, paused: bool = False,
          claims_gone: tuple[int, ...] = ()) -> ClusterSample:
    return ClusterSample(
        ready=frozenset(ready), sts_replicas=replicas, spec_replicas=replicas,
        paused_seen=paused,
        claims={i: (f"uid-{i}", False) for i in range(replicas) if i not in claims_gone},
        claim_nodes={f"data-alpha-{i}": f"node-{i}" for i in range(replicas)})


class Story:
    """An Invariants over a made-up timeline: samples every 0.5 s from T0 to T0 + 60."""

    def __init__(self, tmp: Path, **changes: ClusterSample) -> None:
        self.audit = tmp / "audit.log"
        self.audit.write_text("")
        self.observer = Observer(k8s.ApiClient(), NS, [p.name for p in PLANS], 0.5)
        self.decommissions = DecommissionLog()
        self.ledger = Ledger()
        self.invariants = Invariants(plane(self.audit), NS, RECONCILER, PLANS,
                                     self.observer, self.decommissions, self.ledger, 10.0,
                                     verbose=False)
        self.timeline(T0, T0 + 60, alpha=state({0, 1, 2}), bravo=state({0, 1, 2}))

    def timeline(self, start: float, end: float, **clusters: ClusterSample) -> None:
        """From `start` to `end` the named clusters look like this (others unchanged)."""
        at = start
        while at < end:
            old = self.observer.last_before(at)
            merged = dict(old.clusters) if old else {}
            merged.update(clusters)
            self.observer.samples = [s for s in self.observer.samples if s.at != at]
            self.observer.samples.append(Sample(at, merged))
            self.observer.samples.sort(key=lambda s: s.at)
            at += 0.5

    def audit_line(self, at: float, user: str, verb: str, resource: str, name: str,
                   sub: str = "", uri: str = "") -> None:
        event: dict[str, Any] = {
            "stage": "ResponseComplete", "user": {"username": user}, "verb": verb,
            "objectRef": {"resource": resource, "namespace": NS, "name": name,
                          **({"subresource": sub} if sub else {})},
            "responseStatus": {"code": 200}, "requestURI": uri,
            "requestReceivedTimestamp": datetime.fromtimestamp(at, UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ")}
        with self.audit.open("a") as fh:
            fh.write(json.dumps(event) + "\n")

    def breaks(self) -> list[str]:
        self.invariants.check(settle_s=0.0)
        return [b.invariant for b in self.invariants.breaks]


def plane(path: Path) -> ControlPlane:
    return Plane(path)  # type: ignore[return-value]


def test_a_pod_deleted_while_another_has_been_down_for_the_window_is_a_break(
        tmp_path: Path) -> None:
    story = Story(tmp_path)
    story.timeline(T0 + 10, T0 + 60, alpha=state({0, 1}))  # alpha-2 down from T0 + 10
    story.audit_line(T0 + 30, RECONCILER, "delete", "pods", "alpha-1")
    assert story.breaks() == ["one disruption at a time"]


def test_the_statefulset_controller_rolling_a_pod_counts_as_the_reconcilers_act(
        tmp_path: Path) -> None:
    story = Story(tmp_path)
    story.timeline(T0 + 10, T0 + 60, bravo=state({1, 2}))
    story.audit_line(T0 + 30, STS_CONTROLLER, "delete", "pods", "bravo-2")
    assert story.breaks() == ["one disruption at a time"]


def test_an_act_on_a_view_younger_than_the_window_or_finishing_a_failover_is_allowed(
        tmp_path: Path) -> None:
    story = Story(tmp_path)
    # alpha-2 went down only 4 s before the act: the reconciler may not have seen it yet.
    story.timeline(T0 + 26, T0 + 60, alpha=state({0, 1}))
    story.audit_line(T0 + 30, RECONCILER, "delete", "pods", "alpha-1")
    # bravo-0 has been down long, but bravo-1's claim is gone: ClaimGone finishes a failover.
    story.timeline(T0 + 5, T0 + 60, bravo=state({1, 2}, claims_gone=(1,)))
    story.audit_line(T0 + 30, RECONCILER, "delete", "pods", "bravo-1")
    # An act of the harness's admin is never the reconciler's.
    story.audit_line(T0 + 30, "admin", "delete", "pods", "bravo-2")
    assert story.breaks() == []
    assert story.invariants.checked["one disruption at a time"] == 1
    assert story.invariants.checked["ClaimGone follow-up (exempt)"] == 1


def test_a_claim_is_deleted_only_with_replace_lost_volumes_and_its_node_lost_long_enough(
        tmp_path: Path) -> None:
    story = Story(tmp_path)
    story.ledger.node_losses.append(NodeLoss("node-1", T0 + 10))  # 20 s before: allowed
    story.ledger.node_losses.append(NodeLoss("node-2", T0 + 48))  # 2 s before: too early
    story.audit_line(T0 + 30, RECONCILER, "delete", "persistentvolumeclaims", "data-alpha-1")
    story.audit_line(T0 + 50, RECONCILER, "delete", "persistentvolumeclaims", "data-alpha-2")
    story.audit_line(T0 + 50, RECONCILER, "delete", "persistentvolumeclaims", "data-bravo-0")
    assert story.breaks() == ["claims deleted only by policy"] * 2


def test_a_live_node_is_decommissioned_only_as_a_scale_ins_target(tmp_path: Path) -> None:
    story = Story(tmp_path)
    story.timeline(T0, T0 + 60, alpha=state({0, 1, 2, 3}, replicas=4))
    story.timeline(T0 + 20, T0 + 60, alpha=ClusterSample(
        frozenset({0, 1, 2, 3}), 4, 3, False, {}, {}))  # spec says 3: alpha-3 goes
    pods = {1: "alpha-0", 2: "alpha-1", 4: "alpha-3", 5: "alpha-2"}
    # T0 + 19.9: the reconciler read the new spec before the Observer sampled it.
    for at, node_id, live in ((T0 + 19.9, 4, True), (T0 + 31, 2, False), (T0 + 32, 1, True)):
        story.decommissions.add(Decommission(at, "alpha", (node_id,),
                                             dict.fromkeys(pods, True) | {node_id: live},
                                             dict.fromkeys(pods, False), pods))
    assert story.breaks() == ["no live node decommissioned"]
    assert story.invariants.acts == {"node ids decommissioned: live": 2,
                                     "node ids decommissioned: dead": 1}


def test_no_write_for_a_paused_cluster_once_its_status_says_paused(tmp_path: Path) -> None:
    story = Story(tmp_path)
    story.ledger.pauses["alpha"] = [[T0 + 10, T0 + 40]]
    story.timeline(T0 + 12, T0 + 60, alpha=state({0, 1, 2}, paused=True))
    story.audit_line(T0 + 11, RECONCILER, "patch", "statefulsets", "alpha")  # before Paused
    story.audit_line(T0 + 20, RECONCILER, "patch", "kaiwuclusters", "alpha", sub="status")
    story.audit_line(T0 + 21, RECONCILER, "create", "pods", "alpha-0", sub="exec",
                     uri="/api/v1/namespaces/soak/pods/alpha-0/exec?command=kwbase&"
                         "command=node&command=status")
    story.audit_line(T0 + 22, RECONCILER, "patch", "statefulsets", "alpha",
                     uri="/apis/apps/v1/namespaces/soak/statefulsets/alpha?fieldManager=k&"
                         "force=true&dryRun=All")  # the drift comparison: changes nothing
    story.audit_line(T0 + 25, RECONCILER, "patch", "services", "alpha-public")
    story.audit_line(T0 + 45, RECONCILER, "patch", "services", "alpha-public")  # resumed
    assert story.breaks() == ["no write while paused"]
