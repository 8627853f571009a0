"""Backup decisions as pure functions: what a backup exports and in which order, whether an
export's answer is a success, whether the files arrived intact, when a schedule is due, which
old backups retention deletes, whether a backup may start now, and the restore order.

Called by reconciler/kaiwudb/backup.py (the backup step) and by the restore part of the
lifecycle; no I/O here, so every decision has a fast test (tests/unit/reconciler/
test_backup_plan.py). docs/backup.md explains the choices.

What a backup is (KWDB 3.2 open source has EXPORT and IMPORT, not BACKUP; kaiwudb-facts.md),
for the i-th database and its j-th table:
  settings   EXPORT CLUSTER SETTING TO SQL          -> settings/clustersetting.sql
  users      EXPORT USERS TO SQL                    -> users/users.sql
  d<i>.schema  (relational) EXPORT ... FROM DATABASE "<db>" WITH meta_only
                                                    -> d<i>/meta.sql, d<i>/public/<t>/meta.sql
  d<i>.t<j>  (relational) EXPORT ... FROM SELECT * FROM "<db>"."public"."<t>"
             AS OF SYSTEM TIME '<consistent_to>'    -> d<i>/public/<t>/n<node>.<chunk>.csv
  d<i>       (time-series) EXPORT ... FROM DATABASE "<db>"
                                                    -> d<i>/meta.sql, d<i>/<t>/n<node>.*.csv
so the target holds exactly the directory layout `IMPORT DATABASE CSV DATA` reads back (it takes
the database's name from meta.sql, kwbase/pkg/sql/importer/import_database_details.go:50, and
each table's from its folder's meta.sql, :320), and every relational table is read at the one
timestamp chosen when the backup started.

Names read from KaiwuDB are data, never code or paths of ours: every identifier is quoted as
KWDB quotes one (`quote_ident`), the item ids and the directories the reconciler makes and
removes on a node come from indexes, and a name KWDB's own EXPORT would turn into a path or a
statement it cannot read back (`name_problem`) refuses the backup, naming it, before anything is
exported. Table folders (`d<i>/public/<t>`) are KWDB's own layout (export_details.go:287 joins
the table name into the path); `name_problem` makes sure every such name is one path component.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

from reconciler.kaiwudb.backup_objects import (
    CREATE_STATEMENT_HEX,
    TEMP_SCHEMA_PREFIX,
    SequenceDef,
    View,
    from_hex,
    read_sequence,
    read_view,
    sequence_from_json,
    view_from_json,
)
from reconciler.kaiwudb.kwbase.sql import quote_ident, quote_literal
from renderer.cron import cron

RELATIONAL = "RELATIONAL"
TIME_SERIES = "TIME SERIES"
SYSTEM_DATABASES = frozenset({"defaultdb", "postgres", "system"})
"""Never backed up: KaiwuDB makes them in every cluster (a restore could not IMPORT them)."""

PLAN_FILE = "plan.json"
MANIFEST_FILE = "manifest.json"
ITEMS_DIR = "items"
LAYOUT = 2
"""The plan's layout: 2 names items and node directories by index. A plan.json without it was
written by an older reconciler and is not carried on (the backup fails, saying so)."""


# ----- names from KaiwuDB ------------------------------------------------------------------------
_BARE_LOWER = re.compile(r"[a-z_][a-z0-9_$]*")
_HLC = re.compile(r"[0-9]{1,25}(\.[0-9]{1,12})?")
_UID = re.compile(r"[0-9a-zA-Z][0-9a-zA-Z-]{0,62}")


def name_problem(what: str, name: str) -> str:
    """Why a name read from KaiwuDB cannot be carried by a backup ("" when it can).

    KWDB's EXPORT joins schema and table names into the files' paths (kwbase/pkg/sql/
    export_details.go:256, 287: Go's path.Join, which resolves `..`), so each must be exactly
    one path component, printable. It writes a database's name into meta.sql quoted only when
    it holds an upper-case letter, without doubling a `"` (export_details.go:151-154), and IMPORT
    parses that file back (import_database_details.go:50): a database name must read back as
    itself there."""
    shown = json.dumps(name, ensure_ascii=True)
    if not name:
        return f"{what} with an empty name"
    if name in (".", "..") or "/" in name or "\\" in name or any(
            ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return (f"{what} {shown}: KWDB's EXPORT would make it a path of several components or "
                "none (a '/', '\\', '.', '..' or a control character)")
    if what == "database" and not (_BARE_LOWER.fullmatch(name) or (
            any(c.isupper() for c in name) and '"' not in name)):
        return (f"database {shown}: KWDB's EXPORT writes it into meta.sql in a form IMPORT would "
                "not read back as the same name (rename it to lower-case letters, digits and _)")
    return ""


def users_problem(names: Sequence[str]) -> str:
    """Why the cluster's users cannot be carried ("" when they can): KWDB's EXPORT USERS writes
    `CREATE USER <name>` with the name as it is, never quoted (kwbase/pkg/sql/export.go:
    634-690), and IMPORT USERS parses the whole file before it runs any of it
    (importer/import_stmt.go:1573-1576). A name KWDB allows (create_role.go:242: `-` and `.`
    too) that is no bare identifier would make every restore of the backup fail at its users
    step. Reserved words (a user named `select`) are not recognised here."""
    bad = [name for name in names if name not in ("admin", "root")
           and not _BARE_LOWER.fullmatch(name)]
    if not bad:
        return ""
    shown = ", ".join(json.dumps(name) for name in bad[:10])
    return (f"users {shown}: KWDB's EXPORT USERS writes user names unquoted, so its IMPORT "
            "USERS could not read these back and no restore of the backup could succeed; "
            "replace each with a user named with lower-case letters, digits and _ only "
            "(CREATE USER, the same GRANTs, DROP USER)")


def hlc_problem(text: str) -> str:
    """Why a timestamp read from KaiwuDB is not a decimal HLC timestamp ("" when it is)."""
    if _HLC.fullmatch(text):
        return ""
    return f"cluster_logical_timestamp() answered {json.dumps(text)}, not a decimal timestamp"


def safe_relative(path: str) -> bool:
    """A relative path of printable components, none of them '', '.' or '..' (for file names
    found on a node and keys written into a target)."""
    parts = path.split("/")
    return bool(path) and all(p not in ("", ".", "..") for p in parts) and not any(
        ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in path)


def inside(directory: str, path: str) -> bool:
    """`path` lies strictly inside `directory` (both absolute; `..` resolved lexically, and
    refused outright so nothing depends on how a shell or the kernel resolves it)."""
    if ".." in path.split("/") or not path.startswith("/"):
        return False
    return posixpath.normpath(path).startswith(posixpath.normpath(directory) + "/")


# ----- the plan ----------------------------------------------------------------------------------
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
    and sequences, which EXPORT leaves out, the backup carries itself (backup_objects.py)."""

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


SCHEMA_GRANTS_QUERY = (
    "SELECT table_schema, grantee, privilege_type FROM {db}.information_schema."
    "schema_privileges WHERE grantee NOT IN ('admin', 'root') ORDER BY table_schema, grantee, "
    "privilege_type")
"""Privileges on the database (every schema but the user-defined ones shows the database's:
KWDB's own export reads them off `information_schema`, kwbase/pkg/sql/export.go:431-466) and
on its user-defined schemas (information_schema.go:1023-1066). root and admin hold ALL on
everything KWDB makes; they are not carried."""
TABLE_GRANTS_QUERY = (
    "SELECT table_schema, table_name, grantee, privilege_type FROM {db}.information_schema."
    "table_privileges WHERE grantee NOT IN ('admin', 'root') ORDER BY table_schema, table_name, "
    "grantee, privilege_type")
"""Privileges on every table of the database (information_schema.go:1358-1400; a table
created after a GRANT ON DATABASE holds a copy of the database's, create_table.go:447)."""


def grants_queries(database: str) -> tuple[str, str]:
    return (SCHEMA_GRANTS_QUERY.format(db=quote_ident(database)),
            TABLE_GRANTS_QUERY.format(db=quote_ident(database)))


def read_grants(db: DatabasePlan, schema_rows: Sequence[Mapping[str, str]],
                table_rows: Sequence[Mapping[str, str]]) -> tuple[tuple[Grant, ...], str]:
    """The grants of `db` from what `grants_queries` answered, and why they cannot be carried
    ("" when they can). Rows about what the backup does not carry (virtual tables, whose
    SELECT `public` holds) are passed over; a view's or a sequence's are carried (GRANT ON
    TABLE names them too)."""
    found: set[Grant] = set()
    for row in schema_rows:
        schema = str(row.get("table_schema") or "")
        if schema == "information_schema":
            found.add(Grant("database", "", "", str(row.get("grantee") or ""),
                            str(row.get("privilege_type") or "")))
        elif schema in db.user_schemas:
            found.add(Grant("schema", schema, "", str(row.get("grantee") or ""),
                            str(row.get("privilege_type") or "")))
    for row in table_rows:
        ref = (str(row.get("table_schema") or ""), str(row.get("table_name") or ""))
        if ref in db.relations:
            found.add(Grant("table", *ref, str(row.get("grantee") or ""),
                            str(row.get("privilege_type") or "")))
    grants = tuple(sorted(found))
    return grants, next((p for g in grants if (p := db.grant_problem(g))), "")


def grant_statements(db: DatabasePlan) -> list[tuple[str, str]]:
    """(database to run it in, statement) granting again what `db` held: one GRANT per object
    and grantee for the database and its schemas, and one per grantee and set of privileges
    for its tables, which it lists (`TABLE a, b`, sql.y:5296-5299), so a database of a
    thousand tables is a few statements. Every name is quoted (`quote_ident`), every
    privilege one of KWDB's. A schema is named in the session's database (`GRANT ... ON
    SCHEMA` takes unqualified names: kwbase/pkg/sql/parser/sql.y:5304-5307)."""
    held: dict[tuple[str, str, str, str], list[str]] = {}
    for g in sorted(db.grants):
        held.setdefault((g.on, g.schema, g.table, g.grantee), []).append(g.privilege)
    found = []
    tables: dict[tuple[str, str], list[str]] = {}  # (grantee, privileges) -> tables
    for (on, schema, table, grantee), privileges in held.items():
        listed = ", ".join(sorted(privileges, key=PRIVILEGES.index))
        if on == "table":
            tables.setdefault((grantee, listed), []).append(
                f"{quote_ident(db.name)}.{quote_ident(schema)}.{quote_ident(table)}")
            continue
        target = (f"DATABASE {quote_ident(db.name)}" if on == "database"
                  else f"SCHEMA {quote_ident(schema)}")
        found.append((db.name if on == "schema" else "",
                      f"GRANT {listed} ON {target} TO {quote_ident(grantee)}"))
    for (grantee, listed), names in tables.items():
        found.append(("", f"GRANT {listed} ON TABLE {', '.join(names)} TO "
                          f"{quote_ident(grantee)}"))
    return found


FOREIGN_KEYS_QUERY = (
    "SELECT t.schema_name, t.name AS table_name, d.dependson_name AS constraint_name, "
    "r.database_name AS referenced_database, r.schema_name AS referenced_schema, "
    "r.name AS referenced_table, c.unique_constraint_name, c.match_option, c.update_rule, "
    "c.delete_rule, k.convalidated FROM {db}.kwdb_internal.backward_dependencies AS d "
    "JOIN {db}.kwdb_internal.tables AS t ON t.table_id = d.descriptor_id "
    "JOIN {db}.kwdb_internal.tables AS r ON r.table_id = d.dependson_id "
    "JOIN {db}.information_schema.referential_constraints AS c ON c.constraint_schema = "
    "t.schema_name AND c.table_name = t.name AND c.constraint_name = d.dependson_name "
    "JOIN {db}.pg_catalog.pg_constraint AS k ON k.conrelid::INT8 = d.descriptor_id AND "
    "k.conname = d.dependson_name AND k.contype = 'f' "
    "WHERE d.dependson_type = 'fk' ORDER BY 1, 2, 3")
"""Every foreign key of the database's tables, with the referenced table's database and schema
by descriptor id: backward_dependencies has a row per outbound foreign key (kwdb_internal.go:
1924-1985: dependson_id is the referenced table, dependson_name the constraint), tables names
every table with its database and schema (kwdb_internal.go:233-300), pg_constraint says
whether the key has been checked against every row (pg_catalog.go:925-1040: conrelid is the
table's descriptor id, convalidated false while it is being checked and for a key added NOT
VALID). Not referential_constraints alone: it gives the referenced table's name without its
schema or database (unique_constraint_schema is the referencing table's,
information_schema.go:812-870), and not SHOW CREATE's text, which names every referenced
table's schema `public` (show_create_clauses.go:194). Read from KWDB's source, not run on a
real KWDB (docs/kwdb-contract.md)."""
KEY_COLUMNS_QUERY = (
    "SELECT table_schema, table_name, constraint_name, column_name FROM {db}."
    "information_schema.key_column_usage ORDER BY table_schema, table_name, constraint_name, "
    "ordinal_position")
"""The columns of every primary key, unique constraint and foreign key of the database, in
order (information_schema.go:664-725). A foreign key's referenced columns are its referenced
index's, in that index's order: KWDB finds that index by equal column lists in order
(sqlbase/table.go:843-869, structured.go:109-119)."""


def foreign_keys_queries(database: str) -> tuple[str, str]:
    return (FOREIGN_KEYS_QUERY.format(db=quote_ident(database)),
            KEY_COLUMNS_QUERY.format(db=quote_ident(database)))


def read_foreign_keys(db: DatabasePlan, fk_rows: Sequence[Mapping[str, str]],
                      column_rows: Sequence[Mapping[str, str]]
                      ) -> tuple[tuple[ForeignKey, ...], tuple[str, ...], str]:
    """The foreign keys of `db` from what `foreign_keys_queries` answered; what is left out,
    said in words (a foreign key onto another database: the restore brings back one database
    at a time, and the other may not be restored, or restored under its name; a key onto a
    table's hidden rowid, which EXPORT does not write: key_column_usage leaves a primary key
    of hidden columns out, sqlbase/table.go:741-752); and why the database's foreign keys
    cannot be carried ("" when they can)."""
    columns: dict[tuple[str, str, str], list[str]] = {}
    for row in column_rows:
        key = (str(row.get("table_schema") or ""), str(row.get("table_name") or ""),
               str(row.get("constraint_name") or ""))
        columns.setdefault(key, []).append(str(row.get("column_name") or ""))
    found, left_out = [], []
    for row in fk_rows:
        schema, table, name = (str(row.get(c) or "") for c in (
            "schema_name", "table_name", "constraint_name"))
        ref_db, ref_schema, ref_table = (str(row.get(c) or "") for c in (
            "referenced_database", "referenced_schema", "referenced_table"))
        fk = ForeignKey(
            schema, table, name, tuple(columns.get((schema, table, name), ())), ref_schema,
            ref_table, tuple(columns.get((ref_schema, ref_table,
                                          str(row.get("unique_constraint_name") or "")), ())),
            str(row.get("match_option") or ""), str(row.get("update_rule") or ""),
            str(row.get("delete_rule") or ""), str(row.get("convalidated")) != "false")
        onto = (f"{fk.shown} in database {json.dumps(db.name)}, onto {json.dumps(ref_db)}."
                f"{json.dumps(ref_schema)}.{json.dumps(ref_table)}")
        if ref_db != db.name:
            left_out.append(f"{onto} in another database")
        elif fk.columns and not fk.ref_columns:
            left_out.append(f"{onto}'s hidden rowid (a table without a primary key of its "
                            "own: its rowid is not exported)")
        else:
            found.append(fk)
    keys = tuple(sorted(set(found)))
    return keys, tuple(left_out), next((p for fk in keys if (p := db.foreign_key_problem(fk))),
                                       "")


def foreign_key_statement(db: DatabasePlan, fk: ForeignKey) -> str:
    """ALTER TABLE ... ADD CONSTRAINT ... FOREIGN KEY as KWDB formats one (tree/create.go:
    947-956, 992-1016), every name quoted and both tables named in full; adding it checks every row
    (check.go:300-325), so a restore whose data breaks it fails, saying so."""
    def table(schema: str, name: str) -> str:
        return f"{quote_ident(db.name)}.{quote_ident(schema)}.{quote_ident(name)}"

    def names(columns: tuple[str, ...]) -> str:
        return ", ".join(quote_ident(c) for c in columns)

    actions = "".join(f" ON {what} {action}" for what, action in (
        ("DELETE", fk.on_delete), ("UPDATE", fk.on_update)) if action != "NO ACTION")
    unchecked = "" if fk.validated else " NOT VALID"  # parser/sql.y:2201-2209
    return (f"ALTER TABLE {table(fk.schema, fk.table)} ADD CONSTRAINT {quote_ident(fk.name)} "
            f"FOREIGN KEY ({names(fk.columns)}) REFERENCES {table(fk.ref_schema, fk.ref_table)} "
            f"({names(fk.ref_columns)}){MATCH_OPTIONS[fk.match]}{actions}{unchecked}")


def unsettled_foreign_keys(first: Sequence[ForeignKey], second: Sequence[ForeignKey]
                           ) -> tuple[tuple[ForeignKey, ...], tuple[str, ...]]:
    """The keys read before and after the backup's timestamp was taken that are the same in
    both reads (held throughout, so the rows as of the timestamp satisfy them), and the
    others, said in words: a key dropped or added meanwhile may not fit those rows."""
    def same(fk: ForeignKey) -> ForeignKey:  # a key KWDB finished checking meanwhile held
        return replace(fk, validated=True)

    again = {same(fk) for fk in second}
    kept = tuple(sorted(fk for fk in set(first) if same(fk) in again))
    changed = sorted({fk.shown for fk in {same(fk) for fk in first} ^ again})
    return kept, tuple(f"{what}, changed while the backup started" for what in changed)


def foreign_keys_to_add(db: DatabasePlan, rows: Sequence[Mapping[str, str]]
                        ) -> tuple[list[ForeignKey], list[ForeignKey]]:
    """What the restore's `foreign keys <db>` step does next, from what `FOREIGN_KEYS_QUERY`
    answers on the restored database: (keys to add, keys KWDB is still checking). A key KWDB
    lists but has not validated yet is being checked (its ADD runs a schema change that reads
    every row, sql/backfill.go:419-490) unless the backup's own was NOT VALID. The step is done
    when both are empty: each key there, and checked."""
    there = {(str(r.get("schema_name")), str(r.get("table_name")),
              str(r.get("constraint_name"))): str(r.get("convalidated")) != "false"
             for r in rows}
    to_add, checking = [], []
    for fk in db.foreign_keys:
        key = (fk.schema, fk.table, fk.name)
        if key not in there:
            to_add.append(fk)
        elif fk.validated and not there[key]:
            checking.append(fk)
    return to_add, checking


DATABASE_COMMENT_QUERY = (
    "SELECT c.comment FROM system.comments AS c JOIN {db}.pg_catalog.pg_database AS d ON "
    "c.object_id = d.oid::INT8 WHERE c.type = 0 AND d.datname = {literal}")
"""The database's comment: system.comments keeps one row per comment (sqlbase/system.go:
300-308), a database's with its descriptor id, which pg_database's oid is (pg_catalog.go:
1134-1141)."""
COMMENTS_QUERY = (
    "SELECT c.type, t.schema_name, t.name AS table_name, col.column_name, idx.index_name, "
    "c.comment FROM system.comments AS c JOIN {db}.kwdb_internal.tables AS t ON t.table_id = "
    "c.object_id LEFT JOIN {db}.kwdb_internal.table_columns AS col ON c.type = 2 AND "
    "col.descriptor_id = c.object_id AND col.column_id = c.sub_id LEFT JOIN {db}.kwdb_internal."
    "table_indexes AS idx ON c.type = 3 AND idx.descriptor_id = c.object_id AND idx.index_id = "
    "c.sub_id WHERE c.type IN (1, 2, 3) AND t.database_name = {literal} AND t.state = "
    "'PUBLIC' AND ((c.type = 1 AND c.sub_id = 0) OR (c.type = 2 AND col.column_name IS NOT "
    "NULL) OR (c.type = 3 AND idx.index_name IS NOT NULL)) ORDER BY 2, 3, 1, 4, 5")
"""Comments on the database's tables, columns and indexes: a table's with the table's
descriptor id, a column's and an index's with its id as sub_id (keys/constants.go:428-433;
comment_on_*.go), named through kwdb_internal.tables, table_columns and table_indexes
(kwdb_internal.go:233-300, 1710-1790). Rows naming nothing are passed over: KWDB keeps the
comments of a dropped table until it is collected (kwdb_internal.tables lists it, state
DROP) and of a primary index that ALTER PRIMARY KEY replaced (drop_table.go:753-758,
alter_primary_key.go), and a NULL name prints as the text NULL. Read from KWDB's source,
not run on a real KWDB."""
COMMENT_MAX_CHARS = 64 * 1024
"""A longer comment is left out, named: its COMMENT ON goes whole into one exec argument."""


def comments_queries(database: str) -> tuple[str, str]:
    literal = quote_literal(database)
    return (DATABASE_COMMENT_QUERY.format(db=quote_ident(database), literal=literal),
            COMMENTS_QUERY.format(db=quote_ident(database), literal=literal))


def read_comments(db: DatabasePlan, database_rows: Sequence[Mapping[str, str]],
                  rows: Sequence[Mapping[str, str]]
                  ) -> tuple[tuple[Comment, ...], tuple[str, ...]]:
    """The comments of `db` from what `comments_queries` answered (an empty one too: KWDB keeps
    `IS ''` as a row, comment_on_table.go), and those left out, said in words: one holding a
    backslash in its text or in its column's or index's name, which kwbase's CLI may have
    written for a character it prints escaped (cli/sql_util.go:929-963), so what was read is
    not surely it; one longer than COMMENT_MAX_CHARS; one on a table the backup does not
    hold (made after its tables were read)."""
    found, left_out = [], []
    candidates = [Comment("database", text=str(r.get("comment") or "")) for r in database_rows]
    for row in rows:
        on = COMMENT_ON.get(str(row.get("type")), "")
        name = str(row.get("column_name") if on == "column" else row.get("index_name")
                   if on == "index" else "")
        candidates.append(Comment(on, str(row.get("schema_name") or ""),
                                  str(row.get("table_name") or ""), name,
                                  str(row.get("comment") or "")))
    for comment in candidates:
        where = ".".join(json.dumps(p) for p in (comment.schema, comment.table, comment.name)
                         if p)
        shown = (f"the comment on {comment.on} {where or json.dumps(db.name)} in database "
                 f"{json.dumps(db.name)}")
        if "\\" in comment.text or "\\" in comment.name:
            left_out.append(f"{shown} (it or its name holds a backslash)")
        elif len(comment.text) > COMMENT_MAX_CHARS:
            left_out.append(f"{shown} (longer than {COMMENT_MAX_CHARS} characters)")
        elif db.comment_problem(comment):
            left_out.append(f"{shown} (on a table made while the backup started)")
        else:
            found.append(comment)
    return tuple(sorted(set(found))), tuple(left_out)


def comment_statement(db: DatabasePlan, comment: Comment) -> str:
    """COMMENT ON DATABASE | TABLE | COLUMN | INDEX ... IS '<text>' (parser/sql.y:2644-2686),
    every name quoted and the table named in full; setting a comment replaces the one there,
    so it is safe to repeat."""
    table = f"{quote_ident(db.name)}.{quote_ident(comment.schema)}.{quote_ident(comment.table)}"
    target = {"database": f"DATABASE {quote_ident(db.name)}", "table": f"TABLE {table}",
              "column": f"COLUMN {table}.{quote_ident(comment.name)}",
              "index": f"INDEX {table}@{quote_ident(comment.name)}"}[comment.on]
    return f"COMMENT ON {target} IS {quote_literal(comment.text)}"


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
    definitions (backup_objects.py). Refused, naming them: a definition the restore could not
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


@dataclass(frozen=True)
class Item:
    """One EXPORT of a backup. `node_dir`: where it writes, under the run's directory on the
    node; `target_dir`: where its files go under the backup's location in the target."""

    id: str
    statement: str
    node_dir: str
    target_dir: str
    kind: str  # "sql" (settings, users), "schema", "table", "ts-database"
    label: str = ""  # for people: what it exports, names JSON-quoted (control characters shown)
    source: str = ""  # a table's quoted name, "<db>"."<schema>"."<table>" (kind "table")

    @property
    def shown(self) -> str:
        return self.label or self.id


@dataclass(frozen=True)
class Plan:
    """Everything decided when a backup starts; written to the target first (plan.json), so a
    reconciler that restarts carries on with the same node and timestamp."""

    backup: str
    uid: str
    pod: str
    node_id: int
    consistent_to: str  # HLC decimal nanoseconds from cluster_logical_timestamp()
    databases: tuple[DatabasePlan, ...]
    layout: int = LAYOUT
    # The grants were read (a plan written before privileges were carried has none to say).
    privileges: bool = True
    # The foreign keys were read (likewise), the comments.
    foreign_keys: bool = True
    comments: bool = True

    def problem(self) -> str:
        """Why this plan cannot be carried out ("" when it can): a plan is read back from the
        target, which is not the reconciler's to trust either."""
        if self.layout != LAYOUT:
            return (f"{PLAN_FILE} has layout {self.layout}, this reconciler writes {LAYOUT}: it "
                    "was started by another version; start a new backup")
        if not _UID.fullmatch(self.uid):
            return f"{PLAN_FILE}: uid {json.dumps(self.uid)} is not a Kubernetes uid"
        found = hlc_problem(self.consistent_to)
        for db in self.databases:
            found = found or name_problem("database", db.name)
            if db.engine not in (RELATIONAL, TIME_SERIES):
                found = found or f"database {json.dumps(db.name)}: engine {db.engine!r} unknown"
            for schema, table in db.tables:
                found = found or name_problem("schema", schema) or name_problem("table", table)
            for grant in db.grants:
                found = found or (f"grant on {grant.on}: {grant.on!r} is not one of "
                                  f"{', '.join(GRANT_ON)}" if grant.on not in GRANT_ON
                                  else db.grant_problem(grant))
            for fk in db.foreign_keys:
                found = found or db.foreign_key_problem(fk)
            for comment in db.comments:
                found = found or db.comment_problem(comment)
            for view in db.views:
                elsewhere = sorted(view.databases_read - {d.name for d in self.databases})
                found = found or (f"database {json.dumps(db.name)}: {view.shown} reads "
                                  f"database {json.dumps(elsewhere[0])}, which the backup does "
                                  "not hold (add it to spec.databases)" if elsewhere else "")
            carried: list[View | SequenceDef] = [*db.views, *db.sequences]
            for each in carried:
                found = found or (f"database {json.dumps(db.name)}: {each.shown} has an "
                                  "empty name" if not (each.schema and each.name)
                                  else each.problem())
        return found

    @property
    def run_dir(self) -> str:
        """The directory under the node's external-I/O directory this backup writes in."""
        return f"kaiwu-backup-{self.uid}"

    def url(self, node_dir: str) -> str:
        return f"nodelocal://{self.node_id}/{self.run_dir}/{node_dir}"

    def items(self) -> list[Item]:
        """Every EXPORT, in order. Ids and node directories are indexes (d<i>, d<i>.t<j>);
        names appear only quoted in statements and, checked by `problem`, as KWDB's own table
        folders in the target."""
        found = [
            Item("settings", f'EXPORT CLUSTER SETTING TO SQL "{self.url("settings")}"',
                 "settings", "settings", "sql"),
            Item("users", f'EXPORT USERS TO SQL "{self.url("users")}"', "users", "users",
                 "sql"),
        ]
        for i, db in enumerate(self.databases):
            db_dir, quoted_db = f"d{i}", quote_ident(db.name)
            shown_db = json.dumps(db.name)
            if db.engine == TIME_SERIES:
                found.append(Item(db_dir, f'EXPORT INTO CSV "{self.url(db_dir)}" FROM '
                                  f"DATABASE {quoted_db}", db_dir, db_dir, "ts-database",
                                  f"database {shown_db}"))
                continue
            schema_dir = f"{db_dir}.schema"
            found.append(Item(schema_dir, f'EXPORT INTO CSV "{self.url(schema_dir)}" FROM '
                              f"DATABASE {quoted_db} WITH meta_only", schema_dir, db_dir,
                              "schema", f"schema of database {shown_db}"))
            for j, (schema, table) in enumerate(db.tables):
                item_id = f"{db_dir}.t{j}"
                source = f"{quoted_db}.{quote_ident(schema)}.{quote_ident(table)}"
                found.append(Item(
                    item_id, f'EXPORT INTO CSV "{self.url(item_id)}" FROM SELECT * FROM '
                    f"{source} AS OF SYSTEM TIME '{self.consistent_to}'", item_id,
                    f"{db_dir}/{schema}/{table}", "table",
                    f"table {shown_db}.{json.dumps(schema)}.{json.dumps(table)}", source))
        return found

    def db_dir(self, name: str) -> str:
        """The target directory of a database of this plan."""
        return f"d{[db.name for db in self.databases].index(name)}"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Plan:
        """The plan as written, or ValueError when it is not one (checked by `problem`)."""
        try:
            data = json.loads(raw)
            dbs = tuple(DatabasePlan(str(d["name"]), str(d["engine"]),
                                     tuple((str(t[0]), str(t[1])) for t in d["tables"]),
                                     tuple(Grant(**{f.name: str(g[f.name]) for f in fields(Grant)})
                                           for g in d.get("grants") or ()),
                                     tuple(_foreign_key(fk) for fk in d.get("foreign_keys") or ()),
                                     tuple(str(x) for x in d.get("left_out") or ()),
                                     tuple(Comment(**{f.name: str(c[f.name])
                                                      for f in fields(Comment)})
                                           for c in d.get("comments") or ()),
                                     tuple(view_from_json(v) for v in d.get("views") or ()),
                                     tuple(sequence_from_json(q)
                                           for q in d.get("sequences") or ()))
                        for d in data["databases"])
            return cls(str(data["backup"]), str(data["uid"]), str(data["pod"]),
                       int(data["node_id"]), str(data["consistent_to"]), dbs,
                       int(data.get("layout") or 1), data.get("privileges") is True,
                       data.get("foreign_keys") is True, data.get("comments") is True)
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{PLAN_FILE} is not a backup plan: {err}") from None


def _foreign_key(raw: Mapping[str, Any]) -> ForeignKey:
    """A foreign key as plan.json holds it (KeyError, TypeError when it does not)."""
    if not isinstance(raw, Mapping) or isinstance(raw["columns"], str) or isinstance(
            raw["ref_columns"], str):
        raise TypeError("a foreign key is not an object with lists of columns")
    return ForeignKey(
        str(raw["schema"]), str(raw["table"]), str(raw["name"]),
        tuple(str(c) for c in raw["columns"]), str(raw["ref_schema"]), str(raw["ref_table"]),
        tuple(str(c) for c in raw["ref_columns"]), str(raw["match"]), str(raw["on_update"]),
        str(raw["on_delete"]), raw.get("validated") is not False)


def hlc_time(hlc: str) -> datetime:
    """The wall time of an HLC decimal timestamp (`<nanoseconds>.<logical>`)."""
    return datetime.fromtimestamp(int(hlc.split(".")[0]) / 1e9, UTC)


def choose_databases(shown: Sequence[tuple[str, str]], wanted: Sequence[str]
                     ) -> tuple[list[tuple[str, str]], list[str]]:
    """(name, engine) of the databases to back up, and the wanted ones that do not exist."""
    user = [(n, e) for n, e in shown if n not in SYSTEM_DATABASES]
    if not wanted:
        return sorted(user), []
    have = dict(user)
    return sorted((n, have[n]) for n in wanted if n in have), sorted(
        n for n in wanted if n not in have)


# ----- checking an export --------------------------------------------------------------------
@dataclass(frozen=True)
class ItemResult:
    """What one verified item put in the target: files (relative path -> sha256, size) and rows
    (what EXPORT reported)."""

    id: str
    rows: int
    files: dict[str, tuple[str, int]] = field(default_factory=dict)
    # What the item's export wrote that a restore could not read back, left out of the backup
    # (readable_settings): said in the backup's status.
    left_out: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return json.dumps({"id": self.id, "rows": self.rows,
                           "files": {k: list(v) for k, v in sorted(self.files.items())},
                           **({"leftOut": list(self.left_out)} if self.left_out else {})},
                          indent=2).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ItemResult:
        data = json.loads(raw)
        return cls(data["id"], int(data["rows"]),
                   {k: (str(v[0]), int(v[1])) for k, v in data["files"].items()},
                   tuple(str(x) for x in data.get("leftOut") or ()))


SETTINGS_FILE = "clustersetting.sql"
# A line of clustersetting.sql that IMPORT CLUSTER SETTING reads back as written: KWDB's
# exporter puts the value's SQL string, quotes trimmed, between new quotes (sql/export.go:
# 576-582), so only a value that needed no escape (printable ASCII, no quote, no backslash:
# sql/lex/encode.go:102-147) comes out as a plain literal.
_READABLE_SETTING = re.compile(r"SET CLUSTER SETTING ([a-z0-9_.]+) = '([\x20-\x26\x28-\x5b"
                               r"\x5d-\x7e]*)';")


def readable_settings(data: bytes) -> tuple[bytes, tuple[str, ...]]:
    """clustersetting.sql without the lines a restore could not read back, and the names of
    the settings those lines set. A value that needed an escape (a certificate's newlines in
    cloudstorage.http.custom_ca, a quote, a character past ASCII) is written `'e'...'`: IMPORT
    CLUSTER SETTING then fails on the whole file, or, on the last line, reads the value as `e`
    (the `--` of a PEM line starts a comment: sql/parser/scan.go). Every other line is kept
    byte for byte."""
    kept, left_out = [], []
    for line in data.decode(errors="replace").splitlines(keepends=True):
        if not line.strip() or _READABLE_SETTING.fullmatch(line.strip()):
            kept.append(line)
            continue
        name = line.split(" = ", 1)[0].removeprefix("SET CLUSTER SETTING ").strip()
        left_out.append(f"cluster setting {name[:100]}")
    return "".join(kept).encode(), tuple(left_out)


def export_problem(item: Item, headers: Sequence[str], rows: Sequence[Mapping[str, str]],
                   notices: Sequence[str], files: Sequence[str]) -> str:
    """Why an EXPORT's answer is not a complete success ("" when it is). KWDB reports failures
    inside a database export only as notices (relational: rows still returned) or as
    `result = fail` (time-series): both fail the backup. `files` are the relative paths found
    on the node after it."""
    if notices:
        return f"{item.shown}: EXPORT reported: {'; '.join(notices)}"
    if item.kind == "ts-database":
        results = [r.get("result", "") for r in rows]
        if list(headers) != ["result"] or results != ["succeed"]:
            return f"{item.shown}: time-series EXPORT answered result={','.join(results) or '?'}"
        if "meta.sql" not in files:
            return f"{item.shown}: meta.sql missing after the export"
        return ""
    if item.kind == "schema" and list(headers) in ([], ["EXPORT"]) and not rows:
        # A database without tables: KWDB writes meta.sql before its table loop, and only a
        # table's export sets result columns, so the CLI prints just the statement's tag
        # (kwbase/pkg/sql/export_details.go:229-236, 286-317; cli/sql_util.go:797-810).
        return "" if "meta.sql" in files else f"{item.shown}: meta.sql missing after the export"
    if list(headers) != ["filename", "rows", "node_id", "file_num"]:
        return f"{item.shown}: unexpected EXPORT columns {', '.join(headers)}"
    csvs = [f for f in files if f.endswith(".csv")]
    if item.kind == "schema":
        if "meta.sql" not in files:
            return f"{item.shown}: meta.sql missing after the export"
        return ""
    if item.kind == "sql":
        expected = "clustersetting.sql" if item.id == "settings" else "users.sql"
        return "" if expected in files else f"{item.shown}: {expected} missing after the export"
    announced = sum(int(r.get("file_num") or 0) for r in rows if r.get("filename") != "meta.sql")
    if announced != len(csvs):
        return (f"{item.shown}: EXPORT announced {announced} data file(s), {len(csvs)} found on "
                "the node")
    return ""


def count_query(item: Item, consistent_to: str) -> str:
    """How many rows a table item's EXPORT must have written: the table at the backup's
    timestamp."""
    assert item.kind == "table" and item.source
    return f"SELECT count(*) FROM {item.source} AS OF SYSTEM TIME '{consistent_to}'"


def unanswered_export_problem(item: Item, files: Sequence[str], records: int,
                              counted: int) -> str:
    """Why a table's EXPORT whose answer was lost is not whole ("" when it is): KWDB's job
    row says it succeeded (a table's EXPORT fails as an error, which fails the row:
    kwbase/pkg/sql/conn_executor_exec.go:727-756), and its files must hold exactly the rows the
    table had at the backup's timestamp."""
    if counted and not any(f.endswith(".csv") for f in files):
        # An empty table exports no file (importer/exportcsv.go:476-478, 493-496).
        return f"{item.shown}: no data file on the node after the export"
    if records != counted:
        return (f"{item.shown}: the export's files hold {records} row(s), the table had "
                f"{counted} at the backup's timestamp")
    return ""


def exported_rows(rows: Sequence[Mapping[str, str]]) -> int:
    return sum(int(r.get("rows") or 0) for r in rows
               if r.get("filename") not in ("meta.sql", "USERS", "CLUSTER SETTING"))


def transfer_problem(path: str, expected_sha256: str, received: bytes) -> str:
    """A file read back from the node differs from the checksum the node computed."""
    got = hashlib.sha256(received).hexdigest()
    if got != expected_sha256:
        return f"{path}: checksum {got[:12]}... differs from the node's {expected_sha256[:12]}..."
    return ""


def missing_in_target(expected: Mapping[str, tuple[str, int]],
                      stored: Mapping[str, int]) -> list[str]:
    """Expected files (relative path -> sha256, size) absent from the target or of another
    size there (`stored`: relative path -> size as the target lists it)."""
    return sorted(p for p, (_, size) in expected.items() if stored.get(p) != size)


# ----- schedules and retention -------------------------------------------------------------------


def latest_slot(expr: str, now: float) -> float:
    """The latest time at or before `now` the schedule fires."""
    it = cron(expr, now + 1e-3)
    return float(it.get_prev(float))


def next_slot(expr: str, now: float) -> float:
    return float(cron(expr, now).get_next(float))


def due_slot(expr: str, created: float, now: float, immediate: bool,
             existing_slots: Sequence[float]) -> float | None:
    """The slot a new backup is due for, or None. Only the latest slot counts (missed ones
    while the reconciler was away are not caught up, as a CronJob without a deadline). An
    immediate schedule backs up at its creation time once."""
    if immediate and not existing_slots:
        return created
    slot = latest_slot(expr, now)
    if slot < created or any(abs(s - slot) < 0.5 for s in existing_slots) or \
            any(s > slot for s in existing_slots):
        return None
    return slot


def slot_name(schedule: str, slot: float) -> str:
    return f"{schedule}-{datetime.fromtimestamp(slot, UTC).strftime('%Y%m%d%H%M%S')}"


_AGE = re.compile(r"^(\d+)([smhd])$")


def age_seconds(text: str) -> float:
    m = _AGE.match(text)
    if m is None:
        raise ValueError(f"retention.maxAge {text!r}: expected a number and s, m, h or d")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@dataclass(frozen=True)
class BackupView:
    name: str
    phase: str  # pending, running, completed, failed ("" = not yet seen)
    created: float


def retention_victims(backups: Sequence[BackupView], keep: int, max_age_s: float | None,
                      now: float) -> list[str]:
    """Names of a schedule's backups retention deletes: completed ones beyond the newest
    `keep` or older than max_age_s, failed ones beyond the newest `keep`. The newest completed
    backup is never deleted, whatever the settings; running and pending ones never are."""
    completed = sorted((b for b in backups if b.phase == "completed"),
                       key=lambda b: (b.created, b.name), reverse=True)
    failed = sorted((b for b in backups if b.phase == "failed"),
                    key=lambda b: (b.created, b.name), reverse=True)
    keep = max(keep, 1)
    victims = [b.name for b in completed[keep:]]
    if max_age_s is not None:
        victims += [b.name for b in completed[1:keep] if now - b.created > max_age_s]
    victims += [b.name for b in failed[keep:]]
    return sorted(set(victims))


# ----- safety ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterState:
    """What the start predicate looks at, read from the pass and the caches."""

    initialized: bool
    scale_in: bool  # an operation in status, or the spec asking for fewer replicas than run
    rolling: bool  # the StatefulSet's rollout is under way
    not_ready: tuple[str, ...]  # pods that should run and are not Ready
    failing: tuple[str, ...]  # pods failover is looking after
    restoring: bool = False


def start_blocker(state: ClusterState) -> str:
    """Why a backup may not start now ("" when it may): one at a time (checked by the
    caller), and never during a scale-in, a rolling upgrade, a failover or a restore."""
    if not state.initialized:
        return "the cluster is not initialised"
    if state.restoring:
        return "the cluster is being restored from a backup"
    if state.scale_in:
        return "a scale-in is in progress"
    if state.rolling:
        return "a rolling update is in progress"
    if state.failing:
        return f"failover is looking after {', '.join(state.failing)}"
    if state.not_ready:
        return f"pods are not Ready: {', '.join(state.not_ready)}"
    return ""


# ----- restore -----------------------------------------------------------------------------------
RESTORE_ANNOTATION = "kaiwu.inspur.com/restore"
"""On a KaiwuCluster with spec.bootstrap.fromBackup: the restore's record, as JSON
(reconciler/kaiwudb/restore.py)."""


def restore_record(annotations: Mapping[str, str]) -> dict[str, Any] | None:
    raw = annotations.get(RESTORE_ANNOTATION)
    try:
        found = json.loads(raw) if raw else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def restore_pending(annotations: Mapping[str, str], restore_from: str | None) -> bool:
    """The cluster is to be restored and the restore has not completed."""
    return bool(restore_from) and not (restore_record(annotations) or {}).get("completedAt")


def backup_problem(manifest: Mapping[str, Any], stored: Mapping[str, int],
                   read: Callable[[str], bytes | None]) -> str:
    """Why a backup cannot be restored as it is ("" when every file its manifest lists is in
    the target with its size and sha256). `stored`: the target's listing (path -> size)."""
    if not manifest.get("items"):
        return f"{MANIFEST_FILE} is missing or lists no files"
    for item in manifest["items"].values():
        result = ItemResult.from_json(json.dumps(item).encode())
        missing = missing_in_target(result.files, stored)
        if missing:
            return f"missing or of another size: {', '.join(missing)}"
        for path, (digest, _) in sorted(result.files.items()):
            bad = transfer_problem(path, digest, read(path) or b"")
            if bad:
                return bad
    return ""


GRANTS_STEP = "grants "
"""The restore step that grants again what a database's users held, after its IMPORT."""
FOREIGN_KEYS_STEP = "foreign keys "
"""The restore step that adds a database's foreign keys again, after its IMPORT."""
COMMENTS_STEP = "comments "
"""The restore step that sets a database's comments again, after its IMPORT."""
SEQUENCES_STEP = "sequences "
"""The restore step that makes a database's sequences again, with their values, after its
IMPORT."""
VIEWS_STEP = "views"
"""The restore step that makes every view again, after every database is back."""


def restore_statements(manifest: Mapping[str, Any], url: str) -> list[tuple[str, str]]:
    """(step id, statement) in the documented order: cluster settings, users, then each
    database (`url`: where the backup's files are served), each followed by its sequences,
    foreign keys and comments when it had any (`sequences <db>`, `foreign keys <db>`,
    `comments <db>`), then the views of every database (`views`: a view may read another
    database), then each database's grants (`grants <db>`: a grant may be on a view). The
    statements of those steps come from the manifest's plan (`SequenceDef.create_statement`,
    `foreign_key_statement`, `comment_statement`, `View.statement`, `grant_statements`); the
    text here only says so. The manifest is read from the
    target: a database's directory must be one of ours (d<i>), or, in a backup of layout 1, a
    name `name_problem` accepts; anything else is a ValueError naming it."""
    steps = [("settings", f'IMPORT CLUSTER SETTING SQL DATA ("{url}/settings/'
                          'clustersetting.sql")'),
             ("users", f'IMPORT USERS SQL DATA ("{url}/users/users.sql")')]
    plan = manifest.get("plan")
    planned = plan.get("databases") if isinstance(plan, dict) else None
    planned = [d for d in planned if isinstance(d, dict)] if isinstance(planned, list) else []

    def holding(what: str) -> set[str]:  # the databases whose plan holds some of `what`
        return {str(d.get("name")) for d in planned if d.get(what)}

    granted, keyed, commented = holding("grants"), holding("foreign_keys"), holding("comments")
    sequenced, viewed = holding("sequences"), holding("views")
    databases = manifest.get("databases") or []
    if not isinstance(databases, list) or not all(isinstance(db, dict) for db in databases):
        raise ValueError(f"{MANIFEST_FILE}: databases is not a list of databases")
    for db in databases:
        name = str(db.get("name") or "")
        directory = str(db.get("dir") or name)
        if not (re.fullmatch(r"d[0-9]{1,4}", directory) or (
                "dir" not in db and not name_problem("database", name))):
            raise ValueError(f"{MANIFEST_FILE}: database {json.dumps(name)} has directory "
                             f"{json.dumps(directory)}, which this reconciler does not read")
        steps.append((f"database {name}", f'IMPORT DATABASE CSV DATA ("{url}/{directory}")'))
        if name in sequenced:
            steps.append((f"{SEQUENCES_STEP}{name}",
                          f"CREATE SEQUENCE ...; SELECT setval(...) (the sequences {name} had)"))
        if name in keyed:
            steps.append((f"{FOREIGN_KEYS_STEP}{name}",
                          f"ALTER TABLE ... ADD CONSTRAINT ... (the foreign keys {name} had)"))
        if name in commented:
            steps.append((f"{COMMENTS_STEP}{name}", f"COMMENT ON ... (the comments {name} had)"))
    names = [str(db.get("name") or "") for db in databases]
    if viewed & set(names):
        steps.append((VIEWS_STEP, "CREATE VIEW ... (every view, in the order KWDB made them)"))
    steps += [(f"{GRANTS_STEP}{name}", f"GRANT ... (the privileges {name} held)")
              for name in names if name in granted]
    return steps


def manifest_plan(manifest: Mapping[str, Any]) -> Plan:
    """The backup's plan as its manifest holds it, checked (`Plan.problem`): the target is not
    the reconciler's to trust; ValueError when it is not one."""
    plan = Plan.from_json(json.dumps(manifest.get("plan") or {}).encode())
    problem = plan.problem()
    if problem:
        raise ValueError(problem)
    return plan


def manifest_database(manifest: Mapping[str, Any], database: str) -> tuple[int, DatabasePlan]:
    """A database of the backup's plan as its manifest holds it, checked (`manifest_plan`),
    and its index; ValueError when the manifest does not say."""
    plan = manifest_plan(manifest)
    names = [db.name for db in plan.databases]
    if database not in names:
        raise ValueError(f"{MANIFEST_FILE}: database {json.dumps(database)} is not in its plan")
    return names.index(database), plan.databases[names.index(database)]


def expected_counts(manifest: Mapping[str, Any], database: str
                    ) -> list[tuple[tuple[str, ...], int]]:
    """What a restored database must hold, from the backup's manifest: (quoted tables, rows
    in them together). A relational table was exported alone (one group each); a time-series
    database in one EXPORT (one group of all its tables). ValueError when the manifest does
    not say."""
    index, db = manifest_database(manifest, database)
    items = manifest.get("items") or {}

    def rows_of(item_id: str) -> int:
        if item_id not in items:
            raise ValueError(f"{MANIFEST_FILE}: item {item_id} is missing")
        return int(items[item_id].get("rows") or 0)

    sources = tuple(f"{quote_ident(db.name)}.{quote_ident(schema)}.{quote_ident(table)}"
                    for schema, table in db.tables)
    if db.engine == TIME_SERIES:
        return [(sources, rows_of(f"d{index}"))] if sources else []
    return [((source,), rows_of(f"d{index}.t{j}")) for j, source in enumerate(sources)]


def count_problem(step: str, expected: Sequence[tuple[tuple[str, ...], int]],
                  counted: Mapping[str, int]) -> str:
    """Why a database imported while nobody listened is not what the backup holds ("" when
    every table holds its rows)."""
    for sources, rows in expected:
        found = sum(counted.get(source, 0) for source in sources)
        if found != rows:
            return (f"{step}: {' + '.join(sources)} hold(s) {found} row(s) after the import, "
                    f"the backup {rows}")
    return ""


def import_problem(step: str, rows: Sequence[Mapping[str, str]], notices: Sequence[str]) -> str:
    """Why an IMPORT's answer is not a success: a notice, a status other than succeeded, or
    reject rows (KWDB still says succeeded then, with a REJECT FILE note)."""
    if notices:
        return f"{step}: IMPORT reported: {'; '.join(notices)}"
    for row in rows:
        if "status" in row and row["status"] != "succeeded":
            return f"{step}: IMPORT job {row.get('job_id', '?')} ended {row['status']}"
        if int(row.get("reject_rows") or 0) > 0:
            return (f"{step}: {row['reject_rows']} row(s) rejected ({row.get('note', '')}): "
                    "the restored data would be incomplete")
    return ""
