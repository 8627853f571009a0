"""Which clusters' objects a reconciler watches: a label selector that names its own clusters.

`reconciler.kube.cache.Caches` holds one `Selection` and runs it on a thread of its own. The
KaiwuCluster watch already holds only this reconciler's clusters (its namespace, its shard);
every other watch of what the clusters are made of (StatefulSets, Services, pods, claims,
Secrets, ...) is selected by `app.kubernetes.io/managed-by=kaiwu-operator,
app.kubernetes.io/instance in (NAMES)`, NAMES being the names of the clusters in that cache. So
a shard lists, watches and keeps only its own clusters' objects, and none of the rest of the
fleet's (docs/sharding.md; the figures: docs/performance.md). The label is one every rendered
object, pod and claim carries already (`renderer.builders.selector_labels`): nothing is
relabelled, so no pod rolls and no claim template changes when a cluster moves.

How the selector follows the clusters:
- When the set of names changes (a cluster made, deleted, moved in or out), the informers are
  `reselect`ed after `SETTLE_S` (changes that come together, as at a fleet's creation, make one
  relist): each lists again under the new selector, the difference delivered as events.
- A name counts as `listed` only once every selected informer holds what its new list
  returned. Until then the Caches do not let anyone act on that cluster (`Caches.owns`): a pass
  that read an empty cache would take the cluster's objects for missing. When names become
  listed, `on_listed` is told, and the Caches queue those clusters.
- A name that leaves stays selected for `GRACE_S`: the pass that tells of a deleted cluster
  reads what it kept (reconciler.controller.controller.Controller.tell_deleted), and a cluster
  moved back soon needs no relist.
- With no cluster, the selector matches nothing (`NOTHING`), and the informers hold nothing.

Names are not unique across namespaces: a cluster of the same name elsewhere is selected too
(its objects cached, its events ignored: it is not ours). The selector's length grows with the
shard: about 20 bytes a cluster, 10 KB at 500 (the request line; kube-apiserver accepts 1 MiB of
headers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from reconciler.kube.informer import Informer
from renderer.builders import INSTANCE_LABEL, MANAGED_BY_LABEL, MANAGED_SELECTOR

log = logging.getLogger(__name__)

SETTLE_S = 0.5  # changes to the set of names within this make one relist
GRACE_S = 60.0  # a name that left stays selected this long
CONFIRM_POLL_S = 0.05  # how often a relist in progress is looked at
# Matches no object: managed by us, and without the managed-by label.
NOTHING = f"{MANAGED_SELECTOR},!{MANAGED_BY_LABEL}"


def selector_for(names: Iterable[str]) -> str:
    """The label selector of the objects of the clusters named (any namespace in scope)."""
    wanted = sorted(set(names))
    if not wanted:
        return NOTHING
    return f"{MANAGED_SELECTOR},{INSTANCE_LABEL} in ({','.join(wanted)})"


class Selection:
    """Keeps the selected informers' selector equal to the names of the cached clusters."""

    def __init__(self, informers: Sequence[Informer], names: Callable[[], set[str]],
                 on_listed: Callable[[frozenset[str]], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.informers = informers
        self.names = names  # the names of the clusters in the KaiwuCluster cache, now
        self.on_listed = on_listed
        self.clock = clock
        self.listed: frozenset[str] = frozenset()  # every selected informer holds their objects
        self._asked: frozenset[str] | None = None  # what the informers were last asked for
        self._leaving: dict[str, float] = {}  # name -> when it stops being selected
        self._wake = threading.Event()

    def changed(self) -> None:
        """The set of cached clusters may have changed (a KaiwuCluster added or deleted)."""
        self._wake.set()

    def step(self) -> float | None:
        """Ask the informers for the names wanted now, and publish what they have listed.
        Returns how long until the next step is due by itself (None: only when changed)."""
        now = self.clock()
        current = self.names()
        for name in (self._asked or frozenset()) - current:
            self._leaving.setdefault(name, now + GRACE_S)
        for name in [n for n, until in self._leaving.items() if n in current or until <= now]:
            del self._leaving[name]
        wanted = frozenset(current | set(self._leaving))
        if wanted != self._asked:
            self._asked = wanted
            selector = selector_for(wanted)
            for informer in self.informers:
                informer.reselect(selector)
        selector = selector_for(self._asked)
        if any(i.listed_selector != selector and i.served is not False
               for i in self.informers):
            return CONFIRM_POLL_S  # a relist is in progress
        if self._asked != self.listed:
            added = self._asked - self.listed
            self.listed = self._asked
            if added:
                self.on_listed(added)
        if self._leaving:
            return max(min(self._leaving.values()) - now, CONFIRM_POLL_S)
        return None

    def run(self, ready: Callable[[float], bool], start: Callable[[], None],
            stop: threading.Event) -> None:
        """The thread's body: once `ready` (the KaiwuCluster cache has listed: it waits at most
        the time given), select, then `start` the selected informers, then follow every change
        until `stop`."""
        while not ready(0.1):
            if stop.is_set():
                return
        self._wake.clear()
        due = self.step()
        start()
        while not stop.is_set():
            if self._wake.wait(due):
                self._wake.clear()
                if stop.wait(SETTLE_S):  # gather the changes that come together
                    return
            try:
                due = self.step()
            except Exception:  # never let the thread die: the caches would stop following
                log.exception("selecting the watched clusters failed")
                due = 1.0
