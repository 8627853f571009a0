"""`kaiwu diff`: a reviewer sees what a change to cluster files does to the rendered objects.

Every story runs on a real git repository with a real history (git init, commit the cluster
files, change replicas or the version, add or remove a cluster, commit again) and compares
revisions (`--base HEAD~1`, `--base X --head Y`), the working tree, or two directories.
Exit codes: 0 no change, 1 changes, 2 an error (a bad revision, a shallow clone without the base,
an invalid head, a change the transition rules refuse). An invalid base is no error: the head is
shown in full with the base's problems; a version change the reconciler refuses is flagged.
Secrets never appear in the output.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from renderer import diff, loader, render
from renderer.errors import RenderError
from renderer.settings import InputLimits
from tests.support.render import (
    Run,
    clean_env,
    cluster,
    kaiwu,
    line_of,
    to_text,
    write_yaml,
)

MASK = re.compile(r"\*\*\*[0-9a-f]{16}")


@dataclass(frozen=True)
class Repo:
    """A git repository of cluster files; `kaiwu diff` runs with it as working directory."""

    root: Path
    env: dict[str, str]

    def git(self, *args: str) -> str:
        result = subprocess.run(["git", *args], cwd=self.root, env=self.env, check=True,
                                capture_output=True, text=True)
        return result.stdout.strip()

    def write(self, name: str, *documents: dict[str, Any]) -> None:
        write_yaml(self.root / "clusters" / name, *documents)

    def remove(self, name: str) -> None:
        (self.root / "clusters" / name).unlink()

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def diff(self, *args: str) -> Run:
        return kaiwu("diff", *args)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repo]:
    """Two clusters committed once: dev (insecure, 3 nodes) and orders (TLS, 5 nodes)."""
    root = tmp_path / "infra"
    root.mkdir()
    env = isolated_git(monkeypatch, tmp_path)
    repo = Repo(root, env)
    repo.git("init", "-q", "-b", "main")
    repo.write("dev.yaml", dev())
    repo.write("orders.yaml", orders())
    repo.commit("two clusters")
    monkeypatch.chdir(root)
    yield repo


def isolated_git(monkeypatch: pytest.MonkeyPatch, home: Path) -> dict[str, str]:
    """This process's git sees no user configuration (as clean_env's subprocesses)."""
    env = clean_env(home)
    for key in os.environ:
        if key.startswith("GIT_") and key not in env:
            monkeypatch.delenv(key)
    for key, value in env.items():
        if key == "HOME" or key.startswith("GIT_"):
            monkeypatch.setenv(key, value)
    return env


def dev(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 3, "tls": {"enabled": False},
                            "storage": {"size": "5Gi"}}
    spec.update(changes)
    return cluster("dev", "kaiwu-dev", **spec)


def orders(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"version": "3.2.1", "replicas": 5, "storage": {"size": "100Gi"},
                            "extraEnv": [{"name": "DB_PASSWORD", "value": "hunter2"},
                                         {"name": "TZ", "value": "UTC"}]}
    spec.update(changes)
    return cluster("orders", "shop", **spec)


def listed(run: Run) -> list[tuple[str, str]]:
    """The `  changed  Kind ns/name` lines at the top of the text output."""
    return [(m[1], m[2]) for m in re.finditer(r"^ *(added|changed|removed)  (\S+ \S+)$",
                                              run.stdout, re.MULTILINE)]


def test_a_replica_change_is_one_changed_statefulset(repo: Repo) -> None:
    repo.write("dev.yaml", dev(replicas=5))
    repo.commit("dev: five nodes")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")

    assert run.code == 1, run.stderr
    assert listed(run) == [("changed", "StatefulSet kaiwu-dev/dev")]
    assert "-  replicas: 3\n" in run.stdout and "+  replicas: 5\n" in run.stdout
    assert "--- a/kaiwu-dev/dev/statefulset-dev.yaml" in run.stdout
    assert re.search(r"^0 added, 1 changed, 0 removed, 9 unchanged$", run.stdout, re.MULTILINE)


def test_the_working_tree_is_compared_with_a_revision(repo: Repo) -> None:
    repo.write("orders.yaml", orders(version="3.2.2"))

    unknown = repo.diff("clusters", "--base", "HEAD")
    assert unknown.code == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith("clusters/orders.yaml:7: spec.version: 3.2.2 is not a "
                                     "KaiwuDB release this kaiwu knows")
    run = repo.diff("clusters", "--base", "HEAD", "--allow-unknown-version")

    assert run.code == 1
    assert run.stderr.startswith("warning: clusters/orders.yaml:7: spec.version: 3.2.2")
    assert listed(run) == [("changed", "StatefulSet shop/orders")]
    assert "-        image: kwdb/kwdb:3.2.1\n" in run.stdout
    assert "+        image: kwdb/kwdb:3.2.2\n" in run.stdout

    repo.commit("orders: 3.2.2")
    unchanged = repo.diff("clusters", "--base", "HEAD", "--allow-unknown-version")
    assert unchanged.code == 0
    assert unchanged.stdout == "No changes (10 objects unchanged).\n"


def test_two_named_revisions_are_compared(repo: Repo) -> None:
    first = repo.git("rev-parse", "HEAD")
    repo.write("dev.yaml", dev(replicas=4))
    second = repo.commit("dev: four")
    repo.write("dev.yaml", dev(replicas=6))
    repo.commit("dev: six")

    run = repo.diff("clusters", "--base", first, "--head", second)
    assert run.code == 1
    assert "+  replicas: 4\n" in run.stdout and "replicas: 6" not in run.stdout
    assert repo.diff("clusters", "--base", second, "--head", second).code == 0


def test_adding_and_removing_a_cluster(repo: Repo) -> None:
    repo.write("edge.yaml", cluster("edge", "kaiwu-edge", startMode="single-node", replicas=1))
    repo.commit("edge site")
    added = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")
    assert added.code == 1
    assert listed(added) == [("added", "PodDisruptionBudget kaiwu-edge/edge"),
                             ("added", "Service kaiwu-edge/edge"),
                             ("added", "Service kaiwu-edge/edge-public"),
                             ("added", "ServiceAccount kaiwu-edge/edge"),
                             ("added", "StatefulSet kaiwu-edge/edge")]
    assert "--- /dev/null\n+++ b/kaiwu-edge/edge/statefulset-edge.yaml" in added.stdout

    repo.remove("dev.yaml")
    repo.commit("dev is gone")
    removed = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")
    assert removed.code == 1
    assert {change for change, _ in listed(removed)} == {"removed"}
    assert len(listed(removed)) == 5
    assert "--- a/kaiwu-dev/dev/statefulset-dev.yaml\n+++ /dev/null" in removed.stdout


def test_two_directories_are_compared(tmp_path: Path) -> None:
    write_yaml(tmp_path / "old" / "dev.yaml", dev())
    write_yaml(tmp_path / "same" / "dev.yaml", dev())
    write_yaml(tmp_path / "new" / "dev.yaml", dev(storage={"size": "8Gi"}))

    assert kaiwu("diff", tmp_path / "old", tmp_path / "same").code == 0
    run = kaiwu("diff", tmp_path / "old", tmp_path / "new")
    assert run.code == 1
    assert "-          storage: 5Gi\n+          storage: 8Gi\n" in run.stdout


def test_what_both_sides_hold_alike_is_checked_once_and_never_built_or_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pull request touches one cluster of many: the others are read and checked once for
    both sides, and never built (the check that no two clusters need one name reads the names
    alone); only the changed cluster is built, and only its changed objects written as YAML."""
    for side in ("old", "new"):
        for name in ("alpha", "beta", "gamma"):
            write_yaml(tmp_path / side / f"{name}.yaml", cluster(name, "shop", replicas=3))
    write_yaml(tmp_path / "new" / "gamma.yaml", cluster("gamma", "shop", replicas=4))
    checks, builds, texts = count(monkeypatch, render, "_read_one"), \
        count(monkeypatch, diff, "build_objects"), count(monkeypatch, diff, "to_yaml")

    run = kaiwu("diff", tmp_path / "old", tmp_path / "new")

    assert run.code == 1 and listed(run) == [("changed", "StatefulSet shop/gamma")]
    assert (len(checks), len(builds), len(texts)) == (4, 2, 2), \
        "checks: alpha and beta once each, gamma on each side; builds: gamma on each side; " \
        "two texts for the one changed object"


