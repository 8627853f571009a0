"""Where a normalisation's walk stands in the two objects: the path, the schema there, the
managers that own it (from managedFields), the ignore rules still matching, how values are
masked and read; and the small value rules every step uses (absent, empty, zero, plain JSON).

Used by reconciler.drift.walker and reconciler.drift.lists (the walk) and
reconciler.drift.normalise (its start).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from reconciler.drift.ignore import WILDCARD, IgnoreRule
from reconciler.drift.managed_fields import FieldSet
from reconciler.drift.schema import ListSpec, TypeSpec


class _Absent:
    """A field that is not there (distinct from a field whose value is null)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
MaskMode = Literal["", "value", "base64", "flags"]


@dataclass(frozen=True)
class Owner:
    """A manager's position in its field tree while walking.

    ``node`` None means the manager owns the whole value here: as a leaf it names itself
    (``inherited`` False), or as part of an atomic value above (``inherited`` True).
    """

    manager: str
    node: FieldSet | None
    inherited: bool = False

    def owns_here(self) -> bool:
        return self.node is None or self.node.owns_self

    def _step(self, child: FieldSet | None) -> Owner | None:
        if child is None:
            return None
        return Owner(self.manager, None if child.is_leaf else child)

    def at_field(self, name: str) -> Owner | None:
        if self.node is None:
            return Owner(self.manager, None, inherited=True)
        return self._step(self.node.field_child(name))

    def at_item(self, item: Any, index: int | None) -> Owner | None:
        if self.node is None:
            return Owner(self.manager, None, inherited=True)
        return self._step(self.node.item_child(item, index))


@dataclass(frozen=True)
class Cursor:
    """How much of an ignore rule's pointer is still to be matched below the current node."""

    rule: IgnoreRule
    rest: tuple[str, ...]


@dataclass(frozen=True)
class Ctx:
    path: tuple[str, ...]
    type: TypeSpec | None = None
    list_spec: ListSpec | None = None
    owners: tuple[Owner, ...] = ()
    cursors: tuple[Cursor, ...] = ()
    mask: MaskMode = ""
    # "milli": a resource list value (rounded up to whole millis, as the server does).
    quantity: Literal["", "plain", "milli"] = ""


def is_empty(value: Any) -> bool:
    return value is None or value is ABSENT or (isinstance(value, (dict, list)) and not value)


def is_zero_scalar(value: Any) -> bool:
    return value is False or value == "" or (type(value) in (int, float) and value == 0)


def canonical_number(value: Any) -> Any:
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def advance(cursors: tuple[Cursor, ...], aliases: tuple[str, ...]) -> tuple[Cursor, ...]:
    """The ignore-rule cursors that match one more step, named by any of ``aliases``."""
    return tuple(
        Cursor(cursor.rule, cursor.rest[1:])
        for cursor in cursors
        if cursor.rest and (cursor.rest[0] == WILDCARD or cursor.rest[0] in aliases)
    )


def ignored(ctx: Ctx, *, rendered: bool) -> bool:
    """Whether an ignore rule covers this node (``rendered``: we render a value here)."""
    return any(
        not cursor.rest and not (cursor.rule.unless_rendered and rendered) for cursor in ctx.cursors
    )


def shape(value: Any) -> str:
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list):
        return "list"
    return "scalar"


def index_items(items: list[Any], spec: ListSpec) -> dict[str, tuple[int, Any]]:
    """Items of a keyed list by key text; duplicates and keyless items get a ``#n`` suffix."""
    indexed: dict[str, tuple[int, Any]] = {}
    for index, item in enumerate(items):
        key = spec.key_text(item)
        if key is None:
            key = f"#{index}"
        while key in indexed:
            key = f"{key}#{index}"
        indexed[key] = (index, item)
    return indexed


def plain(value: Any) -> Any:
    """A JSON-like value with integral floats as ints, for equality tests."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return canonical_number(value)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
