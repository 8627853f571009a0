"""Kubernetes resource quantities, compared by value.

The drift normaliser (reconciler.normalise) calls :func:`canonical_quantity` on every value that
Kubernetes stores as a ``resource.Quantity`` (resource limits and requests, storage requests,
``emptyDir.sizeLimit``...), so ``1000m`` and ``1`` hash alike while ``1Gi`` and ``1G`` do not.

The canonical string is a pure function of the value (not of how it was written): the shortest of
the exact decimal-SI and binary-SI spellings, e.g. ``1``, ``500m``, ``1Gi``, ``1G``, ``1536Mi``.
Sub-nano precision is rounded up, as the API server does.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

# Suffix -> multiplier, as in k8s.io/apimachinery/pkg/api/resource.
_DECIMAL_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_BINARY_SUFFIXES: dict[str, Fraction] = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exp>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_NANO = Fraction(1, 10**9)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(raw: str | int | float) -> Fraction:
    """The exact value of a quantity written as a string (``"1.5Gi"``) or a YAML number."""
    if isinstance(raw, bool):
        raise QuantityError(f"not a quantity: {raw!r}")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise QuantityError(f"not a quantity: {raw!r}")
        # repr() gives the shortest decimal that round-trips, i.e. what the author wrote.
        return Fraction(Decimal(repr(raw)))
    match = _QUANTITY.match(raw.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {raw!r}")
    try:
        number = Fraction(Decimal(match["number"]))
    except InvalidOperation as error:  # pragma: no cover - the regex only admits decimals
        raise QuantityError(f"not a quantity: {raw!r}") from error
    if match["exp"]:
        number *= Fraction(10) ** int(match["exp"][1:])
    elif match["suffix"] in _BINARY_SUFFIXES:
        number *= _BINARY_SUFFIXES[match["suffix"]]
    else:
        number *= _DECIMAL_SUFFIXES[match["suffix"] or ""]
    return -number if match["sign"] == "-" else number


def round_up(value: Fraction, step: Fraction) -> Fraction:
    """``value`` rounded up (towards +infinity) to a multiple of ``step``."""
    return Fraction(math.ceil(value / step)) * step


def format_quantity(value: Fraction) -> str:
    """The canonical spelling of an exact value (see the module docstring)."""
    if value < 0:
        return "-" + format_quantity(-value)
    if value == 0:
        return "0"
    value = round_up(value, _NANO)
    candidates: list[str] = []
    # Decimal SI: the largest suffix that keeps the mantissa whole.
    for suffix, scale in sorted(_DECIMAL_SUFFIXES.items(), key=lambda item: -item[1]):
        mantissa = value / scale
        if mantissa.denominator == 1:
            candidates.append(f"{mantissa.numerator}{suffix}")
            break
    if value.denominator == 1:
        for suffix, scale in sorted(_BINARY_SUFFIXES.items(), key=lambda item: -item[1]):
            mantissa = value / scale
            if mantissa.denominator == 1:
                candidates.append(f"{mantissa.numerator}{suffix}")
                break
    # Decimal wins ties: "1k" rather than a binary spelling of the same length never arises,
    # but "1" must stay "1".
    return min(candidates, key=len)


def canonical_quantity(raw: object, *, round_to: Fraction | None = None) -> object:
    """The canonical spelling of ``raw``, or ``raw`` unchanged when it is not a quantity.

    ``round_to`` applies the API server's rounding for resource lists (``Fraction(1, 1000)``:
    requests and limits are rounded up to whole millis). Unparseable values are returned as they
    are so that a malformed value still compares (and shows) as itself.
    """
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
        return raw
    return _canonical(raw, round_to)


@functools.lru_cache(maxsize=4096, typed=True)
def _canonical(raw: str | int | float, round_to: Fraction | None) -> str | int | float:
    # Cached: every comparison of every object meets the same few dozen quantities.
    try:
        value = parse_quantity(raw)
    except QuantityError:
        return raw
    if round_to is not None:
        value = round_up(value, round_to)
    return format_quantity(value)
