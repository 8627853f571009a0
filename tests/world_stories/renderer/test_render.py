"""A real Kubernetes 1.20 API server (the test world) agrees with the renderer.

kubernetes-validate ships no schemas older than 1.25, yet 1.20 is the oldest target and the one
the test world runs. So the rendered objects go to the real apiserver with `dryRun=All`
(validated, admitted and defaulted, never stored), and its answer must contain every field sent,
unchanged: 1.20 silently prunes fields it does not know, and a quantity it would store in another
spelling would show up as drift later.

The cluster specs go there too: the CRD's schema in the real apiserver must accept what the
renderer accepts, and refuse the schema mistakes the renderer refuses.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings

from tests.support.render import (
    EXAMPLES,
    FOREIGN_KINDS,
    cluster,
    dotted,
    kaiwu,
    render_tree,
    rendered_objects,
    write_yaml,
)
from tests.support.specs import BAD_ENUMS, BAD_PATTERNS, OUT_OF_RANGE, PROPERTY, specs
from tests.world.controlplane import ControlPlane
from tests.world.kube_rest import ApiError, KubeAccess, KubeRest

COLLECTIONS = {
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{ns}/serviceaccounts",
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("apps/v1", "StatefulSet"): "/apis/apps/v1/namespaces/{ns}/statefulsets",
    ("policy/v1beta1", "PodDisruptionBudget"):
        "/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets",
    ("policy/v1", "PodDisruptionBudget"): "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    ("networking.k8s.io/v1", "NetworkPolicy"):
        "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    ("monitoring.coreos.com/v1", "ServiceMonitor"):
        "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
    ("kaiwu.inspur.com/v1", "KaiwuCluster"):
        "/apis/kaiwu.inspur.com/v1/namespaces/{ns}/kaiwuclusters",
}


@pytest.fixture
def rest(control_plane: ControlPlane) -> KubeRest:
    return KubeRest(KubeAccess(control_plane.server, str(control_plane.ca_path),
                               control_plane.admin_token))


def dry_run_create(rest: KubeRest, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Create `obj` in `namespace` with dryRun=All; the object the server would have stored."""
    body = copy.deepcopy(obj)
    body["metadata"]["namespace"] = namespace
    path = COLLECTIONS[(body["apiVersion"], body["kind"])].format(ns=namespace)
    return rest.request("POST", path, query={"dryRun": "All"}, body=body)


