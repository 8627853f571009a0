"""The README's quickstart is runnable as written: every command it shows is one the quickstart
story runs (tests/world_stories/runtime/test_quickstart.py) or one it names with why it cannot
run on the test world, and each rewrite the story makes is one the README's words allow."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler import install
from tests.support import quickstart


def test_every_command_of_the_quickstart_is_run_by_the_story_or_says_why_not() -> None:
    steps = quickstart.steps()
    shown = [step.shown for step in steps]
    # The path a user walks, in order: image, install, a cluster, status, upgrade, removal.
    assert shown.index("make image") < shown.index(
        "kaiwu install | kubectl apply --server-side -f -") < shown.index(
        "kubectl apply -f clusters/dev.yaml") < shown.index("kaiwu status -n kaiwu-dev") < (
        shown.index("kaiwu uninstall | kubectl delete --ignore-not-found -f -"))
    runs = [step for step in steps if step.not_here is None]
    assert len(runs) >= 8, "most of the quickstart runs on the test world"
    for step in steps:
        if step.not_here is not None:
            assert step.not_here.why, step.shown


def test_the_image_the_quickstart_saves_is_the_one_the_bundle_runs() -> None:
    steps = quickstart.steps()
    saved = next(step.shown for step in steps if step.shown.startswith("podman save"))
    assert saved.endswith(f" {install.default_image()}")


def test_a_command_no_story_runs_is_refused_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"{quickstart.BEGIN} -->\n```sh\nkaiwu install | kubectl apply -f -\n"
                      f"helm install kaiwu ./chart   # a chart\n```\n{quickstart.END}\n")
    with pytest.raises(quickstart.UnknownCommand, match=r"README.md: the quickstart shows "
                       r"'helm install kaiwu ./chart'.*NOT_HERE"):
        quickstart.steps(readme)


def test_the_story_runs_install_and_uninstall_for_the_worlds_release_and_webhook_route(
        ) -> None:
    steps = {step.shown: step for step in quickstart.steps()}
    values = {"kube_version": "1.20", "webhook_url": "https://127.0.0.1:9443",
              "python": "/venv/bin/python"}
    assert steps["kaiwu install | kubectl apply --server-side -f -"].command(**values) == (
        "kaiwu install --kube-version 1.20 | /venv/bin/python -m tests.support.quickstart "
        "route-webhook https://127.0.0.1:9443 | kubectl apply --server-side -f -")
    assert steps["kaiwu uninstall | kubectl delete --ignore-not-found -f -"].command(
        **values) == "kaiwu uninstall --kube-version 1.20 | kubectl delete --ignore-not-found -f -"
    assert steps["kubectl apply -f clusters/dev.yaml"].command(**values) == (
        "kubectl apply -f clusters/dev.yaml")


def test_commands_in_another_kind_of_block_are_refused_not_skipped(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"{quickstart.BEGIN} -->\n```bash\nhelm install kaiwu ./chart\n```\n"
                      f"{quickstart.END}\n")
    with pytest.raises(quickstart.UnknownCommand, match=r"a ```bash block"):
        quickstart.steps(readme)
