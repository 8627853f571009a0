"""A user makes mistakes in cluster files: every one is reported where it is, with a fix.

Each problem is one line `file:line: path: message (fix)` on stderr, all problems of all files in
one run, exit code 2, no traceback, and nothing written: the output directory is neither created
nor touched. The files below are written by hand so the expected line numbers can be read off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from renderer.errors import Problem, RenderError
from tests.support.render import (
    EXAMPLES,
    SUMMARY_LINE,
    Run,
    cluster,
    kaiwu,
    kaiwu_process,
    read_tree,
    render_tree,
    write_yaml,
)

HEADER = "apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\n"


def problems(run: Run) -> list[tuple[str, int, str | None, str, str]]:
    return [(m["file"], int(m["line"]), m["path"], m["message"], m["fix"]) for m in run.problems]


def assert_refused(run: Run, out: Path) -> None:
    """Exit 2, one problem per line plus the summary, no traceback, nothing written."""
    assert run.code == 2, run.stdout
    lines = run.stderr.splitlines()
    assert SUMMARY_LINE.match(lines[-1]), lines[-1]
    assert len(run.problems) == len(lines) - 1, run.stderr
    assert f"{len(run.problems)} problem(s)" in lines[-1]
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert not out.exists()


def test_every_mistake_in_every_file_is_reported_at_its_line(tmp_path: Path) -> None:
    source = tmp_path / "clusters"
    source.mkdir()
    (source / "a.yaml").write_text(HEADER + """\
metadata:
  name: alpha
spec:
  replicas: 2
  extraArgs:
    - --max-offset=500ms
    - --join=evil:26257
""")
    (source / "b.yaml").write_text(HEADER + """\
metadata:
  name: beta
spec:
  replicas: "three"
  storage:
    size: 10Gb
  tls:
    enabled: true
    colour: blue
  startMode: multi
  terminationGracePeriodSeconds: 5
