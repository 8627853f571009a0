"""Benchmark: what the watch caches cost at 1,000 clusters, in memory and on the paths that used
to grow with clusters x pods.

Run: `.venv/bin/python bench/cache_memory.py [--clusters 1000] [--rounds 5]`. Appends its figures
to bench/RESULTS.md.

Memory: each figure is measured in a fresh subprocess (so one does not inherit the other's
heap). The child imports the reconciler, then fills one `Informer` per cached kind
(reconciler.kube.cache) from a list answer parsed from JSON, as the API client does, with every
object of `bench.fleet.live_fleet(n)`: the KaiwuClusters, their rendered objects, Pods, claims and
Secrets; then it reports its resident memory (VmRSS). "ours" is the cache as it is (slimmed,
equal maps and lists stored once: reconciler.kube.store.ValuePool); "interned" the cache before
values were shared (slimmed, strings interned); "unslim" keeps every object whole (managedFields
and all), as the cache did before that; "imports" loads nothing (the floor).

Paths: the CPU of one Node event (finding the clusters with a pod on that node) and of one
resync's pod lookups (each cluster's pods, by its labels), at 100 and at n clusters: ours (the
node and cluster indexes) beside the baseline (the scan of the whole Pod cache, copied, that
both were before). min and median CPU seconds of the rounds.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import LiveCluster, live_fleet
from bench.resync import append_results
from reconciler.kube import kinds as k
from reconciler.kube import store
from reconciler.kube.client import LIST_PAGE_SIZE
from reconciler.kube.informer import Informer
from reconciler.kube.kinds import Kind
from reconciler.kube.store import cluster_of, matches
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer.builders import INSTANCE_LABEL

KINDS_BY_NAME = {kind.kind: kind for kind in k.KINDS.values()}


class FileKube:
    """Answers each kind's list from JSON files, one per page of LIST_PAGE_SIZE objects, parsed
    afresh page by page as the API client does (`keep` applied to each item of a page)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        pages = sorted(self.directory.glob(f"{kind.kind}.*.json"),
                       key=lambda path: int(path.name.split(".")[1]))
        for path in pages:
            items += [keep(item) if keep else item for item in json.loads(path.read_text())]
        return items, "1"


class ListKube:
    def __init__(self, items: list[Obj]) -> None:
        self.items = items

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        return [keep(item) if keep else item for item in copy.deepcopy(self.items)], "1"


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(directory: Path, mode: str) -> None:
    """In a fresh process: fill the caches from `directory` and print the RSS in bytes."""
    import reconciler.runtime.process  # noqa: F401  # everything the reconciler process loads
    if mode == "unslim":
        store.kept = lambda obj: obj  # the cache as it was: every object whole
    elif mode == "interned":
        store.kept = lambda obj: interned(k.slim(obj))  # the cache before values were shared
    informers = []
    start = time.process_time()
    if mode != "imports":
        for name in sorted({path.name.split(".")[0] for path in directory.glob("*.json")}):
            informer = Informer(FileKube(directory), KINDS_BY_NAME[name],  # type: ignore[arg-type]
                                Settings(leader_election=False))
            informer._list()
            informers.append(informer)
    fill_s = time.process_time() - start  # parsing the pages and keeping each object
    gc.collect()
    print(rss_bytes(), sum(len(informer) for informer in informers), fill_s)


