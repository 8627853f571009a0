"""One watch cache (reconciler.kube.informer.Informer) run over the fast tier's fake API, in the
test's own thread: the stories of tests/unit/reconciler/kube/test_informer.py and
test_readcheck.py.

`Informed` makes an informer of Pods in namespace "shop" under the reconciler's selector
(`MANAGED_SELECTOR`) over a `Watched` FakeApi, and runs its list+watch loop. Before each watch
the informer makes, the next step of `meanwhile` runs: what other clients and the server do
while the informer is between two watches (writes, `FakeApi.compact` moving the watch cache's
window, `FakeApi.fail` making the next call fail). When the steps are used up the informer is
stopped and the story is over. Back-off waits are recorded instead of slept (`Waits`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from reconciler.kube import kinds as k
from reconciler.kube.informer import Informer
from reconciler.kube.kinds import Kind
from reconciler.metrics import NAMESPACE, Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, MANAGED_SELECTOR
from tests.support.fake_api import FakeApi, FakeWatch

SETTINGS = Settings(leader_election=False, reconnect_backoff_base_s=0.5,
                    reconnect_backoff_max_s=3.0, watch_timeout_s=240)

Step = Callable[[FakeApi], Any]
# Back-off waits after which a story's informer is stopped (no story needs a tenth of them).
RETRIES_MAX = 100


def pod(name: str, cluster: str = "orders", node: str = "node-1",
        namespace: str = "shop") -> Obj:
    """A running pod of `cluster`, labelled as the reconciler's StatefulSets label theirs."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {INSTANCE_LABEL: cluster, MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def removed(name: str, namespace: str = "shop") -> Step:
    """A step: the pod is gone (its kubelet confirmed the end: a delete with no grace left)."""
    return lambda api: api.delete(k.POD, namespace, name, grace_period_seconds=0)


def together(*steps: Step) -> Step:
    """One step of several, in order (`FakeApi.compact` and `FakeApi.end_early` are steps)."""
    def run(api: FakeApi) -> None:
        for step in steps:
            step(api)
    return run


class Waits(threading.Event):
    """The informer's stop event, with back-off waits recorded instead of slept."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(float(timeout or 0))
        if len(self.waited) >= RETRIES_MAX:
            self.set()  # an informer that retries without end: the story stops it
        return self.is_set()


class Watched(FakeApi):
    """The fake API, noting each list and watch (`listed`, `watched`) and running the next
    step of `meanwhile` before each watch; out of steps, it stops `informer`."""

    def __init__(self, meanwhile: Iterable[Step]) -> None:
        super().__init__()
        self.meanwhile = list(meanwhile)
        self.listed: list[tuple[Kind, str | None, str | None]] = []
        self.watched: list[tuple[str, str | None, str | None, int]] = []
        self.informer: Informer | None = None

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        self.listed.append((kind, namespace, label_selector))
        return super().list_objects(kind, namespace, label_selector, keep=keep)

    def watch(self, kind: Kind, resource_version: str, namespace: str | None = None,
              label_selector: str | None = None, timeout_seconds: int = 300) -> FakeWatch:
        self.watched.append((resource_version, namespace, label_selector, timeout_seconds))
        if self.meanwhile:
            self.meanwhile.pop(0)(self)
        elif self.informer is not None:
            self.informer._stop.set()  # the story is over: this watch delivers nothing
        return super().watch(kind, resource_version, namespace, label_selector,
                             timeout_seconds)


class Informed:
    """An informer of `kind` (Pods in "shop" under the reconciler's selector, unless told)
    over a Watched API holding `objects`, with what it delivered: (type, name, the
    resourceVersion of the object before or None)."""

    def __init__(self, objects: Iterable[Obj] = (), meanwhile: Iterable[Step] = (), *,
                 kind: Kind = k.POD, label_selector: str = MANAGED_SELECTOR,
                 settings: Settings = SETTINGS) -> None:
        self.api = Watched(meanwhile)
        for obj in objects:
            self.api.put(obj)
        self.delivered: list[tuple[str, str, str | None]] = []
        self.metrics = Metrics()
        self.informer = Informer(self.api, kind, settings,  # type: ignore[arg-type]
                                 namespace="shop", label_selector=label_selector,
                                 on_event=self.on_event, metrics=self.metrics)
        self.api.informer = self.informer
        self.waits = Waits()
        self.informer._stop = self.waits

    def on_event(self, kind: str, obj: Obj, before: Obj | None) -> None:
        version = (before or {}).get("metadata", {}).get("resourceVersion")
        self.delivered.append((kind, obj["metadata"]["name"], version))

    def run(self) -> None:
        self.informer._run()

    def restarts(self, reason: str) -> float:
        return self.metrics.registry.get_sample_value(
            f"{NAMESPACE}_watch_restarts_total",
            {"kind": self.informer.kind.kind, "reason": reason}) or 0.0
