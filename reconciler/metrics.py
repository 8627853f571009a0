"""Prometheus metrics of the reconciler, served on /metrics by `reconciler.runtime.http`.

The runtime counts reconciles, their durations, queue depth, leadership, watch trouble and
directory-source errors; the Controller counts drift found and repaired, writes and lifecycle
actions, and its own errors by stage. Each `Metrics` has its own registry, so tests can run
several reconcilers in one process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

NAMESPACE = "kaiwu"
# Reconciles take milliseconds when nothing changed, seconds when they apply or exec.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every metric, as attributes; label names are in each metric's help."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
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
            "writes_total", "API writes, by verb (apply, create, patch, delete, status) and "
            "kind.", ["verb", "kind"], namespace=NAMESPACE, registry=r)
        self.lifecycle_actions_total = Counter(
            "lifecycle_actions_total", "Lifecycle and failover actions taken, by action.",
            ["action"], namespace=NAMESPACE, registry=r)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what /metrics serves)."""
        return generate_latest(self.registry)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample's current value (0 when never set): for tests, logs and reports.
        `name` is the sample name as exposed, e.g. 'kaiwu_reconcile_total'."""
        found = self.registry.get_sample_value(name, labels or {})
        return float(found) if found is not None else 0.0
