"""The controller's records: what a pass knows about each desired object, and what it returns.

`ObjectPass` is the leaf `Pass` (reconciler.model) plus the drift state of every desired object;
the controller (reconciler.controller.controller) makes one per reconcile and its steps fill it in.
`Step` is what each of those steps offers the controller: a name, when it is wanted, and run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from reconciler.drift.compare import DriftReport
from reconciler.drift.ignore import IgnoreRule
from reconciler.kaiwudb.context import StepContext
from reconciler.keys import ObjectRef
from reconciler.kube.kinds import Kind
from reconciler.model import Obj, Pass

Verdict = Literal["in-sync", "missing", "drifted", "terminating", "immutable", "rejected",
                  "unserved", "foreign"]


@dataclass(frozen=True)
class Result:
    """What a pass asks of the runtime: run again after this many seconds (None: only when a
    watch event comes)."""

    requeue_after_s: float | None = None


@dataclass
class ObjectState:
    """One desired object and what the pass found and did about it."""

    ref: ObjectRef
    kind: Kind
    desired: Obj
    live: Obj | None
    verdict: Verdict = "in-sync"
    report: DriftReport | None = None
    detail: str = ""  # the server's words for immutable/rejected, else the drift report
    repaired: bool = False  # written this pass and now as rendered
    undone: bool = False  # written this pass, but the server stored something else
    stale: bool = False  # the cache still shows the version our last write replaced
    rules: tuple[IgnoreRule, ...] = ()  # the cluster's ignore rules (spec.drift.ignore)
    blocked_s: float = 0.0  # a fight's back-off keeps it drifted this long
    # The dry run was refused (422) over items others added: they go before the apply.
    clash: bool = False
    # Missing, though we made it (our create's mark): deleted by someone before our status
    # listed it in the inventory, so its making again is a repair, not a first create.
    made_before: bool = False

    @property
    def outstanding(self) -> bool:
        """Still different from what we render after this pass."""
        return self.verdict in ("missing", "drifted", "immutable", "rejected", "foreign") \
            and not self.repaired


@dataclass
class ObjectPass(Pass):
    """A pass of the controller: the KaiwuDB steps' record plus each desired object's state."""

    states: list[ObjectState] = field(default_factory=list)

    def first_create(self, state: ObjectState) -> bool:
        """Whether a missing object was never made: not listed in the inventory the last status
        recorded, nor made by us since (ObjectState.made_before). Always created, whatever the
        drift policy, and not drift."""
        return state.verdict == "missing" and not state.made_before and \
            str(state.ref) not in set(self.previous.get("inventory") or ())
    # The spec step's verdict, written on the StatefulSet by the render step: the transition
    # facts of the spec this pass applies (reconciler.controller.admission.ACCEPTED_ANNOTATION).
    accepted: str = ""


class Step(Protocol):
    """One named step of a pass: the controller runs `run` when `wanted` holds, in order.
    `always` steps (report) run even after an earlier step halted the pass. The KaiwuDB steps
    (reconciler.kaiwudb) take the leaf `Pass`; an `ObjectPass` is one. Every step is built
    with the controller's one StepContext, its first argument, and keeps it as `ctx`."""

    name: str
    always: bool
    ctx: StepContext

    def wanted(self, p: ObjectPass) -> bool: ...

    def run(self, p: ObjectPass) -> None: ...
