"""KaiwuDB's own metrics: the scrape, the alert group `kaiwudb`, and where each name comes from.

Stories: the hand-written PodMonitor (deploy/monitoring/kaiwudb-podmonitor.yaml) scrapes the path
and port KWDB serves its metrics on, over TLS verified against the cluster's CA under a name the
node certificate carries, and labels each series exactly as the rendered ServiceMonitor
(spec.monitoring.serviceMonitor) does; every alert of group `kaiwudb` is evaluated by
`promtool test rules` on /_status/vars pages written the way KWDB's exporter writes them
(tests/support/kwdb_metrics.py), beside healthy clusters (a single-node one among them), and
fires exactly where it should: a lost process, a five-node cluster losing two nodes, a
three-node cluster losing two (where KWDB itself counts no unavailable range), a node up but not
live, stores filling up, a drifting clock, and a rolling restart that must raise nothing; a
misspelt metric name breaks both the name check and promtool's verdict.

What KWDB V3.2.1 does (paths under kwbase/pkg/; `KWDB_REPO=<a KWDB git clone> pytest` checks
every line cited here and in tests/support/kwdb_metrics.py against the tag):
- endpoint: `/_status/vars` (server/status.go:93-97), registered without authentication
  (server/server.go:2219-2220) on the HTTP port (--http-addr, 8080 in our pods); in secure mode
  that port speaks TLS and redirects plain HTTP to https, /health excepted
  (server/server.go:2621-2658).
- names: `ranges.unavailable` -> `ranges_unavailable` (util/metric/registry.go:152-163); store
  metrics carry `store` (server/status/recorder.go:213-219); the table in kwdb_metrics.py
  cites each metric's definition.
- max offset: 500ms unless --max-offset says otherwise (base/constants.go:29-33); a node
  further than 80% of it from half its peers stops (rpc/clock_offset.go:243-258).
- a range is counted once, by its first live replica, and not at all when none is live
  (kv/kvserver/replica_metrics.go:170-201): why the three-node story expects no
  KaiwuDBRangesUnavailable.

What is not proven: no KWDB process runs here. The pages follow KWDB's source, not a recording;
the Prometheus Operator's own labels (namespace, pod, container, endpoint, job) are modelled from
its documented behaviour, not run.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from reconciler.kaiwudb.certs.leaves import node_hosts
from renderer.builders import CONTAINER, HTTP_PORT
from renderer.render import build_objects, read_live
from renderer.settings import RenderSettings
from renderer.spec import Cluster
from tests.support.kwdb_metrics import (
    GIB,
    KWDB_METRICS,
    KWDB_NAMES,
    NODE_ID_LABELS,
    PROMETHEUS_NAMES,
    STORE,
    Node,
    exported_name,
    go_float,
    status_vars,
)
from tests.support.promql import metric_names, promtool

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "kaiwu-rules.yaml"
PODMONITOR = MONITORING / "kaiwudb-podmonitor.yaml"
PRODUCTION = ROOT / "clusters" / "production.yaml"
GROUP = "kaiwudb"
NAMESPACE = "kaiwu-prod"
MINUTES = 60  # each story runs an hour, one scrape a minute
FAULT = 30    # and its fault starts at minute 30
SEVERITY = {"KaiwuDBRangesUnavailable": "critical", "KaiwuDBRangesUnderReplicated": "warning",
            "KaiwuDBStoreLowOnDisk": "warning", "KaiwuDBStoreOutOfDisk": "critical",
            "KaiwuDBClockOffsetNearMax": "critical", "KaiwuDBNodeNotLive": "critical",
            "KaiwuDBLiveNodesMissing": "warning", "KaiwuDBNodeDown": "warning"}


def kwdb_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (group,) = [group for group in groups if group["name"] == GROUP]
    rules: list[dict[str, Any]] = group["rules"]
    return rules


def podmonitor() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(PODMONITOR.read_text())
    return loaded


def production() -> tuple[Cluster, dict[str, dict[str, Any]]]:
    """clusters/production.yaml (orders in kaiwu-prod, TLS, ServiceMonitor on), rendered."""
    cluster = read_live(yaml.safe_load(PRODUCTION.read_text()))
    objects = {f"{obj['kind']}/{obj['metadata']['name']}": obj
               for obj in build_objects(cluster, RenderSettings())}
    return cluster, objects


# ---- what Prometheus makes of a scraped pod ------------------------------------------------

def endpoint_of(monitor: Mapping[str, Any]) -> dict[str, Any]:
    key = "podMetricsEndpoints" if monitor["kind"] == "PodMonitor" else "endpoints"
    (endpoint,) = monitor["spec"][key]
    return dict(endpoint)


@functools.cache
def rendered_pod_labels(namespace: str, cluster: str) -> tuple[tuple[str, str], ...]:
    """The labels the renderer puts on the pods of a default cluster of that name."""
    live = read_live({"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                      "metadata": {"name": cluster, "namespace": namespace}, "spec": {}})
    (statefulset,) = [obj for obj in build_objects(live, RenderSettings())
                      if obj["kind"] == "StatefulSet"]
    return tuple(statefulset["spec"]["template"]["metadata"]["labels"].items())


def target_labels(monitor: Mapping[str, Any], *, namespace: str, cluster: str, pod: str,
                  ip: str) -> dict[str, str]:
    """The labels one KaiwuDB pod's series get under `monitor`: those the Prometheus Operator
    sets for every target (namespace, container, pod, endpoint, and job: `<ns>/<name>` for a
    PodMonitor, the Service's name for a ServiceMonitor, which also sets `service`), then the
    monitor's own relabelings as Prometheus applies a `replace`, then `instance` from the
    address. The pod's labels (`__meta_kubernetes_pod_label_*`) are those the renderer puts
    on it."""
    endpoint = endpoint_of(monitor)
    labels = {"__address__": f"{ip}:{HTTP_PORT}",
              "__meta_kubernetes_namespace": namespace,
              "__meta_kubernetes_pod_name": pod,
              "__meta_kubernetes_pod_container_name": CONTAINER,
              "namespace": namespace, "container": CONTAINER, "pod": pod,
              "endpoint": endpoint["port"]}
    for key, value in rendered_pod_labels(namespace, cluster):
        labels["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    if monitor["kind"] == "PodMonitor":
        labels["job"] = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
    else:
        labels["service"] = labels["job"] = f"{cluster}-public"
    for rule in endpoint.get("relabelings", ()):
        assert rule.get("action", "replace") == "replace", "only replace is modelled"
        source = rule.get("separator", ";").join(labels.get(name, "")
                                                 for name in rule.get("sourceLabels", ()))
        match = re.fullmatch(rule.get("regex", "(.*)"), source)
        if match:
            template = re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", rule.get("replacement", "$1"))
            labels[rule["targetLabel"]] = match.expand(template)
    labels.setdefault("instance", labels["__address__"])
    return {key: value for key, value in labels.items() if not key.startswith("__")}


# ---- a cluster over time, as promtool input --------------------------------------------------

@dataclass(frozen=True)
class KwdbCluster:
    """A KaiwuCluster's nodes before the fault, and during it (from FAULT until `until`)."""

    name: str
    index: int  # tells the pod IPs of clusters apart
    before: tuple[Node, ...]
    during: tuple[Node, ...] | None = None
    until: int = MINUTES + 1

    def nodes(self, minute: int) -> tuple[Node, ...]:
        if self.during is not None and FAULT <= minute < self.until:
            return self.during
        return self.before

    def labels(self, pod: str) -> dict[str, str]:
        return dict(scraped_labels(self.name, self.index, pod))


@functools.cache
def scraped_labels(cluster: str, index: int, pod: str) -> tuple[tuple[str, str], ...]:
    """A pod's target labels under a copy of the shipped PodMonitor made for its cluster."""
    monitor = podmonitor()
    monitor["metadata"]["name"] = f"{cluster}-kwdb"
    ordinal = int(pod.rsplit("-", 1)[1])
    return tuple(target_labels(monitor, namespace=NAMESPACE, cluster=cluster, pod=pod,
                               ip=f"10.1.{index}.{ordinal + 10}").items())


def healthy(cluster: str, count: int, **fields: Any) -> tuple[Node, ...]:
    return tuple(Node(pod=f"{cluster}-{i}", node_id=i + 1, live_nodes=count, **fields)
                 for i in range(count))


def changed(nodes: Sequence[Node], **by_pod: dict[str, Any]) -> tuple[Node, ...]:
    """The nodes with some fields changed, by pod ordinal: changed(nodes, o2={...})."""
    return tuple(replace(node, **by_pod.get("o" + node.pod.rsplit("-", 1)[1], {}))
                 for node in nodes)


SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def series(clusters: Sequence[KwdbCluster]) -> list[dict[str, str]]:
    """promtool input series: every sample of every node's page each minute, with its target's
    labels, and `up`. A page that stops is marked stale at once, as Prometheus does when a
    scrape fails, so a lost node's last values do not linger for the 5-minute lookback."""
    timeline: dict[SeriesKey, list[str | None]] = {}
    for minute in range(MINUTES + 1):
        for cluster in clusters:
            for node in cluster.nodes(minute):
                target = cluster.labels(node.pod)
                samples: list[tuple[str, dict[str, str], float]] = [
                    ("up", target, 1.0 if node.serving else 0.0)]
                if node.serving:
                    page = status_vars(node, NAMESPACE, cluster.name)
                    samples += [(sample.name, {**sample.labels, **target}, sample.value)
                                for family in text_string_to_metric_families(page)
                                for sample in family.samples]
                for name, labels, value in samples:
                    key = (name, tuple(sorted(labels.items())))
                    timeline.setdefault(key, [None] * (MINUTES + 1))[minute] = go_float(value)
    out = []
    for (series_name, label_pairs), values in sorted(timeline.items()):
        text = ",".join(f'{key}="{label}"' for key, label in label_pairs)
        written: list[str] = []
        for minute, sample in enumerate(values):
            if sample is not None:
                written.append(sample)
            elif minute and values[minute - 1] is not None:
                written.append("stale")
            else:
                written.append("_")
        out.append({"series": f"{series_name}{{{text}}}", "values": " ".join(written)})
    return out


@dataclass(frozen=True)
class Story:
    name: str
    clusters: tuple[KwdbCluster, ...]
    # eval minute -> alert -> the label sets it fires with (every alert not named: silent)
    expect: dict[int, dict[str, list[dict[str, str]]]] = field(default_factory=dict)


def pod_alert(cluster: KwdbCluster, ordinal: int, **extra: str) -> dict[str, str]:
    return {**cluster.labels(f"{cluster.name}-{ordinal}"), **extra}


def cluster_alert(cluster: KwdbCluster) -> dict[str, str]:
    return {"namespace": NAMESPACE, "cluster": cluster.name}


def run_promtool(tmp_path: Path, stories: Sequence[Story],
                 rules: list[dict[str, Any]] | None = None) -> str:
    """Evaluate the `kaiwudb` group on the stories. Annotations are left out of the copy
    promtool evaluates (test_monitoring.py checks their templates with `check rules`)."""
    copied = [{key: value for key, value in rule.items() if key != "annotations"}
              for rule in (rules if rules is not None else kwdb_rules())]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": GROUP, "rules": copied}]}))
    names = [rule["alert"] for rule in copied]
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [
        {"name": story.name, "interval": "1m", "input_series": series(story.clusters),
         "alert_rule_test": [
             {"eval_time": f"{minute}m", "alertname": name,
              "exp_alerts": [{"exp_labels": {**labels, "severity": SEVERITY[name]}}
                             for labels in firing.get(name, [])]}
             for minute, firing in sorted(story.expect.items()) for name in names]}
        for story in stories]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, width=10000))
    done = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return done.stdout


