"""Text output of the simulated `kwbase` CLI: result formats, errors, timestamps.

Called by tests/world/kwdb/commands.py. Each format follows the kwbase source it is named after
(KWDB/KWDB, forked from CockroachDB v20.1):

- csv / tsv: kwbase/pkg/cli/format_table.go `csvReporter`, which writes with kwbase's fork of Go's
  encoding/csv: a header line, then one line per row, `\\n` line ends, a field quoted only when it
  contains the separator, a double quote, CR or LF, starts with a space, or is `\\.`; quotes
  inside are doubled. No row-count footer.
- table: `asciiTableReporter` (olekukonko/tablewriter with SetBorder(false) and
  SetTrimWhiteSpaceAtEOL(true)): headers centred, a `-----+----` rule, cells aligned per the
  command's alignment string (`l`, `r`, `c`; columns beyond the string use tablewriter's default:
  numbers right, text left), then `(N rows)`.
- records: `recordReporter` (`-[ RECORD n ]` blocks); raw: `rawReporter`.
- errors: kwbase/pkg/cli/cli.go `Main` prints `cliOutputError(..., showSeverity=true)` (error.go:
  `ERROR: <message>`, then `DETAIL:` / `HINT:` lines) and `Failed running "<command>"`; exit 1.
- timestamps: kwbase/pkg/cli/sql_util.go `formatVal` prints TIMESTAMP columns with
  `tree.DateTimeOutputFormat`; modelled as Go's "2006-01-02 15:04:05.999999" (fraction trimmed).
  The sources do hold the layouts (that constant, and node.go's localTimeFormat
  "2006-01-02 15:04:05.999999-07:00"), but which one V3.2.1 prints for these columns was not
  checked against a running node: consumers must read both, with or without an offset (the
  reconciler's adapter does). docs/testworld.md lists this among the known differences.

Not modelled: the `sql` and `html` formats (rejected with a clear simulation error by the
caller), tab expansion inside table cells, and the glog-style log lines the real CLI also writes
to stderr.
"""

from __future__ import annotations

import datetime
import re
import unicodedata
from collections.abc import Sequence

TABLE_FORMATS = ("tsv", "csv", "table", "records", "sql", "html", "raw")
# The formats this simulation can render; the rest are valid flag values it refuses.
RENDERED_FORMATS = ("tsv", "csv", "table", "records", "raw")

# tablewriter's test for "this default-aligned cell is a number" (tablewriter/util.go; its
# percent pattern can never match, so it is left out).
_DECIMAL = re.compile(r"^-?(?:\d{1,3}(?:,\d{3})*|\d+)(?:\.\d+)?$")


def _csv_field(field: str, sep: str) -> str:
    needs_quotes = field == "\\." or (
        field != ""
        and (sep in field or '"' in field or "\r" in field or "\n" in field or field[0].isspace())
    )
    if not needs_quotes:
        return field
    return '"' + field.replace('"', '""') + '"'


def render_delimited(headers: Sequence[str], rows: Sequence[Sequence[str]], sep: str) -> str:
    """csv (sep ",") or tsv (sep "\\t") exactly as csvReporter writes them."""
    lines = [sep.join(_csv_field(h, sep) for h in headers) if headers else "# no columns"]
    for row in rows:
        lines.append(sep.join(_csv_field(v, sep) for v in row) if row else "# empty")
    return "".join(line + "\n" for line in lines)


def _pluralize(n: int) -> str:
    return "" if n == 1 else "s"


def _pad_center(s: str, width: int) -> str:
    gap = width - len(s)
    if gap <= 0:
        return s
    left = gap // 2
    return " " * left + s + " " * (gap - left)


