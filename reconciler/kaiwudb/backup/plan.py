"""A backup's plan: everything decided when it starts (the pod and node it exports from, the
timestamp its relational tables are read at, the databases with what they hold), written to the
target first (plan.json), and the EXPORTs it makes of it, in order (`Plan.items`). A plan is
read back from the target, which is not the reconciler's to trust: `Plan.problem` checks it.

Called by reconciler.kaiwudb.backup.step and its parts (start, export, the manifest) and by
reconciler.kaiwudb.backup.restore_plan (the plan a manifest holds); no I/O here, so every
decision has a fast test (tests/unit/reconciler/kaiwudb/test_backup_plan.py). docs/backup.md
explains the choices.

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

The names in it are checked by reconciler.kaiwudb.backup.names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

from reconciler.kaiwudb.backup.database import (
    GRANT_ON,
    RELATIONAL,
    TIME_SERIES,
    Comment,
    DatabasePlan,
    ForeignKey,
    Grant,
)
from reconciler.kaiwudb.backup.names import hlc_problem, name_problem
from reconciler.kaiwudb.backup.objects import SequenceDef, View, sequence_from_json, view_from_json
from reconciler.kaiwudb.kwbase.sql import quote_ident

PLAN_FILE = "plan.json"
MANIFEST_FILE = "manifest.json"
ITEMS_DIR = "items"
LAYOUT = 2
"""The plan's layout: 2 names items and node directories by index. A plan.json without it was
written by an older reconciler and is not carried on (the backup fails, saying so)."""


_UID = re.compile(r"[0-9a-zA-Z][0-9a-zA-Z-]{0,62}")


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
