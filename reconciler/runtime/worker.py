"""A worker of the reconciler process: takes cluster keys from the work queue while this replica
leads, and reconciles each; each reconcile's outcome feeds the metrics and the queue (success
forgets the key's failure back-off and honours `requeue_after_s`; an exception is logged,
counted and retried with per-key exponential back-off; lost leadership or a cluster moved to
another shard is left to whoever has it now).

Used by reconciler.runtime.process (Runtime starts `settings.workers` of them per leadership term).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from reconciler.keys import ClusterKey
from reconciler.kube.cache import Caches
from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.kube.leader import NotLeaderError, NotOwnerError
from reconciler.kube.workqueue import WorkQueue
from reconciler.metrics import Metrics

log = logging.getLogger("reconciler.runtime.process")  # the process's log, as before


class Reconciler(Protocol):
    """What the runtime needs of the Controller. The result may carry `requeue_after_s`."""

    def reconcile(self, key: ClusterKey) -> Any: ...


@dataclass(frozen=True)
class Worker:
    """What a worker reconciles with; `current.key` is the cluster its thread reconciles (the
    guarded client refuses writes for it once it leaves this shard)."""

    controller: Reconciler
    caches: Caches
    queue: WorkQueue[ClusterKey]
    metrics: Metrics
    current: threading.local

    def run(self, stop: threading.Event) -> None:
        """Take keys from the queue and reconcile them until `stop` is set; a key taken as
        the term ends is left queued for the next term."""
        while not stop.is_set():
            key = self.queue.get(timeout_s=0.2)
            if key is None:
                continue
            if stop.is_set():
                # Not ours to do any more: leave it queued for the next term.
                self.queue.done(key)
                self.queue.add(key)
                return
            self.process(key)

    def process(self, key: ClusterKey) -> None:
        """Reconcile one cluster; its outcome feeds the metrics and the queue."""
        if not self.caches.owns(key) \
                and self.caches.informers[KAIWU_CLUSTER].has(key.namespace, key.name):
            # Being handed over from another shard: the handover's add_after brings it back.
            self.queue.done(key)
            return
        started = time.monotonic()
        self.current.key = key
        try:
            result = self.controller.reconcile(key)
        except NotOwnerError as error:
            log.info("reconcile stopped: the cluster moved to another shard",
                     extra={"cluster": str(key), "error": str(error)})
        except NotLeaderError as error:
            # Leadership ended mid-reconcile; the next leader reconciles the cluster.
            log.info("reconcile stopped: no longer leader",
                     extra={"cluster": str(key), "error": str(error)})
        except Exception as error:
            self.metrics.reconcile_total.labels(result="error").inc()
            self.metrics.errors_total.labels(stage="reconcile").inc()
            retry = self.queue.add_rate_limited(key)
            log.exception("reconcile failed", extra={
                "cluster": str(key), "error": str(error)[:500], "retry_in_s": retry})
        else:
            self.metrics.reconcile_total.labels(result="success").inc()
            self.queue.forget(key)
            requeue = getattr(result, "requeue_after_s", None)
            if requeue is not None:
                self.queue.add_after(key, float(requeue))
        finally:
            self.current.key = None
            elapsed = time.monotonic() - started
            self.metrics.reconcile_duration_seconds.observe(elapsed)
            self.queue.done(key)
            log.debug("reconciled", extra={"cluster": str(key),
                                           "duration_s": round(elapsed, 4)})
