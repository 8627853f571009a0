"""The krew manifest of `kubectl kaiwu` (deploy/krew/kaiwu.yaml) says what is true: it parses as
a krew Plugin, names the plugin the package's entry point serves, carries the package's version,
and the sha256 of the archive deploy/krew/build.py makes; the launcher it installs runs the
package's kubectl plugin, and says in one line what to install when the package is missing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
KREW = REPO / "deploy" / "krew"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def manifest() -> dict[str, object]:
    found = yaml.safe_load((KREW / "kaiwu.yaml").read_text())
    assert isinstance(found, dict)
    return found


def test_the_manifest_is_a_krew_plugin_named_for_the_packages_entry_point() -> None:
    plugin = manifest()
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin"
    name = plugin["metadata"]["name"]  # type: ignore[index]
    # kubectl runs `kubectl-<name>` for `kubectl <name>`: the console script pip installs.
    assert PROJECT["scripts"][f"kubectl-{name}"] == "reconciler.cli:kubectl_plugin"
    spec = plugin["spec"]
    assert isinstance(spec, dict)
    assert spec["version"] == f"v{PROJECT['version']}"
    assert spec["shortDescription"] and len(spec["shortDescription"]) <= 50
    [platform] = spec["platforms"]
    assert platform["bin"] == f"kubectl-{name}"
    assert platform["files"] == [{"from": f"kubectl-{name}", "to": "."}]
    assert (KREW / platform["files"][0]["from"]).is_file()
    assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
    assert spec["version"] in platform["uri"] and platform["uri"].startswith("https://")
    assert ".invalid/" in platform["uri"], "no release publishes it yet: a host that never is"


def test_it_is_honest_that_krew_installs_a_launcher_for_a_pip_package_of_this_version() -> None:
    spec = manifest()["spec"]
    assert isinstance(spec, dict)
    caveats = " ".join(spec["caveats"].split())
    version = PROJECT["version"]
    assert "krew installed only a launcher" in caveats and "krew cannot install it" in caveats
    assert f"kaiwu-operator {version}" in caveats and "Python 3.11" in caveats
    assert PROJECT["requires-python"] == ">=3.11"
    launcher = (KREW / "kubectl-kaiwu").read_text()
    assert launcher.count(f"kaiwu-operator {version}") == 2, "its messages name this version"
    assert "from reconciler.cli import kubectl_plugin" in launcher
    header = (KREW / "kaiwu.yaml").read_text().split("apiVersion:")[0]
    assert f"--archive=dist/kubectl-kaiwu-v{version}.tar.gz" in header


def test_the_sha256_is_the_archive_a_build_makes() -> None:
    check = subprocess.run([sys.executable, str(KREW / "build.py"), "--check"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stderr


def test_the_launcher_runs_the_plugin_and_names_what_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "KAIWU_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    ran = subprocess.run([str(KREW / "kubectl-kaiwu"), "backup", "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=env, check=False)
    assert ran.returncode == 0 and ran.stdout.startswith("usage: kaiwu backup"), ran.stderr
    # A Python that cannot import the package (no site-packages, no PYTHONPATH).
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    ran = subprocess.run([str(KREW / "kubectl-kaiwu"), "status"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60,
                         env={**env, "KAIWU_PYTHON": str(bare)}, check=False)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.startswith("kubectl kaiwu: the Python package kaiwu-operator is not "
                                 "installed for ") and ran.stderr.count("\n") == 1
    ran = subprocess.run([str(KREW / "kubectl-kaiwu")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={**env, "KAIWU_PYTHON": "no-such-python"},
                         check=False)
    assert ran.returncode == 2 and ran.stderr.startswith("kubectl kaiwu: no no-such-python found")
    # A directory named reconciler where kubectl runs is not what runs.
    (tmp_path / "reconciler").mkdir()
    (tmp_path / "reconciler" / "cli.py").write_text("raise SystemExit('not this one')\n")
    (tmp_path / "reconciler" / "__init__.py").write_text("")
    ran = subprocess.run([str(KREW / "kubectl-kaiwu"), "--version"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=env, check=False)
    assert ran.returncode == 0 and ran.stdout.startswith("kaiwu "), ran.stderr
