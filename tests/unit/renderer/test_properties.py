"""Property-based stories: whatever a user may write renders valid, deterministic manifests, and
whatever they may get wrong is refused at the right file and line with nothing written.

Valid specs are generated from the CRD itself (crd/kaiwuclusters.yaml: types, enums, patterns,
bounds, which fields are optional), with the semantic rules layered on where the schema cannot
say them (start mode vs replicas, requests vs limits, memory fractions, names Kubernetes accepts).
Each generated set of clusters is spread over several files and documents, rendered with the
real CLI, validated with kubernetes-validate in strict mode plus the API server's name, label,
toleration and resource rules (tests/support/render.py), and rendered again to compare bytes.

Broken inputs start from such a valid set and break one thing in one document: YAML syntax, an
unknown field, a wrong type, a number out of range, a bad enum or pattern, a semantic rule, a
duplicate cluster in another file, a document of another kind. The error must name that file
and the line PyYAML (not the renderer's parser) finds for the field; exit 2; no traceback; no
output directory created; an earlier render left byte for byte as it was.

Example counts are modest (CI has two cores) and derandomized: every run tests the same cases.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from renderer import schema
from renderer.loader import load_documents, to_plain
from tests.support.places import places
from tests.support.render import (
    FOREIGN_KINDS,
    KIND,
    NEWEST_VALIDATABLE,
    SUMMARY_LINE,
    dotted,
    kaiwu,
    line_of,
    read_tree,
    rendered_objects,
    to_text,
    validate_strict,
)
from tests.support.specs import (
    BAD_ENUMS,
    BAD_PATTERNS,
    DNS_LABEL,
    OUT_OF_RANGE,
    PROPERTY,
    SPEC_SCHEMA,
    Path_,
    specs,
)


@st.composite
def cluster_sets(draw: st.DrawFn, max_files: int = 3) -> list[list[dict[str, Any]]]:
    """Clusters with distinct namespace/name, spread over 1-3 files of 1-2 documents each."""
    names = draw(st.lists(
        st.tuples(st.one_of(st.none(), DNS_LABEL),
                  st.from_regex(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)),
        min_size=1, max_size=3, unique_by=lambda pair: (pair[0] or "default", pair[1])))
    documents = []
    for namespace, name in names:
        metadata = {"name": name} if namespace is None else {"name": name,
                                                              "namespace": namespace}
        documents.append({"apiVersion": schema.API_VERSION, "kind": KIND,
                          "metadata": metadata, "spec": draw(specs())})
    files: list[list[dict[str, Any]]] = []
    for document in documents:
        if files and (len(files) == max_files or (len(files[-1]) < 2 and draw(st.booleans()))):
            files[-1].append(document)
        else:
            files.append([document])
    return files


FILE_NAMES = ("a.yaml", "b.yml", "nested/c.yaml")


def write_files(root: Path, files: list[list[dict[str, Any]]]) -> dict[str, str]:
    """Write each file; returns its text by path relative to `root`."""
    texts = {}
    for name, documents in zip(FILE_NAMES, files, strict=False):
        text = to_text(*documents)
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
        texts[name] = text
    return texts


def _reversed_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _reversed_keys(node[key]) for key in reversed(list(node))}
    if isinstance(node, list):
        return [_reversed_keys(item) for item in node]
    return node


# --- valid specs -------------------------------------------------------------------------------

@PROPERTY
@given(files=cluster_sets(), target=st.sampled_from(["1.25", "1.35", NEWEST_VALIDATABLE]))
def test_any_valid_spec_renders_valid_deterministic_manifests(
        files: list[list[dict[str, Any]]], target: str) -> None:
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        write_files(root / "src", files)
        # The files say what was generated (so a failure below is the renderer's, not YAML's).
        read_back = [to_plain(doc.content) for doc in load_documents(
            sorted((root / "src").rglob("*.y*ml")))]
        assert sorted(map(repr, read_back)) == sorted(repr(doc) for file in files for doc in file)

        first = kaiwu("render", root / "src", "-o", root / "first", "--kube-version", target)
        assert (first.code, first.stderr) == (0, "")
        objects = rendered_objects(root / "first")

        result = validate_strict(objects, target)
        assert result.errors == ()
        monitored = any(doc["spec"].get("monitoring", {}).get("serviceMonitor")
                        for file in files for doc in file)
        assert result.skipped_kinds == (FOREIGN_KINDS if monitored else frozenset())

        statefulsets = {(obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
                        for obj in objects.values() if obj["kind"] == "StatefulSet"}
        for doc in (doc for file in files for doc in file):
            key = (doc["metadata"].get("namespace", "default"), doc["metadata"]["name"])
            spec = doc["spec"]
            statefulset = statefulsets.pop(key)["spec"]
            assert statefulset["replicas"] == spec.get("replicas", 3)
            kwbase = statefulset["template"]["spec"]["containers"][0]
            assert kwbase["image"] == (f"{spec.get('image', {}).get('repository', 'kwdb/kwdb')}:"
                                       f"{spec.get('version', '3.2.1')}")
            extra = spec.get("extraArgs", [])
            assert kwbase["command"][len(kwbase["command"]) - len(extra):] == extra
        assert statefulsets == {}, "one StatefulSet per cluster, no more"

        # Render again from the same specs with every mapping's keys in reverse order: the
        # bytes must not change (this also covers rendering the same input twice).
        write_files(root / "reordered", [[_reversed_keys(doc) for doc in file] for file in files])
        again = kaiwu("render", root / "reordered", "-o", root / "again", "--kube-version", target)
        assert again.code == 0
        assert read_tree(root / "first") == read_tree(root / "again")


# --- broken inputs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Breakage:
    """One thing broken in one document: where the renderer must point, and what kind of thing
    it is (for the report when an example fails)."""

    what: str
    file: str
    document: int
    path: Path_ | None  # None: a YAML syntax error, which has no spec path
    line: int = 0  # for YAML errors: the line broken; otherwise computed with PyYAML


def _get(node: Any, path: Path_) -> Any:
    for part in path:
        node = node[part]
    return node


def _set(doc: dict[str, Any], path: Path_, value: Any) -> None:
    node: Any = doc
    for part in path[:-1]:
        if isinstance(node, dict) and part not in node:
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _schema_at(path: Path_) -> dict[str, Any] | None:
    """The CRD node for a spec path (None when the path leaves the schema)."""
    node: dict[str, Any] = SPEC_SCHEMA
    for part in path:
        if isinstance(part, int):
            node = node.get("items", {})
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


def _wrong_value(node: dict[str, Any]) -> Any:
    """A value of the wrong type for a CRD node."""
    if node.get("x-kubernetes-int-or-string"):
        return ["8Gi"]
    return {"string": 12345, "integer": "many", "boolean": "maybe", "object": "text",
            "array": "text"}[node["type"]]


SEMANTIC: list[tuple[str, Callable[[dict[str, Any]], Path_]]] = []


def semantic(what: str) -> Callable[[Callable[[dict[str, Any]], Path_]],
                                    Callable[[dict[str, Any]], Path_]]:
    def register(breaker: Callable[[dict[str, Any]], Path_]) -> Callable[[dict[str, Any]], Path_]:
        SEMANTIC.append((what, breaker))
        return breaker
    return register


@semantic("replicas 2 in multi-replica mode")
def _two_replicas(doc: dict[str, Any]) -> Path_:
    doc["spec"].update(startMode="multi-replica", replicas=2)
    return ("spec", "replicas")


@semantic("three replicas in single-node mode")
def _single_node_cluster(doc: dict[str, Any]) -> Path_:
    doc["spec"].update(startMode="single-node", replicas=3)
    return ("spec", "replicas")


@semantic("--join in extraArgs")
def _join_flag(doc: dict[str, Any]) -> Path_:
    args = doc["spec"].setdefault("extraArgs", [])
    args.append("--join=evil-0.evil:26257")
    return ("spec", "extraArgs", len(args) - 1)


@semantic("a reserved env var")
def _reserved_env(doc: dict[str, Any]) -> Path_:
    env = doc["spec"].setdefault("extraEnv", [])
    env.append({"name": "POD_NAME", "value": "x"})
    return ("spec", "extraEnv", len(env) - 1, "name")


@semantic("an invalid cluster name")
def _bad_name(doc: dict[str, Any]) -> Path_:
    doc["metadata"]["name"] = "Orders_DB"
    return ("metadata", "name")


@semantic("a name with a trailing newline")
def _name_with_newline(doc: dict[str, Any]) -> Path_:
    doc["metadata"]["name"] += "\n"
    return ("metadata", "name")


@semantic("a timeout no clock can hold")
def _endless_timeout(doc: dict[str, Any]) -> Path_:
    doc["spec"].setdefault("failover", {})["nodeLostTimeout"] = "99999999999h"
    return ("spec", "failover", "nodeLostTimeout")


@semantic("a selector label")
def _selector_label(doc: dict[str, Any]) -> Path_:
    doc["spec"].setdefault("labels", {})["app.kubernetes.io/instance"] = "other"
    return ("spec", "labels", "app.kubernetes.io/instance")


@semantic("a request above its limit")
def _request_above_limit(doc: dict[str, Any]) -> Path_:
    doc["spec"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}
    return ("spec", "resources", "requests", "cpu")


@semantic("an empty volume")
def _empty_volume(doc: dict[str, Any]) -> Path_:
    doc["spec"].setdefault("storage", {})["size"] = "0"
    return ("spec", "storage", "size")


@semantic("an Exists toleration with a value")
def _exists_with_value(doc: dict[str, Any]) -> Path_:
    tolerations = doc["spec"].setdefault("scheduling", {}).setdefault("tolerations", [])
    tolerations.append({"key": "dedicated", "operator": "Exists", "value": "kaiwudb"})
    return ("spec", "scheduling", "tolerations", len(tolerations) - 1, "value")


Broken = tuple[Breakage, list[list[dict[str, Any]]], dict[str, str]]
Breaker = Callable[[st.DataObject, list[list[dict[str, Any]]], int, int], Broken]


def _break_yaml(data: st.DataObject, files: list[list[dict[str, Any]]], at_file: int,
                document: int) -> Broken:
    """A line the YAML parser cannot read, right after the document's `kind:` line."""
    name = FILE_NAMES[at_file]
    lines = to_text(*files[at_file]).splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith("kind: ")][document] + 1
    lines.insert(at, data.draw(st.sampled_from(["oops: a: b\n", "\tindented: with a tab\n"])))
    return Breakage("yaml", name, document, None, at + 1), files, {name: "".join(lines)}


