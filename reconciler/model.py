"""The data a reconcile pass carries: the leaf every step of the reconciler shares.

`Pass` is what one reconcile of one KaiwuCluster knows and decides. The controller
(reconciler.controller) makes one per pass (its `ObjectPass` adds the per-object drift states),
and hands it to each step in turn: the KaiwuDB steps (reconciler.kaiwudb: lifecycle, failover)
read the cluster and record their decisions here, the report step turns it into status, Events
and the requeue delay. Imports only the other leaves (keys, status) and the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from reconciler import status as st
from reconciler.keys import ClusterKey
from renderer.spec import Cluster

Obj = dict[str, Any]
EventType = Literal["Normal", "Warning"]


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as the API's timestamp format (whole seconds, UTC)."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    # Every desired object exists as rendered (or is stalled): the generation is observed.
    complete: bool = True
    wrote: bool = False
    stalled: list[tuple[str, str]] = field(default_factory=list)
    progressing: list[tuple[str, str]] = field(default_factory=list)
    actions: list[st.Action] = field(default_factory=list)
    events: list[tuple[EventType, str, str]] = field(default_factory=list)
    inventory: set[str] = field(default_factory=set)
    requeue: list[float] = field(default_factory=list)
    halted: bool = False
    # Lifecycle and failover steps: why the cluster is not Ready although its pods may be
    # (reason, message), and the status fields they own (initialized, nodes, operation,
    # failures; None removes one).
    not_ready: list[tuple[str, str]] = field(default_factory=list)
    status_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def paused(self) -> bool:
        return self.cluster is not None and self.cluster.paused

    @property
    def policy(self) -> str:
        return self.cluster.drift_policy if self.cluster is not None else "enforce"

    @property
    def generation(self) -> int | None:
        value = (self.obj.get("metadata") or {}).get("generation")
        return int(value) if value is not None else None

    def requeue_in(self, seconds: float) -> None:
        self.requeue.append(max(seconds, 0.05))

    def act(self, action: str, target: str, message: str, *, event: EventType | None = "Normal",
            reason: str = "") -> None:
        """Record an action for status.lastActions and (unless event is None) an Event."""
        self.actions.append(st.Action(rfc3339(self.now), action, target, message))
        if event is not None:
            self.events.append((event, reason or action, f"{target}: {message}"))
