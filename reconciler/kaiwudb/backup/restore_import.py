"""One database's IMPORT during a restore, level-triggered on KWDB's job row: started once,
waited for while it runs (it goes on without its client), and, when it ended while nobody
listened, judged by the rows the restored tables hold.

Called by reconciler.kaiwudb.backup.restore for each `database <name>` step.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Any

from reconciler.kaiwudb.backup.restore_plan import (
    RestoreFailed,
    count_problem,
    expected_counts,
    import_problem,
)
from reconciler.kaiwudb.backup.step import Backups
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import ExecFailed
from reconciler.kaiwudb.statements import Running
from reconciler.model import rfc3339
from renderer.spec import Cluster

log = logging.getLogger(__name__)

RECORD_CLOCK_GRACE = timedelta(seconds=5)
_URL = re.compile(r"https?://[^\s\"')]+")


class DatabaseImport:
    """A database's IMPORT (see the module docstring). Its statements run through the backup
    step's runner (`Backups.statements`), which a restarted reconciler finds empty."""

    def __init__(self, backups: Backups) -> None:
        self.backups = backups

    def import_database(self, cluster: Cluster, admin: KwbaseAdmin, pod: str,
                        manifest: dict[str, Any], step: str, stmt: str, begun_at: str) -> str:
        """One database's IMPORT: "" once it ended well, else a few words saying how it runs;
        RestoreFailed when it cannot end well.

        Level-triggered on KWDB's job row (an IMPORT DATABASE is a job that goes on without its
        client: kwbase/pkg/sql/importer/import_stmt.go:382-412, jobs/jobs.go:1017-1080), found
        by its description, which ends with the database's directory (import_stmt.go:655-680).
        Unless this process runs it: running, wait; failed, the restore fails with KWDB's
        error; succeeded while nobody listened, every table must hold the rows the backup
        holds (expected_counts); no row and no database, it starts; a database but no row,
        something else made it, and the restore stops rather than import twice."""
        key = f"restore/{cluster.namespace}/{cluster.name}/{step}"
        collected = self.collect(key, step)
        if collected is not None:
            return collected
        directory = stmt.rsplit("/", 1)[-1].split('"', 1)[0]
        jobs = admin.statement_jobs(pod, "IMPORT", "description", f"/{directory}')")
        # Only this restore's: a retry (the annotation deleted, the database dropped) must not
        # read the failed job of the attempt before it (SHOW JOBS keeps it seven days). A few
        # seconds' grace for clocks: its first IMPORT starts passes after the record.
        since = datetime.fromisoformat(begun_at.replace("Z", "+00:00")) - RECORD_CLOCK_GRACE \
            if begun_at else None
        latest = next((j for j in jobs if since is None or j.created >= since), None)
        if latest is not None and not latest.over:
            return f"KWDB job {latest.job_id}, running since {rfc3339(latest.created.timestamp())}"
        if latest is not None and latest.failed:
            raise RestoreFailed(f"{step}: KWDB job {latest.job_id} {latest.status}: {latest.error} "
                          "(an IMPORT "
                          "reads the reconciler's file server while it runs: a reconciler that "
                          "restarted meanwhile no longer serves it)")
        db = step.removeprefix("database ")
        if latest is not None and latest.status == "succeeded":
            counted = {}
            for sources, _ in expected_counts(manifest, db):
                for source in sources:
                    rows = admin.sql(pod, f"SELECT count(*) FROM {source}", bulk=True).rows
                    counted[source] = int(rows[0]["count"]) if rows else -1
            problem = count_problem(step, expected_counts(manifest, db), counted)
            if problem:
                raise RestoreFailed(problem)
            return ""
        shown = admin.sql(pod, "SHOW DATABASES")
        if any(r.get("database_name") == db for r in shown.rows):
            raise RestoreFailed(f"{step}: exists although no import of it is recorded or known to "
                          "KWDB; drop it and delete the annotation kaiwu.inspur.com/restore "
                          "to restart")
        self.backups.statements.start(key, lambda: admin.sql(pod, stmt, bulk=True))
        collected = self.collect(key, step)
        return "started, no answer: KWDB's job row will say" if collected is None else collected

    def collect(self, key: str, step: str) -> str | None:
        """The IMPORT this process runs under `key`: "" once it ended well, a few words while
        it runs, None when none runs here (or its exec ended with no answer); RestoreFailed when its
        answer says it failed."""
        try:
            polled = self.backups.statements.poll(key)
        except ExecFailed as err:
            # The exec ended with no answer (a time-out, the pod or the connection gone): the
            # IMPORT is a job that goes on without its client; KWDB's job row says what follows.
            # Its text holds the IMPORT, and so the file server's URL: logs get no token.
            log.warning("restore: %s: no answer: %s", step, _URL.sub("<restore file server>",
                                                                       str(err)))
            return None
        if polled is None:
            return None
        if isinstance(polled, Running):
            return f"running {polled.elapsed_s:.0f} s"
        problem = import_problem(step, polled.rows, polled.notices)
        if problem:
            raise RestoreFailed(problem)
        return ""
