"""The per-cluster series (reconciler.metrics): set from a pass's summary, ticking since the last
good pass and until the certificate expires, and gone when the cluster is deleted or this
replica stops leading, so no stale cluster lingers in Prometheus or its alerts."""

from __future__ import annotations

import time

import pytest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from reconciler.metrics import Metrics

CONDITIONS = {"Ready": "True", "Reconciling": "False", "Stalled": "False", "Drifted": "Unknown"}


def cluster_lines(metrics: Metrics, cluster: str) -> list[str]:
    return [line for line in metrics.exposition().decode().splitlines()
            if line.startswith("kaiwu_cluster_") and f'cluster="{cluster}"' in line]


def test_a_clusters_gauges_are_set_and_removed_when_it_is_deleted() -> None:
    metrics = Metrics()
    for name in ("orders", "payments"):
        metrics.observe_cluster("shop", name, desired=3, ready=2, live=2, not_live=1,
                                conditions=CONDITIONS)
        metrics.cluster_succeeded("shop", name, time.time() - 10)
        metrics.cluster_certificate_expiry("shop", name, time.time() + 86400)
    who = {"namespace": "shop", "cluster": "orders"}
    assert metrics.value("kaiwu_cluster_ready_nodes", who) == 2
    assert metrics.value("kaiwu_cluster_not_live_nodes", who) == 1
    assert metrics.value("kaiwu_cluster_condition",
                         {**who, "type": "Drifted", "status": "Unknown"}) == 1
    assert metrics.value("kaiwu_cluster_condition",
                         {**who, "type": "Ready", "status": "False"}) == 0
    assert 10 <= metrics.value("kaiwu_cluster_seconds_since_last_success", who) < 15
    assert 86000 < metrics.value("kaiwu_cluster_certificate_expiry_seconds", who) <= 86400

    metrics.forget_cluster("shop", "orders")
    assert cluster_lines(metrics, "orders") == []
    assert len(cluster_lines(metrics, "payments")) == 8 + 12  # 8 gauges, 4 types x 3 statuses
    metrics.forget_clusters()
    assert cluster_lines(metrics, "payments") == []


def test_a_certificate_no_longer_readable_drops_its_series() -> None:
    metrics = Metrics()
    metrics.cluster_certificate_expiry("shop", "orders", time.time() + 60)
    metrics.cluster_certificate_expiry("shop", "orders", None)
    assert cluster_lines(metrics, "orders") == []


# What docs/metrics.md ("Metrics") promises /metrics serves: family -> label names.
DOCUMENTED: dict[str, tuple[str, ...]] = {
    "kaiwu_reconcile": ("result",), "kaiwu_reconcile_duration_seconds": (),
    "kaiwu_queue_depth": (), "kaiwu_leader": (), "kaiwu_leader_transitions": (),
    "kaiwu_watch_restarts": ("kind", "reason"), "kaiwu_cache_objects": ("kind",),
    "kaiwu_drift_detected": ("kind",), "kaiwu_drift_repaired": ("kind",),
    "kaiwu_writes": ("verb", "kind"), "kaiwu_errors": ("stage",),
    "kaiwu_lifecycle_actions": ("action",), "kaiwu_backups": ("result",),
    "kaiwu_http_connections_dropped": ("listener", "reason"),
    "kaiwu_source_errors": (), "kaiwu_source_broken_files": (), "kaiwu_source_clusters": (),
    "kaiwu_admission_reviews": ("result",), "kaiwu_admission_duration_seconds": (),
    "kaiwu_webhook_certificate_expiry_seconds": (),
    "kaiwu_cluster_desired_nodes": ("namespace", "cluster"),
    "kaiwu_cluster_ready_nodes": ("namespace", "cluster"),
    "kaiwu_cluster_live_nodes": ("namespace", "cluster"),
    "kaiwu_cluster_not_live_nodes": ("namespace", "cluster"),
    "kaiwu_cluster_condition": ("namespace", "cluster", "type", "status"),
    "kaiwu_cluster_stalled": ("namespace", "cluster"),
    "kaiwu_cluster_drifted": ("namespace", "cluster"),
    "kaiwu_cluster_seconds_since_last_success": ("namespace", "cluster"),
    "kaiwu_cluster_certificate_expiry_seconds": ("namespace", "cluster"),
    "kaiwu_backup_last_success_timestamp_seconds": ("namespace", "cluster"),
    "workqueue_depth": ("name",), "workqueue_adds": ("name",),
    "workqueue_queue_duration_seconds": ("name",), "workqueue_work_duration_seconds": ("name",),
    "workqueue_retries": ("name",), "workqueue_unfinished_work_seconds": ("name",),
    "workqueue_longest_running_processor_seconds": ("name",),
    "rest_client_requests": ("code", "method", "host"),
}


