"""The shipped monitoring (deploy/monitoring/): alert rules, PrometheusRule, Grafana dashboard.

Stories: the plain rules file and the PrometheusRule carry the same groups; promtool accepts the
rules (templates included); each alert is evaluated by `promtool test rules` against /metrics
pages the reconciler's own registry produces for a healthy cluster, a failing one, a standby
replica with no leader, and no reconciler at all, and fires exactly where it should (and the
alerts on KaiwuDB's own metrics, group `kaiwudb`, stay quiet: there is no KaiwuDB page here;
tests/unit/test_kwdb_monitoring.py proves them); every metric the dashboard queries exists in the
registry, or is one KWDB V3.2.1 exports (tests/support/kwdb_metrics.py, each with its source line).

promtool comes from Debian's `prometheus` package (tests/world/install_deps.sh installs it).
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from reconciler.kube.workqueue import WorkQueue
from reconciler.metrics import Metrics
from tests.support.kwdb_metrics import KWDB_NAMES, PROMETHEUS_NAMES
from tests.support.promql import metric_names, promtool

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "kaiwu-rules.yaml"
TARGET = {"job": "kaiwu-reconciler", "instance": "10.0.0.7:8090"}
MINUTES = 90  # the pages are replayed over this long, one sample a minute
# The groups on the reconciler's metrics; `kaiwudb` reads KaiwuDB's own (test_kwdb_monitoring.py).
RECONCILER_GROUPS = ("kaiwu-clusters", "kaiwu-reconciler")
KWDB_GROUP = "kaiwudb"
SEVERITY = {"KaiwuClusterNotReady": "warning", "KaiwuClusterStalled": "critical",
            "KaiwuNodeNotLive": "critical", "KaiwuClusterNodesMissing": "warning",
            "KaiwuCertificateExpiringSoon": "warning", "KaiwuClusterNotReconciled": "warning",
            "KaiwuReconcilerDown": "critical", "KaiwuReconcilerNotLeading": "critical",
            "KaiwuReconcileErrors": "warning", "KaiwuBackupTooOld": "warning"}


def rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def alert_names(groups: tuple[str, ...] | None = None) -> list[str]:
    """Every alert of the rules file, or of the named groups only."""
    return [rule["alert"] for group in rules()["groups"]
            if groups is None or group["name"] in groups for rule in group["rules"]]


# ---- recorded pages --------------------------------------------------------------------------

def cluster_page(metrics: Metrics, *, healthy: bool) -> None:
    """What the Controller reports for one 3-node TLS cluster, healthy or failing."""
    now = time.time()
    if healthy:
        metrics.observe_cluster("kaiwu-prod", "orders", desired=3, ready=3, live=3, not_live=0,
                                conditions={"Ready": "True", "Reconciling": "False",
                                            "Stalled": "False", "Drifted": "False"})
        metrics.cluster_succeeded("kaiwu-prod", "orders", now - 20)
        metrics.cluster_certificate_expiry("kaiwu-prod", "orders", now + 80 * 86400)
        # promtool's clock starts at 0 and the pages are evaluated at MINUTES: the backup
        # timestamps are set on that clock (an hour before, or 30 hours before).
        metrics.backup_succeeded("kaiwu-prod", "orders", MINUTES * 60 - 3600)
    else:
        metrics.observe_cluster("kaiwu-prod", "orders", desired=3, ready=2, live=2, not_live=1,
                                conditions={"Ready": "False", "Reconciling": "False",
                                            "Stalled": "True", "Drifted": "True"})
        metrics.cluster_succeeded("kaiwu-prod", "orders", now - 3600)
        metrics.cluster_certificate_expiry("kaiwu-prod", "orders", now + 10 * 86400)
        metrics.backup_succeeded("kaiwu-prod", "orders", MINUTES * 60 - 30 * 3600)


def pages(*, healthy: bool, leader: bool) -> tuple[str, str]:
    """Two /metrics pages of one replica, the second after a while of reconciles (all
    successful when healthy, all failing otherwise), from the reconciler's own registry."""
    metrics = Metrics()
    metrics.leader.set(1 if leader else 0)
    queue: WorkQueue[str] = WorkQueue(metrics=metrics)
    if leader:
        cluster_page(metrics, healthy=healthy)

    def reconciles(count: int) -> None:
        for _ in range(count):
            queue.add("kaiwu-prod/orders")
            key = queue.get(timeout_s=10)
            assert key is not None
            if healthy:
                metrics.reconcile_total.labels(result="success").inc()
            else:
                metrics.reconcile_total.labels(result="error").inc()
                queue.add_rate_limited(key)
            queue.done(key)
    if leader:
        reconciles(3)
    first = metrics.exposition().decode()
    if leader:
        reconciles(60)
    return first, metrics.exposition().decode()


