"""Story: the package works as shipped. A wheel built from this checkout, installed (not
editable) into a fresh virtualenv that sees nothing of the checkout or of the developer's venv,
answers `kaiwu --version`, validates the example clusters and renders them, run from a
directory that is not the repository (tests/support/wheel.py, which the release story shares
for the wheel `make release` writes).

This is what broke before the CRD became package data: renderer.schema read the CRD from
beside the packages, which only exists in a checkout, so an installed `kaiwu validate` died
with FileNotFoundError. The dependencies are installed from requirements.lock (hashes
required), through pip's configured index, so the lock file is proven installable too.
About 30-40 s, most of it pip installing the dependencies; the time is printed (pytest -s).
"""

from __future__ import annotations

import sys
import time
import tomllib
from pathlib import Path

from tests.support import wheel
from tests.world.controlplane import REPO_ROOT


def test_a_wheel_installed_into_a_fresh_venv_validates_and_renders_from_anywhere(
        tmp_path: Path) -> None:
    started = time.monotonic()
    wheels, venv, elsewhere = tmp_path / "wheels", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    wheel.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels),
               str(REPO_ROOT)], cwd=elsewhere)
    (built,) = wheels.glob("kaiwu_operator-*.whl")
    wheel.install(built, REPO_ROOT / "requirements.lock", venv, elsewhere)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    wheel.check(venv, project["version"], REPO_ROOT / "clusters", elsewhere)
    print(f"\n[packaging] wheel built, installed into a fresh venv and run in "
          f"{time.monotonic() - started:.1f} s")
