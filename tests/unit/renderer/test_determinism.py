"""Same specs, same bytes: a render is a pure function of its input.

CI renders the base and the head of a pull request and diffs them; the reconciler renders in the
cluster. Any byte that depends on hash seeds, dict order, the clock or how the input happened to
be ordered would show up as a phantom change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tests.support.render import (
    EXAMPLES,
    clean_env,
    kaiwu,
    kaiwu_process,
    read_tree,
    render_tree,
    write_yaml,
)


def test_rendering_twice_gives_identical_bytes(tmp_path: Path) -> None:
    render_tree(EXAMPLES, tmp_path / "first")
    render_tree(EXAMPLES, tmp_path / "second")
    first, second = read_tree(tmp_path / "first"), read_tree(tmp_path / "second")
    assert first and first == second


def test_separate_processes_with_different_hash_seeds_agree(tmp_path: Path) -> None:
    """Two `kaiwu` processes, PYTHONHASHSEED 1 and 4242: set and dict orders differ, bytes not."""
    trees = []
    for seed in ("1", "4242"):
        env = {**clean_env(tmp_path), "PYTHONHASHSEED": seed}
        out = tmp_path / f"out-{seed}"
        run = kaiwu_process("render", EXAMPLES, "-o", out, env=env)
        assert run.code == 0, run.stderr
        trees.append(read_tree(out))
    assert trees[0] and trees[0] == trees[1]
    # And the in-process render (this interpreter's own seed) agrees with both.
    render_tree(EXAMPLES, tmp_path / "here")
    assert read_tree(tmp_path / "here") == trees[0]


def _reversed_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _reversed_keys(node[key]) for key in reversed(list(node))}
    if isinstance(node, list):
        return [_reversed_keys(item) for item in node]
    return node


def test_the_order_keys_are_written_in_does_not_matter(tmp_path: Path) -> None:
    for example in sorted(EXAMPLES.glob("*.yaml")):
        documents = list(yaml.safe_load_all(example.read_text()))
        write_yaml(tmp_path / "reordered" / example.name, *map(_reversed_keys, documents))
    render_tree(EXAMPLES, tmp_path / "original")
    render_tree(tmp_path / "reordered", tmp_path / "from-reordered")
    assert read_tree(tmp_path / "original") == read_tree(tmp_path / "from-reordered")


def test_spelling_a_quantity_differently_changes_nothing(tmp_path: Path) -> None:
    spec = {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            "storage": {"size": "100Gi"}}
    respelt = {"resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}},
               "storage": {"size": "0.09765625Ti"}}
    for name, body in (("a", spec), ("b", respelt)):
        write_yaml(tmp_path / name / "c.yaml", {
            "apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": body})
        render_tree(tmp_path / name, tmp_path / f"out-{name}")
    assert read_tree(tmp_path / "out-a") == read_tree(tmp_path / "out-b")


def test_the_output_carries_no_time_user_or_path(tmp_path: Path) -> None:
    render_tree(EXAMPLES, tmp_path / "out")
    text = b"".join(read_tree(tmp_path / "out").values()).decode()
    for leak in (str(tmp_path), str(EXAMPLES), os.environ.get("USER") or "\0", "Timestamp"):
        assert leak not in text


def test_stdout_rendering_is_as_stable_as_files() -> None:
    first, second = kaiwu("render", EXAMPLES, "--stdout"), kaiwu("render", EXAMPLES, "--stdout")
    assert first.code == second.code == 0
    assert first.stdout == second.stdout != ""
