"""KaiwuDB's Prometheus page as KWDB V3.2.1 writes it: the metric names it exports, and pages.

Used by tests/unit/test_kwdb_monitoring.py (the alert rules of group `kaiwudb` are evaluated by
promtool on these pages) and tests/unit/test_monitoring.py (every metric the dashboard queries is
one the reconciler's registry or KWDB exports). No KWDB runs here: the names, labels and help
texts below are copied from KWDB's source, each with the line it comes from (tag V3.2.1, paths
under kwbase/pkg/), and `status_vars` writes a page the way KWDB's exporter does:

- `/_status/vars` is `statusServer.handleVars` (server/status.go:96-97, 1253-1261), which prints
  the MetricsRecorder's registries as Prometheus text (server/status/recorder.go:271-290).
- The node's registry is scraped first, without labels, then every store's registry, which
  carries the label `store="<store id>"` (recorder.go:213-219, 255-269; a registry's labels
  come first on every sample: util/metric/prometheus_exporter.go:81-93).
- A family's name is the metric's name with every character outside [a-zA-Z0-9_:] (and a
  leading digit) replaced by `_` (util/metric/registry.go:152-163, prometheus_exporter.go:58-75),
  so `ranges.unavailable` is `ranges_unavailable` and `clock-offset.meannanos` is
  `clock_offset_meannanos`; label names likewise (registry.go:165-168).
- Families are written by prometheus/common's expfmt.MetricFamilyToText
  (prometheus_exporter.go:98-106): `# HELP`, `# TYPE`, then `name{labels} value`, values in Go's
  shortest %g form (`1.073741824e+11`). Gauges are type gauge with the integer value as a float
  (util/metric/metric.go:425-443). The order of families is Go map order, i.e. arbitrary.
  (expfmt itself lives in KWDB's vendor submodule, which is not in the mirror: its text format
  is the standard exposition format, which prometheus_client's parser reads back here.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal

NODE = "node"    # the node's registry: no labels
STORE = "store"  # a store's registry: label store="<id>"


@dataclass(frozen=True)
class KwdbMetric:
    """One metric KWDB V3.2.1 exports: its own name, help text, registry and source line."""

    name: str
    help: str
    registry: str
    source: str

    @property
    def exported(self) -> str:
        return exported_name(self.name)


def exported_name(name: str) -> str:
    """util/metric/registry.go:156, 161-163: prometheusNameReplaceRE.ReplaceAllString(name, "_")."""
    return re.sub(r"^[^a-zA-Z_:]|[^a-zA-Z0-9_:]", "_", name)


def exported_label(name: str) -> str:
    """util/metric/registry.go:157, 166-168 (prometheusLabelReplaceRE)."""
    return re.sub(r"^[^a-zA-Z_]|[^a-zA-Z0-9_]", "_", name)


# Every KWDB metric the shipped rules and dashboard read. Store metrics are registered in the
# store's registry (kv/kvserver/metrics.go:1250-1300, 1471), liveness and clock offsets in the
# node's (server/server.go:553, 737).
KWDB_METRICS: tuple[KwdbMetric, ...] = (
    KwdbMetric("ranges", "Number of ranges", STORE, "kv/kvserver/metrics.go:80-85"),
    KwdbMetric("ranges.unavailable",
               "Number of ranges with fewer live replicas than needed for quorum", STORE,
               "kv/kvserver/metrics.go:86-91"),
    KwdbMetric("ranges.underreplicated",
               "Number of ranges with fewer live replicas than the replication target", STORE,
               "kv/kvserver/metrics.go:92-97"),
    KwdbMetric("replicas", "Number of replicas", STORE, "kv/kvserver/metrics.go:42-47"),
    KwdbMetric("replicas.leaseholders", "Number of lease holders", STORE,
               "kv/kvserver/metrics.go:66-71"),
    KwdbMetric("capacity", "Total storage capacity", STORE, "kv/kvserver/metrics.go:246-251"),
    KwdbMetric("capacity.available", "Available storage capacity", STORE,
               "kv/kvserver/metrics.go:252-257"),
    KwdbMetric("capacity.used", "Used storage capacity", STORE, "kv/kvserver/metrics.go:258-263"),
    KwdbMetric("liveness.livenodes",
               "Number of live nodes in the cluster (will be 0 if this node is not itself live)",
               NODE, "kv/kvserver/node_liveness.go:92-97"),
    KwdbMetric("clock-offset.meannanos", "Mean clock offset with other nodes", NODE,
               "rpc/clock_offset.go:56-61"),
    KwdbMetric("clock-offset.stddevnanos", "Stddev clock offset with other nodes", NODE,
               "rpc/clock_offset.go:62-67"),
    KwdbMetric("sys.uptime", "Process uptime", NODE, "server/status/runtime.go:157-162"),
    KwdbMetric("node-id", "node ID with labels for advertised RPC and HTTP addresses", NODE,
               "server/status/recorder.go:192-205"),
)
KWDB_NAMES: dict[str, KwdbMetric] = {metric.exported: metric for metric in KWDB_METRICS}
# Not KWDB's: the series Prometheus itself writes for every target it scrapes.
PROMETHEUS_NAMES = frozenset({"up"})
# The node-id gauge's labels (server/status/recorder.go:70-72, 200-202), exported names.
NODE_ID_LABELS = tuple(exported_label(key) for key in ("advertise-addr", "http-addr",
                                                       "sql-addr"))

GIB = 1024 ** 3


@dataclass(frozen=True)
class Node:
    """What one kwbase process reports on /_status/vars; `serving=False`: no page at all
    (the process is down, or the scrape cannot reach it)."""

    pod: str
    node_id: int
    live_nodes: int
    serving: bool = True
    unavailable: int = 0
    underreplicated: int = 0
    ranges: int = 40
    capacity: float = 100 * GIB
    available: float = 60 * GIB
    used: float = 12 * GIB
    clock_offset_ns: float = 1.5e6
    clock_stddev_ns: float = 0.4e6
    uptime_s: float = 86400.0
    store_id: int | None = None  # store ids have their own counter; the node's by default
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def store(self) -> int:
        return self.store_id if self.store_id is not None else self.node_id


def go_float(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 64), as expfmt writes sample values: the shortest
    digits that read back exactly, in exponent form when the decimal exponent is below -4 or at
    least 6 (Go's strconv/ftoa.go: %e when exp < -4 || exp >= eprec, eprec = 6 for the
    shortest form). Compared once with Go 1.21's own output for the values these tests use."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # where the decimal point falls among the digits
    exp = point - 1
    minus = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return f"{minus}{text}{'0' * (point - len(text))}"
    return f"{minus}{text[:point]}.{text[point:]}"


def _values(node: Node) -> dict[str, float]:
    return {"ranges": node.ranges, "ranges.unavailable": node.unavailable,
            "ranges.underreplicated": node.underreplicated,
            "replicas": node.ranges * 3 // 2, "replicas.leaseholders": node.ranges // 2,
            "capacity": node.capacity, "capacity.available": node.available,
            "capacity.used": node.used, "liveness.livenodes": node.live_nodes,
            "clock-offset.meannanos": node.clock_offset_ns,
            "clock-offset.stddevnanos": node.clock_stddev_ns, "sys.uptime": node.uptime_s,
            "node-id": node.node_id, **node.extra}


def status_vars(node: Node, namespace: str, cluster: str, headless: str | None = None) -> str:
    """The /_status/vars page of one node, written as KWDB's exporter writes it."""
    assert node.serving, "a node that serves no page has none"
    headless = headless or cluster
    host = f"{node.pod}.{headless}.{namespace}.svc.cluster.local"
    values = _values(node)
    lines: list[str] = []
    for metric in KWDB_METRICS:
        name = metric.exported
        if metric.registry == STORE:
            labels = f'{{store="{node.store}"}}'
        elif metric.name == "node-id":
            # Metadata labels, in the order recorder.go:200-202 adds them.
            addresses = (f"{host}:26257", f"{host}:8080", f"{host}:26257")
            labels = "{" + ",".join(f'{key}="{value}"' for key, value
                                    in zip(NODE_ID_LABELS, addresses, strict=True)) + "}"
        else:
            labels = ""
        lines += [f"# HELP {name} {metric.help}", f"# TYPE {name} gauge",
                  f"{name}{labels} {go_float(float(values[metric.name]))}"]
    return "\n".join(lines) + "\n"
