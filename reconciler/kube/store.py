"""What the watch caches keep of each object, and how: one kind's store and its indexes.

What is kept: of the kinds the reconciler only reads (Pods, claims, Secrets, Nodes, KaiwuBackups
and schedules), the fields its readers use (`kinds.slim`: no managedFields, a Pod's spec down to
its node and images, a KaiwuBackup's metadata down to the one label and annotation read); the
kinds it applies whole, managedFields and all (drift attribution reads them). Every map and list
equal to one already cached is stored once (`ValuePool`: the clusters of a fleet repeat each
other's managedFields, probes, labels and volume mounts), map keys and short strings are
interned. Each `Store` is indexed by cluster (namespace and instance label: a cluster's pods are
found without a scan) and by node (a Node event finds the clusters with a pod there without
looking at, or copying, any other pod). `cluster_of` names the cluster an object belongs to.

reconciler.kube.informer fills a Store per kind from its list and watch (`kept`: what enters
it); reconciler.kube.cache maps events to clusters with `cluster_of`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.readcheck import ReadCheck
from reconciler.model import Obj
from renderer.builders import INSTANCE_LABEL


def metadata(obj: Obj) -> dict[str, Any]:
    found: dict[str, Any] = obj.get("metadata") or {}
    return found


def store_key(obj: Obj) -> tuple[str, str]:
    """(namespace, name): the key of an object in its kind's store."""
    meta = metadata(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def matches(obj: Obj, labels: Mapping[str, str]) -> bool:
    """Whether the object's labels include `labels`."""
    have = metadata(obj).get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def cluster_of(obj: Obj) -> ClusterKey | None:
    """The KaiwuCluster an object belongs to: its instance label, else its KaiwuCluster owner."""
    meta = metadata(obj)
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


StoreKey = tuple[str, str]  # (namespace, name)
# Strings up to this long are interned as they enter a cache: keys, label values, kinds, states,
# timestamps repeat across thousands of objects, and each JSON parse makes its own copies.
INTERNED_MAX = 64
# How many maps and lists `ValuePool` remembers before it starts afresh (what is shared stays
# shared; only later arrivals stop finding the earlier ones). Each costs about 70 bytes, and
# the equal ones arrive close together (a list answers a kind cluster by cluster): at 1,000
# clusters (586,000 maps and lists, 75,000 distinct) a table of 32,768 keeps the caches 3 MiB
# smaller than one holding every distinct value (bench/cache_memory.py).
POOL_MAX = 1 << 15


def _same(a: Any, b: Any) -> bool:
    """Two items of maps or lists already made by `ValuePool`: the same object (maps and lists are
    the shared ones, short strings are interned; a long string, a certificate or a key, is
    unique to its object in any real fleet), or equal numbers, booleans or nulls of the same
    type (True, 1 and 1.0 are equal in Python but are written differently)."""
    return a is b or (type(a) is type(b) and not isinstance(a, (str, dict, list)) and a == b)


class ValuePool:
    """Stores each map and list value once: a map or list equal to one seen before (the same
    keys in the same order, the same items, scalars of the same types) is replaced by that one.
    The applied objects of a fleet repeat themselves: the managedFields of every cluster's
    Service list the same fields, its StatefulSet's probes, resources and volume mounts are
    those of the other clusters of its template. Shared values are safe because nobody changes
    a cached object: `get` and `list` hand out deep copies, `peek` and `peek_list` readers only
    read (reconciler.kube.readcheck checks it in tests).

    Built bottom up: a value's items are shared first, so telling two maps apart costs one look
    at each item. The table holds each value under a hash of its keys and items (maps, lists
    and strings, which are interned, by identity; numbers with their type) and is checked item
    by item on a hit: a collision shares nothing. It starts afresh past `capacity` values, so
    it never grows with the cache's history. Informers call it from their threads: a lookup
    racing an insert at worst misses a chance to share."""

    def __init__(self, capacity: int = POOL_MAX) -> None:
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


POOL = ValuePool()


def kept(obj: Obj) -> Obj:
    """What a cache stores of an object from the API: slimmed (kinds.slim), its parts shared
    with equal ones already cached (`ValuePool`: equal, and never changed, so sharing them changes
    nothing a reader can see)."""
    return POOL.object(k.slim(obj))


class Store:
    """One kind's cached objects by (namespace, name), with two indexes kept in step with every
    put and pop: by cluster ((namespace, instance label)) and by node (a Pod's spec.nodeName).
    Not locked itself: its Informer holds its lock around every call. With a `ReadCheck`
    (reconciler.kube.readcheck, in tests) it keeps a copy of each object to catch a reader that
    changes one."""

    def __init__(self, check: ReadCheck | None = None) -> None:
        self.objects: dict[StoreKey, Obj] = {}
        self.by_cluster: dict[StoreKey, set[StoreKey]] = {}
        self.by_node: dict[str, set[StoreKey]] = {}
        self.check = check

    @staticmethod
    def _cluster(key: StoreKey, obj: Obj) -> StoreKey | None:
        instance = (metadata(obj).get("labels") or {}).get(INSTANCE_LABEL)
        return (key[0], str(instance)) if instance else None

    @staticmethod
    def _node(obj: Obj) -> str:
        return str((obj.get("spec") or {}).get("nodeName") or "") \
            if obj.get("kind") == k.POD.kind else ""

    def put(self, key: StoreKey, obj: Obj) -> Obj | None:
        """Store `obj`; returns what it replaced."""
        before = self.pop(key)
        self.objects[key] = obj
        if self.check is not None:
            self.check.keep(key, obj)
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
        if self.check is not None:
            self.check.drop(key)
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
        return [obj for obj in candidates if matches(obj, labels)]

    def on_node(self, node: str) -> list[Obj]:
        return [self.objects[key] for key in sorted(self.by_node.get(node, ()))]


def _discard(index: dict[StoreKey, set[StoreKey]] | dict[str, set[StoreKey]], at: Any,
             key: StoreKey) -> None:
    members = index.get(at)
    if members is not None:
        members.discard(key)
        if not members:
            del index[at]
