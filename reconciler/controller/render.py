"""The "render" step: the spec, read by the renderer, becomes the pass's cluster and desired
objects; an invalid spec stops the pass here, Stalled (the report step still runs).

Run first by the Controller (reconciler.controller.controller). Rendering targets the API
server's version, read once per resync period.
"""

from __future__ import annotations

import time

from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import Shared
from renderer.errors import RenderError
from renderer.render import render_live
from renderer.settings import KubeVersion, RenderSettings


class RenderStep:
    """See the module docstring."""

    name = "render"
    always = False

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._settings: tuple[RenderSettings, float] | None = None

    def wanted(self, p: ObjectPass) -> bool:
        return True

    def render_settings(self) -> RenderSettings:
        """Rendering targets the API server's version (read once per resync period)."""
        now = time.monotonic()
        if self._settings is None or \
                now - self._settings[1] > self.shared.settings.resync_period_s:
            version = KubeVersion.parse(self.shared.kube.server_version())
            self._settings = (RenderSettings(kube_version=version), now)
        return self._settings[0]

    def run(self, p: ObjectPass) -> None:
        try:
            rendered = render_live(p.obj, self.render_settings())
        except RenderError as error:
            self.shared.metrics.errors_total.labels(stage="render").inc()
            p.stalled.append(("InvalidSpec", f"the spec cannot be rendered: {error}"))
            p.halted = True
            return
        p.cluster, p.desired = rendered.cluster, rendered.objects
