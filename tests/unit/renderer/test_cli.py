"""The `kaiwu` command as a user meets it: help, defaults, options, and what each run prints.

Most stories call `renderer.cli.main` in this process (fast, and mutation testing can link them
to the code). Two start the installed console script in a fresh process: the help, and a diff
run from outside the repository it names; tests/unit/test_cli_errors.py has the exit status of
a usage error for every command as a shell sees it.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from renderer import cli
from tests.support.render import (
    EXAMPLES,
    KUSTOMIZATION,
    clean_env,
    cluster,
    kaiwu,
    kaiwu_process,
    read_tree,
    render_tree,
    rendered_objects,
    write_yaml,
)


def words(text: str) -> str:
    """Help text with argparse's wrapping (it follows the terminal width) undone."""
    return " ".join(text.split())


def test_help_names_every_command_and_the_exit_codes() -> None:
    """The installed console script, in a fresh process (each command's help in-process below)."""
    run = kaiwu_process("--help")
    assert run.code == 0
    for command in ("render", "validate", "diff", "reconcile"):
        assert f" {command} " in words(run.stdout)
    assert "(exit 0 none, 1 changes, 2 error)" in words(run.stdout)


def test_an_unknown_option_is_a_usage_error() -> None:
    run = kaiwu("render", "--colour")
    assert run.code == 2
    assert "unrecognized arguments: --colour" in run.stderr


@pytest.mark.parametrize("version", ["latest", "1", "one.two", "1.x"])
def test_a_kube_version_that_is_not_a_version_is_refused(version: str) -> None:
    run = kaiwu("render", EXAMPLES, "--stdout", "--kube-version", version)
    assert run.code == 2
    assert "is not a Kubernetes version" in run.stderr


