"""Deterministic output: YAML text per object, file layout, kustomization, atomic writes.

Called by `kaiwu render` (to files or stdout) and `kaiwu diff` (texts in memory). Same objects,
same bytes: top-level keys in the conventional Kubernetes order, every other mapping sorted,
block style, no aliases. Files go to `<out>/<namespace>/<cluster>/<kind>-<name>.yaml`; the output
directory is replaced only once everything has been written (never half-rendered).
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

TOP_LEVEL_ORDER = ("apiVersion", "kind", "metadata", "automountServiceAccountToken", "spec")
KUSTOMIZATION = "kustomization.yaml"


@dataclass(frozen=True)
class Manifest:
    """One rendered object with its file path (relative to the output directory)."""

    path: str
    body: dict[str, Any]

    @property
    def key(self) -> str:
        """`Kind namespace/name`: how diffs and logs name an object."""
        meta = self.body["metadata"]
        return f"{self.body['kind']} {meta.get('namespace', '')}/{meta['name']}"

    @property
    def text(self) -> str:
        return to_yaml(self.body)


def manifest_for(obj: dict[str, Any], cluster: str) -> Manifest:
    meta = obj["metadata"]
    return Manifest(f"{meta['namespace']}/{cluster}/{obj['kind'].lower()}-{meta['name']}.yaml",
                    obj)


def _ordered(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: (
            TOP_LEVEL_ORDER.index(key) if top and key in TOP_LEVEL_ORDER else len(TOP_LEVEL_ORDER),
            key))
        return {key: _ordered(value[key]) for key in keys}
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    yaml.width = 4096  # long command lines stay on one line: diffs stay readable
    return yaml


def to_yaml(obj: dict[str, Any]) -> str:
    """One object as YAML text, deterministic."""
    stream = io.StringIO()
    _yaml().dump(_ordered(obj, top=True), stream)
    return stream.getvalue()


def to_stream(manifests: Iterable[Manifest]) -> str:
    """All objects as one multi-document YAML stream."""
    return "".join(f"---\n{manifest.text}" for manifest in manifests)


def kustomization(manifests: Sequence[Manifest]) -> str:
    return to_yaml({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                    "resources": [manifest.path for manifest in manifests]})


class OutputDirectoryError(Exception):
    """The output directory holds something that is not an earlier render."""


def is_earlier_render(out: Path) -> bool:
    """True when `out` holds exactly what `write_tree` writes: our kustomization file (nothing
    but apiVersion, kind and resources) and the files it lists, nothing else."""
    try:
        listed = YAML(typ="safe", pure=True).load((out / KUSTOMIZATION).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):
        return False
    if not (isinstance(listed, dict) and set(listed) == {"apiVersion", "kind", "resources"}
            and listed["kind"] == "Kustomization" and isinstance(listed["resources"], list)):
        return False
    files = {path.relative_to(out).as_posix() for path in out.rglob("*") if not path.is_dir()}
    return files == {KUSTOMIZATION, *map(str, listed["resources"])}


def write_tree(manifests: Sequence[Manifest], out: Path) -> None:
    """Write every file to a temporary sibling, then swap it in for `out` in one rename.

    An existing `out` is replaced only when it is empty or exactly an earlier render: pointing
    `-o` at a source directory, or at a hand-written kustomize directory, must never delete it."""
    out = out.resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not is_earlier_render(out))):
        raise OutputDirectoryError(
            f"{out}: exists and is not an earlier render (files other than a {KUSTOMIZATION} "
            "of ours and the files it lists); choose an empty or new output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for manifest in manifests:
            target = staging / manifest.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(manifest.text, encoding="utf-8")
        (staging / KUSTOMIZATION).write_text(kustomization(manifests), encoding="utf-8")
        os.chmod(staging, 0o755)
        if out.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.rename(out, retired / out.name)
            os.rename(staging, out)
            shutil.rmtree(retired)
        else:
            os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