# ---- the stories -----------------------------------------------------------------------------

BILLING = KwdbCluster("billing", 2, healthy("billing", 3))  # healthy beside every fault


def lost_process() -> Story:
    before = healthy("orders", 3)
    orders = KwdbCluster("orders", 1, before, changed(
        before, o0={"live_nodes": 2, "underreplicated": 7},
        o1={"live_nodes": 2, "underreplicated": 5}, o2={"serving": False}))
    return Story("orders-2's kwbase stops; billing is fine", (orders, BILLING), {
        FAULT + 3: {},  # every alert still within its `for`
        MINUTES: {"KaiwuDBNodeDown": [pod_alert(orders, 2)],
                  "KaiwuDBLiveNodesMissing": [cluster_alert(orders)],
                  "KaiwuDBRangesUnderReplicated": [cluster_alert(orders)]}})


def five_lose_two() -> Story:
    before = healthy("orders", 5)
    orders = KwdbCluster("orders", 1, before, changed(
        before, o0={"live_nodes": 3, "unavailable": 2, "underreplicated": 9},
        o1={"live_nodes": 3, "unavailable": 1, "underreplicated": 8},
        o2={"live_nodes": 3, "underreplicated": 7},
        o3={"serving": False}, o4={"serving": False}))
    lost_quorum = {"KaiwuDBRangesUnavailable": [cluster_alert(orders)]}
    return Story("a five-node cluster loses two nodes holding some ranges' majorities",
                 (orders, BILLING), {
                     FAULT: {},  # pending: `for: 1m`
                     FAULT + 1: lost_quorum,
                     MINUTES: {**lost_quorum,
                               "KaiwuDBRangesUnderReplicated": [cluster_alert(orders)],
                               "KaiwuDBNodeDown": [pod_alert(orders, 3), pod_alert(orders, 4)],
                               "KaiwuDBLiveNodesMissing": [cluster_alert(orders)]}})


