"""`kwbase sql -e` in the simulated KaiwuDB: the few statements the operator runs.

Called by tests/world/kwdb/commands.py. Statements answered:
- REPLICATION_HEALTH_QUERY, and generally `SELECT [node_id,] sum((metrics->>'<metric>')::DECIMAL)
  [::INT] [AS name], ... FROM kwdb_internal.kv_store_status [GROUP BY node_id] [ORDER BY
  node_id]` over the metrics replicas, replicas.leaders, replicas.leaseholders,
  ranges.unavailable, ranges.underreplicated (others are NULL). Like the real table it sums the
  persisted status of every node, dead and decommissioned ones included (their last values).
- `SHOW JOBS` (KWDB V3.2.1's columns; running jobs and those finished within seven days: the
  perpetual TS TXN job of every cluster, model.TS_TXN_JOB, those of KwdbWorld.set_running_jobs,
  and the rows of EXPORT and IMPORT DATABASE, bulk.py), RUNNING_JOBS_QUERY (all running jobs,
  as a count), RUNNING_JOB_TYPES_QUERY (running jobs by type, optionally leaving out rows whose
  statement holds a text) and the jobs of one statement (_STATEMENT_JOBS);
- the nodes whose liveness record is flagged upgrading (_UPGRADING_NODES);
- when each node's status record was written, and its process started (_STATUS_TIMES);
- the node of each store (_STORE_NODES) and the ranges per set of voters, from the range
  descriptors (_RANGE_REPLICA_SETS);
- `SELECT 1`;
- the data statements of tests/world/kwdb/data.py (SHOW DATABASES, SHOW TABLES, EXPORT, IMPORT,
  cluster_logical_timestamp()); their notices are printed to stderr as `NOTICE: ...`, as the
  CLI prints a server notice, with exit code 0.
Anything else fails with a `kwdb-sim:` error saying the statement is not modelled. Results are
printed per kwbase/pkg/cli/sql_util.go runQueryAndFormatResults in --format (tsv by default,
since exec has no terminal); integer columns align right in tables.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from tests.world.kwdb import bulk, data
from tests.world.kwdb.client import Env, Fail, output_format, sql_session
from tests.world.kwdb.flags import Invocation
from tests.world.kwdb.model import Job, LogicalCluster, StoreMetrics
from tests.world.kwdb.render import cli_error, format_timestamp, format_value, render
from tests.world.kwdb.state import ExecResult, Proc

REPLICATION_HEALTH_QUERY = (
    "SELECT sum((metrics->>'ranges.unavailable')::DECIMAL)::INT AS ranges_unavailable, "
    "sum((metrics->>'ranges.underreplicated')::DECIMAL)::INT AS ranges_underreplicated "
    "FROM kwdb_internal.kv_store_status"
)
"""The one replication-health query the admin adapter runs (`kwbase sql -e ... --format=csv`).

