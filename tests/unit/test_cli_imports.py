"""Story: a person runs `kaiwu --help`, or `kaiwu validate` in a pre-commit hook, and each
command loads only what it uses. The heavy libraries (jsonschema, the YAML libraries, the
Kubernetes client, deepdiff, the diff path) were imported for every command, which made
`kaiwu --help` cost 0.4 s of CPU, and jsonschema alone made a third of `kaiwu validate`;
bench/cli_start.py prints the figures.

Each case runs the real entry point in a fresh interpreter and lists what it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("jsonschema", "fastjsonschema", "ruamel", "yaml", "kubernetes", "deepdiff", "watchdog",
         "boto3", "renderer.diff", "renderer.render", "renderer.emit", "reconciler.settings",
         "reconciler.runtime", "importlib.metadata")


def imported_by(*argv: str) -> set[str]:
    """The top-level and renderer/reconciler modules `kaiwu argv` had loaded when it ended."""
    script = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print('\\nIMPORTED ' + json.dumps(sorted(sys.modules))))\n"
        "from reconciler.cli import main\n"
        f"sys.argv = ['kaiwu', *{list(argv)!r}]\n"
        "try:\n"
        "    code = main()\n"
        "except SystemExit as end:\n"
        "    code = end.code\n"
        "sys.stdout.flush()\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=False, timeout=60)
    line = next(x for x in run.stdout.splitlines() if x.startswith("IMPORTED "))
    return set(json.loads(line.removeprefix("IMPORTED ")))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(name for name in HEAVY if name in modules)


def test_help_loads_none_of_the_heavy_libraries() -> None:
    found = imported_by("--help")
    assert heavy_in(found) == []
    # Nor what only `kaiwu reconcile` uses: its logs (reconciler.logs), threads and signals.
    assert sorted({"logging", "reconciler.logs", "threading", "signal"} & found) == []


@pytest.mark.parametrize("command", ["render", "validate", "diff", "crd"])
def test_each_commands_help_loads_none_of_them_either(command: str) -> None:
    assert heavy_in(imported_by(command, "--help")) == []


def test_validate_checks_valid_specs_with_the_compiled_schema_alone(tmp_path: Path) -> None:
    """Valid specs pass the CRD's schema compiled to Python (renderer/schema_gate.py, which
    needs not even the library that compiled it); only a refused one loads jsonschema, to name
    every violation; never the writer, the diff or the reconciler."""
    found = imported_by("validate", "clusters/")
    assert "renderer.schema_gate" in found and "renderer.render" in found, "it checks the specs"
    assert heavy_in(found) == ["renderer.render", "yaml"]
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\nmetadata:\n"
                      "  name: shop\n  namespace: db\nspec:\n  replicas: three\n")
    found = imported_by("validate", str(broken))
    assert heavy_in(found) == ["jsonschema", "renderer.render", "yaml"], "it explains"
