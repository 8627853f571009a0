"""The one way a benchmark prints its table and appends it to bench/RESULTS.md.

Used by bench/cli_start.py, bench/listeners.py and bench/secret_flood.py: a caption line
(the date and the core count first, then what the caller says), a Markdown table, printed;
appended under its own heading unless the run asked not to.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def report(heading: str, caption: str, columns: Sequence[str], rows: Sequence[str], *,
           append: bool) -> str:
    """Print `rows` (Markdown table lines) under `columns`; append them to RESULTS.md under
    `## heading` when `append`. Returns the text printed."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = "\n".join([
        f"{stamp}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {caption}",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + " --- |" * len(columns),
        *rows,
    ])
    print(table)
    if append:
        with RESULTS.open("a") as out:
            out.write(f"\n## {heading}\n\n{table}\n")
    return table
