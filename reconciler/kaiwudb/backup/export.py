"""One item of a running backup at a time (`Exporter`): its EXPORT on the plan's node, level-
triggered on KWDB's job row, its files streamed to the target and checked, the node cleaned;
and at the end the manifest (`write_manifest`). With the pure checks they rest on: whether
KWDB's answer is a complete success, whether the files arrived intact, what a settings file a
restore could not read back loses, and what one item put in the target (`ItemResult`, its
marker items/<id>.json).

Called by reconciler.kaiwudb.backup.step (each pass of a running backup); the checks also by
reconciler.kaiwudb.backup.restore_plan (a backup checked before it is restored).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.kaiwudb.backup.names import inside, safe_relative
from reconciler.kaiwudb.backup.plan import ITEMS_DIR, MANIFEST_FILE, Item, Plan, hlc_time
from reconciler.kaiwudb.backup.status import BackupFailed, stamp
from reconciler.kaiwudb.backup.targets import Target
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import ExecFailed, ExecTimedOut, KwbaseError, NodeUnreachable
from reconciler.kaiwudb.kwbase.sql import SqlAnswer
from reconciler.kaiwudb.pods import cluster_pods, pod_ready
from reconciler.kaiwudb.statements import BulkStatements, Running
from reconciler.kube.cache import CacheView
from reconciler.model import Pass
from renderer.builders import DATA_DIR
from renderer.spec import Cluster

log = logging.getLogger(__name__)


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


EXTERN_DIR = f"{DATA_DIR}/extern"
"""The node's external-I/O directory: kwbase's default, <first store>/extern."""


class Exporter:
    """One item at a time: its EXPORT on the plan's node, its files moved to the target and
    checked, the node cleaned; and the node checked before each (its files are there)."""

    def __init__(self, view: CacheView, admin: Callable[[Cluster], KwbaseAdmin],
                 statements: BulkStatements, remove_node_files: bool) -> None:
        self.view = view
        self.admin = admin
        self.statements = statements
        self.remove_node_files = remove_node_files

    def node_dir(self, plan: Plan, sub: str = "") -> str:
        """A directory of this backup on its node; never anything outside its run directory
        (every path the reconciler lists, reads or removes there comes through here)."""
        run = f"{EXTERN_DIR}/{plan.run_dir}"
        path = f"{run}/{sub}" if sub else run
        if not (inside(EXTERN_DIR, run) and (not sub or inside(run, path))
                and "/" not in plan.run_dir):
            raise BackupFailed("UnsafePath", f"refusing to touch {path!r}: not inside the "
                               f"backup's run directory {run!r}")
        return path

    def check_node(self, p: Pass, cluster: Cluster, plan: Plan) -> None:
        """The plan's node must still be the live node of its pod (its files are there)."""
        pods = cluster_pods(self.view, cluster)
        node = next((n for n in p.kaiwu.nodes or () if n.node_id == plan.node_id), None)
        if node is None or node.state != "live" or node.pod != plan.pod or \
                not pod_ready(pods.get(plan.pod)):
            state = "gone" if node is None else f"{node.state}, pod {node.pod or '?'}"
            ready = "Ready" if pod_ready(pods.get(plan.pod)) else "not Ready"
            raise BackupFailed("NodeLost", (
                f"KaiwuDB node {plan.node_id} (pod {plan.pod}) that holds the export files is "
                f"not available ({state}; pod {ready})"))

    def run_export(self, admin: KwbaseAdmin, plan: Plan, item: Item,
                   node_dir: str) -> SqlAnswer | str | None:
        """The item's EXPORT: its answer once it ended; None when it ended successfully with
        nobody listening (its answer is lost; only a table item gets here, see below); while it
        runs, a few words saying since when.

        Level-triggered on KWDB's job row (kwbase/pkg/sql/conn_executor_exec.go:719-756: every
        EXPORT has one, with its text, running until the statement ends): unless this process
        runs the statement, the newest row whose text holds the item's destination decides.
        running: an earlier reconciler's client runs it on (an exec ended does not end the
        process it started), unless the row was created before the node last started: the
        session died with the node and nothing ever ends such a row (jobs/registry.go:
        1321-1326), so the item starts again. failed: the backup fails with KWDB's error.
        succeeded: a table's EXPORT fails as an error, so a count proves its files whole
        (None); other items report failures only in their answer (notices, result=fail:
        export_details.go:313-321, 755-778), so they run again. No row: it starts, in a clean
        directory."""
        key = f"{plan.uid}/{item.id}"
        polled = self._poll(plan, item, key)
        if isinstance(polled, Running):
            return f"running {polled.elapsed_s:.0f} s"
        if polled is not None:
            return polled
        # The destination with its closing quote: d0.t1 is not d0.t10.
        jobs = admin.statement_jobs(plan.pod, "EXPORT", "statement",
                                    f'{plan.url(item.node_dir)}"')
        latest = jobs[0] if jobs else None
        if latest is not None and not latest.over:
            started = [n.started_at for n in admin.node_status(plan.pod, plan.node_id)
                       if n.id == plan.node_id]
            if not started or started[0] is None or latest.created >= started[0]:
                since = stamp(latest.created.timestamp())
                return f"KWDB job {latest.job_id}, running since {since}"
            log.info("backup %s: %s: KWDB job %s died with node %s; exporting again",
                     plan.backup, item.shown, latest.job_id, plan.node_id)
        elif latest is not None and latest.failed:
            raise BackupFailed("ExportFailed", f"{item.shown}: KWDB job {latest.job_id} "
                               f"{latest.status}: {latest.error}")
        elif latest is not None and latest.status == "succeeded" and item.kind == "table" \
                and admin.file_sums(plan.pod, node_dir):
            return None
        admin.remove_dir(plan.pod, node_dir)  # a retry after a crash starts clean
        self.statements.start(key, lambda: admin.sql(plan.pod, item.statement, bulk=True))
        polled = self._poll(plan, item, key)
        if isinstance(polled, Running):
            return f"running {polled.elapsed_s:.0f} s"
        return polled if polled is not None else "started, no answer: KWDB's job row will say"

    def _poll(self, plan: Plan, item: Item, key: str) -> SqlAnswer | Running | None:
        try:
            return self.statements.poll(key)
        except ExecTimedOut as err:  # the exec ended first: KWDB's job row says what follows
            log.warning("backup %s: %s: no answer: %s", plan.backup, item.shown, err)
            return None

    def export_item(self, cluster: Cluster, plan: Plan, item: Item,
                    target: Target) -> ItemResult | str:
        """The item exported and its files moved to the target; while its EXPORT runs, a few
        words saying since when (run_export)."""
        admin = self.admin(cluster)
        node_dir = self.node_dir(plan, item.node_dir)
        try:
            answer = self.run_export(admin, plan, item, node_dir)
            if isinstance(answer, str):
                return answer
            sums = admin.file_sums(plan.pod, node_dir)
            if answer is not None:
                problem = export_problem(item, answer.headers, answer.rows, answer.notices,
                                            list(sums))
                if problem:
                    raise BackupFailed("ExportFailed", problem)
            unsafe = sorted(rel for rel in sums if not safe_relative(rel))
            if unsafe:
                raise BackupFailed("NotExportable", f"{item.shown}: KWDB wrote files whose names "
                                   f"are no safe relative path: {json.dumps(unsafe)[:300]}")
            files: dict[str, tuple[str, int]] = {}
            csv_records = 0
            counted = 0
            if answer is None:  # the answer was lost: the table at the backup's timestamp says
                shown = admin.sql(plan.pod, count_query(item, plan.consistent_to),
                                  bulk=True)  # a big table's count takes long too
                counted = int(shown.rows[0]["count"]) if shown.rows else -1
            left_out: tuple[str, ...] = ()
            for rel, digest in sorted(sums.items()):
                data = admin.read_file(plan.pod, f"{node_dir}/{rel}")
                bad = transfer_problem(f"{item.target_dir}/{rel}", digest, data)
                if bad:
                    raise BackupFailed("ChecksumMismatch", bad)
                if item.id == "settings" and rel == SETTINGS_FILE:
                    # Lines KWDB wrote that a restore could not read back: left out, and
                    # named in the status (the file's checksum is then of what is kept).
                    data, left_out = readable_settings(data)
                    digest = hashlib.sha256(data).hexdigest()
                target.put(f"{item.target_dir}/{rel}", data)
                files[f"{item.target_dir}/{rel}"] = (digest, len(data))
                if rel.endswith(".csv"):
                    csv_records += sum(1 for _ in csv.reader(io.StringIO(data.decode())))
            if answer is None:
                problem = unanswered_export_problem(item, list(sums), csv_records, counted)
                if problem:
                    raise BackupFailed("ExportFailed", problem)
            missing = missing_in_target(files, target.list(item.target_dir))
            if missing:
                raise BackupFailed("TargetIncomplete", f"{item.shown}: not in the target after "
                                   f"upload: {', '.join(missing)}")
            if self.remove_node_files:
                admin.remove_dir(plan.pod, node_dir)
        except (ExecFailed, NodeUnreachable) as err:
            raise BackupFailed("NodeLost", f"{item.shown}: pod {plan.pod} (node {plan.node_id}) "
                               f"cannot be reached: {err}") from err
        except KwbaseError as err:
            raise BackupFailed("ExportFailed", f"{item.shown}: {err}") from err
        # A time-series EXPORT reports no row counts (nor does a lost answer): count the records
        # it wrote instead.
        rows = csv_records if item.kind == "ts-database" or answer is None else \
            exported_rows(answer.rows)
        return ItemResult(item.id, rows, files, left_out)

    def remove_run_dir(self, cluster: Cluster, plan: Plan | None) -> None:
        if plan is None or not self.remove_node_files:
            return
        try:
            self.admin(cluster).remove_dir(plan.pod, self.node_dir(plan))
        except BackupFailed as err:
            log.warning("backup %s: %s", plan.backup, err.message)
        except KwbaseError as err:  # the node may be the reason we failed
            log.info("backup %s: could not clean the node: %s", plan.backup, err)