def three_lose_two() -> Story:
    """The survivor's own liveness expires with its peers' (the liveness range lost its
    quorum): it reports 0 live nodes, and no live replica is left to count any range
    unavailable or under-replicated (kv/kvserver/replica_metrics.go:180-188)."""
    before = healthy("orders", 3)
    orders = KwdbCluster("orders", 1, before, changed(
        before, o0={"live_nodes": 0}, o1={"serving": False}, o2={"serving": False}))
    return Story("a three-node cluster loses two nodes: KWDB counts no unavailable range",
                 (orders, BILLING), {
                     MINUTES: {"KaiwuDBNodeNotLive": [pod_alert(orders, 0)],
                               "KaiwuDBNodeDown": [pod_alert(orders, 1), pod_alert(orders, 2)],
                               "KaiwuDBLiveNodesMissing": [cluster_alert(orders)]}})


def up_but_not_live() -> Story:
    before = healthy("orders", 3)
    orders = KwdbCluster("orders", 1, before, changed(
        before, o0={"live_nodes": 2, "underreplicated": 6}, o1={"live_nodes": 0},
        o2={"live_nodes": 2}))
    return Story("orders-1 answers but cannot heartbeat its liveness", (orders, BILLING), {
        MINUTES: {"KaiwuDBNodeNotLive": [pod_alert(orders, 1)],
                  "KaiwuDBLiveNodesMissing": [cluster_alert(orders)],
                  "KaiwuDBRangesUnderReplicated": [cluster_alert(orders)]}})


