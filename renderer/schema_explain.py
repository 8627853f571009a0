"""Why a KaiwuCluster object fails the CRD's schema: every violation, with its path, message
and fix, from jsonschema (a Draft 4 validator whose `pattern` is Go's).

Called by renderer.schema.validate only for an object the compiled gate (renderer/
schema_gate.py) refuses, so that a valid spec never pays for importing jsonschema; the gate and
this module read the same schema (renderer.schema.json_schema), and tests/unit/renderer/
test_schema_gate.py holds them to the same verdicts.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema

from renderer.schema import KIND, SchemaViolation, json_schema

_END = re.compile(r"(?<!\\)\$")  # an unescaped `$` (the CRD's patterns use no `[$]`)


def _go_pattern(validator: Any, pattern: str, instance: Any,
                _schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    """`pattern` as the API server matches it (Go RE2): `$` ends the text. Python's `$` also
    matches before a final newline, which would let a version such as "3.2.1\n" through."""
    if validator.is_type(instance, "string") and \
            not re.search(_END.sub(r"\\Z", pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


# The stubs leave `extend` unannotated.
_Validator: type[jsonschema.protocols.Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft4Validator, {"pattern": _go_pattern})


@cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    return _Validator(json_schema(kind))


def violations(obj: dict[str, Any], kind: str = KIND) -> list[SchemaViolation]:
    """Every schema violation of a KaiwuCluster object (plain dict), or of an object of
    another of our kinds, deepest first."""
    found = [_describe(error) for error in _leaf_errors(_validator(kind).iter_errors(obj))]
    return sorted(found, key=lambda violation: [str(part) for part in violation.path])


def _leaf_errors(
    errors: Iterator[jsonschema.ValidationError],
) -> Iterator[jsonschema.ValidationError]:
    """anyOf errors (int-or-string) are reported through their most telling branch."""
    for error in errors:
        if error.validator == "anyOf" and error.context:
            strings = [sub for sub in error.context if sub.validator != "type"]
            yield strings[0] if strings else error
        else:
            yield error


def _describe(error: jsonschema.ValidationError) -> SchemaViolation:
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    kind = error.validator
    value = error.instance
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
        name = unknown[0] if unknown else "?"
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(allowed)}"
        return SchemaViolation((*path, name), f"unknown field {name!r}", hint)
    if kind == "required":
        missing = str(error.message).split("'")[1] if "'" in str(error.message) else "?"
        return SchemaViolation((*path, missing), f"required field {missing!r} is missing",
                               f"add {missing}")
    if kind == "enum":
        choices = ", ".join(str(choice) for choice in schema.get("enum", ()))
        return SchemaViolation(path, f"{value!r} is not allowed", f"use one of: {choices}")
    if kind in ("type", "anyOf"):
        expected = error.validator_value if kind == "type" else "integer or string"
        return SchemaViolation(path, f"expected {expected}, got {_type_name(value)} {value!r}",
                               f"write a value of type {expected}")
    if kind == "pattern":
        hint = _PATTERN_HINTS.get(str(error.validator_value),
                                  f"it must match {error.validator_value}")
        return SchemaViolation(path, f"{value!r} has the wrong form", hint)
    if kind in ("minLength", "maxLength"):  # jsonschema checks the length of strings only
        text = str(value)
        bound = "at least" if kind == "minLength" else "at most"
        shown = text if len(text) <= 40 else f"{text[:37]}..."
        return SchemaViolation(path, f"{shown!r} is {len(text)} characters long",
                               f"use {bound} {error.validator_value} characters")
    if kind in ("minimum", "maximum", "minItems", "maxItems"):
        bound = "at least" if kind.startswith("min") else "at most"
        return SchemaViolation(path, f"{value!r} is out of range",
                               f"use a value {bound} {error.validator_value}")
    if kind == "oneOf":  # the backup target: exactly one of its alternatives
        branches = error.validator_value if isinstance(error.validator_value, list) else []
        options = [str(branch.get("required", ["?"])[0]) for branch in branches
                   if isinstance(branch, dict)]
        present = [c for c in options if isinstance(value, dict) and c in value]
        said = f"both {' and '.join(present)} are set" if present else "none is set"
        return SchemaViolation(path, f"exactly one of {', '.join(options)} must be set; {said}",
                               f"keep one of {', '.join(options)}")
    return SchemaViolation(path, str(error.message), "see `kubectl explain` for the field")


_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_DOMAIN_PART = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_PATH_PART = r"[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*"
# The image reference grammar (distribution/reference) for a name without tag or digest: a
# registry host (with a dot or a port, or localhost), then lower-case path components.
_REPOSITORY_PATTERN = (
    rf"^(({_DOMAIN_PART}(\.{_DOMAIN_PART})+(:[0-9]+)?|{_DOMAIN_PART}:[0-9]+|localhost)/)?"
    rf"{_PATH_PART}(/{_PATH_PART})*$"
)
_PATTERN_HINTS = {
    _QUANTITY_PATTERN: "write a Kubernetes quantity such as 500m, 4, 512Mi or 8Gi",
    "^([0-9]+(ms|s|m|h))+$": "write a duration such as 30s, 5m or 1h30m",
    "^(/([^~/]|~[01])*)+$": "write a JSON pointer such as /spec/replicas",
    r"^[0-9]+\.[0-9]+\.[0-9]+([.-][0-9A-Za-z.-]+)?$": "write a plain version such as 3.2.1",
    _REPOSITORY_PATTERN: "write a repository without tag or digest, such as kwdb/kwdb or "
                         "registry.example.com:5000/kwdb/kwdb (the tag is spec.version)",
    "^[a-z]([-a-z0-9]*[a-z0-9])?$": "a KaiwuCluster's name: lower-case letters, digits and "
                                    "'-', starting with a letter",
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$": "a label value holds letters, digits, "
                                                      "'-', '_' and '.', and starts and ends "
                                                      "with a letter or digit",
}


def _type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)