def write_manifest(plan: Plan, target: Target) -> dict[str, Any]:
    """Check every item's files in the target, then write the manifest (last)."""
    stored = target.list("")
    results = []
    for item in plan.items():
        raw = target.get(f"{ITEMS_DIR}/{item.id}.json")
        if raw is None:
            raise BackupFailed("TargetIncomplete", f"{item.shown}: its marker is gone")
        result = ItemResult.from_json(raw)
        missing = missing_in_target(result.files, stored)
        if missing:
            raise BackupFailed("TargetIncomplete", f"{item.shown}: missing or changed "
                               f"in the target: {', '.join(missing)}")
        results.append(result)
    by_id = {r.id: r for r in results}
    databases = []
    for db in plan.databases:
        db_dir = plan.db_dir(db.name)
        ids = [i.id for i in plan.items() if i.target_dir == db_dir or
               i.target_dir.startswith(f"{db_dir}/")]
        databases.append({
            "name": db.name, "dir": db_dir, "engine": db.engine, "tables": len(db.tables),
            "rows": sum(by_id[i].rows for i in ids),
            "files": sum(len(by_id[i].files) for i in ids)})
    files = sum(len(r.files) for r in results)
    size = sum(size for r in results for _, size in r.files.values())
    manifest = {
        "leftOut": [x for r in results for x in r.left_out],
        "plan": json.loads(plan.to_json()),
        "consistentTo": plan.consistent_to,
        "consistentToTime": stamp(hlc_time(plan.consistent_to).timestamp()),
        "databases": databases, "files": files, "sizeBytes": size,
        "items": {r.id: json.loads(r.to_json()) for r in results},
    }
    target.put(MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True).encode())
    return manifest