def _align_cell(value: str, width: int, align: str) -> str:
    if align == "r":
        return value.rjust(width)
    if align == "c":
        return _pad_center(value, width)
    if align == "l":
        return value.ljust(width)
    stripped = value.strip()
    if _DECIMAL.match(stripped):
        return value.rjust(width)
    return value.ljust(width)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """The pretty table of asciiTableReporter, including the `(N rows)` footer."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))

    def line(cells: Sequence[str]) -> str:
        return (" " + "|".join(" " + c + " " for c in cells)).rstrip()

    out = [line([_pad_center(h, widths[i]) for i, h in enumerate(headers)])]
    out.append("-" + "+".join("-" * (w + 2) for w in widths) + "-")
    for row in rows:
        cells = [
            _align_cell(v, widths[i], align[i] if i < len(align) else "") for i, v in enumerate(row)
        ]
        out.append(line(cells))
    out.append(f"({len(rows)} row{_pluralize(len(rows))})")
    return "".join(x + "\n" for x in out)


def render_records(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """recordReporter: one `-[ RECORD n ]` block per row (single-line values only)."""
    width = max((len(h) for h in headers), default=0)
    out: list[str] = []
    for n, row in enumerate(rows, start=1):
        out.append(f"-[ RECORD {n} ]")
        for h, v in zip(headers, row, strict=True):
            out.append(f"{h.ljust(width)} | {v}")
    if not headers:
        out.append(f"({len(rows)} row{_pluralize(len(rows))})")
    return "".join(x + "\n" for x in out)


def render_raw(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """rawReporter: column count, then each value with its length."""
    out = [f"# {len(headers)} column{_pluralize(len(headers))}"]
    for n, row in enumerate(rows, start=1):
        out.append(f"# row {n}")
        for v in row:
            out.append(f"## {len(v)}")
            out.append(v)
    out.append(f"# {len(rows)} row{_pluralize(len(rows))}")
    return "".join(x + "\n" for x in out)


def _graphic(ch: str) -> bool:
    """Go's unicode.IsGraphic: letters, marks, numbers, punctuation, symbols and spaces (Zs)."""
    return unicodedata.category(ch)[0] in "LMNPS" or unicodedata.category(ch) == "Zs"


def _go_quote_ascii(text: str) -> str:
    """Go's fmt `%+q` without its surrounding quotes: ASCII only, escapes as strconv writes
    them."""
    named = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
             "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}
    out = []
    for ch in text:
        code = ord(ch)
        if ch in named:
            out.append(named[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def format_value(text: str) -> str:
    """A string value as `kwbase sql` prints it (kwbase/pkg/cli/sql_util.go:936-963 formatVal,
    with showMoreChars as runQueryAndFormatResults passes it, :819, :832): as it is when every
    character is graphic, a tab or a newline; else Go-quoted in ASCII (`\\x01`, `\\u00e4`,
    `\\"`), so a name holding a control character reaches the reader escaped."""
    if all(_graphic(ch) or ch in "\t\n" for ch in text):
        return text
    return _go_quote_ascii(text)


def render(fmt: str, headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """Render a result set in one of RENDERED_FORMATS."""
    if fmt == "csv":
        return render_delimited(headers, rows, ",")
    if fmt == "tsv":
        return render_delimited(headers, rows, "\t")
    if fmt == "table":
        return render_table(headers, rows, align)
    if fmt == "records":
        return render_records(headers, rows)
    if fmt == "raw":
        return render_raw(headers, rows)
    raise ValueError(f"format {fmt!r} is not rendered by the simulation")


def cli_error(
    message: str,
    command: str,
    *,
    hint: str | None = None,
    detail: str | None = None,
    sqlstate: str | None = None,
) -> str:
    """stderr of a failed command: `ERROR: ...`, SQLSTATE/DETAIL/HINT, `Failed running "..."`."""
    text = f"ERROR: {message}\n"
    if sqlstate:
        text += f"SQLSTATE: {sqlstate}\n"
    if detail:
        text += f"DETAIL: {detail}\n"
    if hint:
        text += f"HINT: {hint}\n"
    return text + f'Failed running "{command}"\n'


def format_timestamp(sim_seconds: float, epoch_unix_s: float) -> str:
    """A TIMESTAMP value as the CLI prints it: `2026-01-01 00:00:05.25` (UTC)."""
    micros = round((epoch_unix_s + sim_seconds) * 1_000_000)
    instant = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=micros
    )
    text = instant.strftime("%Y-%m-%d %H:%M:%S")
    if instant.microsecond:
        text += "." + f"{instant.microsecond:06d}".rstrip("0")
    return text


def format_go_time(sim_seconds: float, epoch_unix_s: float) -> str:
    """Go's default time.Time String() in UTC, as the start banner prints it."""
    micros = round((epoch_unix_s + sim_seconds) * 1_000_000)
    instant = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=micros
    )
    frac = f"{instant.microsecond:06d}".rstrip("0")
    return instant.strftime("%Y-%m-%d %H:%M:%S") + (f".{frac}" if frac else "") + " +0000 UTC"
