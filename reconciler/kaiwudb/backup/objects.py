"""Views and sequences: what KWDB's EXPORT leaves out and a backup carries itself.

KWDB's `EXPORT ... FROM DATABASE` exports the descriptors of type 'table' only
(kwbase/pkg/sql/export_details.go:333-338), and `IMPORT DATABASE` makes tables and schemas
only (importer/import_database_details.go:266-330). A backup therefore reads each view's and
each sequence's definition from `kwdb_internal.create_statements` (kwdb_internal.go:1411-1440;
`database.DATABASE_OBJECTS_QUERY`) and each sequence's value after the backup's timestamp,
and the restore makes them again once the tables are back: a database's sequences right
after its IMPORT, every view after every database (a view may read another database's
tables), in the order KWDB made them.

What the database returns is data: a sequence is rebuilt from the numbers its definition
holds; a view's definition is KWDB's own text of its query (ShowCreateView,
show_create_clauses.go:91-114, names fully qualified by optbuilder/create_view.go:53, 93),
read exactly (hex-encoded, so the CLI's escaping cannot change it) and run as one `CREATE VIEW`
under a name the reconciler quotes, only when it holds no `;` and reads as one statement
(`kwbase.sql.statement_problem`), reads only databases the backup holds, calls no kwdb_internal or
crdb_internal function and names no table by descriptor id (`[79 AS t]`: another table in
another cluster). A plain view runs nothing when it is made; a materialized one runs its query
as root (schema_changer.go:241-268), so it is refused. Anything else refuses the backup,
naming the object, before anything is exported; the restore checks the plan again, since it
reads it back from the target.

Called by reconciler.kaiwudb.backup.database (`split_objects`, `DatabasePlan`),
reconciler.kaiwudb.backup.plan (the plan's checks) and the steps that read and make them
again: reconciler.kaiwudb.backup.start (values) and reconciler.kaiwudb.backup.restore_steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.kaiwudb.kwbase.sql import quote_end, quote_ident, quote_literal, statement_problem

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_INT = r"(-?[0-9]{1,19})"
_SEQUENCE_OPTIONS = re.compile(
    rf" MINVALUE {_INT} MAXVALUE {_INT} INCREMENT {_INT} START {_INT}( VIRTUAL)?")
"""What ShowCreateSequence writes after the name (show_create_clauses.go:233-252; CACHE above
1 and CYCLE are refused by CREATE SEQUENCE, so they never appear)."""
_NUMERIC_TABLE_REF = re.compile(r"\[\s*[0-9]+\s*(\(|AS\b)", re.IGNORECASE)
"""A table named by its descriptor id (`[79 AS t]`, `[79(1, 2) AS t]`), which CREATE VIEW keeps
as written (optbuilder/util.go:947-958; tree/table_ref.go:50-67)."""
_INTERNAL_CALL = re.compile(r"\b(kwdb_internal|crdb_internal)\s*\.\s*[A-Za-z_]\w*\s*\(",
                            re.IGNORECASE)
"""A call into KWDB's internal functions (force_log_fatal and the like, builtins.go)."""
_IDENT = r'(?:[A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*|"(?:[^"]|"")+")'
_THREE_PART = re.compile(rf"({_IDENT})\s*\.\s*{_IDENT}\s*\.\s*{_IDENT}")
TEMP_SCHEMA_PREFIX = "pg_temp"
"""A session's temporary schema: its objects end with the session and are not carried."""


def _names(name: str) -> tuple[str, ...]:
    """How KWDB may print `name` in SHOW CREATE: bare when it reads back as itself (any
    lower-case letters, digits, _ and $, not a reserved word), else double-quoted
    (lex/encode.go:164-194, lex/predicates.go:85-118). Both are tried: what follows the name
    is checked on its own."""
    return (name, quote_ident(name))


def _without_strings(text: str) -> str:
    """`text` with its string literals blanked (names and keywords kept)."""
    found: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "'":
            end = quote_end(text, i)
            if end < 0:
                return "".join(found)
            found.append("''")
            i = end + 1
            continue
        found.append(text[i])
        i += 1
    return "".join(found)


def _ident(text: str) -> str:
    return text[1:-1].replace('""', '"') if text.startswith('"') else text.lower()


def _after_name(statement: str, head: str, name: str) -> str | None:
    """What follows `<head> <name>` in `statement`, or None when it does not start so."""
    for shown in _names(name):
        prefix = f"{head} {shown}"
        if statement.startswith(prefix):
            return statement[len(prefix):]
    return None


