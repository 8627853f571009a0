"""The fast tier starts no test world: a test here that asks for a world fixture is refused.

At collection, any test under tests/unit that uses ``control_plane``, ``kube``, ``namespace``,
``sim_world`` or ``faults`` (itself or through another fixture) fails the run with its name; a
test that asks for one at run time (``request.getfixturevalue``) fails instead of starting it.
Such a test belongs in tests/world_stories/ (or tests/world/selftest/ for the simulator).

Every test here draws RSA keys from a pool made once per session (`shared_rsa_keys`,
tests/support/rsa_keys.py): distinct within a test, shared between tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.rsa_keys import shared_rsa_keys  # noqa: F401 - an autouse fixture
from tests.world.fixtures import world_fixtures_of

UNIT = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    offenders = [f"{item.nodeid} uses {', '.join(sorted(world_fixtures_of(item)))}"
                 for item in items
                 if item.path.is_relative_to(UNIT) and world_fixtures_of(item)]
    if offenders:
        raise pytest.UsageError(
            "tests/unit must not need the test world; move these to tests/world_stories/:\n  "
            + "\n  ".join(offenders))


@pytest.fixture(scope="session")
def control_plane() -> None:
    """Stands in for the world's control plane under tests/unit: asking for it is an error."""
    pytest.fail("a unit test asked for the test world (control_plane); it belongs in "
                "tests/world_stories/", pytrace=False)
