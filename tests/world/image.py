"""Build the reconciler's image (Dockerfile) on a machine without a Docker engine or registry.

Called by `make image` (``python -m tests.world.image``), by `make release`
(tests/world/release.py, which saves the image as an OCI archive) and by the image story
(tests/world_stories/runtime/test_image.py). It does what works on a CI machine without a
Docker engine: podman and buildah with runc and cgroupfs (crun refuses hybrid cgroups), a
containers.conf without default ulimits (the sandbox refuses raising RLIMIT_NOFILE),
``--isolation chroot``.

1. A base image: no public registry is reachable, so ``python:3.11-slim`` cannot be pulled. The
   base is debootstrapped (minbase + python3, python3-venv) from the Debian mirror this
   machine's own apt sources name, parsed at run time, and imported as
   ``localhost/kaiwu-base:bookworm``. The rootfs and the image are cached outside the work tree
   (``$KAIWU_TESTWORLD_CACHE/image``); once there, this step costs nothing.
2. A wheelhouse on the host: every dependency in requirements.lock (hashes required) and the
   setuptools the build stage builds the project's wheel with, through the host's pip
   configuration (a build has no index configuration).
3. A staged build context (the Dockerfile, sources, lock file, wheelhouse: no .git, no venv),
   and ``podman build --build-arg BASE=...``, tagged `image_tag()`: the image the default
   bundle names (``make push IMAGE=REF`` copies it to a registry).

Each step prints how long it took. Nothing here falls back to something else: a missing tool
is an error naming what .ci/run installs.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

from reconciler.install import IMAGE_REPOSITORY
from tests.world.build import default_cache_dir
from tests.world.controlplane import REPO_ROOT

TOOLS: tuple[str, ...] = ("podman", "buildah", "runc", "debootstrap")
BASE_IMAGE = "localhost/kaiwu-base:bookworm"
SUITE = "bookworm"
# setuptools for the build stage's `pip wheel` (pyproject's build-system wants >= 68; 70.1 and
# later build wheels without the separate `wheel` package).
BUILD_REQUIREMENT = "setuptools>=70.1"
CONTAINERS_CONF = "[containers]\ndefault_ulimits = []\n"


def image_tag() -> str:
    """<IMAGE_REPOSITORY>:<pyproject version>: the image `kaiwu install` runs by default
    (reconciler/install/options.py, where the repository is set), so `make push IMAGE=REF` copies
    exactly what the default bundle names."""
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"{IMAGE_REPOSITORY}:{version}"


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def require_tools() -> None:
    missing = missing_tools()
    if missing:
        raise RuntimeError(
            f"building the image needs {', '.join(missing)} (not found). .ci/run installs them: "
            f"apt-get install -y {' '.join(TOOLS)}")


def cache_dir() -> Path:
    path = default_cache_dir() / "image"
    path.mkdir(parents=True, exist_ok=True)
    return path


def podman_env() -> dict[str, str]:
    """The environment every podman call runs in: CONTAINERS_CONF without default ulimits."""
    conf = cache_dir() / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman_argv(*args: str) -> list[str]:
    return ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs", *args]


def podman(*args: str, capture: bool = False) -> str:
    done = subprocess.run(podman_argv(*args), env=podman_env(), check=False, text=True,
                          stdout=subprocess.PIPE if capture else None)
    if done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed with exit code {done.returncode}")
    return done.stdout or ""


def image_exists(tag: str) -> bool:
    return subprocess.run(podman_argv("image", "exists", tag), env=podman_env(),
                          check=False).returncode == 0


def debian_mirror() -> str:
    """The URI of this machine's own Debian archive entry for bookworm (deb822 *.sources or
    one-line sources.list), so no mirror host is ever written into the project."""
    candidates: list[tuple[str, list[str]]] = []  # (uri, suites)
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in re.split(r"\n\s*\n", Path(path).read_text(encoding="utf-8")):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if not line.startswith("#") and ":" in line:
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split():
                candidates += [(uri, fields.get("suites", "").split())
                               for uri in fields.get("uris", "").split()]
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        if os.path.exists(path):
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                parts = re.sub(r"\[[^\]]*\]", "", line.split("#", 1)[0]).split()
                if len(parts) >= 3 and parts[0] == "deb":
                    candidates.append((parts[1], [parts[2]]))
    for uri, suites in candidates:
        # The main archive (not -security, not -updates): debootstrap needs the full suite.
        if SUITE in suites and not uri.rstrip("/").endswith("-security"):
            return uri
    raise RuntimeError(f"no Debian {SUITE} entry in this machine's apt sources to debootstrap "
                       "the base image from")


def ensure_base() -> str:
    """The debootstrapped base image, made once and cached; returns its tag."""
    if image_exists(BASE_IMAGE):
        print(f"[image] base {BASE_IMAGE}: already built", flush=True)
        return BASE_IMAGE
    rootfs = cache_dir() / f"rootfs-{SUITE}"
    started = time.monotonic()
    if not (rootfs / "usr" / "bin" / "python3").exists():
        partial = rootfs.with_name(rootfs.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        mirror = debian_mirror()
        print(f"[image] debootstrap {SUITE} from {mirror} into {rootfs} (2-3 minutes)", flush=True)
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv",
                        SUITE, str(partial), mirror], check=True, stdout=subprocess.DEVNULL)
        # Apt's downloaded packages are not part of a base image.
        shutil.rmtree(partial / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (partial / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True)
        partial.rename(rootfs)  # only a finished rootfs gets the cached name
        print(f"[image] base debootstrap: {time.monotonic() - started:.1f} s", flush=True)
    imported = time.monotonic()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    done = subprocess.run(podman_argv("import", "-", BASE_IMAGE), stdin=tar.stdout,
                          env=podman_env(), check=False, stdout=subprocess.DEVNULL)
    if tar.wait() != 0 or done.returncode != 0:
        raise RuntimeError(f"importing {rootfs} as {BASE_IMAGE} failed")
    print(f"[image] base import: {time.monotonic() - imported:.1f} s", flush=True)
    return BASE_IMAGE


def wheelhouse() -> Path:
    """The locked dependencies and the build stage's setuptools as wheels, kept per lock file
    (a changed lock file gets a fresh wheelhouse)."""
    lock = REPO_ROOT / "requirements.lock"
    digest = hashlib.sha256(lock.read_bytes() + BUILD_REQUIREMENT.encode()).hexdigest()[:16]
    house = cache_dir() / f"wheelhouse-{digest}"
    if house.is_dir():
        return house
    started = time.monotonic()
    partial = house.with_name(house.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "--quiet"]
    # --no-deps: the lock is complete, and resolved with overrides.txt (pip would refuse it).
    subprocess.run([*pip, "wheel", "--no-deps", "--require-hashes", "-r", str(lock), "-w",
                    str(partial)],
                   check=True)
    subprocess.run([*pip, "download", "--only-binary=:all:", "-d", str(partial),
                    BUILD_REQUIREMENT], check=True)
    partial.rename(house)
    print(f"[image] wheelhouse: {time.monotonic() - started:.1f} s", flush=True)
    return house


def prepare() -> None:
    """The parts of an image build that wait on the network and the disk, not the cores: the
    base and the wheelhouse. `python -m tests.world.build` runs this beside the compiler, so on a
    fresh machine the image story finds both cached instead of spending its worker's minutes."""
    require_tools()
    ensure_base()
    wheelhouse()


