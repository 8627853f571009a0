"""Remember each object's last drift verdict, so a resync where nothing changed normalises nothing.

The controller's observe and repair steps (reconciler.controller.observe, .repair) call
`ComparisonMemo.compare` instead of reconciler.drift.compare.compare. A verdict depends only on:

- the live object: its uid and resourceVersion (the API server gives every change to an object a
  new resourceVersion, and a recreated object a new uid); and when only the resourceVersion
  differs, its content (`content_key`): a status update (a StatefulSet's revisions after each
  template change, a readiness count) changes nothing the comparison reads, so it is no new
  verdict either;
- the desired object: the hash of its canonical JSON (rendering is deterministic, so an
  unchanged spec hashes the same on every pass);
- the server-side-apply dry run, when one is given (its hash);
- the ignore rules and the DriftSettings (field manager, built-in rules, secret names, mask key).

When all of these equal what the object's last comparison used (or all but the resourceVersion,
and the content is the same), the last report is returned as it is (reports are frozen);
otherwise the comparison runs and its report replaces the old one. A live
object without a uid or resourceVersion (never the case for an object read from the API) is
compared every time.

Memory is bounded by the objects the reconciler renders: one entry per (cluster, object, with or
without a dry run); `retain` drops the entries of objects a cluster no longer renders (observe
calls it at the end of each pass) and `forget` those of a cluster that is gone. Workers compare
different clusters at once: a lock guards the entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reconciler.drift.compare import DriftReport, compare, projection_hash
from reconciler.drift.ignore import IgnoreRule
from reconciler.drift.projection import DEFAULT_SETTINGS, DriftSettings

Compare = Callable[..., DriftReport]
# (kind, namespace, name): one object of a cluster.
ObjectName = tuple[str, str, str]


@dataclass(frozen=True)
class _Inputs:
    """Everything a verdict depends on (see the module docstring)."""

    uid: str
    resource_version: str
    desired_hash: str
    dry_run_hash: str
    rules: tuple[IgnoreRule, ...]
    settings: DriftSettings


def content_key(live: Mapping[str, Any]) -> str:
    """The live object but what a status update changes and the comparison never reads
    (reconciler.drift.normalise drops status and server-set metadata, and reads managedFields
    without their times): its resourceVersion, its status, each managedFields entry's time and
    the status fields it owns. Every entry stays, in its place (a warning names its index)."""
    md = dict(live.get("metadata") or {})
    md.pop("resourceVersion", None)
    managed = []
    for entry in md.get("managedFields") or ():
        if not isinstance(entry, Mapping):
            managed.append(entry)
            continue
        kept = {key: value for key, value in entry.items() if key != "time"}
        fields = entry.get("fieldsV1")
        if isinstance(fields, Mapping):
            kept["fieldsV1"] = {key: value for key, value in fields.items() if key != "f:status"}
        managed.append(kept)
    if "managedFields" in md:
        md["managedFields"] = managed
    return projection_hash({"metadata": md, **{key: value for key, value in live.items()
                                               if key not in ("status", "metadata")}})


def object_name(obj: Mapping[str, Any]) -> ObjectName:
    """The (kind, namespace, name) an entry is kept under."""
    md = obj.get("metadata") or {}
    return str(obj.get("kind") or ""), str(md.get("namespace") or ""), str(md.get("name") or "")


class ComparisonMemo:
    """`compare` with each object's last verdict remembered (see the module docstring)."""

    def __init__(self, compare_fn: Compare = compare) -> None:
        self._compare = compare_fn
        self._lock = threading.Lock()
        # owner (a ClusterKey) -> (object, with a dry run) -> (inputs, content_key, report)
        self._entries: dict[Hashable, dict[tuple[ObjectName, bool],
                                           tuple[_Inputs, str, DriftReport]]] = {}
        self.hits = 0
        self.misses = 0

    def compare(self, owner: Hashable, desired: Mapping[str, Any],
                live: Mapping[str, Any] | None, *, ignore_rules: Iterable[IgnoreRule] = (),
                dry_run: Mapping[str, Any] | None = None,
                settings: DriftSettings = DEFAULT_SETTINGS) -> DriftReport:
        """What `reconciler.drift.compare.compare` answers, from memory when nothing it depends
        on changed since this object's last comparison."""
        rules = tuple(ignore_rules)
        md = (live or {}).get("metadata") or {}
        uid, version = str(md.get("uid") or ""), str(md.get("resourceVersion") or "")
        if live is None or not uid or not version:
            return self._compare(desired, live, ignore_rules=rules, dry_run=dry_run,
                                 settings=settings)
        inputs = _Inputs(uid, version, projection_hash(desired),
                         projection_hash(dry_run) if dry_run is not None else "", rules, settings)
        slot = (object_name(desired), dry_run is not None)
        with self._lock:
            known = self._entries.get(owner, {}).get(slot)
        if known is not None and known[0] == inputs:
            with self._lock:
                self.hits += 1
            return known[2]
        content = content_key(live)
        if known is not None and known[1] == content and \
                known[0] == replace(inputs, resource_version=known[0].resource_version):
            # A new version of the same content (a status update): the same verdict.
            with self._lock:
                self.hits += 1
                self._entries.setdefault(owner, {})[slot] = (inputs, content, known[2])
            return known[2]
        with self._lock:
            self.misses += 1
        report = self._compare(desired, live, ignore_rules=rules, dry_run=dry_run,
                               settings=settings)
        with self._lock:
            self._entries.setdefault(owner, {})[slot] = (inputs, content, report)
        return report

    def retain(self, owner: Hashable, names: Iterable[ObjectName]) -> None:
        """Keep only the entries of these objects of `owner` (the ones it still renders)."""
        keep = set(names)
        with self._lock:
            entries = self._entries.get(owner)
            if entries is None:
                return
            for slot in [slot for slot in entries if slot[0] not in keep]:
                del entries[slot]
            if not entries:
                del self._entries[owner]

    def forget(self, owner: Hashable) -> None:
        """Drop every entry of `owner` (a cluster that is gone)."""
        with self._lock:
            self._entries.pop(owner, None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._entries.values())
