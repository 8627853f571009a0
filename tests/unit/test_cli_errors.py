"""Every way a user can start `kaiwu` wrong ends in one line naming the cause and the fix.

Each subcommand runs with a mistake: an unknown flag, a path that does not exist, an output
directory that cannot be written, no kubeconfig, a kubeconfig that names a server nobody listens
on. The exit code is the documented one (2: fix your input; 1: the API server did not answer)
and no traceback reaches stderr.

Most stories call the console script's function (reconciler.cli.main) in this process, in an
empty working directory with no kubeconfig, git configuration or KAIWU_* variable: an exception
escaping it fails the story as a traceback would fail the user. The unknown-flag stories (every
command) and the unreachable server (exit 1) start the installed console script in a fresh
process, so the exit status is the one a shell sees.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler import cli
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
    """`kaiwu ARGS` in a fresh process, in an empty directory with no kubeconfig, git
    configuration or KAIWU_*."""
    env = {key: value for key, value in clean_env(tmp_path).items()
           if not key.startswith("KAIWU_") and key != "KUBECONFIG"}
    return kaiwu_process(*args, cwd=tmp_path, env=env)


@pytest.fixture
def kaiwu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Run]]:
    """`kaiwu ARGS` in this process, set up as run_in sets up the process; `kaiwu reconcile`
    sets up logging, which is put back afterwards."""
    env = {key: value for key, value in clean_env(tmp_path).items()
           if not key.startswith("KAIWU_") and key != "KUBECONFIG"}
    for key in set(os.environ) - set(env):
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    root, urllib3 = logging.getLogger(), logging.getLogger("urllib3")
    saved = root.handlers[:], root.level, urllib3.level

    def run(*args: str | Path) -> Run:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main([str(arg) for arg in args])
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code if isinstance(exit_.code, int) else 2
        return Run(code, out.getvalue(), err.getvalue())

    yield run
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    urllib3.setLevel(saved[2])


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
def test_a_missing_path_names_the_path(kaiwu: Callable[..., Run], command: list[str]) -> None:
    run = kaiwu(*command[:1], "missing-clusters", *command[1:])
    assert_one_clean_error(run, 2, "missing-clusters: no such file or directory")
    problem_lines = [line for line in run.stderr.splitlines() if "problem(s)" not in line]
    assert len(problem_lines) == 1


def test_a_diff_base_outside_a_repository_says_to_use_repo(kaiwu: Callable[..., Run]) -> None:
    run = kaiwu("diff", EXAMPLES, "--base", "origin/main")
    assert_one_clean_error(run, 2, "is not a git repository", "--repo DIR")


def test_an_output_directory_that_cannot_be_made_is_one_line(kaiwu: Callable[..., Run],
                                                             tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    run = kaiwu("render", EXAMPLES, "-o", blocker / "out")
    assert_one_clean_error(run, 2, "kaiwu render:")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_without_a_kubeconfig_says_where_it_looked(kaiwu: Callable[..., Run]) -> None:
    run = kaiwu("reconcile")
    assert_one_clean_error(run, 2, "no kubeconfig", "~/.kube/config does not exist",
                           "--kubeconfig FILE")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_with_a_kubeconfig_that_does_not_exist(kaiwu: Callable[..., Run],
                                                         tmp_path: Path) -> None:
    run = kaiwu("reconcile", "--kubeconfig", tmp_path / "nope.yaml")
    assert_one_clean_error(run, 2, f"kubeconfig {tmp_path / 'nope.yaml'} does not exist")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_with_an_unusable_kubeconfig(kaiwu: Callable[..., Run],
                                               tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    run = kaiwu("reconcile", "--kubeconfig", broken)
    assert_one_clean_error(run, 2, f"kubeconfig {broken} is not usable")
    assert len(run.stderr.splitlines()) == 1


def test_reconcile_with_an_unreachable_server_exits_1_naming_the_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    run = run_in(tmp_path, "reconcile", "--kubeconfig", kubeconfig)
    assert_one_clean_error(run, 1, "cannot reach the API server at https://127.0.0.1:1",
                           "--kubeconfig")
    assert len(run.stderr.splitlines()) == 1