def interned(value: Any) -> Any:
    """What the caches stored before `store.ValuePool`: every map and list its own, only map keys
    and short strings interned."""
    if isinstance(value, dict):
        return {sys.intern(key): interned(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interned(item) for item in value]
    if isinstance(value, str) and len(value) <= store.INTERNED_MAX:
        return sys.intern(value)
    return value


def write_fleet_json(fleet: list[LiveCluster], directory: Path) -> int:
    by_kind: dict[str, list[Obj]] = {}
    for cluster in fleet:
        for obj in cluster.cached():
            by_kind.setdefault(obj["kind"], []).append(obj)
    for kind, items in by_kind.items():
        for page, start in enumerate(range(0, len(items), LIST_PAGE_SIZE)):
            page_items = items[start:start + LIST_PAGE_SIZE]
            (directory / f"{kind}.{page}.json").write_text(json.dumps(page_items))
    return sum(len(items) for items in by_kind.values())


def measure_rss(directory: Path, mode: str) -> tuple[int, int, float]:
    """(RSS bytes, cached objects, CPU seconds to fill the caches) of a fresh process."""
    answer = subprocess.run([sys.executable, __file__, "--child", str(directory), mode],
                            check=True, capture_output=True, text=True)
    rss, objects, fill_s = answer.stdout.split()
    return int(rss), int(objects), float(fill_s)


def cpu(action: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        action()
        samples.append(time.process_time() - start)
    return samples


def figures(samples: list[float]) -> str:
    return f"min {min(samples) * 1000:8.2f} ms, median {statistics.median(samples) * 1000:8.2f} ms"


def pod_informer(pods: list[Obj], whole: bool) -> Informer:
    kept = store.kept
    if whole:
        store.kept = lambda obj: obj
    informer = Informer(ListKube(pods), k.POD, Settings(leader_election=False))  # type: ignore[arg-type]
    informer._list()
    store.kept = kept
    return informer


def baseline_on_node(informer: Informer, node: str) -> set[Any]:
    """The Node event path before: every cached Pod copied, then filtered."""
    return {cluster_of(pod) for pod in informer.list()
            if (pod.get("spec") or {}).get("nodeName") == node}


def baseline_lookup(informer: Informer, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
    """A cluster's pods before: a scan of the whole store, the matches copied."""
    with informer._lock:
        found = [obj for (ns, _), obj in informer._store.objects.items()
                 if ns == namespace and matches(obj, labels)]
    return copy.deepcopy(found)


def lookup_all(lookup: Callable[[str, Mapping[str, str]], list[Obj]],
               selectors: list[tuple[str, dict[str, str]]]) -> None:
    for namespace, labels in selectors:
        lookup(namespace, labels)


def paths(fleet: list[LiveCluster], sizes: list[int], rounds: int) -> list[str]:
    lines = []
    for size in sizes:
        part = fleet[:size]
        pods = [pod for cluster in part for pod in cluster.pods]
        ours, whole = pod_informer(pods, whole=False), pod_informer(pods, whole=True)
        selectors = [(c.cluster["metadata"]["namespace"],
                      {INSTANCE_LABEL: c.cluster["metadata"]["name"],
                       "app.kubernetes.io/name": "kaiwudb"}) for c in part]
        node = pods[0]["spec"]["nodeName"]
        assert set(ours.clusters_on_node(node)) == baseline_on_node(whole, node)
        event = (partial(ours.clusters_on_node, node), partial(baseline_on_node, whole, node))
        lookups = (partial(lookup_all, ours.list, selectors),
                   partial(lookup_all, partial(baseline_lookup, whole), selectors))
        lines += [
            f"  {size:5} clusters, {len(pods):5} pods: one Node event",
            f"      ours     {figures(cpu(event[0], rounds))}",
            f"      baseline {figures(cpu(event[1], rounds))}",
            f"  {size:5} clusters: one resync's pod lookups ({size} clusters)",
            f"      ours     {figures(cpu(lookups[0], rounds))}",
            f"      baseline {figures(cpu(lookups[1], rounds))}",
        ]
    return lines


# Each figure's fresh process: what its caches keep of every object.
MODES = {
    "ours": "slim, equal maps and lists stored once (store.ValuePool)",
    "interned": "before: slim, every map and list its own, strings interned",
    "unslim": "before that: every object whole",
    "imports": "the floor: the reconciler's imports, nothing cached",
}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()

    fleet = live_fleet(args.clusters)
    pods = sum(len(c.pods) for c in fleet)
    claims = sum(len(c.claims) for c in fleet)
    secrets = sum(len(c.secrets) for c in fleet)
    with tempfile.TemporaryDirectory() as tmp:
        objects = write_fleet_json(fleet, Path(tmp))
        measured = {mode: measure_rss(Path(tmp), mode) for mode in MODES}
    lines = [f"cache memory, {args.clusters} clusters ({objects} cached objects: {pods} pods, "
             f"{claims} claims, {secrets} secrets), RSS of a fresh process "
             "(and the CPU its lists took: pages parsed, objects kept)"]
    for mode, label in MODES.items():
        rss, _, fill_s = measured[mode]
        lines.append(f"  {mode:8} {rss / 2**20:7.1f} MiB  {fill_s:5.2f} s  {label}")
    lines.append(f"cache paths, CPU ({args.rounds} rounds)")
    lines += paths(fleet, sorted({min(100, args.clusters), args.clusters}), args.rounds)
    print("\n".join(lines))
    if not args.no_results:
        append_results("bench/cache_memory.py", lines)


if __name__ == "__main__":
    main()
