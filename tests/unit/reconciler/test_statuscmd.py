"""`kaiwu status` formatting and exit codes, on plain objects (no API): reconciler.statuscmd's
`cluster_report`, `table`, `render`, `exit_code` and `main` with the API calls replaced. The same
command against the test world: tests/world_stories/runtime/test_status.py.
"""

from __future__ import annotations

import base64
import io
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from reconciler import statuscmd
from reconciler.model import Obj

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
