"""Pytest fixtures for the simulated half of the test world; tests/conftest.py loads them.

``sim_world`` (session): simulated nodes, kubelets, local storage and KaiwuDB
(tests/world/simworld.py) around the session's real control plane, stopped at the end.
``faults`` (function): the world's fault switches; every fault a test sets is undone when the
test ends (lost nodes restored, crash loops and forced unreadiness cleared).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.world.controlplane import ControlPlane
from tests.world.faults import Faults
from tests.world.kube_rest import KubeAccess
from tests.world.simworld import SimWorld


@pytest.fixture(scope="session")
def sim_world(control_plane: ControlPlane) -> Iterator[SimWorld]:
    """Four simulated nodes (kw-node-1..4) Ready for pods, with storage and KaiwuDB."""
    access = KubeAccess(control_plane.server, str(control_plane.ca_path),
                        control_plane.admin_token)
    world = SimWorld(access)
    try:
        world.start()
    except Exception as err:
        pytest.fail(f"simulated world did not start: {err}", pytrace=False)
    yield world
    world.stop()


@pytest.fixture
def faults(sim_world: SimWorld) -> Iterator[Faults]:
    """Fault switches, healed after the test."""
    yield sim_world.faults
    sim_world.faults.heal()
