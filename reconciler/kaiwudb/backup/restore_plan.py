"""A restore's decisions: the record it keeps on the cluster (the annotation
kaiwu.inspur.com/restore), whether a backup is intact, the order of the restore's steps, the
plan read back from a manifest, and whether an IMPORT's answer, or the tables it filled while
nobody listened, are what the backup holds.

Called by reconciler.kaiwudb.backup.restore (the restore step) and its parts (restore_import,
restore_steps), and by reconciler.kaiwudb.backup.start (a backup waits while its cluster is
restored). Pure; `RestoreFailed` is what the restore's parts raise when it cannot go on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reconciler.kaiwudb.backup.database import TIME_SERIES, DatabasePlan
from reconciler.kaiwudb.backup.export import ItemResult, missing_in_target, transfer_problem
from reconciler.kaiwudb.backup.names import name_problem
from reconciler.kaiwudb.backup.plan import MANIFEST_FILE, Plan
from reconciler.kaiwudb.kwbase.sql import quote_ident


class RestoreFailed(Exception):
    """The restore cannot go on: the message says why (it reaches the Stalled condition)."""


RESTORE_ANNOTATION = "kaiwu.inspur.com/restore"
"""On a KaiwuCluster with spec.bootstrap.fromBackup: the restore's record, as JSON
(reconciler/kaiwudb/backup/restore.py)."""


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
