"""The fast tier's controller stories' common ground: one KaiwuCluster (db/dev) at a fixed clock,
the controller over the fake API (tests/support/fake_api.py) and the caches' view of it, and
`World`, which runs pass after pass while someone else edits what the controller wrote.

Used by the stories under tests/unit/reconciler/controller/ (the steps, drift, certificates,
conditions), the shard and wiring stories and the secret-masking checks. The same passes
against the real apiserver: tests/world_stories/drift/ and the lifecycle stories.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from reconciler import status as st
from reconciler.controller.conditions import observed
from reconciler.controller.controller import Controller
from reconciler.controller.objects import ObjectPass, ObjectState, Result
from reconciler.drift.compare import Change, DriftReport
from reconciler.keys import ClusterKey, ObjectRef
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj, rfc3339
from reconciler.settings import Settings
from renderer.render import read_live
from tests.support.fake_api import FakeApi, FakeView, StoreKey, counted

NS, NAME = "db", "dev"
KEY = ClusterKey(NS, NAME)
NOW = 1_800_000_000.0
HOLD = "example.com/hold"  # someone else's finalizer


def cluster(**spec: Any) -> Obj:
    """The KaiwuCluster db/dev as stored: three replicas, no TLS, `spec` over that."""
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": NAME, "namespace": NS, "uid": "cluster-uid",
                         "generation": 1, "resourceVersion": "7"},
            "spec": {"replicas": 3, "tls": {"enabled": False}, **spec}}


def kind_named(kind: str) -> Kind:
    """The Kind of a kind's name (the first API version KINDS lists of a kind with several)."""
    return next(found for found in k.KINDS.values() if found.kind == kind)


def controller_over(api: FakeApi, view: FakeView | None = None,
                    settings: Settings | None = None,
                    clock: Callable[[], float] = lambda: NOW) -> Controller:
    """The controller of namespace db, its API and caches the fakes."""
    metrics = Metrics()
    return Controller(counted(api, metrics), cast(Any, view or FakeView(api)),
                      settings or Settings(watch_namespace=NS, leader_election=False),
                      metrics, clock=clock)


class RecordingApi(FakeApi):
    """The fake API, also noting what a drift story asks about: the Events created (type,
    reason, message), the deletes (kind, name, propagation), and an error to answer an apply of
    one object with (`refuse[(kind, name)]`, as an admission webhook refuses it)."""

    def __init__(self, objects: dict[StoreKey, Obj] | None = None, *,
                 clock: Callable[[], float] = lambda: NOW) -> None:
        super().__init__(objects, clock=clock)
        self.events: list[tuple[str, str, str]] = []
        self.deletes: list[tuple[str, str, str | None]] = []
        self.refuse: dict[tuple[str, str], ApiError] = {}

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        refused = self.refuse.get((obj["kind"], obj["metadata"]["name"]))
        if refused is not None:
            raise refused
        return super().apply(obj, dry_run=dry_run, force=force)

    def create(self, obj: Obj) -> Obj:
        if obj["kind"] == "Event":
            self.events.append((obj["type"], obj["reason"], obj["message"]))
        return super().create(obj)

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None, propagation: str | None = None) -> bool:
        deleted = super().delete(kind, namespace, name, uid=uid,
                                 grace_period_seconds=grace_period_seconds,
                                 propagation=propagation)
        if deleted:
            self.deletes.append((kind.kind, name, propagation))
        return deleted


