"""The image users run the reconciler from (Dockerfile): `kaiwu reconcile`, as a non-root user,
with everything the packages read at run time.
"""

from __future__ import annotations

from pathlib import Path

from tests.world.controlplane import REPO_ROOT


def test_the_image_runs_kaiwu_reconcile_as_a_non_root_user() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text().splitlines()
    instructions = [line.split(None, 1) for line in dockerfile
                    if line.strip() and not line.startswith("#") and line[0].isupper()]
    assert instructions[0] == ["FROM", "python:3.11-slim"]
    user = next(arg for op, arg in instructions if op == "USER")
    assert not user.startswith(("0", "root"))
    assert instructions[-1] == ["ENTRYPOINT", '["kaiwu", "reconcile"]']
    copied = {arg.split()[0] for op, arg in instructions if op == "COPY"}
    # renderer.schema reads crd/ beside the packages: the image needs all three.
    assert {"crd", "renderer", "reconciler"} <= copied
    assert all((REPO_ROOT / name).exists() for name in copied if name != "./")
    assert Path(REPO_ROOT / "pyproject.toml").exists()
