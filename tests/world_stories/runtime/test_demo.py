"""Stories: the live demo (`make demo`, tests/world/demo.py) tells the truth and cleans up.

The demo runs end to end with short timings, in this process, with the reconciler as a local
process (`--reconciler process`: the world tier runs where no container runtime is; the node
tier's tests/world_stories/node/test_demo_on_node.py runs it as the Deployment). At each step it
announces, the
story reads the API itself (through its own client, not the demo's) and checks what the text
claims: the cluster Ready with three pods on three nodes; the hand-edited env var gone; the pod of
the powered-off node Ready on another node with a new claim; four pods, then three with the
fourth gone and the StatefulSet shrunk. Afterwards no process the demo started runs and none of
its temporary directories remains. A second story interrupts the demo (SIGINT, as Ctrl-C sends)
while the cluster runs and checks the same. Timings are printed (pytest -s).
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.demo import BOUND_S, SHORT, Witness, alive
from tests.support.harness import REPO, wait_for
from tests.support.lifecycle import report
from tests.world.demo import HAND_EDIT_ENV, NAME, run


@pytest.mark.world
def test_the_demo_runs_end_to_end_says_only_what_the_api_shows_and_cleans_up(
        tmp_path: Path) -> None:
    out = io.StringIO()
    witness = Witness()
    started = time.monotonic()
    demo = run(replace(SHORT, tmp_root=tmp_path, reconciler="process"), out=out,
               on_step=witness)
    took = time.monotonic() - started
    text = out.getvalue()
    print(text)
    report("demo, end to end (short timings)", took)
    assert took < BOUND_S
    assert witness.steps == ["ready", "repaired", "failover", "scaled-out", "scaled-in"]

    # The text claims the steps in this order, and names the node the story saw lost.
    claims = ["control plane up", "simulated nodes Ready", "reconciler running",
              "pods scheduled", "KaiwuDB initialised", "cluster Ready: 3",
              "patched; ", f"repaired: {HAND_EDIT_ENV} gone",
              "holds three copies of every range", f"node {witness.facts['lost']} NotReady",
              f"pod {NAME}-1 force-deleted",
              "lost KaiwuDB node decommissioned", f"{NAME}-3 joined",
              f"{NAME}-3 gone; cluster Ready with 3"]
    positions = [text.find(claim) for claim in claims]
    assert -1 not in positions, [c for c, p in zip(claims, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    # The read-back races the reconciler's repair (a watch event away): either is the truth,
    # and the repair's own Event names the hand edit it undid either way.
    assert "not as the bundle's Deployment: asked for (--reconciler process)" in text
    assert (f"patched; read back: {HAND_EDIT_ENV}=1" in text
            or "patched; already repaired when read back" in text)
    assert "(by kubectl-set)" in text
    # Each step shows what `kubectl get kwc` shows: the CRD's printer columns.
    assert re.search(r"NAME\s+READY\s+REASON\s+NODES\s+DESIRED\s+VERSION\s+AGE\n"
                     r"dev\s+True\s+Ready\s+4\s+4\s+3\.2\.1", text)
    assert demo.plane is not None and str(demo.plane.kubeconfig_path) in text

    # etcd, apiserver, controller-manager, scheduler, reconciler
    assert len(demo.started_pids) == 5
    assert [pid for pid in demo.started_pids if alive(pid)] == []
    assert [p for p in demo.temp_paths if p.exists()] == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.world
def test_ctrl_c_while_the_cluster_runs_stops_everything_and_removes_its_files(
        tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-u", "-m", "tests.world.demo", "--reconciler",
                             "process"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            lines.append(line)
            if "cluster Ready: 3" in line or time.monotonic() > deadline:
                break
        assert any("cluster Ready: 3" in line for line in lines), "".join(lines)
        pids = [int(p) for p in re.findall(r"pid (\d+)", "".join(lines))]
        assert len(pids) == 5, "".join(lines)
        kubeconfig = re.search(r"KUBECONFIG=(\S+)", "".join(lines))
        assert kubeconfig is not None and Path(kubeconfig[1]).exists()
        assert Path(kubeconfig[1]).is_relative_to(tmp_path)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        # The teardown's own bounds add up to about 50 s before anything is slow (the
        # reconciler 15 s, then killed and 5 s more; four control-plane processes 3 s each,
        # then killed and 3 s more; the kubelets): 60 s was exceeded once in CI's world tier
        # with the chaos soak on the other core. A hang still fails here.
        rest, _ = proc.communicate(timeout=120)
        report("Ctrl-C -> demo exited", time.monotonic() - started)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest
    assert "Interrupted" in rest
    wait_for("every process the demo started to end",
             lambda: not [pid for pid in pids if alive(pid)], 10, 0.1)
    assert list(tmp_path.iterdir()) == []
