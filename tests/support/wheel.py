"""A kaiwu-operator wheel installed as a user installs it, and what it must answer there.

Used by the packaging story (tests/packaging/test_packaging.py: a wheel built from this
checkout) and the release story (tests/world_stories/runtime/test_release.py: the wheel
`make release` wrote into dist/). `install` makes a fresh virtualenv that sees nothing of the
checkout or of the developer's venv and installs the locked dependencies (hashes required, so
the lock file is proven installable too) and the wheel into it; `check` runs the installed
`kaiwu` from a directory that is not the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def run(argv: list[str], cwd: Path) -> str:
    """Run argv in cwd; its stdout, or an AssertionError with both streams."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(argv)} failed ({done.returncode}):\n" \
        f"{done.stdout}\n{done.stderr}"
    return done.stdout


def install(wheel: Path, lock: Path, venv: Path, cwd: Path) -> None:
    """A fresh venv at `venv` with the dependencies `lock` pins and the wheel, not editable."""
    # No --system-site-packages: the venv sees only what is installed into it below.
    run([sys.executable, "-m", "venv", str(venv)], cwd=cwd)
    pip = str(venv / "bin" / "pip")
    # --no-deps: the lock is complete, resolved with overrides.txt (pip alone would refuse it).
    run([pip, "install", "--quiet", "--no-deps", "--require-hashes", "-r", str(lock)], cwd=cwd)
    run([pip, "install", "--quiet", "--no-deps", str(wheel)], cwd=cwd)


def check(venv: Path, version: str, clusters: Path, elsewhere: Path) -> None:
    """The installed package answers from `elsewhere`: its own files, libyaml, `kaiwu --help`
    and `--version` (`version`), the kubectl plugin, `kaiwu validate` and `kaiwu render` of
    the example clusters in `clusters`."""
    kaiwu, python = venv / "bin" / "kaiwu", venv / "bin" / "python"
    # The packages come from the venv's site-packages, not from a checkout.
    location = run([str(python), "-c", "import renderer; print(renderer.__file__)"],
                   cwd=elsewhere)
    assert location.startswith(str(venv)), location
    # The emitter writes through libyaml: the PyYAML wheel the lock file installs includes it.
    libyaml = run([str(python), "-c", "import yaml; print(yaml.__with_libyaml__)"],
                  cwd=elsewhere)
    assert libyaml.strip() == "True", "PyYAML without libyaml: rendering would be 5x slower"

    assert "validate" in run([str(kaiwu), "--help"], cwd=elsewhere)
    answered = run([str(kaiwu), "--version"], cwd=elsewhere)
    assert answered.strip() == f"kaiwu {version}"
    # The kubectl plugin: kubectl finds kubectl-kaiwu on PATH and runs it for `kubectl kaiwu`.
    plugin = venv / "bin" / "kubectl-kaiwu"
    assert run([str(plugin), "--version"], cwd=elsewhere) == answered
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        through = subprocess.run(
            [kubectl, "kaiwu", "--version"], cwd=elsewhere, capture_output=True, text=True,
            check=False, env={**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"})
        assert (through.returncode, through.stdout) == (0, answered), through.stderr
    assert "specs are valid" in run([str(kaiwu), "validate", str(clusters)], cwd=elsewhere)
    run([str(kaiwu), "render", str(clusters), "-o", "out"], cwd=elsewhere)
    rendered = sorted((elsewhere / "out").rglob("*.yaml"))
    assert rendered, "kaiwu render wrote nothing"
    assert any("kind: StatefulSet" in path.read_text() for path in rendered)
