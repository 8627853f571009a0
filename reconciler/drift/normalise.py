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
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from reconciler.drift.ignore import BUILTIN_IGNORE_RULES, WILDCARD, IgnoreRule
from reconciler.drift.managed_fields import FieldSet, ManagedFieldsEntry, parse_managed_fields
from reconciler.drift.schema import (
    NO_DEFAULT,
    ZERO_IS_A_VALUE,
    Derived,
    ListSpec,
    TypeSpec,
    child_type,
    item_type,
    root_type,
)
from renderer import quantity
from renderer.redact import (
    SECRET_NAMES,
    is_secret_flag,
    is_secret_name,
    mask,
    mask_base64,
    mask_flag,
)

# The pseudo-key under which an ordered keyed list keeps the relative order of its items. Keys
# of such lists are container names (DNS labels), which cannot contain "$".
ORDER_KEY: Final = "$order"
# The API server rounds resource list quantities up to whole millis (SetDefaults_ResourceList).
# Top-level fields that are identity or server state, never content.
_TOP_LEVEL_DROPPED = frozenset({"apiVersion", "kind", "status"})


@dataclass(frozen=True)
class DriftSettings:
    """How drift is judged. Defaults are what the reconciler uses."""

    # Our server-side-apply field manager. Fields it owns (operation Apply) but we no longer
    # render are drift: our next apply removes them.
    field_manager: str = "kaiwu-reconciler"
    # managedFields operations whose fields count as someone's deliberate change.
    counted_operations: frozenset[str] = frozenset({"Update", "Apply"})
    # Apply reconciler.drift.ignore.BUILTIN_IGNORE_RULES (fields other controllers own by design).
    builtin_ignores: bool = True
    # Env vars, annotations and --flags whose names match have their values masked (Secret
    # data always is).
    secret_names: str = SECRET_NAMES
    # HMAC key of the masks. Random per process by default: masks are comparable within one
    # process; pass a fixed key (e.g. derived from the KaiwuCluster uid) for masks that stay
    # the same across restarts.
    mask_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)


DEFAULT_SETTINGS: Final = DriftSettings()


@dataclass(frozen=True)
class Projection:
    """Desired and live, normalised for comparison. Secrets are already masked.

    ``live`` is None when the object does not exist. ``keyed_paths`` lists the paths of keyed
    lists (turned into maps keyed by item key); ``owners`` gives, for live fields that someone
    owns in managedFields, the managers that own them (for reports: "changed by kubectl-set").
    """

    kind: str
    namespace: str
    name: str
    desired: Mapping[str, Any]
    live: Mapping[str, Any] | None
    keyed_paths: frozenset[tuple[str, ...]]
    owners: Mapping[tuple[str, ...], tuple[str, ...]]
    warnings: tuple[str, ...] = ()


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
class _Owner:
    """A manager's position in its field tree while walking.

    ``node`` None means the manager owns the whole value here: as a leaf it names itself
    (``inherited`` False), or as part of an atomic value above (``inherited`` True).
    """

    manager: str
    node: FieldSet | None
    inherited: bool = False

    def owns_here(self) -> bool:
        return self.node is None or self.node.owns_self

    def _step(self, child: FieldSet | None) -> _Owner | None:
        if child is None:
            return None
        return _Owner(self.manager, None if child.is_leaf else child)

    def at_field(self, name: str) -> _Owner | None:
        if self.node is None:
            return _Owner(self.manager, None, inherited=True)
        return self._step(self.node.field_child(name))

    def at_item(self, item: Any, index: int | None) -> _Owner | None:
        if self.node is None:
            return _Owner(self.manager, None, inherited=True)
        return self._step(self.node.item_child(item, index))


@dataclass(frozen=True)
class _Cursor:
    """How much of an ignore rule's pointer is still to be matched below the current node."""

    rule: IgnoreRule
    rest: tuple[str, ...]