def stage_context(house: Path) -> Path:
    """A build context holding only what the Dockerfile copies, in a directory of its own: the
    image story and the release story (`make release`, tests/world/release.py) may build at
    once on two workers, from two checkouts. The caller removes it."""
    context = Path(tempfile.mkdtemp(prefix="context-", dir=cache_dir()))
    for name in ("Dockerfile", "pyproject.toml", "README.md", "requirements.lock"):
        shutil.copy2(REPO_ROOT / name, context / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("renderer", "reconciler"):
        shutil.copytree(REPO_ROOT / package, context / package, ignore=ignore)
    shutil.copytree(house, context / "wheelhouse")
    return context


def build(base: str | None = None) -> str:
    """Build the image FROM `base` (default: the debootstrapped base); returns its tag."""
    require_tools()
    base = base or ensure_base()
    context = stage_context(wheelhouse())
    tag = image_tag()
    started = time.monotonic()
    try:
        podman("build", "--isolation", "chroot", "--build-arg", f"BASE={base}", "--tag", tag,
               "--file", str(context / "Dockerfile"), str(context))
    finally:
        shutil.rmtree(context, ignore_errors=True)
    print(f"[image] build {tag} FROM {base}: {time.monotonic() - started:.1f} s", flush=True)
    return tag


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.world.image", description=__doc__)
    parser.add_argument("--base", help=f"base image (default: {BASE_IMAGE}, debootstrapped)")
    parser.add_argument("--print-tag", action="store_true",
                        help="print the tag the build makes, build nothing (for `make push`)")
    args = parser.parse_args(argv)
    print(image_tag() if args.print_tag else build(args.base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
