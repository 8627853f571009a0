"""The restore's steps after a database's IMPORT that make again what EXPORT and IMPORT leave
out, from the backup's plan: its foreign keys (`add_foreign_keys`), its sequences with their
values and every view (`make_objects`). Each reads what is there first, so a step run again
after a crash does nothing twice.

Called by reconciler.kaiwudb.backup.restore (the restore step), one step per pass.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.kaiwudb.backup.catalog import (
    foreign_key_statement,
    foreign_keys_queries,
    foreign_keys_to_add,
)
from reconciler.kaiwudb.backup.database import VIRTUAL_SCHEMAS
from reconciler.kaiwudb.backup.objects import (
    SequenceDef,
    View,
    existing_objects_query,
    from_hex,
    read_sequence,
    sequence_value,
    sequence_value_query,
)
from reconciler.kaiwudb.backup.restore_plan import (
    SEQUENCES_STEP,
    VIEWS_STEP,
    RestoreFailed,
    manifest_database,
    manifest_plan,
)
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import CommandFailed
from reconciler.kaiwudb.kwbase.sql import quote_ident


def add_foreign_keys(admin: KwbaseAdmin, pod: str, manifest: dict[str, Any],
                     database: str) -> str:
    """Add the foreign keys `database` had that it lacks; what the step still waits for
    ("" once every key is there and checked: foreign_keys_to_add). What is there is read
    first, each pass: KWDB refuses a constraint name the table has, one being added
    included (create_table.go:1136-1139, sqlbase/structured.go:989-1007), so a step run
    again after a crash, or while KWDB still checks the rows of a key an earlier pass
    added, adds nothing twice. A key whose rows do not fit fails the restore, naming it."""
    _, db = manifest_database(manifest, database)
    on_keys, _ = foreign_keys_queries(database)
    to_add, checking = foreign_keys_to_add(db, admin.sql(pod, on_keys).rows)
    for fk in to_add:
        try:
            admin.sql(pod, foreign_key_statement(db, fk))
        except CommandFailed as err:
            if "duplicate constraint name" not in err.stderr:
                raise
        checking.append(fk)  # done once a later read shows it checked
    if not checking:
        return ""
    shown = ", ".join(fk.shown for fk in checking[:3])
    more = f" and {len(checking) - 3} more" if len(checking) > 3 else ""
    return f"KaiwuDB adds and checks {shown}{more}"


def make_objects(admin: KwbaseAdmin, pod: str, manifest: dict[str, Any], step: str
                 ) -> None:
    """Make again the sequences of one database (`sequences <db>`, with their values) or
    every view (`views`, in the order KWDB made them: a view reads only what was made
    before it), from the backup's plan, checked again (`manifest_plan`: it is read back
    from the target; objects.py). What is there is read first: a step run again
    after a crash makes nothing twice, and an object of another kind or, for a sequence,
    other numbers under the same name fails the restore, naming it. A sequence's value is
    set only while it holds what a new one holds (so a run again never sets it back). A
    schema that held no table (IMPORT made none for it) is made first."""
    plan = manifest_plan(manifest)
    if step == VIEWS_STEP:
        wanted = sorted((view.order, db.name, view) for db in plan.databases
                        for view in db.views)
        made: list[tuple[str, SequenceDef | View]] = [(db, view) for _, db, view in wanted]
    else:
        _, db = manifest_database(manifest, step.removeprefix(SEQUENCES_STEP))
        made = [(db.name, sequence) for sequence in db.sequences]
    there: dict[str, dict[tuple[str, str], tuple[str, str]]] = {}
    for database, obj in made:
        if database not in there:
            rows = admin.sql(pod, existing_objects_query(database)).rows
            there[database] = {
                (str(r.get("schema_name")), str(r.get("descriptor_name"))):
                (str(r.get("descriptor_type")),
                 from_hex(str(r.get("create_statement_hex") or "")) or "")
                for r in rows}
            for schema in sorted({o.schema for d, o in made if d == database}
                                 - VIRTUAL_SCHEMAS):
                admin.sql(pod, f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}",
                          database=database)
        kind = "view" if isinstance(obj, View) else "sequence"
        found = there[database].get((obj.schema, obj.name))
        if found is None:
            admin.sql(pod, obj.statement(database) if isinstance(obj, View)
                      else obj.create_statement(database))
        elif found[0] != kind or (isinstance(obj, SequenceDef) and not _same_numbers(
                read_sequence(obj.schema, obj.name, found[1]), obj)):
            raise RestoreFailed(f"{step}: database {json.dumps(database)} holds a {found[0]} "
                          f"{json.dumps(obj.schema)}.{json.dumps(obj.name)} that is not "
                          f"the backup's {kind}; drop it and the restore makes it")
        if isinstance(obj, SequenceDef) and (setval := obj.setval_statement(database)):
            rows = admin.sql(pod, sequence_value_query(database, obj)).rows
            if sequence_value(obj, rows) == obj.start - obj.increment:
                admin.sql(pod, setval)


def _same_numbers(found: SequenceDef | str, wanted: SequenceDef) -> bool:
    """A sequence found under a name has the numbers the backup's has."""
    return isinstance(found, SequenceDef) and (
        found.minvalue, found.maxvalue, found.increment, found.start, found.virtual) == (
        wanted.minvalue, wanted.maxvalue, wanted.increment, wanted.start, wanted.virtual)
