"""Resource quantities print the way the API server prints them, and compare by value.

A user writes `cpu: 1000m` or `memory: 1024Mi`; the API server stores `1` and `1Gi`. The renderer
must emit those canonical spellings (so a render never differs from what the server echoes back)
and compare by value (so `1000m` is not drift). The expected strings below are taken from the
tables of k8s.io/apimachinery/pkg/api/resource/quantity_test.go (TestQuantityParse,
TestQuantityString, TestQuantityParseEmit), not from this renderer.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import quantity
from tests.support.hypothesis_profiles import examples

PROPERTY_SETTINGS = settings(max_examples=examples(200), derandomize=True, database=None,
                             deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("written", "stored"), [
    # The brief's examples: a user's spelling -> what the API server stores.
    ("1000m", "1"), ("0.5", "500m"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"), ("1e3", "1e3"),
    ("1025Ki", "1025Ki"),
    # TestQuantityParseEmit.
    ("1Ki", "1Ki"), ("1Mi", "1Mi"), ("1Gi", "1Gi"), ("1000M", "1G"), (".001Ki", "1024m"),
    (".000001Ki", "1024u"), (".000000001Ki", "1024n"), (".000000000001Ki", "2n"),
    # TestQuantityString, through the parseable alternates.
    ("307200Ki", "300Mi"), ("1025024Mi", "1001Gi"), ("1024Gi", "1Ti"), ("5000m", "5"),
    ("0.001T", "1G"), ("1000u", "1m"), ("1.08", "1080m"), ("1080000000n", "1080m"),
    (".001e12", "1e9"), ("0.001e0", "1e-3"), ("1000e-12", "1e-9"), ("00", "0"),
    ("80e-3", "80e-3"), ("300e6", "300e6"), ("3e3", "3e3"), ("1234567M", "1234567M"),
    ("3k", "3k"), ("1080n", "1080n"), ("80u", "80u"),
    # TestQuantityParse values, printed canonically.
    ("0Ki", "0"), ("0m", "0"), ("50k", "50k"), ("40T", "40T"), ("1E", "1E"), ("12E", "12E"),
    ("1000E", "1e21"), ("5000E", "5e21"), ("1.5e21", "1500e18"),
    ("100.035k", "100035"), ("10.035M", "10035k"), ("1.2e3", "1200"), ("1.3E+6", "1300e3"),
    ("1.53E12", "1530e9"), ("0.5e-1", "50e-3"), ("9.01", "9010m"), ("8.1k", "8100"),
    ("6.987654321G", "6987654321"), ("1.01E", "1010P"), ("3.001n", "4n"),
    ("0.0000000001", "1n"), ("0.00000012345", "124n"), ("1.1E-9", "2e-9"),
    ("100.035Ki", "102435840m"), ("0.5Mi", "512Ki"), ("0.05Gi", "53687091200m"),
    (".0001k", "100m"), ("1.", "1"), ("1.G", "1G"), ("+1Gi", "1Gi"),
    # Negative values keep their sign and format.
    ("-1Gi", "-1Gi"), ("-1536", "-1536"), ("-9.01", "-9010m"),
    # Rounding to nano goes away from zero, as Kubernetes' inf.RoundUp does.
    ("-3.001n", "-4n"), ("-0.0000000001", "-1n"),
    # Not a multiple of 1024, or below 1024: binary input falls back to decimal.
    ("0.9Gi", "966367641600m"), ("1.5Ki", "1536"), ("0.5Ki", "512"),
])
def test_a_quantity_renders_in_the_spelling_the_api_server_stores(written: str,
                                                                 stored: str) -> None:
    assert quantity.canonical(written) == stored


@pytest.mark.parametrize("written", [
    "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-",
    # Kubernetes forbids surrounding whitespace: " 1" is not a quantity.
    " 1", "1 ", "1Gi\n", "", "10Gb", "1.5 Gi",
])
def test_text_kubernetes_refuses_is_not_a_quantity(written: str) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse(written)


def test_yaml_numbers_are_quantities_too() -> None:
    """`cpu: 2` and `cpu: 0.5` arrive as YAML numbers, not strings."""
    assert quantity.canonical(2) == "2"
    assert quantity.canonical(0.5) == "500m"
    assert quantity.canonical(0) == "0"
    with pytest.raises(quantity.QuantityError):
        quantity.parse(True)


@pytest.mark.parametrize(("left", "right", "same"), [
    ("1000m", "1", True), ("1Gi", "1024Mi", True), ("1Gi", "1G", False), ("1e3", "1k", True),
    ("0.5", "500m", True), ("1Ki", "1024", True), ("1k", "1024", False), ("3.001n", "4n", True),
])
def test_quantities_compare_by_value_not_by_spelling(left: str, right: str, same: bool) -> None:
    assert quantity.same_value(left, right) is same


def test_a_quantity_remembers_how_it_was_written() -> None:
    assert quantity.parse("1Gi").format is quantity.QuantityFormat.BINARY_SI
    assert quantity.parse("1G").format is quantity.QuantityFormat.DECIMAL_SI
    assert quantity.parse("1e9").format is quantity.QuantityFormat.DECIMAL_EXPONENT
    assert quantity.parse("1.5Gi").value == Decimal(1536 * 2**20)


# Quantities as people (and property tests) write them: sign, number, suffix or exponent.
_NUMBERS = st.one_of(
    st.from_regex(r"[0-9]{1,6}", fullmatch=True),
    st.from_regex(r"[0-9]{1,4}\.[0-9]{0,4}", fullmatch=True),
    st.from_regex(r"\.[0-9]{1,4}", fullmatch=True),
)
_SUFFIXES = st.one_of(
    st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E",
                     "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
    st.integers(min_value=-12, max_value=24).map(lambda exponent: f"e{exponent}"),
)
QUANTITIES = st.builds(lambda sign, number, suffix: sign + number + suffix,
                       st.sampled_from(["", "+", "-"]), _NUMBERS, _SUFFIXES)


@PROPERTY_SETTINGS
@given(QUANTITIES)
def test_the_canonical_spelling_keeps_the_value_and_is_stable(written: str) -> None:
    """What the API server echoes back parses to the same value and prints the same again,
    so a re-render of a server's answer is never a change."""
    canonical = quantity.canonical(written)
    assert quantity.same_value(canonical, written)
    assert quantity.canonical(canonical) == canonical
    assert canonical == "0" or not canonical.lstrip("-").startswith("0")
    assert "." not in canonical  # no fractional digits: the suffix moves instead


