"""`make release`: everything a release ships, written into dist/ from this checkout's commit.

Called by `make release` (``python -m tests.world.release``) and by the release story
(tests/world_stories/runtime/test_release.py), which runs it in a clean `git worktree` of HEAD
and checks every file. It lives beside tests/world/image.py because the image is built the way
`make image` builds it (podman, the debootstrapped base): that module is reused, not copied.

What dist/ holds, <v> the version in pyproject.toml:

- ``kaiwu_operator-<v>-py3-none-any.whl`` and ``kaiwu_operator-<v>.tar.gz``: a PEP 517 build
  (``uv build``; the wheel is built from the sdist, so the sdist is proven complete).
- ``kaiwu-reconciler-<v>.oci.tar``: the image `make image` builds, ``podman save --format
  oci-archive`` under its default name (`tests.world.image.image_tag`); ``podman load -i``
  it, or ``skopeo copy oci-archive:FILE docker://REF`` to your registry.
- ``kaiwu-operator-<v>-install.yaml``: `kaiwu install` (cluster scope, namespace kaiwu-system),
  byte for byte deploy/install.yaml for the default --kube-version.
- ``kaiwu-operator-<v>-install-namespaced.yaml``: `kaiwu install --scope namespaced
  --watch-namespace kaiwu-clusters` (WATCHED), its header saying so and how to choose another.
- ``kaiwu-operator-<v>-crds.yaml``: `kaiwu install --crds-only`, the three CRDs alone.
- ``kaiwu-operator-<v>-monitoring.tar.gz``: deploy/monitoring as it is (alert rules as a rules
  file and a PrometheusRule, the ServiceMonitor, KaiwuDB's PodMonitor, the Grafana dashboard)
  under one folder, kaiwu-operator-<v>-monitoring/.
- ``kubectl-kaiwu-v<v>.tar.gz`` and ``kubectl-kaiwu-v<v>.krew.yaml``: the krew archive
  (deploy/krew/build.py, `make krew`) and its plugin manifest, whose sha256 is the archive's.
- ``RELEASE``: the version, the git commit, whether the tree was clean, the manifests'
  Kubernetes target and the image's ID: what the release was made from.
- ``SHA256SUMS``: every other file, in ``sha256sum -c`` format.

A dirty tree (uncommitted or untracked files) is refused: a release must be reproducible from
the commit RELEASE names. ``--allow-dirty`` makes one anyway, for trying the target, and says
so in RELEASE and in its last line of output. dist/ is replaced whole (it is git-ignored build
output); another --out must be absent or empty. Each step prints how long it took.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

import yaml

from reconciler import install
from renderer.settings import DEFAULT_KUBE_VERSION, KubeVersion, supported_version
from tests.world import image
from tests.world.controlplane import REPO_ROOT

# The namespace the namespace-scoped bundle watches (its KaiwuClusters live there; the
# reconciler itself runs in kaiwu-system, as in the cluster-wide bundle).
WATCHED = "kaiwu-clusters"


class ReleaseError(RuntimeError):
    """The release cannot be made here; the message says why and what to do."""


def project_version(root: Path = REPO_ROOT) -> str:
    version: str = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    return version


def names(version: str) -> dict[str, str]:
    """The file name of each part of a release of `version` (RELEASE and SHA256SUMS aside)."""
    stem = f"kaiwu-operator-{version}"
    return {
        "wheel": f"kaiwu_operator-{version}-py3-none-any.whl",
        "sdist": f"kaiwu_operator-{version}.tar.gz",
        "image": f"kaiwu-reconciler-{version}.oci.tar",
        "install": f"{stem}-install.yaml",
        "install-namespaced": f"{stem}-install-namespaced.yaml",
        "crds": f"{stem}-crds.yaml",
        "monitoring": f"{stem}-monitoring.tar.gz",
        "krew": f"kubectl-kaiwu-v{version}.tar.gz",
        "krew-manifest": f"kubectl-kaiwu-v{version}.krew.yaml",
    }


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=False, timeout=60)
    if done.returncode != 0:
        raise ReleaseError(f"{root} is not a git checkout (git {' '.join(args)}: "
                           f"{done.stderr.strip()}): a release records the commit it was made "
                           "from")
    return done.stdout


def provenance(root: Path) -> tuple[str, list[str]]:
    """The commit checked out at `root`, and every path `git status` shows as changed or
    untracked (git-ignored files aside: the build never reads them)."""
    if shutil.which("git") is None:
        raise ReleaseError("git is not installed: a release records the commit it was made from")
    commit = _git(root, "rev-parse", "HEAD").strip()
    changed = [line for line in _git(root, "status", "--porcelain").splitlines() if line]
    return commit, changed


def manifests(version: str, kube_version: KubeVersion) -> dict[str, str]:
    """The three bundles, by the part names of `names`, as `kaiwu install` prints them."""
    parts = names(version)
    namespaced = install.Options(scope="namespaced", watch_namespace=WATCHED,
                                 kube_version=kube_version)
    command = ("kaiwu install --scope namespaced --watch-namespace NS [--namespace INSTALL_NS]"
               + (f" --kube-version {kube_version}"
                  if kube_version != DEFAULT_KUBE_VERSION else ""))
    header = "".join(f"# {line}\n" for line in (
        f"{parts['install-namespaced']}: the namespace-scoped bundle.",
        f"It watches the namespace {WATCHED} only: the reconciler, in {namespaced.namespace},",
        f"reconciles the KaiwuClusters of {WATCHED} and no other (it does not create {WATCHED}:",
        "make it first). To watch another namespace, print the bundle with the kaiwu command",
        "of this release's wheel (--scope namespaced needs --watch-namespace):",
        f"  {command}"))
    return {
        parts["install"]: install.render(install.Options(kube_version=kube_version)),
        parts["install-namespaced"]: header + install.render(namespaced),
        parts["crds"]: install.render(install.Options(crds_only=True,
                                                      kube_version=kube_version)),
    }


def deterministic_tar_gz(files: dict[str, bytes]) -> bytes:
    """`files` (archive name: content) as a tar.gz with no time, owner or order of this
    machine in it: the same bytes from the same files."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[name]))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def monitoring_archive(root: Path, version: str) -> bytes:
    """deploy/monitoring, every file under one folder named like the archive."""
    folder = root / "deploy" / "monitoring"
    prefix = f"kaiwu-operator-{version}-monitoring"
    return deterministic_tar_gz({f"{prefix}/{path.relative_to(folder).as_posix()}":
                                 path.read_bytes()
                                 for path in sorted(folder.rglob("*")) if path.is_file()})


