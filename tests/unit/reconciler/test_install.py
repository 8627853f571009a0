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
from renderer.schema import crd_manifest

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
        "RoleBinding", "Service", "Deployment"]
    assert [d["metadata"]["name"] for d in bundle[1:3]] == [
        "kaiwubackups.kaiwu.inspur.com", "kaiwubackupschedules.kaiwu.inspur.com"]


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
    assert {r for rule in cluster for r in rule["resources"]} == {"nodes", "persistentvolumes"}
    assert {v for rule in cluster for v in rule["verbs"]} <= {"get", "list", "watch"}
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
