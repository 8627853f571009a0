"""Leader election on a coordination.k8s.io/v1 Lease, so two replicas never both write.

`reconciler.runtime.process` runs one `LeaderElector` per process: a standby tries to acquire the
Lease every retry period, the leader renews it; the runtime starts its workers when this replica
starts leading and stops them when it stops. The algorithm is client-go's: a Lease held by someone
else counts as valid until leaseDurationSeconds have passed since *we saw it change* (our own clock,
so clock skew between nodes does not matter); every write carries the resourceVersion read, so
two candidates cannot both win. A leader renews with one write of the Lease as it last wrote
it, and reads the Lease first only when that fails (client-go's fast path). A leader that could
not renew within the renew deadline, or
that sees another holder, stops leading at once; on shutdown it releases the Lease (empty
holder, 1 s duration) after its workers stopped, so a standby takes over at its next retry.

`GuardedKube` is the Kube the Controller writes through: every write first asks `may_write`
(the elector's `is_leader`, which also turns false the moment the renew deadline passes, even if
the renewing thread is stuck in a request), so a deposed leader's in-flight reconcile cannot
write after a successor may have started; and `owns_current` (the runtime: is the cluster this
worker reconciles still in this shard's cache), so a pass over a cluster that has just moved to
another shard stops at its next write.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from reconciler.kube.client import ApiError, Kube
from reconciler.kube.echo import OwnWrites
from reconciler.kube.kinds import LEASE
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings

log = logging.getLogger(__name__)


class NotLeaderError(RuntimeError):
    """A write was refused because this replica does not hold the leader Lease."""


class NotOwnerError(NotLeaderError):
    """A write was refused because the cluster it is for left this shard meanwhile."""


class GuardedKube(Kube):
    """A Kube whose writes (every POST, PUT, PATCH and DELETE, and exec) happen only while
    `may_write()` says so. Reads and server-side dry runs are always allowed. The check sits in
    the one request helper every call goes through, so helpers built on it (a JSON patch) are
    guarded too."""

    WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

    def __init__(self, api: Any, field_manager: str, timeout: float,
                 may_write: Callable[[], bool], own_writes: OwnWrites | None = None,
                 owns_current: Callable[[], bool] | None = None) -> None:
        super().__init__(api, field_manager, timeout, own_writes)
        self.may_write = may_write
        # Whether the cluster the calling worker reconciles is still this shard's.
        self.owns_current = owns_current

    def _check(self, what: str) -> None:
        if not self.may_write():
            raise NotLeaderError(f"{what} refused: this replica is not the leader")
        if self.owns_current is not None and not self.owns_current():
            raise NotOwnerError(f"{what} refused: the cluster has left this shard")

    def _request(self, method: str, path: str, *, body: Any = None,
                 query: list[tuple[str, Any]] | None = None,
                 content_type: str = "application/json",
                 timeout: float | tuple[float, float] | None = None) -> Any:
        if method.upper() in self.WRITE_METHODS and ("dryRun", "All") not in (query or []):
            self._check(f"{method} {path}")
        return super()._request(method, path, body=body, query=query,
                                content_type=content_type, timeout=timeout)

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        # kwbase commands include writes (init, node decommission): leader only.
        self._check("exec")
        return super().exec(namespace, pod, container, command, timeout)


class Attempt(Enum):
    """The outcome of one try to acquire or renew the Lease."""

    HELD = "held"  # we hold it (acquired or renewed)
    OTHER = "other"  # someone else holds a valid Lease
    FAILED = "failed"  # the API call failed or lost a race: try again


def _now_micro(wall: Callable[[], datetime]) -> str:
    # Lease times are MicroTime: RFC 3339 with exactly six fractional digits.
    return wall().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire, renew and release one Lease; call back on leadership changes."""

    def __init__(self, kube: Kube, settings: Settings, *,
                 on_started_leading: Callable[[], None],
                 on_stopped_leading: Callable[[], None],
                 metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.kube = kube
        self.settings = settings
        self.identity = settings.identity
        self.namespace = settings.effective_lease_namespace()
        self.name = settings.effective_lease_name()
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.metrics = metrics
        self._clock = clock
        self._wall = wall
        self._stop = threading.Event()
        self._transition = threading.Lock()  # one start/stop of leadership at a time
        self._thread: threading.Thread | None = None
        self._leading = False
        self._last_renew = -math.inf
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = -math.inf
        self.holder = ""  # the holder identity last seen
        self._held: Obj | None = None  # the Lease as our last successful write returned it
        self.became_leader_at: float | None = None  # clock() when leadership last started

    # ---- public -----------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def is_leader(self) -> bool:
        """True while we lead and the last renewal is younger than the renew deadline."""
        return self._leading and (
            self._clock() - self._last_renew < self.settings.renew_deadline_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; if leading, stop leading (callback first, so workers are done
        before anyone else may start) and release the Lease."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            # The loop wakes from its retry wait at once; a renewal in flight is bounded by the
            # elector Kube's short timeout.
            self._thread.join(self.settings.renew_deadline_s + 5)
        was_leading = self._stop_leading("shutting down")
        if release and was_leading:
            self._release()

    # ---- loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.settings.retry_period_s)

    def step(self) -> Attempt:
        """One round of the campaign (the loop runs one per retry period): try to acquire or
        renew the Lease, then start or stop leading as its outcome says."""
        try:
            attempt = self._try_acquire_or_renew()
        except Exception as error:  # connection refused, timeouts: retried next round
            log.warning("lease request failed", extra={
                "lease": f"{self.namespace}/{self.name}", "error": str(error)[:300]})
            attempt = Attempt.FAILED
        now = self._clock()
        if attempt is Attempt.HELD:
            self._last_renew = now
            if not self._leading and not self._stop.is_set():
                self._start_leading()
        elif self._leading:
            if attempt is Attempt.OTHER:
                self._stop_leading(f"lease taken by {self.holder}")
            elif now - self._last_renew >= self.settings.renew_deadline_s:
                self._stop_leading("could not renew the lease within the renew deadline")
        return attempt

    def _start_leading(self) -> None:
        with self._transition:
            if self._leading:
                return
            self._leading = True
            self.became_leader_at = self._clock()
        log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}",
                                         "identity": self.identity})
        if self.metrics is not None:
            self.metrics.leader.set(1)
            self.metrics.leader_transitions_total.inc()
        try:
            self.on_started_leading()
        except Exception:
            log.exception("starting to lead failed; giving up leadership")
            self._stop_leading("start failed")
            self._release()

    def _stop_leading(self, reason: str) -> bool:
        """Leave leadership (once); True when we were leading."""
        with self._transition:
            if not self._leading:
                return False
            self._leading = False
        if self.metrics is not None:
            self.metrics.leader.set(0)
        log.info("stopped leading", extra={"lease": f"{self.namespace}/{self.name}",
                                           "identity": self.identity, "reason": reason})
        try:
            self.on_stopped_leading()
        except Exception:
            log.exception("stopping to lead failed")
        return True

    # ---- the Lease --------------------------------------------------------------------------

    def _try_acquire_or_renew(self) -> Attempt:
        now = _now_micro(self._wall)
        duration = max(1, math.ceil(self.settings.lease_duration_s))
        if self.is_leader() and self._held is not None and self._renew_held(now, duration):
            return Attempt.HELD
        lease = self.kube.get(LEASE, self.namespace, self.name)
        if lease is None:
            try:
                created = self.kube.create({
                    "apiVersion": LEASE.api_version, "kind": LEASE.kind,
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": duration,
                             "acquireTime": now, "renewTime": now, "leaseTransitions": 0}})
            except ApiError as error:
                if error.conflict:  # another candidate created it first
                    return Attempt.FAILED
                raise
            self._observe(created)
            self._held = created
            return Attempt.HELD
        spec = lease.get("spec") or {}
        self._observe(lease)
        holder = str(spec.get("holderIdentity") or "")
        held_for = float(spec.get("leaseDurationSeconds") or duration)
        if holder and holder != self.identity \
                and self._observed_at + held_for > self._clock():
            self._held = None
            return Attempt.OTHER
        ours = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0)
        patch = {
            "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": duration,
                     "renewTime": now,
                     "acquireTime": spec.get("acquireTime") if ours else now,
                     "leaseTransitions": transitions if ours else transitions + 1}}
        try:
            updated = self.kube.patch(LEASE, self.namespace, self.name, patch)
        except ApiError as error:
            if error.conflict:  # it changed since we read it: someone else renewed or won
                return Attempt.FAILED
            raise
        self._observe(updated)
        self._held = updated
        return Attempt.HELD

    def _renew_held(self, now: str, duration: int) -> bool:
        """The leader's fast path (client-go's since 1.27, leaderelection.go "Failed to update
        lease optimistically, falling back to slow path"): renew the Lease as we last wrote it,
        one request instead of a read and a write, so a slow API server costs a renewal half the
        time. True when renewed; False after a conflict (someone changed the Lease since),
        which sends the caller down the slow path (read, then write) in the same round. Any
        other failure (a time-out) is raised: the round fails and the next one reads the Lease,
        so one round never takes more than two requests' time-outs."""
        held = self._held or {}
        spec = held.get("spec") or {}
        try:
            updated = self.kube.patch(LEASE, self.namespace, self.name, {
                "metadata": {"resourceVersion": held["metadata"]["resourceVersion"]},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": duration,
                         "renewTime": now, "acquireTime": spec.get("acquireTime"),
                         "leaseTransitions": int(spec.get("leaseTransitions") or 0)}})
        except ApiError as error:
            self._held = None
            if not error.conflict:
                raise
            log.info("the lease changed since we last wrote it; reading it", extra={
                "lease": f"{self.namespace}/{self.name}"})
            return False
        except Exception:
            self._held = None  # the next round reads the Lease first
            raise
        self._observe(updated)
        self._held = updated
        return True

    def _observe(self, lease: Obj) -> None:
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  spec.get("leaseDurationSeconds"), spec.get("acquireTime"),
                  spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock()
        self.holder = str(spec.get("holderIdentity") or "")

    def _release(self) -> None:
        """Give the Lease up so a standby need not wait for it to expire."""
        for _ in range(3):
            try:
                lease = self.kube.get(LEASE, self.namespace, self.name)
                if lease is None or (lease.get("spec") or {}).get("holderIdentity") \
                        != self.identity:
                    return
                now = _now_micro(self._wall)
                self.kube.patch(LEASE, self.namespace, self.name, {
                    "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                    "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                             "renewTime": now, "acquireTime": now}})
                log.info("released the lease", extra={
                    "lease": f"{self.namespace}/{self.name}", "identity": self.identity})
                return
            except ApiError as error:
                if not error.conflict:
                    log.warning("releasing the lease failed; it expires by itself",
                                extra={"error": str(error)[:300]})
                    return
            except Exception as error:
                log.warning("releasing the lease failed; it expires by itself",
                            extra={"error": str(error)[:300]})
                return
