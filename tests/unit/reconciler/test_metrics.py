"""The per-cluster series (reconciler.metrics): set from a pass's summary, ticking since the last
good pass and until the certificate expires, and gone when the cluster is deleted or this
replica stops leading, so no stale cluster lingers in Prometheus or its alerts."""

from __future__ import annotations

import time

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