def test_render_and_validate_default_to_clusters_and_out_in_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "clusters")
    monkeypatch.chdir(tmp_path)

    validated = kaiwu("validate")
    assert (validated.code, validated.stdout) == (0, "3 KaiwuCluster specs are valid\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["clusters"]

    rendered = kaiwu("render")
    assert rendered.code == 0, rendered.stderr
    assert rendered.stdout == (
        "rendered 16 objects of 3 clusters into out/ (Kubernetes 1.28): a preview of what the "
        'reconciler creates; commit the specs, not these files (README, "GitOps, end to '
        'end")\n')
    assert (tmp_path / "out" / KUSTOMIZATION).is_file()


def test_a_single_file_can_be_rendered(tmp_path: Path) -> None:
    objects = render_tree(EXAMPLES / "dev.yaml", tmp_path / "out")
    assert {name.split("/")[0] for name in objects} == {"kaiwu-dev"}


def test_only_yaml_files_outside_hidden_directories_are_read(tmp_path: Path) -> None:
    """Notes, drafts in .drafts/ and editor leftovers do not break a render."""
    source = tmp_path / "clusters"
    write_yaml(source / "a.yaml", cluster("alpha", "shop"))
    write_yaml(source / "team" / "b.yml", cluster("beta", "shop"))
    write_yaml(source / ".drafts" / "c.yaml", {"kind": "NotACluster"})
    (source / "README.md").write_text("# our clusters\n")
    (source / "a.yaml.orig").write_text("garbage: [\n")
    objects = render_tree(source, tmp_path / "out")
    assert {name.split("/")[1] for name in objects} == {"alpha", "beta"}


def test_validate_writes_nothing_even_when_all_is_well(tmp_path: Path) -> None:
    source = tmp_path / "clusters"
    write_yaml(source / "a.yaml", cluster("alpha", "shop"))
    before = read_tree(tmp_path)
    run = kaiwu("validate", source, EXAMPLES)
    assert (run.code, run.stdout) == (0, "4 KaiwuCluster specs are valid\n")
    assert read_tree(tmp_path) == before


def test_an_empty_directory_renders_an_empty_kustomization(tmp_path: Path) -> None:
    (tmp_path / "clusters").mkdir()
    run = kaiwu("render", tmp_path / "clusters", "-o", tmp_path / "out")
    assert run.code == 0
    assert read_tree(tmp_path / "out") == {KUSTOMIZATION: (
        b"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n")}


def test_out_and_stdout_cannot_be_combined(tmp_path: Path) -> None:
    run = kaiwu("render", EXAMPLES, "--stdout", "-o", tmp_path / "out")
    assert run.code == 2
    assert "not allowed with argument" in run.stderr
    assert not (tmp_path / "out").exists()


def test_diff_can_name_the_repository_from_outside_it(tmp_path: Path) -> None:
    """Run from the repository's parent: paths are relative to where the user stands."""
    env = clean_env(tmp_path)
    repo = tmp_path / "infra"
    write_yaml(repo / "clusters" / "a.yaml", cluster("alpha", "shop"))
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", *command], cwd=repo, env=env, check=True)
    write_yaml(repo / "clusters" / "a.yaml", cluster("alpha", "shop", replicas=4))

    run = kaiwu_process("diff", "infra/clusters", "--base", "HEAD", "--repo", "infra",
                        cwd=tmp_path, env=env)

    assert run.code == 1, run.stderr
    assert "+  replicas: 4" in run.stdout
    outside = kaiwu_process("diff", str(tmp_path / "elsewhere"), "--base", "HEAD", "--repo",
                            "infra", cwd=tmp_path, env=env)
    assert outside.code == 2
    assert "is not inside the git repository" in outside.stderr


KUBE_VERSION_HELP = ("--kube-version KUBE_VERSION your cluster's Kubernetes version (default "
                     "1.28: its manifests suit every release from it on)")


def test_every_commands_help_says_what_it_does_and_what_it_defaults_to() -> None:
    """The help a user reads before the first run, command by command (in-process)."""
    top = words(kaiwu("--help").stdout)
    assert top.startswith("usage: kaiwu [-h] [--version] COMMAND")
    for line in ("The `kaiwu` command: specs (render, validate, diff), the reconciler, status, "
                 "backups, restores.",
                 "render render KaiwuCluster files to manifests",
                 "validate check KaiwuCluster files, write nothing",
                 "diff show how rendered objects change (exit 0 none, 1 changes, 2 error)",
                 "crd print the KaiwuCluster CRD for a Kubernetes version",
                 "reconcile run the reconciler (see kaiwu reconcile --help)",
                 "backup create, list and describe KaiwuBackups (see kaiwu backup --help)",
                 "restore a new cluster from a completed backup (see kaiwu restore --help)"):
        assert line in top
    render = words(kaiwu("render", "--help").stdout)
    for line in ("source directory or file of KaiwuCluster specs, - for standard input (default "
                 "clusters)",
                 "-o OUT, --out OUT output directory, replaced as a whole (default out)",
                 "--stdout print one YAML stream instead",
                 KUBE_VERSION_HELP,
                 "--cluster-domain CLUSTER_DOMAIN cluster DNS domain (default cluster.local)"):
        assert line in render
    validate = words(kaiwu("validate", "--help").stdout)
    assert "sources directories or files, - for standard input (default clusters)" in validate
    assert KUBE_VERSION_HELP in validate
    diff = words(kaiwu("diff", "--help").stdout)
    for line in ("kaiwu diff OLD NEW (two directories), or kaiwu diff PATH --base REV [--head REV] "
                 "(one path at two git revisions; head defaults to the working tree)",
                 "--base BASE git revision of the old side, e.g. origin/main",
                 "--head HEAD git revision of the new side (default: working tree)",
                 "--repo REPO git repository for --base/--head (default: current directory)",
                 "--format {text,markdown}",
                 "--cluster-domain CLUSTER_DOMAIN cluster DNS domain (default cluster.local)"):
        assert line in diff
    crd = words(kaiwu("crd", "--help").stdout)
    assert ("Print the KaiwuCluster CRD: the schema, plus the CEL validation rules "
            "(x-kubernetes-validations) from Kubernetes 1.25 on.") in crd
    assert ("--kube-version KUBE_VERSION your cluster's Kubernetes version (default 1.28: its "
            "CEL rules suit every release from it on; give yours for more)") in crd


def test_the_version_is_the_installed_release() -> None:
    run = kaiwu("--version")
    assert (run.code, run.stdout) == (0, f"kaiwu {metadata.version('kaiwu-operator')}\n")


def test_reconcile_is_not_run_by_the_renderers_entry_point() -> None:
    """`kaiwu reconcile` belongs to reconciler.cli; reaching the renderer's main says so."""
    run = kaiwu("reconcile")
    assert run.code == 2
    assert run.stderr == "kaiwu reconcile: run it through the kaiwu command\n"
    # Its options and help are reconciler.cli's: the placeholder here has no help page of its own.
    asked = kaiwu("reconcile", "--help")
    assert (asked.code, asked.stdout) == (2, "")
    assert "unrecognized arguments: --help" in asked.stderr


def test_no_command_is_a_usage_error() -> None:
    """(Usage errors' exit status as a shell sees it: tests/unit/test_cli_errors.py.)"""
    run = kaiwu()
    assert run.code == 2
    assert run.stderr.startswith("usage: kaiwu")
    assert "the following arguments are required: COMMAND" in run.stderr


def test_kaiwu_crd_without_a_release_prints_the_default_releases_crd() -> None:
    run = kaiwu("crd")
    assert run.code == 0, run.stderr
    assert run.stdout == kaiwu("crd", "--kube-version", "1.28").stdout
    assert "x-kubernetes-validations" in run.stdout


def test_main_reads_the_command_line_when_given_no_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The console script calls main() bare: the arguments come from sys.argv."""
    monkeypatch.setattr(sys, "argv", ["kaiwu", "validate", str(EXAMPLES)])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main() == 0
    assert out.getvalue() == "3 KaiwuCluster specs are valid\n"


def test_kaiwu_crd_refuses_a_release_it_does_not_support() -> None:
    run = kaiwu("crd", "--kube-version", "1.19")
    assert run.code == 2
    assert "Kubernetes 1.19 is older than the oldest supported release, 1.20" in run.stderr
    assert kaiwu("crd", "--kube-version", "v1.29.3").stdout == kaiwu(
        "crd", "--kube-version", "1.29").stdout


def test_a_disk_error_is_one_line_naming_the_file_when_it_is_known(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(path: Path, *args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    run = kaiwu("render", EXAMPLES, "-o", tmp_path / "out")
    assert (run.code, run.stderr) == (2, (
        "kaiwu render: No space left on device, nothing written (use a path that exists, that "
        "you may write, on a disk with space)\n"))

    def named(path: Path, *args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(Path, "write_text", named)
    run = kaiwu("render", EXAMPLES, "-o", tmp_path / "out")
    assert run.stderr.startswith(f"kaiwu render: No space left on device: {tmp_path}/.out.")


@pytest.mark.parametrize("layout", ["empty directory", "empty file", "json only"])
def test_finding_no_spec_is_an_error_naming_where_it_looked(tmp_path: Path, layout: str) -> None:
    """`kaiwu validate` pointed at the wrong place said "0 KaiwuCluster specs are valid" and
    exited 0: a CI step that checks nothing, for ever."""
    source = tmp_path / "specs"
    source.mkdir()
    if layout == "empty file":
        (source / "orders.yaml").write_text("")
    elif layout == "json only":
        (source / "orders.json").write_text("{}")
    run = kaiwu("validate", str(source))
    assert run.code == 2, run.stdout
    assert f"{source}: no KaiwuCluster found" in run.stderr
    assert "e.g. clusters/" in run.stderr
    assert run.stdout == ""


def test_help_lists_every_subcommand() -> None:
    shown = kaiwu("--help").stdout
    for command in ("render", "validate", "diff", "crd", "reconcile", "install", "status"):
        assert f"    {command}" in shown, command


def test_a_version_this_kaiwu_does_not_know_is_refused_unless_allowed_with_a_warning(
        tmp_path: Path) -> None:
    """A typo in spec.version (9.9.9) would roll every pod to an image that does not exist:
    the CLI names it at its line; a newer KaiwuDB release goes through with a flag."""
    spec = (EXAMPLES / "dev.yaml").read_text().replace('version: "3.2.1"', 'version: "9.9.9"')
    (tmp_path / "dev.yaml").write_text(spec)
    line = spec.splitlines().index('  version: "9.9.9"') + 1

    refused = kaiwu("validate", tmp_path)
    assert refused.code == 2 and refused.stdout == ""
    assert refused.stderr.startswith(
        f"{tmp_path}/dev.yaml:{line}: spec.version: 9.9.9 is not a KaiwuDB release this kaiwu "
        "knows (3.0.0, 3.0.1, 3.1.0, 3.2.0, 3.2.1) (use one of them, or pass "
        "--allow-unknown-version if 9.9.9 is a newer KaiwuDB release)")
    assert kaiwu("render", tmp_path, "-o", tmp_path / "out").code == 2
    assert not (tmp_path / "out").exists(), "nothing written"

    allowed = kaiwu("validate", tmp_path, "--allow-unknown-version")
    assert allowed.code == 0 and allowed.stdout == "1 KaiwuCluster specs are valid\n"
    assert allowed.stderr.startswith(f"warning: {tmp_path}/dev.yaml:{line}: spec.version: 9.9.9")
    rendered = kaiwu("render", tmp_path, "--stdout", "--allow-unknown-version")
    assert rendered.code == 0 and "image: kwdb/kwdb:9.9.9" in rendered.stdout


def test_a_dash_reads_the_specs_from_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kaiwu validate -` and `kaiwu render -`: a spec piped from another tool."""
    text = (EXAMPLES / "dev.yaml").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    assert kaiwu("validate", "-").stdout == "1 KaiwuCluster specs are valid\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    rendered = kaiwu("render", "-", "--stdout")
    assert rendered.code == 0 and "kind: StatefulSet" in rendered.stdout
    broken = text.replace(b"replicas: 3", b"replicas: 2")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(broken)))
    refused = kaiwu("validate", "-")
    assert refused.code == 2 and refused.stderr.startswith("<stdin>:")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe not text")))
    unreadable = kaiwu("validate", "-")
    assert unreadable.code == 2
    assert unreadable.stderr.startswith("<stdin>:1: cannot read file:")


