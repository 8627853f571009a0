"""The "repair" and "recreate" steps: drifted and missing objects made as rendered again.

Run by the Controller (reconciler.controller.controller) after "observe", unless paused.
repair: server-side apply, then removal of fields others added (before the apply when what
they added clashes with what we render and the server refuses the merge, e.g. a Service port
renumbered by hand that keeps its name); per drift policy (enforce
repairs; warn and off only report), except that a new generation of the spec is always applied
once (a sync) and objects never created before are always created; an object someone keeps
changing back backs off (reconciler.drift.backoff). recreate: a StatefulSet whose immutable
fields must change is deleted with its pods and claims orphaned; a later pass's repair creates
it again and it adopts them (a new selector cannot be adopted: Stalled, with instructions).
"""

from __future__ import annotations

import logging

from reconciler.controller.conditions import changes_text
from reconciler.controller.objects import ObjectPass, ObjectState
from reconciler.controller.observe import immutable_changes, others_added
from reconciler.controller.shared import SHORT_REQUEUE_S, ControllerMemory
from reconciler.drift.compare import DriftReport, format_report
from reconciler.kaiwudb.context import StepContext
from reconciler.keys import ClusterKey
from reconciler.kube.client import ApiError
from reconciler.model import Obj

log = logging.getLogger(__name__)

# The immutable StatefulSet fields an orphaning delete and recreate can change without touching
# pods or data (a new selector cannot: the running pods would not match it).
STS_RECREATABLE = ("/spec/volumeClaimTemplates", "/spec/serviceName", "/spec/podManagementPolicy")


class RepairStep:
    """Missing and drifted objects (see the module docstring)."""

    name = "repair"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory

    def wanted(self, p: ObjectPass) -> bool:
        return not p.paused

    def run(self, p: ObjectPass) -> None:
        for state in p.states:
            if state.verdict in ("terminating",):
                # An orphaning delete we started is finishing; the next pass recreates it.
                p.progressing.append(("Recreating", f"waiting for {state.ref.short} to be "
                                      "deleted (pods and claims are kept) to recreate it"))
                p.requeue_in(SHORT_REQUEUE_S)
                p.complete = False
                continue
            if state.verdict not in ("missing", "drifted"):
                continue
            first = p.first_create(state)
            drift_repair = not (p.sync or first)
            if drift_repair and p.policy != "enforce":
                continue  # warn and off: reported (or not) by the report step
            if drift_repair:
                wait = self.memory.fights.wait_s(p.key, state.ref)
                if wait > 0:
                    state.blocked_s = wait
                    p.requeue_in(wait)
                    continue
            before = state.live
            try:
                self.write(p.key, state)
            except ApiError as error:
                self.ctx.metrics.errors_total.labels(stage="apply").inc()
                if error.conflict:
                    p.requeue_in(SHORT_REQUEUE_S)
                    p.complete = False
                    continue
                if error.status in (400, 403, 404, 422):
                    state.verdict = "rejected"
                    state.detail = error.message
                    continue
                raise
            self.memory.marks.wrote(p.key, str(state.ref), before, state.live)
            self._after_write(p, state, first, drift_repair)

    def write(self, key: ClusterKey, state: ObjectState) -> None:
        """Make the live object what we render: apply (unless the only differences are fields
        others added), then remove fields others added. Leaves state.live as stored."""
        report = state.report
        others_only = report is not None and state.live is not None and all(
            c.kind == "added" and self.ctx.settings.field_manager not in c.managers
            for c in report.changes)
        live = state.live
        dry: Obj | None = None
        if not others_only:
            # What the server said, before the write, that applying would store ("observe"'s
            # dry run). The comparison after the write is made against it, not against what the
            # apply returned: that would call any result as rendered, even a repair the server
            # (a mutating webhook that skips dry runs, a writer racing ours) undid as it stored.
            predicted = self.memory.dry_runs.cached(state.desired, live) if live is not None \
                else None
            if state.clash and live is not None:
                # What others added clashes with what we render (the server refused the dry
                # run): apply alone can never get past it, so it goes first.
                live = self._remove(live, others_added(
                    report, self.ctx.settings.field_manager)) or live
            live = self.memory.repairer.apply(state.desired)
            dry = predicted or live
        assert live is not None

        def judge(obj: Obj, dry_run: Obj | None) -> DriftReport:
            return self.memory.comparisons.compare(key, state.desired, obj,
                                                   ignore_rules=state.rules, dry_run=dry_run,
                                                   settings=self.memory.drift)
        after = judge(live, dry or self.memory.dry_runs.cached(state.desired, live))
        added = [c.pointer for c in after.changes if c.kind == "added" and c.pointer]
        if added:
            patched = self._remove(live, added)
            if patched is not None:
                live = patched
                after = judge(live, dry)
        state.live = live
        state.repaired = not after.drifted
        if dry is not None and not after.drifted:
            # Applying the same object to what the server now has would change nothing. (Not
            # when the write was undone: the next pass asks the server again.)
            self.memory.dry_runs.remember(state.desired, live, live)
        if after.drifted:
            state.verdict = "drifted"
            state.report = after
            state.detail = format_report(after)
            state.undone = True
            log.warning("object still differs after repair: %s", state.detail)

    def _remove(self, live: Obj, pointers: list[str]) -> Obj | None:
        """Remove fields others added (the Repairer's JSON patch with `test` operations)."""
        try:
            return self.memory.repairer.remove_fields(live, pointers)
        except ApiError as error:
            if error.status == 422:
                # A `test` failed: the object changed since we looked. Look again.
                raise ApiError(409, "Conflict", error.message) from error
            raise

    def _after_write(self, p: ObjectPass, state: ObjectState, first: bool,
                     drift_repair: bool) -> None:
        target = state.ref.short
        if first:
            p.act("Created", target, "created", event=None)
            return
        if not drift_repair:
            p.act("Applied", target, "applied the spec's new generation", event=None)
            return
        if state.undone:
            # Written, but stored otherwise: not announced as repaired (the report step tells
            # the drift that stays). It counts as a repair for the fight's back-off, so a server
            # that undoes every repair is not written to on every pass.
            what = "undone by the API server as it was stored: " + changes_text(state.report)
        else:
            self.ctx.metrics.drift_repaired_total.labels(kind=state.ref.kind).inc()
            what = "recreated (it had been deleted)" if state.verdict == "missing" else \
                "repaired: " + changes_text(state.report)
            p.act("DriftRepaired", target, what)
            self.memory.notices.clear(p.key, state.ref)
        fight = self.memory.fights.record_repair(p.key, state.ref, what)
        if fight.fighting:
            wait = max(0.0, fight.blocked_until - p.now)
            p.events.append(("Warning", "DriftFight", (
                f"{target} keeps changing back ({len(fight.repairs)} repairs within "
                f"{self.ctx.settings.fight_window_s:g}s): next repair not before {wait:.0f}s")))
            p.requeue_in(wait)


