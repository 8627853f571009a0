"""How the cluster runs: start mode against replicas, the disruption budget, where pods may be
scheduled (topology spread, tolerations), the failover and monitoring durations, the pods'
security and the Service's exposure of an insecure cluster.

Called by renderer.semantics (check).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from renderer.semantics.names import LABEL_VALUE, is_qualified_name
from renderer.semantics.violation import Path, Violation
from renderer.spec import parse_duration

# prometheus-operator's Duration (the ServiceMonitor CRD): units in order, each at most once.
PROMETHEUS_DURATION = re.compile(r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?\Z")


def check_mode(spec: dict[str, Any]) -> Iterator[Violation]:
    """The start mode's number of nodes: 3 or more for multi-replica, exactly 1 for single-node."""
    mode, replicas = spec["startMode"], spec["replicas"]
    if mode == "multi-replica" and replicas < 3:
        yield Violation(("spec", "replicas"),
                        f"multi-replica needs at least 3 nodes, got {replicas}",
                        "set replicas to 3 or more, or use startMode single-replica")
    if mode == "single-node" and replicas != 1:
        yield Violation(("spec", "replicas"), f"single-node runs exactly 1 node, got {replicas}",
                        "set replicas: 1, or use startMode multi-replica for a cluster")


def check_disruption_budget(spec: dict[str, Any]) -> Iterator[Violation]:
    """A multi-replica cluster keeps quorum: at most one node down at once."""
    if spec["startMode"] == "multi-replica" and spec["podDisruptionBudget"]["maxUnavailable"] > 1:
        yield Violation(("spec", "podDisruptionBudget", "maxUnavailable"),
                        "more than 1 node down at once loses quorum with 3 replicas",
                        "use maxUnavailable: 1")


def check_scheduling(spec: dict[str, Any]) -> Iterator[Violation]:
    """Topology spread keys and pairs, and tolerations, as the API server checks them."""
    spreads: set[tuple[str, str]] = set()
    for index, spread in enumerate(spec["scheduling"].get("topologySpread", [])):
        if not is_qualified_name(spread["topologyKey"]):
            yield Violation(("spec", "scheduling", "topologySpread", index, "topologyKey"),
                            f"{spread['topologyKey']!r} is not a node label key",
                            "use a key such as topology.kubernetes.io/zone")
        pair = (spread["topologyKey"], spread["whenUnsatisfiable"])
        if pair in spreads:  # the API server refuses duplicate (key, whenUnsatisfiable) pairs
            yield Violation(("spec", "scheduling", "topologySpread", index),
                            f"{pair[0]} with {pair[1]} is given twice", "keep one")
        spreads.add(pair)
    for index, toleration in enumerate(spec["scheduling"].get("tolerations", [])):
        yield from check_toleration(("spec", "scheduling", "tolerations", index), toleration)


def check_toleration(path: Path, toleration: dict[str, Any]) -> Iterator[Violation]:
    """The API server's rules for a pod's tolerations (core/v1 ValidateTolerations)."""
    key, value = toleration.get("key", ""), toleration.get("value", "")
    exists = toleration.get("operator") == "Exists"
    if exists and value:
        yield Violation((*path, "value"), "a toleration with operator Exists takes no value",
                        "remove value, or use operator Equal")
    if not key and not exists:
        yield Violation(path, "a toleration without a key must use operator Exists",
                        "set a key, or operator: Exists to tolerate every taint")
    if key and not is_qualified_name(key):
        yield Violation((*path, "key"), f"{key!r} is not a taint key",
                        "use [prefix/]name with letters, digits, '-', '_' and '.'")
    if not exists and not (len(value) <= 63 and LABEL_VALUE.match(value)):
        yield Violation((*path, "value"), f"{value!r} is not a valid taint value",
                        "use at most 63 letters, digits, '-', '_' or '.'")
    if "tolerationSeconds" in toleration and toleration.get("effect") != "NoExecute":
        yield Violation((*path, "tolerationSeconds"),
                        "tolerationSeconds applies only to effect NoExecute",
                        "set effect: NoExecute, or remove tolerationSeconds")


def check_durations(spec: dict[str, Any]) -> Iterator[Violation]:
    """The failover time-outs and the monitoring interval are durations (the interval one
    Prometheus reads)."""
    for section, field in (("failover", "nodeLostTimeout"), ("failover", "podNotReadyTimeout"),
                           ("monitoring", "interval")):
        try:
            parse_duration(spec[section][field])
        except ValueError as error:
            yield Violation(("spec", section, field), str(error), "use e.g. 30s, 5m or 1h30m")
    interval = spec["monitoring"]["interval"]
    if not PROMETHEUS_DURATION.match(interval):
        yield Violation(("spec", "monitoring", "interval"),
                        f"{interval!r} is not a Prometheus duration",
                        "write each unit once, largest first, e.g. 1m30s")


def check_pod_security(security: dict[str, Any]) -> Iterator[Violation]:
    """spec.podSecurity says what the kubelet can run."""
    # The kubelet would refuse to start the container (CreateContainerConfigError) and the
    # cluster would sit there: say so before anything is applied.
    if security["runAsNonRoot"] and security["runAsUser"] == 0:
        yield Violation(("spec", "podSecurity", "runAsUser"),
                        "runAsUser 0 is root, which runAsNonRoot forbids",
                        "use a non-root uid such as 1000, or set runAsNonRoot: false for an "
                        "image that needs root (Pod Security baseline, not restricted)")


def check_exposure(spec: dict[str, Any]) -> Iterator[Violation]:
    """An insecure cluster is not exposed outside Kubernetes unless the spec accepts the risk."""
    # An insecure kwbase (--insecure) takes any client as any user, root included, with no
    # password: outside the cluster that is an open door, refused unless the spec says it knows.
    service = spec["service"]
    if (not spec["tls"]["enabled"] and service["type"] in ("NodePort", "LoadBalancer")
            and not service.get("allowInsecureExposure")):
        yield Violation(("spec", "service", "type"),
                        f"type {service['type']} exposes an insecure cluster (tls.enabled: "
                        "false) outside Kubernetes: anyone who reaches it is root, no password",
                        "enable TLS, use type ClusterIP, or set "
                        "spec.service.allowInsecureExposure: true to accept the risk")
