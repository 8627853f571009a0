"""How a normalisation walks lists: keyed (matched by key, order kept where Kubernetes gives it
meaning), set (order ignored) and atomic (compared whole, by position).

Used by reconciler.drift.walker, whose Walker is a Lists and provides `walk` and the maps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from reconciler.drift.position import (
    ABSENT,
    Ctx,
    Owner,
    advance,
    canonical_json,
    ignored,
    index_items,
    is_empty,
    plain,
)
from reconciler.drift.projection import ORDER_KEY
from reconciler.drift.schema import ListSpec, item_type
from renderer.redact import is_secret_flag


class Lists:
    """How `Walker` walks lists: keyed (matched by key, order kept where Kubernetes gives it
    meaning), set (order ignored) and atomic (compared whole). `Walker`
    (reconciler.drift.walker) is a Lists and provides `walk` and `keyed_paths`."""

    keyed_paths: set[tuple[str, ...]]
    secret_names: re.Pattern[str]

    def walk(self, ref: Any, live: Any, ctx: Ctx) -> tuple[Any, Any]:
        raise NotImplementedError  # Walker.walk

    def _keyed_list(self, ref: Any, live: Any, ctx: Ctx, spec: ListSpec) -> tuple[Any, Any]:
        self.keyed_paths.add(ctx.path)
        ref_items = index_items(ref, spec) if isinstance(ref, list) else None
        live_items = index_items(live, spec) if isinstance(live, list) else None
        out_ref: dict[str, Any] = {}
        out_live: dict[str, Any] = {}
        for key, (ref_index, ref_item) in (ref_items or {}).items():
            live_index, live_item = (live_items or {}).get(key, (None, ABSENT))
            child = self._item_ctx(ctx, spec, key, ref_index, live_index, ref_item, live_item)
            if ignored(child, rendered=True):
                continue
            projected = self.walk(ref_item, live_item, child)
            if not is_empty(projected[0]):
                out_ref[key] = projected[0]
            if not is_empty(projected[1]):
                out_live[key] = projected[1]
        for key, (live_index, live_item) in (live_items or {}).items():
            if ref_items is not None and key in ref_items:
                continue
            # An item we do not render, in a list we do: always drift (kubectl set env).
            child = self._item_ctx(ctx, spec, key, None, live_index, ABSENT, live_item)
            if ignored(child, rendered=False):
                continue
            projected_live = self.walk(ABSENT, live_item, child)[1]
            if not is_empty(projected_live):
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
        ctx: Ctx,
        spec: ListSpec,
        key: str,
        ref_index: int | None,
        live_index: int | None,
        ref_item: Any,
        live_item: Any,
    ) -> Ctx:
        aliases = {key}
        for index in (ref_index, live_index):
            if index is not None:
                aliases.add(str(index))
                break  # a rendered item is addressed by its rendered position
        for item in (ref_item, live_item):
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                aliases.add(item["name"])
        owners: tuple[Owner, ...] = ()
        if live_item is not ABSENT:
            owners = tuple(
                child
                for owner in ctx.owners
                if (child := owner.at_item(live_item, live_index)) is not None
            )
        return Ctx(
            path=(*ctx.path, key),
            type=item_type(spec),
            owners=owners,
            cursors=advance(ctx.cursors, tuple(aliases)),
            mask=ctx.mask,
        )

    @staticmethod
    def _set_list(ref: Any, live: Any) -> tuple[Any, Any]:
        if not isinstance(ref, list):
            return ABSENT, ABSENT  # values others add to a set we do not render never count
        rendered = list(dict.fromkeys(plain(item) for item in ref))
        if not isinstance(live, list):
            return rendered or ABSENT, ABSENT
        present = {canonical_json(plain(item)) for item in live}
        kept = [item for item in rendered if canonical_json(item) in present]
        return rendered or ABSENT, kept or ABSENT

    def _atomic_list(self, ref: Any, live: Any, ctx: Ctx, spec: ListSpec) -> tuple[Any, Any]:
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
            owners: tuple[Owner, ...] = ()
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
            child = Ctx(
                path=(*ctx.path, str(index)),
                type=item_type(spec),
                owners=owners,
                cursors=advance(ctx.cursors, (str(index),)),
                mask=mask_mode,
            )
            if ignored(child, rendered=ref_item is not ABSENT):
                continue
            projected = self.walk(ref_item, live_item, child)
            # Positions matter here: an item that normalises to nothing keeps its place.
            if ref_item is not ABSENT:
                out_ref.append(None if projected[0] is ABSENT else projected[0])
            if live_item is not ABSENT:
                out_live.append(None if projected[1] is ABSENT else projected[1])
        return out_ref or ABSENT, out_live or ABSENT
