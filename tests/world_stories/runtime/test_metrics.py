"""What Prometheus sees while a cluster comes up: the real reconciler's /metrics, scraped.

Story: a reconciler runs as in production (the Runtime with the real Controller, leader
election, its HTTP server) against the test world's apiserver with simulated kubelets and
KaiwuDB. A user applies a 3-node cluster; scraping /metrics every half second shows the
cluster's gauges move from nothing to 0 of 3 ready nodes to 3 ready and 3 live, Ready True and
not stalled, the seconds since the last good reconcile small, the work queue's adds growing
with its wait and work times observed, and API requests counted by verb and code. Deleting the
cluster removes its series. Values are printed (pytest -s).
"""

from __future__ import annotations

import time

from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from reconciler.runtime.process import Runtime
from tests.support.harness import user
from tests.support.lifecycle import NAME, small_cluster
from tests.support.runtime import GROUP, PLURAL, VERSION, fetch, runtime_settings
from tests.support.waiting import eventually
from tests.world.controlplane import ControlPlane
from tests.world.simworld import SimWorld


def scrape(runtime: Runtime) -> str:
    code, page = fetch(runtime.http_port, "/metrics")
    assert code == 200
    return page


def value(page: str, metric: str, /, **labels: str) -> float | None:
    """One sample of a scraped page (labels matched exactly), None when it is absent."""
    for family in text_string_to_metric_families(page):
        for found in family.samples:
            if found.name == metric and found.labels == labels:
                return float(found.value)
    return None


def test_metrics_follow_a_cluster_from_apply_to_ready_and_deletion(
        sim_world: SimWorld, control_plane: ControlPlane, kube: k8s.ApiClient,
        namespace: str) -> None:
    runtime = Runtime(runtime_settings(control_plane, namespace, lifecycle_poll_s=0.2,
                                       cluster_burst=1000, cluster_rate_per_s=100.0))
    runtime.start()
    try:
        eventually(runtime.is_leader, 15, "leadership")
        who = {"namespace": namespace, "cluster": NAME}
        before = scrape(runtime)
        assert value(before, "kaiwu_cluster_ready_nodes", **who) is None
        adds_before = value(before, "workqueue_adds_total", name="kaiwucluster") or 0.0
        assert (value(before, "process_resident_memory_bytes") or 0) > 0
        assert "\npython_info{" in before

        started = time.monotonic()
        user(kube, "kubectl").apply(small_cluster(namespace))
        ready_seen: list[tuple[float, float]] = []  # (seconds since apply, ready nodes)

        def ready_now() -> bool:
            page = scrape(runtime)
            ready = value(page, "kaiwu_cluster_ready_nodes", **who)
            if ready is not None and (not ready_seen or ready_seen[-1][1] != ready):
                ready_seen.append((round(time.monotonic() - started, 1), ready))
            return value(page, "kaiwu_cluster_condition", **who, type="Ready",
                         status="True") == 1
        eventually(ready_now, 120, "kaiwu_cluster_condition{type=Ready,status=True} == 1",
                   interval=0.5)
        page = scrape(runtime)
        print(f"\nready nodes as scraped: {ready_seen}")
        assert ready_seen[0][1] < 3, f"never saw the cluster before its nodes were ready: " \
                                     f"{ready_seen}"
        assert value(page, "kaiwu_cluster_ready_nodes", **who) == 3
        assert value(page, "kaiwu_cluster_desired_nodes", **who) == 3
        eventually(lambda: value(scrape(runtime), "kaiwu_cluster_live_nodes", **who) == 3, 30,
                   "3 live KaiwuDB nodes")
        page = scrape(runtime)
        assert value(page, "kaiwu_cluster_not_live_nodes", **who) == 0
        assert value(page, "kaiwu_cluster_stalled", **who) == 0
        assert value(page, "kaiwu_cluster_condition", **who, type="Stalled",
                     status="False") == 1
        since = value(page, "kaiwu_cluster_seconds_since_last_success", **who)
        assert since is not None and 0 <= since < 30, since
        assert value(page, "kaiwu_cluster_certificate_expiry_seconds", **who) is None, \
            "an insecure cluster has no certificate"
        adds = value(page, "workqueue_adds_total", name="kaiwucluster") or 0.0
        assert adds >= adds_before + 2, (adds_before, adds)
        waited = value(page, "workqueue_queue_duration_seconds_count", name="kaiwucluster")
        worked = value(page, "workqueue_work_duration_seconds_count", name="kaiwucluster")
        assert waited and worked and worked >= 2, (waited, worked)
        assert value(page, "workqueue_depth", name="kaiwucluster") is not None
        host = runtime.api.configuration.host.split("://", 1)[1]
        gets = value(page, "rest_client_requests_total", code="200", method="GET", host=host)
        patches = value(page, "rest_client_requests_total", code="200", method="PATCH",
                        host=host)
        assert gets and patches, f"GET {gets}, PATCH {patches} on {host}"
        print(f"at Ready: queue adds {adds_before:g} -> {adds:g}, waits {waited:g}, work "
              f"{worked:g}; API GET 200 {gets:g}, PATCH 200 {patches:g}; last success "
              f"{since:.2f}s ago")

        k8s.CustomObjectsApi(kube).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, NAME)
        eventually(lambda: "kaiwu_cluster_" not in "\n".join(
            line for line in scrape(runtime).splitlines() if not line.startswith("#")),
            30, "the cluster's series removed")
    finally:
        runtime.stop()
