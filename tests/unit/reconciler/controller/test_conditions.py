"""Stories about what a pass amounts to (reconciler.controller.conditions) and which condition
changes become Events (reconciler.controller.report.transition_event): pure functions, no fakes
beyond a pass with a StatefulSet state (tests/support/controller_world.py).

Each story sets one thing in the pass and checks the condition, phase or Event it decides, with
the neighbouring case beside it (one pod fewer, the other policy), so a reason swapped or a
comparison inverted fails a story.
"""

from __future__ import annotations

from typing import Any

from reconciler import status as st
from reconciler.controller.conditions import changes_text, observed
from reconciler.controller.objects import ObjectPass, ObjectState
from reconciler.controller.report import transition_event
from reconciler.keys import ObjectRef
from reconciler.kube import kinds as k
from tests.support.controller_world import (
    NAME,
    NS,
    a_pass,
    conditions_of,
    ready_pass,
    report,
    service_state,
    sts_state,
)


def status_after(p: ObjectPass, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    return st.build(previous, observed(p), "2027-01-15T08:00:00Z")


def events_between(before: dict[str, Any] | None, after: dict[str, Any]) -> list[Any]:
    return [e for t in st.transitions(before, after) if (e := transition_event(t)) is not None]


# ---- Events from condition changes -------------------------------------------------------------

def test_a_new_reason_on_a_standing_stall_sends_a_new_event() -> None:
    first = ready_pass()
    first.stalled.append(("CrashLoop", "pod dev-2 keeps crashing"))
    before = status_after(first)
    assert events_between(None, before)[0] == ("Warning", "CrashLoop",
                                               "pod dev-2 keeps crashing")
    again = ready_pass()
    again.stalled.append(("CrashLoop", "pod dev-2 keeps crashing (exit code 3)"))
    assert events_between(before, status_after(again, before)) == [], \
        "a new message alone is no news"
    other = ready_pass()
    other.stalled.append(("StoreReplaced", "KaiwuDB node 2 lost its store"))
    assert events_between(before, status_after(other, before)) == [
        ("Warning", "StoreReplaced", "KaiwuDB node 2 lost its store")]


def test_ready_turning_true_and_false_and_a_stall_ending_are_announced() -> None:
    waiting = a_pass()
    waiting.states.append(sts_state(ready=2))
    not_ready = status_after(waiting)
    ready = status_after(ready_pass(), not_ready)
    assert ("Normal", "Ready", "3/3 pods ready") in events_between(not_ready, ready)
    assert ("Warning", "NotReady", "WaitingForPods: 2/3 pods ready") in events_between(
        ready, status_after(waiting, ready))
    stalled = ready_pass()
    stalled.stalled.append(("CrashLoop", "pod dev-2 keeps crashing"))
    was_stalled = status_after(stalled)
    assert ("Normal", "Progressing", "no longer stalled") in events_between(
        was_stalled, status_after(ready_pass(), was_stalled))


def test_drift_resolved_is_announced_and_drift_found_is_left_to_the_drift_events() -> None:
    drifted = ready_pass(drift={"policy": "warn"})
    drifted.states.append(service_state("drifted", report=report(1)))
    before = status_after(drifted)
    after = status_after(ready_pass(drift={"policy": "warn"}), before)
    assert [e[1] for e in events_between(before, after) if e[1] != "Ready"] == ["DriftResolved"]
    assert [e for e in events_between(after, status_after(drifted, after))
            if e[1].startswith("Drift")] == []


# ---- conditions and phase ------------------------------------------------------------------------

def test_ready_counts_pods_against_what_is_applied_and_waits_for_the_rollout() -> None:
    assert conditions_of(ready_pass())["Ready"].message == "3/3 pods ready"
    rolling = a_pass()
    state = sts_state(ready=3)
    assert state.live is not None
    state.live["status"]["updatedReplicas"] = 2
    rolling.states.append(state)
    ready = conditions_of(rolling)["Ready"]
    assert (ready.reason, ready.message) == ("WaitingForPods",
                                             "3/3 pods ready, rollout in progress")
    stale = a_pass()
    state = sts_state(ready=3)
    assert state.live is not None
    state.live["metadata"]["generation"] = 2  # the controller has not seen the new template
    stale.states.append(state)
    assert conditions_of(stale)["Ready"].status == "False"


def test_the_phase_is_pending_until_ready_and_degraded_only_after_running() -> None:
    assert observed(ready_pass()).phase == "Running"
    short = a_pass()
    short.states.append(sts_state(ready=2))
    assert observed(short).phase == "Pending"
    short.previous["phase"] = "Running"
    assert observed(short).phase == "Degraded"
    short.previous["phase"] = "Degraded"
    assert observed(short).phase == "Degraded"
    none = a_pass()
    none.states.append(sts_state(ready=0))
    none.previous["phase"] = "Running"
    assert observed(none).phase == "Pending"
    halted = ready_pass()
    halted.halted = True
    assert observed(halted).phase == "Failed"


def test_kaiwudb_reasons_are_joined_in_ready_and_the_first_names_it() -> None:
    p = ready_pass()
    p.not_ready += [("NodeLost", "pod dev-1: node n1 is Unknown"), ("NodesNotLive", "2")]
    ready = conditions_of(p)["Ready"]
    assert (ready.reason, ready.message) == ("NodeLost", "pod dev-1: node n1 is Unknown; 2")
    reconciling = conditions_of(p)["Reconciling"]
    assert (reconciling.status, reconciling.reason) == ("True", "NodeLost")
    p.progressing += [("ScalingIn", "3 -> 2"), ("Upgrading", "1/3")]
    reconciling = conditions_of(p)["Reconciling"]
    assert (reconciling.reason, reconciling.message) == ("ScalingIn", "3 -> 2; 1/3")


def test_a_stall_stops_reconciling_and_is_reported_as_the_generation_observed() -> None:
    p = ready_pass()
    p.complete = False
    assert observed(p).generation is None
    p.stalled.append(("VersionChangeRefused", "cannot be downgraded"))
    found = conditions_of(p)
    assert (found["Reconciling"].status, found["Reconciling"].reason) == ("False", "Stalled")
    assert observed(p).generation == 1
    ok = ready_pass()
    assert (conditions_of(ok)["Stalled"].status, conditions_of(ok)["Stalled"].reason) == (
        "False", "Progressing")
    assert observed(ok).generation == 1


def test_drift_conditions_say_whether_it_is_repaired_pending_backing_off_or_ignored() -> None:
    p = ready_pass()
    p.states.append(service_state("drifted", report=report(1)))
    drifted = conditions_of(p)["Drifted"]
    assert (drifted.status, drifted.reason) == ("True", "Pending")
    assert drifted.message == (f"Service/{NAME}-public: spec.ports[0].port: 26257 -> 1 [changed]")
    assert conditions_of(p)["Ready"].message == \
        f"objects differ from the spec: Service/{NAME}-public"
    assert conditions_of(p)["Reconciling"].status == "True"

    backing = ready_pass()
    backing.states.append(service_state("drifted", report=report(1), blocked_s=30))
    assert conditions_of(backing)["Drifted"].reason == "BackingOff"

    paused = ready_pass(paused=True)
    paused.states.append(service_state("drifted", report=report(1)))
    assert conditions_of(paused)["Drifted"].reason == "Paused"
    assert conditions_of(paused)["Reconciling"].reason == "Paused"
    assert "spec.paused is set" in conditions_of(paused)["Reconciling"].message

    off = ready_pass(drift={"policy": "off"})
    off.states.append(service_state("drifted", report=report(1)))
    assert (conditions_of(off)["Drifted"].status, conditions_of(off)["Drifted"].reason) == (
        "Unknown", "PolicyOff")

    repaired = ready_pass()
    repaired.states.append(service_state("drifted", report=report(1), repaired=True))
    repaired.actions.append(st.Action("t", "DriftRepaired", f"Service/{NAME}-public", "re-applied"))
    found = conditions_of(repaired)["Drifted"]
    assert (found.status, found.reason) == ("False", "Repaired")
    assert found.message == f"Service/{NAME}-public re-applied"
    assert conditions_of(ready_pass())["Drifted"].reason == "InSync"


def test_a_missing_object_is_drift_except_while_a_new_spec_is_applied() -> None:
    p = ready_pass()
    p.states.append(service_state("missing", live=False))
    assert conditions_of(p)["Drifted"].message == f"Service/{NAME}-public: missing"
    p.sync = True
    assert conditions_of(p)["Drifted"].status == "False"
    assert conditions_of(p)["Ready"].reason == "Applying"
    assert observed(p).generation is None, "not all applied yet"


def test_the_inventory_lists_what_exists_and_an_invalid_spec_keeps_the_last_one() -> None:
    p = ready_pass()
    p.states.append(service_state("missing", live=False))
    refs = observed(p).inventory
    assert any("StatefulSet" in ref for ref in refs), refs
    assert not any("Service" in ref for ref in refs), "a missing object is not in it"
    halted = a_pass()
    halted.halted = True
    halted.previous["inventory"] = ["v1/Service/db/dev-public"]
    assert observed(halted).inventory == ("v1/Service/db/dev-public",)


def test_the_version_is_reported_once_every_pod_runs_it() -> None:
    assert observed(ready_pass(version="3.2.1")).version == "3.2.1"
    short = a_pass(version="3.2.1")
    short.states.append(sts_state(ready=2))
    assert observed(short).version is None
    assert observed(ready_pass()).selector == \
        f"app.kubernetes.io/instance={NAME},app.kubernetes.io/name=kaiwudb"


def test_a_drift_report_is_worded_up_to_its_limit_then_counted() -> None:
    assert changes_text(None) == "differs"
    assert changes_text(report(5), limit=5).count("->") == 5
    worded = changes_text(report(7), limit=5)
    assert worded.count("->") == 5 and worded.endswith("; and 2 more")
    assert "and" not in changes_text(report(1))


def test_every_stall_and_drifted_object_is_named_in_order() -> None:
    p = ready_pass()
    p.stalled += [("CrashLoop", "pod dev-2 keeps crashing"), ("StoreReplaced", "node 2 lost")]
    assert conditions_of(p)["Stalled"].message == "pod dev-2 keeps crashing; node 2 lost"
    drifted = ready_pass()
    drifted.states.append(service_state("drifted", report=report(1)))
    drifted.states.append(sts_state(ready=3, verdict="drifted"))
    assert conditions_of(drifted)["Ready"].message == (
        f"objects differ from the spec: Service/{NAME}-public, StatefulSet/{NAME}")


def test_an_invalid_spec_is_halted_not_stalled_by_the_lifecycle() -> None:
    p = a_pass()
    p.halted = True
    found = conditions_of(p)
    assert (found["Stalled"].status, found["Stalled"].reason) == ("False", "Halted")
    assert (found["Ready"].reason, found["Ready"].message) == (
        "InvalidSpec", "the spec cannot be rendered")


def test_drift_policy_off_says_live_objects_are_not_checked() -> None:
    off = ready_pass(drift={"policy": "off"})
    assert conditions_of(off)["Drifted"].message == \
        "drift policy is off: live objects are not checked"


def test_kinds_this_kubernetes_does_not_serve_are_named_in_ready() -> None:
    p = ready_pass()
    for name in ("a", "b"):
        p.states.append(ObjectState(ObjectRef("monitoring.coreos.com/v1", "ServiceMonitor", NS,
                                              name), k.SERVICE, {}, None,
                                    verdict="unserved"))
    assert conditions_of(p)["Ready"].message == (
        "3/3 pods ready (not served by this Kubernetes, skipped: ServiceMonitor/a, "
        "ServiceMonitor/b; install the CRDs that serve them)")


def test_a_terminating_object_is_not_in_the_inventory() -> None:
    p = ready_pass()
    p.states.append(service_state("terminating"))
    assert not any("Service" in ref for ref in observed(p).inventory)


def test_reconciling_is_true_while_work_is_left_and_says_what() -> None:
    p = ready_pass()
    p.progressing.append(("ScalingIn", "3 -> 2"))
    p.not_ready.append(("ScalingIn", "3 -> 2"))
    assert conditions_of(p)["Reconciling"].status == "True"
    waiting = a_pass()
    waiting.states.append(sts_state(ready=1))
    reconciling = conditions_of(waiting)["Reconciling"]
    assert (reconciling.status, reconciling.reason, reconciling.message) == (
        "True", "WaitingForPods", "1/3 pods ready")


def test_a_statefulset_that_reports_no_updated_pods_is_still_rolling_out() -> None:
    p = a_pass(replicas=1, startMode="single-node")
    state = sts_state(ready=1)
    assert state.live is not None
    state.desired["spec"]["replicas"] = 1
    state.live["status"] = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1}
    p.states.append(state)
    assert conditions_of(p)["Ready"].message == "1/1 pods ready, rollout in progress"
