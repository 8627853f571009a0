"""What operators see of a reconciler that cannot reach the API server: alive, but not ready;
and what each of its HTTP endpoints (reconciler.runtime.http) answers the probes and Prometheus.

(The stories against the test world's apiserver: tests/world_stories/runtime/test_http.py.)
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reconciler.metrics import Metrics
from reconciler.runtime import http
from reconciler.runtime.http import HealthServer
from reconciler.settings import Settings
from tests.support.runtime import fetch, running, sample
from tests.support.threads import holding_up_exit, serve_forever_polls, threads_started
from tests.support.waiting import eventually
from tests.world.controlplane import free_port


def test_a_replica_that_cannot_reach_the_api_server_is_alive_but_not_ready(
        tmp_path: Path) -> None:
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {
            "server": f"https://127.0.0.1:{free_port()}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "gone", "user": {"token": "none"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}]}))
    settings = Settings(kubeconfig=str(unreachable), http_address="127.0.0.1:0",
                        lease_namespace="default", reconnect_backoff_max_s=1.0,
                        log_format="text")
    with running(settings) as runtime:
        time.sleep(1.0)
        assert fetch(runtime.http_port, "/healthz")[0] == 200
        code, body = fetch(runtime.http_port, "/readyz")
        assert code == 503
        assert "caches: waiting for KaiwuCluster" in body
        assert not runtime.is_leader()
        assert runtime.metrics.value("kaiwu_watch_restarts_total",
                                     {"kind": "KaiwuCluster", "reason": "disconnected"}) >= 1


def test_probes_get_each_check_and_its_lines_and_prometheus_its_page() -> None:
    metrics = Metrics()
    metrics.reconcile_total.labels(result="success").inc()
    state: dict[str, Any] = {"healthy": (True, ["leader: yes"]),
                             "ready": (False, ["caches: waiting for Pod"])}

    def ready() -> tuple[bool, list[str]]:
        if state.get("broken"):
            raise RuntimeError("the caches are gone")
        answer: tuple[bool, list[str]] = state["ready"]
        return answer
    server = HealthServer("127.0.0.1", 0, metrics, healthy=lambda: state["healthy"],
                          ready=ready)
    server.start()
    try:
        port = server.port
        assert fetch(port, "/healthz") == (200, "ok\nleader: yes\n")
        assert fetch(port, "/livez?verbose") == (200, "ok\nleader: yes\n")
        assert fetch(port, "/livez?a=1?b=2") == (200, "ok\nleader: yes\n"), "path ends at ?"
        assert fetch(port, "/readyz") == (503, "failed\ncaches: waiting for Pod\n")
        state["ready"] = (True, [])
        assert fetch(port, "/readyz") == (200, "ok\n")
        state["broken"] = True
        assert fetch(port, "/readyz") == (503, "failed\ncheck failed: the caches are gone\n")
        assert fetch(port, "/") == (404, "not found: try /metrics, /healthz or /readyz\n")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"] == CONTENT_TYPE_LATEST
            page = answer.read().decode()
        assert sample(page, 'kaiwu_reconcile_total{result="success"}') == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert answer.headers["Content-Length"] == str(len("ok\nleader: yes\n"))
    finally:
        server.stop()
    with pytest.raises(OSError):
        fetch(port, "/healthz")


def ok() -> tuple[bool, list[str]]:
    return True, []


def test_the_server_runs_in_one_thread_named_http_that_never_holds_up_exit() -> None:
    server = HealthServer("127.0.0.1", 0, Metrics(), healthy=ok, ready=ok)
    with threads_started() as started:
        server.start()
    try:
        assert [thread.name for thread in started] == ["http"]
        assert holding_up_exit(started) == [], "a replica that must exit is not kept alive"
    finally:
        server.stop()


def test_a_replica_stops_its_server_within_a_tenth_of_a_second() -> None:
    # shutdown() returns at the serve loop's next poll: every 0.1 s here (the default would be
    # every 0.5 s, and every replica's shutdown would wait for it).
    with serve_forever_polls() as polls:
        server = HealthServer("127.0.0.1", 0, Metrics(), healthy=ok, ready=ok)
        server.start()
        eventually(lambda: polls, 5, "the server's loop to start")
        server.stop()
    assert polls == [0.1]


def test_a_probe_that_never_sends_its_request_does_not_hold_up_shutdown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A request deadline far past the wait below: a stop that waited for the client would wait
    # for it.
    monkeypatch.setattr(http, "LIMITS", replace(http.LIMITS, request_deadline_s=60.0))
    server = HealthServer("127.0.0.1", 0, Metrics(), healthy=ok, ready=ok)
    server.start()
    with threads_started() as handlers:
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        fetch(server.port, "/healthz")  # answered after the silent one was taken
    try:
        assert handlers, "the silent connection is being read"
        stopper = threading.Thread(target=server.stop, daemon=True)
        stopper.start()
        stopper.join(5)
        assert not stopper.is_alive(), "stop() waited for a client that sends nothing"
        assert holding_up_exit(handlers) == []
    finally:
        silent.close()


def test_each_request_is_logged_at_debug_level_only(caplog: pytest.LogCaptureFixture) -> None:
    server = HealthServer("127.0.0.1", 0, Metrics(), healthy=ok, ready=ok)
    server.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="reconciler.runtime.http"):
            fetch(server.port, "/healthz")
        with caplog.at_level(logging.INFO, logger="reconciler.runtime.http"):
            fetch(server.port, "/readyz")
    finally:
        server.stop()
    assert [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == "reconciler.runtime.http"] == [
        (logging.DEBUG, 'http "GET /healthz HTTP/1.1" 200 -')]
