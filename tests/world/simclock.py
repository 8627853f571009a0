"""Simulated time for the test world's KaiwuDB model.

The simulated kubelet (tests/world/kubelet.py) and the world facade (tests/world/simworld.py) hand
`SimClock.now()` to the simulated KaiwuDB, whose own timers (store death, re-replication) can run
faster than wall time. Kubernetes itself always runs on wall time: the real controllers cannot be
sped up, so kubelet timers (back-off, grace periods) stay in real seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimClock:
    """Monotonic seconds since the clock was made, multiplied by `speed`.

    speed 1.0 is wall time; 60.0 makes one real second count as one simulated minute.
    """

    speed: float = 1.0
    origin: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"SimClock speed must be positive, got {self.speed}")

    def now(self) -> float:
        """Simulated seconds elapsed since the clock started."""
        return (time.monotonic() - self.origin) * self.speed
