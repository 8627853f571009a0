"""Deterministic output: YAML text per object, file layout, kustomization, atomic writes.

Called by `kaiwu render` (to files or stdout), `kaiwu diff` (texts in memory) and
`kaiwu install`. Same objects, same bytes: top-level keys in the conventional Kubernetes order,
every other mapping sorted, block style, no aliases. Text is emitted by libyaml through PyYAML's
C emitter (`yaml.CSafeDumper`), within a small factor of the cheapest YAML a Python program can
write; the bytes are those the earlier pure-Python ruamel.yaml emitter wrote (tests/golden).

Every reader reads the output the same: a string that a YAML 1.1 reader (Go's yaml.v2, used by
kubectl and many GitOps tools; PyYAML) or a YAML 1.2 reader would take for a boolean, null,
number, timestamp or merge key (`on`, `no`, `y`, `~`, `0o17`, `12:30`, `1e3`, `.inf`,
`2001-12-14`, `<<`) is quoted.

Files go to `<out>/<namespace>/<cluster>/<kind>-<name>.yaml`; the output directory is replaced
only once everything has been written (never half-rendered), and a render that fails leaves the
output directory and its parent as they were.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from renderer.errors import OutputDirectoryError

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


_STR = "tag:yaml.org,2002:str"
_QUOTED = "tag:kaiwu,2026:read-as-other-than-string"

# Plain scalars that some YAML reader would not read as a string. YAML 1.1 (the spec, PyYAML)
# and Go's yaml.v2 (kubectl, many GitOps tools: it strips underscores, then tries Go's
# strconv.ParseInt with base prefixes and ParseFloat) and YAML 1.2 (ruamel.yaml). Broad on
# purpose: quoting a string that needed none costs two characters, reading `on` as true costs a
# broken cluster.
_NUMBER = r"""[-+][0-9_]+
  | [-+]?(?:
      0[bB][01_]+ | 0[oO][0-7_]+ | 0[xX][0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?(?:[pP][-+]?[0-9_]+)?
    | [0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?
    | (?:[0-9][0-9_]*(?:\.[0-9_]*)? | \.[0-9_]+)(?:[eE][-+]?[0-9_]+)?
    | \.(?:inf|nan) )
  | [-+](?:inf|infinity|nan)"""
_TIMESTAMP = r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt \t].*)?"
_AMBIGUOUS = re.compile(
    rf"(?:y|n|yes|no|true|false|on|off|~|null|<<|=|{_NUMBER}|{_TIMESTAMP})",
    re.IGNORECASE | re.VERBOSE | re.DOTALL)


def read_as_other_than_string(text: str) -> bool:
    """True when a YAML 1.1 or 1.2 reader would read `text`, written plain, as a boolean, null,
    number, timestamp or merge key: such a string is quoted in output."""
    return _AMBIGUOUS.fullmatch(text) is not None


class _Ordered(tuple):  # type: ignore[type-arg]
    """The (key, value) pairs of an object's top level, in output order."""


try:
    from yaml import CSafeDumper as _SafeDumper
except ImportError:  # PyYAML built without libyaml (its wheels include it): same text, slower
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]


class _Dumper(_SafeDumper):
    """libyaml's emitter with PyYAML's safe representer: no aliases (an object that appears
    twice is written twice), and strings other readers would misread are quoted."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is not yaml.ScalarNode:
            found: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
            return found
        key = (value, implicit)
        tag = _RESOLVED.get(key)
        if tag is None:  # the same few hundred keys and values recur in every object
            tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
            if tag == _STR and implicit[0] and _AMBIGUOUS.fullmatch(value) is not None:
                tag = _QUOTED  # not the string tag: the emitter will not write it plain
            if len(_RESOLVED) >= _RESOLVED_MAX:
                _RESOLVED.clear()
            _RESOLVED[key] = tag
        return tag


# Scalar tags by (text, implicit flags): resolving is pure, and dominates the emitter's own time.
_RESOLVED: dict[tuple[str, tuple[bool, bool]], str] = {}
_RESOLVED_MAX = 100_000


def _represent_ordered(dumper: _Dumper, pairs: _Ordered) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", list(pairs))  # a list: not sorted


_ANALYZER = yaml.emitter.Emitter(io.StringIO(), allow_unicode=True)


def _represent_str(dumper: _Dumper, text: str) -> yaml.Node:
    """The earlier emitter's one difference in style, kept so that output bytes do not change:
    a string that cannot be written plain and holds a quote or a line break is double-quoted
    (libyaml would single-quote it)."""
    style = None
    if "\n" in text or ("'" in text and (
            not _ANALYZER.analyze_scalar(text).allow_block_plain
            or _AMBIGUOUS.fullmatch(text) is not None)):
        style = '"'
    return dumper.represent_scalar(_STR, text, style=style)


_Dumper.add_representer(_Ordered, _represent_ordered)
_Dumper.add_representer(str, _represent_str)


def _top_level(obj: dict[str, Any]) -> _Ordered:
    return _Ordered(sorted(obj.items(), key=lambda item: (
        TOP_LEVEL_ORDER.index(item[0]) if item[0] in TOP_LEVEL_ORDER else len(TOP_LEVEL_ORDER),
        item[0])))


def to_yaml(obj: dict[str, Any]) -> str:
    """One object as YAML text, deterministic: top-level keys in TOP_LEVEL_ORDER, the rest
    sorted (the dumper sorts every nested mapping)."""
    stream = io.StringIO()
    # width: long command lines stay on one line, so diffs stay readable.
    dumper = _Dumper(stream, default_flow_style=False, width=4096, allow_unicode=True,
                     sort_keys=True)
    try:
        dumper.open()
        dumper.represent(_top_level(obj))
        dumper.close()
    finally:
        dumper.dispose()
    return stream.getvalue()


def to_stream(manifests: Iterable[Manifest]) -> str:
    """All objects as one multi-document YAML stream."""
    return "".join(f"---\n{manifest.text}" for manifest in manifests)


def kustomization(manifests: Sequence[Manifest]) -> str:
    return to_yaml({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                    "resources": [manifest.path for manifest in manifests]})


def is_earlier_render(out: Path) -> bool:
    """True when `out` holds exactly what `write_tree` writes: our kustomization file (nothing
    but apiVersion, kind and resources) and the files it lists, nothing else."""
    from ruamel.yaml import YAML  # only to read an existing output directory
    from ruamel.yaml.error import YAMLError

    try:
        listed = YAML(typ="safe", pure=True).load((out / KUSTOMIZATION).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):
        return False
    if not (isinstance(listed, dict) and set(listed) == {"apiVersion", "kind", "resources"}
            and listed["kind"] == "Kustomization" and isinstance(listed["resources"], list)):
        return False
    files = {path.relative_to(out).as_posix() for path in out.rglob("*") if not path.is_dir()}
    return files == {KUSTOMIZATION, *map(str, listed["resources"])}


def _writable(directory: Path) -> bool:
    """May this process create and remove entries in `directory` (by its effective ids)?"""
    effective = os.access in os.supports_effective_ids
    return os.access(directory, os.W_OK | os.X_OK, effective_ids=effective)


def _check_destination(out: Path) -> list[Path]:
    """Refuse, before anything is written, an output path that cannot be written as a whole;
    return the missing parent directories that `write_tree` will create (outermost first)."""
    missing: list[Path] = []
    ancestor = out.parent
    while not ancestor.exists():  # `out` is resolved: no link on the way, dangling or not
        missing.insert(0, ancestor)
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputDirectoryError(
            f"{out}: {ancestor} is a file, not a directory; choose an output path under a "
            "directory")
    if not _writable(ancestor):
        raise OutputDirectoryError(
            f"{out}: cannot create it, {ancestor} is read-only for this user; choose a writable "
            "place, or make it writable")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not is_earlier_render(out))):
        raise OutputDirectoryError(
            f"{out}: exists and is not an earlier render (files other than a {KUSTOMIZATION} "
            "of ours and the files it lists); choose an empty or new output directory")
    if out.is_dir():
        locked = [path for path in (out, *out.rglob("*")) if path.is_dir() and not _writable(path)]
        if locked:
            raise OutputDirectoryError(
                f"{out}: the earlier render cannot be replaced, {locked[0]} is read-only; make "
                f"it writable (chmod -R u+w {out}) or choose another output directory")
    return missing


def write_tree(manifests: Sequence[Manifest], out: Path) -> None:
    """Write every file to a temporary sibling, then swap it in for `out` in one rename.

    An existing `out` is replaced only when it is empty or exactly an earlier render: pointing
    `-o` at a source directory, or at a hand-written kustomize directory, must never delete it.
    Whatever fails (a read-only directory, a full disk), `out` and its parent are left as they
    were: the staging directory, any parent directories made for `out`, and a retired earlier
    render are removed or put back. Raises OutputDirectoryError for a destination refused up
    front, OSError for a failure while writing."""
    import shutil  # only a render into a directory writes files: --stdout and diff do not
    import tempfile

    out = out.resolve()
    try:
        missing = _check_destination(out)
    except PermissionError as error:  # a parent that cannot even be looked into
        raise OutputDirectoryError(f"{out}: {error.strerror}: {error.filename}; choose a path "
                                   "you may read and write") from error
    staging: Path | None = None
    retired: Path | None = None
    moved_out = False
    try:
        for directory in missing:
            directory.mkdir()
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        for manifest in manifests:
            parts = manifest.path.split("/")
            if manifest.path.startswith("/") or any(p in ("", ".", "..") for p in parts):
                # Paths are made of names from the input: one that would leave `out` is a bug
                # upstream (every name is checked), refused here all the same.
                raise OutputDirectoryError(f"refusing to write {manifest.path!r}: it is not a "
                                           "plain path inside the output directory")
            target = staging / manifest.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(manifest.text, encoding="utf-8")
        (staging / KUSTOMIZATION).write_text(kustomization(manifests), encoding="utf-8")
        os.chmod(staging, 0o755)
        if out.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.rename(out, retired / out.name)
            moved_out = True
        os.rename(staging, out)
        staging = None
    except BaseException:
        if moved_out and retired is not None:
            os.rename(retired / out.name, out)  # the earlier render goes back where it was
        for leftover in (staging, retired):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
        for directory in reversed(missing):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise
    if retired is not None:
        shutil.rmtree(retired)