def _break_unknown_field(data: st.DataObject, files: list[list[dict[str, Any]]], at_file: int,
                         document: int) -> Broken:
    doc = files[at_file][document]
    value = data.draw(st.sampled_from([1, "x", True]))
    if data.draw(st.booleans()):  # beside the spec: `specs:`, `Spec:`
        field = data.draw(st.sampled_from(["specs", "Spec", "metdata"]))
        doc[field] = value
        return Breakage("unknown field", FILE_NAMES[at_file], document, (field,)), files, {}
    objects = [path for path in places(doc["spec"]) if isinstance(_get(doc["spec"], path), dict)
               and "properties" in (_schema_at(path) or {})]
    where: Path_ = data.draw(st.sampled_from([(), *objects]))
    field = data.draw(st.sampled_from(["colour", "replica", "enable", "zz-typo"]))
    if field in (_schema_at(where) or {}).get("properties", {}):
        field = "zz-typo"
    _get(doc["spec"], where)[field] = value
    return (Breakage("unknown field", FILE_NAMES[at_file], document, ("spec", *where, field)),
            files, {})


def _break_type(data: st.DataObject, files: list[list[dict[str, Any]]], at_file: int,
                document: int) -> Broken:
    doc = files[at_file][document]
    typed = [path for path in places(doc["spec"]) if (_schema_at(path) or {}).get("type")
             or (_schema_at(path) or {}).get("x-kubernetes-int-or-string")]
    where: Path_ = data.draw(st.sampled_from(typed or [("replicas",)]))
    node = _schema_at(where)
    assert node is not None
    _set(doc["spec"], where, _wrong_value(node))
    return Breakage("wrong type", FILE_NAMES[at_file], document, ("spec", *where)), files, {}


