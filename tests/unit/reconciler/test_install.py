"""`kaiwu install` (reconciler.install): deploy/install.yaml is its current output, the bundle
is deterministic, each scope grants what it says and no more, and bad flags get one line.

The RBAC is proven on a real authorizer in tests/world_stories/runtime/test_install.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler import install
from reconciler.cli import main
from renderer.cel import RULES, crd_for
from renderer.schema import crd_manifest
from renderer.settings import KubeVersion

REPO = Path(__file__).resolve().parents[3]


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe", pure=True).load_all(text) if d]


def kinds(options: install.Options) -> list[tuple[str, str, str]]:
    return [(d.obj["kind"], d.obj["metadata"].get("namespace", ""), d.obj["metadata"]["name"])
            for d in install.bundle(options)]


def rules(options: install.Options, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for doc in install.bundle(options):
        if doc.obj["kind"] == kind and not doc.obj["metadata"]["name"].endswith("election"):
            found += doc.obj["rules"]
    return found


def verbs(found: list[dict[str, Any]], resource: str) -> set[str]:
    return {v for r in found if resource in r["resources"] for v in r["verbs"]}


NAMESPACED = install.Options(scope="namespaced", watch_namespace="team-a")


def test_deploy_install_yaml_is_what_kaiwu_install_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install"]) == 0
    printed = capsys.readouterr().out
    assert (REPO / "deploy" / "install.yaml").read_text() == printed, \
        "deploy/install.yaml is stale: run `kaiwu install > deploy/install.yaml`"
    assert printed == install.render(install.Options()), "deterministic"


def test_the_bundle_carries_the_one_crd_unchanged_and_applies_it_first() -> None:
    bundle = docs(install.render(install.Options()))
    assert bundle[0] == crd_manifest()
    assert [d["kind"] for d in bundle] == [
        "CustomResourceDefinition", "CustomResourceDefinition", "CustomResourceDefinition",
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
        "RoleBinding", "Role", "RoleBinding", "Service", "Service", "Deployment"]
    assert [d["metadata"]["name"] for d in bundle[1:3]] == [
        "kaiwubackups.kaiwu.inspur.com", "kaiwubackupschedules.kaiwu.inspur.com"]


def test_for_kubernetes_1_25_and_later_the_crd_carries_the_cel_rules(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "--kube-version", "1.29"]) == 0
    printed = capsys.readouterr().out
    crd = docs(printed)[0]
    assert crd == crd_for(KubeVersion(1, 29)) != crd_manifest()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"rule": "self == oldSelf", "message": next(
        rule.message for rule in RULES if rule.at == ("spec", "startMode"))} in spec[
        "properties"]["startMode"]["x-kubernetes-validations"]
    assert "--kube-version 1.29" in printed.splitlines()[1], "the header says how it was made"
    assert "x-kubernetes-validations" not in install.render(install.Options()), "1.20: none"


def test_a_kube_version_older_than_supported_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["install", "--kube-version", "1.19"])
    assert exit_.value.code == 2
    assert "older than the oldest supported release, 1.20" in capsys.readouterr().err


def test_backups_get_their_rights_and_a_volume_claim_is_mounted_for_volume_targets() -> None:
    cluster = rules(install.Options(), "ClusterRole")
    assert verbs(cluster, "kaiwubackups") == {"get", "list", "watch", "create", "delete"}
    assert verbs(cluster, "kaiwubackupschedules") == {"get", "list", "watch"}
    assert "patch" in verbs(cluster, "kaiwubackups/status")
    options = install.Options(backup_volume_claims=("nightly-dumps",))
    deployment = next(d for d in docs(install.render(options)) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "backup-0",
                               "persistentVolumeClaim": {"claimName": "nightly-dumps"}}]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "backup-0", "mountPath": "/backup-volumes/nightly-dumps"}]
    assert "--backup-volume-claim nightly-dumps" in install.render(options)
    assert install.Options(backup_volume_claims=("Bad_Name",)).problems() == [
        "--backup-volume-claim: 'Bad_Name' is not a claim name (lower-case letters, digits, "
        "'-' and '.')"]


def test_cluster_scope_grants_everything_through_one_cluster_role() -> None:
    cluster = rules(install.Options(), "ClusterRole")
    assert verbs(cluster, "nodes") == {"get", "list", "watch"}
    assert verbs(cluster, "secrets") == {"get", "list", "watch", "create", "patch"}
    assert verbs(cluster, "kaiwuclusters") == {"get", "list", "watch", "patch"}, \
        "no directory verbs; patch for the restore annotation"
    assert ("Role", "kaiwu-system", "kaiwu-reconciler") not in kinds(install.Options())


def test_namespaced_scope_writes_only_in_the_watched_namespace() -> None:
    cluster = rules(NAMESPACED, "ClusterRole")
    assert {r for rule in cluster for r in rule["resources"]} == {
        "nodes", "persistentvolumes", "validatingwebhookconfigurations"}
    reads = [rule for rule in cluster if rule["resources"] != ["validatingwebhookconfigurations"]]
    assert {v for rule in reads for v in rule["verbs"]} <= {"get", "list", "watch"}
    assert ("Role", "team-a", "kaiwu-reconciler") in kinds(NAMESPACED)
    assert ("RoleBinding", "team-a", "kaiwu-reconciler") in kinds(NAMESPACED)
    assert verbs(rules(NAMESPACED, "Role"), "persistentvolumeclaims") >= {"delete"}
    deployment = install.bundle(NAMESPACED)[-1].obj
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "KAIWU_WATCH_NAMESPACE", "value": "team-a"} in env


def test_directory_mode_alone_may_create_and_delete_clusters_and_has_a_git_sync_sidecar(
) -> None:
    options = install.Options(directory_mode=True, git_repo="https://git.example/c.git")
    assert verbs(rules(options, "ClusterRole"), "kaiwuclusters") >= {"create", "delete"}
    pod = install.bundle(options)[-1].obj["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["reconciler", "git-sync"]
    assert "--repo=https://git.example/c.git" in pod["containers"][1]["args"]
    assert {"name": "KAIWU_SOURCE", "value": "dir:/git/repo"} in pod["containers"][0]["env"]


def test_every_replica_serves_the_webhook_through_a_service_and_may_register_only_its_own(
) -> None:
    bundle = [d.obj for d in install.bundle(install.Options())]
    service = next(d for d in bundle if d["kind"] == "Service"
                   and d["metadata"]["name"] == "kaiwu-reconciler-webhook")
    container = bundle[-1]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "KAIWU_WEBHOOK", "value": "true"} in container["env"]
    port = service["spec"]["ports"][0]
    assert port["port"] == 443
    assert {"name": port["targetPort"], "containerPort": 9443, "protocol": "TCP"} in \
        container["ports"]
    webhook_rules = [r for r in rules(install.Options(), "ClusterRole")
                     if r["resources"] == ["validatingwebhookconfigurations"]]
    assert {v for r in webhook_rules if "resourceNames" not in r for v in r["verbs"]} == \
        {"create"}, "only create is unlimited (the name is in the body)"
    assert [r["resourceNames"] for r in webhook_rules if "resourceNames" in r] == [
        ["kaiwu-reconciler-kaiwu-system"]]
    namespace = next(d for d in bundle if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["kaiwu.inspur.com/admission"] == "skip", \
        "the escape hatch: the operator's own namespace is never checked"
    same = install.Options(namespace="team-a", scope="namespaced", watch_namespace="team-a")
    assert "kaiwu.inspur.com/admission" not in install.bundle(same)[1].obj["metadata"][
        "labels"], "but not when the clusters live there too"


def test_two_installs_in_two_namespaces_do_not_share_a_cluster_role() -> None:
    other = install.Options(namespace="team-b-ops", scope="namespaced", watch_namespace="b")
    names = {n for k, _, n in kinds(NAMESPACED) if k == "ClusterRole"}
    assert names.isdisjoint(n for k, _, n in kinds(other) if k == "ClusterRole")


@pytest.mark.parametrize(("argv", "message"), [
    (["--scope", "namespaced"], "--scope namespaced: needs --watch-namespace"),
    (["--watch-namespace", "a"], "--watch-namespace: only with --scope namespaced"),
    (["--scope", "namespaced", "--watch-namespace", "a", "--watch-namespace", "b"],
     "--watch-namespace: a namespaced install watches one namespace"),
    (["--scope", "everything"], "--scope: invalid choice"),
    (["--namespace", "Kaiwu_System"], "--namespace: 'Kaiwu_System' is not a namespace name"),
    (["--directory-mode"], "--directory-mode: needs --git-repo URL"),
    (["--shard", "Team_A"], "--shard: 'Team_A' is not a shard name"),
    (["--shard", "a", "--directory-mode", "--git-repo", "https://g.example/c.git"],
     "--shard: not with --directory-mode"),
])
def test_bad_flags_get_one_line_naming_the_flag(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["install", *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("kaiwu install: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_shard_bundle_has_its_own_deployment_lease_and_metrics_beside_the_others() -> None:
    default, shard_a = install.bundle(install.Options()), install.bundle(
        install.Options(shard="a"))

    def by_kind(bundle: list[install.Document], kind: str) -> dict[str, dict[str, Any]]:
        return {d.obj["metadata"]["name"]: d.obj for d in bundle if d.obj["kind"] == kind}

    deployment = by_kind(shard_a, "Deployment")["kaiwu-reconciler-a"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "KAIWU_SHARD", "value": "a"} in container["env"]
    # The two Deployments never select each other's pods.
    selector_a = deployment["spec"]["selector"]["matchLabels"]
    default_deployment = by_kind(default, "Deployment")["kaiwu-reconciler"]
    selector = default_deployment["spec"]["selector"]["matchLabels"]
    labels_a = deployment["spec"]["template"]["metadata"]["labels"]
    labels = default_deployment["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= labels_a.items()
    assert not selector_a.items() <= labels.items()
    assert "KAIWU_SHARD" not in {e["name"] for e in default_deployment["spec"]["template"][
        "spec"]["containers"][0]["env"]}
    # Each shard elects its leader on its own Lease, through a Role of its own.
    lease_rules = by_kind(shard_a, "Role")["kaiwu-reconciler-a-leader-election"]["rules"]
    assert ["kaiwu-reconciler-a"] in [r.get("resourceNames") for r in lease_rules]
    assert "kaiwu-reconciler-leader-election" in by_kind(default, "Role")
    assert "kaiwu-reconciler-leader-election" not in by_kind(shard_a, "Role")
    assert "kaiwu-reconciler-a-metrics" in by_kind(shard_a, "Service")
    # What the shards share is the same object in every bundle (applying one changes nothing).
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                 "CustomResourceDefinition"):
        assert by_kind(shard_a, kind) == by_kind(default, kind), kind
