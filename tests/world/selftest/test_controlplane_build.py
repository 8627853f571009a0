"""A developer without the test world's build is told how to build it (this one needs no build).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.world.controlplane import ControlPlane, ControlPlaneError, ControlPlaneSettings


def test_without_a_build_the_control_plane_says_how_to_build_it(tmp_path: Path) -> None:
    # A developer who has not built the binaries gets told the exact command, not a skip.
    with pytest.raises(ControlPlaneError) as missing:
        ControlPlane(ControlPlaneSettings(bin_dir=tmp_path))
    assert "python -m tests.world.build" in str(missing.value)
    assert "install_deps.sh" in str(missing.value)