@dataclass(frozen=True, order=True)
class View:
    """A view of a database: made again after every database is back, in KWDB's order
    (`order`, its descriptor id: ids only grow, and there is no CREATE OR REPLACE VIEW,
    sem/tree/create.go:1962-1970, so a view's id is above every id it reads)."""

    order: int
    schema: str
    name: str
    definition: str  # "(<columns>) AS <query>", KWDB's text after the view's name
    materialized: bool = False

    @property
    def shown(self) -> str:
        return f"view {json.dumps(self.schema)}.{json.dumps(self.name)}"

    @property
    def databases_read(self) -> frozenset[str]:
        """The databases whose tables the definition names (KWDB names every table in full:
        <database>.<schema>.<table>)."""
        return frozenset(_ident(m.group(1))
                         for m in _THREE_PART.finditer(_without_strings(self.definition)))

    def problem(self) -> str:
        """Why this definition is not one the restore may run ("" when it is)."""
        if self.materialized:
            return (f"{self.shown}: a materialized view runs its query as root when it is "
                    "made, so the restore does not make one from a backup")
        if not self.definition.startswith("(") or " AS " not in self.definition:
            return f"{self.shown}: its definition is not \"(<columns>) AS <query>\""
        if ";" in self.definition:
            return (f"{self.shown}: its definition holds a ';', which the restore does not "
                    "run (it could be more than one statement)")
        single = statement_problem(self.statement("d"))
        if single:
            return f"{self.shown}: its definition does not read as one statement ({single})"
        if _NUMERIC_TABLE_REF.search(_without_strings(self.definition)):
            return (f"{self.shown}: it names a table by its descriptor id ([<id> AS ...]), "
                    "which means another table in another cluster")
        if _INTERNAL_CALL.search(_without_strings(self.definition)):
            return (f"{self.shown}: it calls a kwdb_internal or crdb_internal function, which "
                    "the restore does not make")
        return ""

    def statement(self, database: str) -> str:
        kind = "MATERIALIZED VIEW" if self.materialized else "VIEW"
        return (f"CREATE {kind} {quote_ident(database)}.{quote_ident(self.schema)}."
                f"{quote_ident(self.name)} {self.definition}")


@dataclass(frozen=True, order=True)
class SequenceDef:
    """A sequence of a database, and its value as read after the backup's timestamp (None:
    a virtual sequence, which has none). The value is read after the timestamp, not as of it:
    values move only in INCREMENT's direction (nextval; setval aside), so every value the
    exported rows hold lies before it."""

    schema: str
    name: str
    minvalue: int
    maxvalue: int
    increment: int
    start: int
    virtual: bool = False
    value: int | None = None

    @property
    def shown(self) -> str:
        return f"sequence {json.dumps(self.schema)}.{json.dumps(self.name)}"

    def problem(self) -> str:
        """Why these numbers are not a sequence KWDB makes ("" when they are:
        sequence.go:318-346 keeps START within MINVALUE..MAXVALUE and INCREMENT non-zero)."""
        numbers = (self.minvalue, self.maxvalue, self.increment, self.start)
        if not all(isinstance(n, int) and not isinstance(n, bool)
                   and INT64_MIN <= n <= INT64_MAX for n in numbers):
            return f"{self.shown}: its numbers are not 64-bit integers"
        if self.increment == 0 or not self.minvalue <= self.start <= self.maxvalue:
            return (f"{self.shown}: MINVALUE {self.minvalue} MAXVALUE {self.maxvalue} "
                    f"INCREMENT {self.increment} START {self.start} is not a sequence KWDB "
                    "makes")
        if self.virtual != (self.value is None) or (
                self.value is not None and not (isinstance(self.value, int) and not
                                                isinstance(self.value, bool)
                                                and INT64_MIN <= self.value <= INT64_MAX)):
            return f"{self.shown}: its value {self.value!r} does not fit it"
        return ""

    def qualified(self, database: str) -> str:
        return f"{quote_ident(database)}.{quote_ident(self.schema)}.{quote_ident(self.name)}"

    def create_statement(self, database: str) -> str:
        virtual = " VIRTUAL" if self.virtual else ""
        return (f"CREATE SEQUENCE {self.qualified(database)} MINVALUE {self.minvalue} "
                f"MAXVALUE {self.maxvalue} INCREMENT {self.increment} START {self.start}"
                f"{virtual}")

    def setval_statement(self, database: str) -> str | None:
        """The setval that gives the new sequence this one's value (None: nothing to set).
        A sequence stores START - INCREMENT until first used (create_sequence.go:152), which
        may lie outside MINVALUE..MAXVALUE, where setval refuses it (sequence.go:176-181);
        nextval checks the bound after adding and keeps what it added (sequence.go:69-80), so
        a used-up sequence may lie any number of steps beyond it. Beyond the end it starts
        from is a sequence never used: the new one holds the same. Beyond the end it runs to
        is a used-up one: the bound itself, with is_called, keeps it used up."""
        if self.value is None:
            return None
        value = self.value
        if value < self.minvalue or value > self.maxvalue:
            unused = value < self.minvalue if self.increment > 0 else value > self.maxvalue
            if unused:
                return None
            value = self.maxvalue if self.increment > 0 else self.minvalue
        return (f"SELECT setval({quote_literal(self.qualified(database))}, {value}, true)")


