"""Exec into the simulated KaiwuDB directly (no Kubernetes in between), reporting results the way
`reconciler.kube.client.Kube.exec` does, for the fast tier's admin adapters.

Used by tests/unit/reconciler/kaiwudb/test_kwbase.py and tests/support/backup_world.py. Time is
simulated: `now` is the test's clock, which it moves. A pod with no process is refused by the API
server (404), as a missing pod is. A command that would outlive the time-out comes back without
an exit status (-1). One that prints only when it ends (a long EXPORT or IMPORT, ExecResult.
answers_at_end) keeps its caller waiting, as the real exec does, until the test's clock reaches
its end (or the time-out, when it comes back empty); a caller still waiting after
`real_wait_cap_s` real seconds is a test that forgot to move the clock, and fails loudly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from tests.world.kwdb.state import ClusterKey
from tests.world.kwdb.world import KwdbWorld


def by_pod_name(namespace: str, pod: str) -> ClusterKey:
    """The cluster of a StatefulSet pod: its name without the ordinal (<cluster>-<i>)."""
    return (namespace, pod.rsplit("-", 1)[0])


@dataclass
class SimExec:
    world: KwdbWorld
    cluster_of: Callable[[str, str], ClusterKey] = by_pod_name
    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    real_wait_cap_s: float = 20.0
    _now: float = 0.0
    _moved: threading.Condition = field(default_factory=threading.Condition)

    @property
    def now(self) -> float:
        return self._now

    @now.setter
    def now(self, seconds: float) -> None:
        with self._moved:
            self._now = seconds
            self._moved.notify_all()

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        assert container == "kwbase"
        self.calls.append((pod, command))
        key = self.cluster_of(namespace, pod)
        if not self.world.logs(key, pod):
            raise ApiException(status=404, reason="Not Found")
        started = self.now
        result = self.world.exec(key, pod, command, started)
        if result.answers_at_end and result.duration_s > 0:
            self._wait_until(started + min(result.duration_s, timeout))
        if result.duration_s > timeout:
            if result.answers_at_end:  # the client waited, then gave up: no answer
                return "", "", -1
            return result.stdout, result.stderr, -1
        if result.conclude is not None:  # what the client prints when the statement ends
            result = result.conclude(started + result.duration_s)
        return result.stdout, result.stderr, result.exit_code

    def _wait_until(self, end: float) -> None:
        with self._moved:
            if not self._moved.wait_for(lambda: self._now >= end, self.real_wait_cap_s):
                raise AssertionError(f"an exec waits for simulated time {end:g}, the test's "
                                     f"clock stays at {self._now:g}")
