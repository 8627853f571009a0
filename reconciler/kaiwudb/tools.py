"""What the lifecycle's parts share: the API, the caches, metrics, timings and the kwbase adapter.

The lifecycle step (reconciler.kaiwudb.lifecycle) builds one `Tools` and hands it to its parts
(nodes, rollout, scale); each part is a `Part`, so it reaches them as self.kube, self.view,
self.metrics and self.settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin, KwbaseSettings
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kube.cache import CacheView
from reconciler.kube.client import Kube
from reconciler.metrics import Metrics
from reconciler.model import Pass
from reconciler.reasons import NotReadyReason
from renderer.spec import Cluster

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


AdminFactory = Callable[[Kube, Cluster, KwbaseSettings], KwbaseAdmin]


def _admin(kube: Kube, cluster: Cluster, settings: KwbaseSettings) -> KwbaseAdmin:
    return KwbaseAdmin.for_cluster(kube, cluster, settings)


@dataclass(frozen=True)
class Tools:
    """See the module docstring."""

    kube: Kube
    view: CacheView
    metrics: Metrics
    settings: LifecycleSettings
    admin_factory: AdminFactory = _admin

    def admin(self, cluster: Cluster) -> KwbaseAdmin:
        return self.admin_factory(self.kube, cluster, KwbaseSettings(
            timeout_s=self.settings.exec_timeout_s,
            long_timeout_s=self.settings.long_statement_timeout_s))

    def count(self, action: str) -> None:
        self.metrics.lifecycle_actions_total.labels(action=action).inc()


class Part:
    """A part of the lifecycle step, with the shared tools at hand."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self.kube = tools.kube
        self.view = tools.view
        self.metrics = tools.metrics
        self.settings = tools.settings

    def count(self, action: str) -> None:
        self.tools.count(action)

    def retry_later(self, p: Pass, reason: NotReadyReason, what: str,
                    error: KwbaseError) -> None:
        """A kwbase command failed: counted, said in Ready (`reason`: `what` failed), and
        looked at again after poll_s (each look is one exec)."""
        self.metrics.errors_total.labels(stage="lifecycle").inc()
        p.not_ready.append((reason, f"{what} failed (retrying in {self.settings.poll_s:g}s): "
                                    f"{error}"))
        p.requeue_in(self.settings.poll_s)