@dataclass(frozen=True)
class _Ctx:
    path: tuple[str, ...]
    type: TypeSpec | None = None
    list_spec: ListSpec | None = None
    owners: tuple[_Owner, ...] = ()
    cursors: tuple[_Cursor, ...] = ()
    mask: MaskMode = ""
    # "milli": a resource list value (rounded up to whole millis, as the server does).
    quantity: Literal["", "plain", "milli"] = ""


def _is_empty(value: Any) -> bool:
    return value is None or value is ABSENT or (isinstance(value, (dict, list)) and not value)


def _is_zero_scalar(value: Any) -> bool:
    return value is False or value == "" or (type(value) in (int, float) and value == 0)


def _canonical_number(value: Any) -> Any:
    if type(value) is float and value.is_integer():
        return int(value)
    return value


class _Lists:
    """How `_Walker` walks lists: keyed (matched by key, order kept where Kubernetes gives it
    meaning), set (order ignored) and atomic (compared whole). Split out of `_Walker`, which
    provides `walk` and `keyed_paths`."""

    keyed_paths: set[tuple[str, ...]]
    secret_names: re.Pattern[str]

    def walk(self, ref: Any, live: Any, ctx: _Ctx) -> tuple[Any, Any]:
        raise NotImplementedError  # _Walker.walk

    def _keyed_list(self, ref: Any, live: Any, ctx: _Ctx, spec: ListSpec) -> tuple[Any, Any]:
        self.keyed_paths.add(ctx.path)
        ref_items = _index_items(ref, spec) if isinstance(ref, list) else None
        live_items = _index_items(live, spec) if isinstance(live, list) else None
        out_ref: dict[str, Any] = {}
        out_live: dict[str, Any] = {}
        for key, (ref_index, ref_item) in (ref_items or {}).items():
            live_index, live_item = (live_items or {}).get(key, (None, ABSENT))
            child = self._item_ctx(ctx, spec, key, ref_index, live_index, ref_item, live_item)
            if _ignored(child, rendered=True):
                continue
            projected = self.walk(ref_item, live_item, child)
            if not _is_empty(projected[0]):
                out_ref[key] = projected[0]
            if not _is_empty(projected[1]):
                out_live[key] = projected[1]
        for key, (live_index, live_item) in (live_items or {}).items():
            if ref_items is not None and key in ref_items:
                continue
            # An item we do not render, in a list we do: always drift (kubectl set env).
            child = self._item_ctx(ctx, spec, key, None, live_index, ABSENT, live_item)
            if _ignored(child, rendered=False):
                continue
            projected_live = self.walk(ABSENT, live_item, child)[1]
            if not _is_empty(projected_live):
                out_live[key] = projected_live
        if ref_items and live_items and self._order_matters(spec, ref):
            common = [key for key in ref_items if key in out_ref and key in out_live]
            if len(common) >= 2:
                out_ref[ORDER_KEY] = common
                out_live[ORDER_KEY] = [key for key in live_items if key in common]
        return out_ref or ABSENT, out_live or ABSENT

    @staticmethod
    def _order_matters(spec: ListSpec, ref: Any) -> bool:
        if spec.ordered:
            return True
        if not spec.ordered_when_referenced or not isinstance(ref, list):
            return False
        names = {item.get("name") for item in ref if isinstance(item, Mapping)}
        return any(
            isinstance(item, Mapping)
            and isinstance(item.get("value"), str)
            and any(f"$({name})" in item["value"] for name in names if isinstance(name, str))
            for item in ref
        )

    def _item_ctx(
        self,
        ctx: _Ctx,
        spec: ListSpec,
        key: str,
        ref_index: int | None,
        live_index: int | None,
        ref_item: Any,
        live_item: Any,
    ) -> _Ctx:
        aliases = {key}
        for index in (ref_index, live_index):
            if index is not None:
                aliases.add(str(index))
                break  # a rendered item is addressed by its rendered position
        for item in (ref_item, live_item):
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                aliases.add(item["name"])
        owners: tuple[_Owner, ...] = ()
        if live_item is not ABSENT:
            owners = tuple(
                child
                for owner in ctx.owners
                if (child := owner.at_item(live_item, live_index)) is not None
            )
        return _Ctx(
            path=(*ctx.path, key),
            type=item_type(spec),
            owners=owners,
            cursors=_advance(ctx.cursors, tuple(aliases)),
            mask=ctx.mask,
        )

    @staticmethod
    def _set_list(ref: Any, live: Any) -> tuple[Any, Any]:
        if not isinstance(ref, list):
            return ABSENT, ABSENT  # values others add to a set we do not render never count
        rendered = list(dict.fromkeys(_plain(item) for item in ref))
        if not isinstance(live, list):
            return rendered or ABSENT, ABSENT
        present = {_canonical_json(_plain(item)) for item in live}
        kept = [item for item in rendered if _canonical_json(item) in present]
        return rendered or ABSENT, kept or ABSENT

    def _atomic_list(self, ref: Any, live: Any, ctx: _Ctx, spec: ListSpec) -> tuple[Any, Any]:
        ref_list = ref if isinstance(ref, list) else None
        live_list = live if isinstance(live, list) else None
        out_ref: list[Any] = []
        out_live: list[Any] = []
        length = max(len(ref_list or ()), len(live_list or ()))
        for index in range(length):
            ref_item = ref_list[index] if ref_list is not None and index < len(ref_list) else ABSENT
            live_item = (
                live_list[index] if live_list is not None and index < len(live_list) else ABSENT
            )
            owners: tuple[_Owner, ...] = ()
            if live_item is not ABSENT:
                owners = tuple(
                    sub
                    for owner in ctx.owners
                    if (sub := owner.at_item(live_item, index)) is not None
                )
            mask_mode = ctx.mask
            if mask_mode == "flags" and index and any(
                    is_secret_flag(side[index - 1], self.secret_names)
                    for side in (ref_list, live_list) if side is not None and index <= len(side)):
                # The value of a bare `--api-token`: masked whole on both sides, so equal
                # values still compare equal.
                mask_mode = "value"
            child = _Ctx(
                path=(*ctx.path, str(index)),
                type=item_type(spec),
                owners=owners,
                cursors=_advance(ctx.cursors, (str(index),)),
                mask=mask_mode,
            )
            if _ignored(child, rendered=ref_item is not ABSENT):
                continue
            projected = self.walk(ref_item, live_item, child)
            # Positions matter here: an item that normalises to nothing keeps its place.
            if ref_item is not ABSENT:
                out_ref.append(None if projected[0] is ABSENT else projected[0])
            if live_item is not ABSENT:
                out_live.append(None if projected[1] is ABSENT else projected[1])
        return out_ref or ABSENT, out_live or ABSENT

    # --- scalars ---