def families(metrics: Metrics) -> dict[str, MetricWrapperBase]:
    return {next(iter(m.describe())).name: m for m in vars(metrics).values()
            if isinstance(m, MetricWrapperBase)}


def test_metrics_serves_every_documented_family_with_its_labels() -> None:
    metrics = Metrics()
    found = families(metrics)
    assert sorted(found) == sorted(DOCUMENTED)
    for name, labels in DOCUMENTED.items():
        metric = found[name]
        if labels:
            metric.labels(**{label: "x" for label in labels})  # wrong names: ValueError
        else:
            with pytest.raises(ValueError, match="No label names"):
                metric.labels()
    page = metrics.exposition().decode()
    for line in ("# TYPE kaiwu_reconcile_total counter",
                 "# TYPE kaiwu_reconcile_duration_seconds histogram",
                 "# TYPE kaiwu_leader gauge", "# TYPE workqueue_adds_total counter",
                 "# TYPE rest_client_requests_total counter"):
        assert line in page
    # Process and Python figures come from this registry too (several reconcilers, one process).
    assert "process_cpu_seconds_total" in page and "python_info" in page
    assert "python_gc_objects_collected_total" in page
    assert "process_cpu_seconds_total" in Metrics().exposition().decode()


def test_histogram_buckets_span_a_quiet_pass_to_a_slow_exec_and_the_queue_like_client_go(
) -> None:
    metrics = Metrics()
    metrics.reconcile_duration_seconds.observe(0.004)
    metrics.reconcile_duration_seconds.observe(45)
    assert metrics.value("kaiwu_reconcile_duration_seconds_bucket", {"le": "0.005"}) == 1
    assert metrics.value("kaiwu_reconcile_duration_seconds_bucket", {"le": "30.0"}) == 1
    assert metrics.value("kaiwu_reconcile_duration_seconds_bucket", {"le": "60.0"}) == 2
    metrics.workqueue_queue_duration_seconds.labels("kaiwucluster").observe(2e-8)
    page = metrics.exposition().decode()
    assert 'workqueue_queue_duration_seconds_bucket{le="1e-08",name="kaiwucluster"} 0.0' in page
    assert 'workqueue_queue_duration_seconds_bucket{le="1e-07",name="kaiwucluster"} 1.0' in page
    assert 'workqueue_queue_duration_seconds_bucket{le="1000.0",name="kaiwucluster"} 1.0' in page


def test_a_pass_summary_sets_each_count_and_one_status_per_condition() -> None:
    metrics = Metrics()
    metrics.observe_cluster("shop", "orders", desired=5, ready=4, live=3, not_live=2,
                            conditions={"Ready": "False", "Stalled": "True", "Drifted": "True"})
    who = {"namespace": "shop", "cluster": "orders"}
    assert [metrics.value(f"kaiwu_cluster_{name}", who) for name in (
        "desired_nodes", "ready_nodes", "live_nodes", "not_live_nodes", "stalled",
        "drifted")] == [5, 4, 3, 2, 1, 1]
    assert [metrics.value("kaiwu_cluster_condition", {**who, "type": "Stalled", "status": s})
            for s in ("True", "False", "Unknown")] == [1, 0, 0]
    assert [metrics.value("kaiwu_cluster_condition", {**who, "type": "Ready", "status": s})
            for s in ("True", "False", "Unknown")] == [0, 1, 0]
    metrics.observe_cluster("shop", "orders", desired=5, ready=5, live=5, not_live=0,
                            conditions={"Ready": "True", "Stalled": "False"})
    assert metrics.value("kaiwu_cluster_stalled", who) == 0
    assert metrics.value("kaiwu_cluster_drifted", who) == 0, "not reported: not drifted"
    # A condition no longer reported keeps its last series until the cluster goes; then
    # every type it ever had goes with it.
    metrics.forget_cluster("shop", "orders")
    assert cluster_lines(metrics, "orders") == []


