"""The CEL rules the CRD carries from Kubernetes 1.25 agree with renderer/semantics/.

The test world's API server is 1.20 (no CEL), so each rule is evaluated with cel-python
(tests/support/cel.py) on the cases tests/unit/renderer/test_semantics.py tells its stories with,
and on generated specs: for every case, the fields CEL refuses are exactly the fields the
renderer's rules refuse, among the rules CEL expresses on that release. And the CRD for 1.20
carries no rule at all.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from renderer import schema
from renderer.cel import QUANTITY_SINCE, RULES, crd_for, rules_for
from renderer.settings import CEL_SINCE, OLDEST_SUPPORTED, KubeVersion
from tests.support import cel, specs
from tests.support.cel_cases import (
    CREATE_CASES,
    TRANSITION_CASES,
    defaulted,
    verdicts,
    with_spec,
)
from tests.support.render import EXAMPLES, kaiwu

VERSIONS = [KubeVersion(1, 25), KubeVersion(1, 28), KubeVersion(1, 29), KubeVersion(1, 35)]


@pytest.mark.parametrize("version", VERSIONS, ids=str)
@pytest.mark.parametrize("case", sorted(CREATE_CASES))
def test_cel_refuses_on_create_what_the_renderer_refuses(case: str, version: KubeVersion) -> None:
    by_cel, by_renderer = verdicts(version, defaulted(CREATE_CASES[case]))
    assert by_cel == by_renderer


@pytest.mark.parametrize("version", VERSIONS, ids=str)
@pytest.mark.parametrize("case", sorted(TRANSITION_CASES))
def test_cel_refuses_on_update_what_the_renderer_refuses(case: str,
                                                         version: KubeVersion) -> None:
    old, new = TRANSITION_CASES[case]
    by_cel, by_renderer = verdicts(version, defaulted(new), defaulted(old))
    assert by_cel == by_renderer


def test_the_cases_exercise_every_rule_both_ways() -> None:
    """Each rule refuses at least one case and lets at least one through: agreement on rules
    that never fire would prove nothing."""
    newest = VERSIONS[-1]
    for rule in rules_for(newest):
        outcomes = set()
        for spec in CREATE_CASES.values():
            outcomes.add(cel.passes(rule, defaulted(spec)))
        for old, new in TRANSITION_CASES.values():
            outcomes.add(cel.passes(rule, defaulted(new), defaulted(old)))
        assert outcomes == {True, False}, rule.rule


def test_shrinking_is_left_to_the_renderer_before_quantities_exist_in_cel() -> None:
    old, new = TRANSITION_CASES["the volume shrinks"]
    assert verdicts(KubeVersion(1, 28), defaulted(new), defaulted(old)) == (set(), set())
    assert verdicts(QUANTITY_SINCE, defaulted(new), defaulted(old)) == (
        {"spec.storage.size"}, {"spec.storage.size"})


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda path: path.name)
def test_the_example_clusters_pass_every_rule(path: Any) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        obj = schema.apply_defaults(document)
        assert [rule.rule for rule in RULES if not cel.passes(rule, obj, obj)] == []


@given(spec=specs.specs(), other=specs.specs())
@specs.PROPERTY
def test_any_valid_spec_and_any_change_between_two_get_the_same_verdicts(
        spec: dict[str, Any], other: dict[str, Any]) -> None:
    new, old = defaulted(spec), defaulted(other)
    assert verdicts(VERSIONS[-1], new) == (set(), set()), "a valid spec passes every rule"
    by_cel, by_renderer = verdicts(VERSIONS[-1], new, old)
    assert by_cel == by_renderer


@given(mode=st.sampled_from(["multi-replica", "single-replica", "single-node"]),
       replicas=st.integers(1, 99), budget=st.integers(1, 3), non_root=st.booleans(),
       user=st.sampled_from([0, 1000]),
       secrets=st.sampled_from([{}, {"nodeSecretName": "a"}, {"clientSecretName": "b"},
                                {"nodeSecretName": "", "clientSecretName": "b"},
                                {"nodeSecretName": "a", "clientSecretName": "b"}]))
@specs.PROPERTY
def test_any_combination_of_mode_replicas_budget_user_and_secrets_gets_the_same_verdict(
        mode: str, replicas: int, budget: int, non_root: bool, user: int,
        secrets: dict[str, str]) -> None:
    obj = defaulted(with_spec(startMode=mode, replicas=replicas,
                              podDisruptionBudget={"maxUnavailable": budget},
                              podSecurity={"runAsNonRoot": non_root, "runAsUser": user},
                              tls=secrets))
    by_cel, by_renderer = verdicts(VERSIONS[-1], obj)
    assert by_cel == by_renderer


SIZES = ["1Gi", "1024Mi", "1G", "1000M", 1073741824, "0.5Gi", "512Mi", "100Gi", "1e9", "1.5Gi"]


@given(old_size=st.sampled_from(SIZES), new_size=st.sampled_from(SIZES),
       old_class=st.sampled_from([None, "", "standard"]),
       new_class=st.sampled_from([None, "", "standard", "fast"]),
       old_mode=st.sampled_from(["multi-replica", "single-replica"]),
       new_mode=st.sampled_from(["multi-replica", "single-replica"]),
       old_replicas=st.integers(3, 6), new_replicas=st.integers(3, 6))
@specs.PROPERTY
def test_any_change_of_size_class_mode_and_replicas_gets_the_same_verdict(
        old_size: Any, new_size: Any, old_class: str | None, new_class: str | None,
        old_mode: str, new_mode: str, old_replicas: int, new_replicas: int) -> None:
    def spec(size: Any, storage_class: str | None, mode: str, replicas: int) -> dict[str, Any]:
        storage = {"size": size} if storage_class is None else {
            "size": size, "storageClassName": storage_class}
        return with_spec(storage=storage, startMode=mode, replicas=replicas)
    old = defaulted(spec(old_size, old_class, old_mode, old_replicas))
    new = defaulted(spec(new_size, new_class, new_mode, new_replicas))
    for version in VERSIONS:
        by_cel, by_renderer = verdicts(version, new, old)
        assert by_cel == by_renderer, version


def test_the_crd_for_1_20_carries_no_cel_and_from_1_25_it_carries_every_rule() -> None:
    def validations(crd: dict[str, Any]) -> list[str]:
        found: list[str] = []

        def walk(node: dict[str, Any]) -> None:
            found.extend(item["rule"] for item in node.get("x-kubernetes-validations", ()))
            for child in node.get("properties", {}).values():
                walk(child)
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        return found

    assert validations(crd_for(OLDEST_SUPPORTED)) == []
    assert validations(crd_for(KubeVersion(1, 24))) == []
    assert sorted(validations(crd_for(CEL_SINCE))) == sorted(
        rule.rule for rule in RULES if rule.since == CEL_SINCE)
    assert sorted(validations(crd_for(QUANTITY_SINCE))) == sorted(rule.rule for rule in RULES)
    assert crd_for(OLDEST_SUPPORTED) == schema.crd_manifest(), "1.20 gets the schema file as is"


def test_kaiwu_crd_prints_the_crd_for_the_release_asked() -> None:
    # Read as YAML 1.2 (ruamel): a YAML 1.1 reader takes the drift policy `off` for false until
    # the emitter quotes such strings (issue 15, part 3).
    reader = YAML(typ="safe")
    newest = kaiwu("crd", "--kube-version", "1.29")
    assert newest.code == 0, newest.stderr
    assert reader.load(newest.stdout) == crd_for(KubeVersion(1, 29))
    oldest = kaiwu("crd", "--kube-version", "1.20")
    assert reader.load(oldest.stdout) == schema.crd_manifest()
    too_old = kaiwu("crd", "--kube-version", "1.19")
    assert too_old.code == 2 and "older than the oldest supported release" in too_old.stderr


def test_the_api_server_answers_a_refusal_with_the_renderers_message_and_fix() -> None:
    """A rule in the CRD carries its message: what `kubectl apply` prints when CEL refuses."""
    spec = crd_for(KubeVersion(1, 35))["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"]["spec"]
    assert {"rule": "!(has(self.startMode) && self.startMode == 'single-node') || "
                    "!has(self.replicas) || self.replicas == 1",
            "message": "single-node runs exactly 1 node (set replicas: 1, or use startMode "
                       "multi-replica for a cluster)"} in spec["x-kubernetes-validations"]
    security = spec["properties"]["podSecurity"]["x-kubernetes-validations"]
    assert security == [{"rule": "!has(self.runAsNonRoot) || !self.runAsNonRoot || "
                                 "!has(self.runAsUser) || self.runAsUser != 0",
                         "message": "runAsUser 0 is root, which runAsNonRoot forbids (use a "
                                    "non-root uid such as 1000, or set runAsNonRoot: false for "
                                    "an image that needs root)"}]


@pytest.mark.parametrize("minor", range(20, 37))
def test_every_rule_holds_on_the_schemas_defaults_as_the_api_server_checks_them(
        minor: int) -> None:
    """From 1.25 the API server evaluates every rule against each `default` of the schema when
    the CRD is created: self (and oldSelf) is the default value as written, nested defaults not
    applied. A rule reading a field such a default lacks made the CRD for 1.25+ invalid
    ("no such key: runAsNonRoot", "no such key: size"). Every CRD `kaiwu install` prints, for
    every version it accepts, must pass."""
    crd = crd_for(KubeVersion(1, minor))
    checked = cel.defaults_checked(crd)
    if minor < 25:
        assert checked == [], "no CEL before 1.25"
        return
    assert ("spec.storage", "volumes cannot shrink") in checked or minor < 29
    assert ("spec.podSecurity", "runAsUser 0 is root, which runAsNonRoot forbids") in checked


def test_the_old_rules_fail_on_the_defaults_as_the_api_server_found() -> None:
    """The check is the API server's: the rules as they were are refused on the defaults."""
    crd = crd_for(KubeVersion(1, 36))
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    security = root["properties"]["spec"]["properties"]["podSecurity"]
    security["x-kubernetes-validations"][0]["rule"] = "!self.runAsNonRoot || self.runAsUser != 0"
    with pytest.raises(AssertionError, match="runAsUser 0 is root"):
        cel.defaults_checked(crd)
