"""Benchmark: rendering beside the libyaml floor and the earlier ruamel.yaml path; `kaiwu diff`
with one change beside a full render (issue 14, part 4).

Run: `.venv/bin/python bench/render.py [--clusters 1000] [--rounds 5] [--old-rounds 2]`.
On the shared fleet (bench/fleet.py, one file per cluster), in process, CPU seconds, min and
median of several rounds, all in one run:
- ours: read every file, check, build, write every object's YAML text (what `kaiwu render`
  does, less the files themselves);
- floor: the same objects dumped by PyYAML's C dumper (libyaml), nothing else;
- earlier: the path before this change (ruamel.yaml's round-trip reader, its pure-Python
  emitter), same checks and builders;
- diff: `kaiwu diff OLD NEW` over 100 clusters with one spec changed, beside `kaiwu render
  --stdout` of the same 100 clusters (as processes, as CI runs them: bench/diff_process.py).
Prints a table and appends it to bench/RESULTS.md with the date and the core count.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import write_fleet
from renderer import cli
from renderer.emit import TOP_LEVEL_ORDER, manifest_for, to_yaml
from renderer.loader import Document, find_files, load_documents, to_plain
from renderer.render import build_objects, read_clusters
from renderer.settings import RenderSettings

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SETTINGS = RenderSettings()


def cpu_seconds(action: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.process_time()
        action()
        samples.append(time.process_time() - started)
    return samples


def render_ours(source: Path) -> int:
    clusters = read_clusters(load_documents(find_files(source)))
    texts = [manifest_for(obj, c.cluster.name).text
             for c in clusters for obj in build_objects(c.cluster, SETTINGS)]
    return len(texts)


def _earlier_ordered(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: (
            TOP_LEVEL_ORDER.index(key) if top and key in TOP_LEVEL_ORDER else len(TOP_LEVEL_ORDER),
            key))
        return {key: _earlier_ordered(value[key]) for key in keys}
    if isinstance(value, list):
        return [_earlier_ordered(item) for item in value]
    return value


def earlier_to_yaml(obj: dict[str, Any]) -> str:
    """The emitter before libyaml: ruamel.yaml's pure-Python safe dumper."""
    dumper = YAML(typ="safe", pure=True)
    dumper.default_flow_style = False
    dumper.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    dumper.width = 4096
    stream = io.StringIO()
    dumper.dump(_earlier_ordered(obj, top=True), stream)
    return stream.getvalue()


def render_earlier(source: Path) -> int:
    """The reader before libyaml: ruamel.yaml's round-trip loader, then a plain copy."""
    documents = []
    for path in find_files(source):
        reader = YAML(typ="rt")
        for content in reader.load_all(path.read_text()):
            documents.append(Document(str(path), 1, to_plain(content)))
    clusters = read_clusters(documents)
    texts = [earlier_to_yaml(obj) for c in clusters for obj in build_objects(c.cluster, SETTINGS)]
    return len(texts)


def command(*argv: str | Path) -> int:
    """`kaiwu ARGV` in process, its output swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return cli.main([str(arg) for arg in argv])


def row(name: str, samples: list[float], per: int, reference: float | None) -> str:
    best, median = min(samples), statistics.median(samples)
    ratio = f"{median / reference:.2f}" if reference else "1.00"
    return (f"| {name} | {best:.3f} | {median:.3f} | {median / per * 1000:.2f} | {ratio} | "
            f"{len(samples)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--old-rounds", type=int, default=2,
                        help="rounds of the earlier path (about 25 ms per cluster)")
    parser.add_argument("--no-append", action="store_true", help="do not touch RESULTS.md")
    args = parser.parse_args()
    assert yaml.__with_libyaml__, "PyYAML without libyaml: the floor would not be the floor"

    with tempfile.TemporaryDirectory() as scratch:
        fleet, small, changed = (Path(scratch) / name for name in ("fleet", "small", "changed"))
        write_fleet(fleet, args.clusters)
        write_fleet(small, 100)
        write_fleet(changed, 100)
        edited = sorted(find_files(changed))[37]
        edited.write_text(edited.read_text().replace("size: ", "size: 1", 1))  # grown
        objects = [obj for c in read_clusters(load_documents(find_files(fleet)))
                   for obj in build_objects(c.cluster, SETTINGS)]

        floor = cpu_seconds(lambda: [yaml.dump(obj, Dumper=yaml.CSafeDumper)
                                     for obj in objects], args.rounds)
        emit = cpu_seconds(lambda: [to_yaml(obj) for obj in objects], args.rounds)
        ours = cpu_seconds(lambda: render_ours(fleet), args.rounds)
        earlier = cpu_seconds(lambda: render_earlier(fleet), args.old_rounds)
        assert command("diff", small, changed) == 1, "one change expected"
        render_100 = cpu_seconds(lambda: command("render", small, "--stdout"), args.rounds * 2)
        diff_100 = cpu_seconds(lambda: command("diff", small, changed), args.rounds * 2)

    reference = statistics.median(floor)
    lines = [
        "### Render near the libyaml floor (bench/render.py)",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"{args.clusters} clusters ({len(objects)} objects), CPU seconds, in process.",
        "",
        "| path | min s | median s | ms per cluster | x floor | rounds |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        row("floor: the objects dumped by PyYAML's C dumper", floor, args.clusters, None),
        row("ours, emit only (to_yaml)", emit, args.clusters, reference),
        row("ours, full render (read, check, build, emit)", ours, args.clusters, reference),
        row("earlier: ruamel.yaml reader and emitter", earlier, args.clusters, reference),
        "",
        "| 100 clusters, one spec changed (the CLI in process) | min s | median s "
        "| x full render |",
        "| --- | ---: | ---: | ---: |",
        f"| kaiwu render --stdout | {min(render_100):.3f} | "
        f"{statistics.median(render_100):.3f} | 1.00 |",
        f"| kaiwu diff | {min(diff_100):.3f} | {statistics.median(diff_100):.3f} | "
        f"{statistics.median(diff_100) / statistics.median(render_100):.2f} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_append:
        with RESULTS.open("a") as results:
            if results.tell() == 0:
                results.write("# Benchmark results\n\nAppended by the scripts in bench/; newest "
                              "last.\n\n")
            results.write(text + "\n")


if __name__ == "__main__":
    main()
