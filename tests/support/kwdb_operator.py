"""The simulated KaiwuDB (tests/world/kwdb) driven as the test world drives it, without
Kubernetes: `Operator` plays kubelet and admin adapter against one StatefulSet, starting its
pods with the container command the renderer writes (`start_line`) and running kwbase in them.
Used by the simulator's own stories, tests/world/selftest/test_kwdb.py and test_kwdb_data.py.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from tests.world.kwdb import (
    REPLICATION_HEALTH_QUERY,
    ExecResult,
    KwdbSettings,
    KwdbWorld,
    StartResult,
)

NS, STS = "shop", "kw"
KEY = (NS, STS)
KWBASE = "/kaiwudb/bin/kwbase"
# Short timers so stories about dead nodes run in simulated minutes, not hours.
FAST = KwdbSettings(time_until_store_dead_s=120.0, snapshot_rate_per_s=10.0)


def fqdn(ordinal: int) -> str:
    return f"{STS}-{ordinal}.{STS}.{NS}.svc.cluster.local"


def start_line(ordinal: int, mode: str = "start", *extra: str, peers: int = 3) -> list[str]:
    """The container command the renderer writes (with $(POD_NAME) already expanded)."""
    join = ",".join(f"{fqdn(i)}:26257" for i in range(peers))
    line = [
        KWBASE,
        mode,
        "--insecure",
        "--listen-addr=0.0.0.0:26257",
        f"--advertise-addr={fqdn(ordinal)}:26257",
        "--brpc-addr=:27257",
        "--http-addr=0.0.0.0:8080",
        "--store=/kaiwudb/deploy/data",
        "--cache=.25",
        "--max-sql-memory=.25",
        "--logtostderr",
        *extra,
    ]
    if mode != "start-single-node":
        line.insert(8, f"--join={join}")
    return line


def rows(result: ExecResult) -> list[dict[str, str]]:
    assert result.exit_code == 0, result.stderr
    return list(csv.DictReader(io.StringIO(result.stdout)))


@dataclass
class Operator:
    """Plays kubelet and admin adapter against one StatefulSet."""

    world: KwdbWorld = field(default_factory=lambda: KwdbWorld(FAST))
    pvc: dict[str, str] = field(default_factory=dict)

    def start(self, ordinal: int, t: float, *extra: str, mode: str = "start") -> StartResult:
        pod = f"{STS}-{ordinal}"
        store = self.pvc.setdefault(pod, f"pvc-uid-{pod}")
        return self.world.start_process(
            KEY, pod, store, start_line(ordinal, mode, *extra), t, image="kwdb/kwdb:3.2.1"
        )

    def kwbase(self, ordinal: int, t: float, *args: str) -> ExecResult:
        return self.world.exec(KEY, f"{STS}-{ordinal}", [KWBASE, *args, "--insecure"], t)

    def status(self, t: float, *flags: str, via: int = 0) -> list[dict[str, str]]:
        return rows(self.kwbase(via, t, "node", "status", "--format=csv", *flags))

    def health(self, t: float, via: int = 0) -> tuple[int, int]:
        got = rows(self.kwbase(via, t, "sql", "-e", REPLICATION_HEALTH_QUERY, "--format=csv"))
        return int(got[0]["ranges_unavailable"]), int(got[0]["ranges_underreplicated"])

    def healthy_cluster(self, size: int, t: float = 0.0) -> float:
        """Start `size` pods, init once, wait until replication is healthy and every node's
        status record says so (two sampling intervals later); return the time."""
        for i in range(size):
            assert self.start(i, t).ok
        assert self.kwbase(0, t + 1, "init").exit_code == 0
        t += 1
        while self.truth(t) != (0, 0):
            t += 5
        t += 2 * FAST.metrics_sample_interval_s
        assert self.health(t) == (0, 0)
        return t

    def truth(self, t: float) -> tuple[int, int]:
        """(unavailable, under-replicated) as the cluster is, not as its records say."""
        view = self.world.replication(KEY, t)
        return view.unavailable, view.underreplicated
