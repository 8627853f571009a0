"""`make demo` on a machine that can run a real node (issue 30, item 4): the reconciler runs as
the bundle's Deployment on two real nodes (tests/world/real_operator.py) instead of a local
process, and the demo says so step by step: the nodes up with the image loaded, the whole bundle
applied, both pods Ready, one holding the Lease, a bad spec refused by the webhook through its
Service; then the same cluster story as with a local process, checked by the same witness
(tests/support/demo.py), and everything stopped and removed at the end.

Runs only in the node tier (`make test-node`); the world tier's test_demo.py runs the local
process, as a machine without a container runtime (CI) does.
"""

from __future__ import annotations

import io
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.demo import SHORT, Witness, alive
from tests.support.lifecycle import report
from tests.world.demo import NAME, run
from tests.world.real_node import NODE_TIER

pytestmark = NODE_TIER


# The demo's steps, the image and two nodes: 215 to 330 s as the machine's load goes (the
# default 300 s bound is for a story, not for the whole demo).
@pytest.mark.timeout(900)
def test_the_demo_runs_the_reconcilers_deployment_on_real_nodes_and_cleans_up(
        tmp_path: Path) -> None:
    out = io.StringIO()
    witness = Witness()
    started = time.monotonic()
    demo = run(replace(SHORT, tmp_root=tmp_path, reconciler="pod"), out=out, on_step=witness)
    text = out.getvalue()
    print(text)
    report("demo with the Deployment on real nodes, end to end (short timings)",
           time.monotonic() - started)
    assert demo.mode == "pod"
    assert witness.steps == ["ready", "repaired", "failover", "scaled-out", "scaled-in"]
    claims = ["control plane up", "simulated nodes Ready", "real-node-1 Ready after",
              "real-node-2 Ready after", "applied: ", "ValidatingWebhookConfiguration/",
              "Deployment/kaiwu-reconciler",
              "reconciler pods Ready", "holds the Lease kaiwu-system/kaiwu-reconciler",
              "a cluster with replicas 2 is refused (dry run)",
              "spec.replicas: multi-replica needs at least 3 nodes, got 2",
              "cluster Ready: 3", "pod dev-1 force-deleted", f"{NAME}-3 joined",
              f"{NAME}-3 gone; cluster Ready with 3"]
    positions = [text.find(claim) for claim in claims]
    assert -1 not in positions, [c for c, p in zip(claims, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    assert "local process" not in text

    # The control plane's four processes, each node's containerd and kubelet: all ended.
    assert len(demo.started_pids) == 8
    assert [pid for pid in demo.started_pids if alive(pid)] == []
    assert [p for p in demo.temp_paths if p.exists()] == []
    assert list(tmp_path.iterdir()) == []
