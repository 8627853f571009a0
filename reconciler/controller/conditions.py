"""What a pass amounts to, as conditions and status fields (kstatus): pure functions of the pass.

The report step (reconciler.controller.report) calls `observed` and hands the result to
reconciler.status.build; `changes_text` words a drift report for conditions and Events.

Each condition's reason is chosen by a named `Rule` of `RULES`: the conditions are decided in
the order Stalled, Drifted, Ready, Reconciling (Reconciling reads what Ready decided), and for
each the first rule that applies wins. The rules, in that order:

  Stalled      stalled (a step said a person must act: the first cause names it), halted
               (nothing rendered), not-stalled.
  Drifted      policy-off, drifted-paused, drifted-warn-only, drifted-backing-off,
               drifted-pending, repaired, in-sync.
  Ready        halted-invalid-spec, halted-stalled, stalled, drifted, applying,
               kaiwudb-not-ready (the first reason a step gave), waiting-for-pods, ready.
  Reconciling  paused, settled (Ready, stalled or halted: nothing more will happen by itself),
               drift-reported-only, progressing (the first thing a step is doing), not-ready-yet.

tests/unit/reconciler/controller/test_condition_rules.py tests each rule: when it applies,
when it does not, and which wins where two could.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler import status as st
from reconciler.controller.objects import ObjectPass, ObjectState
from reconciler.drift.compare import DriftReport, format_report
from reconciler.kube import kinds as k
from reconciler.model import PAUSED_ANNOTATION, meta
from renderer.builders import selector_labels


@dataclass(frozen=True)
class Facts:
    """What the rules read: the pass, and what is worked out from it once."""

    p: ObjectPass
    drifted: tuple[ObjectState, ...]  # objects that differ from the spec, not yet repaired
    outstanding: bool  # an object not yet as rendered
    want: int  # the StatefulSet replicas we apply (fewer than spec.replicas in a scale-in)
    ready: int  # its ready pods
    rolled: bool  # the StatefulSet controller has rolled every pod onto what we applied
    unserved: tuple[str, ...]  # objects of kinds this Kubernetes does not serve

    @property
    def pods_ready(self) -> bool:
        return self.rolled and self.ready == self.want

    @staticmethod
    def of(p: ObjectPass) -> Facts:
        sts_state = next((s for s in p.states if s.kind == k.STATEFUL_SET), None)
        sts = sts_state.live if sts_state is not None else None
        sts_status = (sts or {}).get("status") or {}
        # What we apply (a scale-in in progress applies fewer than spec.replicas).
        want = int(sts_state.desired["spec"].get("replicas", 1)) if sts_state is not None else 0
        updated = int(sts_status.get("updatedReplicas") or 0)
        current = int(sts_status.get("replicas") or 0)
        rolled = sts is not None and int(sts_status.get("observedGeneration") or 0) >= int(
            meta(sts).get("generation") or 0) and updated == want and current == want
        return Facts(
            p=p,
            drifted=tuple(s for s in p.states if s.outstanding and s.verdict in (
                "missing", "drifted") and not (s.verdict == "missing" and p.sync)),
            outstanding=any(s.outstanding for s in p.states),
            want=want,
            ready=int(sts_status.get("readyReplicas") or 0),
            rolled=rolled,
            unserved=tuple(s.ref.short for s in p.states if s.verdict == "unserved"))


Decided = Mapping[str, st.Condition]
"""The conditions decided before this one (Reconciling's rules read Ready)."""


@dataclass(frozen=True)
class Rule:
    """One named way a condition is decided: `then` gives the condition where `when` holds."""

    name: str
    condition: str  # st.STALLED, st.DRIFTED, st.READY or st.RECONCILING
    when: Callable[[Facts, Decided], bool]
    then: Callable[[Facts, Decided], st.Condition]


def _joined(items: Sequence[tuple[str, str]]) -> str:
    return "; ".join(message for _, message in items)


def _drift(f: Facts, reason: str) -> st.Condition:
    return st.Condition(st.DRIFTED, "True", reason, "; ".join(
        f"{s.ref.short}: {'missing' if s.verdict == 'missing' else changes_text(s.report)}"
        for s in f.drifted))


def _not_ready(f: Facts, reason: str, message: str) -> st.Condition:
    return st.Condition(st.READY, "False", reason, message + _unserved(f))


def _unserved(f: Facts) -> str:
    return (f" (not served by this Kubernetes, skipped: {', '.join(f.unserved)}; install the "
            "CRDs that serve them)") if f.unserved else ""


def _repaired(f: Facts) -> list[str]:
    return [f"{a.target} {a.message}" for a in f.p.actions if a.action == "DriftRepaired"]


def _always(f: Facts, d: Decided) -> bool:
    return True


RULES: tuple[Rule, ...] = (
    # ---- Stalled: a person must act ----
    Rule("stalled", st.STALLED, lambda f, d: bool(f.p.stalled),
         lambda f, d: st.Condition(st.STALLED, "True", f.p.stalled[0][0], _joined(f.p.stalled))),
    Rule("halted", st.STALLED, lambda f, d: f.p.halted,
         lambda f, d: st.Condition(st.STALLED, "False", "Halted")),
    Rule("not-stalled", st.STALLED, _always,
         lambda f, d: st.Condition(st.STALLED, "False", "Progressing")),
    # ---- Drifted: do the live objects match the spec? ----
    Rule("policy-off", st.DRIFTED, lambda f, d: f.p.policy == "off" and not f.p.paused,
         lambda f, d: st.Condition(st.DRIFTED, "Unknown", "PolicyOff",
                                   "drift policy is off: live objects are not checked")),
    Rule("drifted-paused", st.DRIFTED, lambda f, d: bool(f.drifted) and f.p.paused,
         lambda f, d: _drift(f, "Paused")),
    Rule("drifted-warn-only", st.DRIFTED, lambda f, d: bool(f.drifted) and f.p.policy == "warn",
         lambda f, d: _drift(f, "WarnOnly")),
    Rule("drifted-backing-off", st.DRIFTED,
         lambda f, d: any(s.blocked_s for s in f.drifted),
         lambda f, d: _drift(f, "BackingOff")),
    Rule("drifted-pending", st.DRIFTED, lambda f, d: bool(f.drifted),
         lambda f, d: _drift(f, "Pending")),
    Rule("repaired", st.DRIFTED, lambda f, d: bool(_repaired(f)),
         lambda f, d: st.Condition(st.DRIFTED, "False", "Repaired", "; ".join(_repaired(f)))),
    Rule("in-sync", st.DRIFTED, _always,
         lambda f, d: st.Condition(st.DRIFTED, "False", "InSync",
                                   "every object is as the spec renders it")),
    # ---- Ready: is the cluster serving as the spec asks? ----
    Rule("halted-invalid-spec", st.READY,
         lambda f, d: f.p.halted and (f.p.cluster is None or not f.p.stalled),
         lambda f, d: _not_ready(f, "InvalidSpec", "the spec cannot be rendered")),
    Rule("halted-stalled", st.READY, lambda f, d: f.p.halted,
         lambda f, d: _not_ready(f, *f.p.stalled[0])),
    Rule("stalled", st.READY, lambda f, d: bool(f.p.stalled),
         lambda f, d: _not_ready(f, "Stalled", f.p.stalled[0][1])),
    Rule("drifted", st.READY, lambda f, d: bool(f.drifted),
         lambda f, d: _not_ready(f, "Drifted", "objects differ from the spec: " + ", ".join(
             s.ref.short for s in f.drifted))),
    Rule("applying", st.READY, lambda f, d: f.outstanding or not f.p.complete,
         lambda f, d: _not_ready(f, "Applying", "objects are being applied")),
    Rule("kaiwudb-not-ready", st.READY, lambda f, d: bool(f.p.not_ready),
         lambda f, d: _not_ready(f, f.p.not_ready[0][0], _joined(f.p.not_ready))),
    Rule("waiting-for-pods", st.READY, lambda f, d: not f.pods_ready,
         lambda f, d: _not_ready(f, "WaitingForPods", f"{f.ready}/{f.want} pods ready" + (
             "" if f.rolled else ", rollout in progress"))),
    Rule("ready", st.READY, _always,
         lambda f, d: st.Condition(st.READY, "True", "Ready",
                                   f"{f.ready}/{f.want} pods ready" + _unserved(f))),
    # ---- Reconciling: is the reconciler still working towards the spec? ----
    Rule("paused", st.RECONCILING, lambda f, d: f.p.paused,
         lambda f, d: st.Condition(st.RECONCILING, "False", "Paused", (
             f"annotation {PAUSED_ANNOTATION}=true" if f.p.paused_by_annotation
             else "spec.paused") + " is set: only reporting")),
    Rule("settled", st.RECONCILING,
         lambda f, d: d[st.READY].status == "True" or bool(f.p.stalled) or f.p.halted,
         lambda f, d: st.Condition(st.RECONCILING, "False", d[st.READY].reason)),
    Rule("drift-reported-only", st.RECONCILING,
         lambda f, d: bool(f.drifted) and f.p.policy != "enforce",
         lambda f, d: st.Condition(st.RECONCILING, "False", "WarnOnly",
                                   "drift is reported, not repaired (spec.drift.policy)")),
    Rule("progressing", st.RECONCILING, lambda f, d: bool(f.p.progressing),
         lambda f, d: st.Condition(st.RECONCILING, "True", f.p.progressing[0][0],
                                   _joined(f.p.progressing))),
    Rule("not-ready-yet", st.RECONCILING, _always,
         lambda f, d: st.Condition(st.RECONCILING, "True", d[st.READY].reason,
                                   d[st.READY].message)),
)
"""Every condition's rules, in the order they are tried (see the module docstring)."""

DECIDED_IN_ORDER = (st.STALLED, st.DRIFTED, st.READY, st.RECONCILING)


def decide(f: Facts) -> dict[str, tuple[Rule, st.Condition]]:
    """Each condition of DECIDED_IN_ORDER with the rule that decided it (the first that
    applies; every condition's last rule always does)."""
    decided: dict[str, st.Condition] = {}
    chosen: dict[str, tuple[Rule, st.Condition]] = {}
    for condition in DECIDED_IN_ORDER:
        rule = next(r for r in RULES if r.condition == condition and r.when(f, decided))
        decided[condition] = rule.then(f, decided)
        chosen[condition] = (rule, decided[condition])
    return chosen


def observed(p: ObjectPass) -> st.Observed:
    """Sum the pass up as conditions and status fields (p.stalled, p.not_ready and the states
    say why; nothing in the pass is changed)."""
    cluster = p.cluster
    inventory = set(p.inventory)
    for state in p.states:
        if (state.live is not None or state.stale) and state.verdict != "terminating" \
                and not (state.verdict == "immutable" and state.repaired):
            inventory.add(str(state.ref))
    if p.halted and not p.states:
        # Nothing rendered (invalid spec): what we applied before is still there.
        inventory |= set(p.previous.get("inventory") or ())
    facts = Facts.of(p)
    chosen = decide(facts)
    conditions = [chosen[c][1] for c in (st.STALLED, st.DRIFTED, st.READY, st.RECONCILING)]
    is_ready = chosen[st.READY][1].status == "True"
    sts = next((s.live for s in p.states if s.kind == k.STATEFUL_SET), None)
    current = int(((sts or {}).get("status") or {}).get("replicas") or 0)

    # The generation is observed once all of it is applied (or we are stuck on it).
    done = p.complete and not any(s.verdict in ("missing", "terminating", "immutable")
                                  and s.outstanding for s in p.states)
    # spec.paused counts as observed: unpausing is a new generation, which is applied then.
    # The annotation does not: removing it is no new generation, so a spec changed meanwhile
    # must still look unobserved then (p.sync), or a warn-policy cluster would never apply it.
    spec_paused = cluster is not None and cluster.paused
    generation = p.generation if (done or bool(p.stalled) or spec_paused) else None
    previous_phase = p.previous.get("phase")
    phase = ("Failed" if p.halted else "Running" if is_ready else
             "Pending" if facts.ready == 0 else
             "Degraded" if previous_phase in ("Running", "Degraded") else "Pending")
    labels = selector_labels(cluster) if cluster is not None else {}
    return st.Observed(
        generation=generation,
        conditions=(*conditions, *p.conditions),
        phase=phase,
        replicas=current,
        ready_nodes=facts.ready,
        selector=",".join(f"{key}={value}" for key, value in sorted(labels.items())),
        version=cluster.version if cluster is not None and facts.pods_ready else None,
        inventory=tuple(sorted(inventory)),
        actions=tuple(p.actions),
        fields=p.kaiwu.to_fields(),
    )


def changes_text(report: DriftReport | None, limit: int = 5) -> str:
    """`path: desired -> live` for the first changes of a report (values already masked)."""
    if report is None or not report.changes:
        return "differs"
    lines = format_report(report).splitlines()[1:]
    shown = [line.strip() for line in lines[:limit]]
    more = len(report.changes) - limit
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
