"""Benchmark: the reconciler's memory when tenants label big Secrets as ours (issue 25, item 5).

Run: `.venv/bin/python bench/secret_flood.py [--secrets 10000] [--size-kib 1024]
[--before-secrets 1000] [--no-append]`.
Anyone who can create a Secret can give it the `app.kubernetes.io/managed-by=kaiwu-operator`
label the reconciler's Secret cache selects on. Each figure comes from a fresh subprocess that
lists `--secrets` such Secrets of `--size-kib` each (none controlled by a KaiwuCluster) through
the real API client (`reconciler.kube.client.Kube.list_objects`, its HTTP call answered from
memory: each page's JSON made and parsed afresh, as from the wire) into the cache's store
(`reconciler.kube.cache.kept`), and reports its peak and final resident memory (VmHWM, VmRSS):
- ours: Secrets no cluster controls kept as metadata (kinds.slim), listed 25 per page;
- before: the cache as it was (every Secret whole, 250 per page), with `--before-secrets`
  Secrets only (the full count would need the whole flood in memory);
- imports: the child's floor after importing the reconciler.
Appends the table to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import report  # noqa: E402


def memory() -> tuple[int, int]:
    """(peak, current) resident memory of this process, in bytes."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            found[key] = int(value.split()[0]) * 1024
    return found["VmHWM"], found["VmRSS"]


def child(mode: str, count: int, size_kib: int) -> None:
    from reconciler.kube import client as api
    from reconciler.kube import kinds as k
    from reconciler.kube.cache import kept

    if mode == "imports":
        print(json.dumps(memory()))
        return
    payload = base64.b64encode(os.urandom(size_kib * 768)).decode()[: size_kib * 1024]

    def secret(index: int) -> dict[str, Any]:
        return {"metadata": {"name": f"tenant-{index}", "namespace": f"tenant-{index % 100}",
                             "uid": f"uid-{index}", "resourceVersion": str(index),
                             "labels": {"app.kubernetes.io/managed-by": "kaiwu-operator"},
                             "annotations": {"note": "x" * 1024}},
                "type": "Opaque", "data": {"blob": payload}}

    class Wire(api.Kube):
        """The API server's pages, as bytes on the wire, parsed as the client parses them."""

        def __init__(self) -> None:
            pass

        def _call(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            query = dict(kwargs.get("query") or ())
            start = int(query.get("continue") or 0)
            limit = int(query["limit"])
            end = min(count, start + limit)
            body = json.dumps({"metadata": {"resourceVersion": "1", **(
                {"continue": str(end)} if end < count else {})},
                "items": [secret(i) for i in range(start, end)]}).encode()
            return json.loads(body)

    keep = kept if mode == "ours" else (lambda obj: obj)
    # Before: every Secret kept whole, in the client's default pages.
    kind = k.SECRET if mode == "ours" else k.Kind("v1", "Secret", "secrets", cached=True)
    items, _ = Wire().list_objects(kind, None, "app.kubernetes.io/managed-by=kaiwu-operator",
                                   keep=keep)
    assert len(items) == count
    print(json.dumps(memory()))


def measure(mode: str, count: int, size_kib: int) -> tuple[int, int]:
    out = subprocess.run([sys.executable, __file__, "--child", mode, "--secrets", str(count),
                          "--size-kib", str(size_kib)], check=True, capture_output=True,
                         text=True).stdout
    peak, now = json.loads(out.strip().splitlines()[-1])
    return int(peak), int(now)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secrets", type=int, default=10000)
    parser.add_argument("--size-kib", type=int, default=1024)
    parser.add_argument("--before-secrets", type=int, default=1000)
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--child", default="")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.secrets, args.size_kib)
        return 0
    mib = 1024 * 1024
    rows = []
    for mode, count in (("imports", 0), ("ours", args.secrets), ("before", args.before_secrets)):
        peak, now = measure(mode, count, args.size_kib)
        rows.append(f"| {mode} | {count} | {peak / mib:.0f} MiB | {now / mib:.0f} MiB |")
    report("Labelled Secrets in the cache (`bench/secret_flood.py`)",
           f"labelled Secrets of {args.size_kib} KiB (and a 1 KiB annotation) in 100 "
           "namespaces, none controlled by a KaiwuCluster, listed into the Secret cache.",
           ("cache", "Secrets", "peak RSS", "RSS after"), rows, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