def schedule_doc(**spec: Any) -> dict[str, Any]:
    """The KaiwuBackupSchedule a user keeps beside the dev example."""
    body: dict[str, Any] = {"cluster": {"name": "dev"}, "schedule": "0 0 3 * * *",
                            "template": {"target": {"volume": {"claimName": "dumps"}}}}
    body.update(spec)
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackupSchedule",
            "metadata": {"name": "nightly", "namespace": "kaiwu-dev"}, "spec": body}


def test_backups_and_schedules_live_in_the_same_tree_checked_and_passed_through(
        tmp_path: Path) -> None:
    """One tree in git for a cluster and what protects it: `kaiwu validate` checks a
    KaiwuBackupSchedule and a KaiwuBackup against their CRDs and the schedule's cron, and
    `kaiwu render` writes them as written, in their cluster's directory."""
    tree = tmp_path / "clusters"
    tree.mkdir()
    shutil.copy(EXAMPLES / "dev.yaml", tree / "dev.yaml")
    backup = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackup",
              "metadata": {"name": "before-upgrade", "namespace": "kaiwu-dev"},
              "spec": {"cluster": {"name": "dev"},
                       "target": {"volume": {"claimName": "dumps"}}}}
    write_yaml(tree / "protection.yaml", schedule_doc(), backup)

    valid = kaiwu("validate", tree)
    assert (valid.code, valid.stdout) == (0, "1 KaiwuCluster specs are valid, and 2 KaiwuBackup "
                                             "and KaiwuBackupSchedule object(s)\n")
    assert kaiwu("render", tree, "-o", tmp_path / "out").code == 0
    written = rendered_objects(tmp_path / "out")
    assert written["kaiwu-dev/dev/kaiwubackupschedule-nightly.yaml"] == schedule_doc()
    assert written["kaiwu-dev/dev/kaiwubackup-before-upgrade.yaml"] == backup
    assert b"kaiwu-dev/dev/kaiwubackupschedule-nightly.yaml" in read_tree(tmp_path / "out")[
        "kustomization.yaml"]


