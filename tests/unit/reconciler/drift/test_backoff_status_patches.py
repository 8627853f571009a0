"""Stories about the controller's pure parts: fight back-off, status building, removal patches.

These need no API server: the fight tracker runs on a fake clock, status is built from plain
values, and removal patches are computed from plain objects. (What they do against the real
apiserver is in the stories of tests/world_stories/drift/.)
"""

from __future__ import annotations

from typing import Any

from reconciler import status as st
from reconciler.drift.backoff import BackoffPolicy, FightTracker
from reconciler.drift.repair import live_pointer, removal_patch
from reconciler.keys import ClusterKey, ObjectRef


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


KEY = ClusterKey("db", "orders")
STS = ObjectRef("apps/v1", "StatefulSet", "db", "orders")
POLICY = BackoffPolicy(threshold=3, window_s=60.0, base_s=1.0, max_s=8.0)


def test_repairs_below_the_threshold_never_wait() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    for _ in range(POLICY.threshold - 1):
        state = fights.record_repair(KEY, STS, "image")
        clock.now += 1
    assert not state.fighting
    assert fights.wait_s(KEY, STS) == 0


def test_a_fight_backs_off_doubling_up_to_the_maximum() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    waits = []
    for _ in range(POLICY.threshold + 5):
        clock.now += fights.wait_s(KEY, STS)  # repair as soon as it is allowed
        state = fights.record_repair(KEY, STS, "replicas")
        waits.append(fights.wait_s(KEY, STS))
        clock.now += 0.1  # the rival changes it back at once
    assert waits == [0, 0, 1, 2, 4, 8, 8, 8]
    assert state.fighting and state.last_drift == "replicas"
    assert fights.fights(KEY) == {STS: state}


def test_repairs_spread_wider_than_the_window_are_no_fight() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    for _ in range(10):
        state = fights.record_repair(KEY, STS, "image")
        clock.now += POLICY.window_s / (POLICY.threshold - 1) + 1
    assert not state.fighting


def test_a_repair_exactly_one_window_old_no_longer_counts() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    fights.record_repair(KEY, STS, "image")
    clock.now += POLICY.window_s / 2
    fights.record_repair(KEY, STS, "image")
    clock.now += POLICY.window_s / 2  # the first repair is now a whole window old
    assert not fights.record_repair(KEY, STS, "image").fighting
    clock.now += 1
    assert fights.record_repair(KEY, STS, "image").fighting, "three within the window"


def test_a_whole_quiet_window_ends_the_fight_and_only_that() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    for _ in range(POLICY.threshold):
        fights.record_repair(KEY, STS, "image")
    assert fights.state(KEY, STS).fighting
    clock.now += POLICY.window_s / 2
    assert fights.record_in_sync(KEY, STS).fighting
    assert fights.quiet_in_s(KEY, STS) == POLICY.window_s / 2
    clock.now += POLICY.window_s / 2
    assert not fights.record_in_sync(KEY, STS).fighting
    assert fights.fights(KEY) == {}


def test_no_strike_no_back_off() -> None:
    assert POLICY.delay(0) == 0
    assert POLICY.delay(1) == POLICY.base_s


def test_the_quiet_window_counts_from_the_last_repair_of_the_fight() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    fights.record_repair(KEY, STS, "image")
    clock.now += 1
    fights.record_repair(KEY, STS, "image")
    clock.now += 30
    last = fights.record_repair(KEY, STS, "image")
    assert last.fighting
    # One window after the second repair is only half a window after the last one.
    clock.now += POLICY.window_s - 30
    assert fights.record_in_sync(KEY, STS).fighting
    assert fights.quiet_in_s(KEY, STS) == 30
    clock.now += 30
    assert fights.quiet_in_s(KEY, STS) == 0
    clock.now += 5  # nobody looked in time: still no negative wait
    assert fights.quiet_in_s(KEY, STS) == 0


def test_an_object_repaired_now_and_then_has_no_fight_to_wait_out() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    fights.record_repair(KEY, STS, "image")
    assert not fights.state(KEY, STS).fighting
    assert fights.quiet_in_s(KEY, STS) == 0
    assert fights.quiet_in_s(KEY, ObjectRef("v1", "Service", "db", "orders")) == 0


def test_fights_belong_to_their_cluster() -> None:
    clock = FakeClock()
    fights = FightTracker(POLICY, clock)
    other = ClusterKey("db", "billing")
    for _ in range(POLICY.threshold):
        fights.record_repair(KEY, STS, "image")
    assert fights.fights(other) == {}
    fights.forget(KEY)
    assert fights.fights(KEY) == {}


def observed(ready: st.ConditionStatus = "False", actions: tuple[st.Action, ...] = (),
             **fields: Any) -> st.Observed:
    return st.Observed(
        generation=3,
        conditions=(st.Condition(st.READY, ready, "Ready" if ready == "True" else "Waiting",
                                 "2/3 pods ready"),
                    st.Condition(st.STALLED, "False", "Progressing")),
        phase="Pending", replicas=3, ready_nodes=2,
        selector="app.kubernetes.io/instance=orders", version=None,
        inventory=("v1/Service/db/orders", "apps/v1/StatefulSet/db/orders"),
        actions=actions, fields=tuple(fields.items()))


