"""deploy/kustomize/ (reconciler.kustomize): the committed base and overlays are what `make
manifests` writes from `kaiwu install`, each overlay's patches turn the base's objects into the
choice's, and the files keep to the dialect kustomize v2.0.3 reads.

kustomize itself builds them in tests/packaging/test_kustomize.py (world tier: its kubectl is
fetched by `make world`); here a small JSON 6902 applier stands in for it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler import install, kustomize

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"

Obj = dict[str, Any]


def docs(text: str) -> list[Obj]:
    return [doc for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc]


def apply(obj: Any, ops: list[Obj]) -> Any:
    """JSON 6902 add, replace and remove (what the patches use), on a copy."""
    result = yaml.safe_load(yaml.safe_dump(obj))
    for op in ops:
        *parents, last = [part.replace("~1", "/").replace("~0", "~")
                          for part in op["path"].split("/")[1:]]
        node = result
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            if op["op"] == "add":
                node.insert(len(node) if last == "-" else int(last), op["value"])
            else:
                node[int(last)] = op["value"]
        else:
            assert op["op"] == "add" or last in node, op
            node[last] = op["value"]
    return result


def identity(obj: Obj) -> tuple[str, str, str, str]:
    return kustomize.identity(obj)


def test_the_committed_files_are_what_make_manifests_writes() -> None:
    assert kustomize.stale(DEPLOY) == [], "deploy/ is stale: run `make manifests`"


def test_a_stale_or_left_over_file_is_named_by_check_and_rewritten(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deploy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, deploy)
    (deploy / "kustomize" / "overlays" / "shard" / "shard.yaml").write_text("# edited\n")
    (deploy / "kustomize" / "overlays" / "old").mkdir()
    (deploy / "kustomize" / "overlays" / "old" / "kustomization.yaml").write_text("{}\n")

    assert kustomize.main(["--check", str(deploy)]) == 1
    err = capsys.readouterr().err
    assert "stale: " + str(deploy / "kustomize/overlays/shard/shard.yaml") in err
    assert "kustomize/overlays/old/kustomization.yaml (run `make manifests`)" in err

    assert kustomize.main([str(deploy)]) == 0
    assert kustomize.stale(deploy) == []
    assert not (deploy / "kustomize" / "overlays" / "old").exists(), "left-overs removed"


def test_outside_the_projects_deploy_directory_it_refuses_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kustomize.main([str(tmp_path)]) == 2
    assert "no monitoring/kustomization.yaml" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "nothing written"


def base_objects(*parts: str) -> dict[tuple[str, str, str, str], Obj]:
    base = DEPLOY / "kustomize" / "base"
    files = {"base": ["crds/crds.yaml", "shared/shared.yaml", "reconciler.yaml"],
             "base/crds": ["crds/crds.yaml"], "base/shared": ["shared/shared.yaml"]}
    return {identity(obj): obj for part in parts for name in files[part]
            for obj in docs((base / name).read_text())}


def test_the_base_is_the_default_bundle_and_crds_is_crds_only() -> None:
    assert sorted(base_objects("base").values(), key=identity) == sorted(
        docs(install.render(install.Options())), key=identity)
    assert list(base_objects("base/crds").values()) == docs(
        install.render(install.Options(crds_only=True)))


@pytest.mark.parametrize("overlay", kustomize.OVERLAYS, ids=lambda overlay: overlay.name)
def test_each_overlays_patches_and_objects_make_the_choices_bundle(
        overlay: kustomize.Overlay) -> None:
    directory = DEPLOY / "kustomize" / "overlays" / overlay.name
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    parts = [base.removeprefix("../../") for base in spec["bases"] if base.startswith("../../b")]
    built = base_objects(*parts)
    for entry in spec.get("patchesJson6902", []):
        target = entry["target"]
        key = next(k for k in built if k[1:] == (target["kind"], target.get("namespace", ""),
                                                  target["name"]))
        built[key] = apply(built[key], yaml.safe_load((directory / entry["path"]).read_text()))
    for name in spec.get("resources", []):
        built.update({identity(obj): obj for obj in docs((directory / name).read_text())})

    wanted = docs(install.render(overlay.options(overlay.example)))
    assert sorted(built.values(), key=identity) == sorted(wanted, key=identity)


def test_a_patch_says_what_the_choice_changes_and_no_more() -> None:
    """The namespaced Deployment gains one variable; the directory-mode ClusterRole two verbs;
    a list that shrinks is replaced whole; label keys' `/` escaped (RFC 6901)."""
    deployment = yaml.safe_load((DEPLOY / "kustomize" / "overlays" / "namespaced" /
                                 "patch-deployment-kaiwu-reconciler.yaml").read_text())
    assert deployment == [{"op": "add", "path": "/spec/template/spec/containers/0/env/-",
                           "value": {"name": "KAIWU_WATCH_NAMESPACE", "value": "team-a"}}]
    role = yaml.safe_load((DEPLOY / "kustomize" / "overlays" / "directory-mode" /
                           "patch-clusterrole-kaiwu-reconciler-kaiwu-system.yaml").read_text())
    assert role == [{"op": "add", "path": "/rules/0/verbs/-", "value": "create"},
                    {"op": "add", "path": "/rules/0/verbs/-", "value": "delete"}]

    old = {"metadata": {"labels": {"app.kubernetes.io/name": "a", "gone": "x"}},
           "rules": [1, 2, 3]}
    new = {"metadata": {"labels": {"app.kubernetes.io/name": "b"}}, "rules": [3]}
    ops = kustomize.operations(old, new)
    assert ops == [{"op": "remove", "path": "/metadata/labels/gone"},
                   {"op": "replace", "path": "/metadata/labels/app.kubernetes.io~1name",
                    "value": "b"},
                   {"op": "replace", "path": "/rules", "value": [3]}]
    assert apply(old, ops) == new


