"""Stories about the KaiwuCluster status the reconciler writes (reconciler.status): what a person
reading `kubectl get kaiwucluster -o yaml` sees after a pass, and which condition changes become
Events. Status is built from plain values here; the passes that decide them are in
tests/unit/reconciler/controller/.
"""

from __future__ import annotations

from typing import Any

from reconciler import status as st

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


def observed(*conditions: st.Condition, generation: int | None = 4, version: str | None = None,
             selector: str = "app.kubernetes.io/instance=orders",
             actions: tuple[st.Action, ...] = (), **fields: Any) -> st.Observed:
    return st.Observed(
        generation=generation,
        conditions=conditions or (st.Condition(st.READY, "True", "Ready", "3 of 3 nodes ready"),),
        phase="Running", replicas=3, ready_nodes=2, selector=selector, version=version,
        inventory=("v1/Service/db/orders", "apps/v1/StatefulSet/db/orders"),
        actions=actions, fields=tuple(fields.items()))


def test_a_first_pass_reports_counts_selector_inventory_and_generation() -> None:
    status = st.build(None, observed(version="3.0.0"), T0)
    assert status == {
        "observedGeneration": 4,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                        "message": "3 of 3 nodes ready", "lastTransitionTime": T0,
                        "observedGeneration": 4}],
        "phase": "Running", "replicas": 3, "readyNodes": 2,
        "selector": "app.kubernetes.io/instance=orders", "version": "3.0.0",
        "inventory": ["apps/v1/StatefulSet/db/orders", "v1/Service/db/orders"],
    }


def test_a_version_not_yet_known_keeps_the_one_reported_before() -> None:
    previous = st.build(None, observed(version="3.0.0"), T0)
    # A rollout is under way: pods run two versions, so the pass reports none.
    during = st.build(previous, observed(version=None), T1)
    assert during["version"] == "3.0.0"
    assert "version" not in st.build(None, observed(version=None), T0)
    assert st.build(during, observed(version="3.1.0"), T1)["version"] == "3.1.0"


def test_an_empty_selector_is_left_out_rather_than_written_as_empty_text() -> None:
    assert "selector" not in st.build(None, observed(selector=""), T0)


def test_a_spec_change_not_yet_applied_keeps_the_generation_observed_before() -> None:
    previous = st.build(None, observed(generation=4), T0)
    status = st.build(previous, observed(
        st.Condition(st.READY, "True", "Ready"),
        st.Condition(st.RECONCILING, "True", "Applying", "generation 5"), generation=None), T1)
    assert status["observedGeneration"] == 4
    # Every condition says which generation it speaks of, the kept one included.
    assert [c["observedGeneration"] for c in status["conditions"]] == [4, 4]
    fresh = st.build(None, observed(generation=None), T0)
    assert "observedGeneration" not in fresh
    assert "observedGeneration" not in fresh["conditions"][0]


def test_conditions_are_listed_ready_reconciling_stalled_drifted_then_others_by_name() -> None:
    status = st.build(None, observed(
        st.Condition(st.DRIFTED, "False", "InSync"),
        st.Condition("Degraded", "False", "Healthy"),
        st.Condition(st.STALLED, "False", "Progressing"),
        st.Condition("Available", "True", "Serving"),
        st.Condition(st.RECONCILING, "False", "Done"),
        st.Condition(st.READY, "True", "Ready")), T0)
    assert [c["type"] for c in status["conditions"]] == [
        "Ready", "Reconciling", "Stalled", "Drifted", "Available", "Degraded"]


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    first = st.build(None, observed(st.Condition(st.READY, "False", "Waiting")), T0)
    # The reason changes but the status does not: the time stays (kstatus).
    still = st.build(first, observed(st.Condition(st.READY, "False", "NodesNotLive")), T1)
    assert st.condition(still, st.READY)["lastTransitionTime"] == T0  # type: ignore[index]
    ready = st.build(still, observed(st.Condition(st.READY, "True", "Ready")), T1)
    assert st.condition(ready, st.READY)["lastTransitionTime"] == T1  # type: ignore[index]
    # A condition written without a time (by hand, or an older operator) gets this pass's time.
    untimed = {"conditions": [{"type": "Ready", "status": "False", "reason": "Waiting"}]}
    rebuilt = st.build(untimed, observed(st.Condition(st.READY, "False", "Waiting")), T1)
    assert st.condition(rebuilt, st.READY)["lastTransitionTime"] == T1  # type: ignore[index]


