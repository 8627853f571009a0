"""The data a reconcile pass carries: the leaf every step of the reconciler shares.

`Pass` is what one reconcile of one KaiwuCluster knows and decides. The controller
(reconciler.controller) makes one per pass (its `ObjectPass` adds the per-object drift states),
and hands it to each step in turn: the KaiwuDB steps (reconciler.kaiwudb: lifecycle, failover)
read the cluster and record their decisions here, the report step turns it into status, Events
and the requeue delay. Imports only the other leaves (keys, status) and the renderer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from reconciler import status as st
from reconciler.keys import ClusterKey
from reconciler.reasons import (
    DECOMMISSIONING,
    REMOVING,
    ActionName,
    NotReadyReason,
    ProgressingReason,
    ScaleInPhase,
    StalledReason,
)
from renderer.settings import LiveState
from renderer.spec import Cluster

Obj = dict[str, Any]
# Pauses a cluster like spec.paused, without a change to the spec: in an incident there may be
# no time for a git commit and a sync (and Argo CD would revert a hand edit of the spec).
PAUSED_ANNOTATION = "kaiwu.inspur.com/paused"
EventType = Literal["Normal", "Warning"]


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """An object's metadata ({} when it has none, or for no object)."""
    return (obj or {}).get("metadata") or {}


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as the API's timestamp format (whole seconds, UTC)."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class NodeEntry:
    """One KaiwuDB node id as status.nodes lists it: its address, its state (live, not-live or
    decommissioning) and the pod its address names (None for an address that names none)."""

    node_id: int
    address: str
    state: str
    pod: str | None = None

    def to_status(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"nodeId": self.node_id, "address": self.address,
                                 "state": self.state}
        if self.pod:
            entry["pod"] = self.pod
        return entry

    @classmethod
    def from_status(cls, raw: Mapping[str, Any]) -> NodeEntry | None:
        try:
            return cls(int(raw["nodeId"]), str(raw.get("address") or ""),
                       str(raw.get("state") or ""), str(raw["pod"]) if raw.get("pod") else None)
        except (KeyError, TypeError, ValueError):
            return None  # not written by us: ignored, the next probe lists the nodes again


@dataclass(frozen=True)
class ScaleIn:
    """status.operation while a scale-in runs: one node at a time, so a restarted reconciler
    resumes it. phase is Decommissioning (node_id draining) or Removing (the StatefulSet
    shrinks, then the claim of `pod` goes)."""

    replicas: int
    target_replicas: int
    pod: str
    started_at: str
    phase: ScaleInPhase
    node_id: int | None = None

    def to_status(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "ScaleIn", "replicas": self.replicas,
                                 "targetReplicas": self.target_replicas, "pod": self.pod,
                                 "startedAt": self.started_at, "phase": self.phase}
        if self.node_id is not None:
            entry["nodeId"] = self.node_id
        return entry

    @classmethod
    def from_status(cls, raw: Mapping[str, Any] | None) -> ScaleIn | None:
        if not raw:
            return None
        try:
            node_id = int(raw["nodeId"]) if raw.get("nodeId") is not None else None
            # A phase we did not write is read as the safer one: a node id to drain is
            # drained (asking again is harmless), never removed undrained.
            phase: ScaleInPhase = REMOVING if raw.get("phase") == REMOVING or node_id is None \
                else DECOMMISSIONING
            return cls(int(raw["replicas"]), int(raw["targetReplicas"]), str(raw["pod"]),
                       str(raw.get("startedAt") or ""), phase, node_id)
        except (KeyError, TypeError, ValueError):
            return None