def disks_fill() -> Story:
    # Store ids have their own counter: after failovers they no longer follow node ids.
    before = tuple(replace(node, store_id=node.node_id + 3) for node in healthy("orders", 3))
    orders = KwdbCluster("orders", 1, before, changed(
        before, o1={"available": 10 * GIB, "used": 70 * GIB},
        o2={"available": 3 * GIB, "used": 80 * GIB}))
    return Story("two stores fill up, one almost to the brim", (orders, BILLING), {
        MINUTES: {"KaiwuDBStoreLowOnDisk": [pod_alert(orders, 1, store="5"),
                                            pod_alert(orders, 2, store="6")],
                  "KaiwuDBStoreOutOfDisk": [pod_alert(orders, 2, store="6")]}})


def clock_drifts() -> Story:
    before = healthy("orders", 3)
    orders = KwdbCluster("orders", 1, before, changed(
        before, o0={"clock_offset_ns": -350e6}, o1={"clock_offset_ns": 250e6},
        o2={"clock_offset_ns": 60e6}))
    return Story("orders-0's clock runs 350ms behind (a negative mean offset)",
                 (orders, BILLING), {
                     MINUTES: {"KaiwuDBClockOffsetNearMax": [pod_alert(orders, 0)]}})


def rolling_restart() -> Story:
    before = healthy("orders", 3)
    orders = KwdbCluster("orders", 1, before, changed(
        before, o0={"live_nodes": 2, "underreplicated": 7},
        o1={"serving": False}, o2={"live_nodes": 2, "underreplicated": 5}), until=FAULT + 3)
    return Story("orders-1 restarts for three minutes: nothing fires", (orders, BILLING), {
        minute: {} for minute in (FAULT + 2, FAULT + 4, FAULT + 10, MINUTES)})