class RecreateStep:
    """StatefulSets whose immutable fields must change (see the module docstring)."""

    name = "recreate"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory

    def wanted(self, p: ObjectPass) -> bool:
        return not p.paused and any(s.verdict == "immutable" for s in p.states)

    def run(self, p: ObjectPass) -> None:
        for state in p.states:
            if state.verdict != "immutable" or state.live is None:
                continue
            fields = immutable_changes(state.report) if state.report else []
            recreatable = bool(fields) and all(
                any(f == r or f.startswith(r + "/") for r in STS_RECREATABLE) for f in fields)
            if not recreatable:
                p.stalled.append(("ImmutableField", immutable_advice(state, fields)))
                continue
            if not (p.sync or p.policy == "enforce"):
                continue
            try:
                self.memory.repairer.delete(state.kind, state.live, propagation="Orphan")
                self.memory.marks.wrote(p.key, str(state.ref), state.live)
            except ApiError as error:
                if error.conflict:  # the uid precondition failed: a successor is there
                    p.requeue_in(SHORT_REQUEUE_S)
                    continue
                raise
            p.complete = False
            state.repaired = True
            p.progressing.append(("Recreating", f"recreating {state.ref.short}: "
                                  f"{', '.join(fields)} changed"))
            p.requeue_in(SHORT_REQUEUE_S)
            p.act("Recreating", state.ref.short, (
                f"{', '.join(fields)} cannot change in place: deleted with its pods and claims "
                "orphaned (they keep running and keep their data); it is recreated at once and "
                "adopts them"))


def immutable_advice(state: ObjectState, fields: list[str]) -> str:
    """What a person can do about a change the reconciler will not make by itself."""
    which = ", ".join(fields) or "an immutable field"
    text = (f"{state.ref.short}: {which} cannot be changed in place"
            f"{': ' + state.detail if state.detail and not fields else ''}")
    orphan = f"kubectl delete statefulset {state.ref.name} --cascade=orphan"
    selector = ((state.desired.get("spec") or {}).get("selector") or {}).get(
        "matchLabels") or {}
    old = (((state.live or {}).get("spec") or {}).get("selector") or {}).get(
        "matchLabels") or {}
    if any(f.startswith("/spec/selector") for f in fields) and selector and old:
        # The recreated StatefulSet adopts only pods its new selector matches.
        wanted = " ".join(f"{key}={value}" for key, value in sorted(selector.items())
                          if old.get(key) != value)
        current = ",".join(f"{key}={value}" for key, value in sorted(old.items()))
        return (f"{text}: the running pods would not match the new selector. To apply it, "
                f"delete the StatefulSet keeping its pods ({orphan}), give them the new "
                f"labels (kubectl label pods -l {current} {wanted}); the reconciler then "
                "recreates it and the new one adopts them")
    return (f"{text}. To apply it, delete the StatefulSet keeping its pods ({orphan}); the "
            "reconciler recreates it and the new one adopts them")
