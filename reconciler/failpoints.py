"""Crash points: named places where a test can make the reconciler die at once, like SIGKILL.

The failover step (reconciler.kaiwudb.failover) calls `reached(name)` right after each write it
makes, before the pass writes status. A process started with `KAIWU_FAILPOINTS=name[,name...]` kills
itself there with SIGKILL (no clean-up, no status write, no Lease release), exactly as an OOM kill
or a node drain would; the crash-safety stories (tests/world_stories/failover/test_crash.py) start
a new reconciler after it and check that it carries on from what the cluster shows, with no step
done twice. Without the variable (always, in production) `reached` does nothing.

The names, one per write the failover step makes:
  failover.pod-force-deleted     a pod on a lost node (and its claim, when replaced) deleted
  failover.claim-deleted         a claim pinned to a lost node deleted (pod already gone)
  failover.pending-pod-deleted   a pending pod whose claim is gone deleted, to get a new claim
  failover.dead-node-decommissioned  the lost store's KaiwuDB node id decommissioned
  failover.crash-restart         a crash-looping pod deleted for a fresh start
"""

from __future__ import annotations

import logging
import os
import signal

ENV = "KAIWU_FAILPOINTS"
NAMES = frozenset({"failover.pod-force-deleted", "failover.claim-deleted",
                   "failover.pending-pod-deleted", "failover.dead-node-decommissioned",
                   "failover.crash-restart"})

log = logging.getLogger(__name__)


def enabled() -> frozenset[str]:
    """The crash points this process was started with (unknown names are refused: a typo in a
    test must not turn into a test that never crashes)."""
    names = frozenset(name.strip() for name in os.environ.get(ENV, "").split(",")
                      if name.strip())
    unknown = names - NAMES
    if unknown:
        raise ValueError(f"{ENV}: unknown crash point(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(NAMES))}")
    return names


_ENABLED = enabled()


def reached(name: str) -> None:
    """Die here, at once, if the process was started with this crash point."""
    assert name in NAMES, name
    if name in _ENABLED:
        log.warning("crash point reached: killing the process", extra={"failpoint": name})
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
