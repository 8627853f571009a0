"""The restore step: a new KaiwuCluster with spec.bootstrap.fromBackup is filled from a completed
KaiwuBackup before it may be Ready.

The Controller runs `Restore.run` after "failover" and before "backup"
(reconciler.controller.controller), once the cluster is initialised. The order is KWDB's
(kaiwudb-facts.md, "Backup and restore"; reconciler.kaiwudb.backup_plan.restore_statements):
cluster settings, users, then each database of the backup's manifest, one IMPORT per pass,
each read over http from the reconciler's file server (reconciler.kaiwudb.restore_server),
since IMPORT cannot read s3://. An IMPORT with a notice, a status other than succeeded or any
reject rows fails the restore (Stalled, reason RestoreFailed): the data would be incomplete.

Before the first IMPORT every file of the backup is checked against its manifest (present,
same size, same sha256): a damaged backup fails the restore before anything is imported.

Memory: the annotation kaiwu.inspur.com/restore on the KaiwuCluster, JSON `{"backup": name,
"done": [step ids], "completedAt"| "failed": ...}`, written before the first IMPORT and after
each one (and kept in memory against a lagging watch cache); KaiwuDB itself is checked too:
users that all exist already are not imported again, and a database that exists although its
import is not recorded stops the restore rather than importing twice. Without the annotation the
cluster must be empty (no user database, no user besides root and admin): restoring into a
cluster that holds data is refused (Stalled, reason RestoreRefused), touching nothing. Until the
restore completed the cluster is not Ready (reason Restoring), and backups of it do not start.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta
from typing import Any

from reconciler.kaiwudb import backup_plan as bp
from reconciler.kaiwudb.backup import Backups, phase_of
from reconciler.kaiwudb.backup_target import TargetError
from reconciler.kaiwudb.kwbase import ExecFailed, KwbaseAdmin, KwbaseError
from reconciler.kaiwudb.pods import cluster_pods, pod_ready
from reconciler.kaiwudb.restore_server import BackupFileServer
from reconciler.kaiwudb.statements import Running
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import Pass, meta, rfc3339
from renderer.spec import Cluster

log = logging.getLogger(__name__)

ANNOTATION = bp.RESTORE_ANNOTATION
RECORD_CLOCK_GRACE = timedelta(seconds=5)
BUILT_IN_USERS = frozenset({"root", "admin"})


class Restore:
    """The "restore" step (see the module docstring)."""

    name = "restore"
    always = False

    def __init__(self, backups: Backups, server: BackupFileServer, poll_s: float = 1.0) -> None:
        self.backups = backups
        self.server = server
        self.poll_s = poll_s
        # The record this process last wrote, per cluster: the watch cache may still show an
        # older annotation for a moment, and an import must not run twice because of it.
        self._written: dict[tuple[str, str], dict[str, Any]] = {}

    def recall(self, cluster: Cluster, shown: dict[str, Any] | None) -> dict[str, Any] | None:
        mine = self._written.get((cluster.namespace, cluster.name))
        if mine is None or (shown is not None and shown.get("backup") != mine.get("backup")):
            return shown
        if shown is None or _progress(mine) > _progress(shown):
            return dict(mine)
        return shown

    def forget(self, namespace: str, name: str) -> None:
        self._written.pop((namespace, name), None)

    def wanted(self, p: Pass) -> bool:
        return (p.cluster is not None and bool(p.cluster.restore_from) and not p.paused
                and not p.halted and p.kaiwu.initialized)

    def run(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None and cluster.restore_from
        record = self.recall(cluster, bp.restore_record(meta(p.obj).get("annotations") or {}))
        if record is not None and record.get("completedAt"):
            self.server.withdraw(f"{cluster.namespace}/{cluster.name}")
            return
        if record is not None and record.get("failed"):
            self.server.withdraw(f"{cluster.namespace}/{cluster.name}")
            p.stalled.append(("RestoreFailed", str(record["failed"])))
            return
        name = cluster.restore_from
        backup = self.backups.view.get(k.KAIWU_BACKUP, cluster.namespace, name)
        if backup is None or phase_of(backup) != "completed":
            state = "does not exist" if backup is None else f"is {phase_of(backup) or 'new'}"
            self.waiting(p, f"KaiwuBackup {name} {state}; the restore waits for it to complete")
            return
        pod = self.pod(p, cluster)
        if pod is None:
            self.waiting(p, "no Ready pod with a live KaiwuDB node to import through")
            return
        admin = self.backups.admin(cluster)
        url = ""
        try:
            if record is None:
                refused = self.data_in(admin, pod)
                if refused:
                    p.stalled.append(("RestoreRefused", (
                        f"spec.bootstrap.fromBackup: the cluster already holds data "
                        f"({refused}); a backup is restored only into a new, empty cluster")))
                    return
                record = {"backup": name, "done": [], "begunAt": rfc3339(p.now)}
                self.annotate(p, cluster, record)
            target = self.backups.target(cluster, backup)
            manifest = json.loads(target.get(bp.MANIFEST_FILE) or b"{}")
            if not record.get("done"):
                # Before the first import: every file as the backup recorded it.
                problem = bp.backup_problem(manifest, target.list(""), target.get)
                if problem:
                    raise _Failed(f"the backup is not intact: {problem}")
            url = self.server.publish(f"{cluster.namespace}/{cluster.name}", target)
            steps = bp.restore_statements(manifest, url)
            done = list(record.get("done") or ())
            todo = [(step, stmt) for step, stmt in steps if step not in done]
            if not todo:
                record["completedAt"] = rfc3339(p.now)
                self.annotate(p, cluster, record)
                self.server.withdraw(f"{cluster.namespace}/{cluster.name}")
                p.events.append(("Normal", "RestoreCompleted", (
                    f"KaiwuBackup/{name}: {len(steps)} imports done; relational tables as of "
                    f"{manifest.get('consistentToTime')}")))
                return
            step, stmt = todo[0]
            if step.startswith("database "):
                running = self.import_database(cluster, admin, pod, manifest, step, stmt,
                                               str(record.get("begunAt") or ""))
                if running:
                    self.waiting(p, f"restoring KaiwuBackup {name}: {len(done)}/{len(steps)} "
                                    f"imports done; importing {step} ({running})",
                                 self.backups.settings.running_poll_s)
                    return
            elif step == "users" and self.users_there(admin, pod, target):
                pass  # imported by a reconciler that died before recording it
            else:
                answer = admin.sql(pod, stmt)
                problem = bp.import_problem(step, answer.rows, answer.notices)
                if problem:
                    raise _Failed(problem)
        except (_Failed, KwbaseError, TargetError, ValueError) as err:
            # The file server's URL holds the token that lets anyone read the backup: it never
            # reaches a condition, an Event or the annotation, and the token is withdrawn.
            self.server.withdraw(f"{cluster.namespace}/{cluster.name}")
            text = str(err).replace(url, "<restore file server>") if url else str(err)
            message = f"restore from KaiwuBackup {name}: {text}"
            p.stalled.append(("RestoreFailed", message))
            p.events.append(("Warning", "RestoreFailed", message))
            self.annotate(p, cluster, {**(record or {"backup": name}), "failed": message})
            return
        record["done"] = [*done, step]
        self.annotate(p, cluster, record)
        p.events.append(("Normal", "RestoreStep", f"KaiwuBackup/{name}: {step} imported"))
        self.waiting(p, f"restoring KaiwuBackup {name}: {len(done) + 1}/{len(steps)} imports "
                        f"done ({step})")

    def import_database(self, cluster: Cluster, admin: KwbaseAdmin, pod: str,
                        manifest: dict[str, Any], step: str, stmt: str, begun_at: str) -> str:
        """One database's IMPORT: "" once it ended well, else a few words saying how it runs;
        _Failed when it cannot end well.

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
            raise _Failed(f"{step}: KWDB job {latest.job_id} {latest.status}: {latest.error} "
                          "(an IMPORT "
                          "reads the reconciler's file server while it runs: a reconciler that "
                          "restarted meanwhile no longer serves it)")
        db = step.removeprefix("database ")
        if latest is not None and latest.status == "succeeded":
            counted = {}
            for sources, _ in bp.expected_counts(manifest, db):
                for source in sources:
                    rows = admin.sql(pod, f"SELECT count(*) FROM {source}", bulk=True).rows
                    counted[source] = int(rows[0]["count"]) if rows else -1
            problem = bp.count_problem(step, bp.expected_counts(manifest, db), counted)
            if problem:
                raise _Failed(problem)
            return ""
        shown = admin.sql(pod, "SHOW DATABASES")
        if any(r.get("database_name") == db for r in shown.rows):
            raise _Failed(f"{step}: exists although no import of it is recorded or known to "
                          "KWDB; drop it and delete the annotation kaiwu.inspur.com/restore "
                          "to restart")
        self.backups.statements.start(key, lambda: admin.sql(pod, stmt, bulk=True))
        collected = self.collect(key, step)
        return "started, no answer: KWDB's job row will say" if collected is None else collected

    def collect(self, key: str, step: str) -> str | None:
        """The IMPORT this process runs under `key`: "" once it ended well, a few words while
        it runs, None when none runs here (or its exec ended with no answer); _Failed when its
        answer says it failed."""
        try:
            polled = self.backups.statements.poll(key)
        except ExecFailed as err:
            # The exec ended with no answer (a time-out, the pod or the connection gone): the
            # IMPORT is a job that goes on without its client; KWDB's job row says what follows.
            log.warning("restore: %s: no answer: %s", step, err)
            return None
        if polled is None:
            return None
        if isinstance(polled, Running):
            return f"running {polled.elapsed_s:.0f} s"
        problem = bp.import_problem(step, polled.rows, polled.notices)
        if problem:
            raise _Failed(problem)
        return ""

    def waiting(self, p: Pass, message: str, poll_s: float | None = None) -> None:
        p.not_ready.insert(0, ("Restoring", message))
        p.progressing.append(("Restoring", message))
        p.requeue_in(self.poll_s if poll_s is None else poll_s)

    def pod(self, p: Pass, cluster: Cluster) -> str | None:
        pods = cluster_pods(self.backups.view, cluster)
        live = sorted(n.pod for n in p.kaiwu.nodes or () if n.state == "live" and n.pod)
        return next((name for name in live if pod_ready(pods.get(name))), None)

    @staticmethod
    def data_in(admin: Any, pod: str) -> str:
        """What data the cluster holds ("" when none): user databases and users."""
        dbs = [r["database_name"] for r in admin.sql(pod, "SHOW DATABASES").rows
               if r.get("database_name") not in bp.SYSTEM_DATABASES]
        users = [r["username"] for r in admin.sql(pod, "SHOW USERS").rows
                 if r.get("username") not in BUILT_IN_USERS]
        parts = ([f"databases {', '.join(sorted(dbs))}"] if dbs else []) + (
            [f"users {', '.join(sorted(users))}"] if users else [])
        return "; ".join(parts)

    @staticmethod
    def users_there(admin: Any, pod: str, target: Any) -> bool:
        """Every user of the backup's users.sql exists already (and there is one at least)."""
        wanted = set(re.findall(r"CREATE USER (\w+)", (target.get("users/users.sql") or
                                                         b"").decode()))
        have = {r["username"] for r in admin.sql(pod, "SHOW USERS").rows}
        return bool(wanted) and wanted <= have

    def annotate(self, p: Pass, cluster: Cluster, record: dict[str, Any]) -> None:
        text = json.dumps(record, sort_keys=True)
        self.backups.metrics.writes_total.labels(verb="patch", kind=k.KAIWU_CLUSTER.kind).inc()
        try:
            self.backups.kube.patch(k.KAIWU_CLUSTER, cluster.namespace, cluster.name,
                                    {"metadata": {"annotations": {ANNOTATION: text}}})
        except ApiError as error:
            if not error.not_found:
                raise
        p.obj.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION] = text
        self._written[(cluster.namespace, cluster.name)] = json.loads(text)


def _progress(record: dict[str, Any]) -> tuple[int, int]:
    """How far a record has come: finished (completed or failed), then imports done."""
    return (1 if record.get("completedAt") or record.get("failed") else 0,
            len(record.get("done") or ()))


class _Failed(Exception):
    pass
