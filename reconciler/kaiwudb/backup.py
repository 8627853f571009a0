"""The backup step of a cluster's pass: schedules make KaiwuBackups, retention deletes old ones,
and the one running backup advances by one export per pass.

The Controller runs `Backups.run` after "failover" (reconciler.controller.controller); the
watch caches map each KaiwuBackup and KaiwuBackupSchedule to the cluster its spec.cluster names,
so a new backup or schedule starts a pass. Decisions are the pure functions of
reconciler.kaiwudb.backup_plan; files move through reconciler.kaiwudb.backup_target; KaiwuDB is
reached through the admin adapter (reconciler.kaiwudb.kwbase: exec into one pod).

How a backup runs (docs/backup.md):
  start     when no other backup of the cluster runs and `start_blocker` finds no scale-in,
            rollout, failover or unready pod: choose a Ready pod and its node id, read the
            databases and tables and `cluster_logical_timestamp()`, write plan.json to the
            target FIRST, then status running.
  each pass the next item without a marker in the target: `rm -rf` its node directory, EXPORT
            into nodelocal://<node>/<run>/<item>, check the answer (notices, result=fail, files
            announced), list and checksum the files on the node, stream each out (`cat`),
            compare checksums, put it in the target, write the item's marker
            (items/<id>.json), remove the files from the node.
  finish    every item's files listed in the target with their sizes, then manifest.json
            LAST, then status completed; the run directory on the node is removed.
So the target, not status, is the memory: a reconciler that restarts finds plan.json and the
markers and carries on with the same node and timestamp; a backup is complete exactly when
manifest.json exists. Any failure (a notice, a missing or corrupt file, the node gone, the
target refusing) marks it failed with the reason, writes failed.json, and removes what it left
on the node; the next scheduled backup starts afresh.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from reconciler.kaiwudb import backup_plan as bp
from reconciler.kaiwudb.backup_objects import SequenceDef, sequence_value, sequence_value_query
from reconciler.kaiwudb.backup_target import Target, TargetError, target_for
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import (
    CommandFailed,
    ExecFailed,
    ExecTimedOut,
    KwbaseError,
    NodeUnreachable,
    error_text,
)
from reconciler.kaiwudb.kwbase.sql import SqlAnswer
from reconciler.kaiwudb.pods import cluster_pods, pod_ready, rolling
from reconciler.kaiwudb.statements import BulkStatements, Running
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.metrics import Metrics
from reconciler.model import Obj, Pass, meta
from renderer.builders import DATA_DIR
from renderer.cron import cron_problem
from renderer.spec import Cluster

log = logging.getLogger(__name__)

NOT_CARRIED = (
    "not carried (a restore cannot bring them back): passwords (EXPORT USERS writes none: set "
    "them with ALTER USER ... WITH PASSWORD after a restore); comments on time-series "
    "databases and tables, and on procedures (docs/backup.md)")
"""What every completed backup says it lacks, in its status message (kwbase/pkg/sql/
export.go:76-111 lists EXPORT's options; EXPORT USERS, export.go:634-712, writes each user's
CREATE USER with its options and role memberships, never a password). Privileges on
databases, schemas and tables, foreign keys within a database and comments on a relational
database, its tables, columns and indexes are carried by the plan (backup_plan.Grant,
ForeignKey, Comment) and restored after each database's import."""
EXTERN_DIR = f"{DATA_DIR}/extern"
"""The node's external-I/O directory: kwbase's default, <first store>/extern."""
FAILED_FILE = "failed.json"
TERMINAL = ("completed", "failed")


@dataclass(frozen=True)
class BackupSettings:
    """poll_s: how soon a running backup's cluster is looked at again. running_poll_s: the same
    while an EXPORT runs (a look may cost two execs). volumes_dir: where volume targets' claims
    are mounted. remove_node_files: clean the node after each item."""

    poll_s: float = 1.0
    running_poll_s: float = 5.0
    volumes_dir: str = "/backup-volumes"
    remove_node_files: bool = True


