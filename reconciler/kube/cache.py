"""Watch caches: the reconciler's local copy of every object it reads, kept fresh by watches.

`reconciler.runtime.process` starts one `Caches` per process (leader and standby alike, so a
standby is warm when it takes over); the Controller reads through the `CacheView` protocol and
makes no API reads in steady state. Each kind has an `Informer`: list, then watch from the list's
resourceVersion, resume each new watch from the last resourceVersion seen (bookmarks included),
relist when the server answers 410 Gone (the history it would need is gone), reconnect with capped
exponential back-off when the API server is unreachable. Nothing is polled.

What is watched: KaiwuClusters, KaiwuBackups and KaiwuBackupSchedules (all in scope; a backup or
schedule maps to the cluster its spec.cluster names); every kind the renderer emits, Pods, PVCs
and Secrets, selected by the label app.kubernetes.io/managed-by=kaiwu-operator; Nodes (all). A
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

What is kept: of the kinds the reconciler only reads (Pods, claims, Secrets, Nodes, KaiwuBackups
and schedules), the fields its readers use (`kinds.slim`: no managedFields, a Pod's spec down to
its node and images, a KaiwuBackup's metadata down to the one label and annotation read); the
kinds it applies whole, managedFields and all (drift attribution reads them). Every map and list
equal to one already cached is stored once (`Shared`: the clusters of a fleet repeat each
other's managedFields, probes, labels and volume mounts), map keys and short strings are
interned. Each store is indexed by cluster (namespace and instance label: a cluster's pods are
found without a scan) and by node (a Node event finds the clusters with a pod there without
looking at, or copying, any other pod). `get` and `list` return copies; `peek` returns the
cached object itself, for the hot read-only paths (the observe step, the spec step's look at
the StatefulSet), which must not change it: its parts may be other objects' too.
"""

from __future__ import annotations

import builtins
import copy
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError, Kube, Watch
from reconciler.kube.echo import OwnWrites
from reconciler.kube.kinds import Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer.builders import INSTANCE_LABEL, MANAGED_SELECTOR

log = logging.getLogger(__name__)

EventHandler = Callable[[str, Obj, Obj | None], None]  # (ADDED|MODIFIED|DELETED, new, old)


