"""Benchmark: what a person waits for when they run `kaiwu` (issue 31, part 1).

Run: `.venv/bin/python bench/cli_start.py [--runs 15] [--no-append]`.
Whole processes, as a shell or a pre-commit hook runs them: CPU seconds (user + system, read
from the children's rusage) and wall seconds, median and min of `--runs` runs each, side by side
in one run with a bare `python -c pass` (the interpreter's own floor on this machine), each
command twice: from this checkout's venv (an editable install, whose import hook costs every
start about 20 ms), and as installed from a wheel (a throwaway venv whose site-packages holds a
plain path to this checkout and one to the venv's libraries, so no editable hook runs; the
`kaiwu` launcher is the one pip writes):
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
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

from bench.results import report  # noqa: E402

KAIWU = str(Path(sys.executable).parent / "kaiwu")
COMMANDS = [
    ("kaiwu --help", ["--help"]),
    ("kaiwu validate clusters/", ["validate", "clusters/"]),
    ("kaiwu render --stdout clusters/", ["render", "--stdout", "clusters/"]),
]
# The console script pip writes for `kaiwu = "reconciler.cli:main"`.
LAUNCHER = """#!{python}
import sys
from reconciler.cli import main
if __name__ == "__main__":
    sys.exit(main())
"""


def installed_venv(where: Path, checkout: Path = ROOT) -> tuple[str, str]:
    """A venv that finds `checkout` (default: this one) and the venv's libraries as plain
    paths, as a wheel install would (no editable import hook); its python and its `kaiwu`."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], check=True, capture_output=True, text=True)
    libraries = sysconfig.get_path("purelib")
    Path(site.stdout.strip(), "kaiwu.pth").write_text(f"{checkout}\n{libraries}\n")
    kaiwu = where / "bin" / "kaiwu"
    kaiwu.write_text(LAUNCHER.format(python=python))
    kaiwu.chmod(0o755)
    return str(python), str(kaiwu)


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
    with tempfile.TemporaryDirectory(prefix="kaiwu-cli-start-") as tmp:
        python, installed = installed_venv(Path(tmp) / "venv")
        cases = [("python -c pass", [sys.executable, "-c", "pass"],
                  [python, "-c", "pass"])]
        cases += [(name, [KAIWU, *argv], [installed, *argv]) for name, argv in COMMANDS]
        rows = []
        for name, editable, wheel in cases:
            cells = []
            for argv in (editable, wheel):
                one_run(argv)  # warm the file cache
                figures = [one_run(argv) for _ in range(args.runs)]
                cpu = [c for c, _ in figures]
                cells.append((statistics.median(cpu), min(cpu),
                              statistics.median(w for _, w in figures)))
            (e_median, _, _), (w_median, w_min, w_wall) = cells
            rows.append(f"| {name} | {e_median:.3f} s | {w_median:.3f} s | {w_min:.3f} s | "
                        f"{w_wall:.3f} s |")
    report("CLI start-up (`bench/cli_start.py`)",
           f"{args.runs} runs each. Whole processes: from this checkout's venv (an editable "
           "install, whose import hook costs every start about 20 ms) and as installed from a "
           "wheel (a venv with plain paths to this checkout and the libraries: no hook). "
           "Targets: `--help` <= 0.1 s CPU, `validate` <= 0.25 s CPU.",
           ("command", "editable CPU median", "installed CPU median", "installed CPU min",
            "installed wall median"), rows,
           append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
