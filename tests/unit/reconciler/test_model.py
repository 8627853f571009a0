"""Stories about what one reconcile pass carries (reconciler.model): the status fields the KaiwuDB
steps keep across passes (and across a reconciler restart), a pause by annotation during an
incident, and the actions and Events a step records.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from reconciler.keys import ClusterKey
from reconciler.model import (
    PAUSED_ANNOTATION,
    KaiwuStatus,
    NodeEntry,
    Pass,
    ScaleIn,
    meta,
    rfc3339,
)
from renderer.schema import apply_defaults
from renderer.spec import Cluster

NEW_YEAR = 1767225600.0  # 2026-01-01T00:00:00Z


def cluster_obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": "orders", "namespace": "db", "generation": 7},
            "spec": {"replicas": 3, "tls": {"enabled": False}, **spec}}


def new_pass(obj: dict[str, Any], previous: dict[str, Any] | None = None,
             parsed: bool = True) -> Pass:
    p = Pass(ClusterKey("db", "orders"), obj, NEW_YEAR + 0.9, previous or {})
    if parsed:
        p.cluster = Cluster.from_object(apply_defaults(copy.deepcopy(obj)))
    return p


def test_timestamps_are_whole_utc_seconds_as_the_api_writes_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert rfc3339(NEW_YEAR + 0.9) == "2026-01-01T00:00:00Z"
    assert rfc3339(NEW_YEAR + 3661) == "2026-01-01T01:01:01Z"
    monkeypatch.setenv("TZ", "Asia/Shanghai")  # a reconciler run on a laptop in Beijing
    time.tzset()
    try:
        assert rfc3339(NEW_YEAR) == "2026-01-01T00:00:00Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_metadata_of_an_object_without_any_is_empty() -> None:
    assert meta(None) == {} and meta({"metadata": None}) == {}
    assert meta({"metadata": {"name": "orders"}}) == {"name": "orders"}


def test_status_nodes_operation_and_failures_survive_a_reconciler_restart() -> None:
    kaiwu = KaiwuStatus(
        initialized=True,
        nodes=(NodeEntry(1, "orders-0.orders:26257", "live", "orders-0"),
               NodeEntry(4, "10.0.0.9:26257", "not-live")),
        operation=ScaleIn(5, 3, "orders-4", "2026-01-01T00:00:00Z", "Decommissioning", 0),
        failures={"orders-2": {"reason": "NodeLost"}})
    fields = dict(kaiwu.to_fields())
    assert fields == {
        "failures": {"orders-2": {"reason": "NodeLost"}},
        "initialized": True,
        "nodes": [{"nodeId": 1, "address": "orders-0.orders:26257", "state": "live",
                   "pod": "orders-0"},
                  {"nodeId": 4, "address": "10.0.0.9:26257", "state": "not-live"}],
        # Node id 0 is still a node id: it is written, not dropped as "no node".
        "operation": {"type": "ScaleIn", "replicas": 5, "targetReplicas": 3, "pod": "orders-4",
                      "startedAt": "2026-01-01T00:00:00Z", "phase": "Decommissioning",
                      "nodeId": 0},
    }
    assert KaiwuStatus.read(fields) == kaiwu


def test_a_fresh_cluster_writes_none_of_the_lifecycle_fields() -> None:
    kaiwu = KaiwuStatus.read({})
    assert kaiwu == KaiwuStatus(False, None, None, None)
    assert kaiwu.to_fields() == (("failures", None), ("initialized", None), ("nodes", None),
                                 ("operation", None))
    # Probed, and KaiwuDB counts no node yet: an empty list, not "never probed".
    assert KaiwuStatus.read({"nodes": []}).nodes == ()
    assert dict(KaiwuStatus(nodes=()).to_fields())["nodes"] == []
    assert dict(KaiwuStatus(failures={}).to_fields())["failures"] is None


def test_a_scale_in_removing_its_pod_has_no_node_id() -> None:
    removing = ScaleIn(4, 3, "orders-3", "2026-01-01T00:00:00Z", "Removing")
    assert "nodeId" not in removing.to_status()
    assert ScaleIn.from_status(removing.to_status()) == removing
    assert ScaleIn.from_status({"replicas": "4", "targetReplicas": 3, "pod": "orders-3"}) == (
        ScaleIn(4, 3, "orders-3", "", "Removing")), "no node to drain: only removing is left"


def test_a_scale_in_phase_nobody_wrote_drains_its_node_again_never_removes_it_undrained(
        ) -> None:
    garbled = {"replicas": 4, "targetReplicas": 3, "pod": "orders-3", "nodeId": 4,
               "phase": "Removed?"}
    assert ScaleIn.from_status(garbled) == ScaleIn(4, 3, "orders-3", "", "Decommissioning", 4)
    assert ScaleIn.from_status({**garbled, "phase": "Removing"}) == ScaleIn(
        4, 3, "orders-3", "", "Removing", 4)


def test_status_entries_someone_else_wrote_are_ignored_not_fatal() -> None:
    status = {
        "initialized": "yes",
        "nodes": [{"nodeId": "two"}, {"address": "orders-1.orders:26257"}, "junk", None,
                  {"nodeId": "3"}],
        "operation": {"type": "ScaleIn", "replicas": "many", "targetReplicas": 3, "pod": "x"},
        "failures": {"orders-0": "broken", "orders-1": {"reason": "CrashLoop"}},
    }
    kaiwu = KaiwuStatus.read(status)
    assert kaiwu.initialized is True
    assert kaiwu.nodes == (NodeEntry(3, "", "", None),)
    assert kaiwu.operation is None
    assert kaiwu.failures == {"orders-1": {"reason": "CrashLoop"}}
    assert ScaleIn.from_status({"replicas": 4, "pod": "orders-3"}) is None
    assert ScaleIn.from_status({"replicas": 4, "targetReplicas": 3, "pod": "orders-3",
                                "nodeId": "four"}) is None
    assert ScaleIn.from_status(None) is None and ScaleIn.from_status({}) is None
    assert NodeEntry.from_status({"nodeId": None}) is None
    assert KaiwuStatus.read({"failures": ["orders-0"]}).failures is None
    assert KaiwuStatus.read({"failures": {}}).failures is None


def test_a_pass_reads_the_kaiwudb_fields_of_the_previous_status() -> None:
    p = new_pass(cluster_obj(), {"initialized": True, "nodes": [{"nodeId": 2, "pod": "orders-1"}]})
    assert p.kaiwu.initialized
    assert p.kaiwu.nodes == (NodeEntry(2, "", "", "orders-1"),)


def test_the_paused_annotation_pauses_only_when_it_says_true() -> None:
    obj = cluster_obj()
    assert not new_pass(obj).paused
    obj["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    assert new_pass(obj).paused and new_pass(obj).paused_by_annotation
    # A spec that did not parse pauses nothing: there is nothing to act on either way.
    assert not new_pass(obj, parsed=False).paused
    obj["metadata"]["annotations"] = {PAUSED_ANNOTATION: "True"}
    assert not new_pass(obj).paused
    spec_paused = new_pass(cluster_obj(paused=True))
    assert spec_paused.paused and not spec_paused.paused_by_annotation


def test_the_drift_policy_is_the_specs_or_enforce_when_the_spec_did_not_parse() -> None:
    assert new_pass(cluster_obj(drift={"policy": "warn"})).policy == "warn"
    assert new_pass(cluster_obj(drift={"policy": "warn"}), parsed=False).policy == "enforce"


def test_the_generation_comes_from_the_objects_metadata() -> None:
    assert new_pass(cluster_obj()).generation == 7
    obj = cluster_obj()
    obj["metadata"]["generation"] = "8"
    assert new_pass(obj).generation == 8
    del obj["metadata"]["generation"]
    assert new_pass(obj).generation is None
    assert new_pass({"spec": {}}, parsed=False).generation is None


def test_a_requeue_is_never_sooner_than_fifty_milliseconds() -> None:
    p = new_pass(cluster_obj())
    p.requeue_in(30)
    p.requeue_in(0)
    p.requeue_in(-5)
    p.requeue_in(0.06)
    assert p.requeue == [30, 0.05, 0.05, 0.06]


def test_an_action_is_recorded_for_status_and_as_an_event_unless_told_not_to() -> None:
    p = new_pass(cluster_obj())
    p.act("Applied", "StatefulSet/orders", "created")
    p.act("DriftRepaired", "Service/orders", "port restored", event="Warning", reason="Drift")
    p.act("Initialized", "KaiwuCluster/orders", "3 nodes", event=None)
    assert [(a.time, a.action, a.target, a.message) for a in p.actions] == [
        ("2026-01-01T00:00:00Z", "Applied", "StatefulSet/orders", "created"),
        ("2026-01-01T00:00:00Z", "DriftRepaired", "Service/orders", "port restored"),
        ("2026-01-01T00:00:00Z", "Initialized", "KaiwuCluster/orders", "3 nodes")]
    assert p.events == [("Normal", "Applied", "StatefulSet/orders: created"),
                        ("Warning", "Drift", "Service/orders: port restored")]