class CacheView(Protocol):
    """Read access to the caches: what the Controller is given. Returns copies: callers may
    change them freely. namespace '' means every namespace (and is the only choice for Nodes)."""

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None: ...

    def peek(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """The cached object itself, not a copy: read it, never change it (its maps and lists
        may be shared with other cached objects)."""

    def list(self, kind: Kind, namespace: str,
             labels: Mapping[str, str] = {}) -> list[Obj]: ...


def _meta(obj: Obj) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _store_key(obj: Obj) -> tuple[str, str]:
    meta = _meta(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _matches(obj: Obj, labels: Mapping[str, str]) -> bool:
    have = _meta(obj).get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


StoreKey = tuple[str, str]  # (namespace, name)
# Strings up to this long are interned as they enter a cache: keys, label values, kinds, states,
# timestamps repeat across thousands of objects, and each JSON parse makes its own copies.
INTERNED_MAX = 64
# How many maps and lists `Shared` remembers before it starts afresh (what is shared stays
# shared; only later arrivals stop finding the earlier ones). Each costs about 70 bytes, and
# the equal ones arrive close together (a list answers a kind cluster by cluster): at 1,000
# clusters (586,000 maps and lists, 75,000 distinct) a table of 32,768 keeps the caches 3 MiB
# smaller than one holding every distinct value (bench/cache_memory.py).
SHARED_MAX = 1 << 15


def _same(a: Any, b: Any) -> bool:
    """Two items of maps or lists already made by `Shared`: the same object (maps and lists are
    the shared ones, short strings are interned; a long string, a certificate or a key, is
    unique to its object in any real fleet), or equal numbers, booleans or nulls of the same
    type (True, 1 and 1.0 are equal in Python but are written differently)."""
    return a is b or (type(a) is type(b) and not isinstance(a, (str, dict, list)) and a == b)


class Shared:
    """Stores each map and list value once: a map or list equal to one seen before (the same
    keys in the same order, the same items, scalars of the same types) is replaced by that one.
    The applied objects of a fleet repeat themselves: the managedFields of every cluster's
    Service list the same fields, its StatefulSet's probes, resources and volume mounts are
    those of the other clusters of its template. Shared values are safe because nobody changes
    a cached object: `get` and `list` hand out deep copies, `peek` readers only read.

    Built bottom up: a value's items are shared first, so telling two maps apart costs one look
    at each item. The table holds each value under a hash of its keys and items (maps, lists
    and strings, which are interned, by identity; numbers with their type) and is checked item
    by item on a hit: a collision shares nothing. It starts afresh past `capacity` values, so
    it never grows with the cache's history. Informers call it from their threads: a lookup
    racing an insert at worst misses a chance to share."""

    def __init__(self, capacity: int = SHARED_MAX) -> None:
        self.capacity = capacity
        self._seen: dict[int, Any] = {}
        self._empty_map: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def object(self, obj: Obj) -> Obj:
        """An object from the API with its parts shared (`value`); the object itself and its
        metadata are its own (a name, a uid, a resourceVersion: nothing else equals them), so
        they are not remembered: the table holds no whole object, deleted or replaced."""
        shared: Obj = self.value(obj, remember=False)
        return shared

    def value(self, value: Any, remember: bool = True) -> Any:
        """`value` with its maps and lists shared, its map keys and short strings interned."""
        if isinstance(value, dict):
            if not value:  # the leaves of managedFields: most of their maps
                return self._empty_map
            built = {}
            tokens: list[Any] = [dict]
            for key, item in value.items():
                key = sys.intern(key) if isinstance(key, str) else key
                if isinstance(item, (dict, list)):
                    item = self.value(item)
                elif isinstance(item, str) and len(item) <= INTERNED_MAX:
                    item = sys.intern(item)
                built[key] = item
                tokens.append(id(key))
                tokens.append((type(item), item) if isinstance(item, (int, float)) else id(item))
            if not remember or "resourceVersion" in built:  # an object, its metadata
                return built
            marker = hash(tuple(tokens))
            found = self._seen.get(marker)
            if type(found) is dict and len(found) == len(built) and all(
                    a is b and _same(found[a], built[b])
                    for a, b in zip(found, built, strict=True)):
                return found
            return self._remember(marker, built)
        if isinstance(value, list):
            items = [self.value(item) for item in value]
            marker = hash((list, *[(type(item), item) if isinstance(item, (int, float))
                                   else id(item) for item in items]))
            found = self._seen.get(marker)
            if type(found) is list and len(found) == len(items) and all(
                    _same(a, b) for a, b in zip(found, items, strict=True)):
                return found
            return self._remember(marker, items)
        if isinstance(value, str) and len(value) <= INTERNED_MAX:
            return sys.intern(value)
        return value

    def _remember(self, marker: int, built: Any) -> Any:
        if len(self._seen) >= self.capacity:
            self._seen.clear()
        self._seen[marker] = built
        return built


SHARED = Shared()


def kept(obj: Obj) -> Obj:
    """What a cache stores of an object from the API: slimmed (kinds.slim), its parts shared
    with equal ones already cached (`Shared`: equal, and never changed, so sharing them changes
    nothing a reader can see)."""
    return SHARED.object(k.slim(obj))


class Store:
    """One kind's cached objects by (namespace, name), with two indexes kept in step with every
    put and pop: by cluster ((namespace, instance label)) and by node (a Pod's spec.nodeName).
    Not locked itself: its Informer holds its lock around every call."""

    def __init__(self) -> None:
        self.objects: dict[StoreKey, Obj] = {}
        self.by_cluster: dict[StoreKey, set[StoreKey]] = {}
        self.by_node: dict[str, set[StoreKey]] = {}

    @staticmethod
    def _cluster(key: StoreKey, obj: Obj) -> StoreKey | None:
        instance = (_meta(obj).get("labels") or {}).get(INSTANCE_LABEL)
        return (key[0], str(instance)) if instance else None

    @staticmethod
    def _node(obj: Obj) -> str:
        return str((obj.get("spec") or {}).get("nodeName") or "") \
            if obj.get("kind") == k.POD.kind else ""

    def put(self, key: StoreKey, obj: Obj) -> Obj | None:
        """Store `obj`; returns what it replaced."""
        before = self.pop(key)
        self.objects[key] = obj
        cluster, node = self._cluster(key, obj), self._node(obj)
        if cluster is not None:
            self.by_cluster.setdefault(cluster, set()).add(key)
        if node:
            self.by_node.setdefault(node, set()).add(key)
        return before

    def pop(self, key: StoreKey) -> Obj | None:
        before = self.objects.pop(key, None)
        if before is None:
            return None
        cluster, node = self._cluster(key, before), self._node(before)
        if cluster is not None:
            _discard(self.by_cluster, cluster, key)
        if node:
            _discard(self.by_node, node, key)
        return before

    def select(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        """The objects in `namespace` ('' for all) whose labels include `labels`; through the
        cluster index when the instance label is asked for."""
        instance = labels.get(INSTANCE_LABEL)
        if namespace and instance is not None:
            keys: Iterable[StoreKey] = sorted(self.by_cluster.get((namespace, instance), ()))
            candidates = [self.objects[key] for key in keys]
        else:
            candidates = [obj for (ns, _), obj in self.objects.items()
                          if not namespace or ns == namespace]
        return [obj for obj in candidates if _matches(obj, labels)]

    def on_node(self, node: str) -> list[Obj]:
        return [self.objects[key] for key in sorted(self.by_node.get(node, ()))]


def _discard(index: dict[StoreKey, set[StoreKey]] | dict[str, set[StoreKey]], at: Any,
             key: StoreKey) -> None:
    members = index.get(at)
    if members is not None:
        members.discard(key)
        if not members:
            del index[at]


class Informer:
    """List+watch of one kind into a local store, on its own thread."""

    def __init__(self, kube: Kube, kind: Kind, settings: Settings, *,
                 namespace: str = "", label_selector: str = "",
                 on_event: EventHandler | None = None, metrics: Metrics | None = None) -> None:
        self.kube = kube
        self.kind = kind
        self.settings = settings
        self.namespace = namespace if kind.namespaced else ""
        self.label_selector = label_selector
        self.on_event = on_event
        self.metrics = metrics
        self._lock = threading.Lock()
        self._store = Store()
        self._stop = threading.Event()
        self._current_watch: Watch | None = None
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version = ""  # where the next watch resumes; "" = list first
        self.served: bool | None = None  # None until the first list answered
        self.relists = 0  # lists after a 410 Gone
        self.reconnects = 0  # watches or lists that failed and were retried after a back-off
        self.last_error = ""

    @property
    def name(self) -> str:
        return f"{self.kind.kind}.{self.kind.api_version}"

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop at once: a watch blocked in a read is closed; nothing is delivered after this."""
        self._stop.set()
        if self._current_watch is not None:
            self._current_watch.close()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- reads ------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        found = self.peek(namespace, name)
        return copy.deepcopy(found) if found is not None else None

    def peek(self, namespace: str, name: str) -> Obj | None:
        """The cached object itself (see CacheView.peek)."""
        with self._lock:
            return self._store.objects.get((namespace if self.kind.namespaced else "", name))

    def has(self, namespace: str, name: str) -> bool:
        with self._lock:
            return (namespace if self.kind.namespaced else "", name) in self._store.objects

    def list(self, namespace: str = "", labels: Mapping[str, str] = {}) -> list[Obj]:
        with self._lock:
            found = self._store.select(namespace, labels)
        return copy.deepcopy(found)

    def clusters_on_node(self, node: str) -> builtins.list[ClusterKey]:
        """The clusters with a cached Pod bound to `node` (from the node index: no scan, no
        copy)."""
        with self._lock:
            pods = self._store.on_node(node)
        return sorted({key for key in map(cluster_of, pods) if key is not None})

    def __len__(self) -> int:
        with self._lock:
            return len(self._store.objects)

    # ---- the list+watch loop ----------------------------------------------------------------

    def _run(self) -> None:
        backoff = self.settings.reconnect_backoff_base_s
        while not self._stop.is_set():
            try:
                if not self.resource_version and not self._list():
                    return  # not served: looked for again by Caches.recheck_unserved
                self._watch()
                backoff = self.settings.reconnect_backoff_base_s
                self._count_restart("expired")
            except ApiError as error:
                if error.gone:
                    # The server no longer has the history from our resourceVersion on: list
                    # again (the diff against the store delivers what we missed).
                    log.info("watch history gone, relisting",
                             extra={"kind": self.name, "error": error.message})
                    self.resource_version = ""
                    self.relists += 1
                    self._count_restart("gone")
                    continue
                backoff = self._fail(error, backoff)
            except Exception as error:  # connection refused, reset, timeouts, bad chunks
                backoff = self._fail(error, backoff)

    def _fail(self, error: Exception, backoff: float) -> float:
        if self._stop.is_set():
            return backoff
        self.reconnects += 1
        self.last_error = f"{type(error).__name__}: {error}"
        self._count_restart("disconnected")
        log.warning("watch failed, retrying", extra={
            "kind": self.name, "error": self.last_error[:300], "retry_in_s": backoff})
        self._stop.wait(backoff)
        return min(backoff * 2, self.settings.reconnect_backoff_max_s)

    def _count_restart(self, reason: str) -> None:
        if self.metrics is not None and not self._stop.is_set():
            self.metrics.watch_restarts_total.labels(kind=self.kind.kind, reason=reason).inc()

    def _list(self) -> bool:
        """Replace the store with a fresh list; False when the kind is not served."""
        try:
            items, version = self.kube.list_objects(
                self.kind, self.namespace or None, self.label_selector or None, keep=kept)
        except ApiError as error:
            if error.not_found:
                log.info("kind not served by the API server, not watched",
                         extra={"kind": self.name})
                self.served = False
                with self._lock:
                    self._store = Store()
                self._synced.set()
                return False
            raise
        if self._stop.is_set():
            return True
        store = Store()
        for obj in items:
            store.put(_store_key(obj), obj)
        fresh = store.objects
        with self._lock:
            old = self._store.objects
            self._store = store
        self.served = True
        self.resource_version = version
        self._update_gauge()
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._deliver("ADDED", obj, None)
            elif _meta(before).get("resourceVersion") != _meta(obj).get("resourceVersion"):
                self._deliver("MODIFIED", obj, before)
        for key, before in old.items():
            if key not in fresh:
                self._deliver("DELETED", before, before)
        self._synced.set()
        return True

    def _watch(self) -> None:
        events = self.kube.watch(self.kind, self.resource_version, self.namespace or None,
                                 self.label_selector or None,
                                 timeout_seconds=self.settings.watch_timeout_s)
        self._current_watch = events
        if self._stop.is_set():  # stopped while the request was on its way
            events.close()
        for kind, obj in events:
            if self._stop.is_set():
                return
            version = _meta(obj).get("resourceVersion")
            if kind == "BOOKMARK":
                if version:
                    self.resource_version = str(version)
                continue
            obj.setdefault("apiVersion", self.kind.api_version)
            obj.setdefault("kind", self.kind.kind)
            obj = kept(obj)
            key = _store_key(obj)
            with self._lock:
                before = self._store.pop(key) if kind == "DELETED" else self._store.put(key, obj)
            if version:
                self.resource_version = str(version)
            self._update_gauge()
            self._deliver(kind, obj, before)

    def _deliver(self, kind: str, obj: Obj, before: Obj | None) -> None:
        if self.on_event is None or self._stop.is_set():
            return
        try:
            self.on_event(kind, obj, before)
        except Exception:
            log.exception("event handler failed", extra={"kind": self.name})

    def _update_gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.cache_objects.labels(kind=self.kind.kind).set(len(self))


# ---- from events to clusters -----------------------------------------------------------------

def cluster_of(obj: Obj) -> ClusterKey | None:
    """The KaiwuCluster an object belongs to: its instance label, else its KaiwuCluster owner."""
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "")
    if not namespace:
        return None
    if obj.get("kind") == k.KAIWU_CLUSTER.kind:
        return ClusterKey(namespace, str(meta.get("name")))
    if obj.get("kind") in (k.KAIWU_BACKUP.kind, k.KAIWU_BACKUP_SCHEDULE.kind):
        name = ((obj.get("spec") or {}).get("cluster") or {}).get("name")
        return ClusterKey(namespace, str(name)) if name else None
    instance = (meta.get("labels") or {}).get(INSTANCE_LABEL)
    if instance:
        return ClusterKey(namespace, str(instance))
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == k.KAIWU_CLUSTER.kind:
            return ClusterKey(namespace, str(owner.get("name")))
    return None


def _cluster_changed(new: Obj, old: Obj | None) -> bool:
    """Whether a KaiwuCluster change needs a reconcile: its spec (generation) or metadata the
    Controller reads changed. Status-only updates (mostly our own status writes) do not."""
    if old is None:
        return True
    a, b = _meta(new), _meta(old)
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
    a, b = _meta(new), _meta(old)
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


class Caches:
    """Every informer of the reconciler, and the `CacheView` over them."""

    def __init__(self, kube: Kube, settings: Settings, metrics: Metrics,
                 on_key: Callable[[ClusterKey], None],
                 managed_kinds: Iterable[Kind] = k.CACHED_KINDS,
                 own_writes: OwnWrites | None = None,
                 on_echo: Callable[[ClusterKey], None] | None = None,
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
        # The echo of our own write (reconciler.kube.echo) goes to on_echo when given.
        self.own_writes = own_writes
        self.on_echo = on_echo
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
            add(kind, MANAGED_SELECTOR)
        add(k.NODE, "")
        self._started = False

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()
        self._started = True

    def stop(self) -> None:
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
                if self._started and not i.alive and i.served is not False]

    def recheck_unserved(self) -> None:
        """Look again for kinds that were not served (a CRD installed since)."""
        for informer in self.informers.values():
            if informer.served is False and not informer.alive and self._started:
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

    def owns(self, key: ClusterKey) -> bool:
        """Whether this shard may act on the cluster now: its watch shows the cluster with
        this shard's label, and a handover to it, if any, has run its course."""
        if not self.informers[k.KAIWU_CLUSTER].has(key.namespace, key.name):
            return False
        with self._arriving_lock:
            until = self._arriving.get(key)
            if until is not None and self._clock() >= until:
                del self._arriving[key]
                until = None
        return until is None

    def cluster_keys(self) -> builtins.list[ClusterKey]:
        """Every KaiwuCluster in the cache."""
        return sorted(ClusterKey(str(_meta(obj).get("namespace")), str(_meta(obj).get("name")))
                      for obj in self.informers[k.KAIWU_CLUSTER].list())

    # ---- events -> keys -----------------------------------------------------------------------

    def _on_event(self, kind: str, obj: Obj, old: Obj | None) -> None:
        if obj.get("kind") == k.NODE.kind:
            if kind == "MODIFIED" and _node_projection(obj) == _node_projection(old):
                return
            pods = self.informers.get(k.POD)
            for each in pods.clusters_on_node(str(_meta(obj).get("name"))) if pods else ():
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
        if self.on_echo is not None and self.own_writes is not None \
                and (self.own_writes.is_echo(obj)
                     or (kind == "MODIFIED" and _bookkeeping(obj, old))):
            # (A DELETED event carries the body the cache held: never bookkeeping.)
            self.on_echo(key)
        else:
            self.on_key(key)

    def _on_cluster_event(self, kind: str, obj: Obj, old: Obj | None) -> None:
        key = cluster_of(obj)
        if key is None:
            return
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
        self.on_key(key)
