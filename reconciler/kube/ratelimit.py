"""How often the work queue may hand a cluster out: token buckets, one per cluster and one overall.

`reconciler.kube.workqueue.WorkQueue` asks `Limiter.reserve(key, now)` each time a wanted key
would be put in line; the answer is how long to hold it back (0: at once). A quiet cluster's
bucket is full, so the first event after quiet is served at once; during an event storm the
bucket empties and further events merge into the one waiting entry, so 50 edits cost about
`burst + rate x storm seconds + 1` reconciles. The overall bucket caps what the whole process
starts per second (a resync, a Node event touching many clusters).

A reservation may take the bucket below zero (as golang.org/x/time/rate's Reserve does): the
caller waits out the deficit, and the key, held back meanwhile, collects further events.

`Limits.fixed_interval(s)` is the limiter this replaced (a cluster at most once per `s`
seconds, echoes of its own writes included): a bucket of one token refilled every `s`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from reconciler.settings import Settings


@dataclass(frozen=True)
class Limits:
    """The two buckets' sizes and refill rates; `free_echoes`: whether the echo of our own
    write may skip the cluster's bucket (see WorkQueue.add). A key queued by `add_after`
    coming due (the Controller's requeue, a failure's back-off) pays only the overall bucket,
    as client-go's AddAfter bypasses the rate limiter, unless `charge_requeues`."""

    cluster_burst: float = 3.0
    cluster_rate_per_s: float = 1.0
    overall_burst: float = 200.0
    overall_rate_per_s: float = 50.0
    free_echoes: bool = True
    charge_requeues: bool = False  # add_after coming due pays too (only the old limiter)

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The limits the settings ask for (`min_reconcile_interval_s` > 0: the old one)."""
        if settings.min_reconcile_interval_s > 0:
            return cls.fixed_interval(settings.min_reconcile_interval_s)
        return cls(cluster_burst=float(settings.cluster_burst),
                   cluster_rate_per_s=settings.cluster_rate_per_s,
                   overall_burst=float(settings.overall_burst),
                   overall_rate_per_s=settings.overall_rate_per_s,
                   free_echoes=settings.free_echoes)

    @classmethod
    def fixed_interval(cls, interval_s: float) -> Limits:
        """The old limiter: one reconcile per cluster per interval, echoes charged."""
        return cls(cluster_burst=1.0, cluster_rate_per_s=1.0 / interval_s,
                   overall_burst=1e9, overall_rate_per_s=1e9, free_echoes=False,
                   charge_requeues=True)

    @classmethod
    def unlimited(cls) -> Limits:
        return cls(cluster_burst=1e9, cluster_rate_per_s=1e9, overall_burst=1e9,
                   overall_rate_per_s=1e9)


class TokenBucket:
    """`burst` tokens at most, `rate_per_s` added per second; starts full."""

    def __init__(self, burst: float, rate_per_s: float, now: float) -> None:
        self.burst = burst
        self.rate_per_s = rate_per_s
        self.tokens = burst
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate_per_s)
            self.updated = now

    def reserve(self, now: float) -> float:
        """Take one token; the seconds until it is really there (0: it was)."""
        self._refill(now)
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate_per_s

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst


class Limiter:
    """A bucket per key plus the overall one. Not thread-safe: the queue holds its lock."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._overall: TokenBucket | None = None
        self._buckets: dict[Hashable, TokenBucket] = {}

    def reserve(self, key: Hashable, now: float) -> float:
        """One reconcile of key: how long it must wait for both buckets."""
        limits = self.limits
        if self._overall is None:
            self._overall = TokenBucket(limits.overall_burst, limits.overall_rate_per_s, now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(limits.cluster_burst,
                                                      limits.cluster_rate_per_s, now)
        return max(bucket.reserve(now), self._overall.reserve(now))

    def reserve_overall(self, now: float) -> float:
        """A reconcile the cluster's bucket does not pay for (an echo): the overall one only."""
        if self._overall is None:
            self._overall = TokenBucket(self.limits.overall_burst,
                                        self.limits.overall_rate_per_s, now)
        return self._overall.reserve(now)

    def forget_full(self, now: float) -> None:
        """Drop buckets that are full again (a new one starts full): memory stays bounded by
        the clusters active lately, not every cluster ever seen."""
        for key in [key for key, bucket in self._buckets.items() if bucket.full(now)]:
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