Answers one row `ranges_unavailable,ranges_underreplicated`; healthy means both are 0.
"""

RUNNING_JOBS_QUERY = "SELECT count(*) FROM [SHOW JOBS] WHERE status = 'running'"
"""Every running job as one count: never 0 on KWDB 3.2.1 (the TS TXN job), so no gate can use it."""

RUNNING_JOB_TYPES_QUERY = (
    "SELECT job_type, count(*) AS running FROM [SHOW JOBS] WHERE status = 'running' "
    "AND COALESCE(strpos(statement, '/kaiwu-backup-'), 0) = 0 "
    "GROUP BY job_type ORDER BY job_type"
)
"""The running jobs by type, the query the admin adapter runs: columns job_type, running; rows
whose statement holds the quoted text are left out (any text; without the clause, none)."""

_SUM_ITEM = re.compile(
    r"sum\(\s*\(\s*metrics\s*->>\s*'(?P<metric>[a-z0-9._-]+)'\s*\)\s*::\s*decimal\s*\)"
    r"(?P<int>\s*::\s*int[48]?)?(?:\s+as\s+(?P<alias>[a-z_][a-z0-9_]*))?",
    re.IGNORECASE,
)
_KV_STORE_STATUS = re.compile(
    r"select\s+(?P<items>.+?)\s+from\s+kwdb_internal\.kv_store_status"
    r"(?P<group>\s+group\s+by\s+node_id)?(?:\s+order\s+by\s+node_id)?",
    re.IGNORECASE | re.DOTALL,
)
_RUNNING_JOBS = re.compile(
    r"select\s+count\(\s*\*\s*\)\s+from\s+\[\s*show\s+jobs\s*\]\s+"
    r"where\s+status\s*=\s*'running'",
    re.IGNORECASE,
)
_RUNNING_JOB_TYPES = re.compile(
    r"select\s+job_type\s*,\s*count\(\s*\*\s*\)\s+as\s+running\s+from\s+\[\s*show\s+jobs"
    r"\s*\]\s+where\s+status\s*=\s*'running'"
    r"(?:\s+and\s+coalesce\(\s*strpos\(\s*statement\s*,\s*'(?P<skip>(?:[^']|'')+)'\s*\)"
    r"\s*,\s*0\s*\)\s*=\s*0)?"
    r"\s+group\s+by\s+job_type\s+order\s+by\s+job_type",
    re.IGNORECASE,
)
_STATEMENT_JOBS = re.compile(
    r"select job_id, status, created, error from \[show jobs\] where job_type = "
    r"'(?P<type>(?:[^']|'')*)' and strpos\((?P<column>statement|description), "
    r"'(?P<needle>(?:[^']|'')*)'\) > 0 order by created desc",
    re.IGNORECASE,
)
"""The jobs of one statement, the admin adapter's STATEMENT_JOBS_QUERY (newest first)."""
_UPGRADING_NODES = re.compile(
    r"select\s+node_id\s+from\s+kwdb_internal\.gossip_liveness\s+where\s+upgrading"
    r"\s+order\s+by\s+node_id",
    re.IGNORECASE,
)
"""The admin adapter's UPGRADING_NODES_QUERY: the ids whose gossiped liveness record has the
Upgrading flag (kwdb_internal.gossip_liveness, sql/kwdb_internal.go:2994-3060; every gateway's
view is the whole cluster here)."""
_STATUS_TIMES = re.compile(
    r"select\s+node_id\s*,\s*started_at\s*,\s*updated_at\s+from\s+kwdb_internal\."
    r"kv_node_status\s+order\s+by\s+node_id",
    re.IGNORECASE,
)
"""The admin adapter's STATUS_TIMES_QUERY: when each node's status record was written and when
the process that wrote it started (kwdb_internal.kv_node_status, sql/kwdb_internal.go:3406-3430:
every persisted record, dead nodes' included; model.py's sampled records)."""
_STORE_NODES = re.compile(
    r"select\s+node_id\s*,\s*store_id\s+from\s+kwdb_internal\.kv_store_status"
    r"\s+order\s+by\s+store_id",
    re.IGNORECASE,
)
"""The admin adapter's STORE_NODES_QUERY: the node of each store with a persisted status
(kwdb_internal.kv_store_status, sql/kwdb_internal.go:3517-3536). Here each node has one store,
numbered like the node: KWDB allocates store ids from a counter of their own
(server/node.go:196-205, 636-650), so with one store per node they match unless a start failed
between the two allocations; the reconciler never assumes they do."""
_RANGE_REPLICA_SETS = re.compile(
    r"select\s+array_to_string\(\s*replicas\s*,\s*','\s*\)\s+as\s+stores\s*,\s*"
    r"count\(\s*\*\s*\)\s+as\s+ranges\s+from\s+kwdb_internal\.ranges_no_leases"
    r"\s+group\s+by\s+stores\s+order\s+by\s+stores",
    re.IGNORECASE,
)
"""The admin adapter's RANGE_REPLICA_SETS_QUERY: ranges by their voters' store ids, sorted, from
the range descriptors (kwdb_internal.ranges_no_leases, sql/kwdb_internal.go:2227-2330, a meta
scan: every range, whatever its replicas' liveness; model.py's ranges, replicas listed)."""
_JOB_WINDOW_S = 7 * 24 * 3600.0
"""SHOW JOBS lists a finished job for seven days (delegate/show_jobs.go:55-60)."""
_JOB_HEADERS = (
    # SHOW JOBS' columns: kwbase/pkg/sql/delegate/show_jobs.go:43-46 (V3.2.1).
    "job_id",
    "job_type",
    "description",
    "statement",
    "user_name",
    "status",
    "running_status",
    "created",
    "started",
    "finished",
    "modified",
    "errord",
    "fraction_completed",
    "error",
    "coordinator_id",
    "total_num_of_ex",
    "total_num_of_success",
    "total_num_of_fail",
    "time_of_last_success",
)
_METRIC_FIELDS: dict[str, Callable[[StoreMetrics], int]] = {
    "replicas": lambda m: m.replicas,
    "replicas.leaders": lambda m: m.leaders,
    "replicas.leaseholders": lambda m: m.leaseholders,
    "ranges.unavailable": lambda m: m.unavailable,
    "ranges.underreplicated": lambda m: m.underreplicated,
    # kv/kvserver/metrics.go:724-728 and 48-52.
    "queue.raftsnapshot.pending": lambda m: m.snapshots_queued,
    "replicas.reserved": lambda m: m.snapshots_applying,
}


