"""The "spec" and "render" steps: the renderer reads the KaiwuCluster, then renders its objects.

spec (first): the live KaiwuCluster, read as the renderer reads a file; an invalid spec stops the
pass here, Stalled (the report step still runs). render (after the certificates and lifecycle
steps): the desired objects, built by the renderer from the cluster and what those steps decided
for the StatefulSet (`Pass.live`: replicas during a scale-in, the rollout partition, the
certificates' hash), so the renderer stays the only producer of desired objects. Rendering
targets the API server's version, read once per resync period. Both run by the Controller
(reconciler.controller.controller).
"""

from __future__ import annotations

import time
from dataclasses import replace

from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import Shared
from renderer.errors import RenderError
from renderer.render import build_objects, read_live
from renderer.settings import KubeVersion, RenderSettings


class SpecStep:
    """The "spec" step (see the module docstring)."""

    name = "spec"
    always = False

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def wanted(self, p: ObjectPass) -> bool:
        return True

    def run(self, p: ObjectPass) -> None:
        try:
            p.cluster = read_live(p.obj)
        except RenderError as error:
            self.shared.metrics.errors_total.labels(stage="render").inc()
            p.stalled.append(("InvalidSpec", f"the spec cannot be rendered: {error}"))
            p.halted = True


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
