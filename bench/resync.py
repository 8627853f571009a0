"""Benchmark: the CPU a full resync's drift comparison costs at 1,000 clusters, ours beside today's.

Run: `.venv/bin/python bench/resync.py [--clusters 1000] [--rounds 5] [--baseline-rounds 3]`.
Appends its figures to bench/RESULTS.md.

What is measured: the controller's observe step (reconciler.controller.observe) run for every
cluster of `bench.fleet.live_fleet(n)` (5,332 rendered objects at 1,000 clusters), each desired
object read from a cache view and judged against its live copy, as a resync does it. Rendering is
not part of the figure (it is the render step's, measured by the render benchmarks; it is printed
alongside for scale). Two cases:

- at rest: nothing changed since the last pass;
- 1% drifted: before each pass, 1% of the live objects (a fresh random set each time) get a hand
  edit and a new resourceVersion, as if `kubectl edit` had run since the last pass; each is
  judged again, dry run included (the fake API answers it with the desired object).

"ours" is the controller as it is (each object's last verdict remembered, the cache read without
a copy); "baseline" is the comparison as it was before (every object copied out of the cache and
normalised on every pass), in the same process and run. CPU seconds (time.process_time) per
full pass; min and median of the rounds. The verdicts of both are checked to be the same.
"""

from __future__ import annotations

import argparse
import builtins
import copy
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import LiveCluster, drifted_copy, live_fleet
from reconciler.controller.controller import Controller
from reconciler.controller.objects import ObjectPass
from reconciler.controller.observe import ObserveStep
from reconciler.drift.compare import DriftReport, compare
from reconciler.drift.memo import ComparisonMemo
from reconciler.keys import ClusterKey
from reconciler.kube.kinds import Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer.render import read_live
from renderer.spec import Cluster

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
NOW = 1_800_000_000.0