def _break_duplicate(data: st.DataObject, files: list[list[dict[str, Any]]], at_file: int,
                     document: int) -> Broken:
    """Another file defines the same cluster again: the later file is the one blamed."""
    files.append([copy.deepcopy(files[at_file][document])])
    return Breakage("duplicate", FILE_NAMES[len(files) - 1], 0, ("metadata", "name")), files, {}


def _break_kind(data: st.DataObject, files: list[list[dict[str, Any]]], at_file: int,
                document: int) -> Broken:
    files[at_file][document]["kind"] = data.draw(st.sampled_from(["ConfigMap", "Kaiwucluster"]))
    return Breakage("unknown kind", FILE_NAMES[at_file], document, ("kind",)), files, {}


def _set_value(what: str, where: Path_, value: Any) -> Breaker:
    def breaker(data: st.DataObject, files: list[list[dict[str, Any]]], at_file: int,
                document: int) -> Broken:
        _set(files[at_file][document]["spec"], where, value)
        return Breakage(what, FILE_NAMES[at_file], document, ("spec", *where)), files, {}
    return breaker


def _semantic(what: str, rule: Callable[[dict[str, Any]], Path_]) -> Breaker:
    def breaker(data: st.DataObject, files: list[list[dict[str, Any]]], at_file: int,
                document: int) -> Broken:
        path = rule(files[at_file][document])
        return Breakage(f"semantic: {what}", FILE_NAMES[at_file], document, path), files, {}
    return breaker


