"""Stories of the Events the reconciler writes about a KaiwuCluster (reconciler.kube.events):
what `kubectl describe kaiwucluster` users see, a repeat folded into one Event with a growing
count, long messages cut to a screenful, and a failed Event write that never fails a reconcile.

`EventStore` below keeps the Events created and patched the way the recorder writes them (the
API's answers to such requests are in the stories of tests/world_stories/).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from reconciler.kube.client import ApiError
from reconciler.kube.events import MESSAGE_LIMIT, Emitted, EventRecorder, truncate
from reconciler.kube.kinds import EVENT, Kind
from reconciler.metrics import NAMESPACE, Metrics
from reconciler.model import Obj
from tests.support import fake_api


class Clock:
    def __init__(self) -> None:
        self.now = 1_767_225_600.0  # 2026-01-01T00:00:00Z

    def __call__(self) -> float:
        return self.now


class EventStore:
    """Events by (namespace, name); `fail` makes the next writes fail with that HTTP status."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], Obj] = {}
        self.fail = 0

    def create(self, obj: Obj) -> Obj:
        if self.fail:
            raise ApiError(self.fail, "Forbidden", "events is forbidden")
        meta = obj["metadata"]
        self.events[(meta["namespace"], meta["name"])] = copy.deepcopy(obj)
        return obj

    def patch(self, kind: Kind, namespace: str, name: str, patch: Obj,
              subresource: str = "") -> Obj:
        assert kind == EVENT
        if self.fail:
            raise ApiError(self.fail, "Error", "patch failed")
        if (namespace, name) not in self.events:
            raise ApiError(404, "NotFound", f'events "{name}" not found')
        self.events[(namespace, name)].update(patch)
        return self.events[(namespace, name)]

    def only(self) -> Obj:
        (event,) = self.events.values()
        return event


ORDERS: Obj = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
               "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1",
                            "resourceVersion": "42"}}


def recorder(**options: Any) -> tuple[EventRecorder, EventStore, Clock, Metrics]:
    store, clock, metrics = EventStore(), Clock(), Metrics()
    return (EventRecorder(fake_api.counted(store, metrics), metrics, clock=clock, **options),
            store, clock, metrics)


