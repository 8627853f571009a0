"""`kaiwu status` formatting and exit codes, on plain objects (no API): reconciler.statuscmd's
`cluster_report`, `table`, `render`, `exit_code` and `main` with the API calls replaced, through
the package's entry point: the reports (reconciler.statuscmd.report), the reads
(reconciler.statuscmd.reading) and the output (reconciler.statuscmd.formatting). The same command
against the test world: tests/world_stories/runtime/test_status.py.
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from reconciler import statuscmd
from reconciler.kube.client import ApiError, context_namespace
from reconciler.kube.kinds import Kind
from reconciler.model import Obj
from tests.support.fake_api import FakeApi

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC).timestamp()
ANSI = re.compile(r"\033\[[0-9;]*m")


def certificate(not_after: datetime) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(not_after - timedelta(days=365)).not_valid_after(not_after)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def kwc(ready: bool = True, **status: Any) -> Obj:
    return {"metadata": {"name": "orders", "namespace": "db", "generation": 2},
            "spec": {"replicas": 3, "version": "3.2.1", "tls": {"enabled": True}},
            "status": {
                "phase": "Running" if ready else "Degraded", "readyNodes": 3 if ready else 2,
                "version": "3.2.1", "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "status": "True" if ready else "False",
                     "reason": "Ready" if ready else "ScalingIn",
                     "message": "3/3 pods ready", "lastTransitionTime": "2026-06-01T11:55:00Z"},
                    {"type": "Drifted", "status": "False", "reason": "InSync",
                     "lastTransitionTime": "2026-06-01T10:00:00Z"}],
                "nodes": [{"nodeId": i + 1, "address": f"orders-{i}.orders.db.svc:26257",
                           "state": "live", "pod": f"orders-{i}"} for i in range(3)],
                "lastActions": [{"time": "2026-06-01T11:54:00Z", "action": "Initialized",
                                 "target": "KaiwuCluster/orders", "message": "kwbase init"}],
                **status}}


def sts(update: str = "orders-abc", current: str = "orders-abc", partition: int = 0) -> Obj:
    return {"metadata": {"name": "orders"},
            "spec": {"replicas": 3, "updateStrategy": {"rollingUpdate":
                                                       {"partition": partition}}},
            "status": {"updateRevision": update, "currentRevision": current,
                       "updatedReplicas": 3, "readyReplicas": 3}}


def pod(i: int, ready: bool = True, restarts: int = 0, waiting: str = "") -> Obj:
    state: dict[str, Any] = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {"metadata": {"name": f"orders-{i}",
                         "labels": {"controller-revision-hash": "orders-abc"}},
            "spec": {"nodeName": f"worker-{i}"},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": str(ready)}],
                       "containerStatuses": [{"name": "kwbase", "restartCount": restarts,
                                              "state": state}]}}


def secret(not_after: datetime) -> Obj:
    return {"metadata": {"name": "orders-node-certs"},
            "data": {"node.crt": base64.b64encode(certificate(not_after)).decode()}}


EXPIRY = datetime(2027, 3, 1, 0, 0, 0, tzinfo=UTC)


def report(obj: Obj | None = None, **kw: Any) -> dict[str, Any]:
    return statuscmd.cluster_report(obj or kwc(), kw.get("sts", sts()),
                                    kw.get("pods", [pod(2), pod(0), pod(1)]),
                                    kw.get("secret", secret(EXPIRY)), NOW)


def test_the_table_shows_conditions_pods_rollout_drift_certificates_and_actions() -> None:
    text = statuscmd.table([report()])
    assert "\033" not in text
    lines = text.splitlines()
    assert lines[0] == "db/orders  Ready  nodes 3/3  version 3.2.1  phase Running"
    # Conditions: reason and since when (5 minutes before NOW).
    assert re.search(r"^  Ready +True +Ready +5m ago +3/3 pods ready$", text, re.M)
    assert re.search(r"^  Drifted +False +InSync +2h ago", text, re.M)
    # Pods in ordinal order, each with its Kubernetes node and KaiwuDB node id, aligned.
    rows = [line for line in lines if line.startswith("  orders-")]
    assert [row.split()[:6] for row in rows] == [
        [f"orders-{i}", f"worker-{i}", str(i + 1), "live", "yes", "0"] for i in range(3)]
    header = next(line for line in lines if line.startswith("  POD"))
    assert all(row.index("worker") == header.index("K8S NODE") for row in rows)
    assert "  operation: none" in lines
    assert "  rollout: 3/3 updated, partition 0, revision orders-abc" in lines
    assert "  drift: InSync" in lines
    assert ("  certificates: node certificate (orders-node-certs) expires 2027-03-01T00:00:00Z "
            "(in 272d)") in lines
    assert re.search(r"^    2026-06-01T11:54:00Z +Initialized +KaiwuCluster/orders +kwbase init$",
                     text, re.M)


def test_a_scale_in_an_upgrade_and_a_failover_are_named_as_the_operation() -> None:
    scaling = report(kwc(False, operation={
        "type": "ScaleIn", "replicas": 4, "targetReplicas": 3, "pod": "orders-3",
        "startedAt": "2026-06-01T11:58:00Z", "phase": "Decommissioning", "nodeId": 4}))
    assert scaling["operation"]["type"] == "ScaleIn"
    assert ("operation: ScaleIn 4 -> 3: Decommissioning node 4 (orders-3) since "
            "2026-06-01T11:58:00Z") in statuscmd.table([scaling])

    upgrading = report(kwc(False, version="3.2.0"), sts=sts("orders-new", "orders-old", 2))
    assert upgrading["operation"]["type"] == "Upgrade"
    text = statuscmd.table([upgrading])
    assert "operation: Upgrade 3.2.0 -> 3.2.1: 3/3 pods updated, partition 2" in text
    assert "version 3.2.0 (spec 3.2.1)" in text
    assert "revision orders-new (current orders-old)" in text

    crashing = report(kwc(False, failures={"orders-1": {
        "stage": "CrashLoop", "since": "2026-06-01T11:50:00Z", "restarts": 7,
        "lastWords": "exit 1: disk full"}}), pods=[pod(0), pod(1, False, 7, "CrashLoopBackOff"),
                                                   pod(2)])
    text = statuscmd.table([crashing])
    assert ("operation: Failover orders-1: CrashLoop since 2026-06-01T11:50:00Z (7 restarts: "
            "exit 1: disk full)") in text
    assert re.search(r"^  orders-1 +worker-1 +2 +live +no +7 +CrashLoopBackOff$", text, re.M)
    assert "NotReady (ScalingIn)" in text


def test_colour_only_on_a_terminal_and_never_with_no_color(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert statuscmd.use_colour(Tty()) and not statuscmd.use_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not statuscmd.use_colour(Tty())
    coloured = statuscmd.table([report()], colour=True)
    assert "\033[32mTrue" in coloured
    # Colour codes do not count towards the widths: without them it is the plain table.
    assert ANSI.sub("", coloured) == statuscmd.table([report()])


def test_json_and_yaml_carry_the_same_data_as_the_table() -> None:
    reports = [report(), report(kwc(False))]
    as_json = json.loads(statuscmd.render(reports, "json", colour=False))
    as_yaml = yaml.safe_load(statuscmd.render(reports, "yaml", colour=False))
    assert as_json == as_yaml == {"clusters": reports}
    first = as_json["clusters"][0]
    assert first["pods"][0] == {"name": "orders-0", "node": "worker-0", "nodeId": 1,
                                "liveness": "live", "ready": True, "restarts": 0,
                                "state": "Running", "revision": "orders-abc"}
    assert first["certificates"]["notAfter"] == "2027-03-01T00:00:00Z"
    assert first["conditions"][0]["since"] == "2026-06-01T11:55:00Z"


def test_exit_code_is_0_only_when_every_cluster_shown_is_ready() -> None:
    assert statuscmd.exit_code([report(), report()]) == 0
    assert statuscmd.exit_code([report(), report(kwc(False))]) == 1
    assert statuscmd.exit_code([]) == 0


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """main() with the API replaced: each gather returns the next of the given views."""
    views: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(statuscmd, "load_api_client", lambda *a: object())
    monkeypatch.setattr(statuscmd, "check_reachable", lambda *a: None)
    monkeypatch.setattr(statuscmd, "gather", lambda *a: views.pop(0))
    return views


def run(argv: list[str], **kw: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = statuscmd.main(argv, out, err, **kw)
    return code, out.getvalue(), err.getvalue()


def test_main_exits_0_ready_1_not_ready(offline: list[list[dict[str, Any]]]) -> None:
    offline += [[report()], [report(), report(kwc(False))]]
    code, out, err = run(["-n", "db"])
    assert (code, err) == (0, "") and out.startswith("db/orders  Ready")
    code, out, _ = run(["-A", "-o", "json"])
    assert code == 1 and len(json.loads(out)["clusters"]) == 2


def test_watch_redraws_until_ctrl_c_and_exits_cleanly(
        offline: list[list[dict[str, Any]]]) -> None:
    offline += [[report(kwc(False))], [report()]]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    code, out, err = run(["-n", "db", "--watch"], sleep=sleep)
    assert code == 0 and err == "", "the last view was Ready"
    assert out.count("(Ctrl-C to stop)") == 2 and "\033[2J" not in out, "not a terminal"


@pytest.mark.parametrize(("argv", "says"), [
    (["-o", "wide"], "argument -o/--output: invalid choice: 'wide'"),
    (["-A", "orders"], "a cluster name needs one namespace: drop -A or the name"),
    (["-A", "-n", "db"], "-A and -n exclude each other"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "kubeconfig /nonexistent/kubeconfig does "
     "not exist (pass an existing file to --kubeconfig)"),
])
def test_bad_input_is_one_line_naming_the_flag_exit_2(argv: list[str], says: str) -> None:
    code, out, err = run(argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kaiwu status: ") and says in err, err


def test_ages_read_like_kubectl() -> None:
    assert [statuscmd.ago(s) for s in (-5, 0, 45.9, 59, 60, 119 * 60 + 59, 2 * 3600,
                                       47 * 3600 + 3599, 2 * 86400, 400 * 86400)] == [
        "0s", "0s", "45s", "59s", "1m", "119m", "2h", "47h", "2d", "400d"]


def text_of(obj: Obj | None = None, **kw: Any) -> str:
    return statuscmd.table([report(obj, **kw)])


def test_a_cluster_without_status_is_not_ready_with_no_status_yet() -> None:
    obj = kwc()
    del obj["status"]
    found = report(obj, sts=None, pods=[], secret=None)
    assert (found["ready"], found["reason"], found["message"], found["phase"]) == (
        False, "NoStatus", "", "")
    assert (found["version"], found["readyNodes"], found["observedGeneration"]) == ("", 0, None)
    assert found["nodesWithoutPod"] == [] and found["lastActions"] == []
    lines = statuscmd.table([found]).splitlines()
    assert lines == [
        "db/orders  NotReady (NoStatus)  nodes 0/3  version - (spec 3.2.1)",
        "  operation: none",
        "  rollout: no StatefulSet yet",
        "  drift: not reported yet",
        "  certificates: none found",
        "  pods: none"]
    obj["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
    assert "NotReady (no status yet)" in text_of(obj)
    obj["spec"]["tls"] = {"enabled": False}
    assert "  certificates: TLS off" in text_of(obj, secret=None)
    del obj["spec"]["tls"]
    assert "  certificates: none found" in text_of(obj, secret=None), "TLS is on by default"


def test_a_not_ready_cluster_says_why_under_its_name_and_a_pause_is_shown() -> None:
    obj = kwc(False, phase="")
    obj["metadata"]["annotations"] = {"kaiwu.inspur.com/paused": "true"}
    lines = text_of(obj).splitlines()
    assert lines[:2] == ["db/orders  NotReady (ScalingIn)  nodes 2/3  version 3.2.1  PAUSED",
                         "  3/3 pods ready"]
    obj["metadata"]["annotations"] = {"kaiwu.inspur.com/paused": "false"}
    assert not report(obj)["paused"]
    spec_paused = kwc()
    spec_paused["spec"]["paused"] = True
    assert report(spec_paused)["paused"] and "PAUSED" in text_of(spec_paused)
    # A Ready cluster's message is in its condition row, not repeated under the name.
    assert text_of().splitlines()[1].startswith("  CONDITION")


def test_conditions_show_since_when_and_short_messages() -> None:
    obj = kwc(conditions=[
        {"type": "Stalled", "status": "True", "reason": "DriftFight",
         "message": "StatefulSet/orders keeps being changed back by another controller   "
                    "(kubectl-edit); find and stop it, or set spec.drift.policy: warn",
         "lastTransitionTime": "2026-06-01T09:00:00Z"},
        {"type": "Reconciling", "status": "Unknown", "reason": "Paused",
         "lastTransitionTime": "whenever"}])
    found = report(obj)["conditions"]
    assert found[0]["for"] == "3h" and found[1]["for"] == ""
    assert found[1]["message"] == "" and found[1]["since"] == "whenever"
    text = text_of(obj)
    assert ("  Stalled      True     DriftFight  3h ago  StatefulSet/orders keeps being changed "
            "back by another controller (kubectl-ed...") in text.splitlines()
    assert re.search(r"^  Reconciling +Unknown +Paused +-$", text, re.M)
    lines = text.splitlines()
    assert lines[1] == "  CONDITION    STATUS   REASON      SINCE   MESSAGE"


def test_pods_show_why_they_wait_or_that_they_are_going() -> None:
    waiting = pod(0, False, 0, "ContainerCreating")
    going = pod(1)
    going["metadata"]["deletionTimestamp"] = "2026-06-01T11:59:00Z"
    pending = pod(2, False)
    pending["status"] = {"phase": "Pending"}
    unknown = pod(3, False)
    unknown["status"] = {}
    del unknown["spec"]
    restarted = pod(4, True, 2)
    restarted["status"]["containerStatuses"].append({"name": "sidecar", "restartCount": 3})
    other = {"metadata": {"name": "debug"}, "status": {"phase": "Running"}}
    rows = report(pods=[other, restarted, unknown, pending, going, waiting])["pods"]
    assert [(p["name"], p["state"], p["ready"], p["restarts"], p["node"]) for p in rows] == [
        ("orders-0", "ContainerCreating", False, 0, "worker-0"),
        ("orders-1", "Terminating", True, 0, "worker-1"),
        ("orders-2", "Pending", False, 0, "worker-2"),
        ("orders-3", "Unknown", False, 0, ""),
        ("orders-4", "Running", True, 5, "worker-4"),
        ("debug", "Running", False, 0, "")]
    assert rows[3]["nodeId"] is None and rows[3]["liveness"] == "" and rows[5]["revision"] == ""
    text = statuscmd.table([report(pods=[unknown])])
    assert re.search(r"^  orders-3 +- +- +- +no +0 +Unknown$", text, re.M)


def test_node_ids_without_a_pod_are_listed_after_the_pods() -> None:
    obj = kwc(nodes=[{"nodeId": 1, "address": "orders-0.orders.db.svc:26257", "state": "live",
                      "pod": "orders-0"},
                     {"nodeId": 4, "address": "10.0.0.9:26257", "state": "not-live"}])
    found = report(obj, pods=[pod(0)])
    assert found["nodesWithoutPod"] == [
        {"nodeId": 4, "address": "10.0.0.9:26257", "state": "not-live"}]
    lines = text_of(obj, pods=[pod(0)]).splitlines()
    assert lines[lines.index("  last actions:") - 1] == (
        "  kwdb node 4 (10.0.0.9:26257): not-live, no pod")


def test_drift_shows_the_report_only_while_it_is_there() -> None:
    drifted = kwc(conditions=[{"type": "Drifted", "status": "True", "reason": "Pending",
                               "message": "StatefulSet/orders: spec.replicas 3 -> 4; " * 5}])
    assert report(drifted)["drift"] == {
        "status": "True", "reason": "Pending",
        "message": "StatefulSet/orders: spec.replicas 3 -> 4; " * 5}
    line = next(x for x in text_of(drifted).splitlines() if x.startswith("  drift:"))
    assert line == ("  drift: Pending (" + ("StatefulSet/orders: spec.replicas 3 -> 4; " * 3)[:97]
                    + "...)")
    quiet = kwc(conditions=[{"type": "Drifted", "status": "Unknown", "reason": "Off"}])
    assert report(quiet)["drift"] == {"status": "Unknown", "reason": "Off", "message": ""}
    assert "  drift: Off" in text_of(quiet).splitlines()


def test_a_certificate_close_to_expiry_is_red_and_an_expired_one_says_so() -> None:
    soon = datetime(2026, 6, 20, 12, 0, 0, tzinfo=UTC)
    found = report(secret=secret(soon))["certificates"]
    assert found == {"secret": "orders-node-certs", "notAfter": "2026-06-20T12:00:00Z",
                     "expiresIn": "19d", "days": 19}
    assert ("\033[31mnode certificate (orders-node-certs) expires 2026-06-20T12:00:00Z "
            "(in 19d)\033[0m") in statuscmd.table([report(secret=secret(soon))], colour=True)
    month = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
    assert "\033[31mnode" not in statuscmd.table([report(secret=secret(month))], colour=True)
    past = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    found = report(secret=secret(past))["certificates"]
    assert (found["expiresIn"], found["days"]) == ("expired", -31)
    assert ("  certificates: node certificate (orders-node-certs) expires 2026-05-01T12:00:00Z "
            "(EXPIRED)") in text_of(secret=secret(past)).splitlines()
    assert statuscmd.node_cert_expiry({"data": {"node.crt": base64.b64encode(
        b"not a certificate").decode()}}) is None
    assert statuscmd.node_cert_expiry({"data": {}}) is None
    assert statuscmd.node_cert_expiry(None) is None


def test_a_rollout_of_a_new_statefulset_without_revisions_yet() -> None:
    fresh = {"metadata": {"name": "orders"}, "spec": {}, "status": {}}
    found = report(sts=fresh)
    assert found["rollout"] == {"replicas": 0, "partition": 0, "currentRevision": "",
                                "updateRevision": "", "updated": 0, "ready": 0}
    assert found["operation"] is None
    assert "  rollout: 0/0 updated, partition 0, revision -" in text_of(sts=fresh).splitlines()
    half = sts("orders-new", "")
    assert report(sts=half)["operation"] is None, "no current revision: nothing to upgrade from"
    upgrading = report(kwc(False, version=""), sts=sts("orders-new", "orders-old", 1))
    assert upgrading["operation"] == {
        "type": "Upgrade", "from": "", "to": "3.2.1", "updated": 3, "replicas": 3,
        "partition": 1, "summary": "? -> 3.2.1: 3/3 pods updated, partition 1"}
    assert "(current -)" in text_of(sts=sts("orders-new", ""))


def test_a_failover_names_each_pod_and_comes_before_any_scale_in() -> None:
    obj = kwc(False, failures={"orders-2": {"stage": "Evicting"},
                               "orders-0": {"stage": "NodeLost", "since": "2026-06-01T11:00:00Z"},
                               "orders-1": {}},
              operation={"type": "ScaleIn", "replicas": 4, "targetReplicas": 3})
    op = report(obj)["operation"]
    assert op["type"] == "Failover"
    assert list(op["pods"]) == ["orders-0", "orders-1", "orders-2"]
    assert op["summary"] == ("orders-0: NodeLost since 2026-06-01T11:00:00Z; orders-1: ?; "
                             "orders-2: Evicting")
    removing = report(kwc(False, operation={
        "type": "ScaleIn", "replicas": 4, "targetReplicas": 3, "pod": "orders-3",
        "startedAt": "2026-06-01T11:58:00Z", "phase": "Removing", "nodeId": 0}))["operation"]
    assert removing["summary"] == "4 -> 3: Removing node 0 (orders-3) since 2026-06-01T11:58:00Z"
    assert removing["pod"] == "orders-3"
    unnamed = report(kwc(False, operation={
        "type": "ScaleIn", "replicas": 4, "targetReplicas": 3, "pod": "orders-3",
        "startedAt": "2026-06-01T11:58:00Z", "phase": "Removing"}))["operation"]
    assert unnamed["summary"] == "4 -> 3: Removing (orders-3) since 2026-06-01T11:58:00Z"
    assert report(kwc(False, operation={"type": "Backup"}))["operation"] is None


def test_colours_mark_what_is_good_bad_and_in_between() -> None:
    obj = kwc(False, nodes=[{"nodeId": 1, "state": "decommissioning", "pod": "orders-0"}],
              conditions=[{"type": "Reconciling", "status": "Unknown", "reason": "Waiting"}],
              lastActions=[])
    pods = [pod(0, False, 0, "Error")]
    coloured = statuscmd.table([report(obj, pods=pods)], colour=True)
    assert coloured.splitlines()[0] == (
        "\033[1mdb/orders\033[0m  \033[31mNotReady (no status yet)\033[0m  nodes 2/3  "
        "version 3.2.1  phase Degraded")
    assert "\033[33mUnknown\033[0m" in coloured
    assert "\033[33mdecommissioning\033[0m" in coloured and "\033[31mno   \033[0m" in coloured
    assert "\033[31mError\033[0m" in coloured
    assert ANSI.sub("", coloured) == statuscmd.table([report(obj, pods=pods)])
    ok = statuscmd.table([report()], colour=True)
    assert ok.splitlines()[0].startswith("\033[1mdb/orders\033[0m  \033[32mReady\033[0m")
    assert "\033[32mlive    \033[0m" in ok and "\033[32myes  \033[0m" in ok
    assert "\033[32mFalse \033[0m  InSync" in ok, "Drifted False is good news"
    # Only the status columns are painted: not a pod's name, nor an action's words.
    assert "\033[32mRunning" not in ok and "\033[32morders-0" not in ok
    paused = kwc()
    paused["spec"]["paused"] = True
    assert "  \033[33mPAUSED\033[0m" in statuscmd.table([report(paused)], colour=True)
    assert "\033[33mScaleIn 4 -> 3" in statuscmd.table([report(kwc(False, operation={
        "type": "ScaleIn", "replicas": 4, "targetReplicas": 3}))], colour=True)


def test_only_the_five_latest_actions_are_shown_with_short_messages() -> None:
    actions = [{"time": f"2026-06-01T11:0{i}:00Z", "action": "DriftRepaired",
                "target": "Service/orders", "message": f"repair {i} " + "x" * 100}
               for i in range(7)]
    lines = text_of(kwc(lastActions=actions)).splitlines()
    start = lines.index("  last actions:")
    assert lines[start + 1] == "    TIME                  ACTION         TARGET          MESSAGE"
    shown = lines[start + 2:]
    assert [line.split()[0] for line in shown] == [f"2026-06-01T11:0{i}:00Z" for i in range(5)]
    assert shown[0].endswith("repair 0 " + "x" * 68 + "...")
    assert report(kwc(lastActions=actions))["lastActions"] == actions


def test_no_cluster_found_is_said_in_words() -> None:
    assert statuscmd.table([]) == "No KaiwuClusters found.\n"
    assert json.loads(statuscmd.render([], "json", colour=False)) == {"clusters": []}
    assert statuscmd.render([], "table", colour=True) == "No KaiwuClusters found.\n"


API_VERSIONS = {"KaiwuCluster": "kaiwu.inspur.com/v1", "KaiwuBackup": "kaiwu.inspur.com/v1",
                "KaiwuBackupSchedule": "kaiwu.inspur.com/v1", "StatefulSet": "apps/v1",
                "Pod": "v1", "Secret": "v1"}


class StatusApi(FakeApi):
    """The fast tier's one API (tests/support/fake_api.py) holding `objects`, noting each read
    `kaiwu status` makes, (kind, namespace, selector or name); a kind in `failing` is answered
    500, in `missing` 404 (its CRD not installed), in `forbidden` 403."""

    def __init__(self, objects: list[tuple[str, Obj]], forbidden: tuple[str, ...] = (),
                 failing: tuple[str, ...] = (), missing: tuple[str, ...] = ()) -> None:
        super().__init__()
        for kind, obj in objects:
            self.put({"apiVersion": API_VERSIONS[kind], "kind": kind, **obj})
        self.forbidden, self.failing, self.missing = forbidden, failing, missing
        self.calls: list[tuple[str, str | None, str | None]] = []

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        self.calls.append((kind.kind, namespace, label_selector))
        if kind.kind in self.failing:
            raise ApiError(500, "InternalError", "etcd is away")
        if kind.kind in self.missing:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if kind.kind in self.forbidden:
            raise ApiError(403, "Forbidden", f"{kind.plural} is forbidden")
        return super().list_objects(kind, namespace, label_selector, keep=keep)

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        self.calls.append((kind.kind, namespace, name))
        return super().get(kind, namespace, name)


def managed(obj: Obj, namespace: str, instance: str) -> Obj:
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["namespace"] = namespace
    obj["metadata"].setdefault("labels", {}).update({
        "app.kubernetes.io/managed-by": "kaiwu-operator", "app.kubernetes.io/instance": instance})
    return obj


def fleet() -> list[tuple[str, Obj]]:
    billing = kwc(False)
    billing["metadata"]["name"] = "billing"
    billing["spec"]["tls"]["nodeSecretName"] = "billing-certs"
    orders_b = kwc()
    orders_b["metadata"]["namespace"] = "aaa"
    certs = managed(secret(EXPIRY), "db", "billing")
    certs["metadata"]["name"] = "billing-certs"
    other_sts = managed(sts(), "db", "billing")
    other_sts["metadata"]["name"] = "billing-backup"
    billing_pod = managed(pod(0), "db", "billing")
    billing_pod["metadata"]["name"] = "billing-0"  # one name per namespace, as the API has it
    return [("KaiwuCluster", kwc()), ("KaiwuCluster", billing), ("KaiwuCluster", orders_b),
            ("StatefulSet", managed(sts(), "db", "orders")), ("StatefulSet", other_sts),
            ("Pod", managed(pod(0), "db", "orders")), ("Pod", managed(pod(1), "db", "orders")),
            ("Pod", billing_pod),
            ("Pod", {"metadata": {"name": "stray", "namespace": "db",
                                  "labels": {"app.kubernetes.io/managed-by": "kaiwu-operator"}}}),
            ("Secret", managed(secret(EXPIRY), "db", "orders")), ("Secret", certs)]


def test_status_of_a_namespace_costs_six_lists_and_matches_objects_to_their_cluster() -> None:
    kube = StatusApi(fleet())
    reports = statuscmd.gather(kube, "db", None, now=NOW)  # type: ignore[arg-type]
    managed_by = "app.kubernetes.io/managed-by=kaiwu-operator"
    assert kube.calls == [("KaiwuCluster", "db", None), ("StatefulSet", "db", managed_by),
                          ("Pod", "db", managed_by), ("Secret", "db", managed_by),
                          ("KaiwuBackup", "db", None), ("KaiwuBackupSchedule", "db", None)]
    assert [(r["namespace"], r["name"]) for r in reports] == [("db", "billing"), ("db", "orders")]
    billing, orders = reports
    assert billing["rollout"] is None, "billing-backup is not billing's StatefulSet"
    assert [p["name"] for p in billing["pods"]] == ["billing-0"]
    assert billing["certificates"]["secret"] == "billing-certs"
    assert [p["name"] for p in orders["pods"]] == ["orders-0", "orders-1"]
    assert orders["rollout"] is not None and orders["certificates"]["secret"] == (
        "orders-node-certs")
    everywhere = statuscmd.gather(StatusApi(fleet()), None, None, now=NOW)  # type: ignore[arg-type]
    assert [(r["namespace"], r["name"]) for r in everywhere] == [
        ("aaa", "orders"), ("db", "billing"), ("db", "orders")]
    assert everywhere[0]["pods"] == [], "another namespace's orders has none of these pods"


def test_status_of_one_cluster_asks_for_it_and_only_its_objects() -> None:
    kube = StatusApi(fleet())
    [found] = statuscmd.gather(kube, "db", "orders", now=NOW)  # type: ignore[arg-type]
    selector = "app.kubernetes.io/managed-by=kaiwu-operator,app.kubernetes.io/instance=orders"
    assert kube.calls == [("KaiwuCluster", "db", "orders"), ("StatefulSet", "db", selector),
                          ("Pod", "db", selector), ("Secret", "db", selector),
                          ("KaiwuBackup", "db", None), ("KaiwuBackupSchedule", "db", None)]
    assert found["name"] == "orders" and len(found["pods"]) == 2
    with pytest.raises(LookupError) as missing:
        statuscmd.gather(StatusApi(fleet()), "db", "payments", now=NOW)  # type: ignore[arg-type]
    assert missing.value.args[0] == ("KaiwuCluster db/payments not found (check the name, or "
                                     "the namespace with -n)")
    empty = StatusApi([])
    assert statuscmd.gather(empty, "db", None) == []  # type: ignore[arg-type]
    assert empty.calls == [("KaiwuCluster", "db", None)], "no cluster: nothing else is read"


def backup_of(name: str, phase: str, created: str, cluster: str = "orders",
              reason: str | None = None) -> Obj:
    status: Obj = {"phase": phase}
    if phase == "completed":
        status["completedAt"] = created
    if reason:
        status["reason"] = reason
    return {"metadata": {"name": name, "namespace": "db", "creationTimestamp": created},
            "spec": {"cluster": {"name": cluster}}, "status": status}


def test_status_shows_each_clusters_last_backup_the_next_run_and_failures_since() -> None:
    nightly = {"metadata": {"name": "nightly", "namespace": "db"},
               "spec": {"cluster": {"name": "orders"}},
               "status": {"nextScheduleTime": "2026-12-05T03:00:00Z"}}
    paused = {"metadata": {"name": "hourly", "namespace": "db"},
              "spec": {"cluster": {"name": "orders"}, "suspend": True},
              "status": {"nextScheduleTime": "2026-12-04T14:00:00Z"}}
    objects = [*fleet(), ("KaiwuBackupSchedule", nightly), ("KaiwuBackupSchedule", paused),
               ("KaiwuBackup", backup_of("n-1", "completed", "2026-12-02T03:00:00Z")),
               ("KaiwuBackup", backup_of("n-2", "completed", "2026-12-03T03:00:00Z")),
               ("KaiwuBackup", backup_of("n-3", "failed", "2026-12-03T04:00:00Z",
                                         reason="NodeLost")),
               ("KaiwuBackup", backup_of("n-4", "running", "2026-12-03T05:00:00Z")),
               ("KaiwuBackup", backup_of("b-1", "failed", "2026-12-03T05:00:00Z",
                                         cluster="billing"))]
    billing, orders = statuscmd.gather(StatusApi(objects), "db", None, now=NOW)  # type: ignore[arg-type]
    assert orders["backups"]["lastSuccess"]["name"] == "n-2"
    assert orders["backups"]["running"]["name"] == "n-4"
    assert orders["backups"]["next"] == {"schedule": "nightly", "at": "2026-12-05T03:00:00Z",
                                         "overdue": False}
    assert [f["name"] for f in orders["backups"]["failedSince"]] == ["n-3"]
    assert billing["backups"]["lastSuccess"] is None
    text = statuscmd.table([billing, orders])
    assert "  backups: none completed; no schedule; 1 failed since: b-1 (failed)" in text
    assert "  backups: last n-2 (" in text and "running n-4; next 2026-12-05T03:00:00Z " \
        "(nightly); 1 failed since: n-3 (NodeLost)" in text
    # Without the backup CRDs (404) or the right to read them, no backups, nothing fails.
    without = StatusApi(fleet(), missing=("KaiwuBackup",))
    [bare] = statuscmd.gather(without, "db", "orders", now=NOW)  # type: ignore[arg-type]
    assert bare["backups"]["lastSuccess"] is None


def test_without_the_right_to_read_secrets_the_rest_is_still_shown() -> None:
    kube = StatusApi(fleet(), forbidden=("Secret",))
    reports = statuscmd.gather(kube, "db", None, now=NOW)  # type: ignore[arg-type]
    assert [r["certificates"] for r in reports] == [None, None]
    assert [len(r["pods"]) for r in reports] == [1, 2]
    with pytest.raises(ApiError):
        statuscmd.gather(StatusApi(fleet(), failing=("Pod",)), "db", None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("error", "says"), [
    (ApiError(404, "NotFound", "the server could not find the requested resource"),
     "kaiwu status: the KaiwuCluster CRD is not installed here (kaiwu install | kubectl apply "
     "-f -, or check --context)\n"),
    (ApiError(403, "Forbidden", "kaiwuclusters is forbidden"),
     "kaiwu status: reading the API failed: HTTP 403 Forbidden: kaiwuclusters is forbidden\n"),
    (ConnectionRefusedError(111, "Connection\n  refused"),
     "kaiwu status: lost the API server: [Errno 111] Connection refused (check that it is "
     "running, and --context)\n"),
    (LookupError("KaiwuCluster db/payments not found"),
     "kaiwu status: KaiwuCluster db/payments not found\n"),
])
def test_api_failures_are_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                               error: Exception, says: str) -> None:
    monkeypatch.setattr(statuscmd, "load_api_client", lambda *a: object())
    monkeypatch.setattr(statuscmd, "check_reachable", lambda *a: None)

    def gather(*_: Any) -> list[dict[str, Any]]:
        raise error

    monkeypatch.setattr(statuscmd, "gather", gather)
    assert run(["-n", "db"]) == (2, "", says)


def test_watch_on_a_terminal_redraws_in_place_and_json_has_no_clock(
        offline: list[list[dict[str, Any]]]) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    offline += [[report()], [report(kwc(False))]]
    out = Tty()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    code = statuscmd.main(["-n", "db", "--watch", "-o", "json"], out, io.StringIO(), sleep)
    assert code == 1, "the last view was not Ready"
    assert sleeps == [3.0, 3.0]
    text = out.getvalue()
    assert text.count("\033[H\033[2J") == 2 and "Ctrl-C" not in text
    assert json.loads(text.split("\033[H\033[2J")[1])["clusters"][0]["ready"] is True


def test_the_namespace_is_the_flag_else_the_contexts_else_default(tmp_path: Any) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u",
                                                 "namespace": "shop"}},
                     {"name": "ops", "context": {"cluster": "c", "user": "u",
                                                 "namespace": "kaiwu-system"}},
                     {"name": "bare", "context": {"cluster": "c", "user": "u"}}]}))
    assert context_namespace("db", str(kubeconfig), None) == "db"
    assert context_namespace(None, str(kubeconfig), None) == "shop"
    assert context_namespace(None, str(kubeconfig), "ops") == "kaiwu-system"
    assert context_namespace(None, str(kubeconfig), "nosuch") == "shop"
    assert context_namespace(None, str(kubeconfig), "bare") == "default"


def test_a_healthy_clusters_conditions_are_all_green() -> None:
    healthy = kwc(conditions=[
        {"type": "Ready", "status": "True", "reason": "Ready"},
        {"type": "Reconciling", "status": "False", "reason": "Done"},
        {"type": "Stalled", "status": "False", "reason": "Progressing"},
        {"type": "Drifted", "status": "False", "reason": "InSync"}])
    rows = statuscmd.table([report(healthy)], colour=True).splitlines()[2:6]
    assert [row.split()[1] for row in rows] == [
        "\033[32mTrue", "\033[32mFalse", "\033[32mFalse", "\033[32mFalse"]
    busy = kwc(False, conditions=[
        {"type": "Ready", "status": "False", "reason": "Waiting"},
        {"type": "Reconciling", "status": "True", "reason": "Applying"},
        {"type": "Stalled", "status": "True", "reason": "DriftFight"},
        {"type": "Drifted", "status": "Unknown", "reason": "Off"}])
    rows = statuscmd.table([report(busy)], colour=True).splitlines()[2:6]
    assert [row.split()[1] for row in rows] == [
        "\033[31mFalse", "\033[33mTrue", "\033[31mTrue", "\033[33mUnknown\033[0m"]


def test_the_certificate_expiry_is_in_utc_whatever_the_local_time_zone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        assert report()["certificates"]["notAfter"] == "2027-03-01T00:00:00Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_kubeconfig_may_come_from_kaiwu_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[tuple[Any, ...]] = []
    monkeypatch.setenv("KAIWU_KUBECONFIG", "/etc/kaiwu/kubeconfig")
    def load(*args: Any) -> object:
        used.append(args)
        return object()

    monkeypatch.setattr(statuscmd, "load_api_client", load)
    monkeypatch.setattr(statuscmd, "check_reachable", lambda *a: None)
    monkeypatch.setattr(statuscmd, "gather", lambda *a: [])
    assert run(["-n", "db", "--context", "prod"]) == (0, "No KaiwuClusters found.\n", "")
    assert used == [("/etc/kaiwu/kubeconfig", "prod")]
    assert run(["-n", "db", "--kubeconfig", "/home/me/.kube/other"])[0] == 0
    assert used[-1] == ("/home/me/.kube/other", None)


def test_the_pod_table_has_a_header_and_an_action_without_a_time_leaves_it_blank() -> None:
    lines = text_of(kwc(lastActions=[{"action": "Paused", "target": "KaiwuCluster/orders"}]
                        )).splitlines()
    assert "  POD       K8S NODE  KWDB ID  LIVENESS  READY  RESTARTS  STATE" in lines
    assert lines[-2:] == ["    TIME  ACTION  TARGET               MESSAGE",
                          "          Paused  KaiwuCluster/orders"]
