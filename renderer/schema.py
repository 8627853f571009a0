"""The KaiwuCluster schema from the CRD: validation and defaulting, as the API server does them.

Called by `renderer.render` for every spec and by the reconciler for every live object, so that
CI, the API server and the reconciler agree on what a spec means. The CRD's structural OpenAPI
schema is turned into JSON Schema once (int-or-string, and unknown fields refused: the API server
would silently prune them, which hides typos, so the renderer is stricter). Defaults are applied
top-down exactly like the API server: a field's default applies when the field is absent, and
nested defaults apply only inside objects that exist (the CRD gives objects `default: {}`).

The CRD ships inside this package (renderer/crd/kaiwuclusters.yaml, package data) and is read
beside this module's file, so a plain `pip install` or a wheel works from any directory (not
importlib.resources: importing it cost every command about 7 ms of start-up, for zipped
packages we do not ship); the repository's crd/kaiwuclusters.yaml is a symlink to it, for
`kubectl apply -f crd/`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

# One copy of the CRD: package data beside this module (crd/ in the repository links here).
CRD_DIRECTORY = Path(__file__).resolve().parent / "crd"
CRD_FILE = CRD_DIRECTORY / "kaiwuclusters.yaml"
GROUP = "kaiwu.inspur.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "KaiwuCluster"
PLURAL = "kaiwuclusters"
# The backup kinds' CRDs (docs/backup.md), package data beside the KaiwuCluster's. The renderer
# does not render them; `kaiwu install` ships them and the reconciler acts on them.
BACKUP_KIND, BACKUP_PLURAL = "KaiwuBackup", "kaiwubackups"
SCHEDULE_KIND, SCHEDULE_PLURAL = "KaiwuBackupSchedule", "kaiwubackupschedules"
BACKUP_CRD_FILES: tuple[Path, ...] = (CRD_DIRECTORY / "kaiwubackups.yaml",
                                     CRD_DIRECTORY / "kaiwubackupschedules.yaml")
CRD_FILES: dict[str, Path] = {KIND: CRD_FILE, BACKUP_KIND: BACKUP_CRD_FILES[0],
                              SCHEDULE_KIND: BACKUP_CRD_FILES[1]}


# The ranges of the integer formats the CRD uses.
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@dataclass(frozen=True)
class SchemaViolation:
    """One schema error: the path inside the object, the message and the fix."""

    path: tuple[str | int, ...]
    message: str
    fix: str


@cache
def crd_manifest(crd_file: Path = CRD_FILE) -> dict[str, Any]:
    """The CRD as a plain dict (cached: it is read once per process). Our own file, read with
    libyaml (PyYAML's C loader, as renderer.loader reads specs): ruamel's pure-Python reader
    took a quarter of a second of every `kaiwu validate` on this 60 KB file; both read it alike
    (tests/unit/renderer/test_schema_messages.py)."""
    with crd_file.open("r", encoding="utf-8") as handle:
        loaded: dict[str, Any] = yaml.load(
            handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml if built
    return loaded


def openapi_schema(kind: str = KIND) -> dict[str, Any]:
    """The `openAPIV3Schema` of the served version of one of our kinds' CRDs (KaiwuCluster's
    unless another is named)."""
    crd_file = CRD_FILES[kind]
    for version in crd_manifest(crd_file)["spec"]["versions"]:
        if version["name"] == VERSION:
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    raise LookupError(f"{crd_file} has no version {VERSION}")  # pragma: no cover


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


@cache
def json_schema(kind: str = KIND) -> dict[str, Any]:
    """The KaiwuCluster object's JSON Schema (Draft 4) as validation reads it (or another of
    our kinds'): the CRD's schema translated, metadata left to the API server's own rules
    (renderer/semantics/names.py checks names)."""
    schema = _to_json_schema(openapi_schema(kind))
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


GATE_HEADER = '''"""Generated from the KaiwuCluster CRD by renderer.schema.gate_code(): do not edit.

