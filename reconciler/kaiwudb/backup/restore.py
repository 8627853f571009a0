"""The restore step: a new KaiwuCluster with spec.bootstrap.fromBackup is filled from a completed
KaiwuBackup before it may be Ready.

The Controller runs `Restore.run` after "failover" and before "backup"
(reconciler.controller.controller), once the cluster is initialised. The order is KWDB's
(kaiwudb-facts.md, "Backup and restore"; reconciler.kaiwudb.backup.restore_plan.restore_statements):
cluster settings, users, then each database of the backup's manifest, one IMPORT per pass,
each followed by a pass that makes its sequences again with their values (EXPORT leaves them
out), one that adds its foreign keys again (IMPORT makes tables without them: the backup's
schema export leaves them out) and one that sets its comments again; then a pass that makes
every view again (EXPORT leaves them out too), and for each database one that grants again
what its users held (its GRANTs, views' and sequences' included; KWDB's IMPORT brings no
privileges back unless asked, and then loses some), all from the backup's plan,
each read over https from the reconciler's file server (reconciler.kaiwudb.backup.file_server),
since IMPORT cannot read s3://. Before the first import KaiwuDB is made to trust the file
server's CA (the cluster setting CUSTOM_CA; a database's import waits for it to spread), and
before the restore is recorded complete it no longer does; a restore that failed drops it on a
later pass.
An IMPORT with a notice, a status other than succeeded or any reject rows fails the restore
(Stalled, reason RestoreFailed): the data would be incomplete.

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
from typing import Any

from reconciler.kaiwudb.backup.catalog import comment_statement, grant_statements
from reconciler.kaiwudb.backup.database import SYSTEM_DATABASES
from reconciler.kaiwudb.backup.file_server import BackupFileServer, custom_ca_with
from reconciler.kaiwudb.backup.plan import MANIFEST_FILE
from reconciler.kaiwudb.backup.restore_import import DatabaseImport
from reconciler.kaiwudb.backup.restore_plan import (
    COMMENTS_STEP,
    FOREIGN_KEYS_STEP,
    GRANTS_STEP,
    RESTORE_ANNOTATION,
    SEQUENCES_STEP,
    VIEWS_STEP,
    RestoreFailed,
    backup_problem,
    import_problem,
    manifest_database,
    restore_record,
    restore_statements,
)
from reconciler.kaiwudb.backup.restore_steps import add_foreign_keys, make_objects
from reconciler.kaiwudb.backup.status import phase_of
from reconciler.kaiwudb.backup.step import Backups
from reconciler.kaiwudb.backup.targets import TargetError
from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import ExecFailed, KwbaseError
from reconciler.kaiwudb.kwbase.sql import quote_literal
from reconciler.kaiwudb.pods import cluster_pods, pod_ready
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import Pass, meta, rfc3339
from renderer.spec import Cluster

log = logging.getLogger(__name__)

ANNOTATION = RESTORE_ANNOTATION
# KWDB trusts an https server whose certificate one of this setting's PEM certificates signed
# (storage/cloud/http_storage.go:76-87). The node that ran SET applied it before answering
# (sql/set_cluster_setting.go:540-552 waits up to 10 s to observe it); the others hear of it
# by gossip (server/settingsworker.go:132-140). Settings and users are imported by the gateway
# alone (importer/import_stmt.go:1518-1580), a database's files are read on every node: a
# setting written just before a database's import is given TRUST_SETTLE_S to spread.
# A setting whose value has a newline must not be there when a backup runs: EXPORT CLUSTER
# SETTING writes it as
# `'e'...\n...'` (sql/export.go:576-582 trims quotes off lex.EncodeSQLString's `e'...'`),
# which IMPORT CLUSTER SETTING cannot parse (importer/import_stmt.go:1535-1538).
CUSTOM_CA = "cloudstorage.http.custom_ca"
TRUST_SETTLE_S = 5.0
BUILT_IN_USERS = frozenset({"root", "admin"})


class Restore:
    """The "restore" step (see the module docstring)."""

    name = "restore"
    always = False

    def __init__(self, ctx: StepContext, backups: Backups, server: BackupFileServer) -> None:
        self.ctx = ctx
        self.backups = backups
        self.server = server
        self.poll_s = ctx.settings.backup_poll_s
        self.imports = DatabaseImport(backups)
        # The record this process last wrote, per cluster: the watch cache may still show an
        # older annotation for a moment, and an import must not run twice because of it.
        self._written: dict[tuple[str, str], dict[str, Any]] = {}
        # Clusters whose CUSTOM_CA this process has cleared of file server CAs.
        self._distrusted: set[tuple[str, str]] = set()

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
        record = self.recall(cluster, restore_record(meta(p.obj).get("annotations") or {}))
        if record is not None and (record.get("completedAt") or record.get("failed")):
            self.server.withdraw(f"{cluster.namespace}/{cluster.name}")
            if (cluster.namespace, cluster.name) not in self._distrusted:
                # A failed restore (or one an earlier process finished) may have left a file
                # server's CA trusted: once per process, it goes.
                pod = self.pod(p, cluster)
                if pod is not None:
                    try:
                        self.trust(cluster, self.ctx.admin(cluster), pod, None)
                    except KwbaseError as err:
                        log.warning("restore: %s/%s: %s", cluster.namespace, cluster.name, err)
            if record.get("failed"):
                p.stalled.append(("RestoreFailed", str(record["failed"])))
            return
        name = cluster.restore_from
        backup = self.ctx.view.get(k.KAIWU_BACKUP, cluster.namespace, name)
        if backup is None or phase_of(backup) != "completed":
            state = "does not exist" if backup is None else f"is {phase_of(backup) or 'new'}"
            self.waiting(p, f"KaiwuBackup {name} {state}; the restore waits for it to complete")
            return
        pod = self.pod(p, cluster)
        if pod is None:
            self.waiting(p, "no Ready pod with a live KaiwuDB node to import through")
            return
        admin = self.ctx.admin(cluster)
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
            manifest = json.loads(target.get(MANIFEST_FILE) or b"{}")
            if not isinstance(manifest, dict):  # the target's, not ours to trust
                raise ValueError(f"{MANIFEST_FILE} is not a JSON object")
            if not record.get("done"):
                # Before the first import: every file as the backup recorded it.
                problem = backup_problem(manifest, target.list(""), target.get)
                if problem:
                    raise RestoreFailed(f"the backup is not intact: {problem}")
            url = self.server.publish(f"{cluster.namespace}/{cluster.name}", target)
            steps = restore_statements(manifest, url)
            done = list(record.get("done") or ())
            todo = [(step, stmt) for step, stmt in steps if step not in done]
            if not todo:
                # The file server's CA leaves the cluster's trust before the restore is
                # recorded complete: backups may start then, and KWDB writes the setting into
                # a backup as a line it cannot read back (see CUSTOM_CA).
                if self.trust_failed(p, name, cluster, admin, pod, None, settle=False):
                    return
                record["completedAt"] = rfc3339(p.now)
                self.annotate(p, cluster, record)
                self.server.withdraw(f"{cluster.namespace}/{cluster.name}")
                p.events.append(("Normal", "RestoreCompleted", (
                    f"KaiwuBackup/{name}: {len(steps)} imports done; relational tables as of "
                    f"{manifest.get('consistentToTime')}")))
                return
            step, stmt = todo[0]
            # Settings and users are read by the gateway alone, which applied the setting
            # before answering; a database is read on every node.
            if self.trust_failed(p, name, cluster, admin, pod, self.server.ca_pem(),
                                 settle=step.startswith("database ")):
                return
            if step.startswith(SEQUENCES_STEP) or step == VIEWS_STEP:
                try:
                    make_objects(admin, pod, manifest, step)
                except ExecFailed as err:  # the exec, not KWDB, failed: the next pass again
                    self.waiting(p, f"restoring KaiwuBackup {name}: {step}: {err}")
                    return
            elif step.startswith(COMMENTS_STEP):
                # Setting a comment replaces the one there: run again, it changes nothing.
                _, db = manifest_database(manifest, step.removeprefix(COMMENTS_STEP))
                try:
                    for comment in db.comments:
                        admin.sql(pod, comment_statement(db, comment))
                except ExecFailed as err:  # the exec, not KWDB, failed: the next pass again
                    self.waiting(p, f"restoring KaiwuBackup {name}: {step}: {err}")
                    return
            elif step.startswith(GRANTS_STEP):
                # Each GRANT adds to what is held: run again after a crash, it changes nothing.
                _, db = manifest_database(manifest, step.removeprefix(GRANTS_STEP))
                try:
                    for database, grant in grant_statements(db):
                        admin.sql(pod, grant, database=database)
                except ExecFailed as err:  # the exec, not KWDB, failed: the next pass again
                    self.waiting(p, f"restoring KaiwuBackup {name}: {step}: {err}")
                    return
            elif step.startswith(FOREIGN_KEYS_STEP):
                try:
                    pending = add_foreign_keys(admin, pod, manifest,
                                                    step.removeprefix(FOREIGN_KEYS_STEP))
                except ExecFailed as err:
                    # The exec, not KWDB, failed, or the ALTER outlived it and runs on: the
                    # next pass reads what is there.
                    self.waiting(p, f"restoring KaiwuBackup {name}: {step}: {err}")
                    return
                if pending:
                    self.waiting(p, f"restoring KaiwuBackup {name}: {step}: {pending}",
                                 self.backups.settings.running_poll_s)
                    return
            elif step.startswith("database "):
                running = self.imports.import_database(cluster, admin, pod, manifest, step, stmt,
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
                problem = import_problem(step, answer.rows, answer.notices)
                if problem:
                    raise RestoreFailed(problem)
        except (RestoreFailed, KwbaseError, TargetError, ValueError) as err:
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





    def trust(self, cluster: Cluster, admin: KwbaseAdmin, pod: str, ca_pem: str | None
              ) -> bool:
        """Make CUSTOM_CA trust `ca_pem` (a restore file server's CA; None: none of them);
        True when it already did, so nothing was written."""
        shown = admin.sql(pod, f"SHOW CLUSTER SETTING {CUSTOM_CA}")
        current = str(shown.rows[0].get(CUSTOM_CA) or "") if shown.rows else ""
        try:
            wanted = custom_ca_with(current, ca_pem)
        except ValueError as err:
            raise KwbaseError(str(err), pod, []) from err
        key = (cluster.namespace, cluster.name)
        self._distrusted.discard(key)
        if wanted != current:
            admin.sql(pod, f"SET CLUSTER SETTING {CUSTOM_CA} = {quote_literal(wanted)}"
                      if wanted else f"RESET CLUSTER SETTING {CUSTOM_CA}")
        if ca_pem is None:  # only once it is done: a failed write is tried again
            self._distrusted.add(key)
        return wanted == current

    def trust_failed(self, p: Pass, name: str, cluster: Cluster, admin: KwbaseAdmin, pod: str,
                     ca_pem: str | None, *, settle: bool) -> bool:
        """`trust`, as a step of the restore: True (and the pass waits) when the setting could
        not be read or written, or, with `settle`, was written just now (every node must hear
        of it first); a later pass tries again."""
        try:
            if self.trust(cluster, admin, pod, ca_pem) or not settle:
                return False
        except KwbaseError as err:
            self.waiting(p, f"restoring KaiwuBackup {name}: {CUSTOM_CA}: {err}")
            return True
        self.waiting(p, f"restoring KaiwuBackup {name}: KaiwuDB is told to trust the "
                        f"reconciler's file server ({CUSTOM_CA}); the import goes on once "
                        "every node has heard", TRUST_SETTLE_S)
        return True

    def waiting(self, p: Pass, message: str, poll_s: float | None = None) -> None:
        p.not_ready.insert(0, ("Restoring", message))
        p.progressing.append(("Restoring", message))
        p.requeue_in(self.poll_s if poll_s is None else poll_s)

    def pod(self, p: Pass, cluster: Cluster) -> str | None:
        pods = cluster_pods(self.ctx.view, cluster)
        live = sorted(n.pod for n in p.kaiwu.nodes or () if n.state == "live" and n.pod)
        return next((name for name in live if pod_ready(pods.get(name))), None)

    @staticmethod
    def data_in(admin: Any, pod: str) -> str:
        """What data the cluster holds ("" when none): user databases and users."""
        dbs = [r["database_name"] for r in admin.sql(pod, "SHOW DATABASES").rows
               if r.get("database_name") not in SYSTEM_DATABASES]
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
        try:
            self.ctx.kube.patch(k.KAIWU_CLUSTER, cluster.namespace, cluster.name,
                                    {"metadata": {"annotations": {ANNOTATION: text}}})
        except ApiError as error:
            if not error.not_found:
                raise
        # The pass's object is the cache's own (peeked): the annotation goes on a new one, whose
        # maps on the way are new too, never into what the cache and its other readers hold.
        metadata = meta(p.obj)
        p.obj = {**p.obj, "metadata": {**metadata, "annotations": {
            **(metadata.get("annotations") or {}), ANNOTATION: text}}}
        self._written[(cluster.namespace, cluster.name)] = json.loads(text)


def _progress(record: dict[str, Any]) -> tuple[int, int]:
    """How far a record has come: finished (completed or failed), then imports done."""
    return (1 if record.get("completedAt") or record.get("failed") else 0,
            len(record.get("done") or ()))




