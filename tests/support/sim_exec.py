"""Exec into the simulated KaiwuDB directly (no Kubernetes in between), reporting results the way
`reconciler.kube.Kube.exec` does, for the fast tier's admin adapters.

Used by tests/unit/reconciler/kaiwudb/test_kwbase.py and backup_world.py. Time is simulated:
`now` is when the next command starts. A pod with no process is refused by the API server (404),
as a missing pod is. A command that would outlive the time-out comes back without an exit
status (-1); one that prints only when it ends (a long EXPORT or IMPORT, ExecResult.
answers_at_end) then comes back empty, and the client's clock moves on by what it waited.
"""

from __future__ import annotations

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
    now: float = 0.0
    calls: list[tuple[str, list[str]]] = field(default_factory=list)

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        assert container == "kwbase"
        self.calls.append((pod, command))
        key = self.cluster_of(namespace, pod)
        if not self.world.logs(key, pod):
            raise ApiException(status=404, reason="Not Found")
        result = self.world.exec(key, pod, command, self.now)
        if result.duration_s > timeout:
            if result.answers_at_end:  # the client waited, then gave up: no answer
                self.now += timeout
                return "", "", -1
            return result.stdout, result.stderr, -1
        if result.answers_at_end:  # its answer comes when the statement ends
            self.now += result.duration_s
        return result.stdout, result.stderr, result.exit_code