Whether an object is valid against the CRD's schema, compiled to plain Python so that a valid
spec needs no schema library at start-up (renderer.schema.validate calls it; only an invalid one
loads jsonschema, in renderer.schema_explain, to name every violation); and DEFAULTS, the
schema's defaulted branches, which renderer.schema.apply_defaults applies (so that checking a
spec reads no CRD file). Refresh with `pytest tests/unit/renderer/test_schema_gate.py
--update-golden`.
"""
# ruff: noqa
# mypy: ignore-errors
'''
# The generated code raises fastjsonschema's exceptions; importing the package for them cost
# every command that checks a spec about 5 ms of its start-up (fastjsonschema's __init__ loads
# its generator and URL resolver). The gate needs only something to raise: _passes_gate reads
# any exception as "not valid".
_GATE_IMPORT = "from fastjsonschema import JsonSchemaValueException, JsonSchemaValuesException\n"
_GATE_EXCEPTIONS = '''
class JsonSchemaValueException(ValueError):
    """The object is not valid (the gate's verdict; jsonschema says why)."""

    def __init__(self, message, value=None, name=None, definition=None, rule=None):
        super().__init__(message)


JsonSchemaValuesException = JsonSchemaValueException
'''


def gate_code() -> str:
    """The source of renderer/schema_gate.py: json_schema() compiled to plain Python by
    fastjsonschema (imported only here), which reads a pattern's `$` as the end of the text,
    as Go does; its exceptions are defined in the file, so that running the gate imports no
    schema library. tests/unit/renderer/test_schema_gate.py checks the file holds exactly
    this."""
    import fastjsonschema

    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#",
              **_strings_first(json_schema())}
    code = fastjsonschema.compile_to_code(draft4, use_formats=False, use_default=False)
    if code.count(_GATE_IMPORT) != 1:
        raise RuntimeError("fastjsonschema's generated code no longer imports its exceptions "
                           f"as {_GATE_IMPORT.strip()!r}: update renderer.schema.gate_code")
    defaults = ("\n\n# The schema's defaulted branches (renderer.schema.defaults_schema), for "
                "renderer.schema.apply_defaults.\n"
                f"DEFAULTS = {defaults_schema()!r}\n")
    return GATE_HEADER + code.replace(_GATE_IMPORT, _GATE_EXCEPTIONS) + defaults


def _strings_first(node: Any) -> Any:
    """`node` with each int-or-string `anyOf` trying the string first. The generated code tries
    the branches in order and raises (formatting a message) for each that fails: a quantity,
    nearly always a string, cost an exception per check (about 7 per spec, a tenth of the
    gate's time). The verdict is the same in either order; jsonschema keeps the CRD's."""
    if isinstance(node, list):
        return [_strings_first(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: _strings_first(value) for key, value in node.items()}
    if [branch.get("type") for branch in result.get("anyOf", [])] == ["integer", "string"]:
        result["anyOf"] = result["anyOf"][::-1]
    return result


def _passes_gate(obj: dict[str, Any]) -> bool:
    """True only when the compiled schema accepts obj. Any doubt (a refusal, or an error of the
    generated code on an odd value) leaves the verdict to jsonschema."""
    from renderer import schema_gate

    try:
        schema_gate.validate(obj)  # type: ignore[no-untyped-call]  # generated, untyped
    except Exception:
        return False
    return True


def validate(obj: dict[str, Any]) -> list[SchemaViolation]:
    """Every schema violation of a KaiwuCluster object (plain dict), deepest first: none when
    the compiled gate accepts it, else what jsonschema finds (renderer.schema_explain)."""
    if _passes_gate(obj):
        return []
    from renderer.schema_explain import violations

    return violations(obj)


def apply_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` with the schema's defaults applied the way the API server applies them."""
    from renderer import schema_gate  # DEFAULTS: defaults_schema(), without reading the CRD

    result: dict[str, Any] = _copy(obj)
    _default(result, schema_gate.DEFAULTS)
    return result


def _copy(value: Any) -> Any:
    """A deep copy of JSON-like data (a spec as read, an object as the API server sends it),
    made more cheaply than copy.deepcopy makes it; anything else is left to copy.deepcopy."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    return copy.deepcopy(value)


def defaults_schema() -> dict[str, Any]:
    """The KaiwuCluster schema cut down to the nodes with a default at or below them: the only
    ones `_default` acts on (walking every field of every spec was most of its cost). Written
    into renderer/schema_gate.py as DEFAULTS by gate_code."""
    return _with_defaults(openapi_schema()) or {}


def _with_defaults(node: dict[str, Any]) -> dict[str, Any] | None:
    kept: dict[str, Any] = {}
    properties = {name: sub for name, child in node.get("properties", {}).items()
                  if (sub := _with_defaults(child)) is not None}
    if properties:
        kept["properties"] = properties
    for key in ("additionalProperties", "items"):
        child = node.get(key)
        if isinstance(child, dict) and (sub := _with_defaults(child)) is not None:
            kept[key] = sub
    if "default" in node:
        kept["default"] = node["default"]
    return kept or None


def _default(value: Any, schema: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = _copy(child["default"])  # JSON data: the cheaper copy
            if name in value:
                _default(value[name], child)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in value:
                _default(value[name], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])