""")
    out = tmp_path / "out"

    run = kaiwu("render", source, "-o", out)

    assert_refused(run, out)
    a, b = str(source / "a.yaml"), str(source / "b.yaml")
    assert [(file, line, path) for file, line, path, _, _ in problems(run)] == [
        (a, 6, "spec.replicas"),
        (a, 9, "spec.extraArgs[1]"),
        (b, 6, "spec.replicas"),
        (b, 8, "spec.storage.size"),
        (b, 11, "spec.tls.colour"),
        (b, 12, "spec.startMode"),
        (b, 13, "spec.terminationGracePeriodSeconds"),
    ]
    messages = {path: (message, fix) for _, _, path, message, fix in problems(run)}
    assert messages["spec.extraArgs[1]"] == (
        "--join is managed by the operator", "the join list is derived from the cluster's pods")
    assert messages["spec.tls.colour"][0] == "unknown field 'colour'"
    assert messages["spec.startMode"][1] == "use one of: multi-replica, single-replica, single-node"
    assert messages["spec.terminationGracePeriodSeconds"][1] == "use a value at least 60"


def test_a_typo_in_a_field_name_suggests_the_right_one(tmp_path: Path) -> None:
    write_yaml(tmp_path / "c.yaml", cluster("alpha", "shop", replica=3))
    run = kaiwu("validate", tmp_path)
    ((_, line, path, message, fix),) = problems(run)
    assert (line, path, message, fix) == (7, "spec.replica", "unknown field 'replica'",
                                          "did you mean 'replicas'?")


@pytest.mark.parametrize(("text", "line", "message"), [
    (HEADER + "metadata:\n  name: a\nspec:\n  replicas: 3: 4\n", 6,
     "mapping values are not allowed"),
    (HEADER + "metadata:\n  name: a\nspec:\n  replicas: 3\n  replicas: 4\n", 7, "duplicate key"),
    (HEADER + "metadata:\n  name: a\nspec:\n\treplicas: 3\n", 6, "cannot start any token"),
    (HEADER + "metadata: {name: a\nspec: {}\n", 4, "expected ',' or '}'"),
])
def test_broken_yaml_is_reported_at_the_line_the_parser_stopped(tmp_path: Path, text: str,
                                                                line: int, message: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.yaml").write_text(text)
    out = tmp_path / "out"
    run = kaiwu("render", tmp_path / "src", "-o", out)
    assert_refused(run, out)
    ((file, found_line, path, found_message, _),) = problems(run)
    assert (file, found_line, path) == (str(tmp_path / "src" / "bad.yaml"), line, None)
    assert found_message.startswith("invalid YAML: ") and message in found_message


def test_a_file_that_is_not_utf8_is_reported_not_crashed_on(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "latin1.yaml").write_bytes(HEADER.encode() + b"# caf\xe9\n")
    run = kaiwu("render", tmp_path / "src", "-o", tmp_path / "out")
    assert_refused(run, tmp_path / "out")
    ((_, line, _, message, _),) = problems(run)
    assert line == 3 and message.startswith("cannot read file: 'utf-8' codec can't decode")


@pytest.mark.parametrize(("document", "line", "path", "message"), [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", 2, "kind",
     "unknown kind 'ConfigMap'"),
    ("apiVersion: kaiwu.inspur.com/v1beta1\nkind: KaiwuCluster\nmetadata:\n  name: x\n", 1,
     "apiVersion", "unknown apiVersion 'kaiwu.inspur.com/v1beta1'"),
    (HEADER + "spec: {}\n", 1, "metadata", "metadata is missing"),
    (HEADER + "metadata:\n  name: x\nspec: {}\nstatus:\n  phase: Running\n", 6, "status",
     "status is written by the reconciler"),
    (HEADER + "metadata:\n  name: x\n", 1, "spec", "required field 'spec' is missing"),
])
def test_documents_that_are_not_cluster_specs_are_named(tmp_path: Path, document: str, line: int,
                                                        path: str, message: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "c.yaml").write_text("# clusters\n" + document)
    run = kaiwu("render", tmp_path / "src", "-o", tmp_path / "out")
    assert_refused(run, tmp_path / "out")
    ((_, found_line, found_path, found_message, _),) = problems(run)
    assert (found_line, found_path, found_message) == (line + 1, path, message)


def test_a_list_where_a_cluster_belongs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "c.yaml").write_text("- name: a\n- name: b\n")
    run = kaiwu("render", tmp_path / "src", "-o", tmp_path / "out")
    assert_refused(run, tmp_path / "out")
    assert problems(run) == [(str(tmp_path / "src" / "c.yaml"), 1, None,
                              "expected a KaiwuCluster mapping, got list",
                              "each YAML document must be one KaiwuCluster object")]


def test_the_same_cluster_defined_in_two_files_names_both_places(tmp_path: Path) -> None:
    source = tmp_path / "clusters"
    source.mkdir()
    (source / "a.yaml").write_text(HEADER + "metadata:\n  name: orders\n  namespace: shop\n"
                                   "spec: {}\n")
    (source / "b.yaml").write_text("# copied from a.yaml\n" + HEADER + "metadata:\n"
                                   "  namespace: shop\n  name: orders\nspec: {}\n")
    run = kaiwu("render", source, "-o", tmp_path / "out")
    assert_refused(run, tmp_path / "out")
    ((file, line, path, message, fix),) = problems(run)
    assert (file, line, path) == (str(source / "b.yaml"), 6, "metadata.name")
    assert message == f"cluster shop/orders is already defined in {source / 'a.yaml'}:4"
    assert fix == "rename one of them or move it to another namespace"


def test_a_duplicate_cluster_does_not_hide_the_mistakes_after_it(tmp_path: Path) -> None:
    write_yaml(tmp_path / "src" / "a.yaml", cluster("orders", "shop"), cluster("orders", "shop"),
               cluster("billing", "shop", replicas=0))
    run = kaiwu("validate", tmp_path / "src")
    assert [(path, message) for _, _, path, message, _ in problems(run)] == [
        ("metadata.name", f"cluster shop/orders is already defined in {tmp_path}/src/a.yaml:4"),
        ("spec.replicas", "0 is out of range")]


def test_the_same_name_in_two_namespaces_is_two_clusters(tmp_path: Path) -> None:
    write_yaml(tmp_path / "src" / "a.yaml", cluster("orders", "shop"),
               cluster("orders", "shop-staging"))
    objects = render_tree(tmp_path / "src", tmp_path / "out")
    assert {name.split("/")[0] for name in objects} == {"shop", "shop-staging"}


def test_a_memory_fraction_kwbase_would_refuse_is_refused_at_its_line(tmp_path: Path) -> None:
    source = tmp_path / "clusters"
    source.mkdir()
    (source / "a.yaml").write_text(HEADER + """\
