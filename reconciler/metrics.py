"""Prometheus metrics of the reconciler, served on /metrics by `reconciler.runtime.http`.

The runtime counts reconciles, their durations, queue depth, leadership, watch trouble and
directory-source errors; the Controller counts drift found and repaired, writes and lifecycle
actions, and its own errors by stage. Each `Metrics` has its own registry, so tests can run
several reconcilers in one process.

Three groups follow names other tools already chart:
- process_* and python_* (prometheus_client's process, platform and GC collectors);
- workqueue_* with a `name` label, as client-go's work queues export them through
  controller-runtime (`reconciler.kube.workqueue` feeds them);
- rest_client_requests_total{code,method,host}, as controller-runtime exports client-go's
  request counter (`reconciler.kube.client.count_requests` feeds it).

Per-cluster gauges (kaiwu_cluster_*) carry `namespace` and `cluster` labels. Both are bounded by
the KaiwuClusters this reconciler manages (one series set per cluster), and `forget_cluster`
removes a cluster's series when the Controller sees it deleted. Every other label takes values
from a fixed set (kinds, verbs, HTTP codes, condition types and statuses, stages).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

NAMESPACE = "kaiwu"
# Reconciles take milliseconds when nothing changed, seconds when they apply or exec.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# controller-runtime's work-queue buckets: 10ns to 1000s, by factors of ten.
QUEUE_BUCKETS = tuple(1e-8 * 10 ** i for i in range(12))
CONDITION_STATUSES = ("True", "False", "Unknown")
CLUSTER_LABELS = ("namespace", "cluster")


class Metrics:
    """Every metric, as attributes; label names are in each metric's help."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # ---- process and platform (process_*, python_*) ----------------------------------
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        # ---- runtime ---------------------------------------------------------------------
        self.reconcile_total = Counter(
            "reconcile_total", "Reconciles of one cluster, by result (success, error).",
            ["result"], namespace=NAMESPACE, registry=r)
        self.reconcile_duration_seconds = Histogram(
            "reconcile_duration_seconds", "Time one reconcile of one cluster took.",
            namespace=NAMESPACE, registry=r, buckets=DURATION_BUCKETS)
        self.queue_depth = Gauge(
            "queue_depth", "Clusters waiting in the work queue (each counted once).",
            namespace=NAMESPACE, registry=r)
        self.leader = Gauge(
            "leader", "1 while this replica holds the leader Lease (and may write), else 0.",
            namespace=NAMESPACE, registry=r)
        self.leader_transitions_total = Counter(
            "leader_transitions_total", "Times this replica became leader.",
            namespace=NAMESPACE, registry=r)
        self.watch_restarts_total = Counter(
            "watch_restarts_total", "Watches started again, by kind and reason (gone: 410, "
            "the cache relisted; disconnected: the API server went away; expired: the "
            "server ended the watch).", ["kind", "reason"], namespace=NAMESPACE, registry=r)
        self.cache_objects = Gauge(
            "cache_objects", "Objects held in the watch cache, by kind.", ["kind"],
            namespace=NAMESPACE, registry=r)
        self.source_errors_total = Counter(
            "source_errors_total", "Directory mode: files found broken (each broken version "
            "counted once), and unreadable directories.", namespace=NAMESPACE, registry=r)
        self.source_broken_files = Gauge(
            "source_broken_files", "Directory mode: files broken right now (skipped).",
            namespace=NAMESPACE, registry=r)
        self.source_clusters = Gauge(
            "source_clusters", "Directory mode: KaiwuClusters defined by the directory.",
            namespace=NAMESPACE, registry=r)
        # ---- admission webhook (reconciler.runtime.webhook) --------------------------------
        self.admission_reviews_total = Counter(
            "admission_reviews_total", "AdmissionReviews answered, by result (allowed, denied, "
            "error: the request could not be read).", ["result"], namespace=NAMESPACE,
            registry=r)
        self.admission_duration_seconds = Histogram(
            "admission_duration_seconds", "Time from reading an AdmissionReview to its answer.",
            namespace=NAMESPACE, registry=r, buckets=DURATION_BUCKETS)
        self.webhook_certificate_expiry_seconds = Gauge(
            "webhook_certificate_expiry_seconds", "notAfter (Unix time) of the serving "
            "certificate this replica serves; 0 before it has one.", namespace=NAMESPACE,
            registry=r)
        # ---- controller ------------------------------------------------------------------
        self.drift_detected_total = Counter(
            "drift_detected_total", "Objects found to differ from the rendered spec, by kind.",
            ["kind"], namespace=NAMESPACE, registry=r)
        self.drift_repaired_total = Counter(
            "drift_repaired_total", "Drifted or missing objects repaired, by kind.",
            ["kind"], namespace=NAMESPACE, registry=r)
        self.errors_total = Counter(
            "errors_total", "Errors, by stage (reconcile, render, apply, status, source, ...).",
            ["stage"], namespace=NAMESPACE, registry=r)
        self.writes_total = Counter(
            "writes_total", "API writes the server answered, by verb (apply, dry_run, create, "
            "update, patch, status, delete) and kind (reconciler/kube/writes.py).",
            ["verb", "kind"], namespace=NAMESPACE, registry=r)
        self.http_connections_dropped_total = Counter(
            "http_connections_dropped_total", "Connections a listener of the reconciler dropped "
            "(reconciler/listeners.py), by listener (metrics, webhook, restore) and reason "
            "(evicted, deadline, busy, too_large, no_length).", ["listener", "reason"],
            namespace=NAMESPACE, registry=r)
        self.lifecycle_actions_total = Counter(
            "lifecycle_actions_total", "Lifecycle and failover actions taken, by action.",
            ["action"], namespace=NAMESPACE, registry=r)

        # ---- work queue (controller-runtime's names; `name` is the queue's) -----------------
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Current depth of the work queue.", ["name"], registry=r)
        self.workqueue_adds = Counter(
            "workqueue_adds", "Total number of adds handled by the work queue (an add merged "
            "into one already waiting is not counted).", ["name"], registry=r)
        self.workqueue_queue_duration_seconds = Histogram(
            "workqueue_queue_duration_seconds", "How long in seconds an item stays in the "
            "work queue before being requested.", ["name"], registry=r, buckets=QUEUE_BUCKETS)
        self.workqueue_work_duration_seconds = Histogram(
            "workqueue_work_duration_seconds", "How long in seconds processing an item from "
            "the work queue takes.", ["name"], registry=r, buckets=QUEUE_BUCKETS)
        self.workqueue_retries = Counter(
            "workqueue_retries", "Total number of retries (failure back-offs) handled by the "
            "work queue.", ["name"], registry=r)
        self.workqueue_unfinished_work_seconds = Gauge(
            "workqueue_unfinished_work_seconds", "How many seconds of work has been done that "
            "is in progress and hasn't been observed by work_duration.", ["name"], registry=r)
        self.workqueue_longest_running_processor_seconds = Gauge(
            "workqueue_longest_running_processor_seconds", "How many seconds has the longest "
            "running processor for the work queue been running.", ["name"], registry=r)
        # ---- API requests (controller-runtime's client-go adapter) ------------------------
        self.rest_client_requests = Counter(
            "rest_client_requests", "Number of HTTP requests, partitioned by status code, "
            "method, and host.", ["code", "method", "host"], registry=r)
        # ---- per cluster (namespace, cluster; removed when the cluster is deleted) --------
        self.cluster_desired_nodes = Gauge(
            "cluster_desired_nodes", "KaiwuDB nodes the spec asks for (spec.replicas).",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.cluster_ready_nodes = Gauge(
            "cluster_ready_nodes", "KaiwuDB pods ready (the StatefulSet's readyReplicas).",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.cluster_live_nodes = Gauge(
            "cluster_live_nodes", "KaiwuDB node ids KaiwuDB reports live (status.nodes).",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.cluster_not_live_nodes = Gauge(
            "cluster_not_live_nodes", "KaiwuDB node ids KaiwuDB reports not live "
            "(status.nodes; decommissioning ones are not counted).",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.cluster_condition = Gauge(
            "cluster_condition", "1 for the status each condition has (type: Ready, "
            "Reconciling, Stalled, Drifted, VolumesExpanded; status: True, False, Unknown), 0 "
            "for the others.",
            [*CLUSTER_LABELS, "type", "status"], namespace=NAMESPACE, registry=r)
        self.cluster_stalled = Gauge(
            "cluster_stalled", "1 while the cluster's Stalled condition is True.",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.cluster_drifted = Gauge(
            "cluster_drifted", "1 while the cluster's Drifted condition is True.",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.cluster_last_success_seconds = Gauge(
            "cluster_seconds_since_last_success", "Seconds since the last reconcile of the "
            "cluster that ran to its end without an error.",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.cluster_certificate_expiry_seconds = Gauge(
            "cluster_certificate_expiry_seconds", "Seconds until the node certificate "
            "(the earliest notAfter in the node Secret) expires; negative once expired. TLS "
            "clusters only.", CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.backup_last_success_timestamp = Gauge(
            "backup_last_success_timestamp_seconds", "When the cluster's newest completed "
            "KaiwuBackup completed (Unix time); absent until one has (docs/backup.md).",
            CLUSTER_LABELS, namespace=NAMESPACE, registry=r)
        self.backups_total = Counter(
            "backups_total", "KaiwuBackups finished, by result (completed, failed).",
            ["result"], namespace=NAMESPACE, registry=r)
        self._clusters_lock = threading.Lock()
        self._cert_expiry: dict[tuple[str, str], float] = {}
        self._last_success: dict[tuple[str, str], float] = {}
        self._condition_types: dict[tuple[str, str], set[str]] = {}
        self._backup_success: set[tuple[str, str]] = set()

    # ---- per-cluster series: the Controller calls these ---------------------------------------

    def observe_cluster(self, namespace: str, cluster: str, *, desired: int, ready: int,
                        live: int, not_live: int, conditions: Mapping[str, str]) -> None:
        """The report step's summary of one pass: node counts and each condition's status."""
        labels = {"namespace": namespace, "cluster": cluster}
        with self._clusters_lock:
            self._condition_types.setdefault((namespace, cluster), set()).update(conditions)
        self.cluster_desired_nodes.labels(**labels).set(desired)
        self.cluster_ready_nodes.labels(**labels).set(ready)
        self.cluster_live_nodes.labels(**labels).set(live)
        self.cluster_not_live_nodes.labels(**labels).set(not_live)
        for type_, status in conditions.items():
            for candidate in CONDITION_STATUSES:
                self.cluster_condition.labels(**labels, type=type_, status=candidate).set(
                    1 if status == candidate else 0)
        self.cluster_stalled.labels(**labels).set(
            1 if conditions.get("Stalled") == "True" else 0)
        self.cluster_drifted.labels(**labels).set(
            1 if conditions.get("Drifted") == "True" else 0)

    def cluster_succeeded(self, namespace: str, cluster: str, at: float | None = None) -> None:
        """A pass over the cluster ran to its end (the Controller, after its last step)."""
        key = (namespace, cluster)
        with self._clusters_lock:
            self._last_success[key] = time.time() if at is None else at
        self.cluster_last_success_seconds.labels(namespace, cluster).set_function(
            lambda: self._since_success(key))

    def _since_success(self, key: tuple[str, str]) -> float:
        with self._clusters_lock:
            at = self._last_success.get(key)
        return time.time() - at if at is not None else float("nan")

    def cluster_certificate_expiry(self, namespace: str, cluster: str,
                                   not_after: float | None) -> None:
        """The node certificate's expiry as a Unix time (the certificates step); None: no
        certificate readable, the series is removed."""
        key = (namespace, cluster)
        with self._clusters_lock:
            if not_after is None:
                known = self._cert_expiry.pop(key, None)
            else:
                known = self._cert_expiry[key] = not_after
        if not_after is None:
            if known is not None:
                self.cluster_certificate_expiry_seconds.remove(namespace, cluster)
            return
        self.cluster_certificate_expiry_seconds.labels(namespace, cluster).set_function(
            lambda: self._until_expiry(key))

    def _until_expiry(self, key: tuple[str, str]) -> float:
        with self._clusters_lock:
            at = self._cert_expiry.get(key)
        return at - time.time() if at is not None else float("nan")

    def backup_succeeded(self, namespace: str, cluster: str, at: float) -> None:
        """The newest completed backup of the cluster completed at `at` (the backup step)."""
        with self._clusters_lock:
            self._backup_success.add((namespace, cluster))
        self.backup_last_success_timestamp.labels(namespace, cluster).set(at)

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        """Remove every series of a deleted cluster (the Controller, when the cluster is gone
        from the cache or being deleted)."""
        with self._clusters_lock:
            self._last_success.pop((namespace, cluster), None)
            self._cert_expiry.pop((namespace, cluster), None)
            self._backup_success.discard((namespace, cluster))
            types = self._condition_types.pop((namespace, cluster), set())
        for gauge in (self.cluster_desired_nodes, self.cluster_ready_nodes,
                      self.cluster_live_nodes, self.cluster_not_live_nodes,
                      self.cluster_stalled, self.cluster_drifted,
                      self.cluster_last_success_seconds,
                      self.cluster_certificate_expiry_seconds,
                      self.backup_last_success_timestamp):
            _remove(gauge, namespace, cluster)
        for type_ in types:
            for status in CONDITION_STATUSES:
                _remove(self.cluster_condition, namespace, cluster, type_, status)

    def forget_clusters(self) -> None:
        """Remove every cluster's series: the runtime, when this replica stops leading (a
        standby reports no clusters, so its stale values raise no alerts)."""
        with self._clusters_lock:
            keys = set(self._condition_types) | set(self._last_success) | set(
                self._cert_expiry) | set(self._backup_success)
        for namespace, cluster in keys:
            self.forget_cluster(namespace, cluster)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what /metrics serves)."""
        return generate_latest(self.registry)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample's current value (0 when never set): for tests, logs and reports.
        `name` is the sample name as exposed, e.g. 'kaiwu_reconcile_total'."""
        found = self.registry.get_sample_value(name, labels or {})
        return float(found) if found is not None else 0.0


def _remove(gauge: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # never set for this cluster
        gauge.remove(*labels)
