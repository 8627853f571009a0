"""The specs the CEL rules and the renderer's semantic rules are compared on: the stories of
tests/unit/renderer/test_semantics.py for the rules CEL expresses, on creation and on update.

Used by tests/unit/renderer/test_cel.py (each rule evaluated with cel-python, tests/support/cel.py)
and by tests/world_stories/admission/test_cel_on_current_kubernetes.py (the same cases sent to a
real Kubernetes 1.36 API server, which evaluates the CRD's rules itself).
"""

from __future__ import annotations

import copy
from typing import Any

from renderer import schema, semantics
from renderer.cel import rules_for
from renderer.settings import KubeVersion
from tests.support import cel
from tests.support.render import cluster, dotted

GOOD_SPEC: dict[str, Any] = {
    "version": "3.2.1",
    "replicas": 3,
    "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                  "limits": {"cpu": "4", "memory": "8Gi"}},
    "storage": {"size": "100Gi"},
}


def with_spec(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD_SPEC)
    spec.update(changes)
    return spec


def defaulted(spec: dict[str, Any]) -> dict[str, Any]:
    obj = cluster("orders", "shop", **spec)
    assert schema.validate(obj) == [], "a case must be schema-valid: the rules come after"
    return schema.apply_defaults(obj)


def verdicts(version: KubeVersion, new: dict[str, Any],
             old: dict[str, Any] | None = None) -> tuple[set[str], set[str]]:
    """(what CEL refuses, what renderer/semantics/ refuses), as semantics paths, among the
    rules CEL expresses on `version`."""
    rules = rules_for(version)
    by_cel = {rule.mirrors for rule in rules if not cel.passes(rule, new, old)}
    creation = {rule.mirrors for rule in rules if not rule.transition}
    by_renderer = {dotted(v.path) for v in semantics.check(new)} & creation
    if old is not None:
        transition = {rule.mirrors for rule in rules if rule.transition}
        by_renderer |= {dotted(v.path) for v in semantics.check_transition(
            old["spec"], new["spec"])} & transition
    return by_cel, by_renderer


# The specs of test_semantics.py's stories for the rules CEL expresses.
CREATE_CASES: dict[str, dict[str, Any]] = {
    "a sensible cluster": GOOD_SPEC,
    "multi-replica with 2 nodes": with_spec(replicas=2),
    "single-replica with 2 nodes": with_spec(startMode="single-replica", replicas=2),
    "single-replica with 1 node": with_spec(startMode="single-replica", replicas=1),
    "single-node with 3 nodes": with_spec(startMode="single-node", replicas=3),
    "single-node with 1 node": with_spec(startMode="single-node", replicas=1),
    "multi-replica budget of 2": with_spec(podDisruptionBudget={"maxUnavailable": 2}),
    "single-replica budget of 2": with_spec(startMode="single-replica", replicas=2,
                                            podDisruptionBudget={"maxUnavailable": 2}),
    "root while runAsNonRoot": with_spec(podSecurity={"runAsUser": 0}),
    "root through the escape hatch": with_spec(podSecurity={"runAsUser": 0,
                                                            "runAsNonRoot": False}),
    "only the node Secret": with_spec(tls={"nodeSecretName": "mine"}),
    "only the client Secret, node empty": with_spec(tls={"nodeSecretName": "",
                                                         "clientSecretName": "mine"}),
    "both Secrets": with_spec(tls={"nodeSecretName": "a", "clientSecretName": "b"}),
    "insecure behind a load balancer": with_spec(tls={"enabled": False},
                                                 service={"type": "LoadBalancer"}),
    "insecure on node ports, risk accepted": with_spec(
        tls={"enabled": False}, service={"type": "NodePort", "allowInsecureExposure": True}),
    "insecure inside the cluster": with_spec(tls={"enabled": False},
                                             service={"type": "ClusterIP"}),
    "secure behind a load balancer": with_spec(service={"type": "LoadBalancer"}),
}

TRANSITION_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "more nodes": (GOOD_SPEC, with_spec(replicas=5)),
    "a new version": (GOOD_SPEC, with_spec(version="3.2.2")),
    "a bigger volume": (GOOD_SPEC, with_spec(storage={"size": "200Gi"})),
    "multi-replica scales in": (with_spec(replicas=5), GOOD_SPEC),
    "start mode changes": (GOOD_SPEC, with_spec(startMode="single-replica")),
    "single-replica scales in": (with_spec(startMode="single-replica", replicas=2),
                                 with_spec(startMode="single-replica", replicas=1)),
    "single-replica scales out": (with_spec(startMode="single-replica", replicas=2),
                                  with_spec(startMode="single-replica", replicas=3)),
    "the volume shrinks": (with_spec(storage={"size": "100Gi"}),
                           with_spec(storage={"size": "99Gi"})),
    "1Gi to 1024Mi": (with_spec(storage={"size": "1Gi"}), with_spec(storage={"size": "1024Mi"})),
    "1Gi to 1G": (with_spec(storage={"size": "1Gi"}), with_spec(storage={"size": "1G"})),
    "bytes as an integer": (with_spec(storage={"size": 1073741824}),
                            with_spec(storage={"size": "1Gi"})),
    "the storage class changes": (
        with_spec(storage={"size": "100Gi", "storageClassName": "standard"}),
        with_spec(storage={"size": "100Gi", "storageClassName": "fast-ssd"})),
    "a storage class is named later": (
        GOOD_SPEC, with_spec(storage={"size": "100Gi", "storageClassName": "fast-ssd"})),
}