def test_ticking_gauges_count_from_the_moment_given() -> None:
    metrics = Metrics()
    who = {"namespace": "shop", "cluster": "orders"}
    metrics.cluster_succeeded("shop", "orders")
    assert 0 <= metrics.value("kaiwu_cluster_seconds_since_last_success", who) < 5
    metrics.cluster_certificate_expiry("shop", "orders", time.time() - 100)
    assert -105 < metrics.value("kaiwu_cluster_certificate_expiry_seconds", who) <= -100
    # No certificate ever seen: nothing to remove, nothing shown.
    metrics.cluster_certificate_expiry("shop", "billing", None)
    assert cluster_lines(metrics, "billing") == []


def test_a_standby_drops_every_cluster_it_ever_reported() -> None:
    metrics = Metrics()
    metrics.cluster_succeeded("shop", "orders", time.time())
    metrics.cluster_certificate_expiry("shop", "billing", time.time() + 60)
    metrics.backup_succeeded("shop", "ledger", 1767225600.0)
    metrics.observe_cluster("ops", "audit", desired=1, ready=1, live=1, not_live=0,
                            conditions={"Ready": "True"})
    assert metrics.value("kaiwu_backup_last_success_timestamp_seconds",
                         {"namespace": "shop", "cluster": "ledger"}) == 1767225600.0
    metrics.forget_clusters()
    assert [line for line in metrics.exposition().decode().splitlines()
            if line.startswith(("kaiwu_cluster_", "kaiwu_backup_last"))] == []
    metrics.forget_cluster("shop", "never-seen")  # nothing to remove: no error


def test_a_sample_never_set_reads_as_zero() -> None:
    metrics = Metrics()
    assert metrics.value("kaiwu_reconcile_total", {"result": "success"}) == 0.0
    metrics.reconcile_total.labels("success").inc(2)
    assert metrics.value("kaiwu_reconcile_total", {"result": "success"}) == 2.0
    metrics.leader.set(1)
    assert metrics.value("kaiwu_leader") == 1.0


