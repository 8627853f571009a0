"""Decide whether a live object has drifted from its desired state, and say how, readably.

The watch/repair loop calls :func:`compare` for each desired object and its live counterpart
(from the watch cache), and :func:`format_report` for logs and Events. The fast path hashes the
normalised projections (reconciler.drift.normalise); only when the hashes differ does deepdiff run,
to list the changes as JSON pointers with desired and live values. Secret values in a report are
masked already, by the projection.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from deepdiff import DeepDiff

from reconciler.drift.ignore import IgnoreRule, format_pointer
from reconciler.drift.normalise import normalise
from reconciler.drift.projection import DEFAULT_SETTINGS, ORDER_KEY, DriftSettings, Projection

ChangeKind = Literal["changed", "added", "removed", "reordered"]
# deepdiff reports a map sharing fewer than this share of its keys with the other side as one
# change of the whole map (deepdiff's own default, named here because `differing` relies on it).
DEEPER_THRESHOLD = 0.33
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# deepdiff report types -> our kinds. "added" means: live has it, we do not render it.
_KINDS: Mapping[str, ChangeKind] = {
    "values_changed": "changed",
    "type_changes": "changed",
    "dictionary_item_added": "added",
    "iterable_item_added": "added",
    "dictionary_item_removed": "removed",
    "iterable_item_removed": "removed",
}


@dataclass(frozen=True)
class Change:
    """One difference. ``desired`` and ``live`` are None where that side has nothing.

    ``kind``: ``changed`` (both sides have a value), ``added`` (live has something we do not
    render: a hand-added field or list item), ``removed`` (we render something live lacks), or
    ``reordered`` (a list whose order matters holds the same items in another order; the values
    are the item keys in each side's order).

    ``pointer`` is an RFC 6901 pointer in which keyed-list items are named by key (it can be
    pasted into an ignore rule); ``path`` is the same place for people
    (``spec.template.spec.containers[kwbase].image``). ``managers`` are the managedFields
    managers that own the live value, when known: who made the change.
    """

    kind: ChangeKind
    pointer: str
    path: str
    desired: Any
    live: Any
    managers: tuple[str, ...] = ()


@dataclass(frozen=True)
class DriftReport:
    """The verdict for one object. ``drifted`` is exactly ``desired_hash != live_hash``."""

    kind: str
    namespace: str
    name: str
    drifted: bool
    changes: tuple[Change, ...]
    desired_hash: str
    # Empty when the live object does not exist.
    live_hash: str
    warnings: tuple[str, ...] = ()


def projection_hash(obj: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``obj`` (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def compare(
    desired: Mapping[str, Any],
    live: Mapping[str, Any] | None,
    *,
    ignore_rules: Iterable[IgnoreRule] = (),
    dry_run: Mapping[str, Any] | None = None,
    settings: DriftSettings = DEFAULT_SETTINGS,
) -> DriftReport:
    """Compare a rendered object with the live one (None: it does not exist).

    ``dry_run`` is the result of a forced server-side-apply dry run of ``desired`` (optional;
    see reconciler.drift.normalise). ``ignore_rules`` come from the KaiwuCluster's drift settings.
    """
    projection = normalise(
        desired, live, ignore_rules=ignore_rules, dry_run=dry_run, settings=settings
    )
    return report(projection)


def report(projection: Projection) -> DriftReport:
    """The drift report of a projection: hashes first, deepdiff only when they differ."""
    desired_hash = projection_hash(projection.desired)
    if projection.live is None:
        missing = Change("removed", "", "(whole object)", projection.desired, None)
        return DriftReport(
            projection.kind,
            projection.namespace,
            projection.name,
            True,
            (missing,),
            desired_hash,
            "",
            projection.warnings,
        )
    live_hash = projection_hash(projection.live)
    changes: tuple[Change, ...] = ()
    if desired_hash != live_hash:
        changes = _changes(projection)
        if not changes:  # hash and deepdiff disagree (1 and 1.0): say so, never "none"
            whole = Change("changed", "", "(whole object)", projection.desired, projection.live)
            changes = (whole,)
    return DriftReport(
        projection.kind,
        projection.namespace,
        projection.name,
        desired_hash != live_hash,
        changes,
        desired_hash,
        live_hash,
        projection.warnings,
    )


def differing(desired: Any, live: Any) -> tuple[Any, Any]:
    """Both sides without most of the map entries they share (recursively): what deepdiff needs
    to see. deepdiff reports nothing for an entry equal on both sides, so its report on the
    pruned maps is the same, at the same paths, and costs a fraction on a large object with one
    edit. One rule of deepdiff's depends on the shared entries: a map sharing fewer than
    DEEPER_THRESHOLD of its keys with the other side is reported whole ("changed"), not key by
    key. Such a map is left as it is; any other keeps enough of its shared entries to stay above
    the threshold."""
    if not (isinstance(desired, Mapping) and isinstance(live, Mapping)):
        return desired, live
    union = len(desired.keys() | live.keys())
    shared_keys = [key for key in desired if key in live]
    if union > 1 and len(shared_keys) / union < DEEPER_THRESHOLD:
        return desired, live
    out_desired: dict[str, Any] = {}
    out_live: dict[str, Any] = {}
    equal: list[str] = []
    for key, value in desired.items():
        if key not in live:
            out_desired[key] = value
        elif value != live[key]:
            out_desired[key], out_live[key] = differing(value, live[key])
        else:
            equal.append(key)
    for key, value in live.items():
        if key not in desired:
            out_live[key] = value
    kept_union = len(out_desired.keys() | out_live.keys())
    kept_shared = len(out_desired.keys() & out_live.keys())
    for key in equal:
        if kept_union > 1 and kept_shared / kept_union >= DEEPER_THRESHOLD:
            break
        if kept_union == 0:  # nothing differs here (the caller only recurses where it does)
            break
        out_desired[key] = out_live[key] = desired[key]
        kept_union += 1
        kept_shared += 1
    return out_desired, out_live


def _changes(projection: Projection) -> tuple[Change, ...]:
    changes = _changes_at((), projection.desired, projection.live, projection)
    return tuple(sorted(changes.values(), key=lambda change: (change.pointer, change.kind)))


def _changes_at(prefix: tuple[str, ...], desired: Any, live: Any,
                projection: Projection) -> dict[str, Change]:
    """The changes between `desired` and `live`, the values at `prefix` of the projection."""
    desired, live = differing(desired, live)
    diff = DeepDiff(
        desired,
        live,
        view="tree",
        verbose_level=2,
        # Lists left in a projection are ordered by meaning (args, $order); keyed lists are
        # maps by now, so order-insensitive matching is never needed here.
        ignore_order=False,
        threshold_to_diff_deeper=DEEPER_THRESHOLD,
    )
    changes: dict[str, Change] = {}
    for report_type, levels in diff.tree.items():
        kind = _KINDS.get(report_type)
        if kind is None:
            raise ValueError(f"unexpected deepdiff report type {report_type!r}")
        for level in levels:
            path = (*prefix, *(str(step) for step in level.path(output_format="list")))
            if ORDER_KEY in path:
                # Any change inside "$order" is one reordering of the list that holds it.
                change = _reordered(path[: path.index(ORDER_KEY)], projection)
            elif kind == "changed" and path in projection.keyed_paths and isinstance(
                    level.t1, Mapping) and isinstance(level.t2, Mapping):
                changes.update(_keyed_items(path, level.t1, level.t2, projection))
                continue
            else:
                change = Change(
                    kind,
                    format_pointer(path),
                    _readable(path, projection),
                    None if kind == "added" else level.t1,
                    None if kind == "removed" else level.t2,
                    # Owners are known only for fields live has: none for a removed one.
                    projection.owners.get(path, ()),
                )
            changes.setdefault(change.pointer + "\0" + change.kind, change)
    return changes


def _reordered(list_path: tuple[str, ...], projection: Projection) -> Change:
    return Change(
        "reordered",
        format_pointer(list_path),
        _readable(list_path, projection),
        _lookup(projection.desired, (*list_path, ORDER_KEY)),
        _lookup(projection.live, (*list_path, ORDER_KEY)),
        projection.owners.get(list_path, ()),
    )


def _keyed_items(path: tuple[str, ...], desired: Mapping[str, Any], live: Mapping[str, Any],
                 projection: Projection) -> dict[str, Change]:
    """A keyed list's items, one change each. deepdiff reports a keyed list (a map from key to
    item by now) that shares few keys with the other side as one change of the whole list,
    owned by nobody; but its items are identities (a port, a container), each with its own
    owners, and the repair must tell the items another manager added from ours (a port
    renumbered by hand and one added in the same edit: the server refuses the merged list's
    duplicate name until theirs are removed: reconciler.controller.observe.others_added). An
    item both sides hold is compared inside, as deepdiff compares a map it goes deeper into (a
    keyed list inside it told item by item in turn); a changed order is one reordering."""
    changes: dict[str, Change] = {}
    if desired.get(ORDER_KEY) != live.get(ORDER_KEY):
        change = _reordered(path, projection)
        changes[change.pointer + "\0" + change.kind] = change
    for key in sorted((desired.keys() | live.keys()) - {ORDER_KEY}):
        item = (*path, key)
        if key in desired and key in live:
            if desired[key] != live[key]:
                changes.update(_changes_at(item, desired[key], live[key], projection))
            continue
        kind: ChangeKind = "removed" if key not in live else "added"
        change = Change(kind, format_pointer(item), _readable(item, projection),
                        None if kind == "added" else desired[key],
                        None if kind == "removed" else live[key],
                        projection.owners.get(item, ()))
        changes[change.pointer + "\0" + change.kind] = change
    return changes


def _lookup(obj: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        if isinstance(obj, Mapping):
            obj = obj.get(step)
        elif isinstance(obj, list) and step.isdigit() and int(step) < len(obj):
            obj = obj[int(step)]
        else:
            return None
    return obj


def _readable(path: tuple[str, ...], projection: Projection) -> str:
    """``spec.template.spec.containers[kwbase].env[POD_NAME]``, ``metadata.labels["a/b"]``."""
    text = ""
    for position, step in enumerate(path):
        parent = path[:position]
        sides = (projection.desired, projection.live)
        in_list = any(isinstance(_lookup(side, parent), list) for side in sides)
        if parent in projection.keyed_paths or in_list:
            text += f"[{step}]"
        elif _IDENTIFIER.match(step):
            text += ("." if text else "") + step
        else:
            text += "[" + json.dumps(step, ensure_ascii=False) + "]"
    return text or "(whole object)"


def _show(value: Any) -> str:
    if value is None:
        return "(absent)"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def format_report(drift: DriftReport) -> str:
    """Human-readable lines: a heading, then ``path: desired -> live`` per change."""
    where = f"{drift.kind} {drift.namespace + '/' if drift.namespace else ''}{drift.name}"
    if not drift.drifted:
        return f"{where}: in sync"
    if not drift.live_hash:
        return f"{where}: missing"
    count = len(drift.changes)
    lines = [f"{where}: drifted ({count} change{'s' if count != 1 else ''})"]
    for change in drift.changes:
        by = f" (by {', '.join(change.managers)})" if change.managers else ""
        lines.append(
            f"  {change.path}: {_show(change.desired)} -> {_show(change.live)} [{change.kind}]{by}"
        )
    lines.extend(f"  warning: {warning}" for warning in drift.warnings)
    return "\n".join(lines)
