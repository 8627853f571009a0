"""Story: the reader refuses what is too big while it reads, and reads everything else as before.

Each limit of renderer.settings.InputLimits (file size, documents, nesting depth, aliases,
nodes with aliases expanded) refuses a file just over it with one problem naming the file, the
line where the limit was crossed and the setting, and accepts a file at it. The defaults accept
a thousand clusters in one file. Scalars read as YAML 1.2 read them, as the earlier ruamel.yaml
reader did (checked against it on drawn text), and the line of every key and item is kept.
"""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from bench.fleet import fleet_specs
from renderer import loader
from renderer.errors import RenderError
from renderer.loader import parse_text, to_plain
from renderer.settings import INPUT_LIMITS, InputLimits


def refusal(text: str, limits: InputLimits) -> tuple[int, str]:
    with pytest.raises(RenderError) as raised:
        parse_text(text, "spec.yaml", limits)
    (problem,) = raised.value.problems
    assert problem.file == "spec.yaml"
    return problem.line, problem.message


def nested(depth: int) -> str:
    return "top:\n" + "".join(f"{' ' * (level + 1)}k{level}:\n" for level in range(depth - 1)) \
        + " " * depth + "leaf: 1\n"


def test_nesting_is_refused_one_level_past_the_limit_at_the_line_it_happens() -> None:
    limits = InputLimits(max_depth=10)
    assert parse_text(nested(9), "spec.yaml", limits)  # 10 levels with the document's own
    line, message = refusal(nested(10), limits)
    assert line == 11 and "nesting deeper than 10 levels" in message and "max_depth" in message


def test_aliases_are_counted_and_refused_past_the_limit() -> None:
    text = "a: &x 1\nb: [" + ", ".join(["*x"] * 5) + "]\n"
    assert parse_text(text, "spec.yaml", InputLimits(max_aliases=5))
    line, message = refusal(text, InputLimits(max_aliases=4))
    assert line == 2 and "more than 4 aliases" in message


def test_an_alias_bomb_is_refused_by_its_expanded_size_before_it_is_built() -> None:
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 10) + "]" for n in range(1, 9)]
    line, message = refusal("\n".join(levels) + "\n", INPUT_LIMITS)
    assert line == 6 and f"more than {INPUT_LIMITS.max_nodes} nodes" in message


def test_an_alias_of_a_long_scalar_counts_its_bytes_not_one_node() -> None:
    """A 100 KB scalar aliased a thousand times is a 100 KB file that would read as 100 MB:
    refused by the bytes its content expands to, at the line where the budget runs out."""
    long = "x" * 100_000
    text = f"a: &big {long}\nb: [" + ", ".join(["*big"] * 1000) + "]\n"
    assert len(text) < 110_000
    line, message = refusal(text, INPUT_LIMITS)
    assert line == 2 and f"more than {INPUT_LIMITS.max_expanded_bytes} bytes" in message
    assert "max_expanded_bytes" in message
    few = f"a: &big {long}\nb: [" + ", ".join(["*big"] * 10) + "]\n"
    assert parse_text(few, "spec.yaml", INPUT_LIMITS), "a megabyte or so is fine"


def test_the_byte_budget_counts_what_an_anchored_collection_holds() -> None:
    text = "a: &m {k: " + "y" * 1000 + "}\nb: [" + ", ".join(["*m"] * 20) + "]\n"
    assert parse_text(text, "spec.yaml", InputLimits(max_expanded_bytes=30_000))
    line, message = refusal(text, InputLimits(max_expanded_bytes=15_000))
    assert line == 2 and "more than 15000 bytes" in message


def test_documents_are_counted() -> None:
    assert len(parse_text("---\na: 1\n" * 3, "spec.yaml", InputLimits(max_documents=3))) == 3
    line, message = refusal("---\na: 1\n" * 4, InputLimits(max_documents=3))
    assert line == 7 and "more than 3 documents" in message
    assert "renderer.settings.InputLimits.max_documents" in message


def test_a_file_over_the_size_limit_is_refused_before_parsing() -> None:
    line, message = refusal("a: " + "x" * 100 + "\n", InputLimits(max_file_bytes=100))
    assert line == 0 and "larger than 100 bytes" in message and "max_file_bytes" in message


def test_the_defaults_accept_a_thousand_clusters_in_one_file() -> None:
    text = yaml.dump_all(fleet_specs(1000), Dumper=yaml.CSafeDumper)
    documents = parse_text(text, "fleet.yaml")
    assert len(documents) == 1000


def test_lines_are_kept_for_keys_items_and_merged_keys() -> None:
    text = ("base: &base\n  cpu: '1'\n  memory: 1Gi\n"
            "spec:\n  <<: *base\n  memory: 2Gi\n  items:\n  - a\n  - name: b\n    size: 3\n")
    (document,) = parse_text(text, "spec.yaml")
    assert document.content["spec"] == {"memory": "2Gi", "items": ["a", {"name": "b",
                                        "size": 3}], "cpu": "1"}
    paths: list[list[str | int]] = [["spec", "memory"], ["spec", "cpu"], ["spec", "items", 1],
                                    ["spec", "items", 1, "size"], ["spec", "missing"],
                                    ["spec", "items", 2], ["spec", "items", 9]]
    assert [document.line_of(path) for path in paths] == [6, 2, 9, 10, 4, 7, 7]


SCALARS = st.text("0123456789abefnotruxlNTFYo._+-:~eE ", min_size=1, max_size=8)


@settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None)
@given(SCALARS)
def test_plain_scalars_read_as_the_earlier_ruamel_reader_read_them(text: str) -> None:
    document = f"k: {text}\n"
    try:
        expected: Any = to_plain(YAML(typ="rt").load(document))
    except (YAMLError, ValueError, IndexError):  # the earlier reader's own crashes
        return
    if isinstance(expected.get("k"), datetime.date) or "T" in str(expected.get("k")):
        return  # timestamps: the earlier reader reformatted them, ours keeps the text
    try:
        (ours,) = parse_text(document, "spec.yaml")
    except RenderError:
        return  # libyaml refuses a few texts ruamel accepts: refused, never misread
    assert ours.content == expected or (expected["k"] != expected["k"])  # nan


class Growing(io.BytesIO):
    """A file that someone appends to between the size check and the read."""


def test_a_file_that_grows_while_read_is_read_whole_or_refused_past_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader asks for the size stat gave it first; a file that grew since is still read
    to its end, and one that grew past the limit is refused as any file over it."""
    monkeypatch.setattr(loader, "INPUT_LIMITS", InputLimits(max_file_bytes=64))
    said = b"a: 1\n"
    assert loader._read_limited(Growing(said + b"b: 2\n"), "spec.yaml", len(said)) == \
        "a: 1\nb: 2\n"
    assert loader._read_limited(Growing(said), "spec.yaml", len(said) + 10) == "a: 1\n", \
        "shrunk: what is there"
    with pytest.raises(RenderError) as raised:
        loader._read_limited(Growing(said + b"#" * 64), "spec.yaml", len(said))
    assert "spec.yaml" in str(raised.value.problems[0])
