"""Which Kubernetes the test world runs, chosen by one setting: KAIWU_TESTWORLD_KUBE.

"1.20" (the default): kube-apiserver, controller-manager and scheduler built from Debian
bookworm's source by tests/world/build.py, etcd from Debian. "1.36": Kubernetes 1.36.2 and etcd
3.5.30, prebuilt for this machine in ../shared/k8s-1.36/ beside the project (its README says how
they were built; KAIWU_K8S_136_DIR names another folder), unpacked once into the test world's
cache after their checksums are checked. A fresh machine has no such folder: `make test` runs
1.20 and says in one line that 1.36 was skipped and why (`unavailable`).

Called by tests/world/controlplane.py (binaries and the flags each version takes),
tests/support/world_kube.py (what the stories need to know of it) and the Makefile
(`make test-136`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.world.build import default_cache_dir

KUBE_VERSION_ENV = "KAIWU_TESTWORLD_KUBE"
SUPPORTED: tuple[str, ...] = ("1.20", "1.36")
REPO_ROOT = Path(__file__).resolve().parents[2]
ARCHIVE_136 = "k8s-1.36.2-bin.tar.zst"
BINARIES_136: tuple[str, ...] = ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                 "etcd")


class KubeVersionError(RuntimeError):
    """The chosen Kubernetes cannot run here; the message says why and what to do."""


def selected() -> str:
    """The version KAIWU_TESTWORLD_KUBE names (default 1.20); anything else is refused."""
    version = os.environ.get(KUBE_VERSION_ENV, "").strip() or "1.20"
    if version not in SUPPORTED:
        raise KubeVersionError(f"{KUBE_VERSION_ENV}={version!r}: the test world runs "
                               f"{' or '.join(SUPPORTED)}")
    return version


def folder_136() -> Path:
    env = os.environ.get("KAIWU_K8S_136_DIR")
    return Path(env).expanduser() if env else REPO_ROOT.parent / "shared" / "k8s-1.36"


def unavailable_136() -> str:
    """Why the 1.36 tier cannot run here ("" when it can)."""
    archive = folder_136() / ARCHIVE_136
    if not archive.is_file():
        return (f"no Kubernetes 1.36 binaries at {archive} (set KAIWU_K8S_136_DIR to the folder "
                "holding k8s-1.36.2-bin.tar.zst and SHA256SUMS)")
    return ""


def binaries_136(cache_dir: Path | None = None) -> Path:
    """The directory holding the 1.36 binaries and etcd, unpacked on first use."""
    problem = unavailable_136()
    if problem:
        raise KubeVersionError(problem)
    home = (cache_dir or default_cache_dir()) / "k8s-1.36.2"
    target = home / "bin"
    home.mkdir(parents=True, exist_ok=True)
    # Several test workers start at once: one unpacks, under a lock, into a folder of its own
    # renamed into place when whole, so nobody runs a half-written binary.
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(os.access(target / name, os.X_OK) for name in BINARIES_136):
            return target
        archive = folder_136() / ARCHIVE_136
        expected = ""
        for line in (folder_136() / "SHA256SUMS").read_text().splitlines():
            digest_text, _, name = line.strip().partition(" ")
            if name.strip().lstrip("*") == ARCHIVE_136:
                expected = digest_text
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != expected:
            raise KubeVersionError(f"{archive}: sha256 {digest} is not SHA256SUMS' {expected!r}")
        staging = Path(tempfile.mkdtemp(prefix="bin-", dir=home))
        subprocess.run(["bash", "-o", "pipefail", "-c",
                        f"zstd -dc '{archive}' | tar -x -C '{staging}'"], check=True)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def main() -> int:
    """`python -m tests.world.kube_versions`: one line saying whether the 1.36 tier can run
    here, and why not (`make test` prints it; `make test-136` runs the tier)."""
    problem = unavailable_136()
    if problem:
        print(f"Kubernetes 1.36 tier skipped: {problem}")
    else:
        print(f"Kubernetes 1.36 tier available ({folder_136()}): make test-136 runs it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