def test_the_same_observation_builds_the_same_status() -> None:
    first = st.build({}, observed(), "2026-01-01T00:00:00Z")
    again = st.build(first, observed(), "2026-01-01T00:05:00Z")
    assert again == first  # so nothing is written in steady state
    assert first["inventory"] == sorted(first["inventory"])
    assert "message" not in (st.condition(first, st.STALLED) or {})  # "" is left out


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    first = st.build({}, observed(), "2026-01-01T00:00:00Z")
    ready = st.build(first, observed("True"), "2026-01-01T00:05:00Z")
    ready_condition = st.condition(ready, st.READY)
    stalled_condition = st.condition(ready, st.STALLED)
    assert ready_condition is not None and stalled_condition is not None
    assert ready_condition["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert stalled_condition["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert [(t.type, t.before, t.after) for t in st.transitions(first, ready)] == [
        (st.READY, "False", "True")]
    assert st.transitions(ready, st.build(ready, observed("True"), "later")) == []


def test_last_actions_are_newest_first_and_bounded() -> None:
    status: dict[str, Any] = {}
    for minute in range(st.LAST_ACTIONS_LIMIT + 3):
        action = st.Action(f"2026-01-01T00:{minute:02d}:00Z", "DriftRepaired",
                           "StatefulSet/orders", f"repair {minute}")
        status = st.build(status, observed(actions=(action,)), "t")
    actions = status["lastActions"]
    assert len(actions) == st.LAST_ACTIONS_LIMIT
    assert actions[0]["message"] == f"repair {st.LAST_ACTIONS_LIMIT + 2}"


def test_fields_other_steps_own_are_kept_or_set() -> None:
    previous: dict[str, Any] = {"initialized": True, "nodes": [{"nodeId": 1, "pod": "orders-0"}],
                "conditions": [{"type": "Degraded", "status": "False", "reason": "Healthy"}]}
    built = st.build(previous, observed(operation={"type": "ScaleIn"}), "t")
    assert built["initialized"] is True and built["nodes"] == previous["nodes"]
    assert built["operation"] == {"type": "ScaleIn"}
    assert st.condition(built, "Degraded") == previous["conditions"][0]


LIVE: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "StatefulSet",
    "metadata": {"name": "orders", "namespace": "db"},
    "spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "busybox"},
        {"name": "kwbase", "image": "kwdb/kwdb:3.2.1",
         "env": [{"name": "POD_NAME"}, {"name": "DEBUG", "value": "1"},
                 {"name": "TRACE", "value": "1"}],
         "ports": [{"containerPort": 26257, "protocol": "TCP"},
                   {"containerPort": 9999, "protocol": "TCP"}]}]}}},
}


def test_report_pointers_name_live_places_by_key() -> None:
    place = live_pointer(LIVE, "/spec/template/spec/containers/kwbase/ports/9999~1TCP")
    assert place is not None
    assert place.pointer == "/spec/template/spec/containers/1/ports/1"
    assert place.value == {"containerPort": 9999, "protocol": "TCP"}
    assert live_pointer(LIVE, "/spec/template/spec/containers/kwbase/env/GONE") is None


def test_removals_test_each_value_and_go_from_the_highest_index_down() -> None:
    ops = removal_patch(LIVE, [
        "/spec/template/spec/containers/kwbase/env/DEBUG",
        "/spec/template/spec/containers/kwbase/env/TRACE",
        "/spec/template/spec/containers/sidecar",
        "/spec/template/spec/containers/sidecar/image",  # inside a removed item: dropped
    ])
    assert ops == [
        {"op": "test", "path": "/spec/template/spec/containers/1/env/2",
         "value": {"name": "TRACE", "value": "1"}},
        {"op": "remove", "path": "/spec/template/spec/containers/1/env/2"},
        {"op": "test", "path": "/spec/template/spec/containers/1/env/1",
         "value": {"name": "DEBUG", "value": "1"}},
        {"op": "remove", "path": "/spec/template/spec/containers/1/env/1"},
        {"op": "test", "path": "/spec/template/spec/containers/0",
         "value": {"name": "sidecar", "image": "busybox"}},
        {"op": "remove", "path": "/spec/template/spec/containers/0"},
    ]


def test_long_condition_and_action_messages_are_cut_to_their_limits_and_marked() -> None:
    long = "x" * 5000
    action = st.Action("2026-01-01T00:00:00Z", "DriftRepaired", "StatefulSet/orders", long)
    built = st.build({}, observed(actions=(action,)), "t")
    message = built["lastActions"][0]["message"]
    assert len(message) == st.ACTION_MESSAGE_LIMIT and message.endswith(" ...(truncated)")
    stalled = st.Observed(
        generation=1, conditions=(st.Condition(st.STALLED, "True", "Fighting", long),),
        phase="Running", replicas=3, ready_nodes=3, selector="", version=None, inventory=(),
        actions=(), fields=())
    condition = st.condition(st.build({}, stalled, "t"), st.STALLED)
    assert condition is not None
    assert len(condition["message"]) == st.CONDITION_MESSAGE_LIMIT
