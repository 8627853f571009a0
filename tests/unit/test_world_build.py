"""Story: `make world` on a fresh machine builds the control plane and, beside the compiler, the
image's base and wheelhouse (tests.world.build.build_world). Whatever fails, the build says which
part failed, and neither part is skipped because the other was slow."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.world import build, image


def test_the_image_parts_are_made_while_the_compiler_runs(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    compiling = threading.Event()
    prepared_during_compile = threading.Event()

    def compile_control_plane(settings: build.BuildSettings) -> Path:
        compiling.set()
        # The image's parts start beside the compiler, not after it.
        assert prepared_during_compile.wait(5), "the image's parts waited for the compiler"
        return tmp_path / "bin"

    def prepare_image() -> None:
        assert compiling.wait(5)
        prepared_during_compile.set()

    monkeypatch.setattr(build, "build", compile_control_plane)
    monkeypatch.setattr(image, "missing_tools", lambda: [])
    monkeypatch.setattr(image, "prepare", prepare_image)
    assert build.build_world(build.BuildSettings(cache_dir=tmp_path)) == tmp_path / "bin"


def test_a_failed_debootstrap_fails_the_world_build_and_says_it_was_the_image(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_mirror() -> None:
        raise subprocess.CalledProcessError(1, ["debootstrap", "bookworm"])

    monkeypatch.setattr(build, "build", lambda settings: tmp_path / "bin")
    monkeypatch.setattr(image, "missing_tools", lambda: [])
    monkeypatch.setattr(image, "prepare", no_mirror)
    with pytest.raises(build.BuildError, match=r"image's base or wheelhouse.*debootstrap"):
        build.build_world(build.BuildSettings(cache_dir=tmp_path))
    # `python -m tests.world.build` turns it into a failed exit, the reason on screen.
    assert build.main(["--cache-dir", str(tmp_path)]) == 1


def test_a_missing_tool_is_said_before_the_compiler_starts(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    def compile_control_plane(settings: build.BuildSettings) -> Path:
        raise AssertionError("compiled for five minutes before saying a tool was missing")

    monkeypatch.setattr(build, "build", compile_control_plane)
    monkeypatch.setattr(image, "missing_tools", lambda: ["debootstrap"])
    with pytest.raises(build.BuildError, match=r"needs debootstrap .*install_deps\.sh"):
        build.build_world(build.BuildSettings(cache_dir=tmp_path))


def test_a_failed_compile_waits_for_the_image_thread_and_says_both(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    image_done = threading.Event()

    def broken_compile(settings: build.BuildSettings) -> Path:
        raise build.BuildError("step 'make' failed with exit code 2")

    def slow_failing_image() -> None:
        time.sleep(0.2)
        image_done.set()
        raise ValueError("a wheel the lock names is missing")

    monkeypatch.setattr(build, "build", broken_compile)
    monkeypatch.setattr(image, "missing_tools", lambda: [])
    monkeypatch.setattr(image, "prepare", slow_failing_image)
    with pytest.raises(build.BuildError, match="step 'make' failed"):
        build.build_world(build.BuildSettings(cache_dir=tmp_path))
    assert image_done.is_set(), "returned with the image's thread still writing"
    said = capsys.readouterr().out
    assert "FAILED as well: the image's base or wheelhouse" in said
    assert "ValueError: a wheel the lock names is missing" in said


def test_the_demo_builds_the_control_plane_alone(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    def no_image() -> None:
        raise AssertionError("the demo waited for the image's base")

    monkeypatch.setattr(build, "build", lambda settings: tmp_path / "bin")
    monkeypatch.setattr(image, "prepare", no_image)
    assert build.main(["--cache-dir", str(tmp_path), "--no-image"]) == 0