# What Prometheus shows beside each family (its type and help), as people read it there.
SHOWN: dict[str, tuple[str, str]] = {
    "kaiwu_reconcile": ("counter",
        "Reconciles of one cluster, by result (success, error)."),
    "kaiwu_reconcile_duration_seconds": ("histogram",
        "Time one reconcile of one cluster took."),
    "kaiwu_queue_depth": ("gauge",
        "Clusters waiting in the work queue (each counted once)."),
    "kaiwu_leader": ("gauge",
        "1 while this replica holds the leader Lease (and may write), else 0."),
    "kaiwu_leader_transitions": ("counter",
        "Times this replica became leader."),
    "kaiwu_watch_restarts": ("counter",
        "Watches started again, by kind and reason (gone: 410, the cache "
        "relisted; disconnected: the API server went away; expired: the "
        "server ended the watch)."),
    "kaiwu_cache_objects": ("gauge",
        "Objects held in the watch cache, by kind."),
    "kaiwu_source_errors": ("counter",
        "Directory mode: files found broken (each broken version counted "
        "once), and unreadable directories."),
    "kaiwu_source_broken_files": ("gauge",
        "Directory mode: files broken right now (skipped)."),
    "kaiwu_source_clusters": ("gauge",
        "Directory mode: KaiwuClusters defined by the directory."),
    "kaiwu_admission_reviews": ("counter",
        "AdmissionReviews answered, by result (allowed, denied, error: the "
        "request could not be read)."),
    "kaiwu_admission_duration_seconds": ("histogram",
        "Time from reading an AdmissionReview to its answer."),
    "kaiwu_webhook_certificate_expiry_seconds": ("gauge",
        "notAfter (Unix time) of the serving certificate this replica serves; "
        "0 before it has one."),
    "kaiwu_drift_detected": ("counter",
        "Objects found to differ from the rendered spec, by kind."),
    "kaiwu_drift_repaired": ("counter",
        "Drifted or missing objects repaired, by kind."),
    "kaiwu_errors": ("counter",
        "Errors, by stage (reconcile, render, apply, status, source, ...)."),
    "kaiwu_writes": ("counter",
        "API writes the server answered, by verb (apply, dry_run, create, update, patch, "
        "status, delete) and kind (reconciler/kube/writes.py)."),
    "kaiwu_lifecycle_actions": ("counter",
        "Lifecycle and failover actions taken, by action."),
    "kaiwu_http_connections_dropped": ("counter",
        "Connections a listener of the reconciler dropped (reconciler/listeners.py), by "
        "listener (metrics, webhook, restore) and reason (evicted, deadline, busy, too_large, "
        "no_length)."),
    "workqueue_depth": ("gauge",
        "Current depth of the work queue."),
    "workqueue_adds": ("counter",
        "Total number of adds handled by the work queue (an add merged into "
        "one already waiting is not counted)."),
    "workqueue_queue_duration_seconds": ("histogram",
        "How long in seconds an item stays in the work queue before being "
        "requested."),
    "workqueue_work_duration_seconds": ("histogram",
        "How long in seconds processing an item from the work queue takes."),
    "workqueue_retries": ("counter",
        "Total number of retries (failure back-offs) handled by the work "
        "queue."),
    "workqueue_unfinished_work_seconds": ("gauge",
        "How many seconds of work has been done that is in progress and "
        "hasn't been observed by work_duration."),
    "workqueue_longest_running_processor_seconds": ("gauge",
        "How many seconds has the longest running processor for the work "
        "queue been running."),
    "rest_client_requests": ("counter",
        "Number of HTTP requests, partitioned by status code, method, and "
        "host."),
    "kaiwu_cluster_desired_nodes": ("gauge",
        "KaiwuDB nodes the spec asks for (spec.replicas)."),
    "kaiwu_cluster_ready_nodes": ("gauge",
        "KaiwuDB pods ready (the StatefulSet's readyReplicas)."),
    "kaiwu_cluster_live_nodes": ("gauge",
        "KaiwuDB node ids KaiwuDB reports live (status.nodes)."),
    "kaiwu_cluster_not_live_nodes": ("gauge",
        "KaiwuDB node ids KaiwuDB reports not live (status.nodes; "
        "decommissioning ones are not counted)."),
    "kaiwu_cluster_condition": ("gauge",
        "1 for the status each condition has (type: Ready, Reconciling, "
        "Stalled, Drifted, VolumesExpanded; status: True, False, Unknown), 0 "
        "for the others."),
    "kaiwu_cluster_stalled": ("gauge",
        "1 while the cluster's Stalled condition is True."),
    "kaiwu_cluster_drifted": ("gauge",
        "1 while the cluster's Drifted condition is True."),
    "kaiwu_cluster_seconds_since_last_success": ("gauge",
        "Seconds since the last reconcile of the cluster that ran to its end "
        "without an error."),
    "kaiwu_cluster_certificate_expiry_seconds": ("gauge",
        "Seconds until the node certificate (the earliest notAfter in the "
        "node Secret) expires; negative once expired. TLS clusters only."),
    "kaiwu_backup_last_success_timestamp_seconds": ("gauge",
        "When the cluster's newest completed KaiwuBackup completed (Unix "
        "time); absent until one has (docs/backup.md)."),
    "kaiwu_backups": ("counter",
        "KaiwuBackups finished, by result (completed, failed)."),
}


def test_each_family_shows_its_type_and_help_in_prometheus() -> None:
    shown = {family.name: (family.type, family.documentation)
             for family in text_string_to_metric_families(Metrics().exposition().decode())
             if family.name in DOCUMENTED}
    assert shown == SHOWN
