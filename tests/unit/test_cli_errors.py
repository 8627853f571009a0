"""Every way a user can start `kaiwu` wrong ends in one line naming the cause and the fix.

Each subcommand runs as a user runs it (the console script, a fresh process) with a mistake:
an unknown flag, a path that does not exist, an output directory that cannot be written, no
kubeconfig, a kubeconfig that names a server nobody listens on. The exit code is the documented
one (2: fix your input; 1: the API server did not answer) and no traceback reaches stderr.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.render import EXAMPLES, Run, clean_env, kaiwu_process

UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "https://127.0.0.1:1"}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
users:
- name: nobody
  user: {token: not-a-token}
"""


def run_in(tmp_path: Path, *args: str | Path) -> Run:
    """`kaiwu ARGS` in an empty directory with no kubeconfig, git configuration or KAIWU_*."""
    env = {key: value for key, value in clean_env(tmp_path).items()
           if not key.startswith("KAIWU_") and key != "KUBECONFIG"}
    return kaiwu_process(*args, cwd=tmp_path, env=env)


def assert_one_clean_error(run: Run, code: int, *words: str) -> None:
    assert run.code == code, run.stderr
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout
    for word in words:
        assert word in run.stderr, run.stderr


@pytest.mark.parametrize("command", ["render", "validate", "diff", "reconcile"])
def test_an_unknown_flag_is_a_usage_error(tmp_path: Path, command: str) -> None:
    run = run_in(tmp_path, command, *(["."] if command == "diff" else []), "--no-such-flag")
    assert_one_clean_error(run, 2, "unrecognized arguments: --no-such-flag")


@pytest.mark.parametrize("command", [["render"], ["validate"], ["diff", "."]])
def test_a_missing_path_names_the_path(tmp_path: Path, command: list[str]) -> None:
    run = run_in(tmp_path, *command[:1], "missing-clusters", *command[1:])
    assert_one_clean_error(run, 2, "missing-clusters: no such file or directory")
    problem_lines = [line for line in run.stderr.splitlines() if "problem(s)" not in line]
    assert len(problem_lines) == 1


def test_a_diff_base_outside_a_repository_says_to_use_repo(tmp_path: Path) -> None:
    run = run_in(tmp_path, "diff", EXAMPLES, "--base", "origin/main")
    assert_one_clean_error(run, 2, "is not a git repository", "--repo DIR")


def test_an_output_directory_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    run = run_in(tmp_path, "render", EXAMPLES, "-o", blocker / "out")
    assert_one_clean_error(run, 2, "kaiwu render:")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_without_a_kubeconfig_says_where_it_looked(tmp_path: Path) -> None:
    run = run_in(tmp_path, "reconcile")
    assert_one_clean_error(run, 2, "no kubeconfig", "~/.kube/config does not exist",
                           "--kubeconfig FILE")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_with_a_kubeconfig_that_does_not_exist(tmp_path: Path) -> None:
    run = run_in(tmp_path, "reconcile", "--kubeconfig", tmp_path / "nope.yaml")
    assert_one_clean_error(run, 2, f"kubeconfig {tmp_path / 'nope.yaml'} does not exist")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_with_an_unusable_kubeconfig(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    run = run_in(tmp_path, "reconcile", "--kubeconfig", broken)
    assert_one_clean_error(run, 2, f"kubeconfig {broken} is not usable")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_with_an_unreachable_server_exits_1_naming_the_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    run = run_in(tmp_path, "reconcile", "--kubeconfig", kubeconfig)
    assert_one_clean_error(run, 1, "cannot reach the API server at https://127.0.0.1:1",
                           "--kubeconfig")
    assert len(run.stderr.splitlines()) == 1
