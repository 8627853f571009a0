"""Story: `make world` on a fresh machine builds the control plane and, beside the compiler, the
image's base and wheelhouse (tests.world.build.build_world). Whatever fails, the build says which
part failed, and neither part is skipped because the other was slow."""

from __future__ import annotations

import subprocess
import threading
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
    monkeypatch.setattr(image, "prepare", prepare_image)
    assert build.build_world(build.BuildSettings(cache_dir=tmp_path)) == tmp_path / "bin"


def test_a_failed_debootstrap_fails_the_world_build_and_says_it_was_the_image(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_mirror() -> None:
        raise subprocess.CalledProcessError(1, ["debootstrap", "bookworm"])

    monkeypatch.setattr(build, "build", lambda settings: tmp_path / "bin")
    monkeypatch.setattr(image, "prepare", no_mirror)
    with pytest.raises(build.BuildError, match=r"image's base or wheelhouse.*debootstrap"):
        build.build_world(build.BuildSettings(cache_dir=tmp_path))
    # `python -m tests.world.build` turns it into a failed exit, the reason on screen.
    assert build.main(["--cache-dir", str(tmp_path)]) == 1