# Each kind of mistake gets its own examples, so none is left to chance.
BREAKERS: dict[str, tuple[Breaker, int]] = {
    "yaml": (_break_yaml, 8), "unknown field": (_break_unknown_field, 12),
    "wrong type": (_break_type, 12), "duplicate": (_break_duplicate, 4),
    "unknown kind": (_break_kind, 4),
    **{f"out of range: {dotted(where)}={value}": (_set_value("out of range", where, value), 2)
       for where, value in OUT_OF_RANGE},
    **{f"bad enum: {dotted(where)}": (_set_value("bad enum", where, "Sometimes"), 2)
       for where in BAD_ENUMS},
    **{f"bad pattern: {dotted(where)}={value!r}": (_set_value("bad pattern", where, value), 2)
       for where, value in BAD_PATTERNS},
    **{f"semantic: {what}": (_semantic(what, rule), 3) for what, rule in SEMANTIC},
}


@pytest.mark.parametrize("mistake", list(BREAKERS))
def test_any_broken_input_is_refused_at_its_file_and_line_with_nothing_written(
        mistake: str) -> None:
    breaker, examples = BREAKERS[mistake]

    @settings(PROPERTY, max_examples=examples)
    @given(data=st.data(), files=cluster_sets(max_files=2))
    def story(data: st.DataObject, files: list[list[dict[str, Any]]]) -> None:
        with tempfile.TemporaryDirectory() as temp:
            check_refusal(Path(temp), data, files, breaker)

    story()


def check_refusal(root: Path, data: st.DataObject, files: list[list[dict[str, Any]]],
                  breaker: Breaker) -> None:
    write_files(root / "before", files)
    earlier = kaiwu("render", root / "before", "-o", root / "earlier")
    assert earlier.code == 0, earlier.stderr
    rendered_before = read_tree(root / "earlier")

    at_file = data.draw(st.integers(0, len(files) - 1), label="file")
    document = data.draw(st.integers(0, len(files[at_file]) - 1), label="document")
    breakage, broken, verbatim = breaker(data, copy.deepcopy(files), at_file, document)
    texts = write_files(root / "src", broken)
    for name, text in verbatim.items():
        (root / "src" / name).write_text(text, encoding="utf-8")
        texts[name] = text
    expected_line = breakage.line if breakage.path is None else line_of(
        texts[breakage.file], breakage.document, breakage.path)
    expected = (str(root / "src" / breakage.file), expected_line,
                None if breakage.path is None else dotted(breakage.path))

    for out in (root / "new-out", root / "earlier"):
        run = kaiwu("render", root / "src", "-o", out)

        assert run.code == 2, breakage
        lines = run.stderr.splitlines()
        assert "Traceback" not in run.stderr
        assert SUMMARY_LINE.match(lines[-1]), run.stderr
        assert len(run.problems) == len(lines) - 1, f"every line is file:line: ...\n{lines}"
        found = [(m["file"], int(m["line"]), m["path"]) for m in run.problems]
        assert expected in found, (breakage, run.stderr)
        assert {file for file, _, _ in found} == {expected[0]}, run.stderr
    assert not (root / "new-out").exists()
    assert read_tree(root / "earlier") == rendered_before
    assert sorted(entry.name for entry in root.iterdir()) == ["before", "earlier", "src"]
