"""The spec reference (docs/spec-reference.md), generated from the CRD so it never drifts from
the schema.

Called by tests/unit/renderer/test_crd_docs.py, which fails when docs/spec-reference.md's
section between the markers differs from `section()` and rewrites it with `pytest
--update-golden` (the golden files' refresh flag). One row per field: its path, type and
bounds, default and description, in the CRD's order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from renderer.schema import openapi_schema

BEGIN = "<!-- spec-reference: generated from the CRD by renderer/reference.py; do not edit -->"
END = "<!-- end of spec-reference -->"


def rows(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, schema node) of every property under `node`, depth first; list items are
    shown as `field[]`."""
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        yield here, child
        yield from rows(child, here)
        items = child.get("items")
        if isinstance(items, dict):
            yield from rows(items, f"{here}[]")


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        text = "int or string"
    elif node.get("type") == "array":
        items = node.get("items", {})
        text = f"list of {items.get('type', 'object')}"
    elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        values = node["additionalProperties"]
        text = "map of " + ("quantity" if values.get("x-kubernetes-int-or-string")
                            else str(values.get("type", "object")))
    else:
        text = str(node.get("type", "object"))
        if "format" in node:
            text += f" ({node['format']})"
    limits = []
    if "enum" in node:
        limits.append("one of " + ", ".join(f"`{value}`" for value in node["enum"]))
    if "minimum" in node or "maximum" in node:
        limits.append(f"{node.get('minimum', '')}..{node.get('maximum', '')}")
    if "maxLength" in node:
        limits.append(f"at most {node['maxLength']} characters")
    if "maxItems" in node:
        limits.append(f"at most {node['maxItems']} items")
    if node.get("x-kubernetes-list-type") == "map":
        keys = ", ".join(node.get("x-kubernetes-list-map-keys", ()))
        limits.append(f"one item per {keys}")
    return "; ".join([text, *limits])


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(root: str) -> str:
    """The markdown table of `spec` or `status`."""
    lines = ["| Field | Type | Default | Description |", "| --- | --- | --- | --- |"]
    node = openapi_schema()["properties"][root]
    for path, child in rows(node, root):
        default = f"`{json.dumps(child['default'])}`" if "default" in child else ""
        lines.append(f"| `{path}` | {_cell(_type(child))} | {_cell(default)} | "
                     f"{_cell(child.get('description', ''))} |")
    return "\n".join(lines)


def section() -> str:
    """The spec reference's generated section, markers included."""
    return "\n".join([
        BEGIN, "",
        "<details><summary>Every <code>spec</code> field</summary>", "", table("spec"), "",
        "</details>", "",
        "<details><summary>Every <code>status</code> field (written by the reconciler)"
        "</summary>", "", table("status"), "", "</details>", "",
        END,
    ])


def replace_section(text: str) -> str:
    """`text` (docs/spec-reference.md) with its generated section replaced by the current one."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + section() + text[end:]