def test_conditions_another_step_owns_stay_as_they_were() -> None:
    previous = {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": T0},
        "not a condition",
        {"type": "Degraded", "status": "True", "reason": "NodeLost", "lastTransitionTime": T0}]}
    status = st.build(previous, observed(st.Condition(st.READY, "False", "Waiting")), T1)
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Ready", "False"), ("Degraded", "True")]
    assert st.condition(status, "Degraded") == previous["conditions"][2]
    assert st.condition(previous, "Missing") is None
    assert st.condition(None, st.READY) is None


def test_long_messages_are_clipped_and_say_so() -> None:
    limit = st.CONDITION_MESSAGE_LIMIT
    exact = "x" * limit
    status = st.build(None, observed(st.Condition(st.STALLED, "True", "DriftFight", exact)), T0)
    assert st.condition(status, st.STALLED)["message"] == exact  # type: ignore[index]
    long = "y" * (limit + 1)
    status = st.build(None, observed(st.Condition(st.STALLED, "True", "DriftFight", long)), T0)
    clipped = st.condition(status, st.STALLED)["message"]  # type: ignore[index]
    assert len(clipped) == limit
    assert clipped == "y" * (limit - 15) + " ...(truncated)"
    action = st.Action(T0, "DriftRepaired", "StatefulSet/orders", "z" * 600)
    entry = action.to_dict()
    assert len(entry["message"]) == st.ACTION_MESSAGE_LIMIT
    assert entry["message"].endswith("z ...(truncated)")


def test_actions_appear_newest_first_with_what_and_where() -> None:
    first = st.Action(T0, "Applied", "StatefulSet/orders")
    second = st.Action(T1, "DriftRepaired", "Service/orders", "port 26257 restored")
    status = st.build({"lastActions": [{"time": "earlier", "action": "Created",
                                        "target": "Service/orders"}, "junk"]},
                      observed(actions=(first, second)), T1)
    assert status["lastActions"] == [
        {"time": T1, "action": "DriftRepaired", "target": "Service/orders",
         "message": "port 26257 restored"},
        {"time": T0, "action": "Applied", "target": "StatefulSet/orders"},
        {"time": "earlier", "action": "Created", "target": "Service/orders"}]
    assert "lastActions" not in st.build(None, observed(), T0)


def test_a_lifecycle_field_set_to_none_is_removed() -> None:
    previous = {"operation": {"type": "ScaleIn"}, "nodes": [{"nodeId": 1}]}
    status = st.build(previous, observed(operation=None, failures={"count": 1}), T0)
    assert "operation" not in status
    assert status["failures"] == {"count": 1} and status["nodes"] == [{"nodeId": 1}]
    assert "operation" not in st.build(None, observed(operation=None), T0)


def test_only_a_new_status_or_reason_is_a_transition_worth_an_event() -> None:
    first = st.build(None, observed(st.Condition(st.READY, "False", "Waiting"),
                                    st.Condition(st.STALLED, "False", "Progressing")), T0)
    assert [(t.type, t.before, t.after, t.reason, t.message)
            for t in st.transitions(None, first)] == [
        ("Ready", None, "False", "Waiting", ""), ("Stalled", None, "False", "Progressing", "")]
    reworded = st.build(first, observed(st.Condition(st.READY, "False", "Waiting", "1 of 3"),
                                        st.Condition(st.STALLED, "False", "Progressing")), T1)
    assert st.transitions(first, reworded) == []
    new_reason = st.build(first, observed(
        st.Condition(st.READY, "False", "NodesNotLive", "node 2 is not live"),
        st.Condition(st.STALLED, "False", "Progressing")), T1)
    assert st.transitions(first, new_reason) == [
        st.Transition("Ready", "False", "False", "NodesNotLive", "node 2 is not live")]
    stalled = st.build(first, observed(st.Condition(st.READY, "False", "Waiting"),
                                       st.Condition(st.STALLED, "True", "DriftFight")), T1)
    assert st.transitions(first, stalled) == [
        st.Transition("Stalled", "False", "True", "DriftFight", "")]
