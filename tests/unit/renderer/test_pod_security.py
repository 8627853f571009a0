"""Every rendered pod meets the Pod Security Standards, checked rule by rule.

A namespace labelled `pod-security.kubernetes.io/enforce: restricted` admits a KaiwuDB cluster
only if every pod the StatefulSet makes passes each "restricted" rule, and "baseline" is the
floor for any namespace. A change to a builder that loosens any of them fails a test instead of
failing an admission in somebody's cluster.

The rules, with the fields each reads, are in tests/support/pod_security.py. The pods come from
every example in clusters/ and from specs generated from the CRD (tests/support/specs.py). One
exception is expected and asserted: spec.nodeTuning's init container, privileged and root
because vm.max_map_count is not namespaced. The escape hatch for an image that needs root
(runAsNonRoot false, runAsUser 0) is expected to stay baseline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import given

from renderer.loader import parse_text
from renderer.render import SourceCluster, build_objects, load_clusters, read_clusters
from renderer.settings import RenderSettings
from tests.support.pod_security import baseline_violations, restricted_violations
from tests.support.render import EXAMPLES, cluster, kaiwu, to_text, write_yaml
from tests.support.specs import PROPERTY, specs

TUNING_CONTAINER = "tune-host"

# What the node tuning init container is allowed to break, and nothing more.
TUNING_BASELINE = [f"{TUNING_CONTAINER}: privileged"]
TUNING_RESTRICTED = [f"{TUNING_CONTAINER}: {rule}" for rule in (
    "allowPrivilegeEscalation not false", "runAsNonRoot not true", "runAsUser 0",
    "capabilities do not drop ALL")]


def pod_templates(sources: list[SourceCluster]) -> Iterator[tuple[SourceCluster, dict[str, Any]]]:
    for source in sources:
        for obj in build_objects(source.cluster, RenderSettings()):
            if obj["kind"] == "StatefulSet":
                yield source, obj["spec"]["template"]


def assert_meets_the_standards(sources: list[SourceCluster]) -> None:
    checked = 0
    for source, template in pod_templates(sources):
        checked += 1
        tuning = [TUNING_CONTAINER] if source.cluster.node_tuning else []
        assert [c["name"] for c in template["spec"].get("initContainers", [])] == tuning
        root_by_choice = not source.cluster.pod_security.run_as_non_root
        baseline = baseline_violations(template)
        restricted = restricted_violations(template)
        assert baseline == (TUNING_BASELINE if tuning else []), source.cluster.name
        expected = TUNING_RESTRICTED if tuning else []
        if root_by_choice:
            # The escape hatch gives up restricted's user rules, and only those.
            user_rules = {"runAsNonRoot not true", "runAsUser 0"}
            restricted = [item for item in restricted
                          if item.startswith(f"{TUNING_CONTAINER}:")
                          or item.split(": ", 1)[1] not in user_rules]
        assert restricted == expected, source.cluster.name
    assert checked == len(sources)


def test_every_example_cluster_meets_baseline_and_restricted() -> None:
    examples = load_clusters(EXAMPLES)
    assert any(source.cluster.node_tuning for source in examples), (
        "an example enables nodeTuning, so the exception is exercised")
    assert_meets_the_standards(examples)


@PROPERTY
@given(spec=specs())
def test_every_cluster_a_user_may_write_meets_the_standards(spec: dict[str, Any]) -> None:
    documents = parse_text(to_text(cluster("generated", "default", **spec)), "generated.yaml")
    assert_meets_the_standards(read_clusters(documents))


def test_the_default_pod_runs_as_a_fixed_non_root_user_with_a_volume_group() -> None:
    (source,) = read_clusters(parse_text(to_text(cluster("orders")), "orders.yaml"))
    ((_, template),) = pod_templates([source])
    assert template["spec"]["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}}
    (kwbase,) = template["spec"]["containers"]
    assert kwbase["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}}


def test_the_root_escape_hatch_stays_baseline_and_breaks_only_the_user_rules() -> None:
    root = {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0}
    (source,) = read_clusters(parse_text(to_text(cluster("legacy", podSecurity=root)),
                                         "legacy.yaml"))
    ((_, template),) = pod_templates([source])
    assert baseline_violations(template) == []
    assert restricted_violations(template) == [
        "pod: runAsUser 0", "kwbase: runAsNonRoot not true"]


def test_the_checks_catch_a_loosened_pod() -> None:
    """The rules themselves work: each loosening a builder might make is reported."""
    (source,) = read_clusters(parse_text(to_text(cluster("orders")), "orders.yaml"))
    ((_, template),) = pod_templates([source])
    pod = template["spec"]
    pod["hostNetwork"] = True
    pod["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
    kwbase = pod["containers"][0]
    kwbase["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
    kwbase["ports"][0]["hostPort"] = 26257
    assert baseline_violations(template) == [
        "pod: hostNetwork", "pod: hostPath volume host", "kwbase: adds capability SYS_ADMIN",
        "kwbase: hostPort 26257"]
    assert restricted_violations(template) == [
        "pod: volume type hostPath", "kwbase: allowPrivilegeEscalation not false",
        "kwbase: capabilities do not drop ALL", "kwbase: adds capability SYS_ADMIN"]


def test_a_root_user_with_run_as_non_root_is_refused_at_its_line(tmp_path: Path) -> None:
    source = write_yaml(tmp_path / "orders.yaml",
                        cluster("orders", podSecurity={"runAsUser": 0}))
    run = kaiwu("validate", source)
    assert run.code == 2
    first = run.stderr.splitlines()[0]
    assert first.startswith(f"{source}:") and ": spec.podSecurity.runAsUser: " in first
    assert "runAsNonRoot forbids" in first and "runAsNonRoot: false" in first
