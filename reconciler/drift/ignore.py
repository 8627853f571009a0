"""Which differences are not drift: JSON pointers, user ignore rules and the built-in list.

Users write rules in a KaiwuCluster under ``spec.drift.ignore`` (kind, name glob, RFC 6901
pointer); :func:`parse_ignore_rules` turns them into :class:`IgnoreRule` values. The drift
normaliser (reconciler.drift.normalise) applies them, plus :data:`BUILTIN_IGNORE_RULES`: fields
another controller owns by design.

Pointers address the object as Kubernetes returns it, with two conveniences for lists: an item of
a list matched by key (containers, env, ports...) may be named by its key (``containers/kwbase``,
``env/POD_NAME``, ``ports/26257~1TCP``), by its ``name`` field (``ports/sql``) or by its position
(``containers/0``); and ``*`` matches any single step. A pointer from a drift report can therefore
be pasted into an ignore rule as it is.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

WILDCARD = "*"
_BAD_ESCAPE = re.compile(r"~(?![01])")


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """Split an RFC 6901 JSON pointer into unescaped reference tokens (``""`` is the root)."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/': {pointer!r}")
    tokens = []
    for raw in pointer[1:].split("/"):
        if _BAD_ESCAPE.search(raw):
            raise ValueError(f"bad '~' escape in JSON pointer {pointer!r}")
        # RFC 6901 section 4: "~1" first, then "~0", so "~01" decodes to "~1".
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


def format_pointer(tokens: Iterable[str | int]) -> str:
    """Join reference tokens into an RFC 6901 JSON pointer."""
    return "".join("/" + str(token).replace("~", "~0").replace("/", "~1") for token in tokens)


@dataclass(frozen=True)
class IgnoreRule:
    """Differences at ``pointer`` (and below) in objects matching ``kind`` and ``name`` are ignored.

    ``kind`` empty matches any kind; ``name`` is a glob, empty matching any name. A rule with
    ``unless_rendered`` applies only where we render nothing at the pointer: a field the server
    allocates (a Service's clusterIP) is not drift, but a headless Service's ``clusterIP: None``
    that we do render is still compared.
    """

    pointer: tuple[str, ...]
    kind: str = ""
    name: str = ""
    unless_rendered: bool = False

    @staticmethod
    def parse(raw: Mapping[str, Any]) -> IgnoreRule:
        """One rule from a KaiwuCluster's ``spec.drift.ignore`` item: kind, name, pointer."""
        pointer = raw.get("pointer")
        if not isinstance(pointer, str):
            raise ValueError(f"an ignore rule needs a string 'pointer': {dict(raw)!r}")
        kind = raw.get("kind") or ""
        name = raw.get("name") or ""
        if not isinstance(kind, str) or not isinstance(name, str):
            raise ValueError(f"ignore rule 'kind' and 'name' must be strings: {dict(raw)!r}")
        return IgnoreRule(pointer=parse_pointer(pointer), kind=kind, name=name)

    @staticmethod
    def of(kind: str, pointer: str, *, name: str = "", unless_rendered: bool = False) -> IgnoreRule:
        """A rule from a pointer string (used for the built-in list and in code)."""
        return IgnoreRule(parse_pointer(pointer), kind, name, unless_rendered)

    def applies_to(self, kind: str, name: str) -> bool:
        if self.kind and self.kind != kind:
            return False
        return not self.name or fnmatch.fnmatchcase(name, self.name)

    def covers(self, kind: str, name: str, path: tuple[str, ...]) -> bool:
        """Whether the rule ignores the field at `path` (plain field names, no list items) of
        the object `kind`/`name`: its pointer is `path` or a parent of it."""
        return (self.applies_to(kind, name) and not self.unless_rendered
                and len(self.pointer) <= len(path)
                and all(step in (WILDCARD, part)
                        for step, part in zip(self.pointer, path, strict=False)))

    def __str__(self) -> str:
        scope = f"{self.kind or '*'}/{self.name or '*'}"
        suffix = " (unless rendered)" if self.unless_rendered else ""
        return f"{scope} {format_pointer(self.pointer)}{suffix}"


def parse_ignore_rules(raw: Iterable[Mapping[str, Any]] | None) -> tuple[IgnoreRule, ...]:
    """All rules of a KaiwuCluster's ``spec.drift.ignore`` (``None`` means none)."""
    return tuple(IgnoreRule.parse(item) for item in raw or ())


# Fields another controller (or the API server) owns by design. Each entry says why.
BUILTIN_IGNORE_RULES: tuple[IgnoreRule, ...] = (
    # The reconciler drives the rollout partition itself, one pod at a time, during upgrades.
    IgnoreRule.of("StatefulSet", "/spec/updateStrategy/rollingUpdate/partition"),
    # The reconciler's memory of the spec it last applied (reconciler.controller.admission):
    # written with every apply of the StatefulSet (each fact it holds changes the StatefulSet
    # too), never a repair of its own; else an operator upgrade would report every warn-policy
    # cluster Drifted until its next spec change.
    IgnoreRule.of("StatefulSet", "/metadata/annotations/kaiwu.inspur.com~1accepted-spec"),
    # `kubectl rollout restart` stamps the pod template; a restart is not a change of spec.
    IgnoreRule.of("", "/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt"),
    # The API server fills in a claim template's status (phase Pending) on every StatefulSet.
    IgnoreRule.of("StatefulSet", "/spec/volumeClaimTemplates/*/status"),
    # Allocated by the API server; compared only when we render them (headless: "None").
    IgnoreRule.of("Service", "/spec/clusterIP", unless_rendered=True),
    IgnoreRule.of("Service", "/spec/clusterIPs", unless_rendered=True),
    IgnoreRule.of("Service", "/spec/ipFamilies", unless_rendered=True),
    IgnoreRule.of("Service", "/spec/ipFamilyPolicy", unless_rendered=True),
    IgnoreRule.of("Service", "/spec/ports/*/nodePort", unless_rendered=True),
    IgnoreRule.of("Service", "/spec/healthCheckNodePort", unless_rendered=True),
    # Kubernetes < 1.24 token controller adds a token Secret reference to every ServiceAccount.
    IgnoreRule.of("ServiceAccount", "/secrets", unless_rendered=True),
    # A claim's volume is bound by the PV controller; its class may come from the default class.
    IgnoreRule.of("PersistentVolumeClaim", "/spec/volumeName", unless_rendered=True),
    IgnoreRule.of("PersistentVolumeClaim", "/spec/storageClassName", unless_rendered=True),
)
