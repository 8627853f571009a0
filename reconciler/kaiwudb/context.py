"""What every step of a pass is given: one `StepContext`.

The Controller (reconciler.controller.controller) builds one per process and passes it, first,
to each of its steps: its own (reconciler.controller: spec, certificates, render, observe,
repair, recreate, prune, volumes, report), and lifecycle (reconciler.kaiwudb.lifecycle, whose
parts take it through reconciler.kaiwudb.tools.Part), failover (reconciler.kaiwudb.failover),
restore and backup (reconciler.kaiwudb.backup). Each step derives its own timings from
`settings` (LifecycleSettings.of, BackupSettings.of). What one step remembers across passes
stays with that step; the controller's own memories are reconciler.controller.shared's.

It lives here, below the controller, because the kaiwudb steps take it too and may not import
the controller (the layers in pyproject.toml).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin, KwbaseSettings
from reconciler.kube.cache import CacheView
from reconciler.kube.client import Kube
from reconciler.kube.events import EventRecorder
from reconciler.metrics import Metrics
from reconciler.reasons import LifecycleMetric
from reconciler.settings import Settings
from renderer.spec import Cluster

AdminFactory = Callable[[Kube, Cluster, KwbaseSettings], KwbaseAdmin]


def kwbase_admin(kube: Kube, cluster: Cluster, settings: KwbaseSettings) -> KwbaseAdmin:
    """The kwbase adapter over exec into the cluster's pods (StepContext's default)."""
    return KwbaseAdmin.for_cluster(kube, cluster, settings)


@dataclass(frozen=True)
class StepContext:
    """kube: the API client (in the runtime, its writes counted: reconciler.kube.writes);
    view: the watch caches, read by every step; settings: the reconciler's; metrics; events:
    the Event recorder (the report step writes a pass's Events through it); clock: the wall
    clock a pass's `now` comes from (tests pin it); admin_factory: how a step reaches a
    cluster's KaiwuDB (`admin`; tests give a simulated one)."""

    kube: Kube
    view: CacheView
    settings: Settings
    metrics: Metrics
    events: EventRecorder
    clock: Callable[[], float] = time.time
    admin_factory: AdminFactory = kwbase_admin

    def admin(self, cluster: Cluster) -> KwbaseAdmin:
        """The kwbase adapter of `cluster`, with the settings' exec time-outs."""
        return self.admin_factory(self.kube, cluster, KwbaseSettings(
            timeout_s=self.settings.exec_timeout_s,
            long_timeout_s=self.settings.long_statement_timeout_s))

    def count(self, action: LifecycleMetric) -> None:
        """One lifecycle action taken (lifecycle_actions_total{action})."""
        self.metrics.lifecycle_actions_total.labels(action=action).inc()
