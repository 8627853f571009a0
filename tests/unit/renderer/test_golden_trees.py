"""A user who changes nothing in their specs gets byte-for-byte the manifests they reviewed.

The fast tier's view of tests/golden: every example under clusters/ renders to exactly the tree
checked in as tests/golden/<example>/, so any change to what the builders
(renderer.builders.statefulset, renderer.builders.service, renderer.builders.service_account,
renderer.builders.disruption_budget, renderer.builders.network_policy,
renderer.builders.service_monitor and the shared names and labels of
renderer.builders.__init__), the object order of renderer.render or the YAML of renderer.emit
produce fails here too, before a world is built.
tests/golden/test_render_golden.py is the same comparison with the `--update-golden` refresh
flag; refresh there, review `git diff tests/golden`, and this test follows.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests.support.render import EXAMPLES, kaiwu, read_tree

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda path: path.stem)
def test_an_unchanged_example_renders_the_tree_that_was_reviewed(example: Path,
                                                                  tmp_path: Path) -> None:
    run = kaiwu("render", example, "-o", tmp_path / "out")
    assert run.code == 0, run.stderr
    rendered, reviewed = read_tree(tmp_path / "out"), read_tree(GOLDEN / example.stem)

    assert sorted(rendered) == sorted(reviewed), "the same files, no more, no fewer"
    for name, data in reviewed.items():
        assert rendered[name] == data, "\n".join(difflib.unified_diff(
            data.decode().splitlines(), rendered[name].decode().splitlines(),
            f"golden/{name}", f"rendered/{name}", lineterm=""))
