"""What the demo's stories share: short timings, and the witness that reads the API itself at
each step the demo (tests/world/demo.py) announces and checks what its text claims.

Used by tests/world_stories/runtime/test_demo.py (the reconciler as a local process) and
tests/world_stories/node/test_demo_on_node.py (as the bundle's Deployment on real nodes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.harness import condition
from tests.support.lifecycle import pod_ready
from tests.world.demo import HAND_EDIT_ENV, NAME, Demo, DemoSettings

SHORT = DemoSettings(node_lost_timeout_s=5.0, pause_s=0.0, ready_timeout_s=90.0,
                     repair_timeout_s=30.0, failover_timeout_s=60.0, scale_timeout_s=60.0)
# The demo's own steps take about a minute; with slack for a busy machine.
BOUND_S = 240.0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not yet reaped by its parent: it runs nothing.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


class Witness:
    """The story's own reading of the API at each step the demo announces."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.facts: dict[str, Any] = {}

    def __call__(self, step: str, demo: Demo) -> None:
        assert demo.plane is not None
        kube = Kube(demo.plane.api_client(), "story")
        ns = demo.namespace

        def pods() -> dict[str, Obj]:
            items, _ = kube.list_objects(kk.POD, ns)
            return {p["metadata"]["name"]: p for p in items}

        cluster = kube.get(kk.KAIWU_CLUSTER, ns, NAME)
        sts = kube.get(kk.STATEFUL_SET, ns, NAME)
        assert cluster is not None and sts is not None
        assert condition(cluster, "Ready")["status"] == "True", (step, cluster["status"])
        now = pods()
        ready = {name: p["spec"]["nodeName"] for name, p in now.items() if pod_ready(p)}
        if step == "ready":
            assert sorted(ready) == [f"{NAME}-{i}" for i in range(3)]
            assert len(set(ready.values())) == 3, "one pod per node"
            self.facts["nodes"] = ready
            claim = kube.get(kk.PVC, ns, f"data-{NAME}-1")
            assert claim is not None
            self.facts["claim"] = claim["metadata"]["uid"]
        elif step == "repaired":
            container = next(c for c in sts["spec"]["template"]["spec"]["containers"]
                             if c["name"] == "kwbase")
            assert HAND_EDIT_ENV not in {e["name"] for e in container.get("env") or ()}
            assert len(ready) == 3
        elif step == "failover":
            lost = self.facts["nodes"][f"{NAME}-1"]
            assert ready.get(f"{NAME}-1") not in (None, lost), ready
            claim = kube.get(kk.PVC, ns, f"data-{NAME}-1")
            assert claim is not None and claim["metadata"]["uid"] != self.facts["claim"]
            assert {n: ready[n] for n in (f"{NAME}-0", f"{NAME}-2")} == {
                n: self.facts["nodes"][n] for n in (f"{NAME}-0", f"{NAME}-2")}
            self.facts["lost"] = lost
        elif step == "scaled-out":
            assert len(ready) == 4 and cluster["status"]["readyNodes"] == 4
        elif step == "scaled-in":
            assert sorted(now) == [f"{NAME}-{i}" for i in range(3)]
            assert len(ready) == 3 and sts["spec"]["replicas"] == 3
            assert cluster["status"]["readyNodes"] == 3
        self.steps.append(step)
