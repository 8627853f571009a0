"""Story: strings that a YAML 1.1 reader would misread are quoted in the rendered manifests.

Go's yaml.v2 (kubectl, many GitOps tools) and PyYAML read YAML 1.1, where `on`, `no`, `yes`,
`y`, `off` are booleans, `12:30` is the number 750, `0o17` and `017` are octal, `~` and `null`
are null. tests/golden/_yaml11/clusters.yaml names a cluster `on` in namespace `no`, with such
label, annotation and node selector values; its render must match tests/golden/_yaml11/out/
byte for byte (refresh with --update-golden and review), and every file of it must read back,
through PyYAML's YAML 1.1 SafeLoader, as exactly the objects the renderer built.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from renderer.emit import manifest_for
from renderer.render import build_objects, load_clusters
from renderer.settings import RenderSettings
from tests.support.render import kaiwu, read_tree

CASE = Path(__file__).resolve().parent / "_yaml11"
SOURCE = CASE / "clusters.yaml"


def test_misreadable_values_render_exactly_the_golden_tree(tmp_path: Path,
                                                           update_golden: bool) -> None:
    out = tmp_path / "out"
    run = kaiwu("render", SOURCE, "-o", out)
    assert run.code == 0, run.stderr
    if update_golden:
        shutil.rmtree(CASE / "out", ignore_errors=True)
        shutil.copytree(out, CASE / "out")
    assert read_tree(CASE / "out") == read_tree(out), (
        "the render differs from tests/golden/_yaml11/out/ (if intended: pytest tests/golden "
        "--update-golden, then review git diff)")


def test_a_yaml_1_1_reader_reads_every_rendered_file_as_the_objects_built() -> None:
    built = {manifest.path: manifest.body
             for source in load_clusters(SOURCE)
             for manifest in (manifest_for(obj, source.cluster.name)
                              for obj in build_objects(source.cluster, RenderSettings()))}
    tree = read_tree(CASE / "out")
    assert set(built) == set(tree) - {"kustomization.yaml"}
    for path, body in built.items():
        assert yaml.load(tree[path], Loader=yaml.SafeLoader) == body, path
    assert built["no/on/service-on.yaml"]["metadata"]["name"] == "on"
    assert built["no/on/statefulset-on.yaml"]["spec"]["template"]["spec"]["nodeSelector"][
        "spot"] == "off"
