"""EXPORT and IMPORT DATABASE as KWDB 3.2.1 runs them: a job row, a run time, effects at the end.

Called by tests/world/kwdb/sql.py for each such statement (`run`), and by tests/world/kwdb/
world.py (`settle`) before every command and inspection, which is when running statements end.

What KWDB does (V3.2.1, paths under kwbase/pkg/):
- EXPORT runs inside the client's session. Before it runs, the connection executor inserts a
  system.jobs row of type EXPORT, description "export", the statement's text, status running
  (sql/conn_executor_exec.go:719-723 calling ShowJobsForImportAndExportforInsert, :84-137), and
  after it marks the row succeeded or failed (:727-756, ShowJobsUpdate :139-200). A failure
  inside a database export is only a notice and leaves the row succeeded (sql/
  export_details.go:313-321, 755-778). The row has no lease (the payload sets none), so when the
  gateway dies with the session nothing ever adopts it (jobs/registry.go:1321-1326): the row
  stays running for ever and the files stay as far as they got.
- IMPORT DATABASE is a real job (sql/importer/import_stmt.go:382-412, CreateStartableJobWithTxn
  then sj.Run) described by the statement with its URLs sanitised (importJobDescription,
  :655-680: `IMPORT DATABASE CSV DATA ('<url>')`). Its resumer runs under the registry's context,
  not the client's (jobs/jobs.go:1017-1080, registry.go:429-437): the job goes on when the
  client goes away. It reads its files while it runs: files that stop answering fail it.
- A client (`kwbase sql -e`) prints nothing until its statement ends.

What the simulation assumes, not from KWDB's source: a statement takes rows / `SqlData.
bulk_rows_per_s` simulated seconds (real speed depends on the hardware; no time at all unless a
test sets a rate, KwdbWorld.set_bulk_rate); the files are written
and the rows imported at the end, all at once (a real export writes chunk after chunk, a dead
gateway's partial files are not modelled); an import whose gateway dies carries on (adopted by
another node once its lease expires, which is not timed here).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from tests.world.kwdb import data
from tests.world.kwdb.client import Env
from tests.world.kwdb.model import Job, LogicalCluster
from tests.world.kwdb.state import Group, Proc

_EXPORT = re.compile(r"export\b", re.IGNORECASE)
_IMPORT_DATABASE = re.compile(r"import database csv data \(\s*[\"'](?P<url>[^\"']+)[\"']\s*\)",
                              re.IGNORECASE)


@dataclass
class Running:
    """A statement that has not ended yet; `finish` applies its effects (False: it failed)."""

    job: Job
    done_at: float
    gateway_pod: str
    gateway_started_at: float
    kind: str  # "EXPORT" or "IMPORT"
    finish: Callable[[], str]  # "" when applied, else the job's error


def is_bulk(text: str) -> bool:
    return bool(_EXPORT.match(text) or _IMPORT_DATABASE.fullmatch(text))


def run(env: Env, target: Proc, cluster: LogicalCluster, session: data.Session, stmt: str,
        text: str) -> tuple[list[str], list[list[str]], list[str], float]:
    """Run one EXPORT or IMPORT DATABASE: headers, rows, notices, and how long the real one
    takes (simulated seconds; its effects wait until then). Raises data.SqlError."""
    if _EXPORT.match(text):
        return _export(env, target, cluster, session, stmt, text)
    return _import(env, target, cluster, session, text)


def _export(env: Env, target: Proc, cluster: LogicalCluster, session: data.Session, stmt: str,
            text: str) -> tuple[list[str], list[list[str]], list[str], float]:
    job = cluster.add_job("EXPORT", "export", stmt, env.now)
    staged: dict[int, dict[str, bytes]] = {}

    def staged_disk(node_id: int) -> dict[str, bytes] | None:
        return None if session.disk(node_id) is None else staged.setdefault(node_id, {})

    headers, rows, notices = _staged(job, dataclasses.replace(session, disk=staged_disk), text,
                                     env.now)
    records = sum(_records(body) for files in staged.values() for path, body in files.items()
                  if path.endswith(".csv"))

    def finish() -> str:
        for node_id, files in staged.items():
            disk = session.disk(node_id)
            if disk is None:
                return f"failed to dial n{node_id}: node unavailable"
            disk.update(files)
        return ""

    duration = _duration(cluster, records)
    _start(env, target, cluster, Running(job, env.now + duration, target.pod_name,
                                         target.started_at, "EXPORT", finish))
    return headers, rows, notices, duration


def _import(env: Env, target: Proc, cluster: LogicalCluster, session: data.Session,
            text: str) -> tuple[list[str], list[list[str]], list[str], float]:
    match = _IMPORT_DATABASE.fullmatch(text)
    assert match is not None
    url = match.group("url")
    job = cluster.add_job("IMPORT", f"IMPORT DATABASE CSV DATA ('{url}')", "", env.now)
    real = session.data
    staged = dataclasses.replace(real, databases=dict(real.databases))
    headers, rows, notices = _staged(job, dataclasses.replace(session, data=staged), text,
                                     env.now)
    rows = [[str(job.job_id), *row[1:]] for row in rows]  # the job's id, as KWDB answers
    added = {name: db for name, db in staged.databases.items() if name not in real.databases}

    def finish() -> str:
        if url.startswith(("http://", "https://")):
            try:  # IMPORT reads its files while it runs: they must still be there
                data.http_listing(url, data.custom_ca(session))
            except data.SqlError as err:
                return str(err.message)
        clash = sorted(set(added) & set(real.databases))
        if clash:
            return f'database "{clash[0]}" already exists'
        real.databases.update(added)
        return ""

    duration = _duration(cluster, sum(int(r[3]) for r in rows if len(r) > 3 and r[3].isdigit()))
    _start(env, target, cluster, Running(job, env.now + duration, target.pod_name,
                                         target.started_at, "IMPORT", finish))
    return headers, rows, notices, duration


def _staged(job: Job, session: data.Session, text: str, t: float) -> data.Result:
    """The statement run on a session whose effects are staged; a failure ends its job failed
    at once (conn_executor_exec.go:727-737) and is raised."""
    try:
        found = data.statement(session, text)
        if found is None:
            raise data.SqlError(
                f"kwdb-sim: statement not modelled by the simulated KaiwuDB: {text}")
    except data.SqlError as err:
        _end(job, t, str(err.message))
        raise
    return found


def _records(body: bytes) -> int:
    return sum(1 for _ in csv.reader(io.StringIO(body.decode())))


def _duration(cluster: LogicalCluster, rows: int) -> float:
    rate = cluster.data.bulk_rows_per_s
    return rows / rate if rows and 0 < rate < math.inf else 0.0


def _start(env: Env, target: Proc, cluster: LogicalCluster, running: Running) -> None:
    cluster.running_statements.append(running)
    settle(env.group, cluster, env.now)


def _end(job: Job, t: float, error: str) -> None:
    job.status = "failed" if error else "succeeded"
    job.finished = t
    job.error = error


def _gateway_alive(group: Group, running: Running) -> bool:
    proc = group.procs.get(running.gateway_pod)
    return (proc is not None and proc.running and proc.host_alive
            and proc.started_at == running.gateway_started_at)


def settle(group: Group, cluster: LogicalCluster, now: float) -> None:
    """End what has ended by `now`: an EXPORT whose gateway died first is orphaned (its job row
    stays running, nothing is written); every other statement due applies its effects and its
    job row says how it ended."""
    still: list[Running] = []
    for running in cluster.running_statements:
        if running.kind == "EXPORT" and not _gateway_alive(group, running):
            continue  # the session died with its node: the row stays running, unadopted
        if running.done_at > now:
            still.append(running)
            continue
        _end(running.job, running.done_at, running.finish())
    cluster.running_statements = still
