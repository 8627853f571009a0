"""One normalisation's walk over desired (or its dry run) and live together: maps field by field
(server-set, defaulted and undeliberate fields dropped), scalars masked and made comparable,
and who owns each live field recorded; lists are walked by reconciler.drift.lists.

Used by reconciler.drift.normalise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from reconciler.drift.lists import Lists
from reconciler.drift.position import (
    ABSENT,
    Ctx,
    MaskMode,
    advance,
    canonical_json,
    canonical_number,
    ignored,
    is_empty,
    is_zero_scalar,
    plain,
    shape,
)
from reconciler.drift.projection import DriftSettings
from reconciler.drift.schema import (
    NO_DEFAULT,
    ZERO_IS_A_VALUE,
    Derived,
    ListSpec,
    TypeSpec,
    child_type,
)
from renderer import quantity
from renderer.redact import is_secret_name, mask, mask_base64, mask_flag


class Walker(Lists):
    """One normalisation: walks desired (or its dry run) and live together."""

    def __init__(self, settings: DriftSettings) -> None:
        self.settings = settings
        self.secret_names = re.compile(settings.secret_names)
        self.keyed_paths: set[tuple[str, ...]] = set()
        self.owners: dict[tuple[str, ...], tuple[str, ...]] = {}

    # --- dispatch ---

    def walk(self, ref: Any, live: Any, ctx: Ctx) -> tuple[Any, Any]:
        """Project ``ref`` (what we render) and ``live``; either may be ABSENT."""
        ref = ABSENT if ref is None else list(ref) if isinstance(ref, tuple) else ref
        live = ABSENT if live is None else list(live) if isinstance(live, tuple) else live
        if live is not ABSENT:
            self._record_owners(ctx)
        if ref is not ABSENT and live is not ABSENT and shape(ref) != shape(live):
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

    def _mapping(self, ref: Any, live: Any, ctx: Ctx) -> tuple[Any, Any]:
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
                if ignored(child, rendered=True):
                    continue
                if (
                    live_map is not None
                    and live_value is ABSENT
                    and is_zero_scalar(ref_value)
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
                if ignored(child, rendered=False):
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

    def _deliberate(self, ctx: Ctx) -> bool:
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
        if not is_empty(value):
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
        return canonical_json(plain(value)) == canonical_json(plain(default))

    def _field_ctx(
        self,
        ctx: Ctx,
        key: str,
        ref_map: Mapping[str, Any] | None,
        live_map: Mapping[str, Any] | None,
    ) -> Ctx:
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
        return Ctx(
            path=(*ctx.path, key),
            type=child_spec,
            list_spec=list_spec,
            owners=owners if live_map is not None and key in live_map else (),
            cursors=advance(ctx.cursors, (key,)),
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

    # --- scalars ---

    def _scalar(self, value: Any, ctx: Ctx) -> Any:
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
            return mask(canonical_json(value), self.settings.mask_key)
        return canonical_number(value)

    # --- owners ---

    def _record_owners(self, ctx: Ctx) -> None:
        managers = tuple(sorted({owner.manager for owner in ctx.owners if owner.owns_here()}))
        if managers:
            self.owners[ctx.path] = managers
