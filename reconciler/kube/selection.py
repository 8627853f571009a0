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
  `reselect`ed after `SETTLE_S`: each lists again under the new selector, the difference
  delivered as events. One relist at a time: changes that come while one is in progress (a
  fleet made by one `kubectl apply`) wait for it to end and are then asked for together.
- A name counts as `listed` once every selected informer holds what a list under a selector
  naming it returned (an earlier relist's names count as soon as it ends, so a burst of new
  clusters is acted on batch by batch). Until then the Caches do not let anyone act on that
  cluster (`Caches.owns`): a pass that read an empty cache would take the cluster's objects for
  missing. When names become listed, `on_listed` is told, and the Caches queue those clusters. A
  name no longer wanted stops counting at once.
- A name that leaves stays selected for `GRACE_S`: the pass that tells of a deleted cluster
  reads what it kept (reconciler.controller.controller.Controller.tell_deleted), and a cluster
  moved back soon needs no relist.
- With no cluster, the selector matches nothing (`NOTHING`), and the informers hold nothing.

Names are not unique across namespaces: a cluster of the same name elsewhere is selected too
(its objects cached, its events ignored: it is not ours). A name that is not a label value (over
63 characters: the API server stores KaiwuClusters the renderer refuses when the webhook is
bypassed) is left out: no object can carry it, and the API server would refuse the whole
selector. The selector's length grows with the shard: the name and 3 bytes a cluster (the comma
travels as %2C), about 10 KB at 500 clusters of 17-character names, 22 KB at 40 characters (the
request line: kube-apiserver accepts 1 MiB of headers; a proxy in front of it may accept less).
"""

from __future__ import annotations

import logging
import re
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
# A label value (apimachinery's validation.IsValidLabelValue): at most 63 characters.
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def selectable(name: str) -> bool:
    """Whether objects can carry `name` as their instance label (and a selector can name it)."""
    return bool(name) and bool(_LABEL_VALUE.match(name))


def selector_for(names: Iterable[str]) -> str:
    """The label selector of the objects of the clusters named (any namespace in scope)."""
    wanted = sorted({name for name in names if selectable(name)})
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
        self._names_of: dict[str, frozenset[str]] = {NOTHING: frozenset()}  # selector -> names
        self._leaving: dict[str, float] = {}  # name -> when it stops being selected
        self._refused: set[str] = set()  # names no label can carry, each logged once
        self._wake = threading.Event()

    def changed(self) -> None:
        """The set of cached clusters may have changed (a KaiwuCluster added or deleted)."""
        self._wake.set()

    def step(self) -> float | None:
        """Ask the informers for the names wanted now (unless a relist is in progress), and
        publish what they have listed. Returns how long until the next step is due by itself
        (None: only when changed)."""
        now = self.clock()
        names = self.names()
        current = {name for name in names if selectable(name)}
        for name in sorted(names - current - self._refused):
            self._refused.add(name)
            log.warning("KaiwuCluster name is not a label value: it is not reconciled; delete "
                        "it and apply it again with a name of at most 40 characters "
                        "(kaiwu validate names the rule)", extra={"cluster_name": name[:300]})
        for name in (self._asked or frozenset()) - current:
            self._leaving.setdefault(name, now + GRACE_S)
        for name in [n for n, until in self._leaving.items() if n in current or until <= now]:
            del self._leaving[name]
        wanted = frozenset(current | set(self._leaving))
        in_flight = self._asked is not None and self._relisting(selector_for(self._asked))
        if not in_flight and wanted != self._asked:
            self._asked = wanted
            selector = selector_for(wanted)
            self._names_of = {NOTHING: frozenset(), selector: wanted, **{
                i.listed_selector: self._names_of[i.listed_selector] for i in self.informers
                if i.listed_selector in self._names_of}}
            for informer in self.informers:
                informer.reselect(selector)
            in_flight = self._relisting(selector)
        held = wanted
        for informer in self.informers:
            if informer.served is not False:
                held = held & self._names_of.get(informer.listed_selector or "", frozenset())
        added = held - self.listed
        self.listed = held
        if added:
            self.on_listed(added)
        if in_flight or wanted != self._asked:
            return CONFIRM_POLL_S  # a relist in progress, or one to ask for after it
        if self._leaving:
            return max(min(self._leaving.values()) - now, CONFIRM_POLL_S)
        return None

    def _relisting(self, selector: str) -> bool:
        return any(i.listed_selector != selector and i.served is not False
                   for i in self.informers)

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