def missing_or_changed(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Every field of `sent` that `stored` lacks or holds differently (server defaults aside).
    An empty list or mapping the server leaves out counts as kept: `[]`, `{}` and absent mean
    the same to Kubernetes (and to the drift comparison)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [f"{path}: {stored!r} instead of an object"]
        return [problem for key, value in sent.items()
                for problem in (missing_or_changed(value, stored[key], f"{path}.{key}")
                                if key in stored
                                else [] if value in ([], {}, None)
                                else [f"{path}.{key}: dropped"])]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [f"{path}: {stored!r} instead of {len(sent)} items"]
        return [problem for index, (a, b) in enumerate(zip(sent, stored, strict=True))
                for problem in missing_or_changed(a, b, f"{path}[{index}]")]
    return [] if sent == stored else [f"{path}: {sent!r} stored as {stored!r}"]


def test_every_example_object_is_accepted_unchanged_by_kubernetes_1_20(
        tmp_path: Path, rest: KubeRest, namespace: str) -> None:
    objects = render_tree(EXAMPLES, tmp_path / "out", "--kube-version", "1.20")
    unserved = set()
    for name, obj in sorted(objects.items()):
        try:
            stored = dry_run_create(rest, obj, namespace)
        except ApiError as error:
            assert error.status == 404, f"{name}: {error}"
            unserved.add(obj["kind"])
            continue
        sent = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        assert missing_or_changed(sent, stored) == [], name
    assert unserved == FOREIGN_KINDS, "only the prometheus-operator's kind is unknown here"


def test_kubernetes_1_20_has_no_policy_v1_so_the_target_version_matters(
        tmp_path: Path, rest: KubeRest, namespace: str) -> None:
    objects = render_tree(EXAMPLES / "production.yaml", tmp_path / "out")  # default target
    budget = next(obj for obj in objects.values() if obj["kind"] == "PodDisruptionBudget")
    assert budget["apiVersion"] == "policy/v1"
    with pytest.raises(ApiError) as refused:
        dry_run_create(rest, budget, namespace)
    assert refused.value.status == 404


def test_the_example_specs_are_accepted_by_the_crd_in_the_api_server(
        rest: KubeRest, namespace: str) -> None:
    for example in sorted(EXAMPLES.glob("*.yaml")):
        for spec in yaml.safe_load_all(example.read_text()):
            stored = dry_run_create(rest, spec, namespace)
            assert missing_or_changed(spec["spec"], stored["spec"]) == [], example.name


def has_empty_string(node: Any) -> bool:
    if isinstance(node, dict):
        return any(has_empty_string(value) for value in node.values())
    if isinstance(node, list):
        return any(has_empty_string(item) for item in node)
    return isinstance(node, str) and not node


@settings(PROPERTY, max_examples=15)
@given(spec=specs().filter(lambda spec: not has_empty_string(spec)))
def test_what_the_renderer_accepts_the_api_server_accepts(control_plane: ControlPlane,
                                                          spec: dict[str, Any]) -> None:
    """Generated valid specs: the CRD admits them, and their 1.20 render is admitted unchanged.

    Specs with an empty string are left out: the test world's 1.20.2 apiserver is built with a
    newer Go than 1.20 was, and reads "" in a custom resource as null (kubernetes/kubernetes
    #99804, fixed in 1.21), which real 1.20 clusters do not do."""
    rest = KubeRest(KubeAccess(control_plane.server, str(control_plane.ca_path),
                               control_plane.admin_token))
    namespace = "default"
    obj = cluster("generated", namespace, **spec)
    stored = dry_run_create(rest, obj, namespace)
    assert missing_or_changed(spec, stored["spec"]) == []
    with tempfile.TemporaryDirectory() as temp:
        write_yaml(Path(temp) / "src" / "c.yaml", obj)
        run = kaiwu("render", Path(temp) / "src", "-o", Path(temp) / "out",
                    "--kube-version", "1.20")
        assert run.code == 0, run.stderr
        for name, rendered in sorted(rendered_objects(Path(temp) / "out").items()):
            if rendered["kind"] in FOREIGN_KINDS:
                continue
            answer = dry_run_create(rest, rendered, namespace)
            sent = {**rendered, "metadata": {**rendered["metadata"], "namespace": namespace}}
            assert missing_or_changed(sent, answer) == [], name


SCHEMA_MISTAKES = ([(where, value) for where, value in OUT_OF_RANGE]
                   + [(where, "Sometimes") for where in BAD_ENUMS]
                   + [(where, value) for where, value in BAD_PATTERNS]
                   + [(("replicas",), "three"), (("tls",), "on")])


@pytest.mark.parametrize(("where", "value"), SCHEMA_MISTAKES,
                         ids=[f"{dotted(w)}={v!r}" for w, v in SCHEMA_MISTAKES])
def test_schema_mistakes_the_renderer_refuses_the_api_server_refuses(
        rest: KubeRest, namespace: str, tmp_path: Path, where: tuple[str, ...],
        value: Any) -> None:
    spec: dict[str, Any] = {}
    node = spec
    for part in where[:-1]:
        node = node.setdefault(part, {})
    node[where[-1]] = value
    obj = cluster("broken", namespace, **spec)
    write_yaml(tmp_path / "c.yaml", obj)
    assert kaiwu("validate", tmp_path).code == 2

    with pytest.raises(ApiError) as refused:
        dry_run_create(rest, obj, namespace)
    assert refused.value.status == 422
    assert f"spec.{dotted(where)}" in str(refused.value)
