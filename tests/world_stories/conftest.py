"""Fixtures the world stories share (every folder under tests/world_stories/).

``reconciler_factory`` (function): start a real Controller, driven as the runtime drives it and
acting as its own ServiceAccount, for the test's namespace (tests/support/harness.py).
``reference_cluster_ready`` (session): the world tier's gate (tests/support/world_gate.py).
Before the first story marked ``world``, a reference cluster must become Ready under a real
reconciler; if it does not, every such story fails at once with that reason (not the
node tier's, marked ``own_world``: they start worlds of their own). The fast tests kept
here (chaos/test_invariants.py) never ask for it.
"""

from __future__ import annotations

import secrets

import pytest
from kubernetes import client as k8s

from tests.support.harness import reconciler_factory
from tests.support.world_gate import GATE_NAMESPACE_PREFIX, reference_cluster_verdict
from tests.world.controlplane import ControlPlane
from tests.world.simworld import SimWorld

__all__ = ["reconciler_factory", "reference_cluster_ready", "world_gate"]


@pytest.fixture(autouse=True)
def world_gate(request: pytest.FixtureRequest) -> None:
    """Every world story passes the gate first (the fast ones here need nothing built)."""
    if request.node.get_closest_marker("world") is not None and \
            request.node.get_closest_marker("own_world") is None:
        request.getfixturevalue("reference_cluster_ready")


@pytest.fixture(scope="session")
def reference_cluster_ready(control_plane: ControlPlane, kube: k8s.ApiClient,
                            sim_world: SimWorld) -> None:
    """Fail every world story with one reason when the reference cluster never becomes Ready
    (pytest raises a failed session fixture's error again for each later test, at once)."""
    verdict = reference_cluster_verdict(control_plane, kube,
                                        GATE_NAMESPACE_PREFIX + secrets.token_hex(3))
    if verdict.problem:
        pytest.fail(f"world gate: the reference cluster (the dev example, 3 nodes) failed after "
                    f"{verdict.seconds:.0f} s: {verdict.problem}. Every world story stops here; "
                    "the first one's report carries the reconciler's log.", pytrace=False)
    print(f"[world gate] reference cluster Ready in {verdict.seconds:.1f} s")
