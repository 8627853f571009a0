"""Every kind of schema mistake tells the user what is wrong and what to write instead.

renderer.schema checks a KaiwuCluster against the CRD's structural schema, as the API server
would (Go's `$`, the int32/int64 ranges of its decoding), and says each mistake in words: the
path, what is wrong, and the fix. Each case is one mistake a user makes in a spec, and the line
they read.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from renderer import schema, schema_explain
from tests.support.render import cluster, dotted

KNOWN_SPEC_FIELDS = (
    "annotations, bootstrap, cache, drift, extraArgs, extraEnv, failover, image, labels, "
    "maxSQLMemory, monitoring, networkPolicy, nodeTuning, paused, podDisruptionBudget, "
    "podSecurity, replicas, resources, scheduling, service, startMode, storage, "
    "terminationGracePeriodSeconds, tls, version")

CASES: list[tuple[dict[str, Any], str, str, str]] = [
    ({"replicaz": 3}, "spec.replicaz", "unknown field 'replicaz'", "did you mean 'replicas'?"),
    ({"zzzqqq": 3}, "spec.zzzqqq", "unknown field 'zzzqqq'", f"known fields: {KNOWN_SPEC_FIELDS}"),
    ({"scheduling": {"topologySpread": [{"maxSkew": 1}]}},
     "spec.scheduling.topologySpread[0].topologyKey", "required field 'topologyKey' is missing",
     "add topologyKey"),
    ({"startMode": "two"}, "spec.startMode", "'two' is not allowed",
     "use one of: multi-replica, single-replica, single-node"),
    ({"replicas": "three"}, "spec.replicas", "expected integer, got string 'three'",
     "write a value of type integer"),
    ({"replicas": 3.5}, "spec.replicas", "expected integer, got number 3.5",
     "write a value of type integer"),
    ({"cache": None}, "spec.cache", "expected string, got null None",
     "write a value of type string"),
    ({"paused": "yes"}, "spec.paused", "expected boolean, got string 'yes'",
     "write a value of type boolean"),
    ({"replicas": True}, "spec.replicas", "expected integer, got boolean True",
     "write a value of type integer"),
    ({"cache": 5}, "spec.cache", "expected string, got integer 5", "write a value of type string"),
    ({"cache": (1, 2)}, "spec.cache", "expected string, got tuple (1, 2)",
     "write a value of type string"),
    ({"storage": {"size": [1]}}, "spec.storage.size",
     "expected integer or string, got list [1]", "write a value of type integer or string"),
    ({"storage": {"size": {"a": 1}}}, "spec.storage.size",
     "expected integer or string, got object {'a': 1}", "write a value of type integer or string"),
    ({"storage": {"size": "10 GB"}}, "spec.storage.size", "'10 GB' has the wrong form",
     "write a Kubernetes quantity such as 500m, 4, 512Mi or 8Gi"),
    ({"failover": {"nodeLostTimeout": "5 min"}}, "spec.failover.nodeLostTimeout",
     "'5 min' has the wrong form", "write a duration such as 30s, 5m or 1h30m"),
    ({"drift": {"ignore": [{"pointer": "spec"}]}}, "spec.drift.ignore[0].pointer",
     "'spec' has the wrong form", "write a JSON pointer such as /spec/replicas"),
    ({"version": "3.2"}, "spec.version", "'3.2' has the wrong form",
     "write a plain version such as 3.2.1"),
    ({"version": "3.2.1\n"}, "spec.version", "'3.2.1\\n' has the wrong form",
     "write a plain version such as 3.2.1"),
    ({"image": {"repository": "Kwdb/KWDB:1"}}, "spec.image.repository",
     "'Kwdb/KWDB:1' has the wrong form",
     "write a repository without tag or digest, such as kwdb/kwdb or "
     "registry.example.com:5000/kwdb/kwdb (the tag is spec.version)"),
    ({"labels": {"team": "b c"}}, "spec.labels.team", "'b c' has the wrong form",
     "a label value holds letters, digits, '-', '_' and '.', and starts and ends with a letter "
     "or digit"),
    ({"tls": {"clientUsers": ["App"]}}, "spec.tls.clientUsers[0]", "'App' has the wrong form",
     "it must match ^[a-z][a-z0-9_]{0,31}$"),
    ({"scheduling": {"priorityClassName": "p" * 300}}, "spec.scheduling.priorityClassName",
     f"'{'p' * 37}...' is 300 characters long", "use at most 253 characters"),
    ({"cache": "x" * 65}, "spec.cache", "'" + "x" * 37 + "...' is 65 characters long",
     "use at most 64 characters"),
    ({"scheduling": {"topologySpread": [{"topologyKey": ""}]}},
     "spec.scheduling.topologySpread[0].topologyKey", "'' is 0 characters long",
     "use at least 1 characters"),
    ({"replicas": 1000}, "spec.replicas", "1000 is out of range", "use a value at most 99"),
    ({"replicas": 0}, "spec.replicas", "0 is out of range", "use a value at least 1"),
    ({"tls": {"clientUsers": [f"u{i}" for i in range(21)]}}, "spec.tls.clientUsers",
     repr([f"u{i}" for i in range(21)]) + " is out of range", "use a value at most 20"),
    ({"scheduling": {"tolerations": [{"key": "db", "tolerationSeconds": 2**63}]}},
     "spec.scheduling.tolerations[0].tolerationSeconds", f"{2**63} is out of range",
     f"use a value at most {2**63 - 1}"),
    ({"scheduling": {"tolerations": [{"key": "db", "tolerationSeconds": -(2**63) - 1}]}},
     "spec.scheduling.tolerations[0].tolerationSeconds", f"{-(2**63) - 1} is out of range",
     f"use a value at least {-(2**63)}"),
]


@pytest.mark.parametrize(("spec", "path", "message", "fix"), CASES,
                         ids=[f"{index}-{case[1]}".replace("[", "-").replace("]", "")
                              for index, case in enumerate(CASES)])
def test_a_schema_mistake_reads_as_what_is_wrong_and_what_to_write(
        spec: dict[str, Any], path: str, message: str, fix: str) -> None:
    found = schema.validate(cluster("orders", "shop", **{"version": "3.2.1", **spec}))
    assert [(dotted(v.path), v.message, v.fix) for v in found] == [(path, message, fix)]


def test_several_mistakes_are_listed_in_the_order_of_their_paths() -> None:
    found = schema.validate(cluster("orders", "shop", version="3.2", replicas=0,
                                    cache="x" * 65))
    assert [dotted(v.path) for v in found] == ["spec.cache", "spec.replicas", "spec.version"]


def test_defaults_fill_what_the_user_left_out_at_every_depth_but_never_what_they_wrote() -> None:
    written = cluster("orders", "shop", version="3.2.1", replicas=5,
                      scheduling={"topologySpread": [{"topologyKey": "zone"}]},
                      resources={"limits": {"memory": "8Gi"}})
    defaulted = schema.apply_defaults(written)
    spec = defaulted["spec"]
    assert spec["replicas"] == 5 and spec["startMode"] == "multi-replica"
    assert spec["scheduling"]["antiAffinity"] == "preferred"
    assert spec["scheduling"]["topologySpread"] == [
        {"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]
    assert spec["resources"] == {"limits": {"memory": "8Gi"}}
    assert "scheduling" not in cluster("orders", "shop")["spec"], "the input is left alone"
    assert written["spec"]["scheduling"] == {"topologySpread": [{"topologyKey": "zone"}]}
    assert defaulted["metadata"] == {"name": "orders", "namespace": "shop"}


def test_the_crds_structural_schema_becomes_the_json_schema_the_api_server_enforces() -> None:
    """The translation the checks above rest on (the validator is built once and cached, so
    it is shown here on small schemas): int-or-string keeps its pattern for strings only, the
    Go decoding's int32/int64 ranges become bounds, objects refuse unknown fields, and what only
    documents or defaults a field is dropped."""
    node = {"type": "object", "description": "d", "default": {},
            "x-kubernetes-validations": [{"rule": "true"}],
            "properties": {
                "size": {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+Gi$"},
                "any": {"x-kubernetes-int-or-string": True},
                "count": {"type": "integer", "format": "int32", "minimum": 1},
                "big": {"type": "integer", "format": "int64"},
                "ratio": {"type": "number", "format": "int32"},
                "note": {"type": "string", "nullable": True, "maxLength": 3},
                "labels": {"type": "object", "additionalProperties": {
                    "type": "string", "description": "v"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "properties": {"a": {"type": "string"}}},
                "items": {"type": "array", "items": {"type": "integer", "format": "int32",
                                                     "default": 1}}}}
    assert schema._to_json_schema(node) == {
        "type": "object", "additionalProperties": False,
        "properties": {
            "size": {"anyOf": [{"type": "integer"},
                               {"type": "string", "pattern": "^[0-9]+Gi$"}]},
            "any": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "count": {"type": "integer", "format": "int32", "minimum": 1,
                      "maximum": 2**31 - 1},
            "big": {"type": "integer", "format": "int64", "minimum": -(2**63),
                    "maximum": 2**63 - 1},
            "ratio": {"type": "number", "format": "int32"},
            "note": {"type": "string", "maxLength": 3},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "properties": {"a": {"type": "string"}}},
            "items": {"type": "array", "items": {"type": "integer", "format": "int32",
                                                 "minimum": -(2**31), "maximum": 2**31 - 1}}}}


def test_defaults_reach_the_values_of_a_map_too() -> None:
    """A map whose values are objects with defaults (none in the CRD today) gets them per value,
    as the API server defaults them."""
    node = {"type": "object", "properties": {"pools": {
        "type": "object", "additionalProperties": {
            "type": "object", "properties": {"size": {"type": "integer", "default": 3}}}}}}
    value = {"pools": {"a": {}, "b": {"size": 5}}}
    schema._default(value, node)
    assert value == {"pools": {"a": {"size": 3}, "b": {"size": 5}}}


@pytest.mark.parametrize(("keyword", "bad", "message", "fix"), [
    ({"minItems": 1}, [], "[] is out of range", "use a value at least 1"),
    ({"multipleOf": 5}, 7, "7 is not a multiple of 5", "see `kubectl explain` for the field"),
])
def test_a_validator_the_crd_does_not_use_yet_still_reads_as_a_mistake_and_a_fix(
        keyword: dict[str, Any], bad: Any, message: str, fix: str) -> None:
    """A CRD that gains minItems reads like maxItems; any other new validator keeps its own
    message, with where to look."""
    [error] = jsonschema.Draft4Validator({"properties": {"spec": keyword}}).iter_errors(
        {"spec": bad})
    violation = schema_explain._describe(error)
    assert (violation.path, violation.message, violation.fix) == (("spec",), message, fix)


def test_a_too_long_value_is_shown_whole_up_to_40_characters() -> None:
    check = jsonschema.Draft4Validator({"properties": {"spec": {"maxLength": 3}}})
    for value, shown in (("y" * 40, "y" * 40), ("y" * 41, "y" * 37 + "...")):
        [error] = check.iter_errors({"spec": value})
        message = schema_explain._describe(error).message
        assert message == f"{shown!r} is {len(value)} characters long"


def test_every_crd_file_reads_the_same_with_libyaml_as_with_a_yaml_1_2_reader() -> None:
    """The CRDs are read with PyYAML's C loader (YAML 1.1) for speed; a YAML 1.2 reader
    (ruamel) must read them alike, so no `on`, `no` or octal-looking value means two things."""
    from pathlib import Path

    import yaml
    from ruamel.yaml import YAML

    files = sorted((Path(__file__).resolve().parents[3] / "crd").glob("*.yaml"))
    assert len(files) == 3
    for path in files:
        text = path.read_text()
        assert yaml.load(text, Loader=yaml.CSafeLoader) == YAML(typ="safe").load(text), path