def quiet() -> Story:
    """A single-node cluster sees one live node: itself, which is healthy."""
    orders = KwdbCluster("orders", 1, healthy("orders", 3))
    edge = KwdbCluster("edge", 3, healthy("edge", 1))
    return Story("three healthy clusters, one of a single node", (orders, BILLING, edge),
                 {FAULT: {}, MINUTES: {}})


STORIES = (quiet, lost_process, five_lose_two, three_lose_two, up_but_not_live, disks_fill,
           clock_drifts, rolling_restart)


def test_every_kaiwudb_alert_fires_exactly_where_it_should(tmp_path: Path) -> None:
    stories = [story() for story in STORIES]
    fired = {name for story in stories for firing in story.expect.values() for name in firing}
    assert fired == set(SEVERITY), "every alert is shown firing in some story"
    output = run_promtool(tmp_path, stories)
    assert "SUCCESS" in output, output


def test_promtool_would_catch_a_misspelt_metric_in_the_rules(tmp_path: Path) -> None:
    """The harness itself: with `ranges_unavailable` misspelt, the lost quorum goes unseen."""
    misspelt = [{**rule, "expr": rule["expr"].replace("ranges_unavailable", "ranges_unavailabel")}
                for rule in kwdb_rules()]
    assert misspelt != kwdb_rules()
    with pytest.raises(AssertionError, match="KaiwuDBRangesUnavailable"):
        run_promtool(tmp_path, [five_lose_two()], misspelt)


def test_the_rules_read_only_names_kwdb_exports() -> None:
    known = set(KWDB_NAMES) | PROMETHEUS_NAMES
    used: set[str] = set()
    for rule in kwdb_rules():
        names = metric_names(str(rule["expr"]))
        assert names, rule["alert"]
        assert names <= known, f"{rule['alert']} reads {sorted(names - known)}: not KWDB's"
        assert 'job="kaiwudb"' in rule["expr"], "only KaiwuDB's targets"
        used |= names
    assert used == {"ranges_unavailable", "ranges_underreplicated", "capacity",
                    "capacity_available", "clock_offset_meannanos", "liveness_livenodes", "up"}
    # And the check bites: a misspelt name is neither KWDB's nor Prometheus's.
    assert not metric_names("sum(ranges_unavailabel{})") <= known


def test_every_kaiwudb_alert_names_its_cluster_and_a_runbook() -> None:
    runbooks = (ROOT / "docs" / "metrics.md").read_text()
    assert [rule["alert"] for rule in kwdb_rules()] == list(SEVERITY)
    for rule in kwdb_rules():
        name, notes = rule["alert"], rule["annotations"]
        assert rule["labels"] == {"severity": SEVERITY[name]}, name
        assert "{{ $labels.namespace }}" in notes["summary"], name
        assert "{{ $labels.cluster }}" in notes["summary"], name
        assert notes["runbook"] == f"docs/metrics.md, KaiwuDB's own alerts: {name}", name
        assert f"**`{name}`**" in runbooks, f"docs/metrics.md has no runbook entry for {name}"


# ---- the page and the names ------------------------------------------------------------------

def test_kwdb_names_its_metrics_for_prometheus_with_underscores() -> None:
    assert exported_name("ranges.unavailable") == "ranges_unavailable"
    assert exported_name("clock-offset.meannanos") == "clock_offset_meannanos"
    assert exported_name("liveness.livenodes") == "liveness_livenodes"
    assert exported_name("node-id") == "node_id"
    assert exported_name("2xx.count") == "_xx_count"  # a leading digit is replaced too
    assert NODE_ID_LABELS == ("advertise_addr", "http_addr", "sql_addr")


