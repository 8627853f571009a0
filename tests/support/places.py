"""Every place inside a plain object (nested dicts and lists), as a path of keys and indexes.

Used by the property tests that change a spec at any place (tests/unit/renderer/
test_properties.py, test_schema_gate.py) and by the webhook test that compares two objects
value by value (tests/unit/reconciler/runtime/test_webhook.py).
"""

from __future__ import annotations

from typing import Any

Place = tuple[str | int, ...]


def places(value: Any, path: Place = ()) -> dict[Place, Any]:
    """Each path below value (maps' keys, lists' indexes) and what it holds, outermost first;
    value itself is not among them."""
    found: dict[Place, Any] = {}
    children = (value.items() if isinstance(value, dict)
                else enumerate(value) if isinstance(value, list) else ())
    for key, child in children:
        found[(*path, key)] = child
        found.update(places(child, (*path, key)))
    return found


def leaves(value: Any) -> dict[Place, Any]:
    """The places holding neither a map nor a list."""
    return {path: held for path, held in places(value).items()
            if not isinstance(held, dict | list)}