@PROPERTY_SETTINGS
@given(QUANTITIES)
def test_binary_input_stays_binary_only_for_whole_multiples_of_1024(written: str) -> None:
    parsed = quantity.parse(written)
    canonical = quantity.canonical(written)
    binary = canonical.endswith(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    if binary:
        assert parsed.format is quantity.QuantityFormat.BINARY_SI
        assert parsed.value % 1024 == 0
    elif parsed.format is quantity.QuantityFormat.BINARY_SI and abs(parsed.value) >= 1024 \
            and parsed.value == parsed.value.to_integral_value():
        assert parsed.value % 1024 != 0


def test_absurd_magnitudes_are_refused_and_tiny_ones_round_up_to_one_nano() -> None:
    """`1e999999` would need a million digits; below nano, Kubernetes rounds up to 1n."""
    with pytest.raises(quantity.QuantityError, match="too large"):
        quantity.parse("1e999999")
    with pytest.raises(quantity.QuantityError, match="too large"):
        quantity.parse("1" + "0" * 40)
    assert quantity.canonical("1e-999999") == "1e-9"
    assert quantity.canonical("-0.00000000000000000005") == "-1n"


@pytest.mark.parametrize(("suffix", "zeros"), [("", 30), ("k", 27), ("Ki", 11), ("e0", 30)])
def test_the_size_limit_is_exact_for_every_kind_of_suffix(suffix: str, zeros: int) -> None:
    """1e30 is the largest magnitude accepted, whatever the suffix adds (a binary suffix
    counts as up to 19 digits: 2^60 < 10^19)."""
    assert quantity.parse("1" + "0" * zeros + suffix).value > 0
    with pytest.raises(quantity.QuantityError, match="too large"):
        quantity.parse("1" + "0" * (zeros + 1) + suffix)


def test_zero_tiny_and_the_largest_binary_suffix_spell_as_kubernetes_does() -> None:
    assert quantity.canonical("0") == "0" and quantity.canonical("0Ki") == "0"
    assert quantity.parse("0e99").value == 0, "zero is never too large"
    assert quantity.canonical("0.0000000000001") == "1n"  # below nano: rounds up
    assert quantity.canonical("1e-13") == "1e-9"
    assert quantity.canonical("1024Ei") == "1024Ei"  # no suffix above Ei
    with pytest.raises(quantity.QuantityError, match="True is not a quantity"):
        quantity.parse(True)