def read_view(schema: str, name: str, order: int, statement: str) -> View | str:
    """A view from its create_statement, or why it cannot be carried (databases it reads
    are checked with the plan: `View.databases_read`)."""
    for head, materialized in (("CREATE VIEW", False), ("CREATE MATERIALIZED VIEW", True)):
        rest = _after_name(statement, head, name)
        if rest is not None and rest.startswith(" "):
            view = View(order, schema, name, rest[1:], materialized)
            return view.problem() or view
    return (f"view {json.dumps(schema)}.{json.dumps(name)}: its definition does not start "
            "with CREATE VIEW and its name")


def read_sequence(schema: str, name: str, statement: str) -> SequenceDef | str:
    """A sequence's definition from its create_statement (its value read later), or why it
    cannot be carried."""
    rest = _after_name(statement, "CREATE SEQUENCE", name)
    found = _SEQUENCE_OPTIONS.fullmatch(rest) if rest is not None else None
    shown = f"sequence {json.dumps(schema)}.{json.dumps(name)}"
    if found is None:
        return (f"{shown}: its definition is not CREATE SEQUENCE <name> MINVALUE .. MAXVALUE "
                ".. INCREMENT .. START ..")
    low, high, step, start = (int(found.group(i)) for i in range(1, 5))
    virtual = bool(found.group(5))
    # A placeholder value until it is read (`sequence_value`); a virtual one has none.
    sequence = SequenceDef(schema, name, low, high, step, start, virtual,
                           None if virtual else start)
    return sequence.problem() or sequence


def sequence_value_query(database: str, sequence: SequenceDef) -> str:
    """A sequence's value (sequence_select.go:60-81: one row, last_value the stored value)."""
    return f"SELECT last_value FROM {sequence.qualified(database)}"


def sequence_value(sequence: SequenceDef, rows: Sequence[Mapping[str, str]]) -> int | str:
    """The value `sequence_value_query` answered, or why it is not one."""
    text = str(rows[0].get("last_value")) if len(rows) == 1 else ""
    if not re.fullmatch(r"-?[0-9]{1,19}", text) or not INT64_MIN <= int(text) <= INT64_MAX:
        return f"{sequence.shown}: its value reads {text[:40]!r}, not a 64-bit integer"
    return int(text)


CREATE_STATEMENT_HEX = "encode(convert_to(create_statement, 'utf8'), 'hex')"
"""A create_statement as hex (builtins.go:366-385, 877-893): kwbase's CLI prints a value
holding a character it deems not graphic with Go escapes (cli/sql_util.go:936-963), which
would change a definition's text; hex digits it prints as they are."""


def from_hex(text: str) -> str | None:
    """The text `CREATE_STATEMENT_HEX` encoded, or None when it is not UTF-8 in hex."""
    try:
        return bytes.fromhex(text).decode("utf-8")
    except ValueError:
        return None


def existing_objects_query(database: str) -> str:
    """Every table, view and sequence a restored database holds already, with its kind and
    definition: a step run again after a crash makes nothing twice, and finds out when what
    is there under a name is not what the backup holds."""
    return (f"SELECT schema_name, descriptor_name, descriptor_type, {CREATE_STATEMENT_HEX} AS "
            f"create_statement_hex FROM {quote_ident(database)}.kwdb_internal.create_statements"
            f" WHERE database_name = {quote_literal(database)}")


def view_from_json(raw: Mapping[str, Any]) -> View:
    """A view as plan.json holds it (KeyError, TypeError, ValueError when it does not)."""
    if not isinstance(raw, Mapping) or not isinstance(raw["order"], int):
        raise TypeError("a view is not an object with an integer order")
    return View(raw["order"], str(raw["schema"]), str(raw["name"]), str(raw["definition"]),
                raw.get("materialized") is True)


def sequence_from_json(raw: Mapping[str, Any]) -> SequenceDef:
    """A sequence as plan.json holds it (its numbers checked by `SequenceDef.problem`)."""
    if not isinstance(raw, Mapping):
        raise TypeError("a sequence is not an object")
    return SequenceDef(str(raw["schema"]), str(raw["name"]), raw["minvalue"], raw["maxvalue"],
                       raw["increment"], raw["start"], raw.get("virtual") is True,
                       raw.get("value"))