class _Walker(_Lists):
    """One normalisation: walks desired (or its dry run) and live together."""

    def __init__(self, settings: DriftSettings) -> None:
        self.settings = settings
        self.secret_names = re.compile(settings.secret_names)
        self.keyed_paths: set[tuple[str, ...]] = set()
        self.owners: dict[tuple[str, ...], tuple[str, ...]] = {}

    # --- dispatch ---

    def walk(self, ref: Any, live: Any, ctx: _Ctx) -> tuple[Any, Any]:
        """Project ``ref`` (what we render) and ``live``; either may be ABSENT."""
        ref = ABSENT if ref is None else list(ref) if isinstance(ref, tuple) else ref
        live = ABSENT if live is None else list(live) if isinstance(live, tuple) else live
        if live is not ABSENT:
            self._record_owners(ctx)
        if ref is not ABSENT and live is not ABSENT and _shape(ref) != _shape(live):
            # A map became a scalar, or the like: both sides stand on their own.
            return self.walk(ref, ABSENT, ctx)[0], self.walk(ABSENT, live, ctx)[1]
        sample = live if ref is ABSENT else ref
        if isinstance(sample, Mapping):
            return self._mapping(ref, live, ctx)
        if isinstance(sample, list):
            spec = ctx.list_spec or ListSpec("atomic")
            if spec.semantics == "keyed":
                return self._keyed_list(ref, live, ctx, spec)
            if spec.semantics == "set":
                return self._set_list(ref, live)
            return self._atomic_list(ref, live, ctx, spec)
        return self._scalar(ref, ctx), self._scalar(live, ctx)

    # --- maps ---

    def _mapping(self, ref: Any, live: Any, ctx: _Ctx) -> tuple[Any, Any]:
        spec = ctx.type
        ref_map: Mapping[str, Any] | None = ref if isinstance(ref, Mapping) else None
        live_map: Mapping[str, Any] | None = live if isinstance(live, Mapping) else None
        dropped = spec.server_set if spec else frozenset()
        out_ref: dict[str, Any] = {}
        out_live: dict[str, Any] = {}
        if ref_map is not None:
            for key, ref_value in ref_map.items():
                if key in dropped:
                    continue
                live_value = live_map.get(key, ABSENT) if live_map is not None else ABSENT
                child = self._field_ctx(ctx, key, ref_map, live_map)
                if _ignored(child, rendered=True):
                    continue
                if (
                    live_map is not None
                    and live_value is ABSENT
                    and _is_zero_scalar(ref_value)
                    and key not in ZERO_IS_A_VALUE
                ):
                    # The server drops zero values on output (omitempty): not a difference.
                    continue
                projected = self.walk(ref_value, live_value, child)
                self._put(out_ref, key, projected[0], ref_value, spec)
                self._put(out_live, key, projected[1], live_value, spec)
        if live_map is not None:
            open_keys = spec.open_to_others if spec else frozenset()
            for key, live_value in live_map.items():
                if (ref_map is not None and key in ref_map) or key in dropped:
                    continue
                if ref_map is not None and (
                    key in open_keys or (spec is not None and spec.map_kind == "labels")
                ):
                    continue
                child = self._field_ctx(ctx, key, ref_map, live_map)
                if _ignored(child, rendered=False):
                    continue
                if spec is not None and self._is_default(spec, key, live_value, live_map):
                    continue
                if ref_map is not None and not self._deliberate(child):
                    continue  # nobody set it: a server default
                self._put(out_live, key, self.walk(ABSENT, live_value, child)[1], live_value, spec)
        return (
            out_ref if out_ref else ABSENT,
            out_live if out_live else ABSENT,
        )

    def _deliberate(self, ctx: _Ctx) -> bool:
        """Whether a manager set this field on purpose, as far as managedFields tell.

        Inside an atomic value our own apply set (volumeClaimTemplates), anything we did not
        render was filled in by the server: had someone else changed the value, they would own
        it now.
        """
        return any(
            not (owner.inherited and owner.manager == self.settings.field_manager)
            for owner in ctx.owners
        )

    @staticmethod
    def _put(out: dict[str, Any], key: str, value: Any, raw: Any, spec: TypeSpec | None) -> None:
        if not _is_empty(value):
            out[key] = value
        elif spec is not None and key in spec.keep_empty and isinstance(raw, Mapping):
            out[key] = {}

    def _is_default(self, spec: TypeSpec, key: str, value: Any, holder: Mapping[str, Any]) -> bool:
        default = spec.defaults.get(key, NO_DEFAULT)
        if isinstance(default, Derived):
            default = default.compute(holder)
        if default is NO_DEFAULT:
            return False
        # As JSON, so that true is not 1 and "8080" is not 8080.
        return _canonical_json(_plain(value)) == _canonical_json(_plain(default))

    def _field_ctx(
        self,
        ctx: _Ctx,
        key: str,
        ref_map: Mapping[str, Any] | None,
        live_map: Mapping[str, Any] | None,
    ) -> _Ctx:
        spec = ctx.type
        child_spec, list_spec = child_type(spec, key)
        mask_mode: MaskMode = ctx.mask if ctx.mask == "flags" else ""
        quantity: Literal["", "plain", "milli"] = ""
        if spec is not None:
            if spec.map_kind == "secret-data":
                mask_mode = "base64"
            elif spec.map_kind == "quantities":
                quantity = "milli"
            elif key in spec.quantities:
                quantity = "plain"
            if key == "value" and self._secret_env(ref_map, live_map):
                mask_mode = "value"
            if spec.map_kind == "labels" and ctx.path[-1:] == ("annotations",) and \
                    is_secret_name(key, self.secret_names):
                mask_mode = "value"  # an annotation whose name looks secret
            if key in ("args", "command") and "args" in spec.lists:
                mask_mode = "flags"
        owners = tuple(child for owner in ctx.owners if (child := owner.at_field(key)) is not None)
        return _Ctx(
            path=(*ctx.path, key),
            type=child_spec,
            list_spec=list_spec,
            owners=owners if live_map is not None and key in live_map else (),
            cursors=_advance(ctx.cursors, (key,)),
            mask=mask_mode,
            quantity=quantity,
        )

    def _secret_env(self, *holders: Mapping[str, Any] | None) -> bool:
        """Whether a ``{name, value}`` pair (env var, HTTP header) names a secret."""
        for holder in holders:
            name = holder.get("name") if holder is not None else None
            if isinstance(name, str) and is_secret_name(name, self.secret_names):
                return True
        return False

    # --- lists ---

    def _scalar(self, value: Any, ctx: _Ctx) -> Any:
        if value is ABSENT or value is None:
            return ABSENT
        if ctx.quantity:
            value = quantity.comparable(value, milli=ctx.quantity != "plain")
        if isinstance(value, str):
            key = self.settings.mask_key
            if ctx.mask == "base64":
                return mask_base64(value, key)
            if ctx.mask == "value":
                return mask(value, key)
            if ctx.mask == "flags":
                return mask_flag(value, self.secret_names, key)
        elif ctx.mask in ("base64", "value"):
            return mask(_canonical_json(value), self.settings.mask_key)
        return _canonical_number(value)

    # --- owners ---

    def _record_owners(self, ctx: _Ctx) -> None:
        managers = tuple(sorted({owner.manager for owner in ctx.owners if owner.owns_here()}))
        if managers:
            self.owners[ctx.path] = managers


