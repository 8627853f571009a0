"""What a backup holds of one database: its tables, views and sequences, the privileges on it,
its foreign keys and comments (`DatabasePlan`, with the checks of each, since a plan is read
back from the target), and which databases and objects a backup takes (`choose_databases`,
`split_objects`).

Called by reconciler.kaiwudb.backup.start (the plan made at a backup's start), .catalog (the
rows read into these), .plan and .restore_plan (the plan written and read back). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.kaiwudb.backup.objects import (
    CREATE_STATEMENT_HEX,
    TEMP_SCHEMA_PREFIX,
    SequenceDef,
    View,
    from_hex,
    read_sequence,
    read_view,
)
from reconciler.kaiwudb.kwbase.sql import quote_ident, quote_literal

RELATIONAL = "RELATIONAL"
TIME_SERIES = "TIME SERIES"
SYSTEM_DATABASES = frozenset({"defaultdb", "postgres", "system"})
"""Never backed up: KaiwuDB makes them in every cluster (a restore could not IMPORT them)."""

TableRef = tuple[str, str]
"""(schema, table) of a table to back up."""


PRIVILEGES = ("ALL", "CREATE", "DROP", "GRANT", "SELECT", "INSERT", "DELETE", "UPDATE",
              "ZONECONFIG", "EXECUTE")
"""KWDB's privilege kinds, in its order (kwbase/pkg/sql/privilege/privilege.go:41-75); a
privilege read from KaiwuDB or a target that is not one of them is refused, never replayed."""
GRANT_ON = ("database", "schema", "table")
VIRTUAL_SCHEMAS = frozenset({"information_schema", "kwdb_internal", "pg_catalog", "public"})
"""The schemas whose privileges are the database's own (information_schema.go:1035-1045: only
user-defined schemas have their own)."""


@dataclass(frozen=True, order=True)
class Grant:
    """One privilege a user or role holds on a database, one of its user-defined schemas or
    one of its tables: what `SCHEMA_GRANTS_QUERY` and `TABLE_GRANTS_QUERY` read at the backup's
    start, and the restore grants again after the database's IMPORT (KWDB's own EXPORT ...
    WITH privileges is not used: it writes names into GRANT statements unquoted unless they
    hold an upper-case letter, kwbase/pkg/sql/export.go:431-552, and IMPORT fails on a
    database with no GRANT at all and overwrites the database's own grants,
    importer/import_database_details.go:186-209)."""

    on: str  # database, schema or table
    schema: str  # "" for the database
    table: str  # "" unless on a table
    grantee: str
    privilege: str


MATCH_OPTIONS = {"NONE": "", "FULL": " MATCH FULL"}
"""information_schema.referential_constraints' match_option (information_schema.go:777-786)
and how ADD CONSTRAINT writes it (MATCH SIMPLE is the default and is not written; MATCH
PARTIAL cannot be created: parser/sql.y:6590-6609)."""
REFERENCE_ACTIONS = ("NO ACTION", "RESTRICT", "SET NULL", "SET DEFAULT", "CASCADE")
"""update_rule and delete_rule as referential_constraints shows them (information_schema.go:
788-810), which are also the words ADD CONSTRAINT takes (parser/sql.y:6645-6670)."""


@dataclass(frozen=True, order=True)
class ForeignKey:
    """A foreign key of a table of the database onto a table of the same database: what
    `FOREIGN_KEYS_QUERY` and `KEY_COLUMNS_QUERY` read at the backup's start, and the restore
    adds again after the database's IMPORT (`foreign_key_statement`). KWDB's own EXPORT ...
    WITH foreign_key is not used: it names the referenced table's schema `public` whatever it
    is (show_create_clauses.go:194, tree.MakeTableName), and its CREATE TABLE would reference
    tables IMPORT has not made yet."""

    schema: str
    table: str
    name: str
    columns: tuple[str, ...]
    ref_schema: str
    ref_table: str
    ref_columns: tuple[str, ...]
    match: str = "NONE"  # NONE (MATCH SIMPLE) or FULL
    on_update: str = "NO ACTION"
    on_delete: str = "NO ACTION"
    # Checked against every row: False for a key added NOT VALID, which the restore adds
    # NOT VALID too (its rows may break it).
    validated: bool = True

    @property
    def shown(self) -> str:
        return (f"foreign key {json.dumps(self.name)} of "
                f"{json.dumps(self.schema)}.{json.dumps(self.table)}")


COMMENT_ON = {"1": "table", "2": "column", "3": "index"}
"""system.comments' type of a comment on a table, a column, an index (kwbase/pkg/keys/
constants.go:428-433; 0 is a database's, 4 a procedure's, which a backup does not carry)."""


@dataclass(frozen=True, order=True)
class Comment:
    """A comment on the database, or on one of its tables, columns or indexes: what
    `comments_queries` read at the backup's start, set again by the restore after the
    database's IMPORT (`comment_statement`). KWDB's EXPORT ... WITH comment is not used: it
    fails on a database that has no comment at all (export.go:401-405)."""

    on: str  # database, table, column, index
    schema: str = ""
    table: str = ""
    name: str = ""  # the column's or the index's
    text: str = ""


@dataclass(frozen=True)
class DatabasePlan:
    """A database to back up: its engine (SHOW DATABASES engine_type), its tables of every
    schema, as kwdb_internal.create_statements lists them (`DATABASE_OBJECTS_QUERY`), the
    privileges granted on it, its schemas and its tables, its foreign keys, and what of it the
    backup leaves out, each said in words (foreign keys onto another database). Its views
    and sequences, which EXPORT leaves out, the backup carries itself (objects.py)."""

    name: str
    engine: str  # RELATIONAL or TIME SERIES
    tables: tuple[TableRef, ...]
    grants: tuple[Grant, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()
    left_out: tuple[str, ...] = ()
    comments: tuple[Comment, ...] = ()
    views: tuple[View, ...] = ()
    sequences: tuple[SequenceDef, ...] = ()

    @property
    def relations(self) -> frozenset[TableRef]:
        """Its tables, views and sequences: what a GRANT ON TABLE may name."""
        return frozenset((*self.tables, *((v.schema, v.name) for v in self.views),
                          *((q.schema, q.name) for q in self.sequences)))

    def comment_problem(self, comment: Comment) -> str:
        """Why `comment` is not one the restore may set ("" when it is)."""
        shown = f"database {json.dumps(self.name)}: a comment on {comment.on}"
        if comment.on == "database" and not (comment.schema or comment.table or comment.name):
            return ""
        if comment.on not in COMMENT_ON.values() or (
                comment.schema, comment.table) not in self.tables:
            return f"{shown} {json.dumps(comment.schema)}.{json.dumps(comment.table)} that is " \
                   "not one of the backup's"
        if (comment.on == "table") == bool(comment.name):
            return f"{shown} names {json.dumps(comment.name)}"
        return ""

    def foreign_key_problem(self, fk: ForeignKey) -> str:
        """Why `fk` is not one the restore may add ("" when it is)."""
        shown = f"database {json.dumps(self.name)}: {fk.shown}"
        if (fk.schema, fk.table) not in self.tables or (
                fk.ref_schema, fk.ref_table) not in self.tables:
            return f"{shown} joins tables that are not the backup's"
        if not fk.name or not fk.columns or len(fk.columns) != len(fk.ref_columns) or not all(
                fk.columns + fk.ref_columns):
            return f"{shown} has no name, or columns that do not pair up"
        if fk.match not in MATCH_OPTIONS or fk.on_update not in REFERENCE_ACTIONS or \
                fk.on_delete not in REFERENCE_ACTIONS:
            return (f"{shown}: match {json.dumps(fk.match)}, on update "
                    f"{json.dumps(fk.on_update)}, on delete {json.dumps(fk.on_delete)}: not "
                    "what KWDB shows")
        return ""

    def grant_problem(self, grant: Grant) -> str:
        """Why `grant` is not one the restore may replay ("" when it is)."""
        shown = json.dumps(self.name)
        if grant.privilege not in PRIVILEGES:
            return (f"database {shown}: privilege {json.dumps(grant.privilege)} of "
                    f"{json.dumps(grant.grantee)} is not one KWDB knows")
        if not grant.grantee or any(ord(c) < 0x20 or ord(c) == 0x7F for c in grant.grantee):
            return f"database {shown}: grantee {json.dumps(grant.grantee)} is not a user name"
        if grant.on == "database" and not grant.schema and not grant.table:
            return ""
        if grant.on == "schema" and not grant.table and grant.schema in self.user_schemas:
            return ""
        if grant.on == "table" and (grant.schema, grant.table) in self.relations:
            return ""
        return (f"database {shown}: a grant on {grant.on} {json.dumps(grant.schema)}."
                f"{json.dumps(grant.table)} that is not one of the backup's")

    @property
    def user_schemas(self) -> frozenset[str]:
        return frozenset(schema for schema, _ in self.relations
                         if schema not in VIRTUAL_SCHEMAS)


DATABASE_OBJECTS_QUERY = (
    "SELECT schema_name, descriptor_name, descriptor_type, descriptor_id, "
    + CREATE_STATEMENT_HEX + " AS create_statement_hex FROM {db}.kwdb_internal."
    "create_statements WHERE database_name = {literal} ORDER BY schema_name, descriptor_name"
)
"""Every table, view and sequence of a database, in every schema, with its id and KWDB's
CREATE for it (kwbase/pkg/sql/kwdb_internal.go:1411-1440, 1510-1515; show_create_clauses.go).
Not `SHOW TABLES FROM db`: that lists the public schema only, views included and sequences
left out (kwbase/pkg/sql/delegate/show_tables.go:82-90), so a backup built on it silently
dropped every other schema."""


def objects_query(database: str) -> str:
    return DATABASE_OBJECTS_QUERY.format(db=quote_ident(database),
                                         literal=quote_literal(database))



@dataclass(frozen=True)
class DatabaseObjects:
    """What `objects_query` found in a database: its tables, the views and sequences the
    backup carries itself, those it leaves out (said in words), and why the database cannot be
    backed up ("" when it can)."""

    tables: tuple[TableRef, ...] = ()
    views: tuple[View, ...] = ()
    sequences: tuple[SequenceDef, ...] = ()
    left_out: tuple[str, ...] = ()
    problem: str = ""


def split_objects(database: str, rows: Sequence[Mapping[str, str]]) -> DatabaseObjects:
    """Sort what `objects_query` found. KWDB's EXPORT carries tables only: EXPORT ... FROM
    DATABASE exports the descriptors of type 'table' (kwbase/pkg/sql/export_details.go:
    333-338), and IMPORT DATABASE recreates tables and schemas only (importer/
    import_database_details.go:266-330); views and sequences are carried from their
    definitions (objects.py). Refused, naming them: a definition the restore could not
    run as it was, and a table whose column default calls nextval(): IMPORT runs its CREATE
    TABLE as SQL, which needs the sequence to exist (create_table.go:2299, sequence.go:470),
    and IMPORT DATABASE makes the database itself (import_stmt.go:1103), so its sequences
    cannot be made first. A temporary view or sequence ends with its session: left out."""
    tables: list[TableRef] = []
    views: list[View] = []
    sequences: list[SequenceDef] = []
    left_out: list[str] = []
    refused: list[str] = []
    for row in rows:
        kind = str(row.get("descriptor_type"))
        schema, name = str(row["schema_name"]), str(row["descriptor_name"])
        shown = f"{kind} {json.dumps(schema)}.{json.dumps(name)}"
        statement = from_hex(str(row.get("create_statement_hex") or ""))
        if statement is None:
            refused.append(f"{shown}: its definition did not read back as text")
            continue
        if kind == "table":
            if "nextval(" in statement.lower():
                refused.append(f"{shown}: a column default calls nextval(), and IMPORT makes "
                               "the table before any sequence of its database exists")
            tables.append((schema, name))
        elif kind in ("view", "sequence") and schema.startswith(TEMP_SCHEMA_PREFIX):
            left_out.append(f"the temporary {shown} in database {json.dumps(database)} (it "
                            "ends with its session)")
        elif kind == "view":
            order = str(row.get("descriptor_id") or "")
            view = (read_view(schema, name, int(order), statement) if order.isdigit()
                    else f"{shown}: its descriptor id reads {order[:20]!r}")
            if isinstance(view, View):
                views.append(view)
            else:
                refused.append(view)
        elif kind == "sequence":
            sequence = read_sequence(schema, name, statement)
            if isinstance(sequence, SequenceDef):
                sequences.append(sequence)
            else:
                refused.append(sequence)
        else:
            refused.append(f"{shown}: a kind of object the backup does not know")
    if refused:
        more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
        return DatabaseObjects(problem=(
            f"database {json.dumps(database)} holds what a backup cannot carry: "
            f"{'; '.join(refused[:10])}{more}. Leave the database out of spec.databases, or "
            "change these; a restore would lack them"))
    return DatabaseObjects(tuple(sorted(tables)), tuple(sorted(views)),
                           tuple(sorted(sequences)), tuple(left_out))


def choose_databases(shown: Sequence[tuple[str, str]], wanted: Sequence[str]
                     ) -> tuple[list[tuple[str, str]], list[str]]:
    """(name, engine) of the databases to back up, and the wanted ones that do not exist."""
    user = [(n, e) for n, e in shown if n not in SYSTEM_DATABASES]
    if not wanted:
        return sorted(user), []
    have = dict(user)
    return sorted((n, have[n]) for n in wanted if n in have), sorted(
        n for n in wanted if n not in have)


