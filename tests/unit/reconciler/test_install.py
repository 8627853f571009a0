"""`kaiwu install` (reconciler.install): deploy/install.yaml is its current output, the bundle
is deterministic, each scope grants what it says and no more, and bad flags get one line.
Through the package's entry point, these stories cover each of its parts: the command lines
(reconciler.install.command), the options (reconciler.install.options), the rights
(reconciler.install.rbac), the Deployment and what runs beside it (reconciler.install.workload),
the stream (reconciler.install.documents) and `kaiwu uninstall`'s list
(reconciler.install.removal).

The RBAC is proven on a real authorizer in tests/world_stories/runtime/test_install.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler import install
from reconciler.cli import main
from renderer.cel import RULES, crd_for
from renderer.schema import crd_manifest
from renderer.settings import KubeVersion
from tests.support.pod_security import baseline_violations, restricted_violations

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
DIRECTORY = install.Options(directory_mode=True, git_repo="https://git.example/c.git")
# Every kind of bundle: each scope, the namespace shared with the watched one or not, directory
# mode (its git-sync sidecar) in both scopes, a shard, volume backup claims, the oldest release.
VARIANTS = {
    "cluster": install.Options(),
    "namespaced": NAMESPACED,
    "namespaced-in-the-watched-namespace": install.Options(
        namespace="team-a", scope="namespaced", watch_namespace="team-a"),
    "directory-mode": DIRECTORY,
    "directory-mode-namespaced": install.Options(
        scope="namespaced", watch_namespace="team-a", directory_mode=True,
        git_repo="https://git.example/c.git", backup_volume_claims=("dumps",)),
    "shard": install.Options(shard="eu"),
    "backup-volumes": install.Options(backup_volume_claims=("nightly", "weekly")),
    "kubernetes-1.20": install.Options(kube_version=KubeVersion(1, 20)),
}


def test_deploy_install_yaml_is_what_kaiwu_install_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install"]) == 0
    printed = capsys.readouterr().out
    assert (REPO / "deploy" / "install.yaml").read_text() == printed, \
        "deploy/install.yaml is stale: run `make manifests`"
    assert printed == install.render(install.Options()), "deterministic"


def test_the_bundle_carries_the_one_crd_and_applies_it_first() -> None:
    """By default the CRD of the oldest release users run (1.28, with its CEL rules); for 1.20
    the schema file as it is."""
    bundle = docs(install.render(install.Options()))
    assert bundle[0] == crd_for(KubeVersion(1, 28)) != crd_manifest()
    oldest = docs(install.render(install.Options(kube_version=KubeVersion(1, 20))))
    assert oldest[0] == crd_manifest()
    assert "--kube-version 1.20" in install.render(
        install.Options(kube_version=KubeVersion(1, 20))).splitlines()[1]
    assert [d["kind"] for d in bundle] == [
        "CustomResourceDefinition", "CustomResourceDefinition", "CustomResourceDefinition",
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
        "RoleBinding", "Role", "RoleBinding", "Service", "Service",
        "ValidatingWebhookConfiguration", "NetworkPolicy", "PodDisruptionBudget", "Deployment"]
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
    assert "x-kubernetes-validations" not in install.render(
        install.Options(kube_version=KubeVersion(1, 20))), "1.20: none"


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


def test_directory_mode_is_told_which_namespaces_its_files_may_use(
        capsys: pytest.CaptureFixture[str]) -> None:
    """By default its files may put KaiwuClusters only in the reconciler's own namespace; the
    repository's example clusters live in three others, named here."""
    argv = ["install", "--directory-mode", "--git-repo", "https://git.example/c.git",
            "--source-namespace", "kaiwu-dev", "--source-namespace", "kaiwu-prod"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    pod = docs(printed)[-1]["spec"]["template"]["spec"]
    assert {"name": "KAIWU_SOURCE_NAMESPACES", "value": "kaiwu-dev,kaiwu-prod"} in \
        pod["containers"][0]["env"]
    assert "--source-namespace kaiwu-dev --source-namespace kaiwu-prod" in printed.splitlines()[1]
    plain = install.bundle(install.Options(directory_mode=True, git_repo="https://g.example/c"))
    assert all(e["name"] != "KAIWU_SOURCE_NAMESPACES"
               for e in plain[-1].obj["spec"]["template"]["spec"]["containers"][0]["env"])
    assert install.Options(scope="namespaced", watch_namespace="team-a", directory_mode=True,
                           git_repo="https://g.example/c",
                           source_namespaces=("team-b",)).problems() == [
        "--source-namespace: team-b is outside the watched namespace team-a: the reconciler "
        "would refuse every file for it"]
    assert install.Options(source_namespaces=("x",)).problems() == [
        "--source-namespace: only with --directory-mode"]


def test_in_directory_mode_only_the_reconciler_container_gets_an_api_token() -> None:
    """git-sync runs what a remote repository holds: it gets no token to the API."""
    options = install.Options(directory_mode=True, git_repo="https://git.example/c.git")
    pod = install.bundle(options)[-1].obj["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    reconciler, git_sync = pod["containers"]
    assert {"name": "api-token", "mountPath": token_dir, "readOnly": True} in \
        reconciler["volumeMounts"]
    assert all(m["mountPath"] != token_dir for m in git_sync["volumeMounts"])
    assert all(m["name"] != "api-token" for m in git_sync["volumeMounts"])
    token = next(v for v in pod["volumes"] if v["name"] == "api-token")["projected"]["sources"]
    assert [next(iter(s)) for s in token] == ["serviceAccountToken", "configMap", "downwardAPI"]


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
    # The bundle ships the registration: no `create` (which no name can limit), only get and
    # update of its one name.
    assert webhook_rules == [{"apiGroups": ["admissionregistration.k8s.io"],
                              "resources": ["validatingwebhookconfigurations"],
                              "verbs": ["get", "update"],
                              "resourceNames": ["kaiwu-reconciler-kaiwu-system"]}]
    shipped = next(d for d in bundle if d["kind"] == "ValidatingWebhookConfiguration")
    assert shipped["metadata"]["name"] == "kaiwu-reconciler-kaiwu-system"
    assert shipped["webhooks"][0]["clientConfig"]["service"] == {
        "namespace": "kaiwu-system", "name": "kaiwu-reconciler-webhook", "path": "/validate",
        "port": 443}
    assert [r["resourceNames"] for r in webhook_rules if "resourceNames" in r] == [
        ["kaiwu-reconciler-kaiwu-system"]]
    namespace = next(d for d in bundle if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["kaiwu.inspur.com/admission"] == "skip", \
        "the escape hatch: the operator's own namespace is never checked"
    same = install.Options(namespace="team-a", scope="namespaced", watch_namespace="team-a")
    (shared,) = [d.obj for d in install.bundle(same) if d.obj["kind"] == "Namespace"]
    assert shared["metadata"]["name"] == "team-a"
    assert "kaiwu.inspur.com/admission" not in shared["metadata"]["labels"], \
        "but not when the clusters live there too"


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
    (["--crds-only", "--skip-crds"], "--crds-only, --skip-crds: give one"),
    (["--crds-only", "--scope", "namespaced", "--watch-namespace", "a"],
     "--crds-only: prints the CRDs alone, which only --kube-version changes; drop --scope, "
     "--watch-namespace"),
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


def test_kaiwu_install_help_explains_every_flag(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per flag: no hyphen is broken across lines
    with pytest.raises(SystemExit) as exit_:
        main(["install", "--help"])
    assert exit_.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert help_text.startswith("usage: kaiwu install [-h] [--image REF] ")
    assert "[--git-repo URL]" in help_text
    for line in [
        "Print the reconciler's install bundle (CRDs, Namespace, ServiceAccount, RBAC, "
        "Services, webhook registration, NetworkPolicy, PodDisruptionBudget, Deployment) as "
        "YAML: kaiwu install | kubectl apply -f -",
        f"--image REF the reconciler's image (default: {install.default_image()}, not published "
        "yet: build it with `make image`, copy it to your registry with `make push IMAGE=REF` "
        "and give that REF here)",
        "--namespace NAMESPACE where the reconciler runs (default: kaiwu-system)",
        "--scope {cluster,namespaced} cluster: reconcile every namespace (default); namespaced: "
        "only --watch-namespace, with Roles there and no cluster-wide writes",
        "--watch-namespace NS with --scope namespaced: the one namespace to reconcile",
        "--directory-mode GitOps pull: a git-sync sidecar (example image) and the rights to "
        "create, apply and delete KaiwuClusters from its checkout",
        "--git-repo URL with --directory-mode: the repository holding KaiwuCluster files",
        "--source-namespace NS with --directory-mode: a namespace its files may put "
        "KaiwuClusters in (repeatable; * for any; default: --namespace, or the watched "
        "namespace)",
        "--kube-version KUBE_VERSION your cluster's Kubernetes version (default: 1.28, which "
        "installs on 1.28 and every later release; give yours for its extra CEL rules, e.g. 1.29 "
        "refuses a smaller volume; 1.20 to 1.24 must be given: their API servers lack policy/v1 "
        "or CEL)",
        "--shard NAME a bundle for one shard: its Deployment (kaiwu-reconciler-NAME), Lease and "
        "metrics Service reconcile only KaiwuClusters labelled kaiwu.inspur.com/shard=NAME "
        "(default: the unnamed shard, the clusters without the label)",
        "--backup-volume-claim NAME a ReadWriteMany claim in --namespace to mount for "
        "KaiwuBackups with a volume target (repeatable; docs/backup.md)",
        "--crds-only print only the CRDs (KaiwuCluster, KaiwuBackup, KaiwuBackupSchedule), for "
        "whoever manages CRDs apart; no other flag but --kube-version",
        "--skip-crds print everything but the CRDs (apply `kaiwu install --crds-only` first)",
    ]:
        assert line in help_text, line


@pytest.mark.parametrize(("options", "problem"), [
    (install.Options(namespace="Kaiwu_System"),
     "--namespace: 'Kaiwu_System' is not a namespace name (lower-case letters, digits and '-', "
     "at most 63)"),
    (install.Options(namespace="k" * 64),
     f"--namespace: {'k' * 64!r} is not a namespace name (lower-case letters, digits and '-', "
     "at most 63)"),
    (install.Options(scope="everything"),
     "--scope: 'everything' is not one of cluster, namespaced"),
    (install.Options(scope="namespaced"),
     "--scope namespaced: needs --watch-namespace NS (the namespace whose KaiwuClusters it "
     "reconciles)"),
    (install.Options(watch_namespace="team-a"),
     "--watch-namespace: only with --scope namespaced (a cluster-wide install watches every "
     "namespace)"),
    (install.Options(scope="namespaced", watch_namespace="Team-A"),
     "--watch-namespace: 'Team-A' is not a namespace name"),
    (install.Options(directory_mode=True),
     "--directory-mode: needs --git-repo URL (the repository git-sync clones the KaiwuCluster "
     "files from)"),
    (install.Options(git_repo="https://g.example/c.git"), "--git-repo: only with --directory-mode"),
    (install.Options(shard="Team_A"),
     "--shard: 'Team_A' is not a shard name (lower-case letters, digits and '-': it names the "
     "Deployment and the Lease)"),
    (install.Options(shard="s" * 47),
     f"--shard: {'s' * 47!r} is too long (the Deployment kaiwu-reconciler-{'s' * 47} must be at "
     "most 63 characters)"),
    (install.Options(shard="a", directory_mode=True, git_repo="https://g.example/c.git"),
     "--shard: not with --directory-mode (directory mode applies every file it finds: run it "
     "unsharded)"),
    (install.Options(backup_volume_claims=("dumps", "-dumps")),
     "--backup-volume-claim: '-dumps' is not a claim name (lower-case letters, digits, '-' and "
     "'.')"),
    (install.Options(image="registry.example/kaiwu reconciler:1"),
     "--image: 'registry.example/kaiwu reconciler:1' is not an image reference"),
    (install.Options(image="  "), "--image: '  ' is not an image reference"),
    (install.Options(crds_only=True, skip_crds=True),
     "--crds-only, --skip-crds: give one (the CRDs alone, or everything but them)"),
    (install.Options(crds_only=True, image="registry.example/k:1", namespace="ops",
                     backup_volume_claims=("dumps",)),
     "--crds-only: prints the CRDs alone, which only --kube-version changes; drop --image, "
     "--namespace, --backup-volume-claim"),
])
def test_each_option_the_bundle_cannot_be_made_with_is_named_with_the_fix(
        options: install.Options, problem: str) -> None:
    assert options.problems() == [problem]
    with pytest.raises(ValueError) as refused:
        install.bundle(options)
    assert str(refused.value) == problem


@pytest.mark.parametrize("options", [
    install.Options(namespace="k" * 63, shard="s" * 46),
    install.Options(backup_volume_claims=("nightly.dumps-1", "d" * 253)),
    install.Options(scope="namespaced", watch_namespace="w" * 63),
])
def test_names_at_the_length_limits_are_accepted(options: install.Options) -> None:
    assert options.problems() == []


def test_the_header_says_how_the_bundle_was_made() -> None:
    options = install.Options(image="registry.example/kaiwu:1", namespace="ops",
                              scope="namespaced", watch_namespace="team-a", directory_mode=True,
                              git_repo="https://g.example/c.git",
                              kube_version=KubeVersion(1, 29),
                              backup_volume_claims=("nightly", "weekly"))
    assert options.command() == (
        "kaiwu install --namespace ops --scope namespaced --watch-namespace team-a "
        "--directory-mode --git-repo https://g.example/c.git --kube-version 1.29 "
        "--backup-volume-claim nightly --backup-volume-claim weekly "
        "--image registry.example/kaiwu:1")
    assert install.Options(shard="eu").command() == (
        "kaiwu install --namespace kaiwu-system --scope cluster --shard eu "
        f"--image {install.default_image()}")
    head = install.render(options).splitlines()[:4]
    assert head == [f"# kaiwu-operator {install.version()}: the reconciler's install bundle, "
                    "made by", f"#   {options.command()}",
                    "# Apply it with `kubectl apply -f`. Do not edit: change "
                    "reconciler/install/.", "---"]


def test_a_namespaced_shard_bundle_says_why_each_object_is_there() -> None:
    options = install.Options(scope="namespaced", watch_namespace="team-a", shard="eu")
    said = [(d.obj["kind"], d.obj["metadata"]["name"], d.comment)
            for d in install.bundle(options)]
    assert said[5:] == [
        ("ClusterRole", "kaiwu-reconciler-kaiwu-system",
         "Namespaced install: the only cluster-wide rights left: read-only (Nodes for failover, "
         "PersistentVolumes for a local volume's node) and the reconciler's own webhook "
         "registration."),
        ("ClusterRoleBinding", "kaiwu-reconciler-kaiwu-system", ""),
        ("Role", "kaiwu-reconciler",
         "What the reconciler does in the one namespace it watches, team-a."),
        ("RoleBinding", "kaiwu-reconciler", ""),
        ("Role", "kaiwu-reconciler-eu-leader-election",
         "Leader election: shard eu's Lease, in the reconciler's own namespace. `create` cannot "
         "be limited to a name (the name is in the body); get and patch can."),
        ("RoleBinding", "kaiwu-reconciler-eu-leader-election", ""),
        ("Role", "kaiwu-reconciler-webhook",
         "The webhook's serving certificate: one Secret in the reconciler's own namespace, made "
         "and rotated by the leader, read by every replica."),
        ("RoleBinding", "kaiwu-reconciler-webhook", ""),
        ("Service", "kaiwu-reconciler-eu-metrics",
         "For Prometheus: scrape kaiwu-reconciler-eu-metrics.kaiwu-system:8090/metrics (both "
         "replicas report; kaiwu_leader tells which one leads)."),
        ("Service", "kaiwu-reconciler-webhook",
         "The admission webhook: the API server sends KaiwuCluster creates and updates here, to "
         "any ready replica."),
        ("ValidatingWebhookConfiguration", "kaiwu-reconciler-kaiwu-system",
         "Its registration, shipped here so the reconciler needs no right to create one: the "
         "leader puts its CA in (caBundle) and its failurePolicy and timeoutSeconds (settings), "
         "which this copy leaves out, so applying it again never undoes them. Until then, "
         "KaiwuCluster writes are refused outside namespaces labelled "
         "kaiwu.inspur.com/admission=skip: wait for the Deployment of the unnamed shard, whose "
         "leader registers it for every shard (install its bundle too)."),
        ("NetworkPolicy", "kaiwu-reconciler-eu",
         "Who may reach the reconciler: the webhook port from anywhere (the API server), the "
         "restore file server from KaiwuDB pods, /metrics from namespaces labelled "
         "kaiwu.inspur.com/metrics-access=true (label your Prometheus's). Enforced where the "
         "network plugin enforces NetworkPolicies."),
        ("PodDisruptionBudget", "kaiwu-reconciler-eu",
         "At most one replica evicted at a time (a drain waits until the other is Ready): the "
         "other takes over the Lease. The Deployment prefers other nodes (and zones) for the "
         "two: a one-node cluster still runs both."),
        ("Deployment", "kaiwu-reconciler-eu",
         "Two replicas: one leads (holds the Lease) and writes, the other takes over within "
         "seconds. Settings are KAIWU_* variables (kaiwu reconcile --help). Shard eu: "
         "reconciles only the KaiwuClusters labelled kaiwu.inspur.com/shard=eu."),
    ]
    # The Role in the watched namespace is bound to the reconciler in its own namespace.
    binding = install.bundle(options)[8].obj
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "kaiwu-reconciler"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kaiwu-reconciler",
                                    "namespace": "kaiwu-system"}]
    # The shard's own objects carry its name as their app label, and its Service selects it.
    service = install.bundle(options)[13].obj
    assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "kaiwu-reconciler-eu"
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "kaiwu-reconciler-eu"}
    env = install.bundle(options)[-1].obj["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "KAIWU_WEBHOOK" not in {e["name"] for e in env}, "the unnamed shard serves it"


def test_the_git_sync_sidecar_shares_a_checkout_the_reconciler_only_reads() -> None:
    options = install.Options(directory_mode=True, git_repo="https://g.example/c.git",
                              backup_volume_claims=("dumps",))
    pod = install.bundle(options)[-1].obj["spec"]["template"]["spec"]
    reconciler, sidecar = pod["containers"]
    assert sidecar == {
        "name": "git-sync", "image": "registry.k8s.io/git-sync/git-sync:v4.2.4",
        "imagePullPolicy": "IfNotPresent",
        "args": ["--repo=https://g.example/c.git", "--root=/git", "--link=repo", "--period=30s"],
        "volumeMounts": [{"name": "git", "mountPath": "/git"}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                      "limits": {"memory": "128Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    assert reconciler["volumeMounts"] == [
        {"name": "git", "mountPath": "/git", "readOnly": True},
        {"name": "api-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
         "readOnly": True},
        {"name": "backup-0", "mountPath": "/backup-volumes/dumps"}]
    assert [v["name"] for v in pod["volumes"]] == ["git", "api-token", "backup-0"]
    assert pod["volumes"][2] == {"name": "backup-0",
                                 "persistentVolumeClaim": {"claimName": "dumps"}}
    # A cluster whose file disappears from git is reported, not deleted, unless turned on.
    assert reconciler["env"][-2:] == [{"name": "KAIWU_SOURCE", "value": "dir:/git/repo"},
                                      {"name": "KAIWU_PRUNE_DELETED_CLUSTERS", "value": "false"}]
    assert verbs(rules(options, "ClusterRole"), "kaiwuclusters") == {
        "get", "list", "watch", "patch", "create", "delete"}


def test_the_reconcilers_pods_take_connections_only_where_something_needs_them() -> None:
    """The bundle's NetworkPolicy names each port the Deployment opens, by its name."""
    bundle = [d.obj for d in install.bundle(install.Options(shard="eu"))]
    policy = next(d for d in bundle if d["kind"] == "NetworkPolicy")
    deployment = next(d for d in bundle if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    opened = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    allowed = {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}
    assert set(allowed) == opened == {"webhook", "restore-files", "http-metrics"}
    assert allowed["webhook"] is None, "the API server's address cannot be selected"
    assert allowed["restore-files"] == [{"namespaceSelector": {}, "podSelector": {
        "matchLabels": {"app.kubernetes.io/name": "kaiwudb"}}}]
    assert allowed["http-metrics"] == [{"namespaceSelector": {"matchLabels": {
        "kaiwu.inspur.com/metrics-access": "true"}}}]


def test_every_permission_of_the_bundle_is_explained_in_docs_security() -> None:
    """docs/security.md has a row naming each resource with each verb the bundle grants it,
    in every variant (cluster-wide, namespaced, directory mode)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    start = text.index("## Least privilege")
    rows = [line.split("|") for line in text[start:].splitlines() if line.startswith("| `")]
    table = [(cells[1], cells[2]) for cells in rows]
    variants = [install.Options(), install.Options(scope="namespaced", watch_namespace="team"),
                install.Options(directory_mode=True, git_repo="https://git.example/repo")]
    missing = set()
    for options in variants:
        for doc in install.bundle(options):
            if doc.obj["kind"] not in ("ClusterRole", "Role"):
                continue
            for rule in doc.obj["rules"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        if not any(f"`{resource}`" in what and verb in verbs
                                   for what, verbs in table):
                            missing.add((resource, verb))
    assert not missing, f"not explained in docs/security.md: {sorted(missing)}"


def pod_templates(options: install.Options) -> list[dict[str, Any]]:
    """Every pod template in the bundle (its Deployment's)."""
    return [d.obj["spec"]["template"] for d in install.bundle(options)
            if "template" in d.obj.get("spec", {})]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_container_of_every_variant_passes_pod_security_restricted(variant: str) -> None:
    """The rules and the fields they read: tests/support/pod_security.py."""
    templates = pod_templates(VARIANTS[variant])
    assert len(templates) == 1
    (template,) = templates
    names = [c["name"] for c in template["spec"]["containers"]]
    assert names == (["reconciler", "git-sync"] if "directory" in variant else ["reconciler"])
    assert baseline_violations(template) == []
    assert restricted_violations(template) == []


def _without(obj: dict[str, Any], *path: str) -> None:
    for key in path[:-1]:
        obj = obj[key]
    del obj[path[-1]]


@pytest.mark.parametrize(("loosen", "broken"), [
    (lambda pod: _without(pod, "securityContext", "runAsNonRoot"),
     ["reconciler: runAsNonRoot not true", "git-sync: runAsNonRoot not true"]),
    (lambda pod: _without(pod, "securityContext", "seccompProfile"),
     ["reconciler: seccompProfile not RuntimeDefault or Localhost",
      "git-sync: seccompProfile not RuntimeDefault or Localhost"]),
    (lambda pod: pod["securityContext"].update(runAsUser=0), ["pod: runAsUser 0"]),
    (lambda pod: _without(pod["containers"][1], "securityContext", "allowPrivilegeEscalation"),
     ["git-sync: allowPrivilegeEscalation not false"]),
    (lambda pod: _without(pod["containers"][1], "securityContext", "capabilities"),
     ["git-sync: capabilities do not drop ALL"]),
    (lambda pod: pod["containers"][0]["securityContext"].update(
        capabilities={"drop": ["ALL"], "add": ["NET_ADMIN"]}),
     ["reconciler: adds capability NET_ADMIN"]),
    (lambda pod: pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
     ["pod: volume type hostPath"]),
], ids=["runAsNonRoot", "seccomp", "root-user", "privilege-escalation", "drop-all",
        "add-capability", "host-path"])
def test_the_restricted_check_fails_a_bundle_pod_loosened_by_one_rule(
        loosen: Any, broken: list[str]) -> None:
    """A variant whose pod stops passing restricted fails the test above: each loosening of
    the directory-mode pod (both containers) is reported, and only it."""
    (template,) = pod_templates(DIRECTORY)
    loosen(template["spec"])
    assert restricted_violations(template) == broken


def namespace_labels(options: install.Options) -> dict[str, str]:
    (namespace,) = [d.obj for d in install.bundle(options) if d.obj["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == options.namespace
    labels: dict[str, str] = namespace["metadata"]["labels"]
    return labels


def test_the_reconcilers_own_namespace_enforces_pod_security_restricted() -> None:
    """Enforced, audited and warned about, wherever the bundle's namespace is the reconciler's
    alone; a namespace shared with the KaiwuClusters it watches keeps its owner's choice (the
    bundle writes no Pod Security label there)."""
    restricted = {f"pod-security.kubernetes.io/{mode}": "restricted"
                  for mode in ("enforce", "audit", "warn")}
    for variant in ("cluster", "namespaced", "directory-mode", "shard", "kubernetes-1.20"):
        assert namespace_labels(VARIANTS[variant]).items() >= restricted.items(), variant
    shared = namespace_labels(VARIANTS["namespaced-in-the-watched-namespace"])
    assert not any(key.startswith("pod-security.kubernetes.io/") for key in shared)


def test_directory_mode_says_when_its_clusters_land_in_the_restricted_namespace() -> None:
    def note(options: install.Options) -> str:
        return next(d.comment for d in install.bundle(options) if d.obj["kind"] == "Namespace")

    landing = "Directory mode puts KaiwuClusters here too"
    assert landing in note(DIRECTORY), "by default its files' clusters go to kaiwu-system"
    assert landing not in note(VARIANTS["directory-mode-namespaced"]), "to team-a"
    assert landing not in note(install.Options(
        directory_mode=True, git_repo="https://g.example/c", source_namespaces=("kaiwu-prod",)))
    assert landing not in note(install.Options())


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_drain_never_takes_both_replicas(variant: str) -> None:
    """The webhook's failurePolicy is Fail: with both replicas evicted at once every
    KaiwuCluster write would be refused. A PodDisruptionBudget lets one go at a time, and the
    two prefer different nodes and zones without requiring them (one node still runs both)."""
    options = VARIANTS[variant]
    bundle = [d.obj for d in install.bundle(options)]
    (deployment,) = [d for d in bundle if d["kind"] == "Deployment"]
    (budget,) = [d for d in bundle if d["kind"] == "PodDisruptionBudget"]
    assert deployment["spec"]["replicas"] == 2
    assert budget["apiVersion"] == ("policy/v1beta1" if variant == "kubernetes-1.20"
                                    else "policy/v1")
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert budget["spec"] == {"maxUnavailable": 1,
                              "selector": deployment["spec"]["selector"]}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pod = deployment["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"], "never required"
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": deployment["spec"]["selector"]}
    assert pod["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": deployment["spec"]["selector"]}]


@pytest.mark.parametrize("kube_version", [KubeVersion(1, 20), KubeVersion(1, 28),
                                          KubeVersion(1, 33)])
def test_the_crds_install_apart_from_the_rest_and_together_make_the_whole_bundle(
        kube_version: KubeVersion, capsys: pytest.CaptureFixture[str]) -> None:
    """For teams that manage CRDs apart: --crds-only prints the three CRDs for the release,
    --skip-crds everything else, and the two are the whole bundle, in its order."""
    argv = ["install", "--kube-version", str(kube_version)]
    printed = {}
    for flag in ("", "--crds-only", "--skip-crds"):
        assert main([*argv, flag] if flag else argv) == 0
        printed[flag] = capsys.readouterr().out
    whole, crds, rest = (docs(printed[flag]) for flag in ("", "--crds-only", "--skip-crds"))
    assert crds + rest == whole
    assert [d["kind"] for d in crds] == ["CustomResourceDefinition"] * 3
    assert crds[0] == crd_for(kube_version)
    assert "CustomResourceDefinition" not in {d["kind"] for d in rest}
    assert {"Namespace", "Deployment", "PodDisruptionBudget"} <= {d["kind"] for d in rest}
    version = "" if kube_version == KubeVersion(1, 28) else f" --kube-version {kube_version}"
    assert printed["--crds-only"].splitlines()[1] == f"#   kaiwu install --crds-only{version}"
    assert printed["--skip-crds"].splitlines()[3] == (
        f"# Without the CRDs (--skip-crds): apply `kaiwu install --crds-only{version}` first.")
    assert "--skip-crds --image" in printed["--skip-crds"].splitlines()[1]
    namespaced = install.Options(scope="namespaced", watch_namespace="team-a",
                                 namespace="team-a-kaiwu", skip_crds=True)
    assert [d.obj for d in install.bundle(namespaced)] == [
        d.obj for d in install.bundle(dataclasses.replace(namespaced, skip_crds=False))
        if d.obj["kind"] != "CustomResourceDefinition"]


# ---- kaiwu uninstall -------------------------------------------------------------------------


def removed(options: install.Options) -> list[tuple[str, str, str]]:
    return [(d.obj["kind"], d.obj["metadata"].get("namespace", ""), d.obj["metadata"]["name"])
            for d in install.removal(options)]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_uninstall_removes_the_reconcilers_own_objects_never_the_crds_or_the_namespace(
        variant: str) -> None:
    """What removing the operator deletes is its bundle without the CRDs (deleting them deletes
    every KaiwuCluster) and without the Namespace (it may be the team's, holding KaiwuDB), plus
    the Lease and webhook Secret it made there; the registration goes before the reconciler."""
    options = VARIANTS[variant]
    found = removed(options)
    bundle = set(kinds(dataclasses.replace(options, skip_crds=True)))
    kept = {entry for entry in bundle if entry[0] == "Namespace"}
    made = {("Lease", options.namespace, options.component),
            ("Secret", options.namespace, "kaiwu-reconciler-webhook-tls")}
    if options.shard:
        shared = set(kinds(dataclasses.replace(options, skip_crds=True, shard="")))
        assert set(found) == (bundle - shared) | {("Lease", options.namespace,
                                                   options.component)}
        assert not any(kind == "ClusterRole" or name == "kaiwu-reconciler"
                       for kind, _, name in found)
    else:
        assert set(found) == (bundle - kept) | made
        assert [kind for kind, _, _ in found[:2]] == ["ValidatingWebhookConfiguration",
                                                     "Deployment"]
        assert found[-1][0] == "ServiceAccount"
    assert len(found) == len(set(found))
    assert not any(kind in ("CustomResourceDefinition", "Namespace") for kind, _, _ in found)
    text = install.render_removal(options)
    for doc in docs(text):
        assert set(doc["metadata"]) <= {"name", "namespace"}, "names only: kubectl delete -f"
    assert install.render_removal(options) == text


def test_kaiwu_uninstall_says_what_it_keeps_and_refuses_bad_flags_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["uninstall", "--scope", "namespaced", "--watch-namespace", "team-a",
                 "--namespace", "team-a", "--kube-version", "1.20"]) == 0
    out = capsys.readouterr().out
    comment = " ".join(line[2:] for line in out.splitlines() if line.startswith("# "))
    assert "kaiwu uninstall --namespace team-a --scope namespaced --watch-namespace team-a " \
        "--kube-version 1.20" in comment
    for said in ("kubectl delete --ignore-not-found -f -",
                 "Kept: the CRDs, and with them every KaiwuCluster",
                 "every KaiwuDB StatefulSet, pod, claim, volume, Service and Secret",
                 "Never `kaiwu install | kubectl delete -f -`",
                 "Also kept: the namespace team-a"):
        assert said in comment, said
    assert {d["kind"] for d in docs(out)} >= {"Deployment", "PodDisruptionBudget", "Role"}
    assert next(d for d in docs(out) if d["kind"] == "PodDisruptionBudget")[
        "apiVersion"] == "policy/v1beta1"
    assert main(["uninstall", "--scope", "namespaced"]) == 2
    assert capsys.readouterr().err.startswith("kaiwu uninstall: --scope namespaced: needs")
    with pytest.raises(SystemExit) as exit_:  # argparse's own errors
        main(["uninstall", "--crds-only"])
    assert exit_.value.code == 2
    assert "kaiwu uninstall: unrecognized arguments: --crds-only" in capsys.readouterr().err
