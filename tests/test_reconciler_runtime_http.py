"""What operators see of a running reconciler: /metrics, /healthz, /readyz, and retries.

Stories: Prometheus scrapes the leader and finds reconciles, durations, queue depth and the
leader flag; the kubelet's probes find the leader and the standby alive and ready; a replica
that cannot reach the API server stays alive but is not ready; a cluster whose reconcile fails
is retried with back-off and the failures are counted.
"""

from __future__ import annotations

import itertools
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client as k8s

from reconciler.keys import ClusterKey
from reconciler.runtime.process import Runtime
from reconciler.settings import Settings
from tests.reconciler_runtime_support import (
    Done,
    RecordingController,
    create_cluster,
    running,
    runtime_settings,
)
from tests.waiting import eventually
from tests.world.controlplane import ControlPlane, free_port


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def sample(metrics_text: str, name: str) -> float:
    """The value of one sample line (name including labels) of a /metrics page."""
    for line in metrics_text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def test_metrics_healthz_and_readyz_answer_on_leader_and_standby(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    with running(runtime_settings(control_plane, namespace, identity="leader")) as leader:
        eventually(leader.is_leader, 10, "leadership")
        create_cluster(kube, namespace, "scraped")
        eventually(lambda: leader.metrics.value("kaiwu_reconcile_total",
                                                {"result": "success"}) >= 1, 10, "a reconcile")

        code, page = fetch(leader.http_port, "/metrics")
        assert code == 200
        assert sample(page, 'kaiwu_reconcile_total{result="success"}') >= 1
        assert sample(page, "kaiwu_reconcile_duration_seconds_count") >= 1
        assert sample(page, "kaiwu_leader") == 1
        assert sample(page, "kaiwu_queue_depth") >= 0
        assert sample(page, 'kaiwu_cache_objects{kind="KaiwuCluster"}') == 1

        assert fetch(leader.http_port, "/healthz") == (200, "ok\n")
        code, body = fetch(leader.http_port, "/readyz")
        assert code == 200
        assert "caches: synced" in body and "leader: yes (leader)" in body

        with running(runtime_settings(control_plane, namespace, identity="standby")) as standby:
            eventually(lambda: fetch(standby.http_port, "/readyz")[0] == 200, 20,
                       "the standby to be ready")
            body = fetch(standby.http_port, "/readyz")[1]
            assert "leader: no, standby (lease held by leader)" in body
            assert sample(fetch(standby.http_port, "/metrics")[1], "kaiwu_leader") == 0
            assert fetch(standby.http_port, "/nothing")[0] == 404


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


class FailingTwice(RecordingController):
    """A controller whose first two reconciles of every cluster fail."""

    def reconcile(self, key: ClusterKey) -> Done:
        done = super().reconcile(key)
        if len(self.calls(key.name)) <= 2:
            raise RuntimeError("the API server refused the write (simulated)")
        return done


def test_a_failing_reconcile_is_retried_with_backoff_and_counted(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    settings = runtime_settings(control_plane, namespace, error_backoff_base_s=0.5,
                                min_reconcile_interval_s=0.0)
    runtime = Runtime(settings, controller_factory=FailingTwice)
    runtime.start()
    try:
        create_cluster(kube, namespace, "flaky")
        controller = runtime.controller
        assert isinstance(controller, FailingTwice)
        eventually(lambda: len(controller.calls("flaky")) >= 3, 15, "the third attempt")
        attempts = [s.at for s in controller.calls("flaky")[:3]]
        gaps = [round(b - a, 2) for a, b in itertools.pairwise(attempts)]
        time.sleep(0.5)
        assert runtime.metrics.value("kaiwu_reconcile_total", {"result": "error"}) == 2
        assert runtime.metrics.value("kaiwu_errors_total", {"stage": "reconcile"}) == 2
        assert runtime.metrics.value("kaiwu_reconcile_total", {"result": "success"}) == 1
        assert runtime.queue.failures(ClusterKey(namespace, "flaky")) == 0, "reset on success"
    finally:
        runtime.stop()
    print(f"\nretries after failures: gaps {gaps} s (base 0.5 s, doubling)")
    assert gaps[0] >= 0.45 and gaps[1] >= 0.95, gaps


def test_stopping_waits_for_a_reconcile_in_progress(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    finished = threading.Event()

    class Slow(RecordingController):
        def reconcile(self, key: ClusterKey) -> Done:
            done = super().reconcile(key)
            time.sleep(1.0)
            finished.set()
            return done

    runtime = Runtime(runtime_settings(control_plane, namespace), controller_factory=Slow)
    runtime.start()
    create_cluster(kube, namespace, "slow")
    eventually(lambda: runtime.queue.processing() == 1, 15, "the reconcile to start")
    runtime.stop()
    assert finished.is_set(), "stop returned before the reconcile in progress finished"
