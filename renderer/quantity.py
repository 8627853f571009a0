"""Kubernetes resource quantities: parse, compare by value, print in canonical form.

The renderer calls `canonical` so that `1000m` and `1` render as the same bytes; the reconciler's
drift comparison calls `parse` so that a value the API server wrote back in another spelling is
not mistaken for drift. The rules follow k8s.io/apimachinery/pkg/api/resource (Quantity.String):
binary suffixes (Ki..Ei) stay binary when the value is a whole multiple of 1024, decimal
suffixes (n, u, m, k..E) otherwise, and exponent forms (1e3) stay exponent forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from enum import Enum

_PATTERN = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL.items()}


class QuantityFormat(Enum):
    """How a quantity was written, which decides how it is printed back (as Kubernetes does)."""

    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"
    DECIMAL_EXPONENT = "DecimalExponent"


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


@dataclass(frozen=True)
class Quantity:
    """A quantity's exact value (nano precision, rounded up as Kubernetes does) and its format."""

    value: Decimal
    format: QuantityFormat

    def canonical(self) -> str:
        """The spelling the API server would print for this quantity."""
        value = self.value
        if value == 0:
            return "0"
        fmt = self.format
        if fmt is QuantityFormat.BINARY_SI and (abs(value) < 1024 or value != value.to_integral()):
            fmt = QuantityFormat.DECIMAL_SI
        if fmt is QuantityFormat.BINARY_SI:
            integer = int(value)
            shift = 0
            while shift < 60 and integer % (1 << (shift + 10)) == 0:
                shift += 10
            suffix = next(name for name, bits in _BINARY.items() if bits == shift) if shift else ""
            return f"{integer >> shift}{suffix}"
        mantissa, exponent = _decimal_mantissa(value)
        if fmt is QuantityFormat.DECIMAL_EXPONENT:
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        return f"{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT[exponent]}"


def _decimal_mantissa(value: Decimal) -> tuple[int, int]:
    """The integer mantissa and the largest exponent (a multiple of 3, -9..18) for `value`."""
    exponent = -9
    mantissa = int((value * Decimal(10) ** 9).to_integral_value(rounding=ROUND_CEILING))
    while exponent < 18 and mantissa % 1000 == 0 and mantissa != 0:
        mantissa //= 1000
        exponent += 3
    return mantissa, exponent


def parse(text: str | int | float) -> Quantity:
    """Parse a quantity as written in a manifest (a string, or a bare YAML number)."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a quantity")
    if isinstance(text, int | float):
        text = repr(text) if isinstance(text, float) else str(text)
    match = _PATTERN.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (examples: 500m, 2, 1.5Gi, 512Mi, 1e3)")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as error:  # pragma: no cover - the pattern admits only decimals
        raise QuantityError(f"{text!r} is not a quantity") from error
    if match["binary"]:
        value, fmt = number * (1 << _BINARY[match["binary"]]), QuantityFormat.BINARY_SI
    elif match["exponent"] is not None:
        value = number.scaleb(int(match["exponent"]))
        fmt = QuantityFormat.DECIMAL_EXPONENT
    else:
        value = number.scaleb(_DECIMAL[match["decimal"] or ""])
        fmt = QuantityFormat.DECIMAL_SI
    # Kubernetes keeps nano precision and rounds anything finer up.
    value = value.quantize(Decimal("1e-9"), rounding=ROUND_CEILING)
    return Quantity(value=value.normalize() if value else Decimal(0), format=fmt)


def canonical(text: str | int | float) -> str:
    """`parse(text).canonical()`: the one spelling the renderer emits."""
    return parse(text).canonical()


def same_value(left: str | int | float, right: str | int | float) -> bool:
    """True when two quantities are equal by value (`1000m` == `1`, `1Gi` != `1G`)."""
    return parse(left).value == parse(right).value
