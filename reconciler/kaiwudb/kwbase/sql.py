"""SQL text the adapter sends: quoting names and strings the way KWDB reads them back, the check
that a statement is exactly one statement, and a statement's answer (SqlAnswer).

Used by KwbaseAdmin.sql (reconciler.kaiwudb.kwbase.admin), the job queries
(reconciler.kaiwudb.kwbase.jobs) and the backup and restore statements
(the modules of reconciler.kaiwudb.backup, and statements).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDENT_CHAR = re.compile(r"[\w$]")


def quote_end(text: str, start: int) -> int:
    """The index of the quote that closes the string or name opened at `start`, or -1. A `'`
    right after a lone e, E, b or B opens an escape string, where a backslash escapes the next
    character (kwbase/pkg/sql/parser/scan.go:249-279, 1025-1031); elsewhere only a doubled
    quote stands for itself."""
    quote = text[start]
    prefix = text[start - 1:start] if start else ""
    escapes = quote == "'" and prefix in ("e", "E", "b", "B") and not (
        start >= 2 and _IDENT_CHAR.match(text[start - 2]))
    i = start + 1
    while i < len(text):
        if escapes and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            if text[i + 1:i + 2] == quote:
                i += 2
                continue
            return i
        i += 1
    return -1


def statement_problem(text: str) -> str:
    """Why `text` is not exactly one SQL statement ("" when it is): a `;`, `--` or `/*`
    outside string literals ('...', '' inside; e'...' with backslash escapes) and quoted
    identifiers ("...", "" inside), a `$` that starts a token (a placeholder or a dollar
    quote, scan.go:224-231, 1102-1160, which this check does not read), an unterminated quote,
    or a NUL. KWDB's CLI sends a whole -e text to the server, which runs every statement in it
    (kwbase/pkg/cli/sql.go, runQueryAndFormatResults; the parser splits at `;` tokens only,
    parser/parse.go:262-264)."""
    if "\x00" in text:
        return "it holds a NUL character"
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            end = quote_end(text, i)
            if end < 0:
                return f"an unterminated {ch} quote at character {i}"
            i = end + 1
            continue
        if ch == ";" and text[i + 1:].strip():
            return f"a ';' at character {i} would end it and start another"
        if text.startswith(("--", "/*"), i):
            return f"a comment starts at character {i}"
        if ch == "$" and not (i and _IDENT_CHAR.match(text[i - 1])):
            return f"a '$' at character {i} starts a placeholder or a dollar quote"
        i += 1
    return ""


def quote_ident(name: str) -> str:
    """An identifier as KWDB reads it back exactly: double-quoted, a `"` inside doubled, case
    and reserved words kept (kwbase/pkg/sql/lex/encode.go:172-194, EncodeEscapedSQLIdent)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A string literal as KWDB reads it back exactly: single quotes, a `'` inside doubled
    (kwbase/pkg/sql/lex/encode.go EncodeSQLStringWithFlags writes them so; a backslash is no
    escape in a standard string)."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class SqlAnswer:
    """A statement's result: column names, rows (column -> text) and server notices."""

    headers: tuple[str, ...]
    rows: tuple[dict[str, str], ...]
    notices: tuple[str, ...]
