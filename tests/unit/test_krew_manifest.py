"""The krew manifest (deploy/krew/kaiwu.yaml) names the plugin kubectl runs: its command is the
`kubectl-kaiwu` script pip installs (pyproject.toml), that script's function exists and runs the
same CLI as `kaiwu`, and its version is the package's. A renamed script or a version bumped in
one place only fails here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from reconciler import cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_krew_manifest_runs_the_script_pip_installs_at_the_package_version() -> None:
    manifest = yaml.safe_load((ROOT / "deploy" / "krew" / "kaiwu.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == "kaiwu"
    assert manifest["spec"]["version"] == f"v{project['version']}"
    assert project["scripts"]["kubectl-kaiwu"] == "reconciler.cli:kubectl_plugin"
    for platform in manifest["spec"]["platforms"]:
        assert platform["bin"] == "kubectl-kaiwu"
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert f"v{project['version']}" in platform["uri"]
        assert {"from": "kubectl-kaiwu", "to": "."} in platform["files"]
    for command in ("status", "backup", "restore"):
        assert f"kubectl kaiwu {command}" in manifest["spec"]["description"]


def test_the_plugin_entry_point_is_the_kaiwu_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.kubectl_plugin(["validate", str(ROOT / "clusters")]) == 0
    assert "KaiwuCluster specs are valid" in capsys.readouterr().out
    assert cli.kubectl_plugin(["backup", "list", "-A", "-n", "x"]) == 2
    assert capsys.readouterr().err == "kaiwu backup: -A and -n exclude each other: drop one\n"