def series(first: str, second: str) -> list[dict[str, str]]:
    """promtool input series: each sample of the pages, with the scrape's job and instance,
    going linearly from its first value to its second over MINUTES."""
    before = {key: value for key, value in samples(first)}
    out = []
    for key, value in samples(second):
        start = before.get(key, value)
        step = (value - start) / MINUTES
        name, labels = key
        text = ",".join(f'{k}="{v}"' for k, v in sorted({**dict(labels), **TARGET}.items()))
        sign = "+" if step >= 0 else "-"
        out.append({"series": f"{name}{{{text}}}",
                     "values": f"{start:.9f}{sign}{abs(step):.9f}x{MINUTES}"})
    return out


def samples(page: str) -> list[tuple[tuple[str, tuple[tuple[str, str], ...]], float]]:
    found = []
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if math.isnan(sample.value) or sample.name.endswith("_created"):
                continue
            labels = tuple(sorted((k, v.replace("\\", "\\\\").replace('"', '\\"'))
                                  for k, v in sample.labels.items()))
            found.append(((sample.name, labels), float(sample.value)))
    return found


CLUSTER = {"namespace": "kaiwu-prod", "cluster": "orders", **TARGET}


def expected(firing: dict[str, list[dict[str, str]]]) -> list[dict[str, Any]]:
    """One alert_rule_test per alert: the given ones fire with these labels, the rest not."""
    return [{"eval_time": f"{MINUTES}m", "alertname": name,
             "exp_alerts": [{"exp_labels": {**labels, "severity": SEVERITY[name]}}
                            for labels in firing.get(name, [])]}
            for name in alert_names()]


def run_promtool(tmp_path: Path, scenarios: list[tuple[str, list[dict[str, str]],
                                                      dict[str, list[dict[str, str]]]]]) -> str:
    # Annotations are left out of the copy promtool tests (its comparison would need every
    # rendered text spelled out); `promtool check rules` checks their templates.
    stripped = rules()
    for group in stripped["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(stripped))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [
        {"name": name, "interval": "1m", "input_series": input_series,
         "alert_rule_test": expected(firing)}
        for name, input_series, firing in scenarios]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, width=1000))
    done = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# ---- stories ----------------------------------------------------------------------------------

def test_the_rules_file_and_the_prometheusrule_carry_the_same_groups() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == rules()["groups"]
    # No group goes untested: the reconciler's are proven here, KaiwuDB's in its own module.
    assert [group["name"] for group in rules()["groups"]] == [*RECONCILER_GROUPS, KWDB_GROUP]
    assert sorted(alert_names(RECONCILER_GROUPS)) == sorted(SEVERITY)


def test_promtool_accepts_the_rules_and_their_templates() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in done.stdout


