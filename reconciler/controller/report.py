"""The "report" step: status per kstatus (written only when it changed), Events on transitions
and for actions, drift announced once.

Also sets the cluster's kaiwu_cluster_* gauges (node counts, conditions) from what it reports.
Run last by the Controller (reconciler.controller.controller), even after a step halted the pass.
What the conditions say is decided by reconciler.controller.conditions (pure functions).
"""

from __future__ import annotations

import logging
from typing import Any

from reconciler import status as st
from reconciler.controller.conditions import changes_text, observed
from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import SHORT_REQUEUE_S, STALE_RECHECK_S, ControllerMemory
from reconciler.kaiwudb.context import StepContext
from reconciler.kube.client import ApiError
from reconciler.model import EventType, meta, rfc3339

log = logging.getLogger(__name__)


class ReportStep:
    """See the module docstring."""

    name = "report"
    always = True

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory

    def wanted(self, p: ObjectPass) -> bool:
        return True

    def run(self, p: ObjectPass) -> None:
        # Actions taken together make one Event per kind of action, not one per object.
        created = [a.target for a in p.actions if a.action == "Created"]
        if created:
            p.events.append(("Normal", "Created", "created " + ", ".join(created)))
        applied = [a.target for a in p.actions if a.action == "Applied"]
        if applied:
            p.events.append(("Normal", "Applied", f"applied generation {p.generation} to "
                             + ", ".join(applied)))
        self._drift_events(p)
        p.actions = self.memory.pending.take(p.key) + p.actions
        if self.memory.marks.stale(p.key, "status", p.obj):
            # Our last status write is not in the cache yet: judging transitions against the
            # old status would write and announce them twice. The next pass reports.
            if p.actions:
                self.memory.pending.keep(p.key, p.actions)
            p.requeue_in(STALE_RECHECK_S)
            self._emit(p)
            return
        self.note_stalls(p)
        summary = observed(p)
        new = st.build(p.previous, summary, rfc3339(p.now))
        self._observe(p, summary, new)
        if new != p.previous:
            body = {**p.obj, "status": new}
            try:
                self.memory.repairer.replace_status(body)
            except ApiError as error:
                self.ctx.metrics.errors_total.labels(stage="status").inc()
                if error.conflict or error.not_found:
                    # A newer cluster object is on its way; its pass reports these actions.
                    self.memory.pending.keep(p.key, p.actions)
                    p.requeue_in(SHORT_REQUEUE_S)
                    self._emit(p)
                    return
                raise
            self.memory.marks.wrote(p.key, "status", p.obj)
        for transition in st.transitions(p.previous, new):
            event = transition_event(transition)
            if event is not None:
                p.events.append(event)
        self._emit(p)

    def note_stalls(self, p: ObjectPass) -> None:
        """What stalls the cluster that only the drift steps' results show: objects someone
        keeps changing back, and objects the API server refused."""
        for fight_ref, fight in self.memory.fights.fights(p.key).items():
            p.stalled.append(("DriftFight", (
                f"{fight_ref.short} keeps being changed back after each repair "
                f"({fight.last_drift}); repairs back off up to "
                f"{self.ctx.settings.drift_backoff_max_s:g}s. Stop whatever changes it (its "
                "managedFields name the manager), or add a spec.drift.ignore rule")))
            quiet = self.memory.fights.quiet_in_s(p.key, fight_ref)
            if quiet > 0:
                p.requeue_in(quiet)
        for state in p.states:
            if state.verdict == "rejected":
                p.stalled.append(("ApplyRejected",
                                  f"{state.ref.short}: the API server refused it: {state.detail}"))
            if state.verdict == "foreign" and state.live is not None:
                owners = ", ".join(f"{r.get('kind')}/{r.get('name')}" for r in
                                   meta(state.live).get("ownerReferences") or ()) or "none"
                p.stalled.append(("NameTaken", (
                    f"{state.ref.short} exists and is not this cluster's (owner: {owners}; "
                    "no owner reference or labels of this cluster): it is left as it is, never "
                    "applied over or deleted. Remove or rename it, or give this cluster another "
                    "name")))

    def _observe(self, p: ObjectPass, summary: st.Observed, new: dict[str, Any]) -> None:
        """The kaiwu_cluster_* gauges from what this pass reports (the status it writes)."""
        states = [str(n.get("state")) for n in new.get("nodes") or () if isinstance(n, dict)]
        self.ctx.metrics.observe_cluster(
            p.key.namespace, p.key.name, desired=summary.replicas, ready=summary.ready_nodes,
            live=states.count("live"), not_live=states.count("not-live"),
            conditions={c.type: c.status for c in summary.conditions})

    def _emit(self, p: ObjectPass) -> None:
        for type_, reason, message in p.events:
            self.ctx.events.emit(p.obj, type_, reason, message)

    def _drift_events(self, p: ObjectPass) -> None:
        """A drift seen for the first time (per object and per distinct live state) is counted
        and, when it stays (warn, paused, back-off), announced once."""
        for state in p.states:
            if state.stale:
                continue  # our write is on its way: nothing new to say about it
            if state.verdict not in ("missing", "drifted") or p.policy == "off":
                if state.verdict == "in-sync":
                    self.memory.notices.clear(p.key, state.ref)
                    self.memory.fights.record_in_sync(p.key, state.ref)
                continue
            if p.sync or p.first_create(state):
                continue  # a new spec being applied, or never created yet: not drift
            fingerprint = state.report.live_hash if state.report else "missing"
            if self.memory.notices.seen(p.key, state.ref, fingerprint):
                continue
            self.ctx.metrics.drift_detected_total.labels(kind=state.ref.kind).inc()
            log.info("drift detected: %s", state.detail or f"{state.ref.short} missing")
            if state.repaired:
                continue  # the DriftRepaired event says it all
            self.memory.notices.note(p.key, state.ref, fingerprint)
            why = ("the API server changed it back as it stored the repair" if state.undone
                   else "the cluster is paused" if p.paused else
                   "drift policy is warn" if p.policy == "warn" else
                   f"repairs are backing off for {state.blocked_s:.0f}s" if state.blocked_s
                   else "not repaired")
            what = "missing" if state.verdict == "missing" else changes_text(state.report)
            p.events.append(("Warning", "DriftDetected",
                             f"{state.ref.short}: {what} ({why})"))


def transition_event(t: st.Transition) -> tuple[EventType, str, str] | None:
    if t.type == st.READY and t.after == "True":
        return "Normal", "Ready", t.message
    if t.type == st.READY and t.before == "True":
        return "Warning", "NotReady", f"{t.reason}: {t.message}"
    if t.type == st.STALLED and t.after == "True":
        return "Warning", t.reason, t.message
    if t.type == st.STALLED and t.before == "True":
        return "Normal", "Progressing", "no longer stalled"
    if t.type == st.DRIFTED and t.before == "True" and t.after == "False":
        return "Normal", "DriftResolved", t.message
    return None
