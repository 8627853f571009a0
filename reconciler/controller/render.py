"""The "spec" and "render" steps: the renderer reads the KaiwuCluster, then renders its objects.

spec (first): the live KaiwuCluster, judged as the admission webhook judges it
(reconciler.controller.admission: the renderer's rules, and the change rules against the last
spec applied, remembered on the StatefulSet). A spec the webhook would have refused (stored
before the webhook existed, or while it was down) stops the pass here, Stalled with the same
message: nothing is written for it but its status (the report step still runs), and the other
clusters are served as usual. render (after the certificates and lifecycle steps): the desired
objects, built by the renderer from the cluster and what those steps decided for the StatefulSet
(`Pass.live`: replicas during a scale-in, the rollout partition, the certificates' hash), so the
renderer stays the only producer of desired objects; the one thing added is the StatefulSet's
`ACCEPTED_ANNOTATION`, the memory of the spec being applied, so it changes exactly when the
StatefulSet is written from a new spec. Rendering targets the API server's version, read once per
resync period. Both run by the Controller (reconciler.controller.controller). The spec step
remembers its last judgement per cluster with a digest of what it read (the cluster but its
status, and the reference): a pass where neither changed (a repair after a hand edit, a pod's
status change) does not run the schema check and defaults again.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, replace
from typing import Any

from reconciler.controller.admission import (
    ACCEPTED_ANNOTATION,
    applied,
    facts_annotation,
    judge,
)
from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import ControllerMemory
from reconciler.drift.ignore import IgnoreRule
from reconciler.kaiwudb.context import StepContext
from reconciler.keys import ClusterKey
from reconciler.model import Obj
from renderer.render import build_objects
from renderer.settings import KubeVersion, RenderSettings
from renderer.spec import Cluster


class SpecStep:
    """The "spec" step (see the module docstring)."""

    name = "spec"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory
        # Per cluster: the last judgement and a digest of what it read. The schema check and
        # defaults cost most of a pass that changes nothing of the spec (a repair after a
        # hand edit, a pod's status), and are a pure function of those inputs.
        self._judged: dict[ClusterKey, tuple[bytes, Judged]] = {}

    def wanted(self, p: ObjectPass) -> bool:
        return True

    def run(self, p: ObjectPass) -> None:
        reference = applied(self.ctx.view, p.obj)
        digest = _digest(p.obj, reference)
        known = self._judged.get(p.key)
        if known is None or known[0] != digest:
            known = (digest, _judge(p.obj, reference))
            self._judged[p.key] = known
        judged = known[1]
        if judged.cluster is None:
            self.ctx.metrics.errors_total.labels(stage="render").inc()
            p.stalled.append(("InvalidSpec", "the spec cannot be rendered: "
                              + "; ".join(judged.problems)))
            p.halted = True
            return
        p.cluster = judged.cluster
        p.accepted = judged.accepted
        p.replicas_owned_elsewhere = any(
            IgnoreRule.of(rule.kind, rule.pointer, name=rule.name).covers(
                "StatefulSet", judged.cluster.name, ("spec", "replicas"))
            for rule in judged.cluster.drift_ignore)

    def forget(self, key: ClusterKey) -> None:
        self._judged.pop(key, None)


@dataclass(frozen=True)
class Judged:
    """What the spec step makes of a KaiwuCluster: the renderer's `Cluster` (frozen) and the
    accepted-spec annotation, or the problems that stop the pass."""

    cluster: Cluster | None
    accepted: str
    problems: tuple[str, ...]


def _judge(obj: Obj, reference: dict[str, Any] | None) -> Judged:
    judged = judge(obj, reference)
    if judged.defaulted is None:
        return Judged(None, "", judged.problems)
    return Judged(Cluster.from_object(judged.defaulted),
                  facts_annotation(judged.defaulted["spec"]), ())


def _digest(obj: Obj, reference: dict[str, Any] | None) -> bytes:
    """What `judge` reads: the KaiwuCluster but its status (check_live drops it) and its
    resourceVersion (each status write changes it; no rule reads it: the metadata rules read
    the name, namespace, labels and annotations), and the reference it judges a change
    against."""
    md = {key: value for key, value in (obj.get("metadata") or {}).items()
          if key not in ("resourceVersion", "managedFields")}
    text = json.dumps([{**{key: value for key, value in obj.items() if key != "status"},
                        "metadata": md}, reference],
                      sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class RenderStep:
    """The "render" step (see the module docstring)."""

    name = "render"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory
        self._settings: tuple[RenderSettings, float] | None = None

    def wanted(self, p: ObjectPass) -> bool:
        return p.cluster is not None

    def render_settings(self) -> RenderSettings:
        """Rendering targets the API server's version (read once per resync period)."""
        now = time.monotonic()
        if self._settings is None or \
                now - self._settings[1] > self.ctx.settings.resync_period_s:
            version = KubeVersion.parse(self.ctx.kube.server_version())
            self._settings = (RenderSettings(kube_version=version), now)
        return self._settings[0]

    def run(self, p: ObjectPass) -> None:
        assert p.cluster is not None
        p.desired = build_objects(p.cluster, replace(self.render_settings(), live=p.live))
        for obj in p.desired:
            if obj["kind"] == "StatefulSet":
                annotations = obj["metadata"].setdefault("annotations", {})
                annotations[ACCEPTED_ANNOTATION] = p.accepted
