"""Fight detection: when someone keeps changing an object back, repair it less and less often.

The Controller (reconciler.controller) asks a `FightTracker` before repairing a drifted object
(`wait_s`: 0 means go ahead) and tells it about every repair (`record_repair`) and every pass that
found the object in sync (`record_in_sync`). Repairs of one object inside `window_s` are counted;
from the `threshold`-th on, the object is "fought over": every further repair is followed by a
back-off that doubles each time (base, 2*base, 4*base ... up to max), so a fight costs a number of
writes that grows with the logarithm of its length, never one write per change. The fight ends
once the object has stayed as rendered for a whole window after the last repair.

State lives in memory: a reconciler restart forgets fights, which costs at most `threshold` more
repairs before the back-off is back. Pure logic (the clock is passed in), so tests drive it with
a fake clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from reconciler.keys import ClusterKey, ObjectRef


@dataclass(frozen=True)
class BackoffPolicy:
    """Settings.fight_threshold, fight_window_s, drift_backoff_base_s and drift_backoff_max_s."""

    threshold: int = 5
    window_s: float = 60.0
    base_s: float = 1.0
    max_s: float = 300.0

    def delay(self, strikes: int) -> float:
        """Back-off after the `strikes`-th repair of a fight (1 -> base, 2 -> 2*base, ...)."""
        if strikes <= 0:
            return 0.0
        # min() before the power would overflow for long fights; 2**60 s is far beyond max_s.
        return min(self.max_s, self.base_s * 2.0 ** min(strikes - 1, 60))


@dataclass(frozen=True)
class FightState:
    """One object's recent repairs (times) and how far its back-off has grown."""

    repairs: tuple[float, ...] = ()
    strikes: int = 0
    blocked_until: float = 0.0
    # Why it counts as a fight: the last drift we repaired, for the Event and Stalled message.
    last_drift: str = ""

    @property
    def fighting(self) -> bool:
        return self.strikes > 0


@dataclass
class FightTracker:
    """Per-object repair history of every cluster this reconciler handles, shared by the
    workers (each reconciling other clusters): every method holds the lock."""

    policy: BackoffPolicy
    clock: Callable[[], float]
    _states: dict[tuple[ClusterKey, ObjectRef], FightState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def state(self, key: ClusterKey, ref: ObjectRef) -> FightState:
        with self._lock:
            return self._states.get((key, ref), FightState())

    def wait_s(self, key: ClusterKey, ref: ObjectRef) -> float:
        """Seconds until a repair of `ref` is allowed again (0: now)."""
        return max(0.0, self.state(key, ref).blocked_until - self.clock())

    def record_repair(self, key: ClusterKey, ref: ObjectRef, drift: str) -> FightState:
        """A repair of `ref` was written; returns its state (fighting, and blocked until when)."""
        now = self.clock()
        old = self.state(key, ref)
        recent = (*(t for t in old.repairs if now - t < self.policy.window_s), now)
        strikes = old.strikes
        blocked_until = old.blocked_until
        if len(recent) >= self.policy.threshold:
            strikes += 1
            blocked_until = now + self.policy.delay(strikes)
        # Only the last `threshold` repairs can matter for the count.
        new = FightState(recent[-self.policy.threshold:], strikes, blocked_until, drift)
        with self._lock:
            self._states[(key, ref)] = new
        return new

    def record_in_sync(self, key: ClusterKey, ref: ObjectRef) -> FightState:
        """`ref` was found as rendered. A whole quiet window after the last repair ends a fight
        (and forgets the object); returns the state after that."""
        with self._lock:
            old = self._states.get((key, ref))
            if old is None:
                return FightState()
            last = old.repairs[-1] if old.repairs else 0.0
            if self.clock() - last >= self.policy.window_s:
                del self._states[(key, ref)]
                return FightState()
            return old

    def quiet_in_s(self, key: ClusterKey, ref: ObjectRef) -> float:
        """Seconds until a fight over `ref` ends if nobody changes it again (0: not fighting)."""
        old = self.state(key, ref)
        if not old.fighting or not old.repairs:
            return 0.0
        return max(0.0, old.repairs[-1] + self.policy.window_s - self.clock())

    def fights(self, key: ClusterKey) -> dict[ObjectRef, FightState]:
        """The objects of one cluster that are being fought over right now."""
        with self._lock:
            return {ref: state for (owner, ref), state in self._states.items()
                    if owner == key and state.fighting}

    def forget(self, key: ClusterKey) -> None:
        """Drop everything about one cluster (it was deleted)."""
        with self._lock:
            for entry in [entry for entry in self._states if entry[0] == key]:
                del self._states[entry]