class BackupFailed(Exception):
    """A backup cannot complete; `reason` is a CamelCase word, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _time(text: object) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


SLOT_SLACK_S = 86400.0


def unread(manifest: Mapping[str, Any]) -> str:
    """What a backup whose plan predates carried privileges, foreign keys or comments lacks
    besides (its plan says nothing of them: a restore brings none back)."""
    plan = manifest.get("plan")
    plan = plan if isinstance(plan, dict) else {}
    lacking = [what for key, what in (("privileges", "privileges on databases, schemas and "
                                       "tables"), ("foreign_keys", "foreign keys"),
                                      ("comments", "comments"))
               if plan.get(key) is not True]
    if not lacking:
        return ""
    return (f"; nor {' nor '.join(lacking)}: this backup began before the reconciler carried "
            "them")


def left_out_text(manifest: Mapping[str, Any]) -> str:
    """What this backup left out: settings KWDB writes in a form no restore reads back, and
    foreign keys it cannot carry (onto another database, onto a hidden rowid, changed while
    it started) and comments it cannot read surely, ten at most named (names come from the
    database: a status has a size)."""
    left_out = [str(x) for x in manifest.get("leftOut") or ()]
    plan = manifest.get("plan")
    databases = plan.get("databases") if isinstance(plan, dict) else None
    keys = [str(x) for db in (databases if isinstance(databases, list) else ())
            if isinstance(db, dict) for x in db.get("left_out") or ()]
    text = ""
    if left_out:
        text += (f"; left out, as KWDB writes them in a form it cannot read back (set them "
                 f"again after a restore): {', '.join(left_out)}")
    if keys:
        more = f"; and {len(keys) - 10} more (plan.json lists them)" if len(keys) > 10 else ""
        text += (f"; also left out (set them again after a restore): "
                 f"{'; '.join(keys[:10])}{more}")
    return text


def _refused(err: CommandFailed) -> bool:
    """KaiwuDB ran the statement and refused it (an `ERROR:` of its SQL), as opposed to a node
    that could not be reached or was not ready (CommandFailed's subclasses): only that is
    worth going on without."""
    return type(err) is CommandFailed and "ERROR:" in err.stderr


def _short(err: CommandFailed) -> str:
    """KaiwuDB's error, on one line and short (it goes into a status)."""
    text = " ".join((error_text(err.stderr) or str(err)).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _slot(text: object) -> float | None:
    """A backup's slot annotation as a time; None when it is none (hostile or damaged)."""
    try:
        return _time(text) if text else None
    except (ValueError, OverflowError):
        return None


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase_of(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def backups_of(view: CacheView, namespace: str, cluster: str) -> list[Obj]:
    return sorted((b for b in view.list(k.KAIWU_BACKUP, namespace)
                   if ((b.get("spec") or {}).get("cluster") or {}).get("name") == cluster),
                  key=lambda b: (_time(meta(b).get("creationTimestamp")),
                                 str(meta(b).get("name"))))


def running_backup(view: CacheView, namespace: str, cluster: str) -> str | None:
    """The cluster's backup under way (phase running), if any: scale-in, rollout and failover
    wait for it (reconciler.kaiwudb.lifecycle and failover)."""
    for obj in backups_of(view, namespace, cluster):
        if phase_of(obj) == "running":
            return str(meta(obj).get("name"))
    return None


class Backups:
    """The "backup" step (see the module docstring)."""

    name = "backup"
    always = False

    def __init__(self, kube: Kube, view: CacheView, metrics: Metrics, settings: BackupSettings,
                 admin: Callable[[Cluster], KwbaseAdmin],
                 s3_factory: Callable[..., Any] | None = None,
                 statements: BulkStatements | None = None) -> None:
        self.kube = kube
        self.view = view
        self.metrics = metrics
        self.settings = settings
        self.admin = admin
        self.statements = statements or BulkStatements()
        self._s3_clients: dict[tuple[Any, ...], Any] = {}
        self._s3_make = s3_factory
        # Phases this process wrote, by backup uid: the cache may show an older one for a
        # moment after our own status write; a finished backup never runs again.
        self._finished: dict[str, str] = {}

    def wanted(self, p: Pass) -> bool:
        # A cluster not yet initialised has nothing to back up: its backups wait as pending.
        return p.cluster is not None and not p.paused and not p.halted and p.kaiwu.initialized

    # ---- the pass -------------------------------------------------------------------------
    def run(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        ns = cluster.namespace
        schedules = [s for s in self.view.list(k.KAIWU_BACKUP_SCHEDULE, ns)
                     if ((s.get("spec") or {}).get("cluster") or {}).get("name") == cluster.name]
        backups = backups_of(self.view, ns, cluster.name)
        for schedule in schedules:
            self.schedule(p, cluster, schedule, backups)
            self.retain(p, cluster, schedule, backups)
        self.report_last_success(cluster, backups)
        live = [b for b in backups if self._phase(b) not in TERMINAL]
        running = [b for b in live if self._phase(b) == "running"]
        asked = len(p.requeue)
        if running:
            self.advance(p, cluster, running[0])
        elif live:
            self.start(p, cluster, live[0])
        if len(live) > 1 and len(p.requeue) == asked:
            # Level-triggered: the backup this pass moved has just ended (it asked for no next
            # look) and another waits behind it: the state asks for the next pass, no watch
            # event is needed. While one runs, its own polling comes first.
            p.requeue_in(self.settings.poll_s)

    def _phase(self, obj: Obj) -> str:
        return self._finished.get(str(meta(obj).get("uid")), phase_of(obj))

    # ---- schedules and retention ----------------------------------------------------------
    def schedule(self, p: Pass, cluster: Cluster, schedule: Obj, backups: list[Obj]) -> None:
        spec = schedule.get("spec") or {}
        name = str(meta(schedule).get("name"))
        expr = str(spec.get("schedule") or "")
        problem = cron_problem(expr)
        if problem:
            p.events.append(("Warning", "BackupScheduleInvalid",
                             f"KaiwuBackupSchedule/{name}: {problem}"))
            return
        mine = [b for b in backups if (meta(b).get("labels") or {}).get(k.SCHEDULE_LABEL) == name]
        # Anyone who may create a KaiwuBackup may label one as this schedule's: a slot that
        # is no time counts as none (the schedule may then make that slot's backup; its name
        # is taken, and the create is a conflict).
        created = _time(meta(schedule).get("creationTimestamp"))
        # Only a slot between the schedule's creation and tomorrow is one it made: a slot in
        # year 9999 would otherwise stop it for good, one before year 1 break its status.
        slots = [slot for b in mine
                 if (slot := _slot((meta(b).get("annotations") or {}).get(k.SLOT_ANNOTATION)))
                 is not None and created - SLOT_SLACK_S <= slot <= p.now + SLOT_SLACK_S]
        try:
            due = None if spec.get("suspend") else bp.due_slot(
                expr, created, p.now, bool(spec.get("immediate")), slots)
            upcoming = bp.next_slot(expr, p.now)
        except ValueError as err:  # croniter's: a time it cannot find from here
            p.events.append(("Warning", "BackupScheduleInvalid",
                             f"KaiwuBackupSchedule/{name}: spec.schedule {expr!r}: {err}"))
            return
        if due is not None:
            self.create_backup(p, cluster, schedule, due)
        completed = [b for b in mine if self._phase(b) == "completed"]
        last = max(slots + ([due] if due is not None else []), default=None)
        status = {
            "lastScheduleTime": _stamp(last) if last is not None else None,
            "nextScheduleTime": None if spec.get("suspend") else _stamp(upcoming),
            "lastSuccessfulBackup": str(meta(completed[-1]).get("name")) if completed else None,
        }
        if status != {key: (schedule.get("status") or {}).get(key) for key in status}:
            self._patch_status(k.KAIWU_BACKUP_SCHEDULE, cluster.namespace, name, status)
        if not spec.get("suspend"):
            p.requeue_in(max(upcoming - p.now, 0.05))

    def create_backup(self, p: Pass, cluster: Cluster, schedule: Obj, slot: float) -> None:
        spec = schedule.get("spec") or {}
        template = spec.get("template") or {}
        name = bp.slot_name(str(meta(schedule).get("name")), slot)
        body: Obj = {
            "apiVersion": k.KAIWU_BACKUP.api_version, "kind": k.KAIWU_BACKUP.kind,
            "metadata": {"name": name, "namespace": cluster.namespace,
                         "labels": {k.SCHEDULE_LABEL: str(meta(schedule).get("name"))},
                         "annotations": {k.SLOT_ANNOTATION: _stamp(slot)}},
            "spec": {"cluster": {"name": cluster.name},
                     "target": template.get("target") or {},
                     **({"databases": template["databases"]} if template.get("databases")
                        else {})},
        }
        self.metrics.writes_total.labels(verb="create", kind=k.KAIWU_BACKUP.kind).inc()
        try:
            self.kube.create(body)
        except ApiError as error:
            if not error.conflict:  # a conflict: already made by an earlier pass, fine
                # Refused (a ResourceQuota counting KaiwuBackups, an admission policy): said,
                # and tried again at the next pass; the cluster's other steps go on.
                p.events.append(("Warning", "BackupScheduleFailed", (
                    f"KaiwuBackupSchedule/{meta(schedule).get('name')}: could not create "
                    f"KaiwuBackup/{name}: {error}")))
            return
        p.events.append(("Normal", "BackupScheduled",
                         f"KaiwuBackup/{name}: made by schedule {meta(schedule).get('name')}"))
        p.requeue_in(0.05)

    def retain(self, p: Pass, cluster: Cluster, schedule: Obj, backups: list[Obj]) -> None:
        spec = schedule.get("spec") or {}
        retention = spec.get("retention") or {}
        name = str(meta(schedule).get("name"))
        mine = {str(meta(b).get("name")): b for b in backups
                if (meta(b).get("labels") or {}).get(k.SCHEDULE_LABEL) == name}
        try:
            max_age = bp.age_seconds(retention["maxAge"]) if retention.get("maxAge") else None
        except ValueError as err:
            p.events.append(("Warning", "BackupScheduleInvalid", f"KaiwuBackupSchedule/{name}: "
                             f"{err}"))
            return
        views = [bp.BackupView(n, self._phase(b), _time(meta(b).get("creationTimestamp")))
                 for n, b in mine.items()]
        for victim in bp.retention_victims(views, int(retention.get("keep") or 7), max_age,
                                           p.now):
            obj = mine[victim]
            try:
                self.target(cluster, obj).delete("")
            except (TargetError, BackupFailed) as err:
                p.events.append(("Warning", "BackupRetentionFailed",
                                 f"KaiwuBackup/{victim}: files not deleted: {err}"))
                continue
            self.metrics.writes_total.labels(verb="delete", kind=k.KAIWU_BACKUP.kind).inc()
            self.kube.delete(k.KAIWU_BACKUP, cluster.namespace, victim,
                             uid=str(meta(obj).get("uid")))
            p.events.append(("Normal", "BackupDeleted", f"KaiwuBackup/{victim}: removed by "
                             f"the retention of schedule {name} (files and object)"))

    def report_last_success(self, cluster: Cluster, backups: list[Obj]) -> None:
        done = [_time((b.get("status") or {}).get("completedAt")) for b in backups
                if phase_of(b) == "completed"]
        if done:
            self.metrics.backup_succeeded(cluster.namespace, cluster.name, max(done))

    # ---- one backup -----------------------------------------------------------------------
    def target(self, cluster: Cluster, obj: Obj) -> Target:
        """The backup's target. Its files sit under the cluster the backup was taken of
        (spec.cluster), which for a restore is not the cluster being restored."""
        source = str(((obj.get("spec") or {}).get("cluster") or {}).get("name") or cluster.name)
        try:
            return target_for(((obj.get("spec") or {}).get("target") or {}), cluster.namespace,
                              source, str(meta(obj).get("name")),
                              volumes_dir=self.settings.volumes_dir, secrets=self._secret,
                              s3_factory=self._s3_client)
        except TargetError as err:
            raise BackupFailed("TargetUnusable", str(err)) from err

    def _s3_client(self, *args: Any, **kwargs: Any) -> Any:
        """One boto3 client per endpoint and credentials, kept (clients are thread-safe and
        hold a connection pool)."""
        key = (args, tuple(sorted(kwargs.items())))
        if key not in self._s3_clients:
            make = self._s3_make
            if make is None:
                import boto3  # only S3 targets need it
                make = boto3.client
            self._s3_clients[key] = make(*args, **kwargs)
        return self._s3_clients[key]

    def _secret(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.kube.get(k.SECRET, namespace, name) if name else None

    def start(self, p: Pass, cluster: Cluster, obj: Obj) -> None:
        name = str(meta(obj).get("name"))
        try:
            target = self.target(cluster, obj)
            raw = target.get(bp.PLAN_FILE)
            if raw is not None:  # started before (our status write was lost or is late)
                self.mark_running(p, cluster, obj, self.read_plan(obj, raw), target)
                return
            blocker = bp.start_blocker(self.cluster_state(p, cluster))
            if blocker:
                self.mark_pending(p, cluster, obj, f"waiting: {blocker}")
                return
            plan = self.make_plan(p, cluster, obj)
            target.put(bp.PLAN_FILE, plan.to_json())  # the decision, in the world, first
        except BackupFailed as err:
            self.fail(p, cluster, obj, err.reason, err.message, None, None)
            return
        except TargetError as err:
            self.fail(p, cluster, obj, "TargetFailed", str(err), None, None)
            return
        p.events.append(("Normal", "BackupStarted", (
            f"KaiwuBackup/{name}: exporting {len(plan.items())} item(s) from pod {plan.pod} "
            f"(node {plan.node_id}), relational tables as of {plan.consistent_to}")))
        self.metrics.lifecycle_actions_total.labels(action="backup-start").inc()
        self.mark_running(p, cluster, obj, plan, target)

    def cluster_state(self, p: Pass, cluster: Cluster) -> bp.ClusterState:
        pods = cluster_pods(self.view, cluster)
        sts = self.view.get(k.STATEFUL_SET, cluster.namespace, cluster.name)
        replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0) \
            if sts is not None else cluster.replicas
        names = [cluster.pod_name(i) for i in range(replicas)]
        return bp.ClusterState(
            initialized=p.kaiwu.initialized,
            scale_in=p.kaiwu.operation is not None or cluster.replicas < replicas,
            rolling=rolling(sts),
            not_ready=tuple(n for n in names if not pod_ready(pods.get(n))),
            failing=tuple(sorted(p.kaiwu.failures or {})),
            restoring=bp.restore_pending(meta(p.obj).get("annotations") or {},
                                         cluster.restore_from))

    def make_plan(self, p: Pass, cluster: Cluster, obj: Obj) -> bp.Plan:
        live = {n.pod: n.node_id for n in p.kaiwu.nodes or () if n.state == "live" and n.pod}
        pods = cluster_pods(self.view, cluster)
        chosen = next((pod for pod in sorted(live, key=_ordinal) if pod_ready(pods.get(pod))),
                      None)
        if chosen is None:
            raise BackupFailed("NoNode", "no Ready pod with a live KaiwuDB node to export from")
        admin = self.admin(cluster)
        try:
            shown = admin.sql(chosen, "SHOW DATABASES")
            wanted = [str(d) for d in (obj.get("spec") or {}).get("databases") or ()]
            chosen_dbs, missing = bp.choose_databases(
                [(r["database_name"], r["engine_type"]) for r in shown.rows], wanted)
            if missing:
                raise BackupFailed("DatabaseNotFound", f"spec.databases: {', '.join(missing)} "
                                   "do(es) not exist in the cluster")
            refused = bp.users_problem([str(r.get("username") or "")
                                        for r in admin.sql(chosen, "SHOW USERS").rows])
            if refused:
                raise BackupFailed("NotExportable", refused)
            dbs = []
            for db_name, engine in chosen_dbs:
                objects = bp.split_objects(db_name,
                                           admin.sql(chosen, bp.objects_query(db_name)).rows)
                if objects.problem:
                    raise BackupFailed("NotExportable", objects.problem)
                tables = objects.tables
                db = bp.DatabasePlan(db_name, engine, tables, left_out=objects.left_out,
                                     views=objects.views, sequences=objects.sequences)
                on_schemas, on_tables = bp.grants_queries(db_name)
                grants, refused = bp.read_grants(db, admin.sql(chosen, on_schemas).rows,
                                                 admin.sql(chosen, on_tables).rows)
                if refused:
                    raise BackupFailed("NotExportable", refused)
                db = replace(db, grants=grants)
                if engine == bp.RELATIONAL and tables:
                    keys, left_out = self.foreign_keys(admin, chosen, db)
                    db = replace(db, foreign_keys=keys, left_out=left_out)
                if engine == bp.RELATIONAL:
                    db = self.comments(admin, chosen, db)
                dbs.append(db)
            ts = admin.sql(chosen, "SELECT cluster_logical_timestamp()")
            consistent_to = ts.rows[0]["cluster_logical_timestamp"]
            for i, db in enumerate(dbs):
                if db.sequences:
                    dbs[i] = db = replace(db, sequences=self.sequence_values(admin, chosen, db))
                if db.foreign_keys:
                    # Read again: only a key that held before and after the timestamp surely
                    # fits the rows exported as of it.
                    again, _ = self.foreign_keys(admin, chosen, db)
                    kept, changed = bp.unsettled_foreign_keys(db.foreign_keys, again)
                    dbs[i] = replace(db, foreign_keys=kept, left_out=(*db.left_out, *changed))
        except KwbaseError as err:
            raise BackupFailed("ExportFailed", str(err)) from err
        plan = bp.Plan(str(meta(obj).get("name")), str(meta(obj).get("uid")), chosen,
                       live[chosen], consistent_to, tuple(dbs))
        problem = plan.problem()
        if problem:
            raise BackupFailed("NotExportable", problem)
        return plan

    @staticmethod
    def sequence_values(admin: KwbaseAdmin, pod: str, db: bp.DatabasePlan
                        ) -> tuple[SequenceDef, ...]:
        """`db`'s sequences with their values, read after the backup's timestamp (so at least
        every value its exported rows hold: values move only in INCREMENT's direction); a
        virtual one has none."""
        found = []
        for sequence in db.sequences:
            if sequence.virtual:
                found.append(sequence)
                continue
            rows = admin.sql(pod, sequence_value_query(db.name, sequence)).rows
            value = sequence_value(sequence, rows)
            if isinstance(value, str):
                raise BackupFailed("NotExportable", f"database {json.dumps(db.name)}: {value}")
            found.append(replace(sequence, value=value))
        return tuple(found)

    @staticmethod
    def foreign_keys(admin: KwbaseAdmin, pod: str, db: bp.DatabasePlan
                     ) -> tuple[tuple[bp.ForeignKey, ...], tuple[str, ...]]:
        """The foreign keys of a relational database and what of them is left out, said in
        words (bp.read_foreign_keys); BackupFailed when they cannot be carried. A query KWDB
        refuses leaves every key out, said so, and the backup goes on: the catalogue queries
        were written from KWDB's source, not run on a real KWDB, and a backup without the
        keys, saying so, is worth more than none."""
        on_keys, on_columns = bp.foreign_keys_queries(db.name)
        try:
            keys, left_out, refused = bp.read_foreign_keys(
                db, admin.sql(pod, on_keys).rows, admin.sql(pod, on_columns).rows)
        except CommandFailed as err:
            if not _refused(err):
                raise
            return (), (f"every foreign key of database {json.dumps(db.name)} (KaiwuDB "
                        f"refused the query that reads them: {_short(err)})",)
        if refused:
            raise BackupFailed("NotExportable", refused)
        return keys, left_out

    @staticmethod
    def comments(admin: KwbaseAdmin, pod: str, db: bp.DatabasePlan) -> bp.DatabasePlan:
        """`db` with its comments and what of them is left out (bp.read_comments); a query
        KWDB refuses leaves them all out, said so, as for foreign keys."""
        on_database, on_tables = bp.comments_queries(db.name)
        try:
            comments, left_out = bp.read_comments(
                db, admin.sql(pod, on_database).rows, admin.sql(pod, on_tables).rows)
        except CommandFailed as err:
            if not _refused(err):
                raise
            comments, left_out = (), (f"every comment in database {json.dumps(db.name)} "
                                      f"(KaiwuDB refused the query that reads them: "
                                      f"{_short(err)})",)
        return replace(db, comments=comments, left_out=(*db.left_out, *left_out))

    def advance(self, p: Pass, cluster: Cluster, obj: Obj) -> None:
        """One step of a running backup: the next item, or the manifest."""
        plan: bp.Plan | None = None
        target: Target | None = None
        try:
            target = self.target(cluster, obj)
            if target.get(bp.MANIFEST_FILE) is not None:
                self.mark_completed(p, cluster, obj, json.loads(target.get(
                    bp.MANIFEST_FILE) or b"{}"), target, None)
                return
            failed = target.get(FAILED_FILE)
            if failed is not None:
                reason = json.loads(failed)
                self.fail(p, cluster, obj, reason.get("reason", "Failed"),
                          reason.get("message", ""), None, None, write_marker=False)
                return
            raw = target.get(bp.PLAN_FILE)
            if raw is None:
                raise BackupFailed("PlanMissing", f"{target.location}/{bp.PLAN_FILE} is gone: "
                                   "the target lost the backup's files")
            plan = self.read_plan(obj, raw)
            self.check_node(p, cluster, plan)
            done = {key.removeprefix(f"{bp.ITEMS_DIR}/").removesuffix(".json")
                    for key in target.list(bp.ITEMS_DIR)}
            todo = [item for item in plan.items() if item.id not in done]
            if todo:
                item = todo[0]
                outcome = self.export_item(cluster, plan, item, target)
                if isinstance(outcome, str):  # the EXPORT runs on: look again later
                    self.mark_running(p, cluster, obj, plan, target, progress=(
                        f"{len(done)}/{len(plan.items())} items; exporting {item.shown} "
                        f"({outcome})"))
                    p.requeue_in(self.settings.running_poll_s)
                    return
                target.put(f"{bp.ITEMS_DIR}/{outcome.id}.json", outcome.to_json())
                self.mark_running(p, cluster, obj, plan, target,
                                  progress=f"{len(done) + 1}/{len(plan.items())} items")
                p.requeue_in(self.settings.poll_s)
                return
            manifest = self.finish(plan, target)
        except BackupFailed as err:
            self.fail(p, cluster, obj, err.reason, err.message, plan, target)
            return
        except TargetError as err:
            self.fail(p, cluster, obj, "TargetFailed", str(err), plan, target)
            return
        self.remove_run_dir(cluster, plan)
        self.mark_completed(p, cluster, obj, manifest, target, plan)

    @staticmethod
    def read_plan(obj: Obj, raw: bytes) -> bp.Plan:
        """plan.json read back from the target, checked as hostile data: a plan of another
        backup, another layout or with names a backup cannot carry fails the backup."""
        try:
            plan = bp.Plan.from_json(raw)
        except ValueError as err:
            raise BackupFailed("PlanUnreadable", str(err)) from err
        problem = plan.problem()
        if not problem and plan.uid != str(meta(obj).get("uid")):
            problem = f"{bp.PLAN_FILE} belongs to another backup (uid {plan.uid})"
        if problem:
            raise BackupFailed("PlanUnreadable", problem)
        return plan

    def node_dir(self, plan: bp.Plan, sub: str = "") -> str:
        """A directory of this backup on its node; never anything outside its run directory
        (every path the reconciler lists, reads or removes there comes through here)."""
        run = f"{EXTERN_DIR}/{plan.run_dir}"
        path = f"{run}/{sub}" if sub else run
        if not (bp.inside(EXTERN_DIR, run) and (not sub or bp.inside(run, path))
                and "/" not in plan.run_dir):
            raise BackupFailed("UnsafePath", f"refusing to touch {path!r}: not inside the "
                               f"backup's run directory {run!r}")
        return path

    def check_node(self, p: Pass, cluster: Cluster, plan: bp.Plan) -> None:
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

    def run_export(self, admin: KwbaseAdmin, plan: bp.Plan, item: bp.Item,
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
                since = _stamp(latest.created.timestamp())
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

    def _poll(self, plan: bp.Plan, item: bp.Item, key: str) -> SqlAnswer | Running | None:
        try:
            return self.statements.poll(key)
        except ExecTimedOut as err:  # the exec ended first: KWDB's job row says what follows
            log.warning("backup %s: %s: no answer: %s", plan.backup, item.shown, err)
            return None

    def export_item(self, cluster: Cluster, plan: bp.Plan, item: bp.Item,
                    target: Target) -> bp.ItemResult | str:
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
                problem = bp.export_problem(item, answer.headers, answer.rows, answer.notices,
                                            list(sums))
                if problem:
                    raise BackupFailed("ExportFailed", problem)
            unsafe = sorted(rel for rel in sums if not bp.safe_relative(rel))
            if unsafe:
                raise BackupFailed("NotExportable", f"{item.shown}: KWDB wrote files whose names "
                                   f"are no safe relative path: {json.dumps(unsafe)[:300]}")
            files: dict[str, tuple[str, int]] = {}
            csv_records = 0
            counted = 0
            if answer is None:  # the answer was lost: the table at the backup's timestamp says
                shown = admin.sql(plan.pod, bp.count_query(item, plan.consistent_to),
                                  bulk=True)  # a big table's count takes long too
                counted = int(shown.rows[0]["count"]) if shown.rows else -1
            left_out: tuple[str, ...] = ()
            for rel, digest in sorted(sums.items()):
                data = admin.read_file(plan.pod, f"{node_dir}/{rel}")
                bad = bp.transfer_problem(f"{item.target_dir}/{rel}", digest, data)
                if bad:
                    raise BackupFailed("ChecksumMismatch", bad)
                if item.id == "settings" and rel == bp.SETTINGS_FILE:
                    # Lines KWDB wrote that a restore could not read back: left out, and
                    # named in the status (the file's checksum is then of what is kept).
                    data, left_out = bp.readable_settings(data)
                    digest = hashlib.sha256(data).hexdigest()
                target.put(f"{item.target_dir}/{rel}", data)
                files[f"{item.target_dir}/{rel}"] = (digest, len(data))
                if rel.endswith(".csv"):
                    csv_records += sum(1 for _ in csv.reader(io.StringIO(data.decode())))
            if answer is None:
                problem = bp.unanswered_export_problem(item, list(sums), csv_records, counted)
                if problem:
                    raise BackupFailed("ExportFailed", problem)
            missing = bp.missing_in_target(files, target.list(item.target_dir))
            if missing:
                raise BackupFailed("TargetIncomplete", f"{item.shown}: not in the target after "
                                   f"upload: {', '.join(missing)}")
            if self.settings.remove_node_files:
                admin.remove_dir(plan.pod, node_dir)
        except (ExecFailed, NodeUnreachable) as err:
            raise BackupFailed("NodeLost", f"{item.shown}: pod {plan.pod} (node {plan.node_id}) "
                               f"cannot be reached: {err}") from err
        except KwbaseError as err:
            raise BackupFailed("ExportFailed", f"{item.shown}: {err}") from err
        # A time-series EXPORT reports no row counts (nor does a lost answer): count the records
        # it wrote instead.
        rows = csv_records if item.kind == "ts-database" or answer is None else \
            bp.exported_rows(answer.rows)
        return bp.ItemResult(item.id, rows, files, left_out)

    def finish(self, plan: bp.Plan, target: Target) -> dict[str, Any]:
        """Check every item's files in the target, then write the manifest (last)."""
        stored = target.list("")
        results = []
        for item in plan.items():
            raw = target.get(f"{bp.ITEMS_DIR}/{item.id}.json")
            if raw is None:
                raise BackupFailed("TargetIncomplete", f"{item.shown}: its marker is gone")
            result = bp.ItemResult.from_json(raw)
            missing = bp.missing_in_target(result.files, stored)
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
            "consistentToTime": _stamp(bp.hlc_time(plan.consistent_to).timestamp()),
            "databases": databases, "files": files, "sizeBytes": size,
            "items": {r.id: json.loads(r.to_json()) for r in results},
        }
        target.put(bp.MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True).encode())
        return manifest

    def remove_run_dir(self, cluster: Cluster, plan: bp.Plan | None) -> None:
        if plan is None or not self.settings.remove_node_files:
            return
        try:
            self.admin(cluster).remove_dir(plan.pod, self.node_dir(plan))
        except BackupFailed as err:
            log.warning("backup %s: %s", plan.backup, err.message)
        except KwbaseError as err:  # the node may be the reason we failed
            log.info("backup %s: could not clean the node: %s", plan.backup, err)

    # ---- status ---------------------------------------------------------------------------
    def _patch_status(self, kind: k.Kind, namespace: str, name: str,
                      status: dict[str, Any]) -> None:
        self.metrics.writes_total.labels(verb="status", kind=kind.kind).inc()
        try:
            self.kube.patch(kind, namespace, name, {"status": status}, subresource="status")
        except ApiError as error:
            if not error.not_found:
                raise

    def mark_pending(self, p: Pass, cluster: Cluster, obj: Obj, message: str) -> None:
        status = obj.get("status") or {}
        if status.get("phase") != "pending" or status.get("message") != message:
            self._patch_status(k.KAIWU_BACKUP, cluster.namespace, str(meta(obj).get("name")),
                               {"phase": "pending", "message": message})
        p.requeue_in(self.settings.poll_s)

    def mark_running(self, p: Pass, cluster: Cluster, obj: Obj, plan: bp.Plan,
                     target: Target, progress: str = "") -> None:
        self._patch_status(k.KAIWU_BACKUP, cluster.namespace, str(meta(obj).get("name")), {
            "phase": "running", "reason": None,
            "message": f"exporting from pod {plan.pod}" + (f": {progress}" if progress else ""),
            "startedAt": (obj.get("status") or {}).get("startedAt") or _stamp(p.now),
            "consistentTo": plan.consistent_to,
            "consistentToTime": _stamp(bp.hlc_time(plan.consistent_to).timestamp()),
            "pod": plan.pod, "nodeId": plan.node_id, "location": target.location})
        p.requeue_in(self.settings.poll_s)

    def mark_completed(self, p: Pass, cluster: Cluster, obj: Obj, manifest: Mapping[str, Any],
                       target: Target, plan: bp.Plan | None) -> None:
        name = str(meta(obj).get("name"))
        uid = str(meta(obj).get("uid"))
        first = self._finished.get(uid) != "completed"
        self._finished[uid] = "completed"
        status = obj.get("status") or {}
        completed_at = status.get("completedAt") or _stamp(p.now)
        self._patch_status(k.KAIWU_BACKUP, cluster.namespace, name, {
            "phase": "completed", "reason": None,
            "message": f"{manifest.get('files')} file(s) verified in {target.location}; "
                       f"{NOT_CARRIED}{unread(manifest)}{left_out_text(manifest)}",
            "startedAt": status.get("startedAt") or completed_at,
            "completedAt": completed_at,
            "consistentTo": manifest.get("consistentTo"),
            "consistentToTime": manifest.get("consistentToTime"),
            "location": target.location, "files": manifest.get("files"),
            "sizeBytes": manifest.get("sizeBytes"), "databases": manifest.get("databases")})
        if first:
            self.metrics.backups_total.labels(result="completed").inc()
            self.metrics.backup_succeeded(cluster.namespace, cluster.name, _time(completed_at))
            p.events.append(("Normal", "BackupCompleted", (
                f"KaiwuBackup/{name}: {manifest.get('files')} file(s), "
                f"{manifest.get('sizeBytes')} bytes in {target.location}, relational tables "
                f"consistent to {manifest.get('consistentToTime')}")))

    def fail(self, p: Pass, cluster: Cluster, obj: Obj, reason: str, message: str,
             plan: bp.Plan | None, target: Target | None, *, write_marker: bool = True) -> None:
        name = str(meta(obj).get("name"))
        uid = str(meta(obj).get("uid"))
        if write_marker and target is not None:
            try:  # the world remembers the outcome too: a lagging pass never resumes it
                target.put(FAILED_FILE, json.dumps({"reason": reason,
                                                    "message": message}).encode())
            except TargetError as err:
                log.info("backup %s: failed.json not written: %s", name, err)
        self.remove_run_dir(cluster, plan)
        first = self._finished.get(uid) != "failed"
        self._finished[uid] = "failed"
        status = obj.get("status") or {}
        self._patch_status(k.KAIWU_BACKUP, cluster.namespace, name, {
            "phase": "failed", "reason": reason, "message": message,
            "startedAt": status.get("startedAt") or _stamp(p.now),
            "completedAt": _stamp(p.now)})
        if first:
            self.metrics.backups_total.labels(result="failed").inc()
            p.events.append(("Warning", "BackupFailed", f"KaiwuBackup/{name}: {reason}: "
                             f"{message}"))


def _ordinal(pod: str) -> tuple[int, str]:
    tail = pod.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else 1 << 30, pod)
