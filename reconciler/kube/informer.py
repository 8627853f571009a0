"""One kind's watch cache: list, then watch, into a `Store` (reconciler.kube.store).

List, then watch from the list's resourceVersion, resume each new watch from the last
resourceVersion seen (bookmarks included), relist when the server answers 410 Gone (the history
it would need is gone; the difference against the store is delivered as events), reconnect with
capped exponential back-off when the API server is unreachable. Nothing is polled. A kind the
API server does not serve counts as synced and empty (`served` is False) until
`Caches.recheck_unserved` looks again. `reselect` changes the label selector of a running
informer: it lists again under the new one (the difference delivered as events, as after 410
Gone) and says so in `listed_selector` (reconciler.kube.selection decides the selectors).
Each event goes to `on_event`, which reconciler.kube.cache.Caches maps to a cluster; readers
read through `peek`, `peek_list` (the cached objects themselves) or `get`, `list` (copies).
"""

from __future__ import annotations

import builtins
import copy
import logging
import threading
from collections.abc import Callable, Mapping

from reconciler.keys import ClusterKey
from reconciler.kube import readcheck
from reconciler.kube import store as stores
from reconciler.kube.client import ApiError, Kube, Watch
from reconciler.kube.kinds import Kind
from reconciler.kube.readcheck import ReadCheck
from reconciler.kube.store import Store, cluster_of, metadata, store_key
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings

log = logging.getLogger(__name__)

EventHandler = Callable[[str, Obj, Obj | None], None]  # (ADDED|MODIFIED|DELETED, new, old)


class Informer:
    """List+watch of one kind into a local store, on its own thread."""

    def __init__(self, kube: Kube, kind: Kind, settings: Settings, *,
                 namespace: str = "", label_selector: str = "",
                 on_event: EventHandler | None = None, metrics: Metrics | None = None) -> None:
        self.kube = kube
        self.kind = kind
        self.settings = settings
        self.namespace = namespace if kind.namespaced else ""
        self.label_selector = label_selector  # what the next list asks for
        self.listed_selector: str | None = None  # what the store holds: the last list's
        self._reselected = False  # the selector changed: list again when the watch ends
        self.on_event = on_event
        self.metrics = metrics
        self._lock = threading.Lock()
        # In tests, a check that no reader changes what peek hands out (readcheck).
        self._check = ReadCheck(self.name) if readcheck.enabled() else None
        self._store = Store(self._check)
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

    def reselect(self, selector: str) -> None:
        """List again under `selector`, then watch under it (from any thread). Until that list
        is in, the store holds what the previous selector chose: `listed_selector` says which."""
        with self._lock:
            if selector == self.label_selector:
                return
            self.label_selector = selector
            self._reselected = True
            watch = self._current_watch
        if watch is not None:
            watch.close()  # the loop lists again at once (no back-off: see _run)

    @property
    def started(self) -> bool:
        return self._thread is not None

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
        return copy.deepcopy(self.peek_list(namespace, labels))

    def peek_list(self, namespace: str = "",
                  labels: Mapping[str, str] = {}) -> builtins.list[Obj]:
        """The cached objects themselves (see CacheView.peek_list)."""
        with self._lock:
            return self._store.select(namespace, labels)

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
                with self._lock:
                    if self._reselected:
                        self._reselected = False
                        self.resource_version = ""
                if not self.resource_version and not self._list():
                    return  # not served: looked for again by Caches.recheck_unserved
                self._watch()
                backoff = self.settings.reconnect_backoff_base_s
                if not self._reselected:  # (a watch closed for a new selector is no restart)
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
        if self._stop.is_set() or self._reselected:
            return backoff  # a watch closed for a new selector: list again at once
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
        selector = self.label_selector
        try:
            items, version = self.kube.list_objects(
                self.kind, self.namespace or None, selector or None, keep=stores.kept)
        except ApiError as error:
            if error.not_found:
                log.info("kind not served by the API server, not watched",
                         extra={"kind": self.name})
                self.served = False
                with self._lock:
                    self._store = Store(self._check)
                    self.listed_selector = selector
                self._synced.set()
                return False
            raise
        if self._stop.is_set():
            return True
        store = Store(self._check)
        for obj in items:
            store.put(store_key(obj), obj)
        fresh = store.objects
        with self._lock:
            old = self._store.objects
            self._store = store
            self.listed_selector = selector
        self.served = True
        self.resource_version = version
        self._update_gauge()
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._deliver("ADDED", obj, None)
            elif metadata(before).get("resourceVersion") != metadata(obj).get("resourceVersion"):
                self._deliver("MODIFIED", obj, before)
        for key, before in old.items():
            if key not in fresh:
                self._deliver("DELETED", before, before)
        self._synced.set()
        return True

    def _watch(self) -> None:
        events = self.kube.watch(self.kind, self.resource_version, self.namespace or None,
                                 self.listed_selector or None,
                                 timeout_seconds=self.settings.watch_timeout_s)
        with self._lock:
            self._current_watch = events
            closing = self._stop.is_set() or self._reselected
        if closing:  # stopped, or reselected, while the request was on its way
            events.close()
        for kind, obj in events:
            if self._stop.is_set():
                return
            version = metadata(obj).get("resourceVersion")
            if kind == "BOOKMARK":
                if version:
                    self.resource_version = str(version)
                continue
            obj.setdefault("apiVersion", self.kind.api_version)
            obj.setdefault("kind", self.kind.kind)
            obj = stores.kept(obj)  # looked up at each call: bench/cache_memory.py swaps it
            key = store_key(obj)
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
