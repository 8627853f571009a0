"""`selector_matches`: a Kubernetes label selector matched as the API server matches it
(apimachinery's labels.Parse, Kubernetes 1.20: staging/src/k8s.io/apimachinery/pkg/labels/
selector.go), for the fakes of the API (tests/support/fake_api.py, bench/shards.py).

The forms the reconciler sends: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`,
joined by commas (every requirement must hold). As there, `k!=v` and `k notin (...)` hold for
an object without the label, and `k in ()` is refused by the parser (reconciler.kube.selection
never sends it: an empty set selects `NOTHING` instead).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

_SET = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def requirements(selector: str | None) -> list[str]:
    """The selector's requirements: split at the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in selector or "":
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def selector_matches(selector: str | None, labels: Mapping[str, str] | None) -> bool:
    """Whether an object with these labels matches the selector."""
    labels = labels or {}
    return all(holds(labels) for holds in _parsed(selector or ""))


@functools.lru_cache(maxsize=256)
def _parsed(selector: str) -> tuple[Callable[[Mapping[str, str]], bool], ...]:
    """The selector's requirements as predicates, parsed once (a fleet's fake API matches one
    selector against every object it holds)."""
    found: list[Callable[[Mapping[str, str]], bool]] = []
    for part in requirements(selector):
        in_set = _SET.match(part)
        if in_set:
            key, operator, values = in_set.groups()
            members = frozenset(v.strip() for v in values.split(",") if v.strip())
            if not members:
                raise ValueError(f"{part!r}: for 'in' and 'notin' operators, the values set "
                                 "can't be empty")
            found.append(functools.partial(_in_set, key, members, operator == "in"))
        elif "!=" in part:
            key, value = (side.strip() for side in part.split("!=", 1))
            found.append(functools.partial(_not_equal, key, value))
        elif "=" in part:
            key, value = (side.strip() for side in (
                part.split("==", 1) if "==" in part else part.split("=", 1)))
            found.append(functools.partial(_equal, key, value))
        elif part.startswith("!"):
            found.append(functools.partial(_absent, part[1:].strip()))
        else:
            found.append(functools.partial(_present, part))
    return tuple(found)


def _in_set(key: str, members: frozenset[str], wanted: bool, labels: Mapping[str, str]) -> bool:
    return (labels.get(key) in members) == wanted


def _equal(key: str, value: str, labels: Mapping[str, str]) -> bool:
    return labels.get(key) == value


def _not_equal(key: str, value: str, labels: Mapping[str, str]) -> bool:
    return labels.get(key) != value


def _present(key: str, labels: Mapping[str, str]) -> bool:
    return key in labels


def _absent(key: str, labels: Mapping[str, str]) -> bool:
    return key not in labels