def test_an_overlay_whose_parts_hold_what_its_choice_has_not_is_refused() -> None:
    """kustomize v2.0.3 cannot remove an object: a shard built on the whole base would carry
    the unnamed shard's Deployment too."""
    on_the_whole_base = kustomize.Overlay(
        "shard", "", ("base",), lambda name: install.Options(shard=name), example="emea",
        resources="shard.yaml")
    with pytest.raises(ValueError, match=r"Deployment/kaiwu-system/kaiwu-reconciler.* are not "
                       r"in `kaiwu install .*--shard emea"):
        kustomize.overlay_files(on_the_whole_base, kustomize._base_parts())


def kustomizations() -> list[Path]:
    return [*sorted((DEPLOY / "kustomize").rglob("kustomization.yaml")),
            DEPLOY / "kustomization.yaml", DEPLOY / "monitoring" / "kustomization.yaml"]


@pytest.mark.parametrize("path", kustomizations(), ids=lambda path: str(path.relative_to(DEPLOY)))
def test_every_kustomization_is_in_kustomize_v2_0_3s_dialect(path: Path) -> None:
    """kubectl 1.20's kustomize: directories under `bases:` only (it reads `resources:` as
    files), `patchesJson6902` (no `patches:`, no `components:`), nothing outside the
    directory but other kustomizations."""
    spec = yaml.safe_load(path.read_text())
    assert set(spec) <= {"apiVersion", "kind", "bases", "resources", "patchesJson6902"}, spec
    for name in spec.get("resources", []):
        assert (path.parent / name).is_file() and "/" not in name, name
    for base in spec.get("bases", []):
        assert (path.parent / base / "kustomization.yaml").is_file(), base
    for patch in spec.get("patchesJson6902", []):
        assert (path.parent / patch["path"]).is_file(), patch


def test_every_file_of_deploy_monitoring_is_in_its_kustomization_or_says_why_not() -> None:
    text = (DEPLOY / "monitoring" / "kustomization.yaml").read_text()
    listed = yaml.safe_load(text)["resources"]
    for path in sorted((DEPLOY / "monitoring").iterdir()):
        if path.name != "kustomization.yaml" and path.name not in listed:
            assert f"# - {path.name}: " in text, f"{path.name}: listed nowhere, no reason given"
    # What it lists are the Prometheus Operator's objects for the reconciler.
    assert sorted(doc["kind"] for name in listed
                  for doc in docs((DEPLOY / "monitoring" / name).read_text())) == [
        "PrometheusRule", "ServiceMonitor"]
