"""Stories about directory mode while it runs (reconciler.runtime.source_dir): what it watches
with inotify (the checkout, and the directory of each symlink on the way to it, as git-sync
swaps them), how a burst of changes becomes one scan after a quiet spell, what it logs for an
operator, and how it stops. Real watchdog observers on a temporary directory; the API is the
dictionary of test_source_dir.py. The same against the real apiserver and git-sync's layout:
tests/world_stories/runtime/test_source_dir.py.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler.metrics import Metrics
from reconciler.runtime import source_dir
from reconciler.runtime.source_dir import DirectorySource
from tests.support.threads import holding_up_exit, threads_started
from tests.unit.reconciler.runtime.test_source_dir import (
    ORDERS,
    PAYMENTS,
    Api,
    cluster_file,
    repo_with,
    source,
)


def eventually(condition: Any, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_source_path_caught_in_a_symlink_loop_is_reported_and_the_source_keeps_running(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    directory = source(tmp_path / "a", Api(), source_debounce_s=0.01)
    with caplog.at_level(logging.WARNING, logger="reconciler.runtime.source_dir"):
        directory.start()
        try:
            eventually(lambda: directory.scans >= 1, "scanned")
            assert directory.alive
            assert directory.status()[-1] == f"source error: {tmp_path / 'a'} is not a directory"
        finally:
            directory.stop()
    assert "cannot resolve the source directory" in caplog.messages
