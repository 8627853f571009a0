"""The image users run the reconciler from (Dockerfile), read as text: two stages, the final one
running `kaiwu reconcile` as uid 10001 from a venv copied out of the build stage, with nothing
fetched during the build. tests/world_stories/runtime/test_image.py builds and runs it.
"""

from __future__ import annotations

from tests.world.controlplane import REPO_ROOT


def instructions() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined, comments dropped."""
    text = (REPO_ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            op, _, arg = line.strip().partition(" ")
            found.append((op.upper(), " ".join(arg.split())))
    return found


def stages() -> list[list[tuple[str, str]]]:
    split: list[list[tuple[str, str]]] = []
    for op, arg in instructions():
        if op == "FROM":
            split.append([])
        if split:
            split[-1].append((op, arg))
    return split


def test_the_base_defaults_to_the_public_python_image_and_can_be_overridden() -> None:
    assert instructions()[0] == ("ARG", "BASE=python:3.11-slim")
    build, final = stages()
    assert build[0] == ("FROM", "${BASE} AS build")
    assert final[0] == ("FROM", "${BASE}")


def test_the_build_stage_installs_only_locked_wheels_without_an_index() -> None:
    build, _ = stages()
    env = " ".join(arg for op, arg in build if op == "ENV")
    assert "PIP_NO_INDEX=1" in env and "PIP_NO_CACHE_DIR=1" in env
    run = " ".join(arg for op, arg in build if op == "RUN")
    assert "--require-hashes -r /src/requirements.lock" in run
    assert "pip uninstall --yes pip" in run
    copied = {arg.split()[0] for op, arg in build if op == "COPY"}
    assert {"wheelhouse/", "requirements.lock", "renderer", "reconciler"} <= copied
    assert all((REPO_ROOT / name).exists() for name in copied - {"wheelhouse/"})


def test_the_final_stage_is_the_venv_run_as_uid_10001() -> None:
    _, final = stages()
    copies = [arg for op, arg in final if op == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"], "no sources, wheels or caches"
    assert ("USER", "10001:10001") in final
    assert final[-1] == ("ENTRYPOINT", '["kaiwu", "reconcile"]')
