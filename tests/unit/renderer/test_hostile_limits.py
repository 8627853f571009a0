"""Specs the renderer used to accept and the API server would refuse, refused offline instead.

Each case under tests/unit/renderer/hostile/limits/ is a directory of KaiwuCluster files a careless
user or an attacker could write (a namespace of 64 characters, a tag in the repository, a value
beyond int64, a lone surrogate, two clusters that both render `orders-public`...) and an `expect`
file: lines that `kaiwu validate` must print. Every case exits 2 with `file:line: path: problem
(fix)` lines and no traceback. Two cases too big to keep as files (annotations over 256 KiB) are
written by the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from renderer import render
from renderer.render import check_object
from renderer.semantics import names as name_rules
from renderer.settings import RenderSettings
from renderer.spec import Cluster
from tests.support.render import SUMMARY_LINE, Run, cluster, kaiwu, kaiwu_process

CORPUS = Path(__file__).parent / "hostile" / "limits"
CASES = sorted(path.name for path in CORPUS.iterdir() if path.is_dir())
HEAD = "apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\n"


def assert_refused(run: Run, root: Path, expected: list[str]) -> None:
    assert run.code == 2, run.stdout
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert SUMMARY_LINE.match(lines[-1]), run.stderr
    assert len(run.problems) == len(lines) - 1, f"every line is file:line: ...\n{run.stderr}"
    for problem in run.problems:
        assert Path(problem["file"]).is_relative_to(root), problem.string
    for text in expected:
        assert text in run.stderr, f"{text!r} not in:\n{run.stderr}"


@pytest.mark.parametrize("case", CASES)
def test_a_spec_the_api_server_would_refuse_is_refused_with_file_line_and_fix(case: str) -> None:
    root = CORPUS / case
    expected = (root / "expect").read_text(encoding="utf-8").splitlines()
    assert_refused(kaiwu("validate", root), root, expected)


def test_the_whole_corpus_in_one_process_prints_every_problem_without_a_traceback() -> None:
    """As a user runs it: a real stderr (surrogates in a message must not crash the printing)."""
    run = kaiwu_process("validate", *(CORPUS / case for case in CASES))
    assert_refused(run, CORPUS, [])
    named = {Path(problem["file"]).parent.name for problem in run.problems}
    assert named == set(CASES), "each case is refused"


@pytest.mark.parametrize("service", [False, True], ids=["every object", "the client Service"])
def test_annotations_over_256_kib_on_one_object_are_refused(tmp_path: Path,
                                                             service: bool) -> None:
    """Five annotations of 60,000 bytes: each is fine, together they exceed what one object
    may carry. The client Service carries spec.annotations and service.annotations."""
    def notes(indent: str) -> str:
        return "".join(f"{indent}note-{index}: {'x' * 60000}\n" for index in range(5))
    spec = (f"spec:\n  service:\n    annotations:\n{notes(' ' * 6)}" if service
            else f"spec:\n  annotations:\n{notes(' ' * 4)}")
    (tmp_path / "big.yaml").write_text(HEAD + "metadata:\n  name: orders\n" + spec,
                                       encoding="utf-8")
    field = "spec.service.annotations" if service else "spec.annotations"
    assert_refused(kaiwu("validate", tmp_path), tmp_path, [
        f"{field}: the annotations total 300030 bytes, more than Kubernetes accepts on one "
        "object (262144 bytes, 1024 of them kept for the operator's own) (keep keys and values "
        "under 261120 bytes in all; put large data in a ConfigMap)"])


def test_annotations_just_under_the_limit_pass(tmp_path: Path) -> None:
    value = "x" * (256 * 1024 - 1024 - len("note"))
    (tmp_path / "big.yaml").write_text(
        HEAD + f"metadata:\n  name: orders\nspec:\n  annotations:\n    note: {value}\n",
        encoding="utf-8")
    run = kaiwu("validate", tmp_path)
    assert run.code == 0, run.stderr


def test_the_kaiwucluster_s_own_annotations_count_too(tmp_path: Path) -> None:
    notes = "".join(f"    note-{index}: {'x' * 60000}\n" for index in range(5))
    (tmp_path / "big.yaml").write_text(
        HEAD + f"metadata:\n  name: orders\n  annotations:\n{notes}spec: {{}}\n",
        encoding="utf-8")
    assert_refused(kaiwu("validate", tmp_path), tmp_path, [
        "big.yaml:5: metadata.annotations: the annotations total 300030 bytes"])


def test_the_longest_allowed_names_keep_every_derived_name_within_kubernetes_limits() -> None:
    """A 40-character cluster (the most metadata.name allows) in a 63-character namespace at 99
    nodes with a 32-character SQL user: every name the cluster takes stays valid."""
    name, namespace = "o" * name_rules.MAX_NAME_LENGTH, "n" * name_rules.MAX_NAMESPACE_LENGTH
    obj = cluster(name, namespace, replicas=99, tls={"clientUsers": ["u" * 32]})
    defaulted, problems = check_object(obj)
    assert problems == []
    source = Cluster.from_object(defaulted)
    names = render.owned_names(source)
    assert ("Pod", f"{name}-98") in names and ("Service", f"{name}-public") in names
    for kind, object_name in names:
        # Services and pods (their hostnames) are DNS labels; the rest DNS subdomains.
        limit = 63 if kind in ("Service", "Pod") else 253
        assert len(object_name) <= limit, (kind, object_name)
        assert name_rules.DNS_1123_SUBDOMAIN.match(object_name), (kind, object_name)
    # The StatefulSet's pods carry controller-revision-hash=<statefulset>-<10 characters>.
    assert len(f"{name}-{'h' * 10}") <= 63
    fqdn = f"{source.pod_name(98)}.{source.headless_service}.{namespace}.svc.cluster.local"
    assert len(fqdn) <= 253



@pytest.mark.parametrize("optional", [False, True], ids=["optional-objects-off",
                                                         "optional-objects-on"])
def test_the_names_the_collision_check_reads_are_the_names_the_objects_are_rendered_under(
        optional: bool) -> None:
    """`kaiwu validate` and `kaiwu diff` check that no two clusters need one name without
    building the objects (render.rendered_names): the names must be the rendered ones, with the
    budget, the NetworkPolicy and the ServiceMonitor there exactly when the spec turns them on."""
    obj = cluster("orders", "shop", podDisruptionBudget={"enabled": optional},
                  networkPolicy={"enabled": optional}, monitoring={"serviceMonitor": optional})
    defaulted, problems = check_object(obj)
    assert problems == []
    source = Cluster.from_object(defaulted)
    built = render.build_objects(source, RenderSettings())
    assert sorted(render.rendered_names(source)) == sorted(
        (built_obj["kind"], built_obj["metadata"]["name"]) for built_obj in built)
    assert len(built) == (7 if optional else 4)

def test_clusters_named_alike_in_different_namespaces_do_not_collide(tmp_path: Path) -> None:
    for name, namespace in (("orders", "shop"), ("orders-public", "web")):
        (tmp_path / f"{name}.yaml").write_text(
            HEAD + f"metadata:\n  name: {name}\n  namespace: {namespace}\nspec: {{}}\n",
            encoding="utf-8")
    run = kaiwu("validate", tmp_path)
    assert run.code == 0, run.stderr