def _step(what: str, started: float) -> None:
    print(f"[release] {what}: {time.monotonic() - started:.1f} s", flush=True)


def python_packages(root: Path, out: Path, epoch: str) -> None:
    """Wheel and sdist, `uv build` (PEP 517, in an isolated build environment); file times
    from the commit (SOURCE_DATE_EPOCH), so the same commit gives the same wheel, byte for
    byte (the sdist still differs between two builds: setuptools' tar.gz is not
    reproducible; nor is the image, whose ID RELEASE records)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "uv", "build", "--quiet", "--out-dir", str(out),
                           str(root)], env={**os.environ, "SOURCE_DATE_EPOCH": epoch},
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise ReleaseError(f"uv build failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    # uv leaves a .gitignore in an output directory it made; a release holds only its files.
    (out / ".gitignore").unlink(missing_ok=True)
    _step("wheel and sdist (uv build)", started)


def krew(root: Path, out: Path, version: str) -> None:
    """The krew archive, made by deploy/krew/build.py itself, and a copy of its manifest."""
    started = time.monotonic()
    script = root / "deploy" / "krew" / "build.py"
    # --check first: a stale manifest would be rewritten in the tree, which must stay as
    # committed (the unit test tests/unit/test_krew_manifest.py keeps it current).
    for argv in (["--check"], ["--out", str(out)]):
        done = subprocess.run([sys.executable, str(script), *argv], cwd=root, check=False,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ReleaseError(f"deploy/krew/build.py {' '.join(argv)} failed:\n{done.stderr}")
    shutil.copyfile(root / "deploy" / "krew" / "kaiwu.yaml",
                    out / names(version)["krew-manifest"])
    _step("krew archive", started)


def oci_archive(out: Path, version: str, base: str | None) -> str:
    """The image, built as `make image` builds it, saved as an OCI archive; its image ID."""
    started = time.monotonic()
    tag = image.build(base)
    target = out / names(version)["image"]
    image.podman("save", "--format", "oci-archive", "--output", str(target), tag)
    _step(f"image {tag} built and saved", started)
    return image.podman("image", "inspect", "--format", "{{.Id}}", tag, capture=True).strip()


def write_sums(out: Path) -> None:
    """SHA256SUMS over every other file of `out`, as `sha256sum` prints them."""
    lines = []
    for path in sorted(out.iterdir()):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        lines.append(f"{digest.hexdigest()}  {path.name}\n")
    (out / "SHA256SUMS").write_text("".join(lines))


def _prepare(out: Path, root: Path) -> None:
    if out.resolve() == (root / "dist").resolve():
        shutil.rmtree(out, ignore_errors=True)  # git-ignored build output: replaced whole
    elif out.exists() and any(out.iterdir()):
        raise ReleaseError(f"--out {out}: not empty; give an absent or empty directory (only "
                           "the checkout's own dist/ is replaced whole)")
    out.mkdir(parents=True, exist_ok=True)


def release(out: Path, *, root: Path = REPO_ROOT,
            kube_version: KubeVersion = DEFAULT_KUBE_VERSION, allow_dirty: bool = False,
            base: str | None = None) -> list[Path]:
    """Write the release of the checkout at `root` (the one this module is imported from)
    into `out`; the files written, SHA256SUMS last."""
    started = time.monotonic()
    version = project_version(root)
    if install.version() != version:
        raise ReleaseError(
            f"the kaiwu-operator installed in this Python ({sys.executable}) is "
            f"{install.version()}, the checkout's pyproject.toml says {version}: the bundles' "
            "headers would name the wrong version. Reinstall it (make) first")
    commit, changed = provenance(root)
    if changed and not allow_dirty:
        raise ReleaseError(
            f"{root} has uncommitted or untracked files ({', '.join(changed[:5])}"
            f"{', ...' if len(changed) > 5 else ''}): a release must be reproducible from its "
            "commit. Commit or stash them (or --allow-dirty, to try the target)")
    image.require_tools()
    _prepare(out, root)
    epoch = _git(root, "log", "-1", "--format=%ct", "HEAD").strip()
    python_packages(root, out, epoch)
    image_id = oci_archive(out, version, base)
    for name, text in manifests(version, kube_version).items():
        (out / name).write_text(text)
    (out / names(version)["monitoring"]).write_bytes(monitoring_archive(root, version))
    krew(root, out, version)
    record = {"version": version, "commit": commit,
              "tree": "DIRTY: not reproducible from the commit: " + "; ".join(changed)
              if changed else "clean",
              "kube-version": str(kube_version), "image": image.image_tag(),
              "image-id": image_id, "namespaced-bundle-watches": WATCHED}
    (out / "RELEASE").write_text(
        "# What this release was made from (make release, tests/world/release.py).\n"
        + yaml.safe_dump(record, sort_keys=False, width=1000))
    write_sums(out)
    written = sorted(out.iterdir())
    _step(f"release {version} of {commit[:12]} in {out}", started)
    if changed:
        print(f"[release] WARNING: made from a DIRTY tree ({len(changed)} changed paths): not "
              f"reproducible from {commit[:12]}; RELEASE says so", file=sys.stderr)
    return written


def _kube_version(text: str) -> KubeVersion:
    try:
        return supported_version(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.world.release",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist",
                        help="where to write it (default: the checkout's dist/, replaced)")
    parser.add_argument("--kube-version", type=_kube_version, default=DEFAULT_KUBE_VERSION,
                        help=f"the manifests' Kubernetes target, as kaiwu install's (default "
                             f"{DEFAULT_KUBE_VERSION})")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="release uncommitted changes too (RELEASE says the tree was dirty)")
    parser.add_argument("--base", help=f"the image's base (default: {image.BASE_IMAGE})")
    args = parser.parse_args(argv)
    try:
        written = release(args.out, kube_version=args.kube_version,
                          allow_dirty=args.allow_dirty, base=args.base)
    except ReleaseError as error:
        print(f"make release: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
