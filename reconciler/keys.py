"""The keys of the reconciler: one KaiwuCluster (the work queue's key) and one object it applies.

The runtime (cache event handlers, work queue, workers) builds ClusterKeys from watch events and
hands them to `Controller.reconcile`; the controller turns them back into cache lookups. A key
is only the cluster's namespace and name: everything else is read fresh from the caches, so a key
queued long ago never carries stale state. ObjectRefs name the objects the controller applies
(its fight tracker, dry-run cache and the status inventory use them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class ClusterKey:
    """One KaiwuCluster: its namespace and name (hashable, ordered, printable as ns/name)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, order=True)
class ObjectRef:
    """One object the reconciler applies: enough to find it in the caches and the API.

    Its text form, `apiVersion/Kind/namespace/name` (e.g. `apps/v1/StatefulSet/db/orders`), is
    what KaiwuCluster `status.inventory` lists; `parse` reads it back (the apiVersion may itself
    contain a slash, so the text is split from the right).
    """

    api_version: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind}/{self.namespace}/{self.name}"

    @property
    def short(self) -> str:
        """`Kind/name`, for messages about objects of one cluster (one namespace)."""
        return f"{self.kind}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ObjectRef:
        parts = text.rsplit("/", 3)
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"{text!r} is not apiVersion/Kind/namespace/name")
        return cls(*parts)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("apiVersion", "")), str(obj.get("kind", "")),
                   str(meta.get("namespace") or ""), str(meta.get("name", "")))
