"""Every example renders to exactly the tree checked in under tests/golden/<example>/.

A reviewer sees every change to rendered output as a diff of these files: any change to what
the builders (renderer.builders.statefulset, renderer.builders.service,
renderer.builders.service_account, renderer.builders.disruption_budget,
renderer.builders.network_policy, renderer.builders.service_monitor and the shared names and
labels of renderer.builders.__init__), the object order of renderer.render or the YAML of
renderer.emit produce fails here. When a change is intended, refresh them with one flag and
review the result:

    .venv/bin/pytest tests/unit/renderer/test_golden_trees.py tests/golden --update-golden
    git diff tests/golden

The comparison covers the whole tree `kaiwu render clusters/<example>.yaml -o DIR` writes,
kustomization.yaml included: which files exist, and every byte of each. (It lives in the fast
tier's tree, beside the renderer's other tests, so mutation testing runs it; the golden files
stay in tests/golden/ with the YAML 1.1 goldens.)
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from tests.support.render import EXAMPLES, kaiwu, read_tree

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def _report(expected: dict[str, bytes], actual: dict[str, bytes]) -> str:
    lines = [f"missing: {name}" for name in sorted(expected.keys() - actual.keys())]
    lines += [f"unexpected: {name}" for name in sorted(actual.keys() - expected.keys())]
    for name in sorted(expected.keys() & actual.keys()):
        if expected[name] != actual[name]:
            lines += difflib.unified_diff(
                expected[name].decode().splitlines(), actual[name].decode().splitlines(),
                f"golden/{name}", f"rendered/{name}", lineterm="")
    return "\n".join(lines[:200])


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda path: path.stem)
def test_the_example_renders_exactly_its_golden_tree(example: Path, tmp_path: Path,
                                                     request: pytest.FixtureRequest) -> None:
    update_golden = bool(request.config.getoption("--update-golden", default=False))
    out = tmp_path / "out"
    run = kaiwu("render", example, "-o", out)
    assert run.code == 0, run.stderr
    actual = read_tree(out)
    golden = GOLDEN / example.stem
    if update_golden:
        shutil.rmtree(golden, ignore_errors=True)
        shutil.copytree(out, golden)
    expected = read_tree(golden) if golden.is_dir() else {}
    assert expected == actual, (
        f"{example.name} renders differently from tests/golden/{example.stem}/ "
        "(if intended: pytest tests/unit/renderer/test_golden_trees.py --update-golden, "
        "then review git diff):\n"
        + _report(expected, actual))


def test_every_example_has_a_golden_tree() -> None:
    """Runs last, so that --update-golden has written a tree for a new example first."""
    assert EXAMPLE_FILES, "clusters/ holds the examples"
    assert sorted(path.name for path in GOLDEN.iterdir() if path.is_dir()
                  and not path.name.startswith(("_", "."))) == [p.stem for p in EXAMPLE_FILES]
