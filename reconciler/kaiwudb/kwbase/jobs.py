"""KaiwuDB's jobs (SHOW JOBS): which running jobs a scale-in waits for (RunningJobs), and the jobs
of one statement, an EXPORT or IMPORT a backup or restore started (JobRow).

Read by KwbaseAdmin.running_jobs and statement_jobs (reconciler.kaiwudb.kwbase.admin); used by
scale-in (reconciler.kaiwudb.scale) and backups and restores (reconciler.kaiwudb.backup,
restore).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reconciler.kaiwudb.kwbase.answers import _csv_rows, _int, _ParseError, _time
from reconciler.kaiwudb.kwbase.sql import quote_literal

BACKUP_RUN_MARK = "/kaiwu-backup-"
"""What every EXPORT of the reconciler's backups holds in its text: its destination's run
directory, kaiwu-backup-<uid> (reconciler.kaiwudb.backup.plan.Plan.run_dir)."""


RUNNING_JOB_TYPES_QUERY = (
    "SELECT job_type, count(*) AS running FROM [SHOW JOBS] WHERE status = 'running' "
    f"AND COALESCE(strpos(statement, '{BACKUP_RUN_MARK}'), 0) = 0 "
    "GROUP BY job_type ORDER BY job_type"
)
"""Running jobs by type. Never a plain count: every KWDB 3.2.1 server start makes sure a `TS TXN`
job runs (kwbase/pkg/server/server.go:2299, kwbase/pkg/sql/kwdb_descriptor.go:390-420) and it
never ends (kwbase/pkg/sql/handle_ts_txn.go:36-56); SHOW JOBS hides only automatic statistics
jobs (kwbase/pkg/sql/delegate/show_jobs.go:39-69). A gate on every running job never opens.
The reconciler's own backup EXPORTs are left out: scale-in and backups already wait for each
other (reconciler.kaiwudb.backup.status.running_backup), and an EXPORT whose node restarted
midway keeps its row running for ever (the row has no lease, so nothing adopts or ends it: sql/
conn_executor_exec.go:719-723, jobs/registry.go:1321-1326), which would hold every later
scale-in. `statement` is NULL only in a row whose payload cannot be read (sql/kwdb_internal.go:
557-578): such a row counts."""


DRAIN_CONFLICTING_JOB_TYPES = frozenset({
    "IMPORT", "EXPORT", "BACKUP", "RESTORE", "SCHEMA CHANGE", "SYNC META CACHE",
    "REPLICA REBALANCE",
})
"""The job types (kwbase/pkg/jobs/jobspb/jobs.proto:672-697, named as wrap.go:222-228 prints
them) a scale-in waits for: bulk work that ends by itself and that a drain would break or slow
down: files read from or written to one node's external-I/O directory (IMPORT, EXPORT), bulk
reads and writes of ranges the drain is moving (BACKUP, RESTORE, a SCHEMA CHANGE's backfill,
the time-series metadata sync of SYNC META CACHE), and KWDB's own replica moves (REPLICA
REBALANCE), which compete with the decommission's. Not waited for: jobs that never end (TS TXN,
CHANGEFEED, STREAM, REPLICATION STREAM, REPLICATION INGESTION: a gate on them never opens) and
periodic maintenance that a moved replica does not disturb (CREATE STATS, AUTO CREATE STATS,
SCHEMA CHANGE GC, SQL SCHEDULE, COMPRESS, RETENTION, STATISTICS, RESTART HISTORY)."""


@dataclass(frozen=True)
class RunningJobs:
    """Running jobs by KWDB job type (RUNNING_JOB_TYPES_QUERY)."""

    by_type: tuple[tuple[str, int], ...] = ()

    def conflicting(self) -> tuple[tuple[str, int], ...]:
        """The running jobs a drain waits for (DRAIN_CONFLICTING_JOB_TYPES)."""
        return tuple((t, n) for t, n in self.by_type if t in DRAIN_CONFLICTING_JOB_TYPES)

    def describe_conflicting(self) -> str:
        """"" when none conflicts, else e.g. "jobs running (SHOW JOBS): 2 IMPORT"."""
        found = self.conflicting()
        if not found:
            return ""
        return "jobs running (SHOW JOBS): " + ", ".join(f"{n} {t}" for t, n in found)


STATEMENT_JOB_COLUMNS = ("statement", "description")


def statement_jobs_query(job_type: str, column: str, needle: str) -> str:
    """The jobs of one statement, newest first: job rows of `job_type` whose `column` holds
    `needle` (SHOW JOBS lists running jobs and those finished in the last seven days,
    kwbase/pkg/sql/delegate/show_jobs.go:43-60). An EXPORT's row carries its text in `statement`
    (sql/conn_executor_exec.go:719-723); an IMPORT's in `description`, URLs sanitised
    (sql/importer/import_stmt.go:655-680)."""
    if column not in STATEMENT_JOB_COLUMNS:
        raise ValueError(f"column must be one of {', '.join(STATEMENT_JOB_COLUMNS)}")
    return ("SELECT job_id, status, created, error FROM [SHOW JOBS] WHERE job_type = "
            f"{quote_literal(job_type)} AND strpos({column}, {quote_literal(needle)}) > 0 "
            "ORDER BY created DESC")


JOB_ENDED_WELL = "succeeded"


JOB_ENDED_BADLY = frozenset({"failed", "canceled"})
"""KWDB's terminal job statuses (jobs/jobs.go Status*); every other one (pending, running,
paused, pause-requested, cancel-requested, reverting, ...) means the job is not over."""


@dataclass(frozen=True)
class JobRow:
    """One job of statement_jobs_query: KWDB's id, status (running, succeeded, failed, ...),
    when it was created, and its error text (KWDB's words: shown, never acted upon)."""

    job_id: str
    status: str
    created: datetime
    error: str

    @property
    def over(self) -> bool:
        return self.status == JOB_ENDED_WELL or self.status in JOB_ENDED_BADLY

    @property
    def failed(self) -> bool:
        return self.status in JOB_ENDED_BADLY


def parse_statement_jobs(text: str) -> tuple[JobRow, ...]:
    """statement_jobs_query's CSV, newest first."""
    try:
        rows = _csv_rows(text)
        if rows and not {"job_id", "status", "created", "error"} <= set(rows[0]):
            raise _ParseError(f"expected columns job_id, status, created, error, got "
                              f"{', '.join(rows[0])}")
        found = []
        for row in rows:
            created = _time(row["created"])
            if created is None:
                raise _ParseError(f"job {row['job_id']} has no created time")
            found.append(JobRow(row["job_id"], row["status"], created, row["error"]))
        return tuple(found)
    except _ParseError as err:
        raise ValueError(f"unreadable SHOW JOBS output: {err}") from None


def parse_running_jobs(text: str) -> RunningJobs:
    """RUNNING_JOB_TYPES_QUERY's CSV: header `job_type,running`, one row per type. The type is
    KWDB's text; it is only compared with known names, never used elsewhere."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"job_type", "running"}:
            raise _ParseError(f"expected columns job_type, running, got {', '.join(rows[0])}")
        return RunningJobs(tuple((r["job_type"], _int(r["running"], "running")) for r in rows))
    except _ParseError as err:
        raise ValueError(f"unreadable running jobs: {err}") from None
