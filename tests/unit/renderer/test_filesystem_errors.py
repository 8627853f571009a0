"""Story: filesystem trouble is a one-line error and exit 2, and a failed render changes nothing.

Cases (fs-*): a source sub-directory readable but not traversable; an output directory inside
a read-only parent; an output path below a regular file; an earlier render made read-only; a
disk that fills up while the new render is written. Each: exit 2, one problem line and no
traceback, and the output directory and its parent exactly as they were (no staging or
`.out.old.*` directory, no parent directory made and left).

Permission bits do not bind root, and tests may run as root: then the command runs with the
effective user and group `nobody` (saved ids stay root, so the test gets them back), in a
scratch directory under /tmp that `nobody` may enter. The below-a-file and disk-full cases need
no permissions and run as whoever runs the tests.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from renderer import emit
from renderer.errors import Problem, RenderError
from renderer.loader import find_files
from tests.support.render import EXAMPLES, SUMMARY_LINE, Run, kaiwu, read_tree

NOBODY = 65534


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Permission checks as a user they bind: as `nobody` when running as root."""
    if os.geteuid() != 0:
        yield
        return
    groups = os.getgroups()
    try:
        os.setgroups([])
        os.setegid(NOBODY)
        os.seteuid(NOBODY)
    except PermissionError:  # root without CAP_SETUID (some containers): bits cannot bind
        os.setegid(0)
        os.setgroups(groups)
        pytest.skip("running as root without the right to change user: permission bits "
                    "cannot be tested here")
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory the command's user may work in, with a copy of one example cluster."""
    base = Path(tempfile.mkdtemp(prefix="kaiwu-fs-")) if os.geteuid() == 0 else tmp_path
    base.chmod(0o777)
    (base / "src").mkdir()
    shutil.copy(EXAMPLES / "dev.yaml", base / "src" / "dev.yaml")
    for path in (base / "src", base / "src" / "dev.yaml"):
        path.chmod(0o777 if path.is_dir() else 0o666)
    kaiwu("validate", base / "src")  # every module imported before any change of user
    try:
        yield base
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        if base != tmp_path:
            shutil.rmtree(base)


def listing(directory: Path) -> dict[str, bytes]:
    """Every entry under `directory` with the content of files (directories as b'/')."""
    return {str(path.relative_to(directory)): b"/" if path.is_dir() else path.read_bytes()
            for path in sorted(directory.rglob("*"))}


def refused_once(run: Run) -> str:
    assert run.code == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) in (1, 2), run.stderr  # the problem, and a summary line for problems
    if len(lines) == 2:
        assert SUMMARY_LINE.match(lines[1])
    return lines[0]


def read_only(directory: Path) -> None:
    for path in [directory, *directory.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) & ~0o222)


def test_fs_a_source_directory_that_cannot_be_entered_is_named(scratch: Path) -> None:
    hidden = scratch / "src" / "team-b"
    hidden.mkdir()
    shutil.copy(EXAMPLES / "production.yaml", hidden / "orders.yaml")
    hidden.chmod(0o644)  # readable, not traversable
    for command in (("validate", scratch / "src"),
                    ("render", scratch / "src", "-o", scratch / "out")):
        with unprivileged():
            line = refused_once(kaiwu(*command))
        assert line.startswith(f"{hidden}: cannot read directory: Permission denied"), line
    assert not (scratch / "out").exists()
    with unprivileged(), pytest.raises(RenderError) as raised:
        find_files(scratch / "src")
    assert raised.value.problems == (Problem(
        str(hidden), 0, "", "cannot read directory: Permission denied",
        "make it readable and traversable (chmod u+rx), or move it out of the source "
        "directory"),)


def test_fs_an_output_directory_inside_a_read_only_parent_is_refused(scratch: Path) -> None:
    parent = scratch / "deploy"
    parent.mkdir()
    parent.chmod(0o555)
    with unprivileged():
        line = refused_once(kaiwu("render", scratch / "src", "-o", parent / "out"))
    assert line == (f"kaiwu render: {parent / 'out'}: cannot create it, {parent} is read-only "
                    "for this user; choose a writable place, or make it writable"), line
    assert listing(parent) == {}


def test_fs_an_output_path_below_a_regular_file_is_refused(scratch: Path) -> None:
    (scratch / "notes").write_text("my notes\n")
    before = listing(scratch)
    line = refused_once(kaiwu("render", scratch / "src", "-o", scratch / "notes" / "a" / "out"))
    assert f"{scratch / 'notes'} is a file, not a directory" in line, line
    assert listing(scratch) == before


