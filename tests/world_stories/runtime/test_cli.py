"""`python -m reconciler` (= `kaiwu reconcile`) as Kubernetes runs it: two replicas, SIGTERM.

Story: two reconciler processes run against the test world's apiserver with the real
Controller; one leads. A rolling update sends SIGTERM to the leader: it finishes, releases the
Lease and exits 0, and the other process takes over at once rather than after the Lease
expires. Its log is one JSON object per line. The hand-over time is printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from tests.support.runtime import lease_holder
from tests.support.waiting import eventually
from tests.world.controlplane import REPO_ROOT, ControlPlane, free_port

LEASE_S = 15


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started: dict[str, subprocess.Popen[bytes]] = {}
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()  # by its own pid: only processes this test started
            process.wait(10)


def start_replica(control_plane: ControlPlane, namespace: str, identity: str,
                  log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "reconciler",
            "--kubeconfig", str(control_plane.kubeconfig_path),
            "--watch-namespace", namespace, "--lease-namespace", namespace,
            "--identity", identity, "--http-address", f"127.0.0.1:{free_port()}",
            "--lease-duration-s", str(LEASE_S), "--renew-deadline-s", "10",
            "--retry-period-s", "0.5", "--watch-timeout-s", "30"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("KAIWU_")}
    with log.open("wb") as out:
        return subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def test_sigterm_to_the_leader_hands_over_to_the_standby_at_once(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str, tmp_path: Path,
        processes: dict[str, subprocess.Popen[bytes]]) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in ("one", "two")}
    processes["one"] = start_replica(control_plane, namespace, "one", logs["one"])
    eventually(lambda: lease_holder(kube, namespace) == "one", 30, "replica one to lead")
    processes["two"] = start_replica(control_plane, namespace, "two", logs["two"])
    eventually(lambda: "reconciler started" in logs["two"].read_text(), 30,
               "replica two to start as standby")
    time.sleep(1.0)  # let the standby's caches sync and its elector observe the lease
    assert lease_holder(kube, namespace) == "one"

    terminated = time.monotonic()
    processes["one"].send_signal(signal.SIGTERM)
    eventually(lambda: lease_holder(kube, namespace) == "two", LEASE_S / 3,
               "replica two to take over", interval=0.02)
    handover_s = time.monotonic() - terminated
    code = processes["one"].wait(20)
    exit_s = time.monotonic() - terminated

    print(f"\nSIGTERM -> standby holds the lease after {handover_s:.2f} s; leader exited "
          f"{code} after {exit_s:.2f} s (lease duration {LEASE_S} s)")
    assert code == 0
    lines = [json.loads(line) for line in logs["one"].read_text().splitlines() if line.strip()]
    messages = [entry["message"] for entry in lines]
    assert "signal received, shutting down" in messages
    assert "released the lease" in messages
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in lines)
    assert any(entry.get("signal") == "SIGTERM" for entry in lines)
    eventually(lambda: "became leader" in logs["two"].read_text(), 5, "two's log to say so")
