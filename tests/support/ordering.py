"""The order tests start in: the slowest modules first.

`make test` runs the world tier with `--dist loadfile` (a module stays on one worker), and
pytest-xdist hands modules to workers in collection order (`--no-loadscope-reorder`; its own
order is by number of tests, which put the one-test soak near the end). A long module started
last leaves the other worker idle while it runs; started first, the short ones fill in around
it. SLOWEST lists the modules that take a minute or more on two shared cores, slowest first
(measured 4 December 2026, docs/testworld.md "Where the world tier's time goes"); every other
module keeps its place after them. The fast tier (`--dist load`) gains the same way from
starting the packaging story, one test of about a minute, first.
"""

from __future__ import annotations

import pytest

SLOWEST = (
    "tests/world_stories/failover/test_crash.py",
    "tests/world_stories/lifecycle/test_upgrade.py",
    "tests/world_stories/failover/test_failover.py",
    "tests/world_stories/chaos/test_soak.py",
    "tests/world_stories/lifecycle/test_stories.py",
    "tests/world_stories/lifecycle/test_scale.py",
    "tests/world_stories/runtime/test_demo.py",
    "tests/world_stories/backup/test_backup.py",
    "tests/world/selftest/test_kubelet.py",
    # Not measured with the others: 6 min 17 s alone under other sessions' load (load average
    # 10 to 12 on the 2 cores; make release 194 s with the image rebuilt for changed sources,
    # the wheel's fresh venv 104 s, podman load 20 s), 3 min 56 s at a load average of 7
    # (make release 132 s, the image rebuilt again, the venv 54 s); about 100 s on a quiet
    # machine with the image's layers cached (make release 42 s, the venv 30 to 40 s as the
    # packaging story's).
    "tests/world_stories/runtime/test_release.py",
    "tests/world_stories/lifecycle/test_certs.py",
    "tests/world_stories/lifecycle/test_drain.py",
    "tests/world_stories/drift/test_steady.py",
    "tests/world_stories/drift/test_repair.py",
    "tests/world_stories/runtime/test_fleet.py",
    "tests/world_stories/runtime/test_quickstart.py",
    "tests/world_stories/runtime/test_status.py",
    "tests/packaging/test_packaging.py",
)


def slowest_first(items: list[pytest.Item]) -> None:
    """Reorder items in place: SLOWEST's modules first, in its order; the rest as collected."""
    rank = {path: i for i, path in enumerate(SLOWEST)}

    def key(item: pytest.Item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(SLOWEST))
    items.sort(key=key)  # stable: tests within a module, and the other modules, keep order
