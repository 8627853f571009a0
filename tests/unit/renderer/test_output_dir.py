"""`kaiwu render -o DIR` replaces DIR as a whole, but never anything that is not its own.

Stories: a first render into a new or empty directory; a re-render that replaces an earlier
render (files of a removed cluster disappear, nothing half-written is ever visible, no staging
directories are left behind); and the mistakes it must refuse: pointing `-o` at a source
directory, a file, or a hand-written kustomize directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from renderer import emit
from renderer.errors import OutputDirectoryError
from tests.support.render import (
    EXAMPLES,
    KUSTOMIZATION,
    cluster,
    kaiwu,
    read_tree,
    render_tree,
    write_yaml,
)


def siblings(path: Path) -> list[str]:
    return sorted(entry.name for entry in path.parent.iterdir() if entry != path)


def test_a_first_render_creates_the_directory_and_its_parents(tmp_path: Path) -> None:
    out = tmp_path / "deploy" / "rendered"
    render_tree(EXAMPLES, out)
    assert (out / KUSTOMIZATION).is_file()
    assert siblings(out) == [], "no staging directory is left beside the output"


def test_an_empty_directory_may_be_rendered_into(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    render_tree(EXAMPLES, tmp_path / "out")
    assert (tmp_path / "out" / KUSTOMIZATION).is_file()


def test_a_re_render_replaces_the_earlier_render_as_a_whole(tmp_path: Path) -> None:
    source, out = tmp_path / "clusters", tmp_path / "out"
    write_yaml(source / "a.yaml", cluster("alpha", "shop"))
    write_yaml(source / "b.yaml", cluster("beta", "shop"))
    render_tree(source, out)
    assert {name.split("/")[1] for name in read_tree(out) if "/" in name} == {"alpha", "beta"}

    (source / "b.yaml").unlink()
    render_tree(source, out)

    tree = read_tree(out)
    assert {name.split("/")[1] for name in tree if "/" in name} == {"alpha"}
    assert b"/beta/" not in tree[KUSTOMIZATION]
    assert siblings(out) == ["clusters"]


@pytest.mark.parametrize("content", ["notes.txt", "clusters/dev.yaml"])
def test_a_directory_that_is_not_an_earlier_render_is_refused(tmp_path: Path,
                                                              content: str) -> None:
    out = tmp_path / "precious"
    (out / content).parent.mkdir(parents=True, exist_ok=True)
    (out / content).write_text("my own work\n")
    before = read_tree(out)

    run = kaiwu("render", EXAMPLES, "-o", out)

    assert run.code == 2
    assert "is not an earlier render" in run.stderr
    assert "Traceback" not in run.stderr
    assert read_tree(out) == before
    assert siblings(out) == []


def test_a_hand_written_kustomize_directory_is_not_an_earlier_render(tmp_path: Path) -> None:
    """A kustomization.yaml alone does not make a directory ours: users keep overlays,
    patches and their own kustomization there."""
    out = tmp_path / "deploy"
    write_yaml(out / KUSTOMIZATION, {"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                     "kind": "Kustomization",
                                     "resources": ["../base"],
                                     "patches": [{"path": "replicas.yaml"}]})
    write_yaml(out / "replicas.yaml", {"spec": {"replicas": 5}})
    before = read_tree(out)

    run = kaiwu("render", EXAMPLES, "-o", out)

    assert run.code == 2, run.stdout
    assert "is not an earlier render" in run.stderr
    assert read_tree(out) == before


@pytest.mark.parametrize("change", [{"kind": "Component"}, {"resources": "all.yaml"}])
def test_a_kustomization_of_another_kind_or_shape_is_no_earlier_render(
        tmp_path: Path, change: dict[str, Any]) -> None:
    out = tmp_path / "out"
    render_tree(EXAMPLES, out)
    assert emit.is_earlier_render(out)
    listed = YAML(typ="safe", pure=True).load((out / KUSTOMIZATION).read_text())
    write_yaml(out / KUSTOMIZATION, {**listed, **change})
    assert not emit.is_earlier_render(out)


def test_an_earlier_render_with_a_file_added_by_hand_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_tree(EXAMPLES, out)
    (out / "kaiwu-dev" / "my-configmap.yaml").write_text("kind: ConfigMap\n")
    before = read_tree(out)

    run = kaiwu("render", EXAMPLES, "-o", out)

    assert run.code == 2
    assert read_tree(out) == before


def test_a_file_is_refused_as_the_output_directory(tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    target.write_text("keep me\n")
    run = kaiwu("render", EXAMPLES, "-o", target)
    assert run.code == 2
    assert target.read_text() == "keep me\n"


def test_the_source_directory_itself_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "clusters"
    write_yaml(source / "a.yaml", cluster("alpha", "shop"))
    before = read_tree(source)
    run = kaiwu("render", source, "-o", source)
    assert run.code == 2
    assert read_tree(source) == before


def test_invalid_specs_leave_the_earlier_render_untouched(tmp_path: Path) -> None:
    source, out = tmp_path / "clusters", tmp_path / "out"
    write_yaml(source / "a.yaml", cluster("alpha", "shop"))
    render_tree(source, out)
    before = read_tree(out)
    write_yaml(source / "a.yaml", cluster("alpha", "shop", replicas=2))

    run = kaiwu("render", source, "-o", out)

    assert run.code == 2
    assert "nothing written" in run.stderr
    assert read_tree(out) == before
    assert siblings(out) == ["clusters"]


def test_a_failure_while_writing_leaves_the_earlier_render_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up half-way: the old tree stays complete and no staging is left."""
    source, out = tmp_path / "clusters", tmp_path / "out"
    write_yaml(source / "a.yaml", cluster("alpha", "shop"))
    render_tree(source, out)
    before = read_tree(out)
    write_yaml(source / "a.yaml", cluster("alpha", "shop", replicas=5))
    written = []
    original = Path.write_text

    def fill_disk_on_third_file(self: Path, *args: Any, **kwargs: Any) -> int:
        written.append(self)
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", fill_disk_on_third_file)
    run = kaiwu("render", source, "-o", out)
    monkeypatch.undo()

    assert run.code == 2
    assert run.stderr.startswith("kaiwu render: No space left on device, nothing written")

    assert len(written) == 3
    assert read_tree(out) == before
    assert siblings(out) == ["clusters"]


def test_write_tree_refuses_before_writing_anything(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.db").write_bytes(b"\0")
    with pytest.raises(OutputDirectoryError):
        emit.write_tree([], out)
    assert siblings(out) == []


@pytest.mark.parametrize("path", ["../escaped/kaiwubackup-x.yaml", "/etc/kaiwubackup-x.yaml",
                                  "ns/./x.yaml", "ns//x.yaml"])
def test_a_manifest_path_that_would_leave_the_output_is_refused_and_nothing_written(
        tmp_path: Path, path: str) -> None:
    out = tmp_path / "a" / "out"
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    with pytest.raises(OutputDirectoryError, match="not a plain path inside"):
        emit.write_tree([emit.Manifest(path, obj)], out)
    assert not out.exists() and not (tmp_path / "a" / "escaped").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == [], "nothing left behind"