def counted(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(f"{NAMESPACE}_{name}", labels) or 0.0


def test_an_event_names_the_cluster_the_reconciler_and_when() -> None:
    events, store, _, metrics = recorder(instance="kaiwu-reconciler-0")
    events.emit(ORDERS, "Normal", "DriftRepaired", "StatefulSet/orders: image")
    event = store.only()
    assert event["metadata"]["name"].startswith("orders.")
    assert event["metadata"]["namespace"] == "shop"
    assert {key: event[key] for key in event if key != "metadata"} == {
        "apiVersion": "v1", "kind": "Event",
        "involvedObject": {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                           "name": "orders", "namespace": "shop", "uid": "u-1",
                           "resourceVersion": "42"},
        "type": "Normal", "reason": "DriftRepaired", "message": "StatefulSet/orders: image",
        "count": 1, "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "source": {"component": "kaiwu-reconciler"}, "reportingComponent": "kaiwu-reconciler",
        "reportingInstance": "kaiwu-reconciler-0"}
    assert events.emitted == [Emitted("Normal", "DriftRepaired", "StatefulSet/orders: image", 1)]
    assert counted(metrics, "writes_total", verb="create", kind="Event") == 1


def test_without_an_instance_or_a_resource_version_those_fields_are_left_out() -> None:
    events, store, _, _ = recorder()
    cluster = copy.deepcopy(ORDERS)
    del cluster["metadata"]["resourceVersion"]
    events.emit(cluster, "Warning", "Stalled", "no progress")
    event = store.only()
    assert "reportingInstance" not in event
    assert "resourceVersion" not in event["involvedObject"]


def test_a_repeat_within_ten_minutes_bumps_the_count_of_the_same_event() -> None:
    events, store, clock, metrics = recorder()
    events.emit(ORDERS, "Warning", "DriftDetected", "StatefulSet/orders: replicas")
    clock.now += 600  # exactly the window: still the same Event
    events.emit(ORDERS, "Warning", "DriftDetected", "StatefulSet/orders: replicas")
    clock.now += 300
    events.emit(ORDERS, "Warning", "DriftDetected", "StatefulSet/orders: replicas")
    event = store.only()
    assert (event["count"], event["firstTimestamp"], event["lastTimestamp"]) == (
        3, "2026-01-01T00:00:00Z", "2026-01-01T00:15:00Z")
    assert [(e.type, e.reason, e.message, e.count) for e in events.emitted] == [
        ("Warning", "DriftDetected", "StatefulSet/orders: replicas", n) for n in (1, 2, 3)]
    assert counted(metrics, "writes_total", verb="patch", kind="Event") == 2
    assert counted(metrics, "writes_total", verb="create", kind="Event") == 1


def test_another_reason_message_or_a_quiet_window_makes_a_new_event() -> None:
    events, store, clock, _ = recorder()
    events.emit(ORDERS, "Warning", "DriftDetected", "replicas")
    events.emit(ORDERS, "Warning", "DriftDetected", "image")
    events.emit(ORDERS, "Warning", "Stalled", "image")
    clock.now += 601
    events.emit(ORDERS, "Warning", "DriftDetected", "replicas")
    assert sorted((e["reason"], e["message"], e["count"]) for e in store.events.values()) == [
        ("DriftDetected", "image", 1), ("DriftDetected", "replicas", 1),
        ("DriftDetected", "replicas", 1), ("Stalled", "image", 1)]


def test_a_repeat_of_an_event_that_expired_from_the_server_is_written_anew() -> None:
    events, store, _, _ = recorder()
    events.emit(ORDERS, "Normal", "Scaled", "3 -> 5")
    store.events.clear()  # the API server's event TTL removed it
    events.emit(ORDERS, "Normal", "Scaled", "3 -> 5")
    assert store.only()["count"] == 1
    assert [e.count for e in events.emitted] == [1, 1]


def test_a_failed_event_write_is_counted_and_logged_and_the_reconcile_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    events, store, _, metrics = recorder()
    events.emit(ORDERS, "Normal", "Scaled", "3 -> 5")
    store.fail = 403
    with caplog.at_level(logging.WARNING, logger="reconciler.kube.events"):
        events.emit(ORDERS, "Normal", "Scaled", "3 -> 5")  # the patch fails
        events.emit(ORDERS, "Normal", "Created", "Service/orders")  # the create fails
    assert counted(metrics, "errors_total", stage="event") == 2
    assert "could not write event Normal Scaled for shop/orders: HTTP 403 Error" \
        in caplog.text
    assert [e.reason for e in events.emitted] == ["Scaled"]


def test_long_messages_are_cut_to_a_screenful_and_marked() -> None:
    events, store, _, _ = recorder()
    long = "x" * (MESSAGE_LIMIT + 1)
    events.emit(ORDERS, "Warning", "DriftDetected", long)
    message = store.only()["message"]
    assert len(message) == MESSAGE_LIMIT and message.endswith(" ...(truncated)")
    assert message.startswith("x" * (MESSAGE_LIMIT - 15))
    assert truncate("x" * MESSAGE_LIMIT) == "x" * MESSAGE_LIMIT


def test_a_cluster_without_a_namespace_or_name_still_gets_its_events() -> None:
    events, store, _, _ = recorder()
    events.emit({"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                 "metadata": {"uid": "u-2"}}, "Normal", "Created", "x")
    meta = store.only()["metadata"]
    assert meta["namespace"] == "default" and meta["name"].startswith("kaiwucluster.")


def test_a_cluster_recreated_under_the_same_name_gets_events_of_its_own() -> None:
    events, store, _, _ = recorder()
    events.emit(ORDERS, "Normal", "Created", "StatefulSet/orders")
    again = copy.deepcopy(ORDERS)
    again["metadata"]["uid"] = "u-9"
    events.emit(again, "Normal", "Created", "StatefulSet/orders")
    assert sorted((e["involvedObject"]["uid"], e["count"]) for e in store.events.values()) == [
        ("u-1", 1), ("u-9", 1)]


def test_each_event_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    events, _, _, _ = recorder()
    with caplog.at_level(logging.INFO, logger="reconciler.kube.events"):
        events.emit(ORDERS, "Normal", "Scaled", "3 -> 5")
    assert "event Normal Scaled: 3 -> 5" in caplog.messages


def test_the_recorder_remembers_its_last_two_hundred_events() -> None:
    events, _, _, _ = recorder()
    for n in range(205):
        events.emit(ORDERS, "Normal", "Repaired", f"pass {n}")
    assert len(events.emitted) == 200
    assert events.emitted[0].message == "pass 5" and events.emitted[-1].message == "pass 204"
