"""What a backup reads from KWDB's catalogue besides EXPORT, and what a restore replays: the
privileges on a database, its schemas and tables (KWDB's EXPORT ... WITH privileges loses
some), its foreign keys (IMPORT makes tables without them) and its comments. For each: the
queries run at a backup's start, how their rows are read into a DatabasePlan (what cannot be
carried is said in words, or refuses the backup), and the statements the restore runs.

Called by reconciler.kaiwudb.backup.start (reading), reconciler.kaiwudb.backup.restore (grants
and comments replayed) and reconciler.kaiwudb.backup.restore_steps (foreign keys). Pure: the
queries' text and the reading of their rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from reconciler.kaiwudb.backup.database import (
    COMMENT_ON,
    MATCH_OPTIONS,
    PRIVILEGES,
    Comment,
    DatabasePlan,
    ForeignKey,
    Grant,
)
from reconciler.kaiwudb.kwbase.sql import quote_ident, quote_literal

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
