"""The reconciler's layers hold, and a change that breaks them fails the build.

`make lint` runs import-linter with the contracts in pyproject.toml (docs/architecture.md): each
layer of the reconciler imports only from the layers below it, and the renderer imports nothing
from the reconciler. These tests run the same check on the tree as it is, and on a copy where a
lower layer imports a higher one or the renderer imports the reconciler, which must fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config",
                           str(root / "pyproject.toml")], cwd=root, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(root)})


def copy_of_the_tree(tmp_path: Path) -> Path:
    for package in ("reconciler", "renderer"):
        shutil.copytree(REPO / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_layers_hold() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_a_lower_layer_importing_a_higher_one_fails(tmp_path: Path) -> None:
    root = copy_of_the_tree(tmp_path)
    with (root / "reconciler" / "kube" / "client.py").open("a") as module:
        module.write("\nimport reconciler.controller.controller  # noqa: E402\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert "reconciler.kube is not allowed to import reconciler.controller" in result.stdout


def test_siblings_drift_and_kaiwudb_must_not_import_each_other(tmp_path: Path) -> None:
    root = copy_of_the_tree(tmp_path)
    with (root / "reconciler" / "kaiwudb" / "loss.py").open("a") as module:
        module.write("\nimport reconciler.drift.compare  # noqa: E402\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert "reconciler.kaiwudb is not allowed to import reconciler.drift" in result.stdout


def test_the_renderer_importing_the_reconciler_fails(tmp_path: Path) -> None:
    root = copy_of_the_tree(tmp_path)
    with (root / "renderer" / "render.py").open("a") as module:
        module.write("\nimport reconciler.settings  # noqa: E402\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert "renderer.render -> reconciler.settings" in result.stdout
