"""Parse ``metadata.managedFields`` (the ``FieldsV1`` format) and answer "who owns this field?".

The drift normaliser (reconciler.drift.normalise) walks a live object together with the field sets
of its managers: a field present in the live object but absent from what we render is a server
default when nobody owns it, and a hand-made change when a manager (``kubectl-edit``,
``kubectl-set``...) does.

FieldsV1 is a JSON tree whose keys are path elements (sigs.k8s.io/structured-merge-diff,
fieldpath/serialize-pe.go):

- ``f:<name>``     a field of a struct or map;
- ``k:<json>``     an item of an associative list, by its key fields (``k:{"name":"kwbase"}``);
- ``v:<json>``     an item of a set-like list, by value (``v:"foregroundDeletion"``);
- ``i:<index>``    an item of a list, by position;
- ``.``            the node itself (present when both the node and some children are owned).

An empty object means the node is owned as a leaf: for an atomic list or struct, everything
below it belongs to that manager too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ElementKind = Literal["f", "k", "v", "i"]


class FieldsV1Error(ValueError):
    """A managedFields entry that is not valid FieldsV1."""


def _canonical(value: Any) -> str:
    """JSON text used to compare values in ``k:`` and ``v:`` elements (typed: 8080 != "8080")."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class PathElement:
    """One step of a field path. ``value`` is the field name, the index, or canonical JSON."""

    kind: ElementKind
    value: str | int
    # For ``k:`` elements: (key field, canonical JSON of its value), sorted.
    key_fields: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def parse(text: str) -> PathElement:
        prefix, sep, rest = text.partition(":")
        if not sep:
            raise FieldsV1Error(f"path element without a prefix: {text!r}")
        if prefix == "f":
            return PathElement("f", rest)
        if prefix == "i":
            try:
                return PathElement("i", int(rest))
            except ValueError as error:
                raise FieldsV1Error(f"bad index element: {text!r}") from error
        try:
            decoded = json.loads(rest)
        except json.JSONDecodeError as error:
            raise FieldsV1Error(f"bad JSON in path element: {text!r}") from error
        if prefix == "v":
            return PathElement("v", _canonical(decoded))
        if prefix == "k":
            if not isinstance(decoded, dict) or not decoded:
                raise FieldsV1Error(f"key element is not a non-empty object: {text!r}")
            fields = tuple(sorted((str(k), _canonical(v)) for k, v in decoded.items()))
            return PathElement("k", _canonical(decoded), fields)
        raise FieldsV1Error(f"unknown path element prefix {prefix!r} in {text!r}")

    def matches_item(self, item: Any) -> bool:
        """Whether a list item is the one this ``k:`` or ``v:`` element names."""
        if self.kind == "v":
            return self.value == _canonical(item)
        if self.kind == "k" and isinstance(item, Mapping):
            return all(
                name in item and _canonical(item[name]) == value for name, value in self.key_fields
            )
        return False

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


@dataclass(frozen=True)
class FieldSet:
    """A node of a manager's field tree. ``children`` empty means "owned as a leaf"."""

    children: Mapping[PathElement, FieldSet] = field(default_factory=dict)
    # True when the raw node had a "." entry: the node itself is owned, not only its children.
    owns_self: bool = False

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def field_child(self, name: str) -> FieldSet | None:
        return self.children.get(PathElement("f", name))

    def item_child(self, item: Any, index: int | None = None) -> FieldSet | None:
        """The node of a list item, found by key (``k:``), value (``v:``) or position (``i:``)."""
        for element, child in self.children.items():
            if element.kind in ("k", "v") and element.matches_item(item):
                return child
        if index is not None:
            return self.children.get(PathElement("i", index))
        return None

    def paths(self) -> list[tuple[PathElement, ...]]:
        """Every owned path, leaves and "." nodes, depth first (for logs and tests)."""
        found: list[tuple[PathElement, ...]] = []
        for element, child in self.children.items():
            if child.is_leaf or child.owns_self:
                found.append((element,))
            found.extend((element, *rest) for rest in child.paths())
        return found


def parse_fields_v1(raw: Any) -> FieldSet:
    """Parse one ``fieldsV1`` object into a :class:`FieldSet`."""
    if not isinstance(raw, Mapping):
        raise FieldsV1Error(f"fieldsV1 node is not an object: {raw!r}")
    children: dict[PathElement, FieldSet] = {}
    owns_self = False
    for key, value in raw.items():
        if key == ".":
            owns_self = True
            continue
        children[PathElement.parse(str(key))] = parse_fields_v1(value)
    return FieldSet(children, owns_self)


@dataclass(frozen=True)
class ManagedFieldsEntry:
    """One element of ``metadata.managedFields``."""

    manager: str
    operation: str
    api_version: str
    fields: FieldSet
    # Kubernetes 1.22+ records the subresource ("status", "scale"); older servers leave it empty.
    subresource: str = ""


def parse_managed_fields(raw: Any) -> tuple[tuple[ManagedFieldsEntry, ...], tuple[str, ...]]:
    """Parse ``metadata.managedFields``: the usable entries and a warning per skipped entry.

    Accepts the API's camelCase form (``fieldsV1``, ``apiVersion``) and the snake_case form of
    the typed Python client (``fields_v1``, ``api_version``). An entry that is not FieldsV1 is
    skipped with a warning rather than failing the whole comparison.
    """
    if raw is None:
        return (), ()
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return (), (f"metadata.managedFields is not a list: {type(raw).__name__}",)
    entries: list[ManagedFieldsEntry] = []
    warnings: list[str] = []
    for position, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            warnings.append(f"managedFields[{position}] is not an object")
            continue
        manager = str(entry.get("manager") or "")
        fields_type = entry.get("fieldsType", entry.get("fields_type", "FieldsV1"))
        if fields_type != "FieldsV1":
            warnings.append(f"managedFields[{position}] ({manager}): fieldsType {fields_type!r}")
            continue
        try:
            fields = parse_fields_v1(entry.get("fieldsV1", entry.get("fields_v1")) or {})
        except FieldsV1Error as error:
            warnings.append(f"managedFields[{position}] ({manager}): {error}")
            continue
        entries.append(
            ManagedFieldsEntry(
                manager=manager,
                operation=str(entry.get("operation") or ""),
                api_version=str(entry.get("apiVersion", entry.get("api_version")) or ""),
                fields=fields,
                subresource=str(entry.get("subresource") or ""),
            )
        )
    return tuple(entries), tuple(warnings)
