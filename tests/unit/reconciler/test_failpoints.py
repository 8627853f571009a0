"""Crash points (reconciler.failpoints): the crash-safety stories (tests/world_stories/failover/
test_crash.py) start a reconciler with KAIWU_FAILPOINTS and expect it to die right after a
failover write. If a crash point silently did nothing, those stories would still pass, having
tested no crash at all; so here a real process is started with each kind of setting and must die
by SIGKILL exactly where asked, and a typo must be refused rather than never fire. (Each test
also reaches a crash point in its own process, where none is enabled: mutmut runs a mutant only
against the tests it saw reach the function, and cannot see into the started process.)
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler import failpoints

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
import logging
logging.basicConfig(format="%(levelname)s %(message)s %(failpoint)s")
from reconciler import failpoints
failpoints.reached("failover.pod-force-deleted")
print("after the pod was deleted", flush=True)
failpoints.reached("failover.claim-deleted")
print("after the claim was deleted", flush=True)
"""


def run(setting: str | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != failpoints.ENV}
    env["PYTHONPATH"] = str(ROOT)
    if setting is not None:
        env[failpoints.ENV] = setting
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=60, check=False)


def test_a_reconciler_started_with_a_crash_point_dies_there_like_sigkill() -> None:
    failpoints.reached("failover.claim-deleted")  # this process was not started with it
    died = run(" failover.claim-deleted,,failover.crash-restart ")
    assert died.returncode == -signal.SIGKILL
    assert died.stdout == "after the pod was deleted\n", "it ran up to the crash point only"
    assert died.stderr == "WARNING crash point reached: killing the process " \
                          "failover.claim-deleted\n", "the log says where, before it dies"


def test_without_the_variable_every_crash_point_is_passed_by() -> None:
    failpoints.reached("failover.pod-force-deleted")  # as in this process
    for setting in (None, "", " , "):
        lived = run(setting)
        assert (lived.returncode, lived.stderr) == (0, ""), setting
        assert lived.stdout.splitlines() == ["after the pod was deleted",
                                             "after the claim was deleted"]


def test_a_misspelt_crash_point_is_refused_not_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "failover.claim-deleted,failover.pod-deleted,zzz")
    with pytest.raises(ValueError) as refused:
        failpoints.enabled()
    assert str(refused.value) == (
        "KAIWU_FAILPOINTS: unknown crash point(s) failover.pod-deleted, zzz; known: "
        "failover.claim-deleted, failover.crash-restart, failover.dead-node-decommissioned, "
        "failover.pending-pod-deleted, failover.pod-force-deleted")
    monkeypatch.setenv(failpoints.ENV, "failover.crash-restart, failover.claim-deleted")
    assert failpoints.enabled() == {"failover.crash-restart", "failover.claim-deleted"}
    monkeypatch.delenv(failpoints.ENV)
    assert failpoints.enabled() == frozenset()
    with pytest.raises(AssertionError):
        failpoints.reached("failover.pod-deleted")  # a typo in the product code
    failpoints.reached("failover.claim-deleted")  # not enabled in this process: passed by


def test_every_crash_point_is_one_the_failover_step_reaches_and_the_other_way_round() -> None:
    reached = {node.args[0].value
               for module in ("failover.py", "crashloop.py")  # the step and its crash loops
               for node in ast.walk(ast.parse((ROOT / "reconciler" / "kaiwudb" / module)
                                              .read_text()))
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "reached" and isinstance(node.args[0], ast.Constant)}
    assert reached == failpoints.NAMES
