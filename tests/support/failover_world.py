"""The fast tier's failover and lifecycle world: a cluster `dev` of three pods on Kubernetes
nodes n0..n2 (n3 spare), each pod's volume pinned to its node, in the fake API
(tests/support/fake_api.py), with what KaiwuDB answers of its nodes and ranges.

Used by the failover, node-loss and lifecycle stories (tests/unit/reconciler/kaiwudb/
test_failover.py, test_loss.py, test_lifecycle.py). The same decisions against the real
apiserver: tests/world_stories/failover/.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.kwbase.nodes import NodeStatus
from reconciler.kaiwudb.kwbase.replication import ReplicationHealth, ranges_without_quorum
from reconciler.kube import kinds as k
from reconciler.kube.kinds import Kind, kind_of, slim
from reconciler.metrics import Metrics
from reconciler.model import Obj
from tests.support.fake_api import FakeApi
from tests.support.kwbase_view import node_status_shows
from tests.support.peeks import Peeks

NS, NAME = "db", "dev"
NOW = 1_800_000_000.0
TIMEOUT = 60.0  # nodeLostTimeout in these stories
LABELS = {"app.kubernetes.io/instance": NAME, "app.kubernetes.io/name": "kaiwudb"}


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class World:
    """What the API server holds (the fake API, `kube`, stores it; the cache view reads it) and
    what KaiwuDB answers."""

    def __init__(self) -> None:
        self.kube = FakeApi(clock=lambda: NOW)
        self.objects = self.kube.objects  # the store, to read
        self.kwdb: list[NodeStatus] = []
        self.decommissioned: list[int] = []
        # What KaiwuDB says of its ranges (a lost node's ranges keep a quorum: available).
        self.health = ReplicationHealth(unavailable=0, underreplicated=10, catching_up=0)
        # The range descriptors: ranges per set of voters (store id = node id here).
        self.replica_sets: dict[tuple[int, ...], int] = {(1, 2, 3): 40}
        self.kwdb_error = ""  # when set, every kwbase command fails with it
        self.unseen: set[int] = set()  # node ids the asked gateway's view omits
        self.cached: dict[tuple[str, str], Obj] = {}  # (kind, name) -> what a lagging cache shows
        self.metrics = Metrics()

    @property
    def writes(self) -> list[tuple[str, str, str]]:
        """(verb, kind, name) of every write the API stored, and KaiwuDB's decommissions."""
        return self.kube.writes

    def put(self, kind: Kind, obj: Obj) -> Obj:
        """An object as someone else (the kubelet, the node controller) stored it."""
        assert kind_of(obj) == kind
        self.kube.put(obj)
        return obj

    def find(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return self.kube.get(kind, namespace, name)


class FakeView(Peeks):
    """The watch caches: the world's objects, slimmed as the caches keep them; `world.cached`
    holds what a lagging cache still shows instead (`peek`, `peek_list`: tests.support.peeks)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        assert isinstance(namespace, str), "the cache keys cluster-scoped objects by \"\""
        found = self.world.cached.get((kind.kind, name)) or self.world.find(kind, namespace, name)
        return slim(found) if found is not None else None

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        return [copy.deepcopy(slim(obj)) for (kind_, ns, _), obj in self.world.objects.items()
                if kind_ == kind.kind and ns == namespace and all(
                    (obj["metadata"].get("labels") or {}).get(key) == value
                    for key, value in labels.items())]


class FakeAdmin:
    """The kwbase adapter's answers, from World.kwdb."""

    def __init__(self, world: World) -> None:
        self.world = world

    def node_status(self, pod: str, node_id: int | None = None, *, ranges: bool = False,
                    decommission: bool = False) -> tuple[NodeStatus, ...]:
        if self.world.kwdb_error:
            raise KwbaseError(self.world.kwdb_error, pod, ["node", "status"])
        return node_status_shows([n for n in self.world.kwdb if n.id not in self.world.unseen],
                                 decommission=decommission)

    def replication_health(self, pod: str) -> ReplicationHealth:
        return self.world.health

    def ranges_without_quorum(self, pod: str, live: Collection[int]) -> int:
        return ranges_without_quorum(self.world.replica_sets, {i: i for i in range(1, 9)},
                                     live)

    def decommission(self, pod: str, node_ids: Sequence[int]) -> tuple[()]:
        self.world.decommissioned.extend(node_ids)
        self.world.writes.append(("decommission", "KaiwuDB", ",".join(map(str, node_ids))))
        return ()


def kw_node(node_id: int, pod: str, live: bool = True,
            decommissioning: bool = False) -> NodeStatus:
    return NodeStatus(id=node_id, address=f"{pod}.{NAME}.{NS}.svc.cluster.local:26257",
                      sql_address="", build="V3.2.1", started_at=None, updated_at=None,
                      locality="", start_mode="start", is_available=live, is_live=live,
                      gossiped_replicas=0, is_decommissioning=decommissioning,
                      is_draining=False)


def node(name: str, ready: str = "True", since: float = NOW - 3600) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": stamp(since)}]}}


def pod(ordinal: int, node_name: str = "", *, ready: bool = True, uid: str = "",
        crashing: bool = False, revision: str = "rev1", since: float = NOW - 3600) -> Obj:
    name = f"{NAME}-{ordinal}"
    state: dict[str, Any] = {"running": {}} if not crashing else {
        "waiting": {"reason": "CrashLoopBackOff"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}",
                         "labels": {**LABELS, "controller-revision-hash": revision},
                         "creationTimestamp": stamp(since)},
            "spec": {"nodeName": node_name} if node_name else {},
            "status": {"phase": "Running" if node_name else "Pending",
                       "conditions": [{"type": "Ready", "status": str(ready),
                                       "lastTransitionTime": stamp(since)}],
                       "containerStatuses": [{
                           "name": "kwbase", "state": state, "restartCount": 3 if crashing
                           else 0, "lastState": {"terminated": {
                               "exitCode": 3, "message": "invalid --cache"}}
                           if crashing else {}}] if node_name else []}}


def claim(ordinal: int, node_name: str, uid: str = "") -> Obj:
    name = f"data-{NAME}-{ordinal}"
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}",
                         "labels": LABELS,
                         "annotations": {"volume.kubernetes.io/selected-node": node_name}},
            "spec": {"volumeName": f"pv-{ordinal}"}}


def healthy_world() -> World:
    """Three Ready pods on n0..n2 (n3 spare), KaiwuDB nodes 1..3 live."""
    world = World()
    for i in range(4):
        world.put(k.NODE, node(f"n{i}"))
    for i in range(3):
        world.put(k.POD, pod(i, f"n{i}"))
        world.put(k.PVC, claim(i, f"n{i}"))
    world.put(k.STATEFUL_SET, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                               "metadata": {"name": NAME, "namespace": NS},
                               "spec": {"replicas": 3}})
    world.kwdb = [kw_node(i + 1, f"{NAME}-{i}") for i in range(3)]
    return world


