"""Benchmark: the reconciler's memory when tenants flood its caches with big objects (issue 25,
item 5): labelled Secrets, or KaiwuBackups.

Run: `.venv/bin/python bench/secret_flood.py [--kind secret|backup] [--count N]
[--size-kib K] [--before-count M] [--no-append]`.
- secret (the default; 10,000 of 1024 KiB, 1,000 before): anyone who can create a Secret can
  give it the `app.kubernetes.io/managed-by=kaiwu-operator` label the reconciler's Secret cache
  selects on; these carry `--size-kib` of data (and a 1 KiB annotation), none is controlled by a
  KaiwuCluster.
- backup (10,000 of 200 KiB, 1,000 before): the KaiwuBackup cache watches every KaiwuBackup of
  the watched namespaces, and anyone who may create one may give it `--size-kib` of
  annotations (the API server allows 256 KiB), here half under the one annotation the
  reconciler reads (the schedule's slot), half under another, with a managedFields entry.
Each figure comes from a fresh subprocess that lists `--count` such objects, in 100 namespaces,
through the real API client (`reconciler.kube.client.Kube.list_objects`, its HTTP call answered
from memory: each page's JSON made and parsed afresh, as from the wire) into the cache's store
(`reconciler.kube.store.kept`), and reports its peak and final resident memory (VmHWM, VmRSS):
- ours: the cache as it is (kinds.slim: a Secret no cluster controls kept as metadata, a
  KaiwuBackup as the fields its readers use), listed 25 per page;
- before: the cache as it was (every object whole, 250 per page), with `--before-count`
  objects only (the full count would need the whole flood in memory);
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import report  # noqa: E402


@dataclass(frozen=True)
class Flood:
    """One kind of flood: its defaults, the words of its table, and how to list it."""

    count: int
    size_kib: int
    before_count: int
    heading: str
    caption: str
    selector: str | None  # the cache's label selector


FLOODS = {
    "secret": Flood(10000, 1024, 1000, "Labelled Secrets in the cache (`bench/secret_flood.py`)",
                    "labelled Secrets of {size} KiB (and a 1 KiB annotation) in 100 namespaces, "
                    "none controlled by a KaiwuCluster, listed into the Secret cache.",
                    "app.kubernetes.io/managed-by=kaiwu-operator"),
    "backup": Flood(10000, 200, 1000, "Tenants' KaiwuBackups in the cache "
                    "(`bench/secret_flood.py --kind backup`)",
                    "KaiwuBackups with {size} KiB of annotations (half under the schedule's "
                    "slot annotation) and a managedFields entry in 100 namespaces, listed into "
                    "the KaiwuBackup cache.", None),
}


def memory() -> tuple[int, int]:
    """(peak, current) resident memory of this process, in bytes."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            found[key] = int(value.split()[0]) * 1024
    return found["VmHWM"], found["VmRSS"]


def child(kind_name: str, mode: str, count: int, size_kib: int) -> None:
    from reconciler.kube import client as api
    from reconciler.kube import kinds as k
    from reconciler.kube.store import kept

    if mode == "imports":
        print(json.dumps(memory()))
        return
    payload = base64.b64encode(os.urandom(size_kib * 768)).decode()[: size_kib * 1024]
    half = len(payload) // 2

    def secret(index: int) -> dict[str, Any]:
        return {"metadata": {"name": f"tenant-{index}", "namespace": f"tenant-{index % 100}",
                             "uid": f"uid-{index}", "resourceVersion": str(index),
                             "labels": {"app.kubernetes.io/managed-by": "kaiwu-operator"},
                             "annotations": {"note": "x" * 1024}},
                "type": "Opaque", "data": {"blob": payload}}

    def backup(index: int) -> dict[str, Any]:
        return {"metadata": {
            "name": f"tenant-{index}", "namespace": f"tenant-{index % 100}",
            "uid": f"uid-{index}", "resourceVersion": str(index), "generation": 1,
            "creationTimestamp": "2026-12-01T03:00:00Z",
            "labels": {k.SCHEDULE_LABEL: "nightly", "team": "tenant"},
            "annotations": {k.SLOT_ANNOTATION: payload[:half], "note": payload[half:]},
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                               "fieldsV1": {"f:metadata": {"f:annotations": {
                                   "f:note": {}, f"f:{k.SLOT_ANNOTATION}": {}}}}}]},
            "spec": {"cluster": {"name": "orders"},
                     "target": {"s3": {"bucket": "backups",
                                       "credentialsSecret": {"name": "backup-s3"}}}},
            "status": {"phase": "failed", "reason": "TargetUnusable"}}

    make: Callable[[int], dict[str, Any]] = secret if kind_name == "secret" else backup
    ours = k.SECRET if kind_name == "secret" else k.KAIWU_BACKUP

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
                "items": [make(i) for i in range(start, end)]}).encode()
            return json.loads(body)

    keep = kept if mode == "ours" else (lambda obj: obj)
    # Before: every object kept whole, in the client's default pages.
    kind = ours if mode == "ours" else k.Kind(ours.api_version, ours.kind, ours.plural)
    items, _ = Wire().list_objects(kind, None, FLOODS[kind_name].selector, keep=keep)
    assert len(items) == count
    print(json.dumps(memory()))


def measure(kind_name: str, mode: str, count: int, size_kib: int) -> tuple[int, int]:
    out = subprocess.run([sys.executable, __file__, "--kind", kind_name, "--child", mode,
                          "--count", str(count), "--size-kib", str(size_kib)], check=True,
                         capture_output=True, text=True).stdout
    peak, now = json.loads(out.strip().splitlines()[-1])
    return int(peak), int(now)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(FLOODS), default="secret")
    parser.add_argument("--count", type=int, help="objects in the flood (default: per kind)")
    parser.add_argument("--size-kib", type=int, help="KiB a tenant adds to each (per kind)")
    parser.add_argument("--before-count", type=int, help="objects in the cache as it was")
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--child", default="")
    args = parser.parse_args()
    flood = FLOODS[args.kind]
    count = args.count if args.count is not None else flood.count
    size_kib = args.size_kib if args.size_kib is not None else flood.size_kib
    if args.child:
        child(args.kind, args.child, count, size_kib)
        return 0
    before_count = args.before_count if args.before_count is not None else flood.before_count
    mib = 1024 * 1024
    rows = []
    for mode, n in (("imports", 0), ("ours", count), ("before", before_count)):
        peak, now = measure(args.kind, mode, n, size_kib)
        rows.append(f"| {mode} | {n} | {peak / mib:.0f} MiB | {now / mib:.0f} MiB |")
    report(flood.heading, flood.caption.format(size=size_kib),
           ("cache", "objects", "peak RSS", "RSS after"), rows, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
