"""The "observe" step: each desired object against its live copy.

Run by the Controller (reconciler.controller.controller) after "lifecycle" (which may change the
StatefulSet replicas and partition this pass applies). The comparison is offline first
(reconciler.drift.compare, through `ControllerMemory.comparisons`: an object whose live
version, desired hash and rules are those of its last comparison is not compared again); when
it sees drift, a server-side-apply dry run has the last word (the server's own defaults settle
false alarms), remembered per (desired, live) in `ControllerMemory.dry_runs`, so an unchanged
object never costs one again. Drift made only of fields others added (a hand edit adding an
env var or a label) needs no dry run: nothing of what we render differs, so there is no false
alarm for the server to settle, and the repair removes them without an apply.
"""

from __future__ import annotations

from reconciler.controller.objects import ObjectPass, ObjectState
from reconciler.controller.shared import STALE_RECHECK_S, ControllerMemory, made_for
from reconciler.drift.compare import DriftReport, format_report
from reconciler.drift.ignore import IgnoreRule
from reconciler.drift.memo import object_name
from reconciler.kaiwudb.context import StepContext
from reconciler.keys import ObjectRef
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import meta, with_owner

# StatefulSet fields the API server refuses to change, and which of them an orphaning delete and
# recreate can change without touching pods or data. A new selector would not match the
# running pods (the new StatefulSet would try to create pods whose names are taken): Stalled.
STS_IMMUTABLE = ("/spec/selector", "/spec/volumeClaimTemplates", "/spec/serviceName",
                 "/spec/podManagementPolicy")


def immutable_changes(report: DriftReport) -> list[str]:
    """The changed fields of a StatefulSet the API server refuses to change in place."""
    return [c.pointer for c in report.changes
            if any(c.pointer == f or c.pointer.startswith(f + "/") for f in STS_IMMUTABLE)]


class ObserveStep:
    """See the module docstring."""

    name = "observe"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory

    def wanted(self, p: ObjectPass) -> bool:
        return True

    def run(self, p: ObjectPass) -> None:
        cluster = p.cluster
        assert cluster is not None
        rules = tuple(IgnoreRule.parse({"pointer": rule.pointer, "kind": rule.kind,
                                        "name": rule.name}) for rule in cluster.drift_ignore)
        for desired in p.desired:
            kind = k.KINDS.get((desired["apiVersion"], desired["kind"]))
            if kind is None:  # pragma: no cover - the renderer emits only kinds kube.py knows
                raise LookupError(f"no API mapping for {desired['apiVersion']} {desired['kind']}")
            ref = ObjectRef.of(desired)
            owned = with_owner(desired, p.obj)
            # The cached object itself (never changed here): a copy of every live object on
            # every pass would cost more than comparing them.
            live = self.ctx.view.peek(kind, ref.namespace, ref.name)
            state = ObjectState(ref, kind, owned, live, rules=rules)
            p.states.append(state)
            ours = self.memory.marks.created(p.key, str(ref))
            if self.memory.marks.in_flight(self.ctx.kube, p.key, str(ref), kind, ref.namespace,
                                           ref.name, live):
                state.stale = True
                p.requeue_in(STALE_RECHECK_S)
            elif live is None:
                served = self.memory.served.served(kind, ref.namespace)
                state.verdict = "missing" if served else "unserved"
                state.made_before = ours
            elif meta(live).get("deletionTimestamp"):
                state.verdict = "terminating"
            elif not made_for(live, p.obj):
                # Not made by this cluster: never applied over, never pruned (report step).
                state.verdict = "foreign"
            else:
                self.judge(p, state)
        self.memory.comparisons.retain(p.key, [object_name(desired) for desired in p.desired])

    def judge(self, p: ObjectPass, state: ObjectState) -> None:
        """In sync, drifted, immutable or rejected: offline first, then the server's word."""
        assert state.live is not None
        rules = state.rules
        compare = self.memory.comparisons.compare
        report = compare(p.key, state.desired, state.live, ignore_rules=rules,
                         settings=self.memory.drift)
        state.report = report
        if not report.drifted:
            return
        if state.kind == k.STATEFUL_SET and immutable_changes(report):
            state.verdict = "immutable"
            state.detail = format_report(report)
            return
        if p.policy == "off" and not p.sync:
            # Nothing will be done or said about it: spend no dry run on it.
            state.verdict = "drifted"
            return
        if others_only(report, self.ctx.settings.field_manager):
            # Only fields another manager added (a hand edit adding an env var or a label):
            # the dry run could settle nothing. Server-side apply keeps others' fields, so
            # the forced apply of ours would give the live object back, every field we
            # render as it is (nothing of ours changed), and the comparison with it would
            # report the same additions (it takes the dry run's values only where we render
            # something). The repair removes them without an apply (RepairStep.write).
            state.verdict = "drifted"
            state.detail = format_report(report)
            return
        dry = self.memory.dry_runs.run(state.desired, state.live)
        if isinstance(dry, ApiError):
            if dry.status == 422 and "Duplicate value" in dry.message and \
                    others_added(report, self.ctx.settings.field_manager):
                # Items others added clash with ours (a Service or container port renumbered
                # by hand keeps its name: from Kubernetes 1.2x the server refuses the duplicate
                # name the merge would hold): the repair removes theirs before it applies. A
                # StatefulSet's immutable fields were judged above, before any dry run.
                state.verdict = "drifted"
                state.clash = True
                state.detail = format_report(report)
                return
            state.verdict = "immutable" if (state.kind == k.STATEFUL_SET
                                            and dry.status == 422) else "rejected"
            state.detail = dry.message
            return
        report = compare(p.key, state.desired, state.live, ignore_rules=rules, dry_run=dry,
                         settings=self.memory.drift)
        state.report = report
        state.verdict = "drifted" if report.drifted else "in-sync"
        if report.drifted:
            state.detail = format_report(report)


def others_only(report: DriftReport, field_manager: str) -> bool:
    """Whether every change of a drifted report is something another manager added."""
    return bool(report.changes) and all(
        c.kind == "added" and field_manager not in c.managers for c in report.changes)


def others_added(report: DriftReport | None, field_manager: str) -> list[str]:
    """Pointers of what another manager added (fields, keyed-list items) to an object we own."""
    return [c.pointer for c in (report.changes if report else ())
            if c.kind == "added" and c.pointer and field_manager not in c.managers]
