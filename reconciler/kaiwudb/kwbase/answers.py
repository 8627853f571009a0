"""Reading kwbase's answers as hostile data: its `--format=csv` tables and the values in them,
checked column by column, so that output this adapter cannot read becomes an error, never a guess.

kwbase writes CSV with its fork of Go's encoding/csv (kwbase/pkg/cli/format_table.go
`csvReporter`: a header line, one line per row, RFC 4180 quoting), which Python's csv module
reads back exactly. Used by the parsers of reconciler.kaiwudb.kwbase.nodes, replication and jobs;
they turn _ParseError into ValueError, which KwbaseAdmin reports as UnexpectedOutput.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime


class _ParseError(Exception):
    pass


def _csv_rows(text: str) -> list[dict[str, str]]:
    """The first csv table in text (kwbase may print a blank line and a note after it)."""
    block: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            if block:
                break
            continue
        block.append(line)
    if not block:
        raise _ParseError("no output")
    reader = csv.DictReader(io.StringIO("\n".join(block) + "\n"))
    rows = list(reader)
    for row in rows:
        if None in row or any(value is None for value in row.values()):
            raise _ParseError(f"a row does not have the header's {len(reader.fieldnames or [])} "
                              "columns")
    return rows


def _bool(value: str, column: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "t"):
        return True
    if lowered in ("false", "f"):
        return False
    raise _ParseError(f"column {column}: {value!r} is not a boolean")


def _int(value: str, column: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise _ParseError(f"column {column}: {value!r} is not an integer") from None


def _opt_int(row: dict[str, str], column: str) -> int | None:
    if column not in row or row[column].strip().upper() in ("", "NULL"):
        return None
    return _int(row[column], column)


def _opt_bool(row: dict[str, str], column: str) -> bool | None:
    if column not in row or row[column].strip().upper() in ("", "NULL"):
        return None
    return _bool(row[column], column)


def _time(value: str) -> datetime | None:
    """kwbase prints TIMESTAMP columns as `2026-01-01 00:00:05.25` (CockroachDB v20.1 added
    `+00:00`); both are UTC."""
    value = value.strip()
    if not value or value.upper() == "NULL":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _ParseError(f"{value!r} is not a timestamp") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
