"""Build the archive krew installs for `kubectl kaiwu`, and keep deploy/krew/kaiwu.yaml true to it.

Run: `python deploy/krew/build.py [--out DIR]` (`make krew`): writes
DIR/kubectl-kaiwu-v<version>.tar.gz (default dist/), holding the launcher deploy/krew/
kubectl-kaiwu, and rewrites the manifest's version, uri and sha256 to match. `--check` writes
nothing and exits 1 when the manifest says otherwise than a build would (tests/unit/
test_krew_manifest.py runs it). The archive is the same bytes on every build (no time, owner or
name of this machine in it), so its sha256 can be checked in.

The archive holds a launcher only: krew copies files, it cannot pip-install the Python package
the plugin is (the manifest's caveats say so).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import sys
import tarfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MANIFEST = HERE / "kaiwu.yaml"
LAUNCHER = HERE / "kubectl-kaiwu"
# No release publishes the archive yet: `.invalid` (RFC 2606) can never resolve, so the manifest
# never points krew at someone else's file. Install with --archive (docs/install.md).
URI = "https://releases.invalid/kaiwu-operator/{version}/kubectl-kaiwu-{version}.tar.gz"


def version() -> str:
    return "v" + tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def archive() -> bytes:
    """The launcher in a tar.gz, deterministically: fixed time, owner and mode, stored."""
    data = LAUNCHER.read_bytes()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("kubectl-kaiwu")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    # Level 0: one stored deflate block (the tar is 10 KiB), the same bytes from every zlib
    # (a compressing level may differ between zlib builds, and the sha256 with it).
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def manifest_text(text: str, release: str, digest: str) -> str:
    """The manifest with its version, uri and sha256 set (every other line as written)."""
    text = re.sub(r"(?m)^(  version: ).*$", rf"\g<1>{release}", text)
    text = re.sub(r"(?m)^(    uri: ).*$", rf"\g<1>{URI.format(version=release)}", text)
    return re.sub(r"(?m)^(    sha256: ).*$", rf"\g<1>{digest}", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the manifest is stale")
    args = parser.parse_args()
    release, data = version(), archive()
    digest = hashlib.sha256(data).hexdigest()
    text = MANIFEST.read_text()
    wanted = manifest_text(text, release, digest)
    if args.check:
        if wanted != text:
            print(f"{MANIFEST.relative_to(ROOT)} is stale (version {release}, sha256 {digest}): "
                  "run make krew", file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"kubectl-kaiwu-{release}.tar.gz"
    target.write_bytes(data)
    MANIFEST.write_text(wanted)
    print(f"wrote {target} (sha256 {digest}) and {MANIFEST.relative_to(ROOT)}; install it with "
          f"kubectl krew install --manifest={MANIFEST.relative_to(ROOT)} --archive={target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
