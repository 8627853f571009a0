"""CEL rules of renderer/cel.py evaluated in Python with cel-python (module `celpy`), as the API
server would evaluate them, for tests/unit/renderer/test_cel.py.

The API server's Kubernetes library function `quantity(string)` with `compareTo` is provided here
on top of renderer/quantity.py (cel-python has no Kubernetes library): the test proves the rules
and the renderer agree given that the two quantity parsers agree, which test_quantity.py covers.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from renderer import quantity
from renderer.cel import CelRule


class Quantity:
    """A Kubernetes quantity inside CEL: comparable by value only, like resource.Quantity."""

    def __init__(self, text: str) -> None:
        self.value = quantity.parse(text).value


def _quantity(text: Any) -> Quantity:
    return Quantity(str(text))


def _compare_to(left: Quantity, right: Quantity) -> celtypes.IntType:
    return celtypes.IntType((left.value > right.value) - (left.value < right.value))


# Any: the Quantity value is not one of cel-python's own types, which its annotations expect.
FUNCTIONS: dict[str, Any] = {"quantity": _quantity, "compareTo": _compare_to}


@cache
def _program(rule: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule), functions=FUNCTIONS)


def _at(obj: dict[str, Any] | None, path: tuple[str, ...]) -> Any:
    node: Any = obj
    for name in path:
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
    return node


def passes(rule: CelRule, new: dict[str, Any], old: dict[str, Any] | None = None) -> bool:
    """Whether the API server would let `new` (an update from `old`, or a create) through this
    rule. Both are defaulted objects, as the API server sees them after defaulting. A rule is not
    evaluated where its field is absent; a transition rule only on an update where the field
    existed before. A rule that does not evaluate to a boolean (an evaluation error) fails the
    test: every rule must evaluate on every schema-valid object."""
    value = _at(new, rule.at)
    if value is None:
        return True
    activation = {"self": json_to_cel(value)}
    if rule.transition:
        before = _at(old, rule.at)
        if before is None:
            return True
        activation["oldSelf"] = json_to_cel(before)
    result = _program(rule.rule).evaluate(activation)
    if not isinstance(result, celtypes.BoolType):
        raise AssertionError(f"{rule.rule!r} gave {result!r}, not a verdict")
    return bool(result)


def _rules_below(schema: dict[str, Any], value: Any, path: str
                 ) -> list[tuple[str, dict[str, Any], Any]]:
    """(path, rule, self) for every x-kubernetes-validations rule at `schema` and below it,
    where `value` has something to evaluate it on."""
    found = [(path, rule, value) for rule in schema.get("x-kubernetes-validations") or ()]
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                found += _rules_below(sub, value[name], f"{path}.{name}")
    return found


def defaults_checked(crd: dict[str, Any]) -> list[tuple[str, str]]:
    """Evaluate every rule on the schema's defaults as the API server does when a CRD is
    created (apiextensions-apiserver, schema/defaulting validation): at each node with a
    `default`, each rule at that node or below runs with self the default's value there as
    written (nested defaults not applied) and oldSelf the same value. Returns (path, message up
    to its fix in brackets) of each rule run; raises AssertionError naming the rule and the
    path for one that does not evaluate to true."""
    ran: list[tuple[str, str]] = []

    def walk(schema: dict[str, Any], path: str) -> None:
        if "default" in schema:
            for where, rule, value in _rules_below(schema, schema["default"], path):
                activation = {"self": json_to_cel(value), "oldSelf": json_to_cel(value)}
                result: object
                try:
                    result = _program(rule["rule"]).evaluate(activation)
                except CELEvalError as err:  # raised where both sides of || failed
                    result = err
                if not (isinstance(result, celtypes.BoolType) and bool(result)):
                    raise AssertionError(f"{where}.default: {result!r} evaluating rule: "
                                         f"{rule['message']}")
                ran.append((where, str(rule["message"]).split(" (")[0]))
        for name, sub in (schema.get("properties") or {}).items():
            walk(sub, f"{path}.{name}")
        if isinstance(schema.get("items"), dict):
            walk(schema["items"], f"{path}[]")

    for served in crd["spec"]["versions"]:
        walk(served["schema"]["openAPIV3Schema"], "")
    return [(where.lstrip("."), start) for where, start in ran]