@pytest.mark.parametrize(("doc", "where", "wanted"), [
    (schedule_doc(schedule="61 0 3 * * *"), "spec.schedule", "out of range"),
    (schedule_doc(schedule="every night"), "spec.schedule", "expected 6 fields"),
    (schedule_doc(schedule="0 0 0 31 2 *"), "spec.schedule", "failed to find"),  # 31 February
    (schedule_doc(cluster={"name": "../../../escaped"}), "spec.cluster.name", "wrong form"),
    (schedule_doc(cluster={"name": "Dev"}), "spec.cluster.name", ""),
    ({**schedule_doc(), "spec": ["not", "a", "mapping"]}, "spec", "expected object"),
    (schedule_doc(template={"target": {"volume": {"claimName": "d"},
                                       "s3": {"bucket": "b", "credentialsSecret": {
                                           "name": "s"}}}}),
     "spec.template.target", "exactly one of s3, volume must be set; both s3 and volume"),
    (schedule_doc(retention={"keep": 0}), "spec.retention.keep", "0 is out of range"),
    (schedule_doc(surprise=1), "spec.surprise", "unknown field"),
    ({**schedule_doc(), "status": {"lastScheduleTime": "x"}}, "status",
     "written by the reconciler"),
    ({**schedule_doc(), "apiVersion": "kaiwu.inspur.com/v2"}, "apiVersion", "unknown apiVersion"),
])
def test_a_broken_backup_file_is_refused_at_its_line_naming_the_field(
        tmp_path: Path, doc: dict[str, Any], where: str, wanted: str) -> None:
    shutil.copy(EXAMPLES / "dev.yaml", tmp_path / "dev.yaml")
    write_yaml(tmp_path / "backups.yaml", doc)
    run = kaiwu("validate", tmp_path)
    assert run.code == 2
    first = run.stderr.splitlines()[0]
    assert first.startswith(f"{tmp_path}/backups.yaml:") and f" {where}:" in first, run.stderr
    assert wanted in first


def test_the_same_schedule_twice_is_refused_naming_both_places(tmp_path: Path) -> None:
    write_yaml(tmp_path / "a.yaml", schedule_doc())
    write_yaml(tmp_path / "b.yaml", schedule_doc())
    run = kaiwu("validate", tmp_path)
    assert run.code == 2
    assert "KaiwuBackupSchedule kaiwu-dev/nightly is already defined in" in run.stderr
