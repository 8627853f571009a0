"""A user renders the example clusters and applies them: every object must be valid Kubernetes.

`kaiwu render clusters/ -o out/` is validated object by object with kubernetes-validate in strict
mode (unknown fields are errors) for the default target, the oldest schema set the package ships
(1.25) and the newest. The ServiceMonitor is a prometheus-operator CRD the package cannot know:
it must be the only kind that goes unchecked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from renderer.settings import RenderSettings
from tests.support.render import (
    EXAMPLES,
    FOREIGN_KINDS,
    KUSTOMIZATION,
    NEWEST_VALIDATABLE,
    kaiwu,
    read_tree,
    render_tree,
    validate_strict,
)

DEFAULT_TARGET = str(RenderSettings().kube_version)


def test_the_default_target_is_the_oldest_kubernetes_users_run() -> None:
    assert DEFAULT_TARGET == "1.28"


@pytest.mark.parametrize("target", [None, "1.25", NEWEST_VALIDATABLE])
def test_every_rendered_example_object_is_valid_for_its_target(tmp_path: Path,
                                                                target: str | None) -> None:
    options = ("--kube-version", target) if target else ()
    objects = render_tree(EXAMPLES, tmp_path / "out", *options)
    assert len(objects) >= 10, "the examples render a handful of objects each"

    result = validate_strict(objects, target or DEFAULT_TARGET)

    assert result.errors == ()
    assert result.skipped_kinds == FOREIGN_KINDS, "only the ServiceMonitor may go unchecked"


def test_strict_validation_would_catch_a_misspelt_field(tmp_path: Path) -> None:
    """The check above has teeth: one unknown field in a rendered object is reported."""
    objects = render_tree(EXAMPLES, tmp_path / "out")
    name = next(name for name, obj in objects.items() if obj["kind"] == "StatefulSet")
    objects[name]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    objects[name]["metadata"]["labels"]["team"] = "orders\n"

    errors = validate_strict(objects, DEFAULT_TARGET).errors

    assert any("imagePullPolicyy" in error for error in errors)
    assert any("'orders\\n'" in error for error in errors)


@pytest.mark.parametrize(("target", "api_version"), [
    ("1.20", "policy/v1beta1"), ("v1.20.2", "policy/v1beta1"), ("1.21", "policy/v1"),
    ("1.25", "policy/v1"), ("1.35", "policy/v1"),
])
def test_the_disruption_budget_api_follows_the_target_version(tmp_path: Path, target: str,
                                                              api_version: str) -> None:
    objects = render_tree(EXAMPLES, tmp_path / "out", "--kube-version", target)
    budgets = [obj for obj in objects.values() if obj["kind"] == "PodDisruptionBudget"]
    assert budgets, "the examples keep a disruption budget"
    assert {budget["apiVersion"] for budget in budgets} == {api_version}


def test_kubernetes_1_20_gets_the_same_objects_but_for_the_budget_api(tmp_path: Path) -> None:
    """1.20 (the test world's apiserver) has no schemas in kubernetes-validate; show that what
    it gets differs from the validated 1.25 render only where the API version must."""
    old = render_tree(EXAMPLES, tmp_path / "old", "--kube-version", "1.20")
    new = render_tree(EXAMPLES, tmp_path / "new", "--kube-version", "1.25")
    assert old.keys() == new.keys()
    for name, obj in old.items():
        if obj["kind"] == "PodDisruptionBudget":
            assert obj["apiVersion"] == "policy/v1beta1"
            obj = {**obj, "apiVersion": "policy/v1"}
        assert obj == new[name], name


def test_versions_older_than_1_20_are_refused() -> None:
    run = kaiwu("render", EXAMPLES, "--stdout", "--kube-version", "1.19")
    assert run.code == 2
    assert "older than the oldest supported release, 1.20" in run.stderr


def test_the_tree_is_laid_out_by_namespace_cluster_and_kind(tmp_path: Path) -> None:
    objects = render_tree(EXAMPLES, tmp_path / "out")
    for name, obj in objects.items():
        meta = obj["metadata"]
        instance = meta["labels"]["app.kubernetes.io/instance"]
        assert name == f"{meta['namespace']}/{instance}/{obj['kind'].lower()}-{meta['name']}.yaml"
    assert {name.split("/")[0] for name in objects} == {"kaiwu-dev", "kaiwu-prod", "kaiwu-edge"}


def test_the_kustomization_lists_every_object_once_in_apply_order(tmp_path: Path) -> None:
    objects = render_tree(EXAMPLES, tmp_path / "out")
    kustomization: dict[str, Any] = yaml.safe_load(read_tree(tmp_path / "out")[KUSTOMIZATION])

    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    resources = kustomization["resources"]
    assert sorted(resources) == sorted(objects) and len(resources) == len(set(resources))
    # Within each cluster: accounts and Services before the StatefulSet that uses them.
    order = ["ServiceAccount", "Service", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy",
             "ServiceMonitor"]
    for cluster_dir in {name.rsplit("/", 1)[0] for name in resources}:
        kinds = [objects[name]["kind"] for name in resources if name.startswith(cluster_dir + "/")]
        assert kinds == sorted(kinds, key=order.index), cluster_dir


def test_render_reports_what_it_wrote_and_that_it_is_a_preview(tmp_path: Path) -> None:
    """The README says never to deploy out/: the last line says so too, and what to do."""
    run = kaiwu("render", EXAMPLES, "-o", tmp_path / "out")
    assert run.code == 0
    assert run.stdout.startswith("rendered 16 objects of 3 clusters into ")
    assert "a preview of what the reconciler creates; commit the specs" in run.stdout
    assert "kubectl apply" not in run.stdout


def test_the_stdout_stream_holds_the_same_objects_in_kustomization_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    render_tree(EXAMPLES, tmp_path / "tree")
    tree = read_tree(tmp_path / "tree")
    resources = yaml.safe_load(tree[KUSTOMIZATION])["resources"]
    monkeypatch.chdir(tmp_path)

    run = kaiwu("render", EXAMPLES, "--stdout")

    assert run.code == 0
    assert run.stdout == "".join("---\n" + tree[name].decode() for name in resources)
    assert not (tmp_path / "out").exists(), "--stdout writes no tree (the default -o is out/)"


def test_no_secret_or_key_material_is_ever_rendered(tmp_path: Path) -> None:
    objects = render_tree(EXAMPLES, tmp_path / "out")
    assert "Secret" not in {obj["kind"] for obj in objects.values()}
    text = b"".join(read_tree(tmp_path / "out").values())
    assert b"PRIVATE KEY" not in text and b"BEGIN CERTIFICATE" not in text
