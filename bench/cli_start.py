"""Benchmark: what a person waits for when they run `kaiwu` (issue 31, part 1).

Run: `.venv/bin/python bench/cli_start.py [--runs 15] [--no-append]`.
Whole processes, as a shell or a pre-commit hook runs them: CPU seconds (user + system, read
from the children's rusage) and wall seconds, median and min of `--runs` runs each, side by side
in one run with a bare `python -c pass` (the interpreter's own floor on this machine):
- `kaiwu --help`, `kaiwu validate clusters/` (the three example clusters),
  `kaiwu render --stdout clusters/`.
Targets: `--help` <= 0.1 s CPU, `validate` <= 0.25 s CPU. Prints a table and appends it to
bench/RESULTS.md with the date and the core count.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

from bench.results import report  # noqa: E402

KAIWU = str(Path(sys.executable).parent / "kaiwu")
CASES = [
    ("python -c pass", [sys.executable, "-c", "pass"]),
    ("kaiwu --help", [KAIWU, "--help"]),
    ("kaiwu validate clusters/", [KAIWU, "validate", "clusters/"]),
    ("kaiwu render --stdout clusters/", [KAIWU, "render", "--stdout", "clusters/"]),
]


def one_run(argv: list[str]) -> tuple[float, float]:
    """CPU and wall seconds of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-append", action="store_true", help="do not touch RESULTS.md")
    args = parser.parse_args()
    rows = []
    for name, argv in CASES:
        one_run(argv)  # warm the file cache
        figures = [one_run(argv) for _ in range(args.runs)]
        cpu = [c for c, _ in figures]
        wall = [w for _, w in figures]
        rows.append(f"| {name} | {statistics.median(cpu):.3f} s | {min(cpu):.3f} s | "
                    f"{statistics.median(wall):.3f} s |")
    report("CLI start-up (`bench/cli_start.py`)",
           f"{args.runs} runs each. Whole processes from this checkout's venv (an editable "
           "install: its import hook costs about 20 ms a start that a wheel install does not).",
           ("command", "CPU median", "CPU min", "wall median"), rows,
           append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