def test_each_alert_fires_exactly_where_it_should(tmp_path: Path) -> None:
    cluster = dict(CLUSTER)
    failing: dict[str, list[dict[str, str]]] = {
        "KaiwuClusterNotReady": [{**cluster, "type": "Ready", "status": "True"}],
        "KaiwuClusterStalled": [cluster],
        "KaiwuNodeNotLive": [cluster],
        "KaiwuClusterNodesMissing": [cluster],
        "KaiwuCertificateExpiringSoon": [cluster],
        "KaiwuClusterNotReconciled": [cluster],
        "KaiwuBackupTooOld": [cluster],
        "KaiwuReconcileErrors": [{}],
    }
    scenarios: list[tuple[str, list[dict[str, str]], dict[str, list[dict[str, str]]]]] = [
        ("healthy cluster", series(*pages(healthy=True, leader=True)), {}),
        ("failing cluster", series(*pages(healthy=False, leader=True)), failing),
        ("a standby and no leader", series(*pages(healthy=True, leader=False)),
         {"KaiwuReconcilerNotLeading": [{}]}),
        ("no reconciler scraped",
         [{"series": 'up{job="kaiwu-reconciler",instance="10.0.0.7:8090"}',
           "values": f"0x{MINUTES}"}],
         {"KaiwuReconcilerDown": [{}]}),
    ]
    output = run_promtool(tmp_path, scenarios)
    assert "SUCCESS" in output, output


def test_promtool_would_catch_an_alert_that_does_not_fire(tmp_path: Path) -> None:
    """The harness itself: expecting the healthy cluster to be stalled fails."""
    with pytest.raises(AssertionError, match="KaiwuClusterStalled"):
        run_promtool(tmp_path, [("healthy cluster", series(*pages(healthy=True, leader=True)),
                                 {"KaiwuClusterStalled": [CLUSTER]})])


# ---- the dashboard ----------------------------------------------------------------------------

def exposed_names() -> set[str]:
    """Every sample name the registry can expose (families described even with no series)."""
    names = set()
    for family in Metrics().registry.collect():
        base = family.name
        names.add(base)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                    "summary": ("_count", "_sum")}.get(family.type, ())
        names.update(base + suffix for suffix in suffixes)
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"]
               for target in panel.get("targets", ())]
    queries += [var["query"]["query"] for var in dashboard["templating"]["list"]
                if var["type"] == "query"]
    return queries


def test_the_dashboard_queries_only_metrics_the_reconciler_or_kaiwudb_exposes() -> None:
    """A query reads the reconciler's registry, or KaiwuDB's pages (KWDB's names and the `up`
    of their scrape), never a mix and never a name neither has."""
    exposed = exposed_names()
    kwdb = set(KWDB_NAMES) | PROMETHEUS_NAMES
    queries = dashboard_queries()
    assert len(queries) > 15
    used: set[str] = set()
    for query in queries:
        names = metric_names(query)
        assert names, f"no metric found in {query!r}"
        assert names <= exposed or names <= kwdb, (
            f"{query!r} names {sorted(names - exposed - kwdb)}, exposed by neither, or mixes both")
        used |= names
    for wanted in ("workqueue_depth", "rest_client_requests_total", "kaiwu_cluster_ready_nodes",
                   "process_resident_memory_bytes", "ranges_unavailable",
                   "clock_offset_meannanos"):
        assert wanted in used


def test_the_dashboard_check_catches_a_misspelt_metric() -> None:
    assert metric_names('sum by (le) (rate(kaiwu_reconcile_duration_secs_bucket{a="b"}[5m]))') \
        == {"kaiwu_reconcile_duration_secs_bucket"}
    assert "kaiwu_reconcile_duration_secs_bucket" not in exposed_names()
    assert metric_names("label_values(kaiwu_cluster_desired_nodes, namespace)") == {
        "kaiwu_cluster_desired_nodes"}
    assert metric_names("abs(clock_offset_meannanos{a=\"b\"}) / 1e9 > 0.3") == {
        "clock_offset_meannanos"}
    assert "clock_offset_mean_nanos" not in KWDB_NAMES


def test_the_alert_rules_query_only_metrics_the_reconciler_exposes() -> None:
    exposed = exposed_names()
    for group in rules()["groups"]:
        if group["name"] not in RECONCILER_GROUPS:
            continue
        for rule in group["rules"]:
            assert metric_names(str(rule["expr"])) <= exposed, rule["alert"]
