"""Every YAML reader reads the rendered output the same, and the output is the earlier one.

Stories: (1) a string written by the emitter reads back as the same string through a YAML 1.1
reader (PyYAML's SafeLoader), through a YAML 1.2 reader (ruamel.yaml) and through the
renderer's own reader, whatever the string: hypothesis draws any text, and text made of the
characters that make numbers, booleans and timestamps; (2) the values Go's yaml.v2 misreads
beyond PyYAML's rules (`y`, `N`, `oN`, `0o17`, `1_000`, `+inf`, hex floats) come out quoted;
(3) the libyaml emitter writes the bytes the earlier pure-Python ruamel.yaml emitter wrote, for
every string except those it now quotes on purpose (and characters outside the Basic
Multilingual Plane or control characters, which libyaml escapes differently).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from renderer import emit
from renderer.emit import Manifest, read_as_other_than_string, to_stream, to_yaml
from renderer.loader import parse_text

ANY_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=16)
SCALAR_LIKE = st.text("yYnNoOfFtTrueals01289:.-+eE_xXbB~<= '\"#\t", max_size=10)
PRINTABLE = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Co", "Cn", "Zl", "Zp"),
                                  max_codepoint=0xFFFF), max_size=16)


@pytest.fixture(autouse=True)
def no_remembered_tags() -> None:
    """The emitter remembers each scalar's tag for the process; every story here starts with
    none remembered, so what it checks is the resolving, not an earlier story's answer."""
    emit._RESOLVED.clear()


def an_object(text: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": text, "labels": {text: text}},
            "data": {"items": [text, {"nested": text}]}}


def ruamel_1_2(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


@settings(max_examples=400, suppress_health_check=list(HealthCheck), deadline=None)
@given(ANY_TEXT | SCALAR_LIKE)
def test_any_string_reads_back_the_same_through_yaml_1_1_and_1_2_readers(text: str) -> None:
    obj = an_object(text)
    written = to_yaml(obj)
    assert yaml.load(written, Loader=yaml.SafeLoader) == obj, written
    assert ruamel_1_2(written) == obj, written
    (document,) = parse_text(written, "written.yaml")
    assert document.content == obj, written


@pytest.mark.parametrize("text", [
    "y", "Y", "n", "N", "yes", "No", "oN", "OFF", "tRUE", "~", "NULL", "<<", "=",
    "0o17", "017", "0x1F", "0b101", "1_000", "12:30", "1:02:03", "1e3", "+inf", "-Infinity",
    ".NaN", "0x1p-2", "2001-12-14", "2001-12-14T21:59:43.10-05:00"])
def test_what_go_yaml_v2_would_misread_is_quoted(text: str) -> None:
    line = to_yaml({"metadata": {"name": text}}).splitlines()[1]
    assert line in (f"  name: '{text}'", f'  name: "{text}"'), line
    assert read_as_other_than_string(text)


@pytest.mark.parametrize("text", ["kwdb", "3.2.1", "10Gi", "500m", "v1.35", "8080:80", ".",
                                  "orders-public", "25%"])
def test_ordinary_values_stay_plain(text: str) -> None:
    assert to_yaml({"metadata": {"name": text}}).splitlines()[1] == f"  name: {text}"


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    return [_sorted(item) for item in value] if isinstance(value, list) else value


def earlier_emitter(obj: dict[str, Any]) -> str:
    """The pure-Python ruamel.yaml emitter the renderer used before libyaml (same options;
    the objects here have only sorted keys at the top level)."""
    obj = _sorted(obj)
    dumper = YAML(typ="safe", pure=True)
    dumper.default_flow_style = False
    dumper.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    dumper.width = 4096
    stream = io.StringIO()
    dumper.dump(obj, stream)
    return stream.getvalue()


@settings(max_examples=400, suppress_health_check=list(HealthCheck), deadline=None)
@given(PRINTABLE | SCALAR_LIKE)
def test_the_bytes_are_the_earlier_emitters_except_for_strings_now_quoted(text: str) -> None:
    obj = {"metadata": {"name": text, "annotations": {text: text}}}
    if not read_as_other_than_string(text):
        assert to_yaml(obj) == earlier_emitter(obj)


def test_a_remembered_tag_gives_the_same_text_as_a_fresh_one() -> None:
    obj = {"metadata": {"name": "yes", "labels": {"on": "kwdb"}}}
    fresh = to_yaml(obj)
    assert to_yaml(obj) == fresh == "metadata:\n  labels:\n    'on': kwdb\n  name: 'yes'\n"


def test_a_stream_is_each_object_after_a_document_marker() -> None:
    first = Manifest("a.yaml", {"kind": "Service", "metadata": {"name": "a"}})
    second = Manifest("b.yaml", {"kind": "Service", "metadata": {"name": "b"}})
    assert to_stream([first, second]) == f"---\n{first.text}---\n{second.text}"
    assert to_stream([]) == ""