def test_fs_an_output_path_through_a_dangling_symbolic_link_is_made_where_it_points(
        scratch: Path) -> None:
    (scratch / "gone").symlink_to(scratch / "nowhere")
    run = kaiwu("render", scratch / "src", "-o", scratch / "gone" / "out")
    assert run.code == 0, run.stderr
    assert emit.is_earlier_render(scratch / "nowhere" / "out")
    assert (scratch / "gone").is_symlink(), "the link is left as it was"


def test_fs_the_new_render_is_staged_beside_the_output_so_the_swap_is_one_rename(
        scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    staged_in: list[str | None] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        staged_in.append(kwargs.get("dir"))
        made: str = real_mkdtemp(*args, **kwargs)
        return made
    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    out = scratch / "deploy" / "out"
    out.parent.mkdir()
    assert kaiwu("render", scratch / "src", "-o", out).code == 0
    assert [Path(str(d)) for d in staged_in] == [out.parent]


def test_fs_an_earlier_render_made_read_only_is_left_as_it_was(scratch: Path) -> None:
    out = scratch / "out"
    assert kaiwu("render", scratch / "src", "-o", out).code == 0
    (scratch / "src" / "dev.yaml").write_text(
        (scratch / "src" / "dev.yaml").read_text().replace("replicas: 3", "replicas: 4"))
    read_only(out)
    before = listing(scratch)
    with unprivileged():
        line = refused_once(kaiwu("render", scratch / "src", "-o", out))
    assert "the earlier render cannot be replaced" in line and "chmod -R u+w" in line, line
    assert listing(scratch) == before


def test_fs_a_disk_that_fills_up_mid_render_leaves_everything_as_it_was(
        scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = scratch / "deploy" / "out"
    assert kaiwu("render", scratch / "src", "-o", out).code == 0
    earlier = read_tree(out)
    before = listing(scratch)
    real_write = Path.write_text
    written: list[Path] = []

    def fill_up(path: Path, text: str, *args: Any, **kwargs: Any) -> int:
        if len(written) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        written.append(path)
        return real_write(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", fill_up)
    line = refused_once(kaiwu("render", scratch / "src", "-o", out))
    assert "No space left on device" in line, line
    assert listing(scratch) == before and read_tree(out) == earlier

    written.clear()  # and a first render into a new directory tree removes what it made
    line = refused_once(kaiwu("render", scratch / "src", "-o", scratch / "new" / "deep" / "out"))
    assert listing(scratch) == before


def test_fs_the_staging_directory_name_is_never_reported(scratch: Path) -> None:
    """The error names a path the user knows, not a temporary directory they never saw."""
    parent = scratch / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    with unprivileged():
        line = refused_once(kaiwu("render", scratch / "src", "-o", parent / "out"))
    assert ".out." not in line
    assert emit.KUSTOMIZATION not in os.listdir(parent)


def test_fs_an_output_path_behind_a_directory_that_cannot_be_entered_is_refused(
        scratch: Path) -> None:
    locked = scratch / "locked"
    (locked / "deploy").mkdir(parents=True)
    locked.chmod(0o600)  # listable by its owner only, not enterable by anyone else
    with unprivileged():
        line = refused_once(kaiwu("render", scratch / "src", "-o", locked / "deploy" / "out"))
    assert line == (f"kaiwu render: {locked / 'deploy' / 'out'}: Permission denied: "
                    f"{locked / 'deploy'}; choose a path you may read and write"), line


def test_fs_an_earlier_render_is_put_back_when_the_new_one_cannot_take_its_place(
        scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The earlier render is moved aside before the new one is renamed in: when that last
    rename fails, the earlier render goes back where it was and nothing else is left."""
    out = scratch / "out"
    assert kaiwu("render", scratch / "src", "-o", out).code == 0
    earlier = read_tree(out)
    before = listing(scratch)
    real_rename = os.rename

    def refuse_the_swap(source: Any, target: Any) -> None:
        if Path(target) == out and Path(source).name.startswith(".out."):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(target))
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", refuse_the_swap)
    line = refused_once(kaiwu("render", scratch / "src", "-o", out))
    assert "Input/output error" in line, line
    assert read_tree(out) == earlier
    assert listing(scratch) == before
