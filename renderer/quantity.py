"""Kubernetes resource quantities: parse, compare by value, print in canonical form.

The renderer calls `canonical` so that `1000m` and `1` render as the same bytes; the reconciler's
drift comparison calls `comparable` so that a value the API server wrote back in another
spelling is not mistaken for drift. The rules follow k8s.io/apimachinery/pkg/api/resource
(Quantity.String): binary suffixes (Ki..Ei) stay binary when the value is a whole multiple of
1024, decimal suffixes (n, u, m, k..E) otherwise, and exponent forms (1e3) stay exponent forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal, InvalidOperation, localcontext
from enum import Enum

_PATTERN = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
# Larger values are refused: no resource comes near 10^30 (Kubernetes caps binary quantities at
# 2^63-1), and the exact expansion of an exponent such as 1e999999 would cost unbounded memory.
MAX_EXPONENT = 30
# Decimal digits that every value within MAX_EXPONENT, at nano precision, fits in exactly.
_PRECISION = MAX_EXPONENT + 40


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
        with localcontext() as context:
            context.prec = _PRECISION  # exact arithmetic: the default 28 digits would round
            return self._canonical()

    def _canonical(self) -> str:
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
        if fmt is QuantityFormat.DECIMAL_EXPONENT or exponent not in _DECIMAL_SUFFIX_BY_EXPONENT:
            # Beyond E (10^18) DecimalSI has no suffix: Kubernetes falls back to an exponent.
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        return f"{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT[exponent]}"


def _decimal_mantissa(value: Decimal) -> tuple[int, int]:
    """The integer mantissa and the largest exponent (a multiple of 3, from -9) for `value`."""
    exponent = -9
    mantissa = int(value.scaleb(9).to_integral_value(rounding=ROUND_UP))
    while mantissa % 1000 == 0 and mantissa != 0:
        mantissa //= 1000
        exponent += 3
    return mantissa, exponent


def parse(text: str | int | float) -> Quantity:
    """Parse a quantity as written in a manifest (a string, or a bare YAML number)."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a quantity")
    if isinstance(text, int | float):
        text = repr(text) if isinstance(text, float) else str(text)
    # Whole-string match: Kubernetes refuses surrounding whitespace (" 1", "1Gi\n").
    match = _PATTERN.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (examples: 500m, 2, 1.5Gi, 512Mi, 1e3)")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as error:  # pragma: no cover - the pattern admits only decimals
        raise QuantityError(f"{text!r} is not a quantity") from error
    if match["binary"]:
        shift, fmt = 0, QuantityFormat.BINARY_SI
        magnitude = number.adjusted() + 19 if number else 0  # 2^60 < 10^19
    else:
        if match["exponent"] is not None:
            shift, fmt = int(match["exponent"]), QuantityFormat.DECIMAL_EXPONENT
        else:
            shift, fmt = _DECIMAL[match["decimal"] or ""], QuantityFormat.DECIMAL_SI
        magnitude = number.adjusted() + shift if number else 0
    if magnitude > MAX_EXPONENT:
        raise QuantityError(f"{text!r} is too large (at most about 1e{MAX_EXPONENT})")
    if number and magnitude < -12:
        # Every digit lies below nano, where the value rounds up to 1n all the same; a smaller
        # shift keeps the arithmetic finite for exponents such as 1e-999999.
        shift -= magnitude + 12
    with localcontext() as context:
        context.prec = len(match["number"]) + _PRECISION
        if match["binary"]:
            value = number * (1 << _BINARY[match["binary"]])
        else:
            value = number.scaleb(shift)
        # Kubernetes keeps nano precision and rounds anything finer up, away from zero.
        value = value.quantize(Decimal("1e-9"), rounding=ROUND_UP)
        return Quantity(value=value.normalize() if value else Decimal(0), format=fmt)


def canonical(text: str | int | float) -> str:
    """`parse(text).canonical()`: the one spelling the renderer emits."""
    return parse(text).canonical()


def same_value(left: str | int | float, right: str | int | float) -> bool:
    """True when two quantities are equal by value (`1000m` == `1`, `1Gi` != `1G`)."""
    return parse(left).value == parse(right).value


def comparable(raw: object, *, milli: bool = False) -> object:
    """A spelling that depends only on the value, for drift comparison (reconciler.drift.normalise).

    The shorter of the exact decimal-SI and binary-SI spellings (`1`, `500m`, `1Gi`, `1G`,
    `1536Mi`), so a value the API server wrote back in another form compares equal and still
    reads well in a report. `milli` applies the API server's rounding of resource requests and
    limits up to whole millis. Anything that is not a quantity is returned unchanged, so a
    malformed value still compares (and shows) as itself."""
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return raw
    try:
        value = parse(raw).value
    except QuantityError:
        return raw
    if milli:
        value = (value * 1000).to_integral_value(rounding=ROUND_UP) / 1000
    decimal = Quantity(value, QuantityFormat.DECIMAL_SI).canonical()
    binary = Quantity(value, QuantityFormat.BINARY_SI).canonical()
    return binary if len(binary) < len(decimal) else decimal
