"""Recognising the echo of the reconciler's own writes among watch events.

Every write the reconciler makes (an apply, a patch, a status update) comes back a moment later
as a watch event of the same object at the resourceVersion the write's answer carried. That
event says nothing the writing pass did not already know, so it must not cost the cluster a
token of its rate limit (it would delay the next real repair by a whole refill period).

`Kube` (reconciler.kube.client) records the resourceVersion of each successful write's answer
here (dry runs excluded); `Caches` (reconciler.kube.cache) asks `is_echo(obj)` for each event
and queues the cluster as an echo when it is one. A resourceVersion is etcd's revision, unique
across every object, so the version alone identifies our write. The memory is bounded: the
oldest versions are forgotten first (an echo arrives within milliseconds, or not at all when the
write changed nothing).

The watch event may arrive before the write's answer has been read; so an event of an object
while one of our writes to it is in flight (`begin`/`end` around the request) counts as its
echo too. Taking someone else's change in that window for ours only means its reconcile is
queued without a token; it is reconciled all the same.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict

from reconciler.kube.kinds import KINDS
from reconciler.model import Obj

REMEMBERED = 4096  # versions kept; far more than the writes in flight at any moment


class OwnWrites:
    """The resourceVersions our own writes produced, until their watch event arrives."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._versions: OrderedDict[str, None] = OrderedDict()
        self._remembered = remembered
        self._in_flight: Counter[str] = Counter()  # request paths of writes under way
        self._lock = threading.Lock()

    def begin(self, path: str) -> None:
        with self._lock:
            self._in_flight[path] += 1

    def end(self, path: str) -> None:
        with self._lock:
            self._in_flight[path] -= 1
            if self._in_flight[path] <= 0:
                del self._in_flight[path]

    def record(self, answer: Obj) -> None:
        version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        if not version:
            return
        with self._lock:
            self._versions[version] = None
            while len(self._versions) > self._remembered:
                self._versions.popitem(last=False)

    def is_echo(self, obj: Obj) -> bool:
        """Whether obj is exactly what one of our writes left (each version answers once)."""
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        kind = KINDS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
        path = kind.path(meta.get("namespace"), str(meta.get("name"))) if kind else ""
        with self._lock:
            if version and self._versions.pop(version, False) is None:
                return True
            return bool(path) and path in self._in_flight

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)
