"""What the controller's own steps keep across passes: the drift machinery and short memories.

`ControllerMemory` is built once per Controller (reconciler.controller.controller) and handed
to each of its own steps with the StepContext every step is given (the API, the caches, the
settings, metrics, Events, the clock: reconciler.kaiwudb.context). The memories are about
our own writes and what we already said, never about what the cluster needs (that is always
read from the cluster): which writes the watch cache has yet to show (`WriteMarks`), the
server's answers to dry runs (`DryRuns`), each object's last drift verdict (`ComparisonMemo`,
reconciler.drift.memo), which optional kinds the API serves (`ServedKinds`), which drift was
already announced (`DriftNotices`), and actions whose status write had to wait
(`PendingActions`). Workers reconcile different clusters at once: each memory guards itself
with a lock.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from reconciler import status as st
from reconciler.drift.backoff import FightTracker
from reconciler.drift.compare import projection_hash
from reconciler.drift.memo import ComparisonMemo
from reconciler.drift.projection import DriftSettings
from reconciler.drift.repair import Repairer
from reconciler.keys import ClusterKey, ObjectRef
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.kube.kinds import Kind
from reconciler.model import Obj, meta
from reconciler.settings import Settings
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, MANAGED_SELECTOR

# Bound on remembered dry runs (each is one object): enough for hundreds of clusters.
DRY_RUN_CACHE_SIZE = 4096
# How soon to look again while the API server finishes something we started (an orphaning
# delete) or after a write lost a race with another writer (409).
SHORT_REQUEUE_S = 0.5
# After a write, the watch cache shows the old object until the write's event arrives (usually
# milliseconds). A pass in between would judge the old copy and write again (a duplicate repair,
# a 409 on status). For this long at most, a cached object still at the version we overwrote is
# taken as "our write is on its way": skipped, and looked at again shortly.
STALE_GRACE_S = 5.0
STALE_RECHECK_S = 0.1
# How soon the API server is asked again whether a create the cache does not show is there.
ASK_AGAIN_S = 0.5



def _content_key(live: Mapping[str, Any]) -> str:
    """What identifies a live object's content for the dry-run cache: everything but status and
    bookkeeping that changes without the content changing (resourceVersion, managedFields times).
    Coarser than the resourceVersion on purpose: status updates (every pod readiness change bumps
    a StatefulSet's) must not cost a new dry run."""
    md = dict(meta(live))
    md.pop("resourceVersion", None)
    managed = []
    for entry in md.get("managedFields") or ():
        # Who owns which status fields changes with the status (omitempty counters come and
        # go): not content either.
        fields = {key: value for key, value in (entry.get("fieldsV1") or {}).items()
                  if key != "f:status"}
        if fields:
            managed.append({**{key: value for key, value in entry.items()
                               if key not in ("time", "fieldsV1")}, "fieldsV1": fields})
    md["managedFields"] = managed
    body = {key: value for key, value in live.items() if key not in ("status", "metadata")}
    return projection_hash({"metadata": md, **body})


def made_for(live: Obj, cluster: Obj) -> bool:
    """Whether a live object with a name we render is this cluster's to change: owned by it
    (the owner reference every object we write carries; a KaiwuCluster of its name made again
    counts), or, without any controller, labelled as ours for this cluster (a preview applied
    with `kubectl apply -k out`). Anything else, an object of another cluster or of another
    application, is never applied over or deleted."""
    uid, name = str(meta(cluster).get("uid")), meta(cluster).get("name")
    refs = meta(live).get("ownerReferences") or ()
    if any(str(ref.get("uid")) == uid for ref in refs):
        return True
    controllers = [ref for ref in refs if ref.get("controller")]
    if controllers:
        # A KaiwuCluster of the same name (owner references are namespaced) is this cluster
        # made again: what it left behind (deleted with --cascade=orphan) is adopted.
        return all(ref.get("kind") == cluster.get("kind") and ref.get("name") == name
                   for ref in controllers)
    labels = meta(live).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(INSTANCE_LABEL) == name


class WriteMarks:
    """What we last wrote, per cluster and object (or "status"): the resourceVersion it
    replaced ("" for a create), when, and for a create when the API server last showed it
    (`in_flight`); see STALE_GRACE_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: dict[tuple[ClusterKey, str], _Mark] = {}

    def wrote(self, key: ClusterKey, name: str, before: Obj | None,
              after: Obj | None = None) -> None:
        """Remember that we replaced `before` (None: created `name`) with a write; `after`, the
        write's answer, when there is one: a write the server stored as a no-op (the same
        resourceVersion) sends no event, so there is nothing to wait for."""
        version = str(meta(before).get("resourceVersion") or "")
        with self._lock:
            if version and after is not None and \
                    str(meta(after).get("resourceVersion") or "") == version:
                self._written.pop((key, name), None)
                return
            self._written[(key, name)] = _Mark(version, time.monotonic())

    def stale(self, key: ClusterKey, name: str, cached: Obj | None) -> bool:
        """Whether the cache still shows what our last write to `name` replaced."""
        version = str(meta(cached).get("resourceVersion") or "")
        with self._lock:
            mark = self._written.get((key, name))
            if mark is None:
                return False
            if version == mark.replaced and time.monotonic() - mark.at < STALE_GRACE_S:
                return True
            del self._written[(key, name)]
            return False

    def created(self, key: ClusterKey, name: str) -> bool:
        """Whether our last write to `name` was a create the cache may not show yet."""
        with self._lock:
            mark = self._written.get((key, name))
            return mark is not None and mark.replaced == ""

    def ask_due(self, key: ClusterKey, name: str) -> bool:
        """Whether to ask the API server again if our create is there (`in_flight`):
        not within ASK_AGAIN_S of its last answer that it was, so a lagging watch costs a few
        reads, not one per STALE_RECHECK_S."""
        with self._lock:
            mark = self._written.get((key, name))
            return mark is None or mark.shown_at is None or \
                time.monotonic() - mark.shown_at >= ASK_AGAIN_S

    def confirm(self, key: ClusterKey, name: str) -> None:
        """The API server showed our create: it is on its way."""
        with self._lock:
            mark = self._written.get((key, name))
            if mark is not None:
                self._written[(key, name)] = replace(mark, shown_at=time.monotonic())

    def in_flight(self, kube: Kube, key: ClusterKey, mark: str, kind: Kind, namespace: str,
                  name: str, cached: Obj | None) -> bool:
        """Whether the cache still shows what our last write to the object (`mark`, as
        WriteMarks names it) replaced, so the pass must not judge it yet (`stale`).
        The cache's "absent" after our create is ambiguous: our object's event is on its way,
        or someone deleted the object once the cache had shown it (a `kubectl delete` right
        after a repair). The API server settles it with one read: gone there too means missing
        now, to be made again at once rather than after STALE_GRACE_S (the caller knows it was
        made before: `created`, asked first); there, it is on its way, and is asked
        about again only after ASK_AGAIN_S. A read the server does not answer leaves it
        waiting."""
        if not self.stale(key, mark, cached):
            return False
        if cached is not None or not self.created(key, mark) or not self.ask_due(key, mark):
            return True
        try:
            found = kube.get(kind, namespace, name)
        except ApiError:
            return True  # unanswered: wait for the cache, as before this read was asked
        if found is not None:
            self.confirm(key, mark)
            return True
        self.drop(key, mark)
        return False

    def drop(self, key: ClusterKey, name: str) -> None:
        with self._lock:
            self._written.pop((key, name), None)

    def forget(self, key: ClusterKey) -> None:
        with self._lock:
            for written in [w for w in self._written if w[0] == key]:
                del self._written[written]


@dataclass(frozen=True)
class _Mark:
    """One WriteMarks entry."""

    replaced: str  # the resourceVersion our write replaced; "" for a create
    at: float  # when we wrote (time.monotonic)
    shown_at: float | None = None  # a create the API server last showed us, when


class DryRuns:
    """The server's view of "desired applied to live", remembered per (desired, live content)
    so an unchanged object never costs a second dry run (bounded: DRY_RUN_CACHE_SIZE)."""

    def __init__(self, repairer: Repairer) -> None:
        self.repairer = repairer
        self._lock = threading.Lock()
        self._results: OrderedDict[tuple[str, str], Obj | ApiError] = OrderedDict()

    def run(self, desired: Obj, live: Obj) -> Obj | ApiError:
        """The dry run's answer (an ApiError when the server refuses the object)."""
        key = (projection_hash(desired), _content_key(live))
        with self._lock:
            if key in self._results:
                self._results.move_to_end(key)
                return self._results[key]
        try:
            result: Obj | ApiError = self.repairer.dry_run(desired)
        except ApiError as error:
            if error.status not in (400, 403, 409, 422):
                raise
            result = error
        self.remember(desired, live, result)
        return result

    def remember(self, desired: Obj, live: Obj, result: Obj | ApiError) -> None:
        key = (projection_hash(desired), _content_key(live))
        with self._lock:
            self._results[key] = result
            while len(self._results) > DRY_RUN_CACHE_SIZE:
                self._results.popitem(last=False)

    def cached(self, desired: Obj, live: Obj) -> Obj | None:
        """A remembered successful dry run, without asking the server."""
        key = (projection_hash(desired), _content_key(live))
        with self._lock:
            found = self._results.get(key)
        return found if isinstance(found, dict) else None


