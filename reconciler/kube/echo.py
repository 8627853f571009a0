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
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from reconciler.model import Obj

REMEMBERED = 4096  # versions kept; far more than the writes in flight at any moment


class OwnWrites:
    """The resourceVersions our own writes produced, until their watch event arrives."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self._versions: OrderedDict[str, None] = OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

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
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if not version:
            return False
        with self._lock:
            return self._versions.pop(version, False) is None

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)
