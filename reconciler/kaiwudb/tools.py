"""The lifecycle's parts and their timings.

The lifecycle step (reconciler.kaiwudb.lifecycle) hands its StepContext
(reconciler.kaiwudb.context) to its parts (nodes, upgrade, rollout, scale, strays); each part
is a `Part`, so it reaches the context's API, caches and metrics as self.kube, self.view and
self.metrics, and its timings, `LifecycleSettings` of the reconciler's settings, as
self.settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.model import Pass
from reconciler.reasons import LifecycleMetric, NotReadyReason
from reconciler.settings import Settings

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class LifecycleSettings:
    """Timings of the lifecycle steps.

    poll_s: how soon a pass looks again while KaiwuDB is busy with something no watch announces
        (init pending, nodes joining, a decommission draining replicas). Each look costs an exec.
        (Settings.lifecycle_poll_s)
    probe_every_s: longest time between two node-status probes of a steady cluster.
        (Settings.node_probe_every_s)
    exec_timeout_s: how long one kwbase command may take (Settings.exec_timeout_s).
    long_statement_timeout_s: how long one EXPORT or IMPORT's exec is held open (Settings.
        long_statement_timeout_s).
    long_gone_after_s: NodeStatus.long_gone's age of a liveness record (Settings.
        long_gone_after_s; KWDB's descriptor interval, 1 h).
    """

    poll_s: float = 1.0
    probe_every_s: float = 300.0
    exec_timeout_s: float = 60.0
    long_statement_timeout_s: float = 10800.0
    long_gone_after_s: float = 3600.0

    @classmethod
    def of(cls, settings: Settings) -> LifecycleSettings:
        return cls(poll_s=settings.lifecycle_poll_s, probe_every_s=settings.node_probe_every_s,
                   exec_timeout_s=settings.exec_timeout_s,
                   long_statement_timeout_s=settings.long_statement_timeout_s,
                   long_gone_after_s=settings.long_gone_after_s)


class Part:
    """A part of the lifecycle step, with the step's context at hand."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        self.kube = ctx.kube
        self.view = ctx.view
        self.metrics = ctx.metrics
        self.settings = LifecycleSettings.of(ctx.settings)

    def count(self, action: LifecycleMetric) -> None:
        self.ctx.count(action)

    def retry_later(self, p: Pass, reason: NotReadyReason, what: str,
                    error: KwbaseError) -> None:
        """A kwbase command failed: counted, said in Ready (`reason`: `what` failed), and
        looked at again after poll_s (each look is one exec)."""
        self.metrics.errors_total.labels(stage="lifecycle").inc()
        p.not_ready.append((reason, f"{what} failed (retrying in {self.settings.poll_s:g}s): "
                                    f"{error}"))
        p.requeue_in(self.settings.poll_s)
