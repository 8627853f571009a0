"""The KaiwuCluster status the reconciler reports, following kstatus conventions.

The Controller (reconciler.controller) sums up each pass as an `Observed` value; `build` turns it
into the next `status` object, carrying over what it does not decide (fields later lifecycle steps
own, such as `nodes`, `operation` and `failures`) and keeping each condition's
`lastTransitionTime` unless its status really changed. The Controller writes the result only when
it differs from the live status (`build(...) != previous`), so a steady cluster costs no status
writes, and raises Events for the `transitions` between the two. Empty strings are left out
rather than written: the API server (seen on 1.20) reads "" in a custom resource's status as null
and rejects it as not a string.

Conditions (kstatus: https://github.com/kubernetes-sigs/cli-utils/tree/master/pkg/kstatus):
- Ready: every rendered object is as rendered and the StatefulSet has all replicas ready.
- Reconciling: the reconciler is making progress towards the spec (applying, waiting for pods,
  recreating an object); False when done, paused, or only reporting drift (warn mode).
- Stalled: the reconciler cannot make progress without a person (invalid spec, an object someone
  keeps changing back, a change the API server refuses); the message says what to do.
- Drifted: some live object differs from what the spec renders and the difference is still
  there (warn mode, paused, a fight's back-off); False once repaired; Unknown when the drift
  policy is off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
DRIFTED = "Drifted"
# Whether every volume has spec.storage.size (reconciler.controller.volumes); apart from Ready.
VOLUMES_EXPANDED = "VolumesExpanded"
CONDITION_ORDER = (READY, RECONCILING, STALLED, DRIFTED, VOLUMES_EXPANDED)
# Status is read by people (kubectl describe) and stored in etcd with every update: keep the
# history short and each message to a readable size. The full drift report is in the log.
LAST_ACTIONS_LIMIT = 10
CONDITION_MESSAGE_LIMIT = 2048
ACTION_MESSAGE_LIMIT = 512

ConditionStatus = Literal["True", "False", "Unknown"]


TRUNCATED = " ...(truncated)"


def clip(text: str, limit: int) -> str:
    """`text`, or its start with TRUNCATED after it, at most `limit` characters in all. Status
    messages here and Events (reconciler.kube.events) are cut the same way."""
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def one_line(value: object, limit: int = 80) -> str:
    """Text from the cluster printed on one terminal line (kaiwu status, kaiwu backup):
    control characters (newlines, terminal escapes) become spaces, runs of space one, and long
    text is cut."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in str(value)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Condition:
    """One condition as a pass decides it (the time and generation are added by `build`)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Action:
    """Something the reconciler did (or refused to do), for `status.lastActions`."""

    time: str
    action: str
    target: str
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        entry = {"time": self.time, "action": self.action, "target": self.target}
        if self.message:
            entry["message"] = clip(self.message, ACTION_MESSAGE_LIMIT)
        return entry


@dataclass(frozen=True)
class Observed:
    """What one pass concluded about a cluster.

    generation: the generation to report as observed; None keeps the previous value (a spec
        change not yet fully applied must not look done).
    version: the KaiwuDB version every pod runs; None keeps the previous value.
    """

    generation: int | None
    conditions: tuple[Condition, ...]
    phase: str
    replicas: int
    ready_nodes: int
    selector: str
    version: str | None
    inventory: tuple[str, ...]
    actions: tuple[Action, ...] = ()
    fields: tuple[tuple[str, Any], ...] = ()  # lifecycle-owned fields; None removes one


def condition(status: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of `type_` in a status object, if present."""
    for item in (status or {}).get("conditions") or ():
        if isinstance(item, Mapping) and item.get("type") == type_:
            return item
    return None


def build(previous: Mapping[str, Any] | None, observed: Observed, now: str) -> dict[str, Any]:
    """The next status: `previous` with what `observed` decides (see module docstring)."""
    status: dict[str, Any] = dict(previous or {})
    generation = observed.generation
    if generation is None:
        generation = status.get("observedGeneration")
    if generation is not None:
        status["observedGeneration"] = generation
    decided = {item.type for item in observed.conditions}
    conditions: list[dict[str, Any]] = []
    for item in sorted(observed.conditions, key=_condition_order):
        before = condition(previous, item.type)
        since = now
        if before is not None and before.get("status") == item.status:
            since = str(before.get("lastTransitionTime") or now)
        entry: dict[str, Any] = {"type": item.type, "status": item.status,
                                 "reason": item.reason, "lastTransitionTime": since}
        if item.message:
            entry["message"] = clip(item.message, CONDITION_MESSAGE_LIMIT)
        if generation is not None:
            entry["observedGeneration"] = generation
        conditions.append(entry)
    # Conditions another step owns (and did not decide this pass) stay as they were.
    conditions += [dict(item) for item in (previous or {}).get("conditions") or ()
                   if isinstance(item, Mapping) and item.get("type") not in decided]
    status["conditions"] = conditions
    status["phase"] = observed.phase
    status["replicas"] = observed.replicas
    status["readyNodes"] = observed.ready_nodes
    if observed.selector:
        status["selector"] = observed.selector
    if observed.version is not None:
        status["version"] = observed.version
    status["inventory"] = sorted(observed.inventory)
    for key, value in observed.fields:
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    actions = [action.to_dict() for action in observed.actions]
    history = [dict(item) for item in status.get("lastActions") or () if isinstance(item, Mapping)]
    # Newest first: `kubectl get -o yaml` readers look at the top.
    status["lastActions"] = (actions[::-1] + history)[:LAST_ACTIONS_LIMIT]
    if not status["lastActions"]:
        del status["lastActions"]
    return status


def _condition_order(item: Condition) -> tuple[int, str]:
    order = CONDITION_ORDER.index(item.type) if item.type in CONDITION_ORDER else len(
        CONDITION_ORDER)
    return order, item.type


@dataclass(frozen=True)
class Transition:
    """A condition whose status or reason changed between two status objects."""

    type: str
    before: ConditionStatus | None
    after: ConditionStatus
    reason: str
    message: str


def transitions(previous: Mapping[str, Any] | None,
                new: Mapping[str, Any]) -> Sequence[Transition]:
    """Conditions that changed status or reason (a new message alone is not a transition)."""
    found: list[Transition] = []
    for item in new.get("conditions") or ():
        before = condition(previous, item["type"])
        if before is not None and (before.get("status"), before.get("reason")) == (
                item["status"], item["reason"]):
            continue
        found.append(Transition(item["type"], before.get("status") if before else None,
                                item["status"], item["reason"], item.get("message", "")))
    return found
