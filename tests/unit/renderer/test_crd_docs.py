"""The CRD documents itself: every field has a description (what `kubectl explain` shows), the
conditions are a map keyed by type, and the spec reference (docs/spec-reference.md) is generated
from the CRD.

Refresh it after changing the CRD with `pytest tests/unit/renderer --update-golden` (the golden
files' flag), then review `git diff docs/spec-reference.md`.
"""

from __future__ import annotations

from typing import Any

import pytest

from renderer import reference
from renderer.schema import openapi_schema
from tests.support.render import REPO

SPEC_REFERENCE = REPO / "docs" / "spec-reference.md"


def undocumented(node: dict[str, Any], path: str) -> list[str]:
    """Every property under `node` (and under list items) without a description."""
    missing = []
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}"
        if not str(child.get("description", "")).strip():
            missing.append(here)
        missing += undocumented(child, here)
        if isinstance(child.get("items"), dict):
            missing += undocumented(child["items"], f"{here}[]")
    return missing


def test_every_field_of_spec_and_status_has_a_description() -> None:
    # The API server refuses anything but `type: object` on the root's metadata (seen on 1.20:
    # "must not specify anything other than name and generateName"); it documents it itself.
    assert undocumented(openapi_schema(), "") == [".metadata"]


def test_the_check_finds_a_field_without_a_description() -> None:
    """The check above can fail: a schema with one undescribed condition field is caught."""
    schema = {"properties": {"status": {"description": "x", "properties": {"conditions": {
        "description": "x", "items": {"properties": {"reason": {"type": "string"}}}}}}}}
    assert undocumented(schema, "") == [".status.conditions[].reason"]


def test_each_condition_field_says_what_it_means() -> None:
    conditions = openapi_schema()["properties"]["status"]["properties"]["conditions"]
    fields = conditions["items"]["properties"]
    assert set(fields) >= {"type", "status", "reason", "message", "lastTransitionTime",
                           "observedGeneration"}
    for condition_type in ("Ready", "Reconciling", "Stalled", "Drifted"):
        assert condition_type in fields["type"]["description"]


def test_conditions_are_a_map_keyed_by_type_so_server_side_apply_merges_them() -> None:
    conditions = openapi_schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    # A map key must be required (or defaulted) for the API server to accept the schema.
    assert "type" in conditions["items"]["required"]


def test_the_spec_reference_page_is_generated_from_the_crd(
        request: pytest.FixtureRequest) -> None:
    text = SPEC_REFERENCE.read_text(encoding="utf-8")
    current = reference.replace_section(text)
    if request.config.getoption("--update-golden", default=False):
        SPEC_REFERENCE.write_text(current, encoding="utf-8")
        return
    assert text == current, ("docs/spec-reference.md is stale: run pytest "
                             "tests/unit/renderer/test_crd_docs.py --update-golden")


def test_the_reference_lists_every_field_with_its_bounds_and_default() -> None:
    section = reference.section()
    for path, _ in reference.rows(openapi_schema()["properties"]["spec"], "spec"):
        assert f"| `{path}` |" in section
    assert "| `status.conditions[].lastTransitionTime` |" in section
    replicas = next(line for line in section.splitlines() if line.startswith("| `spec.replicas`"))
    assert "1..99" in replicas and "`3`" in replicas


@pytest.mark.parametrize(("node", "shown"), [
    ({"type": "integer", "maximum": 5}, "integer; ..5"),
    ({"type": "integer", "minimum": 1}, "integer; 1.."),
    ({"type": "integer", "format": "int32", "minimum": 1, "maximum": 99},
     "integer (int32); 1..99"),
    ({"type": "object", "additionalProperties": {}}, "map of object"),
    ({"type": "object", "additionalProperties": {"type": "string"}}, "map of string"),
    ({"type": "array", "items": {}}, "list of object"),
    ({}, "object"),
])
def test_a_fields_type_and_bounds_read_as_the_reference_shows_them(node: dict[str, Any],
                                                                  shown: str) -> None:
    """Bounds the CRD does not use today (only a maximum, a map of untyped values) still read
    right when a field gets them."""
    assert reference._type(node) == shown
