"""A user's spec values are read as YAML 1.2 reads them, the way the API server will see them.

renderer.loader reads spec files with its own scalar rules (YAML 1.2's core schema, as
ruamel.yaml read them before): `yes`, `on` and `017` mean what they say in YAML 1.2, not what
YAML 1.1 made of them; explicit tags (`!!int "3"`) convert or are refused at their line.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from renderer.errors import RenderError
from renderer.loader import parse_text


def values(text: str) -> Any:
    (document,) = parse_text(text, "spec.yaml")
    return document.content


def test_nulls_and_booleans_are_only_the_core_spellings() -> None:
    read = values("v: [~, null, Null, NULL, true, True, TRUE, false, False, FALSE,\n"
                  "    yes, no, on, off, nULL, tRUE, fALSE]\nempty:\n")
    assert read["v"] == [None, None, None, None, True, True, True, False, False, False,
                         "yes", "no", "on", "off", "nULL", "tRUE", "fALSE"]
    assert read["empty"] is None


def test_integers_in_every_base_and_what_only_looks_like_one() -> None:
    read = values("v: [0, -0, +7, 1_000, 0b101, -0b11, 0x1F, 0x_1f, 0o17, 017, -0o17, +0x10,\n"
                  "    0b, 0x, 0o, _1, 1__0, 0b12, '7', -, +]\n")["v"]
    assert read == [0, 0, 7, 1000, 5, -3, 31, 31, 15, 17, -15, 16,
                    "0b", "0x", "0o", "_1", 10, "0b12", "7", "-", "+"]
    assert [type(value) for value in read[:12]] == [int] * 12


def test_floats_and_the_special_values() -> None:
    read = values("v: [1.5, -2., .5, +.5, 1e3, 1E-3, 1.5e+3, ._, .inf, -.Inf, +.INF, 1_0.5,\n"
                  "    .5e+3, 3.2.1, 1.20, -.inf, .NaN]\n")["v"]
    assert read[:8] == [1.5, -2.0, 0.5, 0.5, 1000.0, 0.001, 1500.0, "._"]
    assert read[8:16] == [math.inf, -math.inf, math.inf, 10.5, 500.0, "3.2.1", 1.2, -math.inf]
    assert math.isnan(read[16])
    assert type(read[4]) is float


def test_explicit_tags_convert_the_text_they_fit() -> None:
    read = values("v: [!!int '3', !!float '3', !!bool 'true', !!null '', !!str 3, "
                  "!!float '1.5', !!int '-0x10', !!int '+3']\n")["v"]
    assert read == [3, 3.0, True, None, "3", 1.5, -16, 3]
    assert [type(value) for value in read] == [int, float, bool, type(None), str, float, int,
                                               int]


@pytest.mark.parametrize(("text", "message"), [
    ("x: !!int abc", "'abc' is not a int"), ("x: !!bool 1", "'1' is not a bool"),
    ("x: !!float yes", "'yes' is not a float"), ("x: !!null 0", "'0' is not a null"),
    ("x: !!int 1.5", "'1.5' is not a int"), ("x: !!bool ~", "'~' is not a bool"),
])
def test_a_tag_that_does_not_fit_its_text_is_refused_at_its_line(text: str, message: str) -> None:
    with pytest.raises(RenderError) as raised:
        values("a: 1\n" + text + "\n")
    assert str(raised.value) == (
        f"spec.yaml:2: invalid YAML: {message} (fix the value or its tag)")
