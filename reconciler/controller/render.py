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
resync period. Both run by the Controller (reconciler.controller.controller).
"""

from __future__ import annotations

import time
from dataclasses import replace

from reconciler.controller.admission import (
    ACCEPTED_ANNOTATION,
    applied,
    facts_annotation,
    judge,
)
from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import Shared
from renderer.render import build_objects
from renderer.settings import KubeVersion, RenderSettings
from renderer.spec import Cluster


class SpecStep:
    """The "spec" step (see the module docstring)."""

    name = "spec"
    always = False

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def wanted(self, p: ObjectPass) -> bool:
        return True

    def run(self, p: ObjectPass) -> None:
        judged = judge(p.obj, applied(self.shared.view, p.obj))
        if judged.defaulted is None:
            self.shared.metrics.errors_total.labels(stage="render").inc()
            p.stalled.append(("InvalidSpec", "the spec cannot be rendered: "
                              + "; ".join(judged.problems)))
            p.halted = True
            return
        p.cluster = Cluster.from_object(judged.defaulted)
        p.accepted = facts_annotation(judged.defaulted["spec"])


class RenderStep:
    """The "render" step (see the module docstring)."""

    name = "render"
    always = False

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._settings: tuple[RenderSettings, float] | None = None

    def wanted(self, p: ObjectPass) -> bool:
        return p.cluster is not None

    def render_settings(self) -> RenderSettings:
        """Rendering targets the API server's version (read once per resync period)."""
        now = time.monotonic()
        if self._settings is None or \
                now - self._settings[1] > self.shared.settings.resync_period_s:
            version = KubeVersion.parse(self.shared.kube.server_version())
            self._settings = (RenderSettings(kube_version=version), now)
        return self._settings[0]

    def run(self, p: ObjectPass) -> None:
        assert p.cluster is not None
        p.desired = build_objects(p.cluster, replace(self.render_settings(), live=p.live))
        for obj in p.desired:
            if obj["kind"] == "StatefulSet":
                annotations = obj["metadata"].setdefault("annotations", {})
                annotations[ACCEPTED_ANNOTATION] = p.accepted