def _advance(cursors: tuple[_Cursor, ...], aliases: tuple[str, ...]) -> tuple[_Cursor, ...]:
    """The ignore-rule cursors that match one more step, named by any of ``aliases``."""
    return tuple(
        _Cursor(cursor.rule, cursor.rest[1:])
        for cursor in cursors
        if cursor.rest and (cursor.rest[0] == WILDCARD or cursor.rest[0] in aliases)
    )


def _ignored(ctx: _Ctx, *, rendered: bool) -> bool:
    """Whether an ignore rule covers this node (``rendered``: we render a value here)."""
    return any(
        not cursor.rest and not (cursor.rule.unless_rendered and rendered) for cursor in ctx.cursors
    )


def _shape(value: Any) -> str:
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list):
        return "list"
    return "scalar"


def _index_items(items: list[Any], spec: ListSpec) -> dict[str, tuple[int, Any]]:
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


def _plain(value: Any) -> Any:
    """A JSON-like value with integral floats as ints, for equality tests."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return _canonical_number(value)


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
            present = {_canonical_json(_plain(value)) for value in dry_run}
            return [value for value in desired if _canonical_json(_plain(value)) in present]
        if list_spec.semantics != "keyed":
            return dry_run
        by_key = _index_items(dry_run, list_spec)
        overlaid = []
        for key, (_, item) in _index_items(desired, list_spec).items():
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
    cursors = tuple(_Cursor(rule, rule.pointer) for rule in rules if rule.applies_to(kind, name))
    ref: Any = _prepare(desired)
    if dry_run is not None:
        ref = _overlay(ref, _prepare(dry_run), spec, None)
    owners: tuple[_Owner, ...] = ()
    warnings: tuple[str, ...] = ()
    live_prepared: Any = ABSENT
    if live is not None:
        live_prepared = _prepare(live)
        metadata = live.get("metadata")
        entries, warnings = parse_managed_fields(
            metadata.get("managedFields") if isinstance(metadata, Mapping) else None
        )
        owners = tuple(_Owner(entry.manager, entry.fields) for entry in _counted(entries, settings))
    walker = _Walker(settings)
    root = _Ctx(path=(), type=spec, owners=owners, cursors=cursors)
    if _ignored(root, rendered=True):
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
