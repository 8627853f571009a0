"""Watch caches: the reconciler's local copy of every object it reads, kept fresh by watches.

`reconciler.runtime.process` starts one `Caches` per process (leader and standby alike, so a
standby is warm when it takes over); the Controller reads through the `CacheView` protocol and
makes no API reads in steady state. Each kind has an `Informer` (reconciler.kube.informer: list,
then watch, relist after 410 Gone, reconnect with back-off; nothing is polled).

What is watched: KaiwuClusters, KaiwuBackups and KaiwuBackupSchedules (all in scope; a backup or
schedule maps to the cluster its spec.cluster names); every kind the renderer emits, Pods, PVCs
and Secrets, selected by the label app.kubernetes.io/managed-by=kaiwu-operator and the names of
the cached clusters (reconciler.kube.selection: only our own clusters' objects are listed and
kept; a cluster is ours to act on once they are); Nodes (all). A
kind the API server does not serve (policy/v1 on Kubernetes 1.20, ServiceMonitor without the
Prometheus operator) counts as synced and empty, and is looked for again at each resync.

Every change is mapped to the cluster it belongs to (`ClusterKey`: the namespace and the
app.kubernetes.io/instance label or the KaiwuCluster owner; a Node change to every cluster with
a pod on that node) and handed to the runtime, which queues the key; the echo of our own write
(reconciler.kube.echo), and a controller's status report on an object whose generation did not
change, go to `on_echo` instead, which queues it without spending the cluster's token.

Shards (Settings.shard): the KaiwuCluster watch is selected by the shard label, so only this
shard's clusters are cached; events of other objects count only for clusters this shard `owns`
(in the cache, and past the handover delay of a cluster that moved here from another shard).
A cluster leaving the selector arrives as DELETED and is forgotten like a deleted one.

What is kept, and how it is indexed: reconciler.kube.store. `peek` and `peek_list` return the
cached objects themselves, for the readers that only read (every read of a pass at rest); `get`
and `list` return deep copies, for the few that change what they read. A peeked object must not
be changed (its parts may be other objects' too): tests check it (reconciler.kube.readcheck).
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import Kube
from reconciler.kube.echo import OwnWrites
from reconciler.kube.informer import Informer
from reconciler.kube.kinds import Kind
from reconciler.kube.selection import NOTHING, Selection
from reconciler.kube.store import cluster_of, metadata, store_key
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings

log = logging.getLogger(__name__)


class CacheView(Protocol):
    """Read access to the caches: what the Controller is given. namespace '' means every
    namespace (and is the only choice for Nodes).

    Two ways to read, by what the caller does with the object: `peek` and `peek_list` hand out
    the cached objects themselves, for callers that only read them (every read of a pass at
    rest: a copy of each would cost about half of the pass's CPU); `get` and `list` hand out
    deep copies, for callers that change what they read. A peeked object must never be
    changed: its maps and lists may be shared with other cached objects. The tests check it
    (reconciler.kube.readcheck: a test whose code changes a peeked object fails)."""

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """A copy of the cached object: the caller may change it."""

    def peek(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """The cached object itself, not a copy: read it, never change it."""

    def list(self, kind: Kind, namespace: str,
             labels: Mapping[str, str] = {}) -> list[Obj]:
        """Copies of the cached objects in `namespace` with these labels."""

    def peek_list(self, kind: Kind, namespace: str,
                  labels: Mapping[str, str] = {}) -> builtins.list[Obj]:
        """The cached objects themselves (a new list): read them, never change them."""


# ---- from events to clusters -----------------------------------------------------------------

def _cluster_changed(new: Obj, old: Obj | None) -> bool:
    """Whether a KaiwuCluster change needs a reconcile: its spec (generation) or metadata the
    Controller reads changed. Status-only updates (mostly our own status writes) do not."""
    if old is None:
        return True
    a, b = metadata(new), metadata(old)
    return any(a.get(field) != b.get(field) for field in (
        "generation", "labels", "annotations", "deletionTimestamp", "finalizers", "uid"))


def _reconciled_before(obj: Obj) -> bool:
    return (obj.get("status") or {}).get("observedGeneration") is not None


def _bookkeeping(new: Obj, old: Obj | None) -> bool:
    """Another controller's bookkeeping on an object whose change already paid for its
    reconcile, queued like an echo (reconciler.kube.echo): a status report on an object with a
    generation (a StatefulSet's observedGeneration and revisions after a spec change), or the
    token controller listing the token Secret it made in a ServiceAccount's `secrets` (before
    Kubernetes 1.24; drift ignores that field: reconciler.drift.ignore). Either is still
    reconciled, only without spending the cluster's token: a recreated ServiceAccount would
    otherwise cost two."""
    if old is None:
        return False
    a, b = metadata(new), metadata(old)
    same_meta = a.get("labels") == b.get("labels") \
        and a.get("annotations") == b.get("annotations") and not a.get("deletionTimestamp")
    if new.get("kind") == "ServiceAccount":
        return same_meta and {key: value for key, value in new.items()
                              if key not in ("metadata", "secrets")} == \
            {key: value for key, value in old.items() if key not in ("metadata", "secrets")}
    return "generation" in a and a.get("generation") == b.get("generation") and same_meta


def _node_projection(node: Obj | None) -> Any:
    """What matters about a Node for failover: taints, cordon, condition statuses (not the
    heartbeat times, which change every few seconds)."""
    if node is None:
        return None
    spec = node.get("spec") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    return (spec.get("unschedulable"), spec.get("taints"),
            sorted((c.get("type"), c.get("status")) for c in conditions))


@dataclass(frozen=True)
class Echoes:
    """Where the echo of our own write goes: `own_writes` tells it (reconciler.kube.echo),
    `on_echo` queues its cluster without spending the cluster's token."""

    own_writes: OwnWrites
    on_echo: Callable[[ClusterKey], None]


class Caches:
    """Every informer of the reconciler, and the `CacheView` over them."""

    def __init__(self, kube: Kube, settings: Settings, metrics: Metrics,
                 on_key: Callable[[ClusterKey], None],
                 managed_kinds: Iterable[Kind] = k.CACHED_KINDS,
                 echoes: Echoes | None = None,
                 on_handover: Callable[[ClusterKey, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self._clock = clock  # times handovers (injectable for tests)
        self.settings = settings
        self.metrics = metrics
        self.on_key = on_key
        # A cluster handed over from another shard goes to on_handover(key, delay), when given.
        self.on_handover = on_handover
        self._arriving: dict[ClusterKey, float] = {}  # handed-over clusters: ours from then
        self._arriving_lock = threading.Lock()
        # The echo of our own write (reconciler.kube.echo) goes to echoes.on_echo when given.
        self.echoes = echoes
        ns = settings.watch_namespace
        self.informers: dict[Kind, Informer] = {}

        def add(kind: Kind, selector: str) -> None:
            self.informers[kind] = Informer(kube, kind, settings, namespace=ns,
                                            label_selector=selector, on_event=self._on_event,
                                            metrics=metrics)

        # Only this shard's clusters (Settings.shard): a cluster whose label moves it to
        # another shard leaves this watch (a DELETED event) and so leaves the cache.
        add(k.KAIWU_CLUSTER, settings.shard_selector)
        # Backups and schedules are not labelled by shard: their events count only for the
        # clusters this shard owns (below).
        add(k.KAIWU_BACKUP, "")
        add(k.KAIWU_BACKUP_SCHEDULE, "")
        for kind in managed_kinds:
            add(kind, NOTHING)  # until the selection names the clusters (start)
        add(k.NODE, "")
        self.selection = Selection([self.informers[kind] for kind in managed_kinds],
                                   self._cluster_names, self._on_listed, clock)
        self._selecting: threading.Thread | None = None
        self._stop_selecting = threading.Event()
        self._started = False

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the watches; those of the clusters' objects once the KaiwuClusters are listed
        and the selection names them (reconciler.kube.selection)."""
        selected = self.selection.informers
        for informer in self.informers.values():
            if informer not in selected:
                informer.start()
        self._stop_selecting.clear()

        def start_selected() -> None:
            for informer in selected:
                if not self._stop_selecting.is_set():
                    informer.start()

        self._selecting = threading.Thread(
            target=self.selection.run, name="cache-selection", daemon=True,
            args=(self.informers[k.KAIWU_CLUSTER].wait_synced, start_selected,
                  self._stop_selecting))
        self._selecting.start()
        self._started = True

    def stop(self) -> None:
        self._stop_selecting.set()
        self.selection.changed()  # wakes its thread, which then sees the stop
        for informer in self.informers.values():
            informer.stop()
        self._started = False

    def synced(self) -> bool:
        return all(informer.synced for informer in self.informers.values())

    def wait_synced(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        for informer in self.informers.values():
            if not informer.wait_synced(max(deadline - time.monotonic(), 0)):
                return False
        return True

    def served(self, kind: Kind) -> bool | None:
        """Whether the API server serves `kind` (None: not known yet, or not cached)."""
        informer = self.informers.get(kind)
        return informer.served if informer is not None else None

    def unsynced(self) -> list[str]:
        return [i.name for i in self.informers.values() if not i.synced]

    def dead(self) -> list[str]:
        """Informers whose thread ended although they should be watching (for /healthz)."""
        return [i.name for i in self.informers.values()
                if self._started and i.started and not i.alive and i.served is not False] + (
            ["the selection of watched clusters"] if self._started and self._selecting
            is not None and not self._selecting.is_alive() else [])

    def recheck_unserved(self) -> None:
        """Look again for kinds that were not served (a CRD installed since)."""
        for informer in self.informers.values():
            if informer.served is False and informer.started and not informer.alive \
                    and self._started:
                informer.served = None
                informer.start()

    # ---- CacheView ----------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        informer = self.informers.get(kind)
        if informer is None:
            raise KeyError(f"{kind.kind} ({kind.api_version}) is not cached")
        return informer.get(namespace, name)

    def peek(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        informer = self.informers.get(kind)
        if informer is None:
            raise KeyError(f"{kind.kind} ({kind.api_version}) is not cached")
        return informer.peek(namespace, name)

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        informer = self.informers.get(kind)
        if informer is None:
            raise KeyError(f"{kind.kind} ({kind.api_version}) is not cached")
        return informer.list(namespace, labels)

    def peek_list(self, kind: Kind, namespace: str,
                  labels: Mapping[str, str] = {}) -> builtins.list[Obj]:
        informer = self.informers.get(kind)
        if informer is None:
            raise KeyError(f"{kind.kind} ({kind.api_version}) is not cached")
        return informer.peek_list(namespace, labels)

    def owns(self, key: ClusterKey) -> bool:
        """Whether this shard may act on the cluster now: its watch shows the cluster with
        this shard's label, the watches of its objects have listed them (the selection), and
        a handover to it, if any, has run its course."""
        if not self.informers[k.KAIWU_CLUSTER].has(key.namespace, key.name) \
                or not self.holds(key.namespace, key.name):
            return False
        with self._arriving_lock:
            until = self._arriving.get(key)
            if until is not None and self._clock() >= until:
                del self._arriving[key]
                until = None
        return until is None

    def holds(self, namespace: str, name: str) -> bool:
        """Whether the caches hold the objects of the cluster `name` (any namespace in scope):
        its name is listed by the selection."""
        return name in self.selection.listed

    def cluster_keys(self) -> builtins.list[ClusterKey]:
        """Every KaiwuCluster in the cache."""
        return sorted(ClusterKey(*store_key(obj))
                      for obj in self.informers[k.KAIWU_CLUSTER].peek_list())

    def _cluster_names(self) -> set[str]:
        return {str(metadata(obj).get("name"))
                for obj in self.informers[k.KAIWU_CLUSTER].peek_list()}

    def _on_listed(self, names: frozenset[str]) -> None:
        """The objects of these clusters are in the caches now: reconcile them (a pass asked
        for before was turned away by `owns`)."""
        for key in self.cluster_keys():
            if key.name in names and self.owns(key):
                self.on_key(key)

    # ---- events -> keys -----------------------------------------------------------------------

    def _on_event(self, kind: str, obj: Obj, old: Obj | None) -> None:
        if obj.get("kind") == k.NODE.kind:
            if kind == "MODIFIED" and _node_projection(obj) == _node_projection(old):
                return
            pods = self.informers.get(k.POD)
            for each in pods.clusters_on_node(str(metadata(obj).get("name"))) if pods else ():
                if not self.owns(each):
                    continue  # another shard's cluster
                self.on_key(each)
            return
        if obj.get("kind") == k.KAIWU_CLUSTER.kind:
            self._on_cluster_event(kind, obj, old)
            return
        if obj.get("kind") in (k.KAIWU_BACKUP.kind, k.KAIWU_BACKUP_SCHEDULE.kind) \
                and kind == "MODIFIED" and not _cluster_changed(obj, old):
            return
        key = cluster_of(obj)
        if key is None or not self.owns(key):
            return  # another shard's cluster (or one still being handed over to us)
        if self.echoes is not None and (self.echoes.own_writes.is_echo(obj)
                                        or (kind == "MODIFIED" and _bookkeeping(obj, old))):
            # (A DELETED event carries the body the cache held: never bookkeeping.)
            self.echoes.on_echo(key)
        else:
            self.on_key(key)

    def _on_cluster_event(self, kind: str, obj: Obj, old: Obj | None) -> None:
        key = cluster_of(obj)
        if key is None:
            return
        if kind in ("ADDED", "DELETED"):
            self.selection.changed()
        if kind == "DELETED":
            # Deleted, or moved to another shard (it no longer matches our selector): either
            # way the Controller finds it gone from the cache and forgets it; it deletes
            # nothing (a deleted cluster's objects go by their ownerReferences).
            with self._arriving_lock:
                self._arriving.pop(key, None)
            self.on_key(key)
            return
        if kind == "ADDED" and self.on_handover is not None and _reconciled_before(obj) \
                and self.settings.shard_handover_s > 0 \
                and self.informers[k.KAIWU_CLUSTER].synced:
            # A cluster someone reconciled before appears after our initial list: it was
            # moved here from another shard. Ours once that shard has surely stopped.
            delay = self.settings.shard_handover_s
            with self._arriving_lock:
                self._arriving[key] = self._clock() + delay
            log.info("cluster handed over to this shard", extra={
                "cluster": str(key), "shard": self.settings.shard or "(unnamed)",
                "first_reconcile_in_s": delay})
            self.on_handover(key, delay)
            return
        if kind == "MODIFIED" and not _cluster_changed(obj, old):
            return
        if self.holds(key.namespace, key.name):
            self.on_key(key)
        # else: a cluster new to the selection is queued once its objects are listed
        # (`_on_listed`): a pass before that would read an empty cache.
