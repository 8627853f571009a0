"""Benchmark: the worst case of time and memory over the hostile corpus (issue 15, part 1).

Run: `.venv/bin/python bench/hostile.py [--no-append]`. Every case goes through `kaiwu validate`,
`kaiwu render` and `kaiwu diff` in a fresh process of its own (so its peak memory is its own):
the data files tests/unit/renderer/hostile/parse-*.yaml and the generated cases below (too large
for git), plus two probes just inside the limits, which the reader accepts and the checks
refuse: an alias tree that expands to just under InputLimits.max_nodes, and a file just under
InputLimits.max_file_bytes. Prints CPU seconds per command, the peak heap and RSS and the exit
codes, then the worst case; appends the table to
bench/RESULTS.md with the date and core count.

tests/unit/renderer/test_hostile_input.py runs the same corpus with the same runner and checks
generous bounds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from renderer.settings import INPUT_LIMITS  # noqa: E402

HOSTILE = ROOT / "tests" / "unit" / "renderer" / "hostile"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = ("apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\nmetadata:\n  name: hostile\n"
          "  namespace: default\n")

# Runs in the child: each command in process, CPU-timed; then the peak RSS over the resident
# size once imported.
RUNNER = r"""
import contextlib, io, json, resource, sys, time, tracemalloc, traceback
from renderer import cli
source, out, empty, measure = sys.argv[1:5]
if measure == "heap":  # slows every allocation: CPU seconds are measured in a run without it
    tracemalloc.start()
with open("/proc/self/statm") as statm:  # resident now, after imports (KB, as ru_maxrss)
    base = int(statm.read().split()[1]) * resource.getpagesize() // 1024
# Linux carries ru_maxrss over fork and exec: a large parent (a long pytest session) would
# count as this run's growth. Growth is measured from the higher of the two.
base = max(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
report = {}
for name, argv in (("validate", ["validate", source]),
                   ("render", ["render", source, "-o", out]),
                   ("diff", ["diff", empty, source])):
    err = io.StringIO()
    started = time.process_time()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except BaseException:
            code = -1
            traceback.print_exc(file=err)
    report[name] = {"code": code, "stderr": err.getvalue(),
                    "seconds": time.process_time() - started}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report["rss_growth_mb"] = (peak - base) / 1024
report["rss_peak_mb"] = peak / 1024
report["heap_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20 if measure == "heap" else 0
print(json.dumps(report))
"""


def _deep_block_mappings(levels: int) -> str:
    return HEADER + "spec:\n" + "".join(f"{' ' * (depth + 2)}a:\n" for depth in range(levels)) \
        + " " * (levels + 2) + "b: 1\n"


def _alias_tree(total: int) -> str:
    """Aliases of aliases, ten at a time, expanding to about `total` nodes."""
    lines, size, level = ["  annotations:", "    l0: &l0 x"], 1, 0
    while size * 10 + 11 < total:
        level += 1
        lines.append(f"    l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
        size = size * 10 + 1
    return HEADER + "\n".join(lines) + "\nspec:\n  replicas: 3\n"


GENERATED: dict[str, Callable[[], str]] = {
    "parse-huge-annotation": lambda: HEADER + "  annotations:\n    big: \"" + "x" * 20_000_000
    + "\"\nspec:\n  replicas: 3\n",
    "parse-deep-block-mappings": lambda: _deep_block_mappings(1000),
    "parse-many-documents": lambda: "---\n{}\n" * 10_001,
    "parse-many-aliases": lambda: HEADER + "  annotations:\n    a: &a x\n    list: ["
    + ", ".join(["*a"] * 10_001) + "]\nspec:\n  replicas: 3\n",
}
PROBES: dict[str, Callable[[], str]] = {
    "probe-alias-tree-under-node-limit": lambda: _alias_tree(INPUT_LIMITS.max_nodes),
    "probe-file-under-size-limit": lambda: HEADER + "  annotations:\n    big: \""
    + "x" * (INPUT_LIMITS.max_file_bytes - 200) + "\"\nspec:\n  replicas: 3\n",
}


def corpus() -> dict[str, Callable[[], str]]:
    """Every hostile case by name: the data files, then the generated ones."""
    cases: dict[str, Callable[[], str]] = {
        path.stem: (lambda path=path: path.read_text())  # type: ignore[misc]
        for path in sorted(HOSTILE.glob("parse-*.yaml"))}
    cases.update(GENERATED)
    return cases


def run_case(name: str, text: str, workdir: Path, measure: str = "time") -> dict[str, Any]:
    """The three commands on `text` (as src/<name>.yaml under `workdir`) in a fresh process;
    `measure` "heap" traces Python's allocations (and makes the CPU seconds meaningless)."""
    source, empty = workdir / "src", workdir / "empty"
    source.mkdir(exist_ok=True)
    empty.mkdir(exist_ok=True)
    (source / f"{name}.yaml").write_text(text)
    done = subprocess.run([sys.executable, "-c", RUNNER, str(source), str(workdir / "out"),
                           str(empty), measure], cwd=workdir, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: the runner failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-append", action="store_true", help="do not touch RESULTS.md")
    args = parser.parse_args()
    rows, worst_seconds, worst_rss, worst_heap = [], (0.0, ""), (0.0, ""), (0.0, "")
    for name, make in {**corpus(), **PROBES}.items():
        with tempfile.TemporaryDirectory() as scratch:
            text = make()
            report = run_case(name, text, Path(scratch))
            report["heap_peak_mb"] = run_case(name, text, Path(scratch), "heap")["heap_peak_mb"]
        seconds = [report[command]["seconds"] for command in ("validate", "render", "diff")]
        codes = "/".join(str(report[command]["code"]) for command in ("validate", "render",
                                                                      "diff"))
        heap, rss = report["heap_peak_mb"], report["rss_peak_mb"]
        worst_seconds = max(worst_seconds, (max(seconds), name))
        worst_rss = max(worst_rss, (rss, name))
        worst_heap = max(worst_heap, (heap, name))
        rows.append(f"| {name} | {seconds[0]:.3f} | {seconds[1]:.3f} | {seconds[2]:.3f} | "
                    f"{heap:.1f} | {rss:.0f} | {codes} |")
    lines = [
        "### Hostile input (bench/hostile.py)",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores; "
        "CPU seconds per command; one process per case: the peak of Python's heap after "
        "imports (tracemalloc, in a second run) and its peak RSS (ru_maxrss: imports included, "
        "and the launching process's pages before exec); exit codes validate/render/diff.",
        "",
        "| case | validate s | render s | diff s | peak heap MB | peak RSS MB | exit codes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        *rows,
        "",
        f"Worst case: {worst_seconds[0]:.3f} s CPU ({worst_seconds[1]}); heap "
        f"{worst_heap[0]:.1f} MB ({worst_heap[1]}); RSS {worst_rss[0]:.0f} MB "
        f"({worst_rss[1]}).",
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