metadata:
  name: alpha
spec:
  cache: ".005"
""")
    out = tmp_path / "out"
    run = kaiwu("render", source, "-o", out)
    assert_refused(run, out)
    assert problems(run) == [(str(source / "a.yaml"), 6, "spec.cache", (
        "'.005' is 0% to kwbase, which refuses it (percentage 0% out of range 1% - 99%) and "
        "the pod would crash-loop"), "use a whole percentage from 1% to 99%, e.g. .25 or 25%")]


def test_names_are_reported_alongside_type_errors(tmp_path: Path) -> None:
    write_yaml(tmp_path / "src" / "a.yaml", cluster("Orders", "shop", replicas="3"))
    run = kaiwu("validate", tmp_path / "src")
    assert {path for _, _, path, _, _ in problems(run)} == {"metadata.name", "spec.replicas"}


def test_a_missing_source_is_one_clear_line(tmp_path: Path) -> None:
    run = kaiwu("render", tmp_path / "nowhere", "-o", tmp_path / "out")
    assert run.code == 2
    assert run.stderr.splitlines()[0] == (
        f"{tmp_path / 'nowhere'}: no such file or directory "
        "(pass a directory of KaiwuCluster files, e.g. clusters/)")
    assert not (tmp_path / "out").exists()


def test_a_real_process_refuses_with_exit_2_and_no_traceback(tmp_path: Path) -> None:
    """The console script, not just main(): a user's shell sees exit 2 and plain lines."""
    write_yaml(tmp_path / "src" / "a.yaml", cluster("alpha", "shop", replicas=2,
                                                    storage={"size": "1e999999"}))
    write_yaml(tmp_path / "src" / "c.yaml", cluster("gamma", "shop", extraArgs=["--join=x"]))
    write_yaml(tmp_path / "src" / "b.yaml", cluster("beta", "shop", version="3.2.1\n"))
    out = tmp_path / "out"
    run = kaiwu_process("render", tmp_path / "src", "-o", out, cwd=tmp_path)
    assert_refused(run, out)
    assert {(Path(file).name, path) for file, _, path, _, _ in problems(run)} == {
        ("a.yaml", "spec.replicas"), ("a.yaml", "spec.storage.size"),
        ("b.yaml", "spec.version"), ("c.yaml", "spec.extraArgs[0]")}


def test_validate_checks_every_source_and_writes_nothing(tmp_path: Path) -> None:
    write_yaml(tmp_path / "one" / "a.yaml", cluster("alpha", "shop", replicas=2))
    write_yaml(tmp_path / "two" / "b.yaml", cluster("beta", "shop", startMode="solo"))
    before = read_tree(tmp_path)
    run = kaiwu("validate", tmp_path / "one", tmp_path / "two", EXAMPLES)
    assert run.code == 2
    assert {path for _, _, path, _, _ in problems(run)} == {"spec.replicas", "spec.startMode"}
    assert read_tree(tmp_path) == before


def test_a_problem_says_only_what_it_knows_and_the_error_lists_each_once_in_order() -> None:
    """A problem without a line, a path or a fix (a git revision, a whole file) is still one
    readable line; the error a caller sees (the reconciler logs it) is every problem, sorted,
    duplicates once."""
    whole = Problem("origin/main", 0, "", "is not a revision of this repository", "")
    placed = Problem("a.yaml", 3, "spec.replicas", "2 is too few", "use 3")
    assert str(whole) == "origin/main: is not a revision of this repository"
    assert str(placed) == "a.yaml:3: spec.replicas: 2 is too few (use 3)"
    assert str(Problem("a.yaml", 0, "", "unreadable", "fix it")) == "a.yaml: unreadable (fix it)"
    error = RenderError([placed, whole, placed])
    assert error.problems == (placed, whole)
    assert str(error) == (
        "a.yaml:3: spec.replicas: 2 is too few (use 3)\n"
        "origin/main: is not a revision of this repository")
