"""The CRD's CEL rules on a real Kubernetes 1.36 API server (the 1.36 tier: `make test-136`).

The fast tier evaluates each rule with cel-python (tests/unit/renderer/test_cel.py); here the
API server does, on the CRD `kaiwu crd --kube-version 1.36` prints (the world installs it), with
no admission webhook registered. Stories:
- every CRD `kaiwu crd` prints for 1.25 through 1.36 is accepted (the API server checks each
  rule against the schema's defaults when a CRD is created; the rules once failed there);
- on create, the API server refuses exactly what the renderer refuses among the rules CEL
  expresses, each with the renderer's message; on update too (start mode, replica floors,
  shrinking volumes, the storage class); `kubectl scale` below a floor is refused through the
  scale subresource.
Skipped on 1.20, which has no CEL.
"""

from __future__ import annotations

import copy
import json
import secrets
from typing import Any

import pytest
from kubernetes import client as k8s

from renderer.cel import crd_for, rules_for
from renderer.schema import GROUP, PLURAL
from renderer.settings import KubeVersion
from tests.support.cel_cases import CREATE_CASES, TRANSITION_CASES, defaulted, verdicts, with_spec
from tests.support.render import cluster
from tests.world import kube_versions

pytestmark = [
    pytest.mark.world,
    pytest.mark.skipif(kube_versions.selected() == "1.20", reason=(
        "CEL runs from Kubernetes 1.25: this story runs in the 1.36 tier (make test-136)")),
]

VERSION = "v1"
NEWEST = KubeVersion(1, 36)


def refusal(call: Any) -> str:
    """"" when the API server accepts; else its message (422 Invalid, the rules' messages)."""
    try:
        call()
    except k8s.ApiException as err:
        assert err.status == 422, (err.status, err.body)
        return str(json.loads(err.body or "{}").get("message") or "")
    return ""


def refused_rules(message: str) -> set[str]:
    """The renderer rules (their `mirrors` paths) whose CEL message the answer carries."""
    return {rule.mirrors for rule in rules_for(NEWEST) if rule.message in message}


def test_every_crd_kaiwu_prints_for_1_25_to_1_36_is_accepted(kube: k8s.ApiClient) -> None:
    api = k8s.ApiextensionsV1Api(kube)
    made = []
    try:
        for minor in range(25, 37):
            crd = crd_for(KubeVersion(1, minor))
            group = f"v1-{minor}.cel.{GROUP}"  # a group of its own: the real one is installed
            crd["metadata"]["name"] = f"{PLURAL}.{group}"
            crd["spec"]["group"] = group
            api.create_custom_resource_definition(crd)  # type: ignore[arg-type]
            made.append(crd["metadata"]["name"])
    finally:
        for name in made:
            api.delete_custom_resource_definition(name)
    assert len(made) == 12


@pytest.mark.parametrize("case", sorted(CREATE_CASES))
def test_the_api_server_refuses_on_create_what_the_renderer_refuses(
        kube: k8s.ApiClient, namespace: str, case: str) -> None:
    api = k8s.CustomObjectsApi(kube)
    body = cluster(f"c-{secrets.token_hex(3)}", namespace, **CREATE_CASES[case])
    message = refusal(lambda: api.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body))
    _, by_renderer = verdicts(NEWEST, defaulted(CREATE_CASES[case]))
    assert refused_rules(message) == by_renderer, message
    assert bool(message) == bool(by_renderer), message


@pytest.mark.parametrize("case", sorted(TRANSITION_CASES))
def test_the_api_server_refuses_on_update_what_the_renderer_refuses(
        kube: k8s.ApiClient, namespace: str, case: str) -> None:
    api = k8s.CustomObjectsApi(kube)
    old, new = TRANSITION_CASES[case]
    name = f"u-{secrets.token_hex(3)}"
    live: dict[str, Any] = api.create_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, PLURAL, cluster(name, namespace, **old))
    changed = copy.deepcopy(live)
    changed["spec"] = copy.deepcopy(new)
    message = refusal(lambda: api.replace_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, changed))
    _, by_renderer = verdicts(NEWEST, defaulted(new), defaulted(old))
    assert refused_rules(message) == by_renderer, message
    assert bool(message) == bool(by_renderer), message


def test_kubectl_scale_below_the_floor_is_refused_through_the_scale_subresource(
        kube: k8s.ApiClient, namespace: str) -> None:
    api = k8s.CustomObjectsApi(kube)
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                        cluster("scaled", namespace, **with_spec(replicas=3)))
    message = refusal(lambda: api.patch_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, PLURAL, "scaled", {"spec": {"replicas": 2}}))
    assert refused_rules(message) == {"spec.replicas"}, message
    assert refusal(lambda: api.patch_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, PLURAL, "scaled", {"spec": {"replicas": 4}})) == ""
