"""`kubectl explain kaiwucluster.status.conditions` on the real API server (1.20): the CRD's
descriptions reach the OpenAPI document kubectl explain reads (/openapi/v2), and the schema is
stored as written, conditions a map keyed by type.
"""

from __future__ import annotations

from typing import Any

import pytest

from renderer.schema import crd_manifest
from tests.support.waiting import eventually
from tests.world.controlplane import ControlPlane
from tests.world.kube_rest import KubeAccess, KubeRest

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kaiwuclusters.kaiwu.inspur.com"
DEFINITION = "com.inspur.kaiwu.v1.KaiwuCluster"


@pytest.fixture
def rest(control_plane: ControlPlane) -> KubeRest:
    return KubeRest(KubeAccess(control_plane.server, str(control_plane.ca_path),
                               control_plane.admin_token), timeout_s=60.0)


def as_float64(value: Any) -> Any:
    """`value` with every number as the API server holds schema bounds: a float64, so the int64
    bounds of tolerationSeconds come back as +-2**63 (the renderer checks the exact range)."""
    if isinstance(value, dict):
        return {key: as_float64(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_float64(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def published(rest: KubeRest) -> dict[str, Any] | None:
    """The KaiwuCluster definition of /openapi/v2 (what kubectl explain reads), once published."""
    definitions: dict[str, Any] = rest.get("/openapi/v2").get("definitions", {})
    return definitions.get(DEFINITION)


def test_kubectl_explain_shows_what_each_condition_field_means(rest: KubeRest) -> None:
    definition = eventually(lambda: published(rest), 60, "the CRD's OpenAPI definition")
    conditions = definition["properties"]["status"]["properties"]["conditions"]
    assert "Ready, Reconciling, Stalled, Drifted" in conditions["description"]
    fields = conditions["items"]["properties"]
    described = {name: field.get("description", "") for name, field in fields.items()}
    assert all(described.values()), described
    assert "Stalled (cannot progress without a person" in described["type"]
    print(f"\n/openapi/v2 {DEFINITION}: status.conditions fields described: "
          f"{', '.join(sorted(described))}")


def test_the_api_server_keeps_the_schema_as_written_with_conditions_keyed_by_type(
        rest: KubeRest) -> None:
    """Nothing of the schema is pruned, and the OpenAPI document tells clients (kubectl,
    server-side apply) that conditions are a map keyed by type. Seen on 1.20: the API server
    does not yet refuse two conditions of one type in a status write; the reconciler's status
    builder (reconciler/status.py) writes one per type."""
    stored = rest.get(CRD_PATH)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    written = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert as_float64(stored) == as_float64(written), "1.20 pruned or changed the schema"
    definition = eventually(lambda: published(rest), 60, "the CRD's OpenAPI definition")
    conditions = definition["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
