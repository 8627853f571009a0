"""The KaiwuCluster schema from the CRD: validation and defaulting, as the API server does them.

Called by `renderer.render` for every spec and by the reconciler for every live object, so that
CI, the API server and the reconciler agree on what a spec means. The CRD's structural OpenAPI
schema is turned into JSON Schema once (int-or-string, and unknown fields refused: the API server
would silently prune them, which hides typos, so the renderer is stricter). Defaults are applied
top-down exactly like the API server: a field's default applies when the field is absent, and
nested defaults apply only inside objects that exist (the CRD gives objects `default: {}`).

The CRD ships inside this package (renderer/crd/kaiwuclusters.yaml, package data) and is read
with importlib.resources, so a plain `pip install` or a wheel works from any directory; the
repository's crd/kaiwuclusters.yaml is a symlink to it, for `kubectl apply -f crd/`.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import jsonschema
import yaml

# One copy of the CRD: package data beside this module (crd/ in the repository links here).
CRD_FILE: Traversable = resources.files("renderer") / "crd" / "kaiwuclusters.yaml"
GROUP = "kaiwu.inspur.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "KaiwuCluster"
PLURAL = "kaiwuclusters"
# The backup kinds' CRDs (docs/backup.md), package data beside the KaiwuCluster's. The renderer
# does not render them; `kaiwu install` ships them and the reconciler acts on them.
BACKUP_KIND, BACKUP_PLURAL = "KaiwuBackup", "kaiwubackups"
SCHEDULE_KIND, SCHEDULE_PLURAL = "KaiwuBackupSchedule", "kaiwubackupschedules"
BACKUP_CRD_FILES: tuple[Traversable, ...] = (
    resources.files("renderer") / "crd" / "kaiwubackups.yaml",
    resources.files("renderer") / "crd" / "kaiwubackupschedules.yaml",
)


# The ranges of the integer formats the CRD uses.
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@dataclass(frozen=True)
class SchemaViolation:
    """One schema error: the path inside the object, the message and the fix."""

    path: tuple[str | int, ...]
    message: str
    fix: str


@cache
def crd_manifest(crd_file: Traversable = CRD_FILE) -> dict[str, Any]:
    """The CRD as a plain dict (cached: it is read once per process). Our own file, read with
    libyaml (PyYAML's C loader, as renderer.loader reads specs): ruamel's pure-Python reader
    took a quarter of a second of every `kaiwu validate` on this 60 KB file; both read it alike
    (tests/unit/renderer/test_schema_messages.py)."""
    with crd_file.open("r", encoding="utf-8") as handle:
        loaded: dict[str, Any] = yaml.load(
            handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml if built
    return loaded


def openapi_schema() -> dict[str, Any]:
    """The `openAPIV3Schema` of the served version."""
    for version in crd_manifest()["spec"]["versions"]:
        if version["name"] == VERSION:
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    raise LookupError(f"{CRD_FILE} has no version {VERSION}")  # pragma: no cover


def _to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """Translate one structural-schema node (and its children) to JSON Schema."""
    result = {key: value for key, value in node.items()
              if not key.startswith("x-kubernetes-") and key not in ("default", "description")}
    if node.get("x-kubernetes-int-or-string"):
        pattern = result.pop("pattern", None)
        string_schema: dict[str, Any] = {"type": "string"}
        if pattern:
            string_schema["pattern"] = pattern
        result["anyOf"] = [{"type": "integer"}, string_schema]
    if node.get("nullable"):
        result.pop("nullable")
    if node.get("type") == "integer" and node.get("format") in INT_RANGES:
        # The format's range, as the API server's decoding into Go int32/int64 fields enforces
        # it (the CRD cannot state int64 bounds: they would be held as float64).
        low, high = INT_RANGES[node["format"]]
        result.setdefault("minimum", low)
        result.setdefault("maximum", high)
    if "properties" in node:
        result["properties"] = {name: _to_json_schema(child)
                                for name, child in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            result["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        result["additionalProperties"] = _to_json_schema(node["additionalProperties"])
    if "items" in node:
        result["items"] = _to_json_schema(node["items"])
    return result


def _go_pattern(validator: Any, pattern: str, instance: Any,
                _schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    """`pattern` as the API server matches it (Go RE2): `$` ends the text. Python's `$` also
    matches before a final newline, which would let a version such as "3.2.1\n" through."""
    if validator.is_type(instance, "string") and not re.search(_END.sub(r"\\Z", pattern),
                                                                instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_END = re.compile(r"(?<!\\)\$")  # an unescaped `$` (the CRD's patterns use no `[$]`)
# The stubs leave `extend` unannotated.
_Validator: type[jsonschema.protocols.Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft4Validator, {"pattern": _go_pattern})


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = _to_json_schema(openapi_schema())
    # metadata is validated by the API server's own rules; renderer/semantics.py checks names.
    schema["properties"]["metadata"] = {"type": "object"}
    return _Validator(schema)


def validate(obj: dict[str, Any]) -> list[SchemaViolation]:
    """Every schema violation of a KaiwuCluster object (plain dict), deepest first."""
    violations = []
    for error in _leaf_errors(_validator().iter_errors(obj)):
        violations.append(_describe(error))
    return sorted(violations, key=lambda violation: [str(part) for part in violation.path])


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
    return SchemaViolation(path, str(error.message), "see `kubectl explain kaiwucluster.spec`")


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
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$": "a label value holds letters, digits, "
                                                      "'-', '_' and '.', and starts and ends "
                                                      "with a letter or digit",
}


def _type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def apply_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` with the schema's defaults applied the way the API server applies them."""
    result = copy.deepcopy(obj)
    _default(result, openapi_schema())
    return result


def _default(value: Any, schema: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                _default(value[name], child)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in value:
                _default(value[name], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])
