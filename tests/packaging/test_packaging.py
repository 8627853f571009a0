"""Story: the package works as shipped. A wheel built from this checkout, installed (not
editable) into a fresh virtualenv that sees nothing of the checkout or of the developer's venv,
answers `kaiwu --version`, validates the example clusters and renders them, run from a
directory that is not the repository.

This is what broke before the CRD became package data: renderer.schema read the CRD from
beside the packages, which only exists in a checkout, so an installed `kaiwu validate` died
with FileNotFoundError. The dependencies are installed from requirements.lock (hashes
required), through pip's configured index, so the lock file is proven installable too.
About 30-40 s, most of it pip installing the dependencies; the time is printed (pytest -s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from tests.world.controlplane import REPO_ROOT


def run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(argv)} failed ({done.returncode}):\n" \
        f"{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_wheel_installed_into_a_fresh_venv_validates_and_renders_from_anywhere(
        tmp_path: Path) -> None:
    started = time.monotonic()
    wheels, venv, elsewhere = tmp_path / "wheels", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels),
         str(REPO_ROOT)], cwd=elsewhere)
    (wheel,) = wheels.glob("kaiwu_operator-*.whl")
    # No --system-site-packages: the venv sees only what is installed into it below.
    run([sys.executable, "-m", "venv", str(venv)], cwd=elsewhere)
    pip, kaiwu, python = (venv / "bin" / name for name in ("pip", "kaiwu", "python"))
    # --no-deps: the lock is complete, resolved with overrides.txt (pip alone would refuse it).
    run([str(pip), "install", "--quiet", "--no-deps", "--require-hashes", "-r",
         str(REPO_ROOT / "requirements.lock")], cwd=elsewhere)
    run([str(pip), "install", "--quiet", "--no-deps", str(wheel)], cwd=elsewhere)

    # The packages come from the venv's site-packages, not from the checkout.
    location = run([str(python), "-c", "import renderer; print(renderer.__file__)"],
                   cwd=elsewhere)
    assert location.startswith(str(venv)), location
    # The emitter writes through libyaml: the PyYAML wheel the lock file installs includes it.
    libyaml = run([str(python), "-c", "import yaml; print(yaml.__with_libyaml__)"],
                  cwd=elsewhere)
    assert libyaml.strip() == "True", "PyYAML without libyaml: rendering would be 5x slower"

    version = run([str(kaiwu), "--version"], cwd=elsewhere)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert version.strip() == f"kaiwu {project['version']}"
    # The kubectl plugin: kubectl finds kubectl-kaiwu on PATH and runs it for `kubectl kaiwu`.
    plugin = venv / "bin" / "kubectl-kaiwu"
    assert run([str(plugin), "--version"], cwd=elsewhere) == version
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        through = subprocess.run(
            [kubectl, "kaiwu", "--version"], cwd=elsewhere, capture_output=True, text=True,
            check=False, env={**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"})
        assert (through.returncode, through.stdout) == (0, version), through.stderr
    clusters = REPO_ROOT / "clusters"
    assert "specs are valid" in run([str(kaiwu), "validate", str(clusters)], cwd=elsewhere)
    run([str(kaiwu), "render", str(clusters), "-o", "out"], cwd=elsewhere)
    rendered = sorted((elsewhere / "out").rglob("*.yaml"))
    assert rendered, "kaiwu render wrote nothing"
    assert any("kind: StatefulSet" in path.read_text() for path in rendered)
    print(f"\n[packaging] wheel built, installed into a fresh venv and run in "
          f"{time.monotonic() - started:.1f} s")
