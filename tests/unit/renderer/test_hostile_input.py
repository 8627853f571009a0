"""Story: nothing a spec file holds, however hostile, breaks `kaiwu validate/render/diff`.

The corpus: the data files tests/unit/renderer/hostile/parse-*.yaml (alias bomb, 300 nested flow
sequences, 1,000 nested flow mappings, recursive and undefined aliases, a tag some loaders
execute, a number without digits, a merge of a scalar, a mapping as key), and cases too large to
keep in git, generated here: a 20 MB annotation, 1,000 nested block mappings, 10,001 documents,
10,001 aliases. Each file goes through all three commands in a fresh process (so its memory is
measured alone): each exits 2 with `file:line` problems and the summary line, no traceback, no
file left behind, within 10 s and 300 MB of memory growth (generous bounds, on a busy
machine; the measured worst case is printed by bench/hostile.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.render import REPO, SUMMARY_LINE

HOSTILE = Path(__file__).resolve().parent / "hostile"
HEADER = ("apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\nmetadata:\n  name: hostile\n"
          "  namespace: default\n")

# Runs in the child: each command in process, timed, with the peak RSS growth over imports.
RUNNER = r"""
import contextlib, io, json, resource, sys, time
from pathlib import Path
from renderer import cli
source, out, empty = sys.argv[1:4]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = {}
for name, argv in (("validate", ["validate", source]),
                   ("render", ["render", source, "-o", out]),
                   ("diff", ["diff", empty, source])):
    err = io.StringIO()
    started = time.process_time()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except BaseException as error:  # noqa: BLE001 - the test reports what escaped
            import traceback
            code, _ = -1, traceback.print_exc(file=err)
    report[name] = {"code": code, "stderr": err.getvalue(),
                    "seconds": time.process_time() - started}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report["rss_growth_mb"] = (peak - base) / 1024
print(json.dumps(report))
"""


def _deep_block_mappings(levels: int) -> str:
    return HEADER + "spec:\n" + "".join(f"{' ' * (depth + 2)}a:\n" for depth in range(levels)) \
        + " " * (levels + 2) + "b: 1\n"


GENERATED: dict[str, Callable[[], str]] = {
    "parse-huge-annotation": lambda: HEADER + "  annotations:\n    big: \"" + "x" * 20_000_000
    + "\"\nspec:\n  replicas: 3\n",
    "parse-deep-block-mappings": lambda: _deep_block_mappings(1000),
    "parse-many-documents": lambda: "---\n{}\n" * 10_001,
    "parse-many-aliases": lambda: HEADER + "  annotations:\n    a: &a x\n    list: ["
    + ", ".join(["*a"] * 10_001) + "]\nspec:\n  replicas: 3\n",
}
DATA_FILES = sorted(HOSTILE.glob("parse-*.yaml"))
CASES = [*(path.stem for path in DATA_FILES), *GENERATED]


def run_commands(source: Path, workdir: Path) -> dict[str, object]:
    empty = workdir / "empty"
    empty.mkdir()
    done = subprocess.run([sys.executable, "-c", RUNNER, str(source), str(workdir / "out"),
                           str(empty)], cwd=workdir, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_file_is_refused_by_every_command_cleanly_and_cheaply(case: str,
                                                                        tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    if case in GENERATED:
        (source / f"{case}.yaml").write_text(GENERATED[case]())
    else:
        (source / f"{case}.yaml").write_bytes((HOSTILE / f"{case}.yaml").read_bytes())
    before = sorted(path.name for path in tmp_path.iterdir())

    report = run_commands(source, tmp_path)

    for command in ("validate", "render", "diff"):
        result = report[command]
        assert isinstance(result, dict)
        stderr = result["stderr"]
        assert result["code"] == 2, f"{command}: {stderr}"
        assert "Traceback" not in stderr, f"{command}: {stderr}"
        *problems, summary = stderr.strip().splitlines()
        assert SUMMARY_LINE.match(summary), f"{command}: {stderr}"
        assert problems and all(line.startswith(f"{source}/{case}.yaml:") for line in problems)
        assert result["seconds"] < 10, f"{command} took {result['seconds']:.1f} s CPU"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*before, "empty"]), \
        "a refused render leaves nothing behind"
    assert isinstance(report["rss_growth_mb"], float)
    assert report["rss_growth_mb"] < 300, f"peak memory grew {report['rss_growth_mb']:.0f} MB"


def test_the_corpus_files_are_here() -> None:
    assert len(DATA_FILES) >= 8, "tests/unit/renderer/hostile/parse-*.yaml"
