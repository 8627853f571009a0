"""The reconciler's writes to objects it manages: apply, remove hand-added fields, delete.

The Controller (reconciler.controller) decides what to repair; `Repairer` does the writing
(each request counted in `writes_total{verb,kind}` by the client it writes through,
reconciler.kube.writes.CountedKube):
- `apply`: server-side apply (force) under the one field manager: creates a missing object, puts
  back values someone changed, re-adds fields someone removed, and drops fields we applied once
  and no longer render. `dry_run` is the same request with dryRun=All (nothing is stored).
- `remove_fields`: what apply cannot do: fields another manager added inside an object we own
  (an env var from `kubectl set env`) stay after any apply, because server-side apply only removes
  fields the applier itself owns. They are removed with a JSON patch whose `test` operations make
  sure we remove exactly what we judged (a concurrent change fails the patch with 422 instead).
- `delete`: pruning an object we no longer render, and the orphaning delete before recreating a
  StatefulSet whose immutable fields changed (pods and claims stay; the new StatefulSet adopts
  them). Every delete carries the uid precondition: never a successor with the same name.

`live_pointer` turns a drift report's pointer, where keyed-list items are named by key
(`/spec/template/spec/containers/kwbase/env/FOO`), into the RFC 6901 pointer of the same place in
the live object (`/spec/template/spec/containers/0/env/3`), using the list keys of
reconciler.drift.schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.drift.ignore import format_pointer, parse_pointer
from reconciler.drift.schema import ListSpec, TypeSpec, child_type, item_type, root_type
from reconciler.kube.client import Kube
from reconciler.kube.kinds import Kind, kind_of
from reconciler.model import Obj


@dataclass(frozen=True)
class LivePlace:
    """Where a report pointer lands in the live object: its index pointer and current value."""

    pointer: str
    value: Any


def live_pointer(live: Mapping[str, Any], report_pointer: str) -> LivePlace | None:
    """The live-object place of a drift report pointer (None when it is not there any more)."""
    spec: TypeSpec | None = root_type(str(live.get("kind") or ""))
    list_spec: ListSpec | None = None
    node: Any = live
    steps: list[str | int] = []
    for token in parse_pointer(report_pointer):
        if isinstance(node, Mapping):
            if token not in node:
                return None
            spec, list_spec = child_type(spec, token)
            node = node[token]
            steps.append(token)
        elif isinstance(node, list):
            index = _list_index(node, token, list_spec)
            if index is None:
                return None
            spec = item_type(list_spec) if list_spec is not None else None
            list_spec = None
            node = node[index]
            steps.append(index)
        else:
            return None
    return LivePlace(format_pointer(steps), node)


def _list_index(items: list[Any], token: str, spec: ListSpec | None) -> int | None:
    """The position of the item a report names: by key in keyed lists (keyless items are
    `#<position>`, as reconciler.drift.normalise names them), by position elsewhere."""
    if spec is not None and spec.semantics == "keyed":
        for index, item in enumerate(items):
            key = spec.key_text(item)
            if (key if key is not None else f"#{index}") == token:
                return index
        return None
    if token.isdigit() and int(token) < len(items):
        return int(token)
    return None


def removal_patch(live: Mapping[str, Any], pointers: Iterable[str]) -> list[dict[str, Any]]:
    """JSON patch operations removing each place (test first, so nothing else is removed).

    Removals run from the deepest and highest list index first: removing an item shifts the
    indexes of those after it."""
    places = [place for pointer in pointers if (place := live_pointer(live, pointer)) is not None]
    # Parents first would make their children's removals fail: drop places inside others.
    chosen = [p for p in places
              if not any(o is not p and p.pointer.startswith(o.pointer + "/") for o in places)]
    chosen.sort(key=lambda place: _sort_key(place.pointer), reverse=True)
    ops: list[dict[str, Any]] = []
    for place in chosen:
        ops.append({"op": "test", "path": place.pointer, "value": place.value})
        ops.append({"op": "remove", "path": place.pointer})
    return ops


def _sort_key(pointer: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in parse_pointer(pointer))


class Repairer:
    """Writes to managed objects (see the module docstring)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def apply(self, obj: Obj) -> Obj:
        return self.kube.apply(obj)

    def dry_run(self, obj: Obj) -> Obj:
        """What applying `obj` would store (the API server's defaults and admission included).
        Counted as verb dry_run: the audit log shows it as a patch, though nothing is stored
        (reconciler.kube.writes)."""
        return self.kube.apply(obj, dry_run=True)

    def create(self, obj: Obj) -> Obj:
        return self.kube.create(obj)

    def remove_fields(self, live: Obj, pointers: Sequence[str]) -> Obj | None:
        """Remove the fields at these report pointers from the live object; returns the object
        as stored, or None when none of the places exists any more (nothing written)."""
        ops = removal_patch(live, pointers)
        if not ops:
            return None
        return self.json_patch(live, ops)

    def json_patch(self, live: Obj, ops: list[Obj]) -> Obj:
        """An RFC 6902 patch of the live object (`test` operations guard the rest)."""
        kind = kind_of(live)
        meta = live["metadata"]
        return self.kube.json_patch(kind, meta.get("namespace"), meta["name"], ops)

    def delete(self, kind: Kind, live: Obj, *, propagation: str) -> bool:
        """Delete the object we judged (uid precondition); False when it was already gone."""
        meta = live["metadata"]
        return self.kube.delete(kind, meta.get("namespace"), meta["name"], uid=meta.get("uid"),
                                propagation=propagation)

    def replace_status(self, obj: Obj) -> Obj:
        return self.kube.replace_status(obj)
