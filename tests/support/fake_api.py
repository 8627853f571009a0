"""One in-memory Kubernetes API for the fast tier: the calls of `reconciler.kube.client.Kube`,
answered as kube-apiserver 1.20 answers them, and a watch-cache view over the same store.

The fast tier's stories (tests/unit/reconciler/...) hand a `FakeApi` to the code under test where
the runtime hands a `Kube`, and a `FakeView` over it where the runtime hands the watch caches.
It models what the reconciler relies on; every modelled behaviour is checked against the real
server by the same table of cases (tests/support/fake_api_cases.py), run on this fake by
tests/unit/reconciler/kube/test_fake_api.py and on kube-apiserver by
tests/world/selftest/test_fake_api_agrees.py. Cited sources are Kubernetes 1.20.2's
(`make world` unpacks them under ~/.cache/kaiwu-testworld/build/kubernetes-*/), `store.go`
being staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go.

- resourceVersion: one counter for the whole store, advanced by every write and returned in the
  written object (etcd's revision). generation starts at 1 and grows when anything outside
  metadata and status changes.
- Optimistic concurrency: a PUT, or a merge patch naming metadata.resourceVersion, whose
  resourceVersion is not the stored one is 409 Conflict with the server's message
  (store.go:544, OptimisticLockErrorMsg at store.go:202); a PUT without one is unconditional.
- create of a name that exists: 409 AlreadyExists; get, PUT or patch of a missing name: 404;
  generateName gets a suffix.
- delete (store.go:890 Delete, rest/delete.go:72 BeforeDelete): a uid precondition that does
  not match is 409; an object with finalizers (or a foreground/orphan propagation, which adds
  its own finalizer: store.go:737) is kept with deletionTimestamp set until an update empties
  its finalizers; a Pod scheduled on a node is deleted gracefully (pkg/registry/core/pod/
  strategy.go:123: its grace period, or the request's) and stays until a delete with grace 0.
  Dependents are not garbage-collected (no controller-manager here; the world tier has one).
- Merge patch: RFC 7386 (null removes a key, a list is replaced). JSON patch: RFC 6902
  add/remove/replace/test; a failed test or a missing path is 422.
- The status subresource is separate from the rest: a write to the object keeps the stored
  status; a write to /status keeps the stored spec, and of a custom resource (KaiwuCluster,
  KaiwuBackup: `subresources: status`) everything but status (`_keep_server_fields`).
- Copies: nothing a caller passes in or gets back is the store's own dict.
- Server-side apply, in a documented model of structured-merge-diff: each manager owns a set of
  field paths (metadata.managedFields, FieldsV1, as the server writes them). An apply's fields are
  its manager's after it; fields it owned before and no longer applies are removed unless
  another manager owns them too; a field another manager owns with a different value is a 409
  Conflict unless force, which takes it over. Lists are merged by key where Kubernetes 1.20
  declares them maps (containers, env, volumes, volumeMounts, ports, conditions, ...:
  ASSOCIATIVE); every other list is atomic. Non-apply writes make their manager (operation
  Update) own the fields they changed, taken from the others. A dry run answers the object the
  write would make, stores nothing and keeps the resourceVersion.
- Lists and watches: label selectors of every form the reconciler sends (tests.support.selectors);
  a watch answers as the watch cache does (`watch`: bookmarks, 410 Gone after `compact`,
  selection transitions); `fail` makes the next list or watch fail (an unreachable server,
  a 500, a 403) and `unserved` kinds answer 404, as a CRD not installed.
- Validation: only a Service's ports, unique by name and by (port, protocol) (`validate`).
- Not modelled: admission (webhooks, defaulting of built-in kinds beyond the above, validation of
  other field values), field selectors, paging (`list_objects` answers one page), and exec.

`FakeView` stands in for the watch caches (reconciler.kube.cache): what the store holds, slimmed
as the caches keep it (`kinds.slim`), read back as copies. `counted` wraps a FakeApi as the
runtime wraps its client (reconciler.kube.writes.CountedKube): each write counted in
writes_total.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self, cast

from reconciler.kube.client import ApiError, Kube
from reconciler.kube.kinds import Kind, kind_of, slim
from reconciler.kube.writes import CountedKube
from reconciler.metrics import Metrics
from reconciler.model import Obj, rfc3339
from tests.support.peeks import Peeks
from tests.support.selectors import selector_matches

# store.go:202, the message of a stale update's 409.
OPTIMISTIC_LOCK = ("the object has been modified; please apply your changes to the latest "
                   "version and try again")
# Kinds without a status subresource: a write to them writes `status` like any other field.
NO_STATUS = frozenset({"ConfigMap", "Secret", "ServiceAccount", "Event", "Lease",
                       "ValidatingWebhookConfiguration", "NetworkPolicy", "ServiceMonitor"})
# Custom resources (served from CRDs): a write to their /status changes nothing but status.
CUSTOM = frozenset({"KaiwuCluster", "KaiwuBackup", "KaiwuBackupSchedule", "ServiceMonitor"})
# Kinds whose metadata.generation the server keeps (the others have none).
GENERATED = frozenset({"StatefulSet", "PodDisruptionBudget", "NetworkPolicy", "KaiwuCluster",
                       "KaiwuBackup", "KaiwuBackupSchedule", "ServiceMonitor",
                       "ValidatingWebhookConfiguration"})
# metadata the server sets and no manager owns (fieldmanager/stripmeta.go).
SERVER_META = ("name", "namespace", "uid", "resourceVersion", "generation",
               "creationTimestamp", "managedFields", "deletionTimestamp",
               "deletionGracePeriodSeconds", "selfLink", "generateName")
# Lists Kubernetes 1.20's OpenAPI declares `x-kubernetes-list-type: map`, by field name, and
# their keys: server-side apply merges them item by item. Every other list is atomic.
ASSOCIATIVE: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",),
    "env": ("name",), "volumes": ("name",), "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",), "imagePullSecrets": ("name",),
    "conditions": ("type",), "ownerReferences": ("uid",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
}
# Keys of the `ports` lists: a container's (containerPort, protocol), a Service's (port,
# protocol); protocol defaults to TCP.
CONTAINER_PORT_KEY, SERVICE_PORT_KEY = ("containerPort", "protocol"), ("port", "protocol")

Path = tuple[Any, ...]  # map keys (str) and list items (ItemKey)


class ItemKey(tuple[tuple[str, Any], ...]):
    """An associative list item in a field path: its key fields and their values."""

    def fields_v1(self) -> str:
        return "k:" + json.dumps(dict(self), separators=(",", ":"), sort_keys=True)


def _list_key(name: str, items: list[Any]) -> tuple[str, ...] | None:
    """The key fields of the list under field `name`, None for an atomic list."""
    if not items or not all(isinstance(item, dict) for item in items):
        return ASSOCIATIVE.get(name) if not items else None
    if name == "ports":
        return CONTAINER_PORT_KEY if "containerPort" in items[0] else SERVICE_PORT_KEY
    return ASSOCIATIVE.get(name)


def _item_key(item: Obj, key: tuple[str, ...]) -> ItemKey:
    return ItemKey(sorted((field, item.get(field, "TCP" if field == "protocol" else None))
                          for field in key))


def fields_of(obj: Obj, *, status: bool) -> set[Path]:
    """The field paths an object sets, as a manager comes to own them: its leaves, and each
    associative list item. `status`: whether status counts (a /status write, or a kind without
    a status subresource)."""
    found: set[Path] = set()

    def walk(value: Any, path: Path, name: str) -> None:
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                walk(inner, (*path, key), key)
        elif isinstance(value, list) and _list_key(name, value) is not None and value:
            key = _list_key(name, value)
            assert key is not None
            for item in value:
                item_path = (*path, _item_key(item, key))
                found.add(item_path)
                walk(item, item_path, "")
        else:
            found.add(path)

    for top, value in obj.items():
        if top in ("apiVersion", "kind") or (top == "status" and not status):
            continue
        if top == "metadata":
            for key, inner in (value or {}).items():
                if key not in SERVER_META:
                    walk(inner, ("metadata", key), key)
        else:
            walk(value, (top,), top)
    return found


def to_fields_v1(paths: set[Path]) -> Obj:
    """Paths in the FieldsV1 form the server writes into managedFields."""
    root: Obj = {}
    for path in sorted(paths, key=repr):
        node = root
        for element in path:
            name = element.fields_v1() if isinstance(element, ItemKey) else f"f:{element}"
            node = node.setdefault(name, {})
            if isinstance(element, ItemKey):
                node.setdefault(".", {})
    return root


def from_fields_v1(raw: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """Paths of a FieldsV1 object: each leaf and each node marked "." (owned itself)."""
    found: set[Path] = set()
    for name, inner in raw.items():
        if name == ".":
            found.add(prefix)
            continue
        if name.startswith("f:"):
            element: Any = name[2:]
        elif name.startswith("k:"):
            element = ItemKey(sorted(json.loads(name[2:]).items()))
        else:  # v: (set items) and i: (positions) are owned as values of an atomic list
            element = name
        path = (*prefix, element)
        if inner:
            found |= from_fields_v1(inner, path)
        else:
            found.add(path)
    return found


def _child(node: Any, element: Any, name: str) -> Any:
    """The value at one path element under `node`, or a KeyError."""
    if isinstance(element, ItemKey):
        if not isinstance(node, list):
            raise KeyError(element)
        key = tuple(field for field, _ in element)
        for item in node:
            if isinstance(item, dict) and _item_key(item, key) == element:
                return item
        raise KeyError(element)
    if not isinstance(node, dict):
        raise KeyError(element)
    return node[element]


def value_at(obj: Obj, path: Path) -> Any:
    node: Any = obj
    name = ""
    for element in path:
        node = _child(node, element, name)
        name = element if isinstance(element, str) else ""
    return node


def _remove(obj: Obj, path: Path) -> None:
    try:
        parent = value_at(obj, path[:-1])
    except KeyError:
        return
    last = path[-1]
    if isinstance(last, ItemKey) and isinstance(parent, list):
        key = tuple(field for field, _ in last)
        parent[:] = [item for item in parent if not (isinstance(item, dict)
                                                     and _item_key(item, key) == last)]
    elif isinstance(parent, dict):
        parent.pop(last, None)


def _apply_merge(live: Any, applied: Any, name: str) -> Any:
    """An applied configuration merged into the live value: maps field by field, associative
    lists item by item (items only the live list has stay), anything else replaced."""
    if isinstance(live, dict) and isinstance(applied, dict):
        merged = dict(live)
        for key, value in applied.items():
            merged[key] = _apply_merge(live.get(key), value, key)
        return merged
    if isinstance(live, list) and isinstance(applied, list):
        key = _list_key(name, applied) or _list_key(name, live)
        if key is not None and all(isinstance(item, dict) for item in live):
            result = list(live)
            for item in applied:
                wanted = _item_key(item, key)
                at = next((i for i, old in enumerate(result) if _item_key(old, key) == wanted),
                          None)
                if at is None:
                    result.append(copy.deepcopy(item))
                else:
                    result[at] = _apply_merge(result[at], item, "")
            return result
    return copy.deepcopy(applied)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def json_patch(target: Obj, operations: list[Obj]) -> Obj:
    """RFC 6902 add, remove, replace and test; 422 Invalid for a failed test or a bad path."""
    result = copy.deepcopy(target)
    for op in operations:
        *parents, last = _pointer(op["path"])
        try:
            node: Any = result
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if isinstance(node, list):
                index = len(node) if last == "-" else int(last)
                if op["op"] == "add":
                    node.insert(index, copy.deepcopy(op["value"]))
                    continue
                current = node[index]
            else:
                if op["op"] == "add":
                    node[last] = copy.deepcopy(op["value"])
                    continue
                current = node[last]
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiError(422, "Invalid", f"jsonpatch {op['op']} operation does not apply: "
                           f"doc is missing path: {op['path']}") from error
        if op["op"] == "test":
            if current != op["value"]:
                raise ApiError(422, "Invalid", f"testing value {op['path']} failed")
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif op["op"] == "replace":
            node[int(last) if isinstance(node, list) else last] = copy.deepcopy(op["value"])
        else:
            raise ApiError(422, "Invalid", f"unsupported JSON patch operation {op['op']}")
    return result


def _spec_part(obj: Obj) -> Obj:
    """What makes a new generation: everything but metadata and status."""
    return {key: value for key, value in obj.items()
            if key not in ("metadata", "status", "apiVersion", "kind")}


StoreKey = tuple[str, str, str]  # (kind, namespace or "", name)


def counted(api: Any, metrics: Metrics) -> Kube:
    """`api` (a FakeApi, or a stand-in of some of Kube's calls) as the runtime hands its client
    to the steps: each write counted in `metrics` (reconciler.kube.writes.CountedKube)."""
    return CountedKube(cast(Kube, api), metrics)


class FakeApi:
    """The API, in memory (see the module docstring for what is modelled and where the real
    server does the same). `objects` is the store, keyed (kind, namespace or "", name): tests
    may read it; a change by someone else goes through the calls below (or `edit`), so that it
    gets a resourceVersion and managedFields as on a real server. `writes` records every call
    that reached the store, (verb, kind, name), verb one of apply, create, replace, patch,
    json_patch, status (a /status write), delete; dry runs are counted in `dry_runs`."""

    def __init__(self, objects: dict[StoreKey, Obj] | None = None, *,
                 field_manager: str = "kaiwu-reconciler", version: str = "v1.20.2",
                 clock: Callable[[], float] = time.time) -> None:
        self.field_manager = field_manager
        self.version = version
        self.clock = clock
        self.objects: dict[StoreKey, Obj] = objects if objects is not None else {}
        self.writes: list[tuple[str, str, str]] = []
        self.dry_runs = 0
        # Above every resourceVersion already in `objects` (a store handed from an earlier
        # FakeApi): etcd's revision never goes back.
        self._revision = [max([100, *(int(obj["metadata"].get("resourceVersion") or 0)
                                      for obj in self.objects.values())])]
        self._names = itertools.count(1)
        self._uids: set[str] = {str(obj["metadata"].get("uid")) for obj in self.objects.values()}
        # (revision, type, object, the object before) of every change, for `watch`.
        self.history: list[tuple[int, str, Obj, Obj | None]] = []
        for key, obj in list(self.objects.items()):
            self.objects[key] = self._seeded(obj)
        # The oldest revision whose change `history` still holds (`compact`); the watch cache
        # starts at the store's revision, as after the server's first list.
        self._oldest = [self.revision + 1]
        # The revision of each kind's last change (the watch cache's lastProcessedResourceVersion,
        # what its bookmarks carry).
        self._last_change: dict[str, int] = {}
        # Calls that fail before reaching the store, in order, by call (`fail`).
        self.failures: dict[str, list[BaseException]] = {}
        # Kinds the server does not serve (a CRD not installed): their lists and watches are 404.
        self.unserved: set[str] = set()
        # How many of the next watches the server ends before their deadline (`end_early`).
        self._ending_early = [0]

    @property
    def revision(self) -> int:
        """The store's last resourceVersion (etcd's revision)."""
        return self._revision[0]

    @revision.setter
    def revision(self, value: int) -> None:
        self._revision[0] = value

    @classmethod
    def sharing(cls, api: FakeApi) -> Self:
        """An API of this class (a story's subclass answering some call its own way) over the
        same store as `api`: the same objects, resourceVersions, history and `writes`."""
        new = cls.__new__(cls)
        new.__dict__.update(api.__dict__)
        return new

    # ---- what Kube offers ----------------------------------------------------------------

    def server_version(self) -> str:
        return self.version

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        found = self.objects.get(self.store_key(kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        self._answering("list_objects", kind)
        items = []
        for (kind_, ns, _), obj in sorted(self.objects.items()):
            if kind_ == kind.kind and (not namespace or ns == namespace) and selector_matches(
                    label_selector, obj["metadata"].get("labels")):
                item = copy.deepcopy(obj)
                items.append(keep(item) if keep is not None else item)
        return items, str(self.revision)

    def watch(self, kind: Kind, resource_version: str, namespace: str | None = None,
              label_selector: str | None = None, timeout_seconds: int = 300) -> FakeWatch:
        """The changes after `resource_version` until now, then the watch ends as the server's
        time-out ends one, as kube-apiserver 1.20's watch cache answers (staging/src/k8s.io/
        apiserver/pkg/storage/cacher/): from version 0, the objects there now, each ADDED
        (watch_cache.go:577-601); 410 Gone, in the server's words, for a version older than the
        history still held (`compact`; watch_cache.go:606-607); a change that takes an object
        into the selection is ADDED, one that takes it out DELETED (cacher.go
        convertToWatchEvent); last, the BOOKMARK the watch cache sends 2 s before a watch's
        deadline (cacher.go:1257 nextBookmarkTime; our client asks for bookmarks) with the
        revision of the kind's last change, if it has had one since the cache started and it is
        newer than the watch's start (cacher.go:813-830, :1401)."""
        self._answering("watch", kind)
        since = int(resource_version or 0)

        def selected(obj: Obj | None) -> bool:
            return obj is not None and obj["kind"] == kind.kind and (
                not namespace or obj["metadata"].get("namespace") == namespace) and \
                selector_matches(label_selector, obj["metadata"].get("labels"))

        events: list[tuple[str, Obj]] = []
        if not since:
            events = [("ADDED", copy.deepcopy(obj)) for obj in
                      (obj for _, obj in sorted(self.objects.items())) if selected(obj)]
        elif since < self._oldest[0] - 1:
            raise ApiError(410, "Expired",
                           f"too old resource version: {since} ({self._oldest[0] - 1})")
        for revision, type_, obj, before in self.history if since else ():
            if revision <= since:
                continue
            now, then = selected(obj) and type_ != "DELETED", selected(before)
            if now:
                events.append(("MODIFIED" if then else "ADDED", copy.deepcopy(obj)))
            elif then and before is not None:
                gone = copy.deepcopy(before if type_ != "DELETED" else obj)
                gone["metadata"]["resourceVersion"] = str(revision)
                events.append(("DELETED", gone))
        last = self._last_change.get(kind.kind, 0)
        if self._ending_early[0]:
            self._ending_early[0] -= 1
        elif timeout_seconds > 2 and last > since:
            events.append(("BOOKMARK", {"apiVersion": kind.api_version, "kind": kind.kind,
                                        "metadata": {"resourceVersion": str(last)}}))
        return FakeWatch(events)

    def compact(self) -> None:
        """The watch cache's window of recent changes moves past every change so far (it keeps
        the last 100 or more of a kind, fewer the older they are: watch_cache.go:344-358; here
        one window for every kind): a watch from an earlier version is 410 Gone, and its
        watcher must list again."""
        del self.history[:]
        self._oldest[0] = self.revision + 1

    def end_early(self) -> None:
        """The next watch is ended by the server before its deadline (kube-apiserver
        restarting, a proxy closing the connection): its events come, the bookmark due 2 s
        before the deadline does not."""
        self._ending_early[0] += 1

    def fail(self, call: str, *errors: BaseException) -> None:
        """The next calls of `call` ("list_objects" or "watch") raise `errors`, one each, before
        reaching the store: an API server that cannot be reached (ConnectionRefusedError), one
        whose etcd fails (ApiError 500), RBAC refusing (ApiError 403)."""
        if call not in ("list_objects", "watch"):
            raise ValueError(f"FakeApi.fail: {call!r} is not a call that can fail here; "
                             "give 'list_objects' or 'watch'")
        self.failures.setdefault(call, []).extend(errors)

    def _answering(self, call: str, kind: Kind) -> None:
        pending = self.failures.get(call)
        if pending:
            raise pending.pop(0)
        if kind.kind in self.unserved:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        name = meta.get("name") or f"{meta.get('generateName', '')}{next(self._names):05x}"
        key = self.store_key(kind_of(obj), meta.get("namespace"), name)
        if key in self.objects:
            raise ApiError(409, "AlreadyExists",
                           f'{kind_of(obj).plural} "{name}" already exists')
        new = copy.deepcopy(obj)
        new["metadata"]["name"] = name
        new["metadata"].pop("resourceVersion", None)
        if obj["kind"] not in NO_STATUS:
            new.pop("status", None)  # status only through /status (e.g. pod strategy)
        self._own(None, new, self.field_manager, "Update")
        return self._write("create", key, None, new)

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        kind = kind_of(obj)
        key = self.store_key(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        live = self.objects.get(key)
        if live is not None:
            self._check_version(live, obj)  # SSA honours a resourceVersion it is given
        status = obj["kind"] in NO_STATUS
        applied = fields_of(obj, status=status)
        base = copy.deepcopy(live) if live is not None else {
            "apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "metadata": {"name": obj["metadata"]["name"],
                         **({"namespace": obj["metadata"]["namespace"]}
                            if obj["metadata"].get("namespace") else {})}}
        owners = self._owners(base)
        conflicts = [(manager, path) for (manager, operation), paths in owners.items()
                     if manager != self.field_manager
                     for path in sorted(applied & paths, key=repr)
                     if _differs(base, obj, path)]
        if conflicts and not force:
            raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflicts: "
                           + "; ".join(f'conflict with "{manager}": .{_dotted(path)}'
                                       for manager, path in conflicts))
        for manager, path in conflicts:  # forced: taken over
            for (other, _), paths in owners.items():
                if other == manager:
                    paths.discard(path)
        mine = owners.pop((self.field_manager, "Apply"), set())
        others = set().union(*owners.values()) if owners else set()
        for path in sorted(mine - applied, key=len, reverse=True):
            if not any(_under(other, path) or _under(path, other) for other in others):
                _remove(base, path)
        body = {k: v for k, v in obj.items() if k != "status" or status}
        body["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_META}
        new = _apply_merge(base, body, "")
        new["metadata"].update({k: base["metadata"][k] for k in SERVER_META
                                if k in base["metadata"]})
        owners[(self.field_manager, "Apply")] = applied
        new["metadata"]["managedFields"] = self._entries(owners, base)
        self.dry_runs += dry_run
        return self._write("apply", key, live, new, dry_run=dry_run)

    def replace(self, obj: Obj) -> Obj:
        return self._update(obj, status_write=False)

    def replace_status(self, obj: Obj) -> Obj:
        return self._update(obj, status_write=True)

    def _update(self, obj: Obj, *, status_write: bool) -> Obj:
        """A PUT of the object or of its status subresource, as `Kube.replace` sends it."""
        key, live = self._existing(obj)
        self._check_version(live, obj)
        new = copy.deepcopy(obj)
        self._keep_server_fields(live, new, status_write=status_write)
        self._own(live, new, self.field_manager, "Update")
        return self._write("status" if status_write else "replace", key, live, new)

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
              subresource: str = "") -> Obj:
        key = self.store_key(kind, namespace, name)
        live = self._found(kind, key)
        wanted_version = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_version is not None and wanted_version != live["metadata"][
                "resourceVersion"]:
            raise ApiError(409, "Conflict", self._lock_message(kind, name))
        new = merge_patch(live, patch)
        self._keep_server_fields(live, new, status_write=subresource == "status")
        self._own(live, new, self.field_manager, "Update")
        return self._write("status" if subresource == "status" else "patch", key, live, new)

    def json_patch(self, kind: Kind, namespace: str | None, name: str,
                   operations: list[Obj]) -> Obj:
        key = self.store_key(kind, namespace, name)
        live = self._found(kind, key)
        new = json_patch(live, operations)
        self._check_version(live, new)
        self._keep_server_fields(live, new, status_write=False)
        self._own(live, new, self.field_manager, "Update")
        return self._write("json_patch", key, live, new)

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None,
               propagation: str | None = None) -> bool:
        key = self.store_key(kind, namespace, name)
        live = self.objects.get(key)
        if live is None:
            return False
        meta = live["metadata"]
        if uid and uid != meta.get("uid"):
            # rest/delete.go:83, the message word for word.
            raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on {kind.plural} "
                           f'"{name}": Precondition failed: UID in precondition: {uid}, UID in '
                           f"object meta: {meta.get('uid')}")
        new = copy.deepcopy(live)
        new_meta = new["metadata"]
        grace = self._grace(live, grace_period_seconds)
        if meta.get("deletionTimestamp"):
            # Being deleted already (rest/delete.go:97-123): with no grace period pending, the
            # delete goes through (held only by finalizers); a pod's pending grace period may
            # only be shortened; anything else changes nothing.
            pending = int(meta.get("deletionGracePeriodSeconds") or 0)
            if pending and (live["kind"] != "Pod" or grace_period_seconds is None
                            or grace >= pending):
                return True
            if not pending and new_meta.get("finalizers"):
                return True
        else:
            # store.go:737: a foreground or orphan deletion waits for the garbage collector,
            # which it asks for with a finalizer of its own.
            gc = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}.get(propagation or "")
            if gc and gc not in (new_meta.get("finalizers") or []):
                new_meta["finalizers"] = [*(new_meta.get("finalizers") or []), gc]
            if meta.get("generation"):
                new_meta["generation"] = meta["generation"] + 1  # rest/delete.go:137
        if not new_meta.get("finalizers") and not grace:
            del self.objects[key]
            self.writes.append(("delete", kind.kind, name))
            self.revision += 1
            # The watch's DELETED event carries the object as it was, at the revision of its
            # deletion (storage/etcd3/watcher.go:439-441).
            gone = copy.deepcopy(live)
            gone["metadata"]["resourceVersion"] = str(self.revision)
            self._record("DELETED", gone, live)
            return True
        new_meta["deletionTimestamp"] = rfc3339(self.clock() + grace)
        new_meta["deletionGracePeriodSeconds"] = grace
        self._write("delete", key, live, new)
        return True

    def admit(self, obj: Obj, *, dry_run: bool) -> None:
        """What the server changes in an object on its way to storage (or to a dry run's
        answer): a kind's defaulting, a mutating admission webhook. In 1.20 that comes after the
        field manager's work (endpoints/handlers/patch.go: fieldManager.Apply at :441,
        admission at :539), so no manager owns what it changes. Nothing here: a story of a
        server that defaults or mutates overrides it."""

    # ---- for tests: someone else's change, the garbage collector --------------------------

    def edit(self, kind: Kind, namespace: str | None, name: str, change: Callable[[Obj], Any],
             *, manager: str = "kubectl-edit", status: bool = False) -> Obj:
        """Another client changes a stored object with a PUT (kubectl edit; of /status with
        `status`): a new resourceVersion, and `manager` owns what it changed. Not in
        `writes`."""
        key = self.store_key(kind, namespace, name)
        live = self._found(kind, key)
        new = copy.deepcopy(live)
        change(new)
        self._keep_server_fields(live, new, status_write=status)
        self._own(live, new, manager, "Update")
        return self._write("edit", key, live, new, record=False)

    def put(self, obj: Obj) -> Obj:
        """An object someone stored earlier, as it is (its uid, labels, status; none of the
        checks a create makes): a new resourceVersion. Not in `writes`."""
        stored = self._seeded(obj)
        stored["metadata"]["resourceVersion"] = str(self.revision)
        kind = kind_of(obj)
        key = self.store_key(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        before = self.objects.get(key)
        self.objects[key] = stored
        self._record("ADDED" if before is None else "MODIFIED", stored, before)
        return copy.deepcopy(stored)

    def collect_garbage(self) -> None:
        """What kube-controller-manager's garbage collector does once it has caught up
        (pkg/controller/garbagecollector/garbagecollector.go): an object being deleted with
        the `orphan` finalizer loses its dependents' ownerReferences to it, one with
        `foregroundDeletion` its dependents, then the finalizer; and an object whose every
        owner is gone is deleted (background propagation). The fast tier has no such
        controller: a story calls this where time passes (tests/support/controller_world.py's
        World does before each pass)."""
        for key, obj in sorted(self.objects.items()):
            meta = obj["metadata"]
            finalizers = meta.get("finalizers") or []
            if not meta.get("deletionTimestamp") or not {"orphan", "foregroundDeletion"} & set(
                    finalizers):
                continue
            for dependent_key, dependent in sorted(self.objects.items()):
                refs = dependent["metadata"].get("ownerReferences") or []
                if not any(ref.get("uid") == meta.get("uid") for ref in refs):
                    continue
                if "orphan" in finalizers:
                    self._collect(dependent_key, _without_owner(str(meta.get("uid"))))
                else:
                    self._collect(dependent_key, None)
            self._collect(key, lambda d: d["metadata"].update(finalizers=[
                f for f in d["metadata"].get("finalizers") or ()
                if f not in ("orphan", "foregroundDeletion")]))
        uids = {obj["metadata"].get("uid") for obj in self.objects.values()}
        for key, obj in sorted(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(ref.get("uid") in uids for ref in refs):
                self._collect(key, None)

    def _collect(self, key: StoreKey, change: Callable[[Obj], Any] | None) -> None:
        """One change of the garbage collector's: `change` applied, or a delete (None)."""
        live = self.objects.get(key)
        if live is None:
            return
        if change is None:
            self.delete(kind_of(live), key[1], key[2])
            return
        new = copy.deepcopy(live)
        change(new)
        if new["metadata"].get("ownerReferences") is None:
            new["metadata"].pop("ownerReferences", None)
        self._own(live, new, "generic-garbage-collector", "Update")
        self._write("collect", key, live, new, record=False)

    # ---- the store -----------------------------------------------------------------------

    def store_key(self, kind: Kind, namespace: str | None, name: str) -> StoreKey:
        return kind.kind, (namespace or "") if kind.namespaced else "", name

    def _found(self, kind: Kind, key: StoreKey) -> Obj:
        live = self.objects.get(key)
        if live is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{key[2]}" not found')
        return live

    def _existing(self, obj: Obj) -> tuple[StoreKey, Obj]:
        kind = kind_of(obj)
        key = self.store_key(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        return key, self._found(kind, key)

    def _lock_message(self, kind: Kind, name: str) -> str:
        return f'Operation cannot be fulfilled on {kind.plural} "{name}": {OPTIMISTIC_LOCK}'

    def _check_version(self, live: Obj, obj: Obj) -> None:
        wanted = obj["metadata"].get("resourceVersion")
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            kind = kind_of(live)
            raise ApiError(409, "Conflict", self._lock_message(kind, live["metadata"]["name"]))

    def _keep_server_fields(self, live: Obj, new: Obj, *, status_write: bool) -> None:
        """What a write cannot change: the server's metadata, and status (a write to the
        object) or everything but status (a write to /status)."""
        if live["kind"] not in NO_STATUS:
            if status_write:
                # A custom resource's /status keeps nothing but status (apiextensions-apiserver
                # registry/customresource/status_strategy.go:35); a built-in kind's keeps its
                # spec, its metadata taken as sent (e.g. core/service/strategy.go:264,
                # apps/statefulset/strategy.go:133, in 1.20).
                kept = ("status",) if live["kind"] in CUSTOM else ("status", "metadata")
                sent = {key: new[key] for key in kept if key in new}
                new.clear()
                new.update(copy.deepcopy({k: v for k, v in live.items() if k not in kept}))
                new.update(sent)
                if "metadata" not in new:
                    new["metadata"] = copy.deepcopy(live["metadata"])
            elif "status" in live:
                new["status"] = copy.deepcopy(live["status"])
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        for field in ("uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation", "managedFields", "name",
                      "namespace"):
            if field in live["metadata"]:
                meta[field] = copy.deepcopy(live["metadata"][field])
            else:
                meta.pop(field, None)

    def _owners(self, obj: Obj) -> dict[tuple[str, str], set[Path]]:
        owners: dict[tuple[str, str], set[Path]] = {}
        for entry in obj["metadata"].get("managedFields") or ():
            if entry.get("subresource"):
                continue
            key = (str(entry.get("manager")), str(entry.get("operation")))
            owners.setdefault(key, set()).update(from_fields_v1(entry.get("fieldsV1") or {}))
        return owners

    def _entries(self, owners: dict[tuple[str, str], set[Path]], live: Obj) -> list[Obj]:
        """managedFields: one entry per (manager, operation) that still owns a field."""
        when = rfc3339(self.clock())
        versions = {(str(e.get("manager")), str(e.get("operation"))): e
                    for e in live["metadata"].get("managedFields") or ()}
        entries = []
        for (manager, operation), paths in owners.items():
            if not paths:
                continue
            old = versions.get((manager, operation))
            fields = to_fields_v1(paths)
            if old is not None and from_fields_v1(old.get("fieldsV1") or {}) == paths:
                entries.append(copy.deepcopy(old))
                continue
            entries.append({"manager": manager, "operation": operation,
                            "apiVersion": live.get("apiVersion", ""), "time": when,
                            "fieldsType": "FieldsV1", "fieldsV1": fields})
        return entries

    def _own(self, live: Obj | None, new: Obj, manager: str, operation: str) -> None:
        """A non-apply write: `manager` owns the fields it changed, taken from the others
        (fieldmanager's Update: managed fields follow the fields that changed)."""
        before = fields_of(live, status=True) if live is not None else set()
        after = fields_of(new, status=True)
        changed = {path for path in after
                   if path not in before or (live is not None and _differs(live, new, path))}
        owners = self._owners(live) if live is not None else {}
        for manager_, paths in owners.items():
            # Fields the write changed are its own now; fields it removed are nobody's.
            kept = {path for path in paths - changed
                    if path in after or any(_under(field, path) for field in after)}
            owners[manager_] = kept
        owners.setdefault((manager, operation), set()).update(changed)
        new.setdefault("metadata", {})["managedFields"] = self._entries(
            owners, live if live is not None else new)

    def _grace(self, live: Obj, requested: int | None) -> int:
        """Pods only (pod strategy.go:123): the request's period, else the pod's own; 0 for a
        pod on no node or one that has ended."""
        if live["kind"] != "Pod":
            return 0
        spec, phase = live.get("spec") or {}, (live.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Failed", "Succeeded"):
            return 0
        if live["metadata"].get("deletionTimestamp") and requested is None:
            return int(live["metadata"].get("deletionGracePeriodSeconds") or 0)
        return int(requested if requested is not None
                   else spec.get("terminationGracePeriodSeconds", 30))

    def _seeded(self, obj: Obj) -> Obj:
        """An object a test puts in the store before the API answers anything: given the
        server's metadata it lacks."""
        seeded = copy.deepcopy(obj)
        meta = seeded["metadata"]
        self.revision += 1
        meta.setdefault("resourceVersion", str(self.revision))
        meta.setdefault("uid", f"uid-{meta['name']}")
        self._uids.add(meta["uid"])
        if seeded["kind"] in GENERATED:
            meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", rfc3339(self.clock()))
        return seeded

    def _write(self, verb: str, key: StoreKey, live: Obj | None, new: Obj, *,
               dry_run: bool = False, record: bool = True) -> Obj:
        self.admit(new, dry_run=dry_run)
        validate(new)
        meta = new["metadata"]
        if live is None:
            # Readable, and never the same twice (a name made again gets a new uid).
            uid = f"uid-{meta['name']}"
            meta["uid"] = uid if uid not in self._uids else f"{uid}-{self.revision + 1}"
            self._uids.add(meta["uid"])
            meta["creationTimestamp"] = rfc3339(self.clock())
            if new["kind"] in GENERATED:
                meta["generation"] = 1
        elif new["kind"] in GENERATED and _spec_part(new) != _spec_part(live):
            meta["generation"] = int(live["metadata"].get("generation") or 1) + 1
        if dry_run:
            meta["resourceVersion"] = live["metadata"]["resourceVersion"] if live else ""
            return copy.deepcopy(new)
        if record:
            self.writes.append((verb, key[0], key[2]))
        if live is not None and live == {**new, "metadata": {
                **meta, "resourceVersion": live["metadata"]["resourceVersion"]}}:
            # Nothing changed: the etcd3 store writes nothing and the resourceVersion stays
            # (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go:318).
            return copy.deepcopy(live)
        if live is not None and meta.get("deletionTimestamp") and not meta.get("finalizers") \
                and not meta.get("deletionGracePeriodSeconds"):
            # store.go:402 ShouldDeleteDuringUpdate: the last finalizer gone, the object goes.
            del self.objects[key]
            self.revision += 1
            meta["resourceVersion"] = str(self.revision)
            self._record("DELETED", new, live)
            return copy.deepcopy(new)
        self.revision += 1
        meta["resourceVersion"] = str(self.revision)
        self.objects[key] = copy.deepcopy(new)
        self._record("ADDED" if live is None else "MODIFIED", new, live)
        return copy.deepcopy(new)

    def _record(self, type_: str, obj: Obj, before: Obj | None) -> None:
        self.history.append((self.revision, type_, copy.deepcopy(obj), copy.deepcopy(before)))
        self._last_change[obj["kind"]] = self.revision


def validate(obj: Obj) -> None:
    """The one validation the reconciler meets in the fast tier: a Service's ports are unique by
    name and by (port, protocol), so an apply merging our port into a list that holds another of
    its name is refused (pkg/apis/core/validation/validation.go:4206-4292, validateServicePort
    at :4359). 422 Invalid, in the server's words."""
    if obj["kind"] != "Service":
        return
    causes, names, pairs = [], set(), set()
    for index, port in enumerate((obj.get("spec") or {}).get("ports") or ()):
        name, pair = port.get("name"), (port.get("port"), port.get("protocol", "TCP"))
        if name and name in names:
            causes.append(f'spec.ports[{index}].name: Duplicate value: "{name}"')
        if pair in pairs:
            causes.append(f"spec.ports[{index}]: Duplicate value: "
                          f'core.ServicePort{{Name:"", Protocol:"{pair[1]}", Port:{pair[0]}}}')
        names.add(name)
        pairs.add(pair)
    if causes:
        raise ApiError(422, "Invalid", f'Service "{obj["metadata"]["name"]}" is invalid: ['
                       + ", ".join(causes) + "]" if len(causes) > 1 else
                       f'Service "{obj["metadata"]["name"]}" is invalid: {causes[0]}')


class ManagedBy:
    """The same FakeApi, its writes made under another field manager (someone's kubectl):
    `ManagedBy(api, "kubectl").apply(obj)`."""

    def __init__(self, api: FakeApi, manager: str) -> None:
        self.api = api
        self.field_manager = manager

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.api, name)

        def as_manager(*args: Any, **kwargs: Any) -> Any:
            own, self.api.field_manager = self.api.field_manager, self.field_manager
            try:
                return call(*args, **kwargs)
            finally:
                self.api.field_manager = own
        return as_manager


class FakeWatch:
    """A watch's events, as `reconciler.kube.client.Watch` yields them."""

    def __init__(self, events: list[tuple[str, Obj]]) -> None:
        self.events = events
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        for event in self.events:
            if self.closed:
                return
            yield event


def _without_owner(uid: str) -> Callable[[Obj], None]:
    """A change that drops the ownerReferences to `uid` (the garbage collector orphaning)."""
    def change(obj: Obj) -> None:
        refs = [ref for ref in obj["metadata"].get("ownerReferences") or ()
                if ref.get("uid") != uid]
        obj["metadata"]["ownerReferences"] = refs or None
    return change


def _differs(live: Obj, applied: Obj, path: Path) -> bool:
    try:
        return bool(value_at(live, path) != value_at(applied, path))
    except KeyError:
        return True


def _under(path: Path, prefix: Path) -> bool:
    return path[:len(prefix)] == prefix


def _dotted(path: Path) -> str:
    return ".".join(element.fields_v1() if isinstance(element, ItemKey) else str(element)
                    for element in path)


class FakeView(Peeks):
    """The watch caches over a FakeApi's store: what it holds, slimmed as the caches keep it,
    read back as copies (`peek`, `peek_list`: checked copies, tests.support.peeks); a list in
    namespace '' lists every namespace, as reconciler.kube.cache's does."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        found = self.api.objects.get(self.api.store_key(kind, namespace, name))
        return copy.deepcopy(slim(found)) if found is not None else None

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        return [copy.deepcopy(slim(obj)) for (kind_, ns, _), obj in self.api.objects.items()
                if kind_ == kind.kind and (not namespace or ns == namespace) and all(
                    (obj["metadata"].get("labels") or {}).get(key) == value
                    for key, value in labels.items())]

    def served(self, kind: Kind) -> bool:
        return kind.always_served
