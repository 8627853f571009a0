"""An earlier version of this project, for the operator upgrade story
(tests/world_stories/runtime/test_operator_upgrade.py): a fixed commit of this repository's own
history, checked out with `git worktree` into a temporary directory, whose `kaiwu install`
prints the bundle that version shipped and whose reconciler runs as a subprocess with the same
virtualenv (its own packages first on the path: `python -m` puts the working directory first).

Until release tags exist the earlier version is EARLIER_COMMIT. Without the history (no git, a
shallow clone, a copy without .git) the story is skipped with the reason (`earlier_skip_reason`).
The release story (tests/world_stories/runtime/test_release.py) checks out HEAD the same way, a
clean checkout to run `make release` in (`commit_id("HEAD")`, `what="the release"`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

from reconciler.model import Obj
from tests.support.harness import REPO as REPO  # where the history is read (tests patch it)

# 56 commits before the uninstall work (3 December 2026): the kubectl plugin had just landed.
# Since then the CRD's descriptions changed (volume growth, extraArgs), its status gained the
# VolumesExpanded condition, and the bundle gained its PodDisruptionBudget, zone spreading and
# Pod Security labels.
EARLIER_COMMIT = "75e7af51d3bb91b20d6a252511c871f992f46b90"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          timeout=120, check=False)


def earlier_skip_reason(commit: str = EARLIER_COMMIT, what: str = "the earlier version") -> str:
    """Why `commit` (`what` it is to the story) cannot be checked out here ("" when it can)."""
    if shutil.which("git") is None:
        return f"git is not installed: {what} comes from this repository's history"
    shallow = _git("rev-parse", "--is-shallow-repository")
    if shallow.returncode != 0:
        return f"not a git checkout ({shallow.stderr.strip()}): no history to take it from"
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        return ""
    if shallow.stdout.strip() == "true":
        return (f"a shallow clone: commit {commit[:12]} ({what}) is not in its "
                "history; clone with the history (fetch-depth: 0) to run this story")
    return f"commit {commit[:12]} ({what}) is not in this repository"


def commit_id(rev: str) -> str:
    """The full commit id `rev` names (HEAD, a tag); call after earlier_skip_reason(rev)."""
    found = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    assert found.returncode == 0, f"git rev-parse {rev}: {found.stderr}"
    return found.stdout.strip()


@contextlib.contextmanager
def earlier_checkout(where: Path, commit: str = EARLIER_COMMIT) -> Iterator[Path]:
    """`git worktree add --detach` of the commit under `where`; removed (and pruned) after."""
    path = where / f"kaiwu-{commit[:12]}"
    added = _git("worktree", "add", "--detach", str(path), commit)
    assert added.returncode == 0, f"git worktree add failed: {added.stderr}"
    try:
        yield path
    finally:
        _git("worktree", "remove", "--force", str(path))
        _git("worktree", "prune")


def environment(source: Path) -> dict[str, str]:
    """The process environment that runs `source`'s packages with this virtualenv."""
    return {**os.environ, "PYTHONPATH": str(source)}


def kaiwu(source: Path, argv: Sequence[str]) -> str:
    """`kaiwu ARGV` as the version in `source` answers it (its stdout)."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from reconciler.cli import main; "
         "sys.exit(main(sys.argv[1:]))", *argv],
        cwd=source, env=environment(source), capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 0, f"kaiwu {' '.join(argv)} ({source}): {done.stderr}"
    return done.stdout


def bundle(source: Path, argv: Sequence[str]) -> list[Obj]:
    """The documents `kaiwu install ARGV` prints in the version at `source`."""
    return [doc for doc in yaml.safe_load_all(kaiwu(source, ["install", *argv])) if doc]