class FleetView:
    """The watch caches over the live fleet. `copying`: `peek` copies, as every read did before
    (the baseline)."""

    def __init__(self, fleet: list[LiveCluster], copying: bool) -> None:
        self.copying = copying
        self.objects: dict[tuple[str, str, str], Obj] = {}
        for cluster in fleet:
            for obj in cluster.cached():
                md = obj["metadata"]
                self.objects[(obj["kind"], md.get("namespace", ""), md["name"])] = obj

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        found = self.objects.get((kind.kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def peek(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        if self.copying:
            return self.get(kind, namespace, name)
        return self.objects.get((kind.kind, namespace, name))

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        raise NotImplementedError  # the observe step lists nothing

    def peek_list(self, kind: Kind, namespace: str,
                  labels: Mapping[str, str] = {}) -> builtins.list[Obj]:
        raise NotImplementedError

    def served(self, kind: Kind) -> bool:
        return True


class FakeKube:
    """The API as far as the observe step reaches it: a dry run answers the desired object."""

    field_manager = "kaiwu-reconciler"

    def server_version(self) -> str:
        return "v1.20.2"

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        assert dry_run, "the observe step only ever dry-runs"
        return copy.deepcopy(obj)


class Uncached(ComparisonMemo):
    """The comparison as it was: every object normalised on every pass."""

    def compare(self, owner: Hashable, desired: Mapping[str, Any],
                live: Mapping[str, Any] | None, **kwargs: Any) -> DriftReport:
        return compare(desired, live, **kwargs)


def observer(fleet: list[LiveCluster], ours: bool) -> tuple[ObserveStep, FleetView]:
    view = FleetView(fleet, copying=not ours)
    controller = Controller(FakeKube(), view, Settings(leader_election=False),  # type: ignore[arg-type]
                            Metrics(), clock=lambda: NOW)
    memory = controller.memory if ours else replace(controller.memory, comparisons=Uncached())
    return ObserveStep(controller.ctx, memory), view


def resync(step: ObserveStep, fleet: list[LiveCluster]) -> dict[tuple[str, str], str]:
    """One full pass of the observe step over the fleet; every object's verdict. (The spec is
    parsed once, outside the measured passes: that is the spec step's work.)"""
    verdicts: dict[tuple[str, str], str] = {}
    for cluster in fleet:
        md = cluster.cluster["metadata"]
        p = ObjectPass(ClusterKey(md["namespace"], md["name"]), cluster.cluster, NOW,
                       dict(cluster.cluster["status"]))
        p.cluster = _parsed(cluster.cluster)
        p.desired = cluster.desired
        step.run(p)
        for state in p.states:
            verdicts[(md["namespace"], str(state.ref))] = state.verdict
    return verdicts


_PARSED: dict[int, Cluster] = {}


def _parsed(obj: Obj) -> Cluster:
    if id(obj) not in _PARSED:
        _PARSED[id(obj)] = read_live(obj)
    return _PARSED[id(obj)]


def drift_some(views: list[FleetView], fleet: list[LiveCluster], share: float,
               rng: random.Random, version: list[int]) -> None:
    """Hand-edit `share` of the live rendered objects (the same edits in every view)."""
    rendered = [obj for cluster in fleet for obj in cluster.live]
    for obj in rng.sample(rendered, max(1, round(len(rendered) * share))):
        version[0] += 1
        md = obj["metadata"]
        key = (obj["kind"], md["namespace"], md["name"])
        edited = drifted_copy(views[0].objects[key], version[0])
        for view in views:
            view.objects[key] = edited


def cpu(action: Callable[[], object]) -> float:
    start = time.process_time()
    action()
    return time.process_time() - start


def figures(samples: list[float]) -> str:
    return f"min {min(samples):6.3f} s, median {statistics.median(samples):6.3f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-rounds", type=int, default=3)
    parser.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()

    fleet = live_fleet(args.clusters)
    objects = sum(len(cluster.desired) for cluster in fleet)
    ours, ours_view = observer(fleet, ours=True)
    base, base_view = observer(fleet, ours=False)
    render_s = cpu(lambda: [_parsed(cluster.cluster) for cluster in fleet])

    first = cpu(lambda: resync(ours, fleet))  # fills the memory
    rest_ours = [cpu(lambda: resync(ours, fleet)) for _ in range(args.rounds)]
    rest_base = [cpu(lambda: resync(base, fleet)) for _ in range(args.baseline_rounds)]
    same_at_rest = resync(ours, fleet) == resync(base, fleet)
    in_sync = sum(v == "in-sync" for v in resync(ours, fleet).values())

    rng, version = random.Random(14), [10**7]
    drift_ours, drift_base = [], []
    for round_ in range(max(args.rounds, args.baseline_rounds)):
        drift_some([ours_view, base_view], fleet, 0.01, rng, version)
        if round_ < args.rounds:
            drift_ours.append(cpu(lambda: resync(ours, fleet)))
        if round_ < args.baseline_rounds:
            drift_base.append(cpu(lambda: resync(base, fleet)))
    same_drifted = resync(ours, fleet) == resync(base, fleet)

    lines = [
        f"resync CPU, {args.clusters} clusters ({objects} rendered objects, {in_sync} in sync), "
        f"observe step only (spec parse alone: {render_s:.2f} s)",
        f"  first pass (memory empty)      ours {first:6.3f} s",
        f"  at rest      ours     {figures(rest_ours)}  ({args.rounds} rounds)",
        f"  at rest      baseline {figures(rest_base)}  ({args.baseline_rounds} rounds)",
        f"  1% drifted   ours     {figures(drift_ours)}",
        f"  1% drifted   baseline {figures(drift_base)}",
        f"  verdicts identical: at rest {same_at_rest}, drifted {same_drifted}",
    ]
    print("\n".join(lines))
    if not (same_at_rest and same_drifted):
        raise SystemExit("verdicts differ between ours and the baseline")
    if not args.no_results:
        append_results("bench/resync.py", lines)


def append_results(command: str, lines: list[str]) -> None:
    """Append one run's figures to bench/RESULTS.md, with date and core count."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with RESULTS.open("a") as out:
        out.write(f"\n### `{command}` — {stamp}, {os.cpu_count()} cores\n\n```\n")
        out.write("\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
