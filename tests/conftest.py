"""Shared pytest setup for every tier: the test world's fixtures, their hooks, the golden flag.

The tiers (docs/testworld.md): tests/unit needs nothing built (`pytest tests/unit`);
tests/world_stories and tests/world/selftest need the test world; tests/golden compares renders;
tests/packaging installs a built wheel into a fresh venv (pip and its index).
World fixtures live in tests/world/fixtures.py (``control_plane``, ``kube``, ``namespace``) and
tests/world/kubelet_fixtures.py (``sim_world``, ``faults``); ``cluster`` (a plain three-node
KaiwuDB, used by the simulator's self-tests and the adapter stories) in tests/support/pods.py.
Tests that use a world fixture are marked ``world``.

Every test runs with reconciler.kube.readcheck's check on (KAIWU_CHECK_CACHE_READS=1, inherited by
the reconcilers a story starts as processes): `cache_reads_unchanged` fails a test whose code
changed an object the caches handed out without a copy (`CacheView.peek`, `peek_list`).

It loads the Hypothesis profile KAIWU_HYPOTHESIS_PROFILE names, for every tier (tests/support/
hypothesis_profiles.py): the gate's derandomized one unless `make test-random` or a mutation run
(bench/mutation.py) asks for another.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from reconciler.kube import readcheck
from tests.support import hypothesis_profiles
from tests.support.ordering import slowest_first
from tests.support.pods import cluster
from tests.world.fixtures import (
    add_log_paths,
    control_plane,
    kube,
    mark_world_tests,
    namespace,
    write_summary,
)
from tests.world.kubelet_fixtures import faults, sim_world  # noqa: F401 - fixtures

__all__ = ["cluster", "control_plane", "kube", "namespace"]

hypothesis_profiles.load()
os.environ.setdefault(readcheck.ENV, "1")


@pytest.fixture(autouse=True)
def cache_reads_unchanged() -> Generator[None, None, None]:
    """After each test: no object a cache handed out without a copy was changed."""
    for check in list(readcheck.CHECKS):
        check.changed()  # an earlier test's findings were that test's
    yield
    changed = [found for check in list(readcheck.CHECKS) for found in check.changed()]
    assert not changed, "\n".join(changed)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden render trees in tests/golden from the renderer")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_world_tests(items)
    slowest_first(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    add_log_paths(item, report)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    write_summary(config, terminalreporter)