@dataclass
class KaiwuStatus:
    """The status fields the KaiwuDB steps (reconciler.kaiwudb) own, read from status at the
    start of a pass and written back by the report step: whether `kwbase init` ran, the node ids
    KaiwuDB counts, the scale-in in progress, and what is failing (for people only: failover
    decides from the cluster, never from it)."""

    initialized: bool = False
    nodes: tuple[NodeEntry, ...] | None = None  # None: never probed
    operation: ScaleIn | None = None
    failures: dict[str, dict[str, Any]] | None = None

    @classmethod
    def read(cls, status: Mapping[str, Any]) -> KaiwuStatus:
        nodes = status.get("nodes")
        entries = None if nodes is None else tuple(
            entry for raw in nodes if isinstance(raw, Mapping)
            and (entry := NodeEntry.from_status(raw)) is not None)
        failures = status.get("failures")
        return cls(bool(status.get("initialized")), entries,
                   ScaleIn.from_status(status.get("operation")),
                   {str(k): dict(v) for k, v in failures.items() if isinstance(v, Mapping)}
                   if isinstance(failures, Mapping) and failures else None)

    def to_fields(self) -> tuple[tuple[str, Any], ...]:
        """The fields for reconciler.status.build (None removes one)."""
        return (("failures", self.failures or None),
                ("initialized", True if self.initialized else None),
                ("nodes", [n.to_status() for n in self.nodes] if self.nodes is not None
                 else None),
                ("operation", self.operation.to_status() if self.operation else None))


@dataclass
class Pass:
    """Everything one reconcile of one cluster knows and decides; the steps fill it in."""

    key: ClusterKey
    obj: Obj
    now: float
    previous: dict[str, Any]
    cluster: Cluster | None = None
    desired: list[Obj] = field(default_factory=list)
    # The spec's generation has not been fully applied yet: apply it whatever the drift policy.
    sync: bool = False
    # spec.drift.ignore hands the StatefulSet's replicas to someone else (an autoscaler): no
    # scale-in takes them down (set by the spec step from the cluster's ignore rules).
    replicas_owned_elsewhere: bool = False
    # Every desired object exists as rendered (or is stalled): the generation is observed.
    complete: bool = True
    stalled: list[tuple[StalledReason, str]] = field(default_factory=list)
    progressing: list[tuple[ProgressingReason, str]] = field(default_factory=list)
    actions: list[st.Action] = field(default_factory=list)
    events: list[tuple[EventType, str, str]] = field(default_factory=list)
    inventory: set[str] = field(default_factory=set)
    requeue: list[float] = field(default_factory=list)
    halted: bool = False
    # Lifecycle and failover steps: why the cluster is not Ready although its pods may be
    # (reason, message), and the status fields they own, read from `previous`.
    not_ready: list[tuple[NotReadyReason, str]] = field(default_factory=list)
    # Conditions a step decides on its own, apart from Ready (VolumesExpanded): written as they
    # are; one a step did not decide this pass stays as it was (reconciler.status.build).
    conditions: list[st.Condition] = field(default_factory=list)
    kaiwu: KaiwuStatus = field(init=False)
    # What the certificates and lifecycle steps decide for the StatefulSet (replicas during a
    # scale-in, the rollout partition, the certificates' hash): rendered by the render step.
    live: LiveState = field(default_factory=LiveState)

    def __post_init__(self) -> None:
        self.kaiwu = KaiwuStatus.read(self.previous)

    @property
    def paused(self) -> bool:
        """spec.paused, or the PAUSED_ANNOTATION set to "true" (either one stops every action;
        the pass still observes and reports)."""
        return self.cluster is not None and (self.cluster.paused or self.paused_by_annotation)

    @property
    def paused_by_annotation(self) -> bool:
        return (meta(self.obj).get("annotations") or {}).get(PAUSED_ANNOTATION) == "true"

    @property
    def policy(self) -> str:
        return self.cluster.drift_policy if self.cluster is not None else "enforce"

    @property
    def generation(self) -> int | None:
        value = (self.obj.get("metadata") or {}).get("generation")
        return int(value) if value is not None else None

    def requeue_in(self, seconds: float) -> None:
        self.requeue.append(max(seconds, 0.05))

    def act(self, action: ActionName, target: str, message: str, *,
            event: EventType | None = "Normal", reason: str = "") -> None:
        """Record an action for status.lastActions and (unless event is None) an Event."""
        self.actions.append(st.Action(rfc3339(self.now), action, target, message))
        if event is not None:
            self.events.append((event, reason or action, f"{target}: {message}"))


def with_owner(obj: Obj, cluster: Obj) -> Obj:
    """A copy of `obj` owned by the KaiwuCluster (garbage-collected with it)."""
    md = meta(cluster)
    owned = dict(obj)
    owned["metadata"] = {**obj["metadata"], "ownerReferences": [{
        "apiVersion": cluster["apiVersion"], "kind": cluster["kind"], "name": md["name"],
        "uid": md["uid"], "controller": True, "blockOwnerDeletion": True}]}
    return owned
