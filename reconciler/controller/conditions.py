"""What a pass amounts to, as conditions and status fields (kstatus): pure functions of the pass.

The report step (reconciler.controller.report) calls `observed` and hands the result to
reconciler.status.build; `changes_text` words a drift report for conditions and Events.
"""

from __future__ import annotations

from reconciler import status as st
from reconciler.controller.objects import ObjectPass
from reconciler.drift.compare import DriftReport, format_report
from reconciler.kube import kinds as k
from reconciler.model import PAUSED_ANNOTATION, meta
from renderer.builders import selector_labels


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
    unserved = [s.ref.short for s in p.states if s.verdict == "unserved"]

    sts_state = next((s for s in p.states if s.kind == k.STATEFUL_SET), None)
    sts = sts_state.live if sts_state is not None else None
    sts_status = (sts or {}).get("status") or {}
    # What we apply (a scale-in in progress applies fewer than spec.replicas).
    want = int(sts_state.desired["spec"].get("replicas", 1)) if sts_state is not None else 0
    ready = int(sts_status.get("readyReplicas") or 0)
    updated = int(sts_status.get("updatedReplicas") or 0)
    current = int(sts_status.get("replicas") or 0)
    rolled = sts is not None and int(sts_status.get("observedGeneration") or 0) >= int(
        meta(sts).get("generation") or 0) and updated == want and current == want
    pods_ready = rolled and ready == want

    drifted = [s for s in p.states if s.outstanding and s.verdict in ("missing", "drifted")
               and not (s.verdict == "missing" and p.sync)]
    conditions: list[st.Condition] = []
    stalled = bool(p.stalled)
    if stalled:
        conditions.append(st.Condition(st.STALLED, "True", p.stalled[0][0],
                                       "; ".join(message for _, message in p.stalled)))
    else:
        conditions.append(st.Condition(st.STALLED, "False", "Progressing" if not p.halted
                                       else "Halted"))
    if p.policy == "off" and not p.paused:
        conditions.append(st.Condition(st.DRIFTED, "Unknown", "PolicyOff",
                                       "drift policy is off: live objects are not checked"))
    elif drifted:
        reason = "Paused" if p.paused else "WarnOnly" if p.policy == "warn" else \
            "BackingOff" if any(s.blocked_s for s in drifted) else "Pending"
        conditions.append(st.Condition(st.DRIFTED, "True", reason, "; ".join(
            f"{s.ref.short}: {'missing' if s.verdict == 'missing' else changes_text(s.report)}"
            for s in drifted)))
    else:
        repaired = [a for a in p.actions if a.action == "DriftRepaired"]
        conditions.append(st.Condition(
            st.DRIFTED, "False", "Repaired" if repaired else "InSync",
            "; ".join(f"{a.target} {a.message}" for a in repaired) if repaired
            else "every object is as the spec renders it"))

    outstanding = [s for s in p.states if s.outstanding]
    if p.halted:
        # Halted by the spec step (nothing rendered), or by a later one that said why.
        ready_reason, ready_message = (("InvalidSpec", "the spec cannot be rendered")
                                       if p.cluster is None or not p.stalled else p.stalled[0])
    elif stalled:
        ready_reason, ready_message = "Stalled", p.stalled[0][1]
    elif drifted:
        ready_reason, ready_message = "Drifted", "objects differ from the spec: " + ", ".join(
            s.ref.short for s in drifted)
    elif outstanding or not p.complete:
        ready_reason, ready_message = "Applying", "objects are being applied"
    elif p.not_ready:
        ready_reason = p.not_ready[0][0]
        ready_message = "; ".join(message for _, message in p.not_ready)
    elif not pods_ready:
        ready_reason = "WaitingForPods"
        ready_message = f"{ready}/{want} pods ready" + ("" if rolled else
                                                       ", rollout in progress")
    else:
        ready_reason, ready_message = "Ready", f"{ready}/{want} pods ready"
    if unserved:
        ready_message += (f" (not served by this Kubernetes, skipped: {', '.join(unserved)};"
                          " install the CRDs that serve them)")
    is_ready = ready_reason == "Ready"
    conditions.append(st.Condition(st.READY, "True" if is_ready else "False", ready_reason,
                                   ready_message))

    if p.paused:
        conditions.append(st.Condition(st.RECONCILING, "False", "Paused", (
            f"annotation {PAUSED_ANNOTATION}=true" if p.paused_by_annotation
            else "spec.paused") + " is set: only reporting"))
    elif is_ready or stalled or p.halted:
        conditions.append(st.Condition(st.RECONCILING, "False", ready_reason, ""))
    elif drifted and p.policy != "enforce":
        conditions.append(st.Condition(st.RECONCILING, "False", "WarnOnly",
                                       "drift is reported, not repaired (spec.drift.policy)"))
    elif p.progressing:
        conditions.append(st.Condition(st.RECONCILING, "True", p.progressing[0][0],
                                       "; ".join(m for _, m in p.progressing)))
    else:
        conditions.append(st.Condition(st.RECONCILING, "True", ready_reason, ready_message))

    # The generation is observed once all of it is applied (or we are stuck on it).
    done = p.complete and not any(s.verdict in ("missing", "terminating", "immutable")
                                  and s.outstanding for s in p.states)
    # spec.paused counts as observed: unpausing is a new generation, which is applied then.
    # The annotation does not: removing it is no new generation, so a spec changed meanwhile
    # must still look unobserved then (p.sync), or a warn-policy cluster would never apply it.
    spec_paused = cluster is not None and cluster.paused
    generation = p.generation if (done or stalled or spec_paused) else None
    previous_phase = p.previous.get("phase")
    phase = ("Failed" if p.halted else "Running" if is_ready else
             "Pending" if ready == 0 else
             "Degraded" if previous_phase in ("Running", "Degraded") else "Pending")
    labels = selector_labels(cluster) if cluster is not None else {}
    return st.Observed(
        generation=generation,
        conditions=(*conditions, *p.conditions),
        phase=phase,
        replicas=current,
        ready_nodes=ready,
        selector=",".join(f"{key}={value}" for key, value in sorted(labels.items())),
        version=cluster.version if cluster is not None and pods_ready else None,
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
