"""The CRD for a target Kubernetes version: the schema file plus the CEL rules that release runs.

Called by `kaiwu install --kube-version` (reconciler/install/) and `kaiwu crd` (renderer/cli.py).
The schema file (renderer/crd/kaiwuclusters.yaml) is what every supported release accepts, 1.20
included, which has no CEL. From 1.25 (CustomResourceValidationExpressions on by default) the CRD
also carries `x-kubernetes-validations`, so the API server itself refuses what the renderer's
rules refuse: the same rules as renderer/semantics/, written in CEL. Each rule names the
semantics path it mirrors; tests/unit/renderer/test_cel.py evaluates every rule with cel-python on
the cases renderer/semantics/ is tested with and asserts both give the same verdicts.

What CEL cannot say, per release, stays with renderer/semantics/ (CI, the reconciler and the
admission webhook):
- volumes never shrink: needs `quantity()`, in the API server's CEL library from 1.28 but usable
  in a new CRD only from 1.29 (a stored rule must compile on the previous release too); before,
  "10Gi" and "10240Mi" cannot be compared honestly as strings.
- no version downgrade or major jump: KaiwuDB versions are not all semantic versions (3.2.1.1),
  and CEL's semver library is recent; the webhook and the reconciler keep this rule.
- everything about names, labels, flags and memory fractions: regular expressions and loops over
  maps are expressible but cost-bounded, and the schema's patterns already cover most of it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from renderer.schema import crd_manifest
from renderer.settings import CEL_SINCE, KubeVersion

# quantity() with compareTo: in the library from 1.28, allowed in a new CRD from 1.29.
QUANTITY_SINCE = KubeVersion(1, 29)


@dataclass(frozen=True)
class CelRule:
    """One x-kubernetes-validations rule.

    at: where the rule sits, as property names from the object's root ("spec", "storage").
    rule: the CEL expression; one using oldSelf is a transition rule (checked on update only).
    message: what the API server answers, the renderer's message and fix in one line.
    mirrors: the dotted path of the renderer/semantics/ violation this rule repeats.
    since: the oldest Kubernetes release the rule is rendered for.
    """

    at: tuple[str, ...]
    rule: str
    message: str
    mirrors: str
    since: KubeVersion = CEL_SINCE

    @property
    def transition(self) -> bool:
        return "oldSelf" in self.rule


# Every rule reads a field only after has(): from 1.25 the API server evaluates each rule against
# the schema's `default` values when a CRD is created, with oldSelf the default too, and without
# the nested defaults (spec.storage's default is `{}`, not `{size: 10Gi}`); a rule reading a field
# such a default lacks makes the CRD invalid ("no such key"). On a stored object defaulting has
# filled every field, so the guards never change a verdict there.
_MULTI = "has(self.startMode) && self.startMode == 'multi-replica'"

RULES: tuple[CelRule, ...] = (
    CelRule(("spec",), f"!({_MULTI}) || !has(self.replicas) || self.replicas >= 3",
            "multi-replica needs at least 3 nodes (set replicas to 3 or more, or use startMode "
            "single-replica)", "spec.replicas"),
    CelRule(("spec",), "!(has(self.startMode) && self.startMode == 'single-node') || "
            "!has(self.replicas) || self.replicas == 1",
            "single-node runs exactly 1 node (set replicas: 1, or use startMode multi-replica "
            "for a cluster)", "spec.replicas"),
    CelRule(("spec",),
            f"!({_MULTI}) || !has(self.podDisruptionBudget) || "
            "!has(self.podDisruptionBudget.maxUnavailable) || "
            "self.podDisruptionBudget.maxUnavailable <= 1",
            "more than 1 node down at once loses quorum with 3 replicas (use maxUnavailable: 1)",
            "spec.podDisruptionBudget.maxUnavailable"),
    CelRule(("spec",), "!(has(self.startMode) && self.startMode == 'single-replica') || "
            "!has(self.replicas) || !has(oldSelf.replicas) || self.replicas >= oldSelf.replicas",
            "a single-replica cluster cannot scale in: no second copy of the data exists (keep "
            "replicas at their current number or more)", "spec.replicas"),
    CelRule(("spec", "startMode"), "self == oldSelf",
            "the start mode cannot change: it is written into every store (keep the old start "
            "mode, or create a new cluster and migrate the data)", "spec.startMode"),
    CelRule(("spec", "storage"),
            "has(self.storageClassName) == has(oldSelf.storageClassName) && "
            "(!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",
            "the storage class of existing volumes cannot change (keep the old class; migrate "
            "by adding nodes on new storage in a new cluster)", "spec.storage.storageClassName"),
    CelRule(("spec", "storage"),
            "!has(self.size) || !has(oldSelf.size) || "
            "quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0",
            "volumes cannot shrink (keep the current size or more)", "spec.storage.size",
            since=QUANTITY_SINCE),
    CelRule(("spec", "podSecurity"),
            "!has(self.runAsNonRoot) || !self.runAsNonRoot || !has(self.runAsUser) || "
            "self.runAsUser != 0",
            "runAsUser 0 is root, which runAsNonRoot forbids (use a non-root uid such as 1000, "
            "or set runAsNonRoot: false for an image that needs root)",
            "spec.podSecurity.runAsUser"),
    CelRule(("spec",),
            "!has(self.tls) || !has(self.tls.enabled) || self.tls.enabled || "
            "!has(self.service) || !has(self.service.type) || self.service.type == 'ClusterIP' "
            "|| (has(self.service.allowInsecureExposure) && self.service.allowInsecureExposure)",
            "an insecure cluster (tls.enabled: false) exposed with NodePort or LoadBalancer lets "
            "anyone in as root with no password (enable TLS, use type ClusterIP, or set "
            "spec.service.allowInsecureExposure: true to accept the risk)", "spec.service.type"),
    CelRule(("spec", "tls"),
            "(has(self.nodeSecretName) && self.nodeSecretName != '') == "
            "(has(self.clientSecretName) && self.clientSecretName != '')",
            "name both nodeSecretName and clientSecretName, or neither (leave both empty to let "
            "the operator manage the certificates)", "spec.tls"),
)


def rules_for(version: KubeVersion) -> tuple[CelRule, ...]:
    """The rules the CRD carries on Kubernetes `version` (none before 1.25)."""
    return tuple(rule for rule in RULES if rule.since <= version)


def crd_for(version: KubeVersion) -> dict[str, Any]:
    """The KaiwuCluster CRD for Kubernetes `version`: the schema file, plus the CEL rules that
    release runs. A fresh copy: callers may change it."""
    crd = copy.deepcopy(crd_manifest())
    for served in crd["spec"]["versions"]:
        root = served["schema"]["openAPIV3Schema"]
        for rule in rules_for(version):
            node = root
            for name in rule.at:
                node = node["properties"][name]
            node.setdefault("x-kubernetes-validations", []).append(
                {"rule": rule.rule, "message": rule.message})
    return crd
