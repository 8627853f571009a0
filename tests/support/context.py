"""The StepContext (reconciler.kaiwudb.context) of a fast-tier story: the fake API with its
writes counted as the runtime counts them (tests/support/fake_api.counted), a cache view over it,
default settings unless the story names some, a fixed clock if it gives one, and a simulated
KaiwuDB where the story has one. Used by the stories that build one step on its own (lifecycle,
failover, backup, restore); the controller's stories build the Controller, which builds its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from reconciler.kaiwudb.context import AdminFactory, StepContext, kwbase_admin
from reconciler.kube.events import EventRecorder
from reconciler.metrics import Metrics
from reconciler.settings import Settings
from tests.support.fake_api import FakeView, counted


def step_context(api: Any, view: Any = None, *, metrics: Metrics | None = None,
                 settings: Settings | None = None, clock: Callable[[], float] = time.time,
                 admin_factory: AdminFactory = kwbase_admin) -> StepContext:
    """`api`: a FakeApi or a stand-in of the Kube calls a story makes; `view`: the caches'
    view (a FakeView over `api` unless given)."""
    metrics = metrics or Metrics()
    kube = counted(api, metrics)
    return StepContext(
        kube=kube, view=cast(Any, view if view is not None else FakeView(api)),
        settings=settings or Settings(leader_election=False), metrics=metrics,
        events=EventRecorder(kube, metrics, clock=clock), clock=clock,
        admin_factory=admin_factory)
