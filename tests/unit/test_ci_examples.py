"""The copy-ready pull-request previews in examples/ci/ work as shipped.

Each story takes the workflow file as a user copies it, pulls out its shell steps, and runs them
as the CI runner would: in a clone (full history, as the workflow asks) of a repository whose
main branch holds a cluster, with a pull-request branch that scales it. The `kaiwu` on PATH is
this checkout's; the commands that talk to GitHub or GitLab (`gh`, `curl`) are stand-ins that
record what they were asked to post. A change posts the markdown comment; no change posts
nothing; an invalid spec fails the job with exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.render import REPO, clean_env, cluster, write_yaml

EXAMPLES_CI = REPO / "examples" / "ci"
# Stand-ins for the forge's CLIs: record the arguments, keep a copy of the posted body.
RECORDER = """#!/bin/sh
printf '%s\\n' "$*" >> "$RECORD_DIR/calls"
cp comment.md "$RECORD_DIR/posted.md"
"""


@dataclass(frozen=True)
class Checkout:
    """A CI checkout of a pull request: `origin/main` is the base, HEAD the head."""

    root: Path
    env: dict[str, str]
    record: Path

    def run(self, script: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-e", "-c", script], cwd=self.root,
                              env={**self.env, **extra_env}, capture_output=True, text=True,
                              timeout=120, check=False)

    @property
    def calls(self) -> list[str]:
        calls = self.record / "calls"
        return calls.read_text().splitlines() if calls.exists() else []


def git(cwd: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def make_checkout(tmp_path: Path, head_spec: dict[str, Any] | None) -> Checkout:
    """main has cluster dev with 3 replicas; the pull request sets `head_spec` (None: no
    change to the rendered objects, only a comment in the file)."""
    env = clean_env(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("gh", "curl"):
        (bin_dir / tool).write_text(RECORDER)
        (bin_dir / tool).chmod(0o755)
    record = tmp_path / "record"
    record.mkdir()
    env.update(PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent),
                                     env.get("PATH", "")]),
               PYTHONPATH=str(REPO), RECORD_DIR=str(record))
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, env, "init", "-q", "-b", "main")
    base = {"replicas": 3, "tls": {"enabled": False}}
    write_yaml(upstream / "clusters" / "dev.yaml", cluster("dev", "kaiwu-dev", **base))
    git(upstream, env, "add", "-A")
    git(upstream, env, "commit", "-q", "-m", "dev cluster")
    root = tmp_path / "checkout"
    git(tmp_path, env, "clone", "-q", str(upstream), str(root))
    git(root, env, "checkout", "-q", "-b", "pull-request")
    path = root / "clusters" / "dev.yaml"
    if head_spec is None:
        path.write_text("# reviewed\n" + path.read_text())
    else:
        write_yaml(path, cluster("dev", "kaiwu-dev", **head_spec))
    git(root, env, "commit", "-q", "-am", "the change under review")
    return Checkout(root, env, record)


# --- GitHub Actions ---------------------------------------------------------------------------

def github_steps() -> dict[str, dict[str, Any]]:
    workflow = yaml.safe_load((EXAMPLES_CI / "github-actions.yaml").read_text())
    (job,) = workflow["jobs"].values()
    return {step.get("id") or step.get("name") or step["uses"]: step for step in job["steps"]}


def run_github(checkout: Checkout) -> tuple[subprocess.CompletedProcess[str], str]:
    """The diff step, then the comment step if its `if:` holds; returns the diff step's run
    and the step outputs it wrote."""
    steps = github_steps()
    outputs = checkout.root.parent / "github_output"
    outputs.write_text("")
    diff = checkout.run(steps["diff"]["run"], GITHUB_BASE_REF="main",
                        GITHUB_OUTPUT=str(outputs))
    comment = steps["Comment on the pull request"]
    assert comment["if"] == "steps.diff.outputs.changes == 'true'"
    if "changes=true" in outputs.read_text().splitlines():
        posted = checkout.run(comment["run"], PR_NUMBER="7", GH_TOKEN="token")
        assert posted.returncode == 0, posted.stderr
    return diff, outputs.read_text()


def test_the_github_workflow_checks_out_the_full_history() -> None:
    checkout_step = github_steps()["actions/checkout@v4"]
    assert checkout_step["with"]["fetch-depth"] == 0


def test_the_github_workflow_posts_the_markdown_diff_of_a_change(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path, {"replicas": 5, "tls": {"enabled": False}})
    diff, outputs = run_github(checkout)
    assert diff.returncode == 0, diff.stderr
    assert outputs.splitlines() == ["changes=true"]
    assert checkout.calls == ["pr comment 7 --edit-last --body-file comment.md"]
    posted = (checkout.record / "posted.md").read_text()
    assert posted.startswith("### KaiwuDB manifests: 0 added, 1 changed, 0 removed")
    assert "| changed | `StatefulSet kaiwu-dev/dev` |" in posted
    assert "+  replicas: 5" in posted


def test_the_github_workflow_posts_nothing_without_a_change(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path, None)
    diff, outputs = run_github(checkout)
    assert diff.returncode == 0, diff.stderr
    assert outputs.splitlines() == ["changes=false"]
    assert checkout.calls == []


def test_the_github_workflow_fails_on_an_invalid_spec(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path, {"replicas": 2})
    diff, outputs = run_github(checkout)
    assert diff.returncode == 2
    assert "spec.replicas: multi-replica needs at least 3 nodes" in diff.stderr
    assert outputs == "" and checkout.calls == []


# --- GitLab CI --------------------------------------------------------------------------------

def gitlab_script() -> str:
    """The job's script as the runner runs it, minus the install (kaiwu is already on PATH)."""
    job = yaml.safe_load((EXAMPLES_CI / "gitlab-ci.yml").read_text())["kaiwu-preview"]
    assert job["variables"]["GIT_DEPTH"] == "0"
    lines = [line for line in job["script"] if not line.startswith("pip install")]
    assert len(lines) == len(job["script"]) - 1
    return "\n".join(lines)


GITLAB_ENV = {"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main", "CI_API_V4_URL":
              "https://gitlab.example/api/v4", "CI_PROJECT_ID": "42",
              "CI_MERGE_REQUEST_IID": "7", "KAIWU_PREVIEW_TOKEN": "token"}


def test_the_gitlab_job_posts_the_markdown_diff_of_a_change(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path, {"replicas": 5, "tls": {"enabled": False}})
    run = checkout.run(gitlab_script(), **GITLAB_ENV)
    assert run.returncode == 0, run.stderr
    (call,) = checkout.calls
    assert call.endswith("https://gitlab.example/api/v4/projects/42/merge_requests/7/notes")
    assert "--data-urlencode body@comment.md" in call
    assert "+  replicas: 5" in (checkout.record / "posted.md").read_text()


@pytest.mark.parametrize(("head", "code"), [(None, 0), ({"replicas": 2}, 2)])
def test_the_gitlab_job_posts_nothing_without_a_change_and_fails_on_an_invalid_spec(
        tmp_path: Path, head: dict[str, Any] | None, code: int) -> None:
    checkout = make_checkout(tmp_path, head)
    run = checkout.run(gitlab_script(), **GITLAB_ENV)
    assert run.returncode == code, run.stderr
    assert checkout.calls == []
