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

from kubernetes import client as k8s

from reconciler.keys import ClusterKey
from reconciler.runtime.process import Runtime
from tests.support.runtime import (
    Done,
    RecordingController,
    create_cluster,
    fetch,
    running,
    runtime_settings,
    sample,
)
from tests.support.waiting import eventually
from tests.world.controlplane import ControlPlane


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
                                cluster_burst=100)
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
