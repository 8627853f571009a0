"""A debug check that nobody changes a cached object they were handed without a copy.

The watch caches hand their readers the cached objects themselves (`CacheView.peek` and
`CacheView.peek_list`: a deep copy of every pod, StatefulSet and Secret a pass reads cost about
half of a pass's CPU at rest). Those objects must never be changed: their maps and lists are
shared with other cached objects (reconciler.kube.store.ValuePool), and a change would be the
cache's truth until the next event replaced it. This module catches a reader that changes one.

With KAIWU_CHECK_CACHE_READS=1 in the environment (tests/conftest.py sets it for every test
tier; production leaves it unset and pays nothing), each cache store keeps a deep copy of every
object it holds (`ReadCheck.keep`) and compares it with the object when the object leaves the
store or when asked (`ReadCheck.changed`); the test fakes of the caches keep a copy of every
object they hand out. Every check made is listed in `CHECKS`, which the tests' autouse fixture
(tests/conftest.py, `cache_reads_unchanged`) asks after each test: a test whose code changed a
peeked object fails, naming the object; each finding is logged as an error as well (a
reconciler a world story starts as a process has no fixture to ask). reconciler.kube.informer
and reconciler.kube.store call it, and the tests' fakes of the caches (tests.support.peeks).
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import weakref
from collections.abc import Hashable

from reconciler.model import Obj

ENV = "KAIWU_CHECK_CACHE_READS"

log = logging.getLogger(__name__)


def enabled() -> bool:
    """Whether the check runs (read when a store is made, so a test may turn it on late)."""
    return os.environ.get(ENV) == "1"


class ReadCheck:
    """Deep copies of objects handed out read-only, by key, and the ones changed since."""

    def __init__(self, what: str) -> None:
        self.what = what  # named in a finding: the kind or the fake
        self._kept: dict[Hashable, tuple[Obj, Obj]] = {}
        self._found: list[str] = []
        self._lock = threading.Lock()
        CHECKS.add(self)

    def keep(self, key: Hashable, obj: Obj) -> Obj:
        """Remember `obj` as it is now under `key` (the check of the one it replaces first);
        returns `obj`."""
        snapshot = copy.deepcopy(obj)
        with self._lock:
            self._check(key)
            self._kept[key] = (obj, snapshot)
        return obj

    def drop(self, key: Hashable) -> None:
        """`key`'s object leaves the store: check it one last time and forget it."""
        with self._lock:
            self._check(key)
            self._kept.pop(key, None)

    def changed(self) -> list[str]:
        """Every object found changed since it was kept, each named once (and then forgotten:
        a test's fixture asks, the next test starts clean)."""
        with self._lock:
            for key in list(self._kept):
                self._check(key)
            found, self._found = self._found, []
        return found

    def _check(self, key: Hashable) -> None:
        held = self._kept.get(key)
        if held is not None and held[0] != held[1]:
            found = (f"{self.what} {key}: a reader changed the cached object (peek and "
                     "peek_list hand out the cache's own; copy it first)")
            # Logged too: a reconciler a story runs as a process has no fixture to ask.
            log.error(found)
            self._found.append(found)
            self._kept[key] = (held[0], copy.deepcopy(held[0]))  # reported once


CHECKS: weakref.WeakSet[ReadCheck] = weakref.WeakSet()
