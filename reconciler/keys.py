"""The key that names one KaiwuCluster in the reconciler's work queue.

The runtime (cache event handlers, work queue, workers) builds ClusterKeys from watch events and
hands them to `Controller.reconcile`; the controller turns them back into cache lookups. A key
is only the cluster's namespace and name: everything else is read fresh from the caches, so a key
queued long ago never carries stale state.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class ClusterKey:
    """One KaiwuCluster: its namespace and name (hashable, ordered, printable as ns/name)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
