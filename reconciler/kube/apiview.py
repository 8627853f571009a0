"""`ApiView`: the `CacheView` reads answered by the API server itself, for the rare reader of a
cluster whose objects the caches do not hold.

The caches hold only this reconciler's clusters' objects (reconciler.kube.selection). The
admission webhook judges every KaiwuCluster of the fleet, whichever shard owns it
(reconciler.runtime.webhook.decider): for another shard's cluster it reads the StatefulSet and
pods through this view, one GET and one list per review. Every answer is the caller's own
(`peek` and `get` alike): nothing here is shared.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping

from reconciler.kube.client import Kube
from reconciler.kube.kinds import Kind
from reconciler.model import Obj


class ApiView:
    """CacheView over `kube` (reconciler.kube.cache.CacheView)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return self.kube.get(kind, namespace or None, name)

    def peek(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        return self.get(kind, namespace, name)

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        return self.kube.list_objects(kind, namespace or None, selector or None)[0]

    def peek_list(self, kind: Kind, namespace: str,
                  labels: Mapping[str, str] = {}) -> builtins.list[Obj]:
        return self.list(kind, namespace, labels)