def test_a_page_carries_store_labels_on_store_metrics_only() -> None:
    page = status_vars(Node(pod="orders-1", node_id=2, live_nodes=3, store_id=7),
                       NAMESPACE, "orders")
    assert "# TYPE ranges_unavailable gauge\nranges_unavailable{store=\"7\"} 0\n" in page
    assert "capacity{store=\"7\"} 1.073741824e+11\n" in page  # Go's %g, as expfmt writes it
    assert "\nliveness_livenodes 3\n" in page
    families = {family.name: family for family in text_string_to_metric_families(page)}
    assert set(families) == set(KWDB_NAMES), "every cited metric, and nothing else"
    for metric in KWDB_METRICS:
        (sample,) = families[metric.exported].samples
        if metric.registry == STORE:
            assert sample.labels == {"store": "7"}, metric.name
        elif metric.exported == "node_id":
            assert set(sample.labels) == set(NODE_ID_LABELS)
            assert sample.value == 2
        else:
            assert sample.labels == {}, metric.name


# ---- the scrape ------------------------------------------------------------------------------

def test_the_podmonitor_scrapes_where_kwdb_serves_its_metrics() -> None:
    cluster, objects = production()
    monitor = podmonitor()
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    assert monitor["metadata"]["namespace"] == cluster.namespace
    pod = objects[f"StatefulSet/{cluster.name}"]["spec"]["template"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items(), "it selects the pods"
    assert selector["app.kubernetes.io/instance"] == cluster.name, "and only this cluster's"
    endpoint = endpoint_of(monitor)
    (kwbase,) = [c for c in pod["spec"]["containers"] if c["name"] == CONTAINER]
    (http,) = [port for port in kwbase["ports"] if port["name"] == endpoint["port"]]
    assert http["containerPort"] == HTTP_PORT
    start_line = kwbase["command"] + kwbase.get("args", [])
    assert f"--http-addr=0.0.0.0:{HTTP_PORT}" in start_line, "kwbase serves HTTP there"
    assert endpoint["path"] == "/_status/vars"
    # Secure mode: https, verified against the cluster's CA under a name the node certificate
    # the reconciler issues carries; no client certificate (KWDB asks for none).
    assert cluster.tls and endpoint["scheme"] == "https"
    tls = endpoint["tlsConfig"]
    assert tls["ca"] == {"secret": {"name": cluster.node_secret, "key": "ca.crt"}}
    assert tls["serverName"] in node_hosts(cluster)
    assert not {"cert", "keySecret", "insecureSkipVerify"} & set(tls)


def test_the_podmonitor_and_the_rendered_servicemonitor_label_a_pod_alike() -> None:
    cluster, objects = production()
    rendered = objects[f"ServiceMonitor/{cluster.name}"]
    by_pod, by_service = (
        target_labels(monitor, namespace=cluster.namespace, cluster=cluster.name,
                      pod=cluster.pod_name(1), ip="10.1.1.11")
        for monitor in (podmonitor(), rendered))
    assert by_service.pop("service") == cluster.client_service
    assert by_pod == by_service
    assert {key: by_pod[key] for key in ("job", "cluster", "namespace", "pod")} == {
        "job": "kaiwudb", "cluster": "orders", "namespace": "kaiwu-prod", "pod": "orders-1"}
    # The same scrape: path, scheme and TLS verification.
    pod_endpoint, service_endpoint = endpoint_of(podmonitor()), endpoint_of(rendered)
    for key in ("port", "path", "scheme", "tlsConfig"):
        assert pod_endpoint[key] == service_endpoint[key], key


def test_the_cluster_label_comes_from_each_pods_own_label() -> None:
    """Copied for another cluster without touching the relabelings, the PodMonitor still
    labels that cluster's series with its name."""
    labels = target_labels(podmonitor(), namespace="kaiwu-dev", cluster="dev", pod="dev-0",
                           ip="10.2.0.10")
    assert (labels["cluster"], labels["namespace"], labels["job"]) == ("dev", "kaiwu-dev",
                                                                       "kaiwudb")


# ---- the citations, against KWDB's source when it is at hand ----------------------------------

KWDB_REPO = os.environ.get("KWDB_REPO", "")
TAG = "V3.2.1"
# (path under kwbase/, first line, last line, text that must be there)
CITED: tuple[tuple[str, int, int, str], ...] = (
    ("pkg/server/status.go", 93, 97, 'statusVars = statusPrefix + "vars"'),
    ("pkg/server/status.go", 93, 97, 'statusPrefix = "/_status/"'),
    ("pkg/server/server.go", 2219, 2220, "s.mux.Handle(statusVars, http.HandlerFunc("),
    ("pkg/server/server.go", 2621, 2658, 'http.Redirect(w, r, "https://"'),
    ("pkg/server/server.go", 459, 463, "log.Fatal(ctx, err)"),
    ("pkg/util/metric/registry.go", 152, 163,
     'prometheusNameReplaceRE  = regexp.MustCompile("^[^a-zA-Z_:]|[^a-zA-Z0-9_:]")'),
    ("pkg/server/status/recorder.go", 213, 219, 'store.Registry().AddLabel("store"'),
    ("pkg/base/constants.go", 29, 33, "DefaultMaxClockOffset = 500 * time.Millisecond"),
    ("pkg/rpc/clock_offset.go", 243, 258, "toleratedOffset := maxOffset * 4 / 5"),
    ("pkg/kv/kvserver/node_liveness.go", 1113, 1145, "if !self.IsLive(now) {"),
    ("pkg/kv/kvserver/replica_metrics.go", 170, 201, "if livenessMap[rd.NodeID].IsLive {"),
    ("pkg/kv/kvserver/allocator_scorer.go", 64, 67, "maxFractionUsedThreshold = 0.95"),
    ("pkg/server/config.go", 76, 76, "DefaultMetricsSampleInterval   = 10 * time.Second"),
    ("monitoring/rules/alerts.rules.yml", 56, 57, 'capacity_available:ratio{job="kaiwudb"} < 0.15'),
    ("monitoring/rules/alerts.rules.yml", 71, 73, "300 * 1000 * 1000"),
    ("pkg/server/server.go", 1867, 1911, "awaiting init command or join"),
    ("pkg/base/config.go", 499, 515, "func (cfg *Config) GetUIServerTLSConfig()"),
    ("pkg/security/certificate_manager.go", 603, 607, "return cm.getNodeCertLocked()"),
    ("pkg/security/tls.go", 112, 117, "does not\n// use client authentication"),
    ("pkg/util/httputil/http.go", 56, 56, 'PlaintextContentType = "text/plain"'),
    ("pkg/util/metric/prometheus_exporter.go", 81, 93,
     "m.Label = append(labels, prom.GetLabels()...)"),
    ("pkg/roachpb/metadata.go", 462, 477, "func (sc StoreCapacity) FractionUsed() float64 {"),
    ("monitoring/prometheus.yml", 23, 24, "- job_name: 'kaiwudb'"),
    ("monitoring/prometheus.yml", 23, 24, "metrics_path: '/_status/vars'"),
)


def kwdb_lines(path: str) -> list[str]:
    done = subprocess.run(["git", "-C", KWDB_REPO, "show", f"{TAG}:kwbase/{path}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def cited(source: str) -> str:
    """The lines `path:first-last` cites, joined."""
    path, _, span = source.rpartition(":")
    first, _, last = span.partition("-")
    lines = kwdb_lines("pkg/" + path)
    return "\n".join(lines[int(first) - 1:int(last or first)])


@pytest.mark.skipif(not KWDB_REPO, reason="set KWDB_REPO to a KWDB git clone to check the "
                    "citations against its V3.2.1 tag")
def test_every_cited_line_says_what_it_is_cited_for() -> None:
    for metric in KWDB_METRICS:
        text = cited(metric.source)
        assert f'Name:        "{metric.name}"' in text, metric.source
        assert f'Help:        "{metric.help}"' in text, metric.source
    for path, first, last, wanted in CITED:
        assert wanted in "\n".join(kwdb_lines(path)[first - 1:last]), (path, first, wanted)
