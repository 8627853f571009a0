"""The compiled schema gate (renderer/schema_gate.py) and jsonschema (renderer.schema_explain)
give the same verdict on every object: the gate says "valid" alone, so a spec it let through
that jsonschema refuses would be a violation nobody is told of.

Stories: the gate file is what the CRD compiles to (refreshed with `--update-golden`, as the
golden files are); the gate and jsonschema agree on the example clusters, on generated valid
specs, and on those specs with one field anywhere replaced by a value of any shape
(tests/unit/test_cli_imports.py: a valid spec never imports jsonschema). The defaults the file
also holds (DEFAULTS, the schema's defaulted branches) give what the CRD's whole schema gives.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from renderer import schema
from renderer.schema_explain import violations
from tests.support.places import places
from tests.support.specs import PROPERTY, specs

REPO = Path(__file__).resolve().parents[3]
GATE = REPO / "renderer" / "schema_gate.py"


def test_the_gate_is_what_the_crd_compiles_to(request: pytest.FixtureRequest) -> None:
    current = schema.gate_code()
    if request.config.getoption("--update-golden", default=False):
        GATE.write_text(current, encoding="utf-8")
        return
    assert GATE.read_text(encoding="utf-8") == current, (
        "renderer/schema_gate.py is stale (the CRD changed): run pytest "
        "tests/unit/renderer/test_schema_gate.py --update-golden")


def verdicts(obj: dict[str, Any]) -> tuple[bool, bool]:
    """(the gate accepts, jsonschema finds nothing)."""
    return schema._passes_gate(obj), not violations(obj)


def whole(spec: Any) -> dict[str, Any]:
    return {"apiVersion": schema.API_VERSION, "kind": schema.KIND,
            "metadata": {"name": "c", "namespace": "n"}, "spec": spec}


def test_the_example_clusters_pass_both() -> None:
    for path in sorted((REPO / "clusters").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            assert verdicts(doc) == (True, True), path


def test_a_pattern_ends_where_gos_does_in_both() -> None:
    """Python's `$` also matches before a final newline; the API server's (Go's) does not."""
    for path in sorted((REPO / "clusters").glob("*.yaml")):
        doc = next(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        doc["spec"]["version"] = doc["spec"].get("version", "3.2.1") + "\n"
        assert verdicts(doc) == (False, False), path


# Any JSON-like value, as YAML could give it: scalars of every type (strings that look like
# numbers, quantities and versions, with a final newline too), bounds, lists and maps.
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False),
    st.sampled_from(["", "3", "3.2.1", "3.2.1\n", "1Gi", "500m", "x", "Fail", "multi-replica",
                     "-1", "30s", "/spec/replicas", "kwdb/kwdb", "a b", "A" * 70]),
    st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


@PROPERTY
@given(spec=specs())
def test_any_valid_spec_passes_both(spec: dict[str, Any]) -> None:
    assert verdicts(whole(spec)) == (True, True)


@PROPERTY
@given(spec=specs(), data=st.data())
def test_any_spec_with_one_value_replaced_anywhere_gets_the_same_verdict_from_both(
        spec: dict[str, Any], data: st.DataObject) -> None:
    changed = whole(copy.deepcopy(spec))
    where = ("spec", *data.draw(st.sampled_from([(), *places(spec)])))
    parent: Any = changed
    for part in where[:-1]:
        parent = parent[part]
    if isinstance(parent[where[-1]], dict) and data.draw(st.booleans()):
        parent[where[-1]][data.draw(st.text(max_size=6))] = data.draw(VALUES)  # an extra key
    else:
        parent[where[-1]] = data.draw(VALUES)
    gate, explained = verdicts(changed)
    assert gate == explained, (where, violations(changed))



def defaulted_by_the_whole_schema(obj: dict[str, Any]) -> dict[str, Any]:
    """Defaults as the CRD's whole schema gives them: every field walked."""
    result = copy.deepcopy(obj)
    schema._default(result, schema.openapi_schema())
    return result


@PROPERTY
@given(spec=specs(), data=st.data())
def test_defaults_come_out_as_the_whole_schema_gives_them(spec: dict[str, Any],
                                                          data: st.DataObject) -> None:
    """apply_defaults walks only the schema's defaulted branches (DEFAULTS, in the gate file):
    on any spec, with any of its objects emptied, the same object, key order included."""
    obj = whole(copy.deepcopy(spec))
    maps = [where for where, held in places(spec).items() if isinstance(held, dict)]
    empty: bool = data.draw(st.booleans())
    if maps and empty:
        where: tuple[str | int, ...] = data.draw(st.sampled_from(maps))
        spec_at(obj["spec"], where[:-1])[where[-1]] = {}
    defaulted = schema.apply_defaults(obj)
    assert repr(defaulted) == repr(defaulted_by_the_whole_schema(obj))
    assert defaulted is not obj and defaulted["spec"] is not obj["spec"], "a copy"


def spec_at(spec: Any, where: tuple[Any, ...]) -> Any:
    for part in where:
        spec = spec[part]
    return spec
