"""Kubernetes Events about a KaiwuCluster, written the way client-go's recorder writes them.

The Controller (reconciler.controller) calls `EventRecorder.emit` only for transitions and actions
(a condition changed, an object was repaired, created or pruned), never once per pass, so a quiet
cluster costs no Event writes. A repeat of the same event (same cluster, type, reason and message)
within `correlation_s` is folded into the existing Event: its `count` and `lastTimestamp` are
patched, as `kubectl get events` users expect, instead of a new object being made.

Events are v1 (core) Events with the KaiwuCluster as involvedObject, `source.component` and
`reportingComponent` both the reconciler's component name. Failing to write an Event never fails
a reconcile: the error is counted (errors_total{stage="event"}) and logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reconciler.kube.client import ApiError, Kube
from reconciler.kube.kinds import EVENT
from reconciler.metrics import Metrics
from reconciler.model import EventType, Obj, rfc3339
from reconciler.status import clip

log = logging.getLogger(__name__)

COMPONENT = "kaiwu-reconciler"
# The API server accepts longer messages, but Events are for people: the full drift report goes
# to the log and the status; an Event says what happened in a screenful at most.
MESSAGE_LIMIT = 1024


def truncate(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text`, or its start marked as cut, at most `limit` characters in all (status.clip)."""
    return clip(text, limit)


@dataclass(frozen=True)
class Emitted:
    """One event as recorded, for tests and logs."""

    type: EventType
    reason: str
    message: str
    count: int


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    last_at: float


class EventRecorder:
    """Writes Events for KaiwuClusters; remembers recent ones to aggregate repeats."""

    def __init__(self, kube: Kube, metrics: Metrics, *, clock: Callable[[], float] = time.time,
                 component: str = COMPONENT, instance: str = "",
                 correlation_s: float = 600.0) -> None:
        self.kube = kube
        self.metrics = metrics
        self.clock = clock
        self.component = component
        self.instance = instance
        self.correlation_s = correlation_s
        self._seen: dict[tuple[str, str, str, str], _Seen] = {}
        self.emitted: list[Emitted] = []  # what this recorder wrote, newest last (bounded)

    def emit(self, cluster: Obj, type_: EventType, reason: str, message: str) -> None:
        """Record one event about `cluster` (a KaiwuCluster object)."""
        meta = cluster.get("metadata") or {}
        message = truncate(message)
        uid = str(meta.get("uid", ""))
        key = (uid, type_, reason, message)
        now = self.clock()
        stamp = rfc3339(now)
        self._expire(now)
        seen = self._seen.get(key)
        try:
            if seen is not None:
                seen.count += 1
                seen.last_at = now
                patched = self._patch(seen, stamp)
                if patched:
                    self._note(type_, reason, message, seen.count)
                    return
            name = f"{meta.get('name', 'kaiwucluster')}.{time.time_ns():x}"
            namespace = str(meta.get("namespace") or "default")
            self.kube.create(self._body(cluster, name, namespace, type_, reason, message, stamp))
            self._seen[key] = _Seen(name, namespace, 1, now)
            self._note(type_, reason, message, 1)
        except ApiError as error:
            # An Event is a courtesy to people; the reconcile goes on without it.
            self.metrics.errors_total.labels(stage="event").inc()
            log.warning("could not write event %s %s for %s/%s: %s", type_, reason,
                        meta.get("namespace"), meta.get("name"), error)

    def _patch(self, seen: _Seen, stamp: str) -> bool:
        """Bump count and lastTimestamp of an Event we wrote; False when it is gone (expired)."""
        try:
            self.kube.patch(EVENT, seen.namespace, seen.name,
                            {"count": seen.count, "lastTimestamp": stamp})
        except ApiError as error:
            if error.not_found:
                return False
            raise
        return True

    def _body(self, cluster: Obj, name: str, namespace: str, type_: EventType, reason: str,
              message: str, stamp: str) -> Obj:
        meta = cluster.get("metadata") or {}
        involved: dict[str, Any] = {
            "apiVersion": cluster.get("apiVersion"), "kind": cluster.get("kind"),
            "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid"),
        }
        if meta.get("resourceVersion"):
            involved["resourceVersion"] = meta["resourceVersion"]
        body: Obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "type": type_, "reason": reason, "message": message,
            "count": 1, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": self.component},
            "reportingComponent": self.component,
        }
        if self.instance:
            body["reportingInstance"] = self.instance
        return body

    def _expire(self, now: float) -> None:
        for key in [k for k, seen in self._seen.items()
                    if now - seen.last_at > self.correlation_s]:
            del self._seen[key]

    def _note(self, type_: EventType, reason: str, message: str, count: int) -> None:
        self.emitted.append(Emitted(type_, reason, message, count))
        del self.emitted[:-200]
        log.info("event %s %s: %s", type_, reason, message)
