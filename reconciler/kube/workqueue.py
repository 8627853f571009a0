"""The work queue between the watch caches and the workers: one entry per cluster, never two.

The runtime's event handlers `add` a cluster's key for every event of every object of that
cluster; workers `get` a key, reconcile it and call `done`. What makes an event storm cost one
reconcile per cluster:
- de-duplication: a key already waiting is not queued twice;
- a key being reconciled is not handed to a second worker; if it is added meanwhile it is
  reconciled once more afterwards (the events may have come after the reconcile read the cache);
- rate limiting (reconciler.kube.ratelimit): a token bucket per key plus an overall one. A quiet
  key is handed out at once; once its bucket is empty it is held back until a token is due, and
  the events of the burst collect behind it and are all served by that one reconcile.
- echoes: `add(key, echo=True)` (the watch event of our own write, or another controller's
  status report on an object whose spec change was already paid for) queues the key without
  spending its token, so the reconciles after a repair never delay the next repair. At most
  `FREE_PER_PAID` free reconciles follow each paid one, so a pass that keeps rewriting its own
  objects is still rate limited.
Failures back off per key (`add_rate_limited`, doubling up to a cap; `forget` resets), and
`add_after` schedules a key for later (the Controller's requeue_after); a key coming due that
way pays only the overall bucket (client-go's AddAfter bypasses the rate limiter too).
Thread-safe; the clock is injectable for tests.

Given `Metrics`, the queue feeds the workqueue_* families under its `name` (as client-go's queues
do for controller-runtime): depth, adds that queued a key (merged adds are not counted), the
time each key waited between being queued and handed out, the time from `get` to `done`,
failure back-offs (retries), and the work in progress (unfinished seconds, longest running).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from reconciler.kube.ratelimit import Limiter, Limits
from reconciler.metrics import Metrics

K = TypeVar("K", bound=Hashable)
# Free reconciles (echoes) allowed after each paid one: the echo of the repair and the
# StatefulSet controller's status report on it may each arrive after a pass ended.
FREE_PER_PAID = 2
_ADD, _RELEASE = 0, 1


class WorkQueue(Generic[K]):
    """A de-duplicating, rate-limited, delaying queue of keys."""

    def __init__(self, *, limits: Limits | None = None, backoff_base_s: float = 1.0,
                 backoff_max_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 metrics: Metrics | None = None, name: str = "kaiwucluster") -> None:
        self.limits = limits if limits is not None else Limits.unlimited()
        self._limiter = Limiter(self.limits)
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._clock = clock
        self._cond = threading.Condition()
        self._ready: deque[K] = deque()  # handed out in this order
        self._dirty: set[K] = set()  # wanted: in _ready, or waiting for its turn or its worker
        self._processing: set[K] = set()
        # Heap of (due, seq, key, what): _ADD a key asked for later (add_after), or _RELEASE a
        # wanted key held back by the rate limit.
        self._delayed: list[tuple[float, int, K, int]] = []
        self._due: dict[K, float] = {}  # earliest pending add_after of each key
        self._held: dict[K, float] = {}  # wanted keys held back by the rate limit, until when
        self._echo_only: set[K] = set()  # wanted only because of echoes of our own writes
        self._requeued: set[K] = set()  # wanted by an add_after coming due (not a new event)
        self._echo_credit: dict[K, int] = {}  # free reconciles left since the last paid one
        self.throttled = 0  # times a wanted key was held back for want of a token
        self._failures: dict[K, int] = {}
        self._seq = itertools.count()
        self._shutdown = False
        self._queued_at: dict[K, float] = {}  # when each wanted key was queued
        self._started_at: dict[K, float] = {}  # when each key being processed was handed out
        self._metrics = metrics
        self.name = name
        if metrics is not None:
            metrics.workqueue_depth.labels(name).set_function(lambda: self.depth)
            metrics.workqueue_unfinished_work_seconds.labels(name).set_function(
                self._unfinished_s)
            metrics.workqueue_longest_running_processor_seconds.labels(name).set_function(
                self._longest_running_s)
            # Present from the start, so rate() sees the first increments.
            metrics.workqueue_adds.labels(name)
            metrics.workqueue_retries.labels(name)

    # ---- producers --------------------------------------------------------------------------

    def add(self, key: K, echo: bool = False) -> None:
        """Queue key (once, however often it is added before a worker takes it). `echo`: the
        event was our own write coming back; with `Limits.free_echoes` it spends no token of
        the key's bucket, once per paid reconcile."""
        with self._cond:
            self._add_locked(key, echo and self.limits.free_echoes)

    def add_after(self, key: K, delay_s: float) -> None:
        """Queue key once delay_s has passed (at the earliest of several such requests)."""
        if delay_s <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            due = self._clock() + delay_s
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            heapq.heappush(self._delayed, (due, next(self._seq), key, _ADD))
            self._cond.notify_all()

    def add_rate_limited(self, key: K) -> float:
        """Queue key after its failure back-off (base, 2x base, ... up to the cap); returns
        the delay chosen."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        if self._metrics is not None:
            self._metrics.workqueue_retries.labels(self.name).inc()
        delay = min(self.backoff_base_s * float(2 ** min(failures, 62)), self.backoff_max_s)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the back-off from the base again."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # ---- consumers --------------------------------------------------------------------------

    def get(self, timeout_s: float | None = None) -> K | None:
        """The next key to work on, marked as being processed; None on timeout or shutdown."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                now = self._clock()
                self._promote_locked(now)
                if self._ready:
                    key = self._ready.popleft()
                    self._dirty.discard(key)
                    self._echo_only.discard(key)
                    self._requeued.discard(key)
                    self._processing.add(key)
                    self._started_at[key] = now
                    queued = self._queued_at.pop(key, None)
                    if self._metrics is not None and queued is not None:
                        self._metrics.workqueue_queue_duration_seconds.labels(
                            self.name).observe(max(now - queued, 0.0))
                    return key
                wait = None if deadline is None else deadline - now
                if wait is not None and wait <= 0:
                    return None
                if self._delayed:
                    until_due = max(self._delayed[0][0] - now, 0.001)
                    wait = until_due if wait is None else min(wait, until_due)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        """The worker finished key; if it was added meanwhile, it is queued again."""
        with self._cond:
            self._processing.discard(key)
            started = self._started_at.pop(key, None)
            if self._metrics is not None and started is not None:
                self._metrics.workqueue_work_duration_seconds.labels(self.name).observe(
                    max(self._clock() - started, 0.0))
            if key in self._dirty and not self._shutdown:
                self._schedule_locked(key)

    def shutdown(self) -> None:
        """Wake every waiting worker; get returns None from now on, adds are dropped."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    @property
    def depth(self) -> int:
        """Keys waiting (queued, delayed or to be redone), each counted once."""
        with self._cond:
            return len(self._dirty | set(self._due))

    def processing(self) -> int:
        with self._cond:
            return len(self._processing)

    def _unfinished_s(self) -> float:
        with self._cond:
            now = self._clock()
            return sum(now - started for started in self._started_at.values())

    def _longest_running_s(self) -> float:
        with self._cond:
            now = self._clock()
            return max((now - started for started in self._started_at.values()), default=0.0)

    # ---- internals --------------------------------------------------------------------------

    def _add_locked(self, key: K, echo: bool = False, requeue: bool = False) -> None:
        if self._shutdown:
            return
        if key in self._dirty:
            if requeue and key in self._echo_only:
                self._requeued.add(key)
            elif not echo and not requeue:
                # Now wanted for a reason of its own: pays.
                self._echo_only.discard(key)
                self._requeued.discard(key)
            return  # already wanted: merged with the pending request
        self._dirty.add(key)
        if echo:
            self._echo_only.add(key)
        if requeue:
            self._requeued.add(key)
        self._queued_at[key] = self._clock()
        if self._metrics is not None:
            self._metrics.workqueue_adds.labels(self.name).inc()
        if key in self._processing:
            return  # done() schedules it again
        self._schedule_locked(key)

    def _schedule_locked(self, key: K) -> None:
        """Put a wanted key (not being processed) in line, no sooner than its buckets allow."""
        now = self._clock()
        if key in self._requeued and not self.limits.charge_requeues:
            # A look the last reconcile asked for (client-go's AddAfter): its own schedule.
            wait = self._limiter.reserve_overall(now)
        elif key in self._echo_only and self._echo_credit.get(key, 0) > 0:
            # Only our own write came back: the paid reconcile before it covers this one.
            self._echo_credit[key] -= 1
            wait = self._limiter.reserve_overall(now)
        else:
            self._echo_credit[key] = FREE_PER_PAID
            wait = self._limiter.reserve(key, now)
        if len(self._limiter) > 2 * len(self._dirty | self._processing) + 1024:
            self._limiter.forget_full(now)
        if wait > 0:
            # No token yet: held back, still dirty, so further adds merge into this one.
            self.throttled += 1
            due = now + wait
            self._held[key] = due
            heapq.heappush(self._delayed, (due, next(self._seq), key, _RELEASE))
        else:
            self._ready.append(key)
        self._cond.notify_all()

    def _promote_locked(self, now: float) -> None:
        """Act on delayed entries whose time has come."""
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key, what = heapq.heappop(self._delayed)
            if what == _ADD:
                if self._due.get(key) == due:  # else superseded by an earlier request
                    del self._due[key]
                    self._add_locked(key, requeue=True)
            elif self._held.get(key) == due:
                del self._held[key]
                self._ready.append(key)
