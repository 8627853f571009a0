"""Benchmark: how long rendering and drift comparison take, side by side in one run.

Run: `.venv/bin/python bench/render_and_compare.py [--rounds N]`. Prints, for the example
clusters in clusters/, the time to render every cluster (load, validate, default, build, emit
YAML) and, for each rendered object, the time to compare it with an identical live copy (the
steady-state fast path: hashes equal) and with a drifted copy (an env var added by hand: the
deepdiff report). The reconciler pays the in-sync figure for every object on every pass.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from reconciler.drift.compare import compare
from renderer.emit import to_yaml
from renderer.render import build_objects, load_clusters
from renderer.settings import RenderSettings

ROOT = Path(__file__).resolve().parent.parent


def timed(action: Callable[[], object], rounds: int) -> float:
    """Median seconds of `rounds` runs (the median resists this machine's noise)."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def drifted(obj: dict[str, Any]) -> dict[str, Any]:
    """A live copy with one hand edit: an env var on the StatefulSet, a label elsewhere."""
    live = copy.deepcopy(obj)
    if live["kind"] == "StatefulSet":
        container = live["spec"]["template"]["spec"]["containers"][0]
        container["env"].append({"name": "KWBASE_DEBUG", "value": "1"})
    else:
        live["metadata"]["labels"]["app.kubernetes.io/name"] = "changed"
    return live


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    settings = RenderSettings()

    def render_all() -> None:
        for source in load_clusters(ROOT / "clusters"):
            for obj in build_objects(source.cluster, settings):
                to_yaml(obj)

    print(f"render clusters/ (3 clusters, YAML included): "
          f"{timed(render_all, args.rounds) * 1000:8.2f} ms")
    print(f"{'object':45} {'in sync':>10} {'drifted':>10}")
    for source in load_clusters(ROOT / "clusters"):
        for obj in build_objects(source.cluster, settings):
            live, changed = copy.deepcopy(obj), drifted(obj)
            same = timed(partial(compare, obj, live), args.rounds)
            diff = timed(partial(compare, obj, changed), args.rounds)
            name = f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
            print(f"{name:45} {same * 1000:8.2f}ms {diff * 1000:8.2f}ms")


if __name__ == "__main__":
    main()