class World:
    """One cluster, its reconciler and the API, over several passes."""

    def __init__(self, settings: Settings | None = None, **spec: Any) -> None:
        self.objects: dict[StoreKey, Obj] = {("KaiwuCluster", NS, NAME): cluster(**spec)}
        self.now = NOW
        self.kube = RecordingApi(self.objects, clock=lambda: self.now)
        self.metrics = Metrics()
        self.settings = settings or Settings(watch_namespace=NS, leader_election=False)
        self.controller = self.over(self.kube)

    def over(self, kube: RecordingApi, view: FakeView | None = None) -> Controller:
        """A controller of this world's settings and clock over `kube` (and `view`)."""
        self.kube = kube
        kube.clock = lambda: self.now
        self.controller = Controller(counted(kube, self.metrics),
                                     cast(Any, view or FakeView(kube)), self.settings,
                                     self.metrics, clock=lambda: self.now)
        return self.controller

    def reconcile(self) -> Result:
        """One pass, the garbage collector having caught up with the last one's deletes."""
        self.kube.collect_garbage()
        self.kube.writes.clear()
        self.kube.events.clear()
        self.kube.deletes.clear()
        self.kube.dry_runs = 0
        return self.controller.reconcile(KEY)

    def settle(self) -> None:
        """Time passes: the watch has shown our writes (a deletion right after our create
        would otherwise be taken for that create still on its way: STALE_GRACE_S)."""
        self.controller.memory.marks.forget(KEY)

    def edit(self, kind: str, name: str, change: Callable[[Obj], Any],
             manager: str = "kubectl-edit") -> Obj:
        """Someone else changes a stored object (kubectl edit: a new resourceVersion, and the
        fields changed are theirs)."""
        return self.kube.edit(kind_named(kind), NS, name, change, manager=manager)

    def edit_status(self, change: Callable[[Obj], Any]) -> Obj:
        """The KaiwuCluster's status changed (a write to /status, as an earlier reconciler
        made it)."""
        return self.kube.edit(k.KAIWU_CLUSTER, NS, NAME, change, manager="kaiwu-reconciler",
                              status=True)

    def delete_held(self, kind: str, name: str) -> None:
        """Someone deletes a stored object that a finalizer of theirs holds: it stays, being
        deleted, until `release`."""
        self.edit(kind, name, lambda obj: obj["metadata"].setdefault("finalizers", []).append(
            HOLD))
        FakeApi.delete(self.kube, kind_named(kind), NS, name)

    def release(self, kind: str, name: str) -> None:
        """The finalizer `delete_held` put on goes: the object is gone."""
        self.edit(kind, name, lambda obj: obj["metadata"].update(finalizers=[
            f for f in obj["metadata"]["finalizers"] if f != HOLD]))

    def remove(self, kind: str, name: str) -> None:
        """Someone deletes a stored object (kubectl delete), and it is gone."""
        FakeApi.delete(self.kube, kind_named(kind), NS, name, grace_period_seconds=0)

    def edit_spec(self, **changes: Any) -> None:
        self.edit("KaiwuCluster", NAME, lambda obj: obj["spec"].update(changes))

    @property
    def status(self) -> dict[str, Any]:
        found: dict[str, Any] = self.objects[("KaiwuCluster", NS, NAME)].get("status") or {}
        return found

    def condition(self, type_: str) -> dict[str, Any]:
        found = st.condition(self.status, type_)
        assert found is not None, (type_, self.status)
        return dict(found)

    def actions(self) -> list[tuple[str, str, str]]:
        """This pass's actions in status.lastActions (action, target, message)."""
        return [(a["action"], a["target"], a["message"])
                for a in self.status.get("lastActions") or () if a["time"] == rfc3339(self.now)]

    def ports(self, service: str) -> list[int]:
        """A stored Service's port numbers, in its order."""
        spec = self.objects[("Service", NS, service)]["spec"]
        return [int(port["port"]) for port in spec["ports"]]

    def applied(self) -> list[tuple[str, str]]:
        return [(kind, name) for verb, kind, name in self.kube.writes if verb == "apply"]


# ---- conditions: pure functions of a pass --------------------------------------------------

def a_pass(**spec: Any) -> ObjectPass:
    p = ObjectPass(ClusterKey(NS, NAME), cluster(**spec), NOW, {})
    p.cluster = read_live(p.obj)
    return p


def sts_state(ready: int, verdict: str = "in-sync") -> ObjectState:
    live = {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": NAME, "namespace": NS, "generation": 1},
            "spec": {"replicas": 3},
            "status": {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3,
                       "readyReplicas": ready}}
    return ObjectState(ObjectRef("apps/v1", "StatefulSet", NS, NAME), k.STATEFUL_SET,
                       live, live, verdict=verdict)  # type: ignore[arg-type]


def conditions_of(p: ObjectPass) -> dict[str, st.Condition]:
    return {c.type: c for c in observed(p).conditions}


def service_state(verdict: str, *, report: DriftReport | None = None, blocked_s: float = 0.0,
                  repaired: bool = False, live: bool = True) -> ObjectState:
    obj = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": f"{NAME}-public", "namespace": NS}, "spec": {}}
    return ObjectState(ObjectRef("v1", "Service", NS, f"{NAME}-public"), k.SERVICE, obj,
                       obj if live else None, verdict=verdict, report=report,  # type: ignore[arg-type]
                       blocked_s=blocked_s, repaired=repaired)


def report(changes: int) -> DriftReport:
    return DriftReport("Service", NS, f"{NAME}-public", True, tuple(
        Change("changed", f"/spec/ports/{i}", f"spec.ports[{i}].port", 26257 + i, 1 + i)
        for i in range(changes)), "sha256:a", "sha256:b")


def ready_pass(**spec: Any) -> ObjectPass:
    p = a_pass(**spec)
    p.states.append(sts_state(ready=3))
    return p
