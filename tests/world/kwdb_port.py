"""The seam between the simulated kubelet and the simulated KaiwuDB.

The kubelet (tests/world/kubelet.py), the exec endpoint and the faults API see KaiwuDB only
through `KwdbPort`: start and stop a node process, cut its host off the network, probe it, run a
command in it, lose a store. `KwdbAdapter` implements the port on tests/world/kwdb's `KwdbWorld`
(thread-safe itself), feeding it simulated time from a SimClock and remembering server processes
that a command made exit (`kwbase quit`) until the kubelet asks. Every KwdbWorld call is in this
one module, so API changes on either side stay cheap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tests.world.kwdb import KwdbWorld
from tests.world.simclock import SimClock


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
    """What a kwbase command printed, its exit code, and how long the real one would take in
    real seconds (math.inf: until killed). answers_at_end: see tests/world/kwdb/state.py
    ExecResult."""

    stdout: str
    stderr: str
    exit_code: int
    duration_s: float = 0.0
    answers_at_end: bool = False
    conclude: Callable[[], ExecOutput] | None = None


class KwdbPort(Protocol):
    """Everything the kubelet needs from the simulated KaiwuDB."""

    def start(
        self, cluster: ClusterKey, pod: str, store_key: str, argv: Sequence[str], image: str,
        *, env: Mapping[str, str], files: Mapping[str, int],
    ) -> StartOutcome:
        """Start `argv` (the container's expanded command line) as pod's process on a store,
        with the container's environment and its mounted secret files (path -> mode)."""

    def terminate(self, cluster: ClusterKey, pod: str) -> float:
        """SIGTERM: the process starts draining (readiness fails from now on) and would exit
        by itself after the returned number of KaiwuDB seconds (0: it is gone already)."""

    def stop(self, cluster: ClusterKey, pod: str, *, graceful: bool) -> None:
        """The process is gone: its drain completed (graceful) or SIGKILL/power off."""

    def set_host_alive(self, cluster: ClusterKey, pod: str, alive: bool) -> None:
        """The pod's machine left (False) or rejoined (True) the network; the process runs on."""

    def exited(self, cluster: ClusterKey, pod: str) -> ProcessExit | None:
        """If the process the kubelet started ended on its own, how (asked while it runs)."""

    def http_get(self, cluster: ClusterKey, pod: str, port: int | None, scheme: str,
                 path: str) -> bool:
        """Whether `GET <scheme>://<pod>:<port><path>` answers 2xx or 3xx, as a kubelet's
        httpGet probe counts it (`/health?ready=1`: serving, initialised, not draining)."""

    def tcp_open(self, cluster: ClusterKey, pod: str, port: int | None) -> bool:
        """Whether a TCP connection to the port is accepted (a tcpSocket probe)."""

    def exec(self, cluster: ClusterKey, pod: str, argv: Sequence[str]) -> ExecOutput:
        """Run a command line inside pod's KaiwuDB container."""

    def lose_store(self, cluster: ClusterKey, store_key: str) -> None:
        """The disk holding this store is gone for good."""

    def log(self, cluster: ClusterKey, pod: str) -> str:
        """The process's log text (what `kubectl logs` would show)."""


class KwdbAdapter:
    """KwdbPort on a KwdbWorld, with simulated time from `clock`."""

    def __init__(self, world: KwdbWorld, clock: SimClock) -> None:
        self.world = world
        self.clock = clock
        self._lock = threading.Lock()
        # Server processes a command made exit, until the kubelet notices: (ns, sts, pod) -> exit.
        self._exits: dict[tuple[str, str, str], ProcessExit] = {}

    @staticmethod
    def _key(cluster: ClusterKey) -> tuple[str, str]:
        return (cluster.namespace, cluster.name)

    def start(
        self, cluster: ClusterKey, pod: str, store_key: str, argv: Sequence[str], image: str,
        *, env: Mapping[str, str], files: Mapping[str, int],
    ) -> StartOutcome:
        with self._lock:
            self._exits.pop((cluster.namespace, cluster.name, pod), None)
        key, now = self._key(cluster), self.clock.now()
        if self.world.process_running(key, pod):
            # The model has one process per pod name. A predecessor still running is one left on
            # a partitioned node while the pod was made again elsewhere: it is killed here, where
            # a real cluster would have both until the partition heals.
            self.world.stop_process(key, pod, now, graceful=False)
        result = self.world.start_process(key, pod, store_key, argv, now, image=image, env=env,
                                          files=files)
        if result.ok:
            return StartOutcome(True)
        code = result.exit_code if result.exit_code is not None else 1
        return StartOutcome(False, code, result.stderr or result.stdout)

    def terminate(self, cluster: ClusterKey, pod: str) -> float:
        return self.world.begin_drain(self._key(cluster), pod, self.clock.now())

    def stop(self, cluster: ClusterKey, pod: str, *, graceful: bool) -> None:
        self.world.stop_process(self._key(cluster), pod, self.clock.now(), graceful=graceful)

    def set_host_alive(self, cluster: ClusterKey, pod: str, alive: bool) -> None:
        self.world.set_pod_host_alive(self._key(cluster), pod, alive, self.clock.now())

    def exited(self, cluster: ClusterKey, pod: str) -> ProcessExit | None:
        with self._lock:
            recorded = self._exits.pop((cluster.namespace, cluster.name, pod), None)
        if recorded is not None:
            return recorded
        if not self.world.process_running(self._key(cluster), pod):
            # Ended without a command saying how (e.g. its store vanished): killed.
            return ProcessExit(137, "")
        return None

    def http_get(self, cluster: ClusterKey, pod: str, port: int | None, scheme: str,
                 path: str) -> bool:
        return self.world.http_get(self._key(cluster), pod, self.clock.now(), port, scheme, path)

    def tcp_open(self, cluster: ClusterKey, pod: str, port: int | None) -> bool:
        return self.world.tcp_open(self._key(cluster), pod, self.clock.now(), port)

    def exec(self, cluster: ClusterKey, pod: str, argv: Sequence[str]) -> ExecOutput:
        result = self.world.exec(self._key(cluster), pod, argv, self.clock.now())
        with self._lock:
            for ended in result.exited:
                key = (cluster.namespace, cluster.name, ended.pod_name)
                self._exits[key] = ProcessExit(ended.exit_code, ended.reason)
        # Simulated seconds to real ones (inf stays inf).
        concluding = result.conclude
        conclude = None
        if concluding is not None:
            def conclude() -> ExecOutput:
                ended = concluding(self.clock.now())
                return ExecOutput(ended.stdout, ended.stderr, ended.exit_code)
        return ExecOutput(result.stdout, result.stderr, result.exit_code,
                          result.duration_s / self.clock.speed, result.answers_at_end, conclude)

    def lose_store(self, cluster: ClusterKey, store_key: str) -> None:
        self.world.delete_store(self._key(cluster), store_key, self.clock.now())

    def log(self, cluster: ClusterKey, pod: str) -> str:
        return self.world.logs(self._key(cluster), pod)
