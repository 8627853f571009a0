"""A user's spec values are read as YAML 1.2 reads them, the way the API server will see them.

renderer.loader reads spec files with its own scalar rules (YAML 1.2's core schema, as
ruamel.yaml read them before): `yes`, `on` and `017` mean what they say in YAML 1.2, not what
YAML 1.1 made of them; explicit tags (`!!int "3"`) convert or are refused at their line.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from renderer.errors import RenderError
from renderer.loader import load_documents, parse_text
from renderer.settings import INPUT_LIMITS, InputLimits


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


def test_underscores_in_a_float_are_dropped_wherever_they_stand() -> None:
    """As ruamel.yaml read them, also where Python's float() refuses an underscore."""
    assert values("v: [1__0.5, 1_.5, 1._5]\n")["v"] == [10.5, 1.5, 1.5]


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


@pytest.mark.parametrize(("text", "problem"), [
    ("a: 1\n? [b, c]\n: 2\n",
     "spec.yaml:2: invalid YAML: a mapping key must be a scalar (use a plain name as key)"),
    ("a: 1\n<<: 5\n", "spec.yaml:2: invalid YAML: a merge key (<<) needs a mapping or a list of "
                      "mappings (merge an anchored mapping: <<: *name)"),
    ("a: 1\nb: !custom x\n", "spec.yaml:2: invalid YAML: unsupported tag !custom (remove the "
                             "tag; KaiwuCluster specs use plain values)"),
    ("a: 1\nb: !!set {x}\n", "spec.yaml:2: invalid YAML: unsupported tag tag:yaml.org,2002:set "
                             "(remove the tag; KaiwuCluster specs use plain values)"),
    ("a: &x\n  b: *x\n", "spec.yaml:2: invalid YAML: alias *x refers to a node that contains it "
                         "(remove the recursive alias)"),
    ("a: 1\nb: *nope\n", "spec.yaml:2: invalid YAML: found undefined alias *nope (define the "
                         "anchor (&name) before using it)"),
    ('a: 1\nb: "\\ud800"\n', "spec.yaml:2: invalid YAML: found invalid Unicode character escape "
                             "code (a \\uD800-\\uDFFF escape is a lone UTF-16 surrogate, not "
                             "text) (write the character itself, or a \\U00XXXXXX escape for "
                             "it)"),
], ids=["complex-key", "merge-scalar", "scalar-tag", "collection-tag", "recursive-alias",
        "undefined-alias", "lone-surrogate"])
def test_yaml_a_spec_cannot_use_is_refused_at_its_line_with_the_fix(text: str,
                                                                    problem: str) -> None:
    with pytest.raises(RenderError) as raised:
        values(text)
    assert str(raised.value) == problem


def test_the_node_limit_admits_exactly_its_number_of_nodes() -> None:
    text = "a: [1, 2, 3]\nb:\n  c: 1\n"  # the mapping, a, the list, 3 items, b, a mapping...
    assert parse_text(text, "spec.yaml", InputLimits(max_nodes=10))
    aliased = "a: &x 1\nb: *x\n"  # an alias of a scalar counts as the one node it repeats
    assert parse_text(aliased, "spec.yaml", InputLimits(max_nodes=5))
    with pytest.raises(RenderError):
        parse_text(aliased, "spec.yaml", InputLimits(max_nodes=4))
    for limit, line in ((5, 1), (7, 3)):  # crossed at an item, and at b's mapping (line 3)
        with pytest.raises(RenderError) as raised:
            parse_text(text, "spec.yaml", InputLimits(max_nodes=limit))
        assert str(raised.value).startswith(
            f"spec.yaml:{line}: more than {limit} nodes with aliases expanded"), limit


def test_limits_name_themselves_and_say_what_to_do() -> None:
    with pytest.raises(RenderError) as raised:
        parse_text("a:\n  b:\n    c: 1\n", "spec.yaml", InputLimits(max_depth=2))
    assert str(raised.value) == (
        "spec.yaml:3: nesting deeper than 2 levels, the limit of renderer.settings.InputLimits."
        "max_depth (a KaiwuCluster spec needs nothing near this; split the file or remove what "
        "is repeated)")
    with pytest.raises(RenderError) as raised:
        parse_text("a: " + "x" * 100 + "\n", "big.yaml", InputLimits(max_file_bytes=50))
    assert str(raised.value) == (
        "big.yaml: file is larger than 50 bytes, the limit of renderer.settings.InputLimits."
        "max_file_bytes (a KaiwuCluster spec is a few KB; split the file, keep large data out "
        "of it)")


def test_a_file_that_grows_after_its_size_was_checked_is_still_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file written to between the size check and the read (a log, an editor saving) is read
    only up to the limit, and refused by name like any file too large."""
    growing = tmp_path / "growing.yaml"
    growing.write_bytes(b"a: " + b"x" * INPUT_LIMITS.max_file_bytes + b"\n")
    real_stat = Path.stat

    def stat_before_it_grew(path: Path, **options: Any) -> os.stat_result:
        found = real_stat(path, **options)
        if path != growing:
            return found
        fields = list(found)
        fields[stat.ST_SIZE] = 10
        return os.stat_result(fields)

    monkeypatch.setattr(Path, "stat", stat_before_it_grew)
    with pytest.raises(RenderError) as raised:
        load_documents([growing], display_root=tmp_path)
    assert str(raised.value).startswith(
        f"growing.yaml: file is larger than {INPUT_LIMITS.max_file_bytes} bytes")


def test_every_unreadable_file_is_reported_not_only_the_first(tmp_path: Path) -> None:
    large = tmp_path / "large.yaml"
    large.write_bytes(b"a: " + b"x" * INPUT_LIMITS.max_file_bytes + b"\n")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"a: 1\nb: \xff\n")
    missing = tmp_path / "gone.yaml"
    with pytest.raises(RenderError) as raised:
        load_documents([large, binary, missing], display_root=tmp_path)
    lines = str(raised.value).splitlines()
    assert lines[0].startswith("binary.yaml:2: cannot read file: 'utf-8' codec can't decode")
    assert lines[0].endswith("(make it a readable UTF-8 text file)")
    assert lines[1].startswith("gone.yaml: cannot read file: [Errno 2] No such file")
    assert lines[1].endswith("(make it a readable UTF-8 text file)")
    assert lines[2].startswith(f"large.yaml: file is larger than {INPUT_LIMITS.max_file_bytes}")
    assert len(lines) == 3
    assert [problem.line for problem in raised.value.problems] == [2, 0, 0]


@pytest.mark.parametrize("character", ["\x07", "\x00", "\x1b"])
def test_a_control_character_is_one_problem_line_at_its_line(character: str) -> None:
    """A bell or an escape sequence pasted into a spec: YAML allows neither anywhere. The user
    reads one line, with the line of the character, like every other problem."""
    with pytest.raises(RenderError) as raised:
        values(f"a: 1\nbé: é{character}x\nc: {character}\n")
    assert str(raised.value) == (
        f"spec.yaml:2: invalid YAML: character U+{ord(character):04X} is not allowed (remove "
        "it, or write it as an escape such as \\x07 in a double-quoted string)")
    assert raised.value.problems[0].path == ""


def test_a_yaml_syntax_error_names_its_line_and_says_to_fix_the_syntax_there() -> None:
    with pytest.raises(RenderError) as raised:
        values("a: 1\nb: [1, 2\nc: 3\n")
    [problem] = raised.value.problems
    assert (problem.line, problem.path, problem.fix) == (
        3, "", "fix the YAML syntax at this line")
    assert problem.message.startswith("invalid YAML: ")