def test_two_revisions_or_a_revision_and_the_working_tree_share_what_they_hold_alike(
        repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same with git revisions: a file both sides hold alike is read and checked once."""
    repo.write("dev.yaml", dev(replicas=4))
    repo.commit("dev: four")
    reads, checks = count(monkeypatch, loader, "_read"), count(monkeypatch, render, "_read_one")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")

    assert run.code == 1 and listed(run) == [("changed", "StatefulSet kaiwu-dev/dev")]
    assert (len(reads), len(checks)) == (3, 3), "orders once, dev on each side"

    repo.write("dev.yaml", dev(replicas=5))
    reads.clear()
    checks.clear()
    assert repo.diff("clusters", "--base", "HEAD").code == 1
    assert (len(reads), len(checks)) == (3, 3)


def test_a_revision_costs_two_git_processes_the_listing_and_the_files(
        repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """What CI pays for each side read from git: one `git ls-tree` and one `git cat-file
    --batch`, however many files (the revision and the repository's top are asked only to
    explain a listing that failed)."""
    repo.write("dev.yaml", dev(replicas=4))
    gits = count(monkeypatch, diff, "_git_process")

    assert repo.diff("clusters", "--base", "HEAD").code == 1
    assert commands(gits) == ["ls-tree", "cat-file"]

    repo.commit("dev: four")
    gits.clear()
    assert repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD").code == 1
    assert commands(gits) == ["ls-tree", "cat-file"] * 2



def test_a_file_the_other_side_holds_alike_is_not_read_from_git(
        repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pull request changes one file of many: `git cat-file` is asked for that one, the
    others are known by the name git gives their text (the working tree's, or the other
    revision's, byte for byte)."""
    repo.write("dev.yaml", dev(replicas=4))
    gits = count(monkeypatch, diff, "_git_process")

    assert repo.diff("clusters", "--base", "HEAD").code == 1
    assert asked_objects(gits) == [[repo.git("rev-parse", "HEAD:clusters/dev.yaml")]]

    repo.commit("dev: four")
    (repo.root / "clusters" / "orders.yaml").write_bytes(
        (repo.root / "clusters" / "orders.yaml").read_bytes().replace(b"\n", b"\r\n"))
    gits.clear()
    assert repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD").code == 1
    assert asked_objects(gits) == [
        [repo.git("rev-parse", f"HEAD~1:clusters/{name}") for name in ("dev.yaml", "orders.yaml")],
        [repo.git("rev-parse", "HEAD:clusters/dev.yaml")]]
    gits.clear()
    assert repo.diff("clusters", "--base", "HEAD").code == 0, "the same specs, other line ends"
    assert asked_objects(gits) == [[repo.git("rev-parse", "HEAD:clusters/orders.yaml")]]


def test_a_missing_revision_is_said_before_the_working_trees_own_problems(repo: Repo) -> None:
    (repo.root / "clusters" / "dev.yaml").write_text("spec: [unclosed\n")
    run = repo.diff("clusters", "--base", "no-such-branch")
    assert run.code == 2
    assert run.stderr.startswith("no-such-branch: is not a revision of this repository")

    run = repo.diff("clusters", "--base", "HEAD")
    assert run.code == 2
    assert run.stderr.startswith("clusters/dev.yaml:2: invalid YAML")


def asked_objects(calls: list[object]) -> list[list[str]]:
    """The objects each recorded `git cat-file --batch` was asked for."""
    return [call[2].decode().split() for call in calls
            if isinstance(call, tuple) and call[1][0] == "cat-file"]

def commands(calls: list[object]) -> list[str]:
    """The git subcommand of each recorded diff._git_process(repo, args) call."""
    return [call[1][0] for call in calls if isinstance(call, tuple)]


def count(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[object]:
    """Record the calls of module.name (and still make them)."""
    calls: list[object] = []
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_respelt_quantity_is_no_change(tmp_path: Path) -> None:
    write_yaml(tmp_path / "old" / "dev.yaml", dev(storage={"size": "1Gi"}))
    write_yaml(tmp_path / "new" / "dev.yaml", dev(storage={"size": "1024Mi"}))
    same = kaiwu("diff", tmp_path / "old", tmp_path / "new")
    assert (same.code, same.stderr) == (0, "")
    assert re.match(r"No changes \(\d+ objects unchanged\)\.", same.stdout), same.stdout
    write_yaml(tmp_path / "new" / "dev.yaml", dev(storage={"size": "1025Mi"}))
    bigger = kaiwu("diff", tmp_path / "old", tmp_path / "new")
    assert bigger.code == 1 and "changed  StatefulSet kaiwu-dev/dev" in bigger.stdout


def test_a_bad_revision_is_an_error_not_a_traceback(repo: Repo) -> None:
    run = repo.diff("clusters", "--base", "no-such-branch")
    assert run.code == 2
    assert "Traceback" not in run.stderr
    assert "no-such-branch" in run.stderr
    assert "is not a revision of this repository" in run.stderr
    assert "check the revision name" in run.stderr
    assert run.stdout == ""


def test_the_pull_request_that_fixes_an_invalid_base_shows_the_head_in_full(repo: Repo) -> None:
    broken = dev(replicas=2)
    repo.write("dev.yaml", broken)
    repo.commit("oops")
    repo.write("dev.yaml", dev())
    repo.commit("fixed")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")

    assert run.code == 1, run.stderr
    line = line_of(to_text(broken), 0, ("spec", "replicas"))
    assert run.stdout.splitlines()[:2] == [
        "The base is invalid (1 problem(s)), so this shows the head's render in full:",
        f"  HEAD~1:clusters/dev.yaml:{line}: spec.replicas: multi-replica needs at least 3 "
        "nodes, got 2 (set replicas to 3 or more, or use startMode single-replica)"]
    assert {change for change, _ in listed(run)} == {"added"}
    assert ("added", "StatefulSet kaiwu-dev/dev") in listed(run)
    markdown = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD", "--format", "markdown")
    assert "> **The base is invalid** (1 problem(s)); this shows the head's render in full." in (
        markdown.stdout)


def test_a_base_that_is_not_even_yaml_still_gives_a_preview(repo: Repo) -> None:
    (repo.root / "clusters" / "dev.yaml").write_text("spec: [unclosed\n")
    repo.commit("broken yaml")
    repo.write("dev.yaml", dev())

    run = repo.diff("clusters", "--base", "HEAD")

    assert run.code == 1, run.stderr
    assert run.stdout.startswith("The base is invalid (1 problem(s))")
    assert "  HEAD:clusters/dev.yaml:" in run.stdout


def test_an_invalid_head_is_still_an_error(repo: Repo) -> None:
    repo.write("dev.yaml", dev(replicas=2))
    run = repo.diff("clusters", "--base", "HEAD")
    assert run.code == 2
    assert run.stderr.startswith("clusters/dev.yaml:")


def test_a_version_downgrade_is_flagged_as_refused_by_the_reconciler(repo: Repo) -> None:
    repo.write("billing.yaml", cluster("billing", "shop"))  # new, and read before orders
    repo.write("orders.yaml", orders(version="3.1.0"))

    run = repo.diff("clusters", "--base", "HEAD")

    assert run.code == 2, "a change the reconciler refuses fails the check"
    assert run.stderr == "kaiwu diff: 1 change(s) the reconciler refuses\n"
    assert run.stdout.splitlines()[0] == (
        "REFUSED by the reconciler: shop/orders: spec.version 3.2.1 -> 3.1.0 is a downgrade, "
        "which the reconciler refuses (KaiwuDB cannot be downgraded): no pod will move; keep "
        "3.2.1 or later")
    markdown = repo.diff("clusters", "--base", "HEAD", "--format", "markdown").stdout
    assert "> :warning: **Refused by the reconciler:** shop/orders: spec.version 3.2.1 -> " \
        "3.1.0 is a downgrade" in markdown


def test_a_major_version_change_is_flagged_and_a_minor_upgrade_is_not(repo: Repo) -> None:
    repo.write("orders.yaml", orders(version="4.0.0"))
    run = repo.diff("clusters", "--base", "HEAD", "--allow-unknown-version")
    assert run.code == 2
    assert "REFUSED by the reconciler: shop/orders: spec.version 3.2.1 -> 4.0.0 changes the " \
        "major version" in run.stdout

    repo.write("orders.yaml", orders(version="3.3.0"))
    minor = repo.diff("clusters", "--base", "HEAD", "--allow-unknown-version")
    assert minor.code == 1 and "REFUSED" not in minor.stdout


def test_a_version_that_is_no_plain_number_is_not_judged(repo: Repo) -> None:
    """3.2.1.beta is a valid spec.version but no number to compare: the change is shown, neither
    refused nor an error."""
    repo.write("orders.yaml", orders(version="3.2.1.beta"))
    repo.commit("orders: beta")
    repo.write("orders.yaml", orders(version="3.2.0"))

    run = repo.diff("clusters", "--base", "HEAD")

    assert run.code == 1, run.stderr
    assert "REFUSED" not in run.stdout
    assert listed(run) == [("changed", "StatefulSet shop/orders")]
    repo.write("orders.yaml", orders(version="3.2.1.beta"))
    back = repo.diff("clusters", "--base", "HEAD~1",  # 3.2.1 -> 3.2.1.beta
                     "--allow-unknown-version")
    assert back.code == 1 and "REFUSED" not in back.stdout


def test_a_shallow_clone_without_the_base_says_to_fetch_the_history(
        repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo.write("dev.yaml", dev(replicas=5))
    repo.commit("dev: five nodes")
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo.root}", str(clone)],
                   check=True, env=repo.env)
    monkeypatch.chdir(clone)

    run = kaiwu("diff", "clusters", "--base", "HEAD~1")

    assert run.code == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[0] == (
        "HEAD~1: is not in this clone, which is shallow (check out the full history "
        "(actions/checkout with fetch-depth: 0, GitLab GIT_DEPTH: 0) or run git fetch "
        "--unshallow origin)")


def test_outside_a_git_repository_diff_names_the_fix(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    write_yaml(tmp_path / "plain" / "clusters" / "dev.yaml", dev())
    isolated_git(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path / "plain")
    run = kaiwu("diff", "clusters", "--base", "origin/main")
    assert run.code == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines()[0] == (
        ".: is not a git repository (run kaiwu diff inside the repository, name it with "
        "--repo DIR, or compare two directories)")


def test_without_git_diff_of_revisions_says_to_install_it(repo: Repo, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "no-git").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-git"))
    run = repo.diff("clusters", "--base", "HEAD")
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr.splitlines()[0] == (
        "git: git is not installed (install git, or compare two directories)")


def test_a_repository_missing_an_object_names_the_git_command_that_failed(repo: Repo) -> None:
    """A clone that lost a file's blob (a broken partial clone, a pruned object store): git's
    own last line of complaint, the command that gave it, and what to check. (The file is
    changed in the working tree: one it holds alike is known without asking git.)"""
    blob = repo.git("rev-parse", "HEAD:clusters/dev.yaml")
    (repo.root / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    repo.write("dev.yaml", dev(replicas=4))

    run = repo.diff("clusters", "--base", "HEAD")

    assert (run.code, run.stdout) == (2, "")
    said = run.stderr.splitlines()[0]
    assert said.startswith("git cat-file HEAD:clusters/dev.yaml: "), said
    assert "missing" in said or "fatal" in said, said  # git's words vary by version
    assert said.endswith(" (check the revision name (e.g. origin/main) and the path)"), said


def test_a_git_that_fails_without_a_word_is_still_named(repo: Repo, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "mute-git" / "git"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    run = repo.diff("clusters", "--base", "HEAD")
    assert run.code == 2
    assert run.stderr.splitlines()[0] == (
        "git rev-parse --show-toplevel: failed (check the revision name (e.g. origin/main) and "
        "the path)")


def test_gits_own_output_never_reaches_the_terminal(repo: Repo,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """git's answers (the commit a revision names, its complaints) are read, not passed on:
    what the user sees is the diff, or the problem in kaiwu's words."""
    assert repo.diff("clusters", "--base", "HEAD").code == 0
    assert repo.diff("clusters", "--base", "no-such-branch").code == 2
    assert capfd.readouterr() == ("", "")


def test_git_problems_name_where_without_a_line_or_spec_path(repo: Repo, tmp_path: Path) -> None:
    """The problems `kaiwu diff` prints as `where: problem (fix)`: line 0 and no path, so they
    sort with the problems of files like any other."""
    plain, elsewhere = tmp_path / "plain", str(tmp_path / "elsewhere")
    plain.mkdir()
    for path, revision, git_dir, where, message in [
            ("clusters", "nope", repo.root, "nope", "is not a revision of this repository"),
            ("clusters", "HEAD", plain, str(plain), "is not a git repository"),
            (elsewhere, "HEAD", repo.root, elsewhere, "is not inside the git repository")]:
        with pytest.raises(RenderError) as raised:
            diff.documents_at_revision(path, revision, git_dir)
        [problem] = raised.value.problems
        assert (problem.file, problem.line, problem.path, problem.message) == (
            where, 0, "", message)


def test_the_repository_can_be_named_from_outside_it(repo: Repo, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`--repo infra` from infra's parent: the path is the user's, relative to where they stand
    (a real process does the same in test_cli.py)."""
    repo.write("dev.yaml", dev(replicas=4))
    monkeypatch.chdir(tmp_path)
    run = kaiwu("diff", "infra/clusters", "--base", "HEAD", "--repo", "infra")
    assert run.code == 1, run.stderr
    assert listed(run) == [("changed", "StatefulSet kaiwu-dev/dev")]


def test_a_path_outside_the_repository_is_named(repo: Repo, tmp_path: Path) -> None:
    run = repo.diff(str(tmp_path / "elsewhere"), "--base", "HEAD")
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr.splitlines()[0] == (
        f"{tmp_path / 'elsewhere'}: is not inside the git repository (run kaiwu diff from "
        f"inside {repo.root})")


def test_an_invalid_spec_in_the_working_tree_is_named_with_its_path(repo: Repo) -> None:
    repo.write("dev.yaml", dev(extraArgs=["--join=elsewhere:26257"]))
    run = repo.diff("clusters", "--base", "HEAD")
    assert run.code == 2
    assert re.match(r"^clusters/dev\.yaml:[0-9]+: spec\.extraArgs\[0\]: --join is managed",
                    run.stderr)


def test_changing_the_start_mode_is_refused(repo: Repo) -> None:
    changed = dev(startMode="single-replica")
    repo.write("dev.yaml", changed)
    repo.commit("dev: single replica")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")

    assert run.code == 2
    line = line_of(to_text(changed), 0, ("spec", "startMode"))
    assert run.stderr.splitlines()[0] == (
        f"HEAD:clusters/dev.yaml:{line}: spec.startMode: the start mode cannot change "
        "(multi-replica -> single-replica): it is written into every store (keep the old "
        "start mode, or create a new cluster and migrate the data)")
    assert run.stdout == ""


def test_shrinking_volumes_is_refused(repo: Repo) -> None:
    repo.write("orders.yaml", orders(storage={"size": "50Gi"}))
    run = repo.diff("clusters", "--base", "HEAD")
    assert run.code == 2
    assert "spec.storage.size: volumes cannot shrink (100Gi -> 50Gi) (keep 100Gi or more)" in (
        run.stderr)


def test_growing_volumes_is_shown_with_what_the_reconciler_will_need(repo: Repo) -> None:
    """The manifests show only the claim template: the reviewer is told, first, that existing
    volumes grow only where the StorageClass allows it, and that there is no way back."""
    repo.write("orders.yaml", orders(storage={"size": "200Gi"}))
    run = repo.diff("clusters", "--base", "HEAD")
    assert run.code == 1, "a change, not a refusal"
    assert run.stdout.splitlines()[0] == (
        "NOTE: shop/orders: spec.storage.size 100Gi -> 200Gi: volumes grow only if their "
        "StorageClass allows expansion; no going back down")
    markdown = repo.diff("clusters", "--base", "HEAD", "--format", "markdown").stdout
    assert "> **Note:** shop/orders: spec.storage.size 100Gi -> 200Gi" in markdown

    repo.write("orders.yaml", orders(replicas=5))
    assert "NOTE" not in repo.diff("clusters", "--base", "HEAD").stdout


def test_scaling_in_a_single_replica_cluster_is_refused(tmp_path: Path) -> None:
    write_yaml(tmp_path / "old" / "c.yaml", dev(startMode="single-replica", replicas=2))
    write_yaml(tmp_path / "new" / "c.yaml", dev(startMode="single-replica", replicas=1))
    run = kaiwu("diff", tmp_path / "old", tmp_path / "new")
    assert run.code == 2
    assert "a single-replica cluster cannot scale in" in run.stderr


def test_diff_usage_mistakes_exit_2_and_say_what_diff_takes(tmp_path: Path) -> None:
    for args, said in [
        ((tmp_path,), "diff takes two directories, or one path with --base REV"),
        ((tmp_path, tmp_path, "--base", "HEAD"), "with --base, diff takes exactly one path"),
        ((tmp_path, tmp_path, "--head", "HEAD"),
         "diff takes two directories, or one path with --base REV"),
    ]:
        run = kaiwu("diff", *args)
        assert (run.code, run.stdout) == (2, ""), args
        assert run.stderr.strip() == f"kaiwu diff: {said}", args


# --- secrets -----------------------------------------------------------------------------------

def test_secret_looking_env_values_are_masked_and_equal_values_mask_equally(repo: Repo) -> None:
    repo.write("orders.yaml", orders(extraEnv=[{"name": "DB_PASSWORD", "value": "s3cret"},
                                               {"name": "TZ", "value": "Asia/Shanghai"}]))
    repo.write("billing.yaml", cluster("billing", "shop", extraEnv=[
        {"name": "DB_PASSWORD", "value": "s3cret"},
        {"name": "API_TOKEN", "value": "hunter2"}]))
    repo.commit("rotate the password, add billing")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")

    assert run.code == 1
    for secret in ("hunter2", "s3cret"):
        assert secret not in run.stdout
    assert "+          value: Asia/Shanghai\n" in run.stdout, "other values stay readable"
    masks = {line.split()[0][0] + name: MASK.findall(line)[0]
             for line, name in _masked_lines(run.stdout)}
    # orders: hunter2 -> s3cret is visibly a change; billing's s3cret masks like orders' new one,
    # and billing's token hunter2 like orders' old password.
    assert masks["-orders:DB_PASSWORD"] != masks["+orders:DB_PASSWORD"]
    assert masks["+orders:DB_PASSWORD"] == masks["+billing:DB_PASSWORD"]
    assert masks["-orders:DB_PASSWORD"] == masks["+billing:API_TOKEN"]


def _masked_lines(text: str) -> Iterator[tuple[str, str]]:
    """(diff line, "cluster:VAR") for every masked env value in a unified diff."""
    cluster_name, variable = "", ""
    for line in text.splitlines():
        if line.startswith("+++ ") or line.startswith("--- "):
            found = re.search(r"/([a-z-]+)/statefulset-", line)
            cluster_name = found[1] if found else cluster_name
        elif "- name: " in line:
            variable = line.split("- name: ")[1]
        elif MASK.search(line) and line.startswith(("+", "-")):
            yield line, f"{cluster_name}:{variable}"


def test_a_secret_changed_alone_shows_as_a_change_of_masks(repo: Repo) -> None:
    repo.write("orders.yaml", orders(extraEnv=[{"name": "DB_PASSWORD", "value": "hunter3"},
                                               {"name": "TZ", "value": "UTC"}]))
    run = repo.diff("clusters", "--base", "HEAD")
    assert run.code == 1
    changed = [line for line in run.stdout.splitlines() if line.startswith(("+", "-"))
               and not line.startswith(("+++", "---"))]
    assert len(changed) == 2 and all(MASK.search(line) for line in changed)


# --- markdown for pull-request comments ------------------------------------------------------

def test_markdown_has_a_summary_table_and_one_collapsible_diff_per_object(repo: Repo) -> None:
    repo.write("dev.yaml", dev(replicas=4))
    repo.write("edge.yaml", cluster("edge", "kaiwu-edge", startMode="single-node", replicas=1))
    repo.commit("scale dev, add edge")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD", "--format", "markdown")

    assert run.code == 1
    lines = run.stdout.splitlines()
    assert lines[0] == "### KaiwuDB manifests: 5 added, 1 changed, 0 removed, 9 unchanged"
    assert lines[1:4] == ["", "| change | object |", "| --- | --- |"]
    assert "| changed | `StatefulSet kaiwu-dev/dev` |" in lines
    assert "` |\n\n<details><summary>" in run.stdout, "a blank line between table and diffs"
    assert run.stdout.count("<details><summary>") == 6
    assert run.stdout.count("```diff\n") == run.stdout.count("</details>") == 6


def test_markdown_says_so_when_nothing_changes(repo: Repo) -> None:
    run = repo.diff("clusters", "--base", "HEAD", "--format", "markdown")
    assert run.code == 0
    assert run.stdout == "**KaiwuDB manifests:** no changes (10 objects unchanged).\n"


def test_a_huge_change_stays_within_the_comment_budget(repo: Repo) -> None:
    """Forty new clusters with long environments: far more diff than a comment can hold."""
    env = [{"name": f"SETTING_{index:03d}", "value": "x" * 60} for index in range(60)]
    for index in range(40):
        repo.write(f"tenant-{index:02d}.yaml",
                   cluster(f"tenant-{index:02d}", "tenants", extraEnv=env))
    repo.commit("forty tenants")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD", "--format", "markdown")

    assert run.code == 1
    assert len(run.stdout) <= diff.MARKDOWN_BUDGET
    assert run.stdout.count("| added |") == 200, "the table lists every object"
    assert re.search(r"^_[0-9]+ more object diffs left out to fit the comment; run `kaiwu diff` "
                     r"locally for all of them\._$", run.stdout, re.MULTILINE)
    assert run.stdout.count("<details>") == run.stdout.count("</details>") >= 1


def test_a_cut_table_keeps_to_half_the_budget_and_counts_what_it_left_out() -> None:
    changes = tuple(diff.ObjectChange(f"StatefulSet shop/c-{i:03d}", "added", "+x\n")
                    for i in range(100))
    text = diff.format_markdown(diff.TreeDiff(changes, unchanged=0), budget=3000)
    more = re.search(r"^\| \.\.\. \| _([0-9]+) more objects: run `kaiwu diff` locally for the "
                     r"full list_ \|\n", text, re.MULTILINE)
    assert more is not None, text
    assert more.end() <= 3000 // 2, "the table, its last row included, within half the budget"
    assert text.count("| added |") + int(more[1]) == 100


def test_a_table_too_long_for_the_comment_is_cut_too() -> None:
    """Thousands of changed objects: even the summary table must not break the budget."""
    changes = tuple(diff.ObjectChange(f"StatefulSet tenants-with-a-long-namespace/tenant-{i:05d}",
                                      "added", "+x\n") for i in range(5000))
    text = diff.format_markdown(diff.TreeDiff(changes, unchanged=0))
    assert len(text) <= diff.MARKDOWN_BUDGET
    assert text.startswith("### KaiwuDB manifests: 5000 added, 0 changed, 0 removed")
    assert "| added | `StatefulSet tenants-with-a-long-namespace/tenant-00000` |" in text
    assert "| ... | _" in text and "more objects" in text
    assert text.rstrip().endswith("run `kaiwu diff` locally for all of them._")


def test_a_backup_schedule_kept_beside_its_cluster_is_diffed_like_its_objects(
        repo: Repo) -> None:
    schedule: dict[str, Any] = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackupSchedule",
                "metadata": {"name": "nightly", "namespace": "kaiwu-dev"},
                "spec": {"cluster": {"name": "dev"}, "schedule": "0 0 3 * * *",
                         "template": {"target": {"volume": {"claimName": "dumps"}}}}}
    repo.write("dev-backups.yaml", schedule)
    added = repo.diff("clusters", "--base", "HEAD")
    assert added.code == 1, added.stderr
    assert listed(added) == [("added", "KaiwuBackupSchedule kaiwu-dev/nightly")]
    repo.commit("dev: nightly backups")

    schedule["spec"]["schedule"] = "0 30 2 * * *"
    repo.write("dev-backups.yaml", schedule)
    changed = repo.diff("clusters", "--base", "HEAD")
    assert listed(changed) == [("changed", "KaiwuBackupSchedule kaiwu-dev/nightly")]
    assert "-  schedule: 0 0 3 * * *\n" in changed.stdout
    assert "+  schedule: 0 30 2 * * *\n" in changed.stdout


@pytest.mark.parametrize("name", ["集群.yaml", "tab\there.yaml", 'quote"d.yaml'])
def test_a_file_named_in_any_script_is_compared_and_its_rules_apply(repo: Repo,
                                                                   name: str) -> None:
    """Git quotes such names in its listings unless asked for NUL-terminated ones; a quoted
    name once hid the file from the base, so a shrink read as a new cluster and passed."""
    repo.remove("orders.yaml")
    repo.write(name, orders())
    repo.commit("orders under another name")

    repo.write(name, orders(replicas=6))
    grown = repo.diff("clusters", "--base", "HEAD")
    assert grown.code == 1, grown.stderr
    assert listed(grown) == [("changed", "StatefulSet shop/orders")]

    repo.write(name, orders(storage={"size": "50Gi"}))
    shrunk = repo.diff("clusters", "--base", "HEAD")
    assert shrunk.code == 2
    assert "volumes cannot shrink (100Gi -> 50Gi)" in shrunk.stderr


def test_a_linked_cluster_file_is_followed_inside_the_revision(repo: Repo) -> None:
    """The working tree follows a symbolic link to its file; the base does too, inside the
    revision, so the rules see the spec, not the link's text."""
    (repo.root / "shared").mkdir()
    write_yaml(repo.root / "shared" / "orders.yaml", orders())
    repo.remove("orders.yaml")
    (repo.root / "clusters" / "orders.yaml").symlink_to("../shared/orders.yaml")
    repo.commit("orders from shared/")

    write_yaml(repo.root / "shared" / "orders.yaml", orders(storage={"size": "50Gi"}))
    run = repo.diff("clusters", "--base", "HEAD")

    assert run.code == 2
    assert "volumes cannot shrink (100Gi -> 50Gi)" in run.stderr


def test_a_link_out_of_the_repository_at_the_base_is_named(repo: Repo, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.yaml"
    write_yaml(outside, orders())
    repo.remove("orders.yaml")
    (repo.root / "clusters" / "orders.yaml").symlink_to(outside)
    repo.commit("orders from outside")

    run = repo.diff("clusters", "--base", "HEAD~1", "--head", "HEAD")

    assert run.code == 2
    assert ("HEAD:clusters/orders.yaml: a symbolic link out of the repository (point it at a "
            "file inside the repository, or make it a regular file)") in run.stderr


def test_a_huge_file_at_the_base_is_refused_by_its_listed_size_unread(
        repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo.root / "clusters" / "huge.yaml").write_text("# " + "x" * 4096 + "\n")
    repo.commit("a large file")
    asked: list[bytes] = []
    real = diff._git_process

    def recording(repo_dir: Path, args: list[str], stdin: bytes = b""
                  ) -> subprocess.CompletedProcess[bytes]:
        asked.append(stdin)
        return real(repo_dir, args, stdin)

    monkeypatch.setattr(diff, "INPUT_LIMITS", InputLimits(max_file_bytes=4000))
    monkeypatch.setattr(diff, "_git_process", recording)
    with pytest.raises(RenderError) as refused:
        diff.documents_at_revision("clusters", "HEAD", repo.root)
    assert [problem.file for problem in refused.value.problems] == ["HEAD:clusters/huge.yaml"]
    assert "larger than 4000 bytes" in refused.value.problems[0].message
    huge = repo.git("rev-parse", "HEAD:clusters/huge.yaml").encode()
    assert not any(huge in request for request in asked), "the huge file was read"
