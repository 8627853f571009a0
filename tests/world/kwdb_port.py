"""The seam between the simulated kubelet and the simulated KaiwuDB.

The kubelet (tests/world/kubelet.py), the exec endpoint and the faults API see KaiwuDB only
through `KwdbPort`: start and stop a node process, probe it, run a command in it, lose a store.
`KwdbAdapter` implements the port on tests/world/kwdb's `KwdbWorld`, feeding it simulated time
from a SimClock and serialising calls (the kubelet worker, exec threads and tests call in
concurrently; the model is not thread-safe). Keeping every KwdbWorld call in this one module makes
API changes on either side cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ClusterKey:
    """Which KaiwuDB cluster a pod belongs to: its namespace and StatefulSet name."""

    namespace: str
    name: str


@dataclass(frozen=True)
class StartOutcome:
    """What starting a node process did: running, or exited at once with a code and message."""

    started: bool
    exit_code: int = 0
    message: str = ""


@dataclass(frozen=True)
class ProcessExit:
    """A process that ended on its own: exit code and the last words it logged."""

    exit_code: int
    message: str


@dataclass(frozen=True)
class ExecOutput:
    """What a kwbase command printed and its exit code."""

    stdout: str
    stderr: str
    exit_code: int


class KwdbPort(Protocol):
    """Everything the kubelet needs from the simulated KaiwuDB."""

    def start(
        self, cluster: ClusterKey, pod: str, store_key: str, argv: Sequence[str]
    ) -> StartOutcome:
        """Start `argv` (the container's expanded command line) as pod's process on a store."""

    def stop(self, cluster: ClusterKey, pod: str) -> None:
        """The process is gone (SIGTERM handled, SIGKILL, or its machine switched off)."""

    def exited(self, cluster: ClusterKey, pod: str) -> ProcessExit | None:
        """If the running process ended on its own since it started, how; else None."""

    def is_ready(self, cluster: ClusterKey, pod: str) -> bool:
        """What `GET :8080/health?ready=1` answers (serving, initialised, live, not draining)."""

    def is_live(self, cluster: ClusterKey, pod: str) -> bool:
        """What `GET :8080/health` answers (the process serves HTTP)."""

    def exec(self, cluster: ClusterKey, pod: str, argv: Sequence[str]) -> ExecOutput:
        """Run a kwbase command line inside pod's container."""

    def lose_store(self, store_key: str) -> None:
        """The disk holding this store is gone for good."""

    def log(self, cluster: ClusterKey, pod: str) -> str:
        """The process's log text (what `kubectl logs` would show)."""