def _metric_value(metric: str, m: StoreMetrics) -> int | None:
    """`metrics->>'<metric>'`: NULL (None) for a metric the simulation does not keep."""
    getter = _METRIC_FIELDS.get(metric)
    return getter(m) if getter else None


def _split_items(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    items.append(current.strip())
    return items


def _kv_store_status(
    cluster: LogicalCluster, items_text: str, grouped: bool, t: float
) -> tuple[list[str], list[list[str]]]:
    headers: list[str] = []
    columns: list[tuple[str, str, bool]] = []  # (kind, metric, as int)
    for item in _split_items(items_text):
        if item.lower() == "node_id":
            if not grouped:
                raise Fail(
                    'column "node_id" must appear in the GROUP BY clause or be used in an '
                    "aggregate function",
                    sqlstate="42803",
                )
            headers.append("node_id")
            columns.append(("node_id", "", True))
            continue
        m = _SUM_ITEM.fullmatch(item)
        if m is None:
            raise Fail(f"kwdb-sim: select item not modelled: {item}")
        headers.append(m.group("alias") or "sum")
        columns.append(("sum", m.group("metric"), m.group("int") is not None))
    nodes = sorted(cluster.nodes.values(), key=lambda n: n.node_id)
    groups = [[n] for n in nodes] if grouped else [nodes]
    rows = []
    for members in groups:
        row = []
        for kind, metric, _as_int in columns:
            if kind == "node_id":
                row.append(str(members[0].node_id))
                continue
            values = [_metric_value(metric, cluster.metrics(n, t)) for n in members]
            present = [v for v in values if v is not None]
            row.append(str(sum(present)) if present else "NULL")
        rows.append(row)
    return headers, rows


def _session(env: Env, target: Proc, cluster: LogicalCluster, database: str) -> data.Session:
    """The data session of a SQL connection to `target`: its node id, every node's disk and
    the current database (`--database`)."""
    store = env.group.store_of(target)
    node_id = store.node_id if store is not None and store.node_id is not None else 0

    def disk(wanted: int) -> dict[str, bytes] | None:
        for other in env.group.stores.values():
            if other.cluster is cluster and other.node_id == wanted:
                node = cluster.nodes.get(wanted)
                proc = env.group.proc_of_node(node) if node is not None else None
                if proc is None or not (proc.running and proc.host_alive):
                    return None
                return other.files
        return None

    return data.Session(cluster.data, env.now, env.group.settings.epoch_unix_s, node_id, disk,
                        database)


def _statement(
    env: Env, target: Proc, cluster: LogicalCluster, stmt: str, notices: list[str],
    durations: list[float], database: str,
) -> tuple[list[str], list[list[str]]]:
    text = _squash(stmt)
    session = _session(env, target, cluster, database)
    try:
        if bulk.is_bulk(text):
            headers, rows, said, duration = bulk.run(env, target, cluster, session, stmt, text)
            notices.extend(said)
            durations.append(duration)
            return headers, rows
        answered = data.statement(session, text)
    except data.SqlError as err:
        raise Fail(err.message, sqlstate=err.sqlstate) from err
    if answered is not None:
        headers, rows, said = answered
        notices.extend(said)
        return headers, rows
    m = _KV_STORE_STATUS.fullmatch(text)
    if m is not None:
        return _kv_store_status(cluster, m.group("items"), m.group("group") is not None, env.now)
    if _RUNNING_JOBS.fullmatch(text):
        # Every running job SHOW JOBS lists, the perpetual TS TXN job included.
        return ["count"], [[str(len(cluster.running_jobs()))]]
    by_type = _RUNNING_JOB_TYPES.fullmatch(text)
    if by_type is not None:
        skip = (by_type.group("skip") or "").replace("''", "'")
        counts = Counter(j.job_type for j in cluster.running_jobs()
                         if not (skip and skip in j.statement))
        return ["job_type", "running"], [[t, str(n)] for t, n in sorted(counts.items())]
    statement_jobs = _STATEMENT_JOBS.fullmatch(text)
    if statement_jobs is not None:
        job_type, needle = (statement_jobs.group(g).replace("''", "'") for g in ("type", "needle"))
        column = statement_jobs.group("column").lower()
        epoch = env.group.settings.epoch_unix_s
        found = [j for j in _shown_jobs(cluster, env.now) if j.job_type == job_type
                 and needle in (j.statement if column == "statement" else j.description)]
        return ["job_id", "status", "created", "error"], [
            [str(j.job_id), j.status, format_timestamp(j.created, epoch), j.error]
            for j in sorted(found, key=lambda j: -j.created)]
    if text.lower() == "show jobs":
        epoch = env.group.settings.epoch_unix_s

        def shown(t: float | None) -> str:
            return "NULL" if t is None else format_timestamp(t, epoch)

        # Running jobs first, then by completion (show_jobs.go:63-66: ORDER BY
        # COALESCE(finished, now()) DESC, started DESC).
        ordered = sorted(_shown_jobs(cluster, env.now),
                         key=lambda j: (-(j.finished if j.finished is not None else env.now),
                                        -j.created))
        rows = [
            [
                str(job.job_id),
                job.job_type,
                job.description,
                job.statement,
                "root",
                job.status,
                "NULL",
                shown(job.created),
                shown(job.created),
                shown(job.finished),
                shown(job.finished if job.finished is not None else env.now),
                "NULL",
                "1" if job.finished is not None and not job.error else "0",
                job.error,
                "1",
                "0",
                "0",
                "0",
                "NULL",
            ]
            for job in ordered
        ]
        return list(_JOB_HEADERS), rows
    if _UPGRADING_NODES.fullmatch(text):
        return ["node_id"], [[str(n.node_id)] for n in sorted(
            cluster.nodes.values(), key=lambda n: n.node_id) if n.upgrading]
    if _STATUS_TIMES.fullmatch(text):
        cluster.advance(env.now)
        epoch = env.group.settings.epoch_unix_s
        return ["node_id", "started_at", "updated_at"], [
            [str(n.node_id), format_timestamp(n.status_started_at, epoch),
             format_timestamp(n.status_written_at, epoch)]
            for n in sorted(cluster.nodes.values(), key=lambda n: n.node_id)
            if n.status_written_at is not None]
    if _STORE_NODES.fullmatch(text):
        cluster.advance(env.now)
        return ["node_id", "store_id"], [
            [str(n.node_id), str(n.node_id)]
            for n in sorted(cluster.nodes.values(), key=lambda n: n.node_id)
            if n.status_written_at is not None]
    if _RANGE_REPLICA_SETS.fullmatch(text):
        cluster.advance(env.now)
        sets = Counter(",".join(map(str, sorted(r.replicas))) for r in cluster.ranges)
        return ["stores", "ranges"], [[stores, str(n)] for stores, n in sorted(sets.items())]
    if text.lower() == "select 1":
        return ["?column?"], [["1"]]
    raise Fail(f"kwdb-sim: statement not modelled by the simulated KaiwuDB: {text}")


def _shown_jobs(cluster: LogicalCluster, now: float) -> list[Job]:
    """The jobs SHOW JOBS lists: running ones and those finished in the last seven days."""
    return [j for j in cluster.jobs if j.finished is None or j.finished > now - _JOB_WINDOW_S]


def run_sql(env: Env, inv: Invocation) -> ExecResult:
    """kwbase/pkg/cli/sql.go with -e: each statement's result in --format (tsv by default)."""
    fmt = output_format(inv)
    statements = [s for e in inv.all("execute") for s in data.split_statements(e)]
    if not statements:
        return ExecResult("", "", 0)  # no -e and no stdin: nothing to run
    target, cluster = sql_session(env, inv)
    out = ""
    notices: list[str] = []
    durations: list[float] = []
    for stmt in statements:
        try:
            headers, rows = _statement(env, target, cluster, stmt, notices, durations,
                                       inv.get("database", ""))
        except Fail as f:
            # Results of the statements before the failing one were already printed.
            err = cli_error(f.message, "sql", hint=f.hint, sqlstate=f.sqlstate)
            return ExecResult(out, "".join(f"NOTICE: {n}\n" for n in notices) + err, 1)
        if not headers:
            # No result columns: the CLI prints the statement's tag (kwbase/pkg/cli/
            # sql_util.go:797-810; tags with a row count are not modelled here).
            out += _tag(stmt) + "\n"
            continue
        # The CLI aligns by column type: integers right, everything else left.
        align = "".join(
            "r" if rows and all(_is_int(r[i]) for r in rows) else "l" for i in range(len(headers))
        )
        out += render(fmt, headers, [[format_value(v) for v in r] for r in rows], align)
    # A long EXPORT or IMPORT: the client prints it all when the statement ends.
    took = sum(durations)
    return ExecResult(out, "".join(f"NOTICE: {n}\n" for n in notices), 0, duration_s=took,
                      answers_at_end=took > 0)


def _tag(stmt: str) -> str:
    """A statement's tag as tree's StatementTag gives it for those modelled: its first word
    (EXPORT, GRANT, ...), ALTER TABLE's two, COMMENT ON's three (kwbase/pkg/sql/sem/tree/
    stmt.go:232, 381-429)."""
    words = stmt.upper().split(None, 3)
    if words[:2] == ["COMMENT", "ON"]:
        return " ".join(words[:3])
    return " ".join(words[:2]) if words[:2] == ["ALTER", "TABLE"] else words[0]


def _squash(stmt: str) -> str:
    """Whitespace runs outside quotes as one space (the patterns match single spaces); quoted
    names and literals are kept byte for byte."""
    parts = re.split(r"""('(?:[^']|'')*'|"(?:[^"]|"")*")""", stmt)
    return "".join(p if i % 2 else re.sub(r"\s+", " ", p) for i, p in enumerate(parts)).strip()


def _is_int(value: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", value))
