"""Benchmark: `kaiwu diff --base` as a process beside `kaiwu render` of the same tree (issue 31,
part 2: the diff at most 0.5x the render).

Run: `.venv/bin/python bench/diff_process.py [--rounds 15] [--before DIR] [--no-append]`.
As CI runs them: a git repository of 100 fleet clusters (bench/fleet.py, one file each),
committed, then one spec changed in the working tree (a volume grown); `kaiwu render clusters
--stdout` and `kaiwu diff clusters --base HEAD`, each a whole process of an installed `kaiwu`
(bench/cli_start.py's throwaway venv: no editable import hook; bytecode compiled, as pip
does), CPU seconds of the process and of the git processes it waits for, median and min of
`--rounds`, with `kaiwu --help` (the start-up both pay). `--before DIR`: another checkout
(e.g. a worktree of main) measured in the same run, in turns with this one, and its outputs
checked byte for byte against this one's.
Prints a table and appends it to bench/RESULTS.md with the date and the core count.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

from bench.cli_start import installed_venv  # noqa: E402
from bench.fleet import write_fleet  # noqa: E402
from bench.results import report  # noqa: E402

CLUSTERS = 100
COMMANDS = {
    "help": ["--help"],
    "render": ["render", "clusters", "--stdout"],
    "diff": ["diff", "clusters", "--base", "HEAD"],
}


def fleet_repository(repo: Path) -> None:
    """100 clusters committed, then one spec changed in the working tree."""
    paths = write_fleet(repo / "clusters", CLUSTERS)
    git = ["git", "-c", "user.email=bench@example.invalid", "-c", "user.name=bench", "-C",
           str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fleet"], check=True)
    edited = sorted(paths)[37]
    edited.write_text(edited.read_text().replace("size: ", "size: 1", 1))  # grown


def one_run(kaiwu: str, argv: list[str], repo: Path) -> tuple[float, bytes, int]:
    """CPU seconds of one process (and the git processes it waited for), its output and
    exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([kaiwu, *argv], cwd=repo, capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, done.stdout + done.stderr, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--before", type=Path, help="another checkout to measure beside this")
    parser.add_argument("--no-append", action="store_true", help="do not touch RESULTS.md")
    args = parser.parse_args()
    checkouts = {"this checkout": ROOT}
    if args.before:
        checkouts = {"before": args.before.resolve(), "after": ROOT}
    with tempfile.TemporaryDirectory(prefix="kaiwu-diff-process-") as tmp:
        repo = Path(tmp) / "repo"
        fleet_repository(repo)
        kaiwus = {}
        for index, (name, checkout) in enumerate(checkouts.items()):
            python, kaiwus[name] = installed_venv(Path(tmp) / f"venv-{index}", checkout)
            # Bytecode, as pip writes it for a wheel (PYTHONDONTWRITEBYTECODE may be set here).
            subprocess.run([python, "-m", "compileall", "-q", str(checkout / "renderer"),
                            str(checkout / "reconciler")], check=True)
        samples: dict[tuple[str, str], list[float]] = {}
        outputs: dict[tuple[str, str], tuple[bytes, int]] = {}
        for name, kaiwu in kaiwus.items():  # warm the file cache; keep each output
            for command, argv in COMMANDS.items():
                _, out, code = one_run(kaiwu, argv, repo)
                outputs[(name, command)] = (out, code)
        for _ in range(args.rounds):  # in turns: the machine is shared and noisy
            for name, kaiwu in kaiwus.items():
                for command, argv in COMMANDS.items():
                    cpu, _, _ = one_run(kaiwu, argv, repo)
                    samples.setdefault((name, command), []).append(cpu)
    assert outputs[(next(iter(kaiwus)), "diff")][1] == 1, "one change expected"
    if args.before:
        for command in COMMANDS:
            assert outputs[("before", command)] == outputs[("after", command)], (
                f"kaiwu {command}: the outputs of the two checkouts differ")
    rows = []
    for name in kaiwus:
        median = {command: statistics.median(samples[(name, command)]) for command in COMMANDS}
        rows.append(f"| {name} | {median['help']:.3f} | {median['render']:.3f} | "
                    f"{median['diff']:.3f} | {min(samples[(name, 'diff')]):.3f} | "
                    f"{median['diff'] / median['render']:.2f} |")
    same = " (outputs byte-identical)" if args.before else ""
    report("kaiwu diff --base as a process (`bench/diff_process.py`)",
           f"{args.rounds} rounds, in turns. {CLUSTERS} fleet clusters in git, one spec changed "
           "in the working tree; each command a whole process of an installed kaiwu, CPU "
           f"seconds, git's included{same}. Target: diff <= 0.5x render.",
           ("checkout", "kaiwu --help median", "render --stdout median",
            "diff --base HEAD median", "diff min", "diff / render"), rows,
           append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
