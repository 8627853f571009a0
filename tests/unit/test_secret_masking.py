"""Stories about secrets in every place we print: `kaiwu diff` (text and markdown, which gets
posted to pull requests), drift reports and the Ready/Drifted messages made of them, Events and
logs. A cluster carries a secret in each form the spec allows: a `--flag=value` argument
(spec.extraArgs), an env var (spec.extraEnv) and an annotation (spec.annotations, on every
object and pod). None may be printed; each shows as a mask that changes when the secret does.
A live object may also carry `--flag value` (two arguments, which a spec cannot: the renderer
wants one flag per item): its value is masked too.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from typing import Any

import pytest

from reconciler.controller.conditions import changes_text
from reconciler.drift.compare import compare as drift_compare
from reconciler.drift.compare import format_report
from reconciler.drift.projection import DriftSettings
from reconciler.kube.events import EventRecorder
from reconciler.metrics import Metrics
from reconciler.model import Obj
from renderer.diff import compare, format_markdown, format_text
from renderer.loader import parse_text
from renderer.redact import mask, mask_arguments, mask_flag, redact
from renderer.render import build_objects, read_clusters
from renderer.settings import RenderSettings

MASK = re.compile(r"\*\*\*[0-9a-f]{16}")
OLD = ("flag-old-1111", "env-old-2222", "note-old-3333")
NEW = ("flag-new-4444", "env-new-5555", "note-new-6666")


def cluster_text(secrets: tuple[str, str, str]) -> str:
    flag, env, note = secrets
    obj = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
           "metadata": {"name": "orders", "namespace": "shop"},
           "spec": {"replicas": 3, "tls": {"enabled": False},
                    "extraArgs": [f"--api-token={flag}", "--vmodule=raft=1"],
                    "extraEnv": [{"name": "DB_PASSWORD", "value": env},
                                 {"name": "TZ", "value": "UTC"}],
                    "annotations": {"vault.example.com/secret-token": note,
                                    "team.example.com/owner": "shop"}}}
    return json.dumps(obj, indent=2)  # YAML is a superset of JSON


def rendered(secrets: tuple[str, str, str]) -> list[Obj]:
    source = read_clusters(parse_text(cluster_text(secrets), "orders.yaml"))[0]
    return build_objects(source.cluster, RenderSettings())


def assert_masked(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret} printed:\n{text}"
    assert MASK.search(text), text


# ---- kaiwu diff -------------------------------------------------------------------------------

def test_kaiwu_diff_masks_secret_flags_env_and_annotations_in_text_and_markdown() -> None:
    result = compare(parse_text(cluster_text(OLD), "a/orders.yaml"),
                     parse_text(cluster_text(NEW), "b/orders.yaml"), RenderSettings())
    for output in (format_text(result), format_markdown(result)):
        assert_masked(output, *OLD, *NEW)
        assert "--vmodule=raft=1" in output and "UTC" in output and "shop" in output
    text = format_text(result)
    for old, new in zip(OLD, NEW, strict=True):
        assert mask(old) in text and mask(new) in text, (old, new)


def test_redact_masks_each_form_and_leaves_everything_else_alone() -> None:
    for obj in rendered(OLD):
        shown = redact(obj)
        text = str(shown)
        for secret in OLD:
            assert secret not in text, (obj["kind"], secret)
    statefulset = next(o for o in rendered(OLD) if o["kind"] == "StatefulSet")
    shown = redact(statefulset)
    pod = shown["spec"]["template"]
    assert pod["metadata"]["annotations"]["vault.example.com/secret-token"] == mask(OLD[2])
    assert pod["metadata"]["annotations"]["team.example.com/owner"] == "shop"
    assert shown["metadata"]["annotations"]["vault.example.com/secret-token"] == mask(OLD[2])
    assert statefulset == next(o for o in rendered(OLD) if o["kind"] == "StatefulSet"), \
        "the object itself is not changed"


@pytest.mark.parametrize(("argument", "masked"), [
    ("--password=hunter2", True), ("-api_key=abc", True), ("--client-secret=x=y", True),
    ("--PASSWORD=hunter2", True), ("--cache=.25", False), ("--password", False),
    ("password=hunter2", False),
])
def test_only_secret_looking_flags_with_a_value_are_masked(argument: str, masked: bool) -> None:
    shown = mask_flag(argument)
    if masked:
        flag, _, value = argument.partition("=")
        assert shown == f"{flag}={mask(value)}"
    else:
        assert shown == argument


def test_the_argument_after_a_bare_secret_flag_is_masked_and_nothing_else() -> None:
    arguments = ["kwbase", "--password", "hunter2", "--cache", ".25", "--token=abc", 7,
                 "--secret"]
    assert mask_arguments(arguments) == [
        "kwbase", "--password", mask("hunter2"), "--cache", ".25", f"--token={mask('abc')}", 7,
        "--secret"]


def test_secret_data_is_masked_by_its_decoded_bytes_and_string_data_by_its_text() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
              "data": {"a": "aHVudGVyMg=="}, "stringData": {"b": "hunter2"}}
    shown = redact(secret)
    assert shown["data"]["a"] == mask(b"hunter2") == shown["stringData"]["b"]
    assert redact({**secret, "data": {"a": "not base64!"}})["data"]["a"] == mask("not base64!")


# ---- drift reports, conditions, Events, logs ---------------------------------------------------

SETTINGS = DriftSettings(mask_key=b"test-key")


def drifted_statefulset() -> tuple[Obj, Obj]:
    desired = next(o for o in rendered(OLD) if o["kind"] == "StatefulSet")
    live = copy.deepcopy(next(o for o in rendered(NEW) if o["kind"] == "StatefulSet"))
    return desired, live


def test_a_drift_report_of_secret_changes_shows_masks_only() -> None:
    desired, live = drifted_statefulset()
    report = drift_compare(desired, live, settings=SETTINGS)
    assert report.drifted
    paths = {change.path for change in report.changes}
    assert any("annotations" in path for path in paths), paths
    assert any("DB_PASSWORD" in path for path in paths), paths
    assert any("args" in path or "command" in path for path in paths), paths
    for text in (format_report(report), changes_text(report, limit=50), str(report)):
        assert_masked(text, *OLD, *NEW)


def test_a_secret_passed_by_hand_as_a_flag_then_its_value_is_masked_in_drift_reports() -> None:
    # Someone edits the live StatefulSet: `kubectl edit` appends `--auth-token s3cr3t-live`.
    desired, _ = drifted_statefulset()
    live = copy.deepcopy(desired)
    container = live["spec"]["template"]["spec"]["containers"][0]
    key = "args" if "args" in container else "command"
    container[key] = [*container[key], "--auth-token", "s3cr3t-live", "--locality", "zone=a"]
    report = drift_compare(desired, live, settings=SETTINGS)
    assert report.drifted
    for text in (format_report(report), changes_text(report, limit=50), str(report)):
        assert_masked(text, "s3cr3t-live")
        assert "--auth-token" in text and "zone=a" in text, text
    # Equal values still compare equal: the same hand edit on both sides is no drift.
    assert not drift_compare(live, copy.deepcopy(live), settings=SETTINGS).drifted


class EventSink:
    """The API as the event recorder sees it: every Event created is kept."""

    def __init__(self) -> None:
        self.created: list[Obj] = []

    def create(self, obj: Obj) -> Obj:
        self.created.append(obj)
        return obj

    def patch(self, *args: Any, **kwargs: Any) -> Obj:
        return {}


def test_events_and_logs_about_a_secret_drift_carry_masks_only(
        caplog: pytest.LogCaptureFixture) -> None:
    desired, live = drifted_statefulset()
    report = drift_compare(desired, live, settings=SETTINGS)
    sink = EventSink()
    recorder = EventRecorder(sink, Metrics())  # type: ignore[arg-type]
    cluster = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
               "metadata": {"name": "orders", "namespace": "shop", "uid": "u1"}}
    with caplog.at_level(logging.DEBUG):
        recorder.emit(cluster, "Warning", "DriftDetected",
                      f"StatefulSet/orders: {changes_text(report)} (drift policy is warn)")
        logging.getLogger("reconciler.controller.report").info(
            "drift detected: %s", format_report(report))
    assert len(sink.created) == 1
    assert_masked(str(sink.created[0]), *OLD, *NEW)
    assert_masked(caplog.text, *OLD, *NEW)


def test_a_controller_pass_over_a_secret_drift_writes_masked_events_and_logs(
        caplog: pytest.LogCaptureFixture) -> None:
    """The whole path: the drift step finds the live StatefulSet with other secrets (warn
    policy: reported, not repaired); the report step writes the Event and logs the drift."""
    from reconciler.controller.controller import Controller
    from reconciler.keys import ClusterKey
    from reconciler.settings import Settings
    from tests.support.controller_world import NOW
    from tests.support.fake_api import FakeApi, FakeView

    obj = json.loads(cluster_text(OLD))
    obj["spec"]["drift"] = {"policy": "warn"}
    obj["metadata"].update(uid="u1", generation=1, resourceVersion="7")
    _, live = drifted_statefulset()
    live["metadata"].update(uid="sts-uid", resourceVersion="5", generation=1)
    obj["status"] = {"inventory": ["apps/v1/StatefulSet/shop/orders"], "observedGeneration": 1}
    objects = {("KaiwuCluster", "shop", "orders"): obj, ("StatefulSet", "shop", "orders"): live}
    kube = FakeApi(objects, clock=lambda: NOW)
    controller = Controller(kube, FakeView(kube),  # type: ignore[arg-type]
                            Settings(watch_namespace="shop", leader_election=False),
                            Metrics(), clock=lambda: NOW)
    with caplog.at_level(logging.INFO):
        controller.reconcile(ClusterKey("shop", "orders"))
    emitted = controller.ctx.events.emitted
    drift = [e for e in emitted if e.reason == "DriftDetected"]
    assert drift, [(e.reason, e.message) for e in emitted]
    for event in emitted:
        for secret in (*OLD, *NEW):
            assert secret not in event.message, (event.reason, event.message)
    assert_masked(drift[0].message, *OLD, *NEW)
    assert "drift detected" in caplog.text
    assert_masked(caplog.text, *OLD, *NEW)
    status = objects[("KaiwuCluster", "shop", "orders")].get("status") or {}
    assert_masked(str(status.get("conditions")), *OLD, *NEW)


def test_masks_use_the_key_given_for_every_form() -> None:
    """Masks comparable across processes need one key (the drift normaliser passes its own):
    each form is masked under the key given, not the process's."""
    key = b"cluster-key"
    obj = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "annotations": {
        "example.com/api-token": "t1"}},
           "data": {"a": "aHVudGVyMg=="}, "stringData": {"b": "hunter2"},
           "spec": {"containers": [{"name": "c", "args": ["--password=p1", "--cache=.25"],
                                    "command": ["kwbase", "--api-key=k1"],
                                    "env": [{"name": "DB_PASSWORD", "value": "e1"}]}]}}
    shown = redact(obj, key)
    container = shown["spec"]["containers"][0]
    assert container["args"] == [f"--password={mask('p1', key)}", "--cache=.25"]
    assert container["command"] == ["kwbase", f"--api-key={mask('k1', key)}"]
    assert container["env"][0]["value"] == mask("e1", key)
    assert shown["metadata"]["annotations"]["example.com/api-token"] == mask("t1", key)
    assert shown["data"]["a"] == mask(b"hunter2", key) == shown["stringData"]["b"]
    assert mask("p1", key) != mask("p1")
    assert mask_flag("--password=p1", key=key) == f"--password={mask('p1', key)}"
