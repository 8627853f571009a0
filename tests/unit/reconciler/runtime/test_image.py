"""The image users run the reconciler from (Dockerfile), read as text: two stages, the final one
running `kaiwu reconcile` as uid 10001 from a venv copied out of the build stage, with nothing
fetched during the build. tests/world_stories/runtime/test_image.py builds and runs it.

Its name: `make image` tags the very reference the default bundle runs, and `make push IMAGE=REF`
copies that tag with podman (read from `make -n`: nothing is built or pushed here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from reconciler import install
from tests.world import image
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


def test_make_image_tags_the_fully_qualified_reference_the_default_bundle_runs() -> None:
    tag = image.image_tag()
    assert tag == install.default_image() == install.Options().effective_image
    registry, _, rest = tag.partition("/")
    assert "." in registry, f"{tag}: a registry host first, not a short name"
    assert rest == f"{install.IMAGE_REPOSITORY.partition('/')[2]}:{install.version()}"
    assert tag.count("/") == 2, "registry/org/name:version"


def make_dry_run(*args: str) -> list[str]:
    """The podman commands `make -n` prints for these arguments, with this interpreter's venv.
    Nothing of a calling make (`make test-fast IMAGE=...` passes IMAGE down in MAKEFLAGS) or
    of the shell's IMAGE reaches it."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "IMAGE")}
    done = subprocess.run(["make", "--no-print-directory", "-n", *args,
                           f"BIN={Path(sys.executable).parent}"],
                          cwd=REPO_ROOT, env=env, check=True, capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if line.startswith("podman ")]


def test_make_push_copies_the_built_image_to_the_destination_given() -> None:
    """Tested against a local destination (no registry is reachable here): the one podman push
    of the tag `make image` made to IMAGE, whatever transport podman is given."""
    tag = image.image_tag()
    for destination in ("oci-archive:/tmp/kaiwu-reconciler.tar",
                        "registry.example.com/team/kaiwu-reconciler:0.1.0"):
        assert make_dry_run("push", f"IMAGE={destination}") == [
            f"podman push {tag} {destination}"]
    assert make_dry_run("push") == [f"podman push {tag} {tag}"], "by default, the name itself"
