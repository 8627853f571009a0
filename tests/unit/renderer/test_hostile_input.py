"""Story: nothing a spec file holds, however hostile, breaks `kaiwu validate/render/diff`.

The corpus: the data files tests/unit/renderer/hostile/parse-*.yaml (alias bomb, 300 nested flow
sequences, 1,000 nested flow mappings, recursive and undefined aliases, a tag some loaders
execute, a number without digits, a merge of a scalar, a mapping as key), and cases too large to
keep in git, generated here: a 20 MB annotation, 1,000 nested block mappings, 10,001 documents,
10,001 aliases. Each file goes through all three commands in a fresh process (so its memory is
measured alone; the corpus and the runner are bench/hostile.py's): each exits 2 with
`file:line` problems and the summary line, no traceback, no file left behind, within 10 s of
CPU per command and 300 MB of peak RSS growth over the imports (generous bounds, on a busy
machine; the measured worst case is printed by bench/hostile.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.hostile import GENERATED, corpus, run_case
from tests.support.render import SUMMARY_LINE

CORPUS = corpus()  # the data files hostile/parse-*.yaml, then the generated cases


@pytest.mark.parametrize("case", list(CORPUS))
def test_a_hostile_file_is_refused_by_every_command_cleanly_and_cheaply(case: str,
                                                                        tmp_path: Path) -> None:
    source = tmp_path / "src"
    text = CORPUS[case]()
    before = sorted(path.name for path in tmp_path.iterdir())

    report = run_case(case, text, tmp_path)

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
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*before, "empty", "src"]), \
        "a refused render leaves nothing behind"
    assert isinstance(report["rss_growth_mb"], float)
    assert report["rss_growth_mb"] < 300, f"peak memory grew {report['rss_growth_mb']:.0f} MB"


def test_the_corpus_files_are_here() -> None:
    assert len([case for case in CORPUS if case not in GENERATED]) >= 8, \
        "tests/unit/renderer/hostile/parse-*.yaml"
