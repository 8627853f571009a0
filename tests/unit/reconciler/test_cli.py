"""The `kaiwu` command's own part (reconciler.cli): which module each subcommand goes to, the
logs `kaiwu reconcile` writes (JSON for collectors, text for people), and how it starts and
ends: one line and exit 2 for bad settings or no kubeconfig, 1 for a server that does not
answer or a reconciler that failed, a clean stop on SIGTERM. The API and the runtime are
replaced here; the real process is started in tests/unit/test_cli_errors.py and the world
stories.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from reconciler import cli, logs
from reconciler.kube import client as kube_client
from reconciler.runtime import process
from reconciler.settings import Settings


def record(message: str = "applied %s", *args: Any, exc: bool = False,
           **extra: Any) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("etcd is away")
        except RuntimeError:
            exc_info = sys.exc_info()
    made = logging.LogRecord("reconciler.controller", logging.WARNING, "controller.py", 10,
                             message, args or ("StatefulSet/orders",), exc_info)
    made.created, made.msecs = 1767225600.0, 7.9
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_json_log_line_carries_time_level_logger_message_and_the_calls_fields() -> None:
    line = logs.JsonFormatter().format(record(cluster="db/orders", attempt=2, _private="no"))
    assert json.loads(line) == {
        "time": "2026-01-01T00:00:00.007Z", "level": "warning",
        "logger": "reconciler.controller", "message": "applied StatefulSet/orders",
        "cluster": "db/orders", "attempt": 2}
    # A field JSON cannot hold is written as its text, not dropped and not a crash.
    assert json.loads(logs.JsonFormatter().format(record(at=threading)))["at"].startswith(
        "<module 'threading'")
    failed = json.loads(logs.JsonFormatter().format(record(exc=True)))
    assert failed["exception"].startswith("Traceback (most recent call last):")
    assert failed["exception"].endswith("RuntimeError: etcd is away")
    assert "exception" not in json.loads(logs.JsonFormatter().format(record()))


def test_a_text_log_line_puts_the_fields_after_the_message_and_the_traceback_below(
) -> None:
    text = logs.TextFormatter().format(record(cluster="db/orders", kind="StatefulSet",
                                             _private="no"))
    assert text.endswith(" WARNING reconciler.controller: applied StatefulSet/orders "
                         "cluster=db/orders kind=StatefulSet")
    assert text.startswith("20")  # asctime first
    assert logs.TextFormatter().format(record()).endswith(
        " WARNING reconciler.controller: applied StatefulSet/orders")
    lines = logs.TextFormatter().format(record(exc=True, cluster="db/orders")).splitlines()
    assert lines[0].endswith("applied StatefulSet/orders cluster=db/orders")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "RuntimeError: etcd is away"


@pytest.fixture
def root_logging() -> Iterator[logging.Logger]:
    root, urllib3 = logging.getLogger(), logging.getLogger("urllib3")
    saved = root.handlers[:], root.level, urllib3.level
    yield root
    root.handlers[:], _, _ = saved
    root.setLevel(saved[1])
    urllib3.setLevel(saved[2])


def test_logging_is_set_up_as_the_settings_say(root_logging: logging.Logger) -> None:
    logs.configure_logging("text", "debug")
    [handler] = root_logging.handlers
    assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
    assert isinstance(handler.formatter, logs.TextFormatter)
    assert root_logging.level == logging.DEBUG
    # urllib3 would log every retry at warning: only its errors get through.
    assert logging.getLogger("urllib3").level == logging.ERROR
    logs.configure_logging(Settings().log_format, Settings().log_level)
    [handler] = root_logging.handlers
    assert isinstance(handler.formatter, logs.JsonFormatter)
    assert root_logging.level == logging.INFO


def test_each_subcommand_goes_to_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[tuple[str, list[str]]] = []

    def recorder(name: str, code: int) -> Any:
        def run(argv: list[str]) -> int:
            called.append((name, argv))
            return code
        return run

    monkeypatch.setattr(cli, "reconcile", recorder("reconcile", 3))
    monkeypatch.setattr("reconciler.install.main", recorder("install", 4))
    monkeypatch.setattr("reconciler.statuscmd.main", recorder("status", 5))
    monkeypatch.setattr("renderer.cli.main", recorder("renderer", 6))
    assert cli.main(["reconcile", "--workers", "4"]) == 3
    assert cli.main(["install", "--scope", "namespaced"]) == 4
    assert cli.main(["status", "-A"]) == 5
    assert cli.main(["render", "clusters/"]) == 6
    assert cli.main(["validate", "reconcile"]) == 6
    monkeypatch.setattr(sys, "argv", ["kaiwu", "status", "orders"])
    assert cli.main() == 5
    assert called == [("reconcile", ["--workers", "4"]), ("install", ["--scope", "namespaced"]),
                      ("status", ["-A"]), ("renderer", ["render", "clusters/"]),
                      ("renderer", ["validate", "reconcile"]), ("status", ["orders"])]


API = object()  # the client `kaiwu reconcile` connects with, handed on to the runtime


class FakeRuntime:
    """The runtime as `kaiwu reconcile` drives it: run until the stop event, or fail."""

    ran: ClassVar[list[tuple[Settings, Any]]] = []
    fail: ClassVar[Exception | None] = None

    def __init__(self, settings: Settings, *, api_client: Any) -> None:
        self.settings, self.api_client = settings, api_client

    def run(self, stop: threading.Event) -> int:
        FakeRuntime.ran.append((self.settings, self.api_client))
        if FakeRuntime.fail is not None:
            raise FakeRuntime.fail
        # What a `kubectl delete pod` does to the process: SIGTERM, then a clean stop.
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler) and not stop.is_set()
        handler(signal.SIGTERM, None)
        assert stop.is_set()
        stop.clear()
        interrupt = signal.getsignal(signal.SIGINT)
        assert callable(interrupt)
        interrupt(signal.SIGINT, None)
        return 0 if stop.is_set() else 9


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch,
            root_logging: logging.Logger) -> Iterator[list[Any]]:
    """`kaiwu reconcile` with the API and the runtime replaced; restores signal handlers."""
    checks: list[Any] = []

    def load(kubeconfig: str | None, context: str | None) -> object:
        checks.append((kubeconfig, context))
        return API

    def check(client: object, timeout: float) -> None:
        checks.append((client is API, timeout))

    monkeypatch.setattr(kube_client, "load_api_client", load)
    monkeypatch.setattr(kube_client, "check_reachable", check)
    monkeypatch.setattr(process, "Runtime", FakeRuntime)
    saved = {n: signal.getsignal(n) for n in (signal.SIGTERM, signal.SIGINT)}
    FakeRuntime.ran, FakeRuntime.fail = [], None
    yield checks
    for number, handler in saved.items():
        signal.signal(number, handler)


def test_reconcile_connects_once_then_runs_until_sigterm(offline: list[Any]) -> None:
    code = cli.reconcile(["--kubeconfig", "/etc/kaiwu/kubeconfig", "--context", "prod",
                          "--api-timeout-s", "7", "--log-format", "text"])
    assert code == 0
    assert offline == [("/etc/kaiwu/kubeconfig", "prod"), (True, 7.0)]
    [(settings, api)] = FakeRuntime.ran
    assert api is API, "the runtime uses the connection that was checked"
    assert settings.api_timeout_s == 7.0 and settings.context == "prod"


def test_reconcile_reads_sys_argv_when_run_as_a_script(offline: list[Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["kaiwu-reconcile", "--workers", "5"])
    assert cli.reconcile() == 0
    assert FakeRuntime.ran[0][0].workers == 5


@pytest.mark.parametrize(("invalid", "code"), [(True, 2), (False, 1)])
def test_no_usable_kubeconfig_is_exit_2_and_a_silent_server_exit_1(
        offline: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], invalid: bool, code: int) -> None:
    def refuse(kubeconfig: Any, context: Any) -> Any:
        raise kube_client.ConnectionSetupError("the API server at https://10.0.0.1:6443 did "
                                               "not answer", invalid=invalid)

    monkeypatch.setattr(kube_client, "load_api_client", refuse)
    assert cli.reconcile([]) == code
    assert capsys.readouterr().err == (
        "kaiwu reconcile: the API server at https://10.0.0.1:6443 did not answer\n")
    assert FakeRuntime.ran == [], "nothing started"


def test_a_failing_reconciler_logs_one_line_and_exits_1(
        offline: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    FakeRuntime.fail = RuntimeError("lease lost twice")
    assert cli.reconcile(["--log-format", "json"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"], entry["error"]) == (
        "error", "reconciler.cli", "the reconciler failed", "RuntimeError: lease lost twice")
    assert "exception" not in entry, "the traceback only with --log-level debug"
    FakeRuntime.fail = RuntimeError("lease lost twice")
    assert cli.reconcile(["--log-format", "json", "--log-level", "debug"]) == 1
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    failed = next(x for x in lines if x["message"] == "the reconciler failed")
    assert failed["exception"].endswith("RuntimeError: lease lost twice")


def test_a_signal_is_logged_by_name(offline: list[Any],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.reconcile(["--log-format", "json"]) == 0
    said = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert [(x["logger"], x["message"], x["signal"]) for x in said] == [
        ("reconciler.cli", "signal received, shutting down", "SIGTERM"),
        ("reconciler.cli", "signal received, shutting down", "SIGINT")]
