"""The rules about a change from one spec to the next: the start mode is immutable, volumes
never shrink, single-replica never scales in, --max-offset and the storage class never change,
no downgrade and no major jump; and what a reviewer should know of an accepted change.

Called by renderer.diff (`kaiwu diff`), and by the reconciler's admission webhook and the
reconciler itself (reconciler.controller.admission), which keeps the `transition_facts` of the
last spec it applied to judge the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from renderer import quantity
from renderer.semantics.flags import MAX_OFFSET_DEFAULT, MAX_OFFSET_FLAG, same_offset
from renderer.semantics.violation import Violation


def transition_notes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What a reviewer should know of an accepted change from spec `old` to `new` (both
    defaulted) that the manifests do not show: said by `kaiwu diff` (renderer.diff) and as the
    admission webhook's warnings (reconciler.controller.admission), each at most 120
    characters (the webhook's limit on a warning)."""
    notes = []
    try:
        grows = (quantity.parse(new["storage"]["size"]).value
                 > quantity.parse(old["storage"]["size"]).value)
    except (quantity.QuantityError, KeyError, TypeError):
        grows = False
    if grows:
        # Say the one thing that cannot be undone (reconciler.controller.volumes grows them).
        before = quantity.canonical(old["storage"]["size"])
        after = quantity.canonical(new["storage"]["size"])
        notes.append(f"spec.storage.size {before} -> {after}: volumes grow only if their "
                     "StorageClass allows expansion; no going back down")
    return notes


def check_transition(old: dict[str, Any], new: dict[str, Any]) -> list[Violation]:
    """Problems with changing a cluster from spec `old` to spec `new` (both defaulted)."""
    problems = []
    if old["startMode"] != new["startMode"]:
        problems.append(Violation(
            ("spec", "startMode"),
            f"the start mode cannot change ({old['startMode']} -> {new['startMode']}): "
            "it is written into every store",
            "keep the old start mode, or create a new cluster and migrate the data"))
    if new["startMode"] == "single-replica" and new["replicas"] < old["replicas"]:
        problems.append(Violation(
            ("spec", "replicas"), "a single-replica cluster cannot scale in (no second copy of "
            "the data exists)", f"keep replicas at {old['replicas']} or more"))
    try:
        shrinks = (quantity.parse(new["storage"]["size"]).value
                   < quantity.parse(old["storage"]["size"]).value)
    except quantity.QuantityError:
        shrinks = False
    if shrinks:
        problems.append(Violation(
            ("spec", "storage", "size"),
            f"volumes cannot shrink ({old['storage']['size']} -> {new['storage']['size']})",
            f"keep {old['storage']['size']} or more"))
    before, after = max_offset(old), max_offset(new)
    if before is not None and after is not None and not same_offset(before, after):
        problems.append(Violation(
            ("spec", "extraArgs"),
            f"--max-offset cannot change on a running cluster ({before} -> {after}): every "
            "node must use the same value, a node whose peer's differs panics "
            "(kwbase/pkg/rpc/heartbeat.go:160-167), and a rolling restart changes one node at "
            "a time",
            f"keep --max-offset={before} (KWDB changes it only with every node stopped at "
            "once)"))
    if old["storage"].get("storageClassName") != new["storage"].get("storageClassName"):
        problems.append(Violation(
            ("spec", "storage", "storageClassName"),
            "the storage class of existing volumes cannot change",
            "keep the old class; migrate by adding nodes on new storage in a new cluster"))
    return problems


def version_tuple(text: str) -> tuple[int, ...] | None:
    """3.2.1 -> (3, 2, 1), as the reconciler reads image tags; None for anything else."""
    parts = text.split("-", 1)[0].lstrip("vV").split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else None


def check_version_change(old: dict[str, Any], new: dict[str, Any]) -> list[Violation]:
    """A version change KaiwuDB cannot make: a downgrade, or a change of major version (KaiwuDB
    documents neither; 2.x to 3.x needs an export and import). Tags that are not plain versions
    are not judged. `kaiwu diff` reports these as refused by the reconciler; the admission
    webhook and the reconciler refuse them (reconciler.controller.admission)."""
    before, after = version_tuple(str(old.get("version", ""))), version_tuple(
        str(new.get("version", "")))
    if before is None or after is None:
        return []
    if after < before:
        return [Violation(("spec", "version"),
                          f"the version cannot go back ({old['version']} -> {new['version']}): "
                          "KaiwuDB cannot be downgraded", f"keep {old['version']} or later")]
    if after[0] != before[0]:
        return [Violation(("spec", "version"),
                          f"the major version cannot change in place ({old['version']} -> "
                          f"{new['version']}): KaiwuDB needs an export and import into a new "
                          "cluster", f"keep {before[0]}.x")]
    return []


def check_change(old: dict[str, Any], new: dict[str, Any]) -> list[Violation]:
    """Every rule about changing a cluster from spec `old` to spec `new`: `check_transition`
    and `check_version_change`. `old` may be the full spec or its `transition_facts`."""
    return check_transition(old, new) + check_version_change(old, new)


def transition_facts(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a defaulted spec `check_change` reads from the old side: what the reconciler
    remembers of the last spec it applied (an annotation on the StatefulSet), so it can judge
    the next one against what exists rather than against whatever is stored now."""
    storage = {"size": spec["storage"]["size"]}
    if spec["storage"].get("storageClassName") is not None:
        storage["storageClassName"] = spec["storage"]["storageClassName"]
    return {"startMode": spec["startMode"], "replicas": spec["replicas"],
            "version": spec["version"], "storage": storage, "maxOffset": max_offset(spec)}


FACT_KEYS = frozenset({"startMode", "replicas", "version", "storage", "maxOffset"})
"""What `transition_facts` holds (an annotation written before maxOffset lacks it)."""


def max_offset(spec: dict[str, Any]) -> str | None:
    """The clock offset bound a spec gives its nodes ("500ms" unless --max-offset says); None
    for transition facts written before they held it (not known)."""
    if "maxOffset" in spec:
        return str(spec["maxOffset"])
    if set(spec) <= FACT_KEYS:
        return None
    given = [arg.partition("=")[2] for arg in spec.get("extraArgs") or ()
             if arg.split("=", 1)[0] == MAX_OFFSET_FLAG]
    return given[-1] if given else MAX_OFFSET_DEFAULT
