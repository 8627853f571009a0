"""The operator upgrade story's earlier version (tests/support/earlier.py) is skipped, saying
why, where this repository's history is missing: a shallow clone, or a copy without .git. The
story itself (tests/world_stories/runtime/test_operator_upgrade.py) needs the test world."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import earlier


def test_a_shallow_clone_or_a_copy_without_git_says_why_the_earlier_version_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("git") is None or earlier.earlier_skip_reason():
        pytest.skip("this checkout has no history to clone from")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{earlier.REPO}",
                    str(shallow)], check=True, timeout=120)
    monkeypatch.setattr(earlier, "REPO", shallow)
    assert earlier.earlier_skip_reason().startswith(
        f"a shallow clone: commit {earlier.EARLIER_COMMIT[:12]} (the earlier version) is not "
        "in its history")
    copy = tmp_path / "copy"
    copy.mkdir()
    monkeypatch.setattr(earlier, "REPO", copy)
    assert earlier.earlier_skip_reason().startswith("not a git checkout")
    monkeypatch.setattr(earlier, "REPO", Path(__file__).resolve().parents[2])
    assert earlier.earlier_skip_reason(commit="0" * 40) == (
        "commit 000000000000 (the earlier version) is not in this repository")
