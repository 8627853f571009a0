"""Project a desired and a live Kubernetes object onto what we render, so that they compare fairly.

reconciler.drift.compare calls :func:`normalise` (the watch/repair loop calls compare). The result
is a :class:`Projection`: two plain JSON-like dicts that are equal exactly when the live object has
not drifted, by the rules of "Drift without false positives" in the design notes:

1. only what we render counts: server-set metadata, ``status``, ``apiVersion`` and ``kind`` go;
2. labels and annotations: only keys we render count;
3. quantities compare by value (canonical spelling), integral floats become ints, and an
   int-or-string keeps its type;
4. None, {} and [] mean absent (and so do zero values the server drops on output);
5. keyed lists (containers, env, volumes, mounts, ports...) become maps from key to item, so
   they match by key; where order matters (containers, init containers) a ``$order`` entry
   holds the relative order of the items both sides have; other lists compare in order;
6. a field live has and we do not render is a server default and ignored, unless
7. a manager owns it in ``metadata.managedFields`` (a hand edit; or our own earlier apply of a
   field we no longer render) and its value is not the Kubernetes default; an item added to a
   keyed list we render is always drift;
8. built-in and user ignore rules remove fields from both sides;
9. secret values are masked before anything else sees them;

and, when a server-side-apply dry run of the desired object is given, its values replace the
rendered ones wherever we render a field (design rule 6): that is the server's own view of
"desired plus defaults", mutating admission included.

The walk itself is in reconciler.drift.walker (maps and scalars) and reconciler.drift.lists,
standing at a reconciler.drift.position; what it is asked and gives is in
reconciler.drift.projection.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reconciler.drift.ignore import BUILTIN_IGNORE_RULES, IgnoreRule
from reconciler.drift.managed_fields import ManagedFieldsEntry, parse_managed_fields
from reconciler.drift.position import (
    ABSENT,
    Ctx,
    Cursor,
    Owner,
    canonical_json,
    ignored,
    index_items,
    plain,
)
from reconciler.drift.projection import DEFAULT_SETTINGS, DriftSettings, Projection
from reconciler.drift.schema import ListSpec, TypeSpec, child_type, item_type, root_type
from reconciler.drift.walker import Walker

# Top-level fields that are identity or server state, never content.
_TOP_LEVEL_DROPPED = frozenset({"apiVersion", "kind", "status"})


def _prepare(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Drop top-level identity and state; fold a Secret's stringData into data."""
    prepared = {key: value for key, value in obj.items() if key not in _TOP_LEVEL_DROPPED}
    if obj.get("kind") == "Secret" and isinstance(obj.get("stringData"), Mapping):
        data = dict(prepared.get("data") or {})
        for key, text in prepared.pop("stringData").items():
            data[key] = base64.b64encode(str(text).encode()).decode()
        prepared["data"] = data
    return prepared


def _overlay(desired: Any, dry_run: Any, spec: TypeSpec | None, list_spec: ListSpec | None) -> Any:
    """The dry run's values at the places ``desired`` renders something (design rule 6)."""
    if isinstance(desired, Mapping):
        if not isinstance(dry_run, Mapping):
            return dry_run
        out: dict[str, Any] = {}
        for key, value in desired.items():
            if key not in dry_run:
                continue  # the server dropped it (unknown field, or a zero value)
            child_spec, child_list = child_type(spec, key)
            out[key] = _overlay(value, dry_run[key], child_spec, child_list)
        return out
    if isinstance(desired, list) and isinstance(dry_run, list) and list_spec is not None:
        if list_spec.semantics == "set":
            # Finalizers others added are theirs, not part of what we want.
            present = {canonical_json(plain(value)) for value in dry_run}
            return [value for value in desired if canonical_json(plain(value)) in present]
        if list_spec.semantics != "keyed":
            return dry_run
        by_key = index_items(dry_run, list_spec)
        overlaid = []
        for key, (_, item) in index_items(desired, list_spec).items():
            if key in by_key:
                overlaid.append(_overlay(item, by_key[key][1], item_type(list_spec), None))
        return overlaid
    return dry_run


def _identity(obj: Mapping[str, Any] | None) -> tuple[str, str]:
    metadata = obj.get("metadata") if obj is not None else None
    if not isinstance(metadata, Mapping):
        return "", ""
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def normalise(
    desired: Mapping[str, Any],
    live: Mapping[str, Any] | None,
    *,
    ignore_rules: Iterable[IgnoreRule] = (),
    dry_run: Mapping[str, Any] | None = None,
    settings: DriftSettings = DEFAULT_SETTINGS,
) -> Projection:
    """Project ``desired`` and ``live`` for comparison (see the module docstring).

    ``desired`` is a rendered object; ``live`` the object as the API returns it, or None when
    it does not exist: plain JSON with camelCase keys and managedFields (a watch event, a
    dynamic client's ``to_dict()``, or ``ApiClient.sanitize_for_serialization`` of a typed
    model, never a typed model's snake_case ``to_dict()``); ``dry_run`` the result of a forced
    server-side-apply dry run of ``desired`` under ``settings.field_manager``.
    """
    kind = str(desired.get("kind") or "")
    namespace, name = _identity(desired)
    live_namespace, live_name = _identity(live)
    namespace, name = namespace or live_namespace, name or live_name
    spec = root_type(kind)
    rules = tuple(BUILTIN_IGNORE_RULES if settings.builtin_ignores else ()) + tuple(ignore_rules)
    cursors = tuple(Cursor(rule, rule.pointer) for rule in rules if rule.applies_to(kind, name))
    ref: Any = _prepare(desired)
    if dry_run is not None:
        ref = _overlay(ref, _prepare(dry_run), spec, None)
    owners: tuple[Owner, ...] = ()
    warnings: tuple[str, ...] = ()
    live_prepared: Any = ABSENT
    if live is not None:
        live_prepared = _prepare(live)
        metadata = live.get("metadata")
        entries, warnings = parse_managed_fields(
            metadata.get("managedFields") if isinstance(metadata, Mapping) else None
        )
        owners = tuple(Owner(entry.manager, entry.fields) for entry in _counted(entries, settings))
    walker = Walker(settings)
    root = Ctx(path=(), type=spec, owners=owners, cursors=cursors)
    if ignored(root, rendered=True):
        ref, live_prepared = {}, ({} if live is not None else ABSENT)
    projected_ref, projected_live = walker.walk(ref, live_prepared, root)
    if live is None:
        projected_live = None
    elif not isinstance(projected_live, dict):
        projected_live = {}  # everything live has is ignored or absent
    return Projection(
        kind=kind,
        namespace=namespace,
        name=name,
        desired=projected_ref if isinstance(projected_ref, dict) else {},
        live=projected_live,
        keyed_paths=frozenset(walker.keyed_paths),
        owners=dict(walker.owners),
        warnings=warnings,
    )


def _counted(
    entries: Sequence[ManagedFieldsEntry], settings: DriftSettings
) -> list[ManagedFieldsEntry]:
    """managedFields entries whose fields count as deliberate: see DriftSettings."""
    counted = []
    for entry in entries:
        if entry.subresource == "status" or entry.fields.is_leaf:
            continue
        if entry.operation not in settings.counted_operations:
            continue
        # Our own Update (a create or patch) may have recorded server defaults as ours; only
        # our applies say exactly what we meant to set.
        if entry.manager == settings.field_manager and entry.operation != "Apply":
            continue
        counted.append(entry)
    return counted