class ServedKinds:
    """Whether the API server serves a kind (CRD-backed kinds may be missing)."""

    def __init__(self, kube: Kube, view: CacheView, settings: Settings) -> None:
        self.kube = kube
        self.view = view
        self.settings = settings
        self._lock = threading.Lock()
        self._served: dict[tuple[Kind, str], tuple[bool, float]] = {}

    def served(self, kind: Kind, namespace: str) -> bool:
        """Whether the API server serves `kind` (CRD-backed kinds may be missing). The watch
        caches know when they offer `served(kind)` (reconciler.kube.cache.Caches does); otherwise a
        read, remembered for a resync period."""
        if kind in k.ALWAYS_SERVED:
            return True
        cached = getattr(self.view, "served", None)
        if callable(cached):
            answer = cached(kind)
            if isinstance(answer, bool):
                return answer
        now = time.monotonic()
        with self._lock:
            known = self._served.get((kind, namespace))
        if known is not None and now - known[1] < self.settings.resync_period_s:
            return known[0]
        try:
            self.kube.list_objects(kind, namespace, MANAGED_SELECTOR)
            found = True
        except ApiError as error:
            if not error.not_found:
                raise
            found = False
        with self._lock:
            self._served[(kind, namespace)] = (found, now)
        return found


class DriftNotices:
    """The last drift reported per object (its live hash): Events and drift_detected_total
    count a drift once, not once per pass."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[ClusterKey, ObjectRef], str] = {}

    def seen(self, key: ClusterKey, ref: ObjectRef, fingerprint: str) -> bool:
        with self._lock:
            return self._seen.get((key, ref)) == fingerprint

    def note(self, key: ClusterKey, ref: ObjectRef, fingerprint: str) -> None:
        with self._lock:
            self._seen[(key, ref)] = fingerprint

    def clear(self, key: ClusterKey, ref: ObjectRef) -> None:
        with self._lock:
            self._seen.pop((key, ref), None)

    def forget(self, key: ClusterKey) -> None:
        with self._lock:
            for entry in [e for e in self._seen if e[0] == key]:
                del self._seen[entry]


class PendingActions:
    """Actions of passes whose status write waited for the cache: reported with the next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actions: dict[ClusterKey, list[st.Action]] = {}

    def take(self, key: ClusterKey) -> list[st.Action]:
        with self._lock:
            return self._actions.pop(key, [])

    def keep(self, key: ClusterKey, actions: list[st.Action]) -> None:
        with self._lock:
            self._actions[key] = actions

    def forget(self, key: ClusterKey) -> None:
        self.take(key)


@dataclass(frozen=True)
class ControllerMemory:
    """What the controller's own steps keep across passes, beside the StepContext every step is
    given (reconciler.kaiwudb.context): the drift machinery and the memories of the module
    docstring."""

    repairer: Repairer
    fights: FightTracker
    drift: DriftSettings
    marks: WriteMarks
    dry_runs: DryRuns
    served: ServedKinds
    notices: DriftNotices
    pending: PendingActions
    comparisons: ComparisonMemo
