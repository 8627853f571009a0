"""`peek` and `peek_list` for the tests' fakes of the watch caches, checked.

The real caches hand out their own objects through `CacheView.peek` and `peek_list`, which no
caller may change (reconciler.kube.readcheck). A fake that mixes in `Peeks` answers them with
copies of its own `get` and `list` and remembers each in a `ReadCheck`: tests/conftest.py's
`cache_reads_unchanged` fails the test if the code under test changed one.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any, Protocol

from reconciler.kube.readcheck import ReadCheck
from reconciler.model import Obj

_HANDED = itertools.count()


class _Readable(Protocol):
    def get(self, kind: Any, namespace: str, name: str) -> Obj | None: ...

    def list(self, kind: Any, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]: ...


class Peeks:
    """Mixed into a fake with `get(kind, namespace, name)` and `list(kind, namespace, labels)`."""

    def peek(self: _Readable, kind: Any, namespace: str, name: str) -> Obj | None:
        found = self.get(kind, namespace, name)
        return _hand(self, f"{kind.kind} {namespace}/{name}", found) if found else None

    def peek_list(self: _Readable, kind: Any, namespace: str,
                  labels: Mapping[str, str] = {}) -> list[Obj]:
        return [_hand(self, f"{kind.kind} {namespace}/{obj['metadata'].get('name')}", obj)
                for obj in self.list(kind, namespace, labels)]


def _hand(view: object, what: str, obj: Obj) -> Obj:
    """A copy of `obj`, watched by the view's own ReadCheck (made on its first peek)."""
    check = view.__dict__.get("_peeks_check")
    if check is None:
        check = view.__dict__["_peeks_check"] = ReadCheck(type(view).__name__)
    kept: Obj = check.keep((next(_HANDED), what), copy.deepcopy(obj))
    return kept
