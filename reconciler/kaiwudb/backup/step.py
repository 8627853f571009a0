"""The backup step of a cluster's pass: schedules make KaiwuBackups, retention deletes old ones,
and the one running backup advances by one export per pass.

The Controller runs `Backups.run` after "failover" (reconciler.controller.controller); the
watch caches map each KaiwuBackup and KaiwuBackupSchedule to the cluster its spec.cluster names,
so a new backup or schedule starts a pass. This module holds the order of the phases; each
has its own: the schedules and retention (reconciler.kaiwudb.backup.schedule), the start and
its plan (reconciler.kaiwudb.backup.start, reconciler.kaiwudb.backup.plan), one item's export
and the manifest (reconciler.kaiwudb.backup.export), the status writes
(reconciler.kaiwudb.backup.status). Files move through reconciler.kaiwudb.backup.targets;
KaiwuDB is reached through the admin adapter (reconciler.kaiwudb.kwbase: exec into one pod).

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

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.kaiwudb.backup.export import Exporter, write_manifest
from reconciler.kaiwudb.backup.plan import ITEMS_DIR, MANIFEST_FILE, PLAN_FILE, Plan
from reconciler.kaiwudb.backup.schedule import Schedules
from reconciler.kaiwudb.backup.start import Planner, start_blocker
from reconciler.kaiwudb.backup.status import BackupFailed, BackupStatus, backups_of
from reconciler.kaiwudb.backup.targets import Target, TargetError, target_for
from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.statements import BulkStatements
from reconciler.kube import kinds as k
from reconciler.model import Obj, Pass, meta
from reconciler.settings import Settings
from renderer.spec import Cluster

log = logging.getLogger(__name__)

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

    @classmethod
    def of(cls, settings: Settings) -> BackupSettings:
        return cls(poll_s=settings.backup_poll_s, running_poll_s=settings.backup_running_poll_s,
                   volumes_dir=settings.backup_volumes_dir,
                   remove_node_files=settings.backup_remove_node_files)


class Backups:
    """The "backup" step (see the module docstring)."""

    name = "backup"
    always = False

    def __init__(self, ctx: StepContext, s3_factory: Callable[..., Any] | None = None,
                 statements: BulkStatements | None = None) -> None:
        self.ctx = ctx
        self.kube = kube = ctx.kube
        self.view = view = ctx.view
        self.metrics = metrics = ctx.metrics
        self.settings = settings = BackupSettings.of(ctx.settings)
        self.admin = admin = ctx.admin
        self.statements = statements or BulkStatements()
        self._s3_clients: dict[tuple[Any, ...], Any] = {}
        self._s3_make = s3_factory
        self.status = BackupStatus(kube, metrics, settings.poll_s)
        self.schedules = Schedules(kube, metrics, self.status, self.target)
        self.planner = Planner(view, admin)
        self.exporter = Exporter(view, admin, self.statements, settings.remove_node_files)

    def wanted(self, p: Pass) -> bool:
        # A cluster not yet initialised has nothing to back up: its backups wait as pending.
        return p.cluster is not None and not p.paused and not p.halted and p.kaiwu.initialized

    def run(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        ns = cluster.namespace
        schedules = [s for s in self.view.peek_list(k.KAIWU_BACKUP_SCHEDULE, ns)
                     if ((s.get("spec") or {}).get("cluster") or {}).get("name") == cluster.name]
        backups = backups_of(self.view, ns, cluster.name)
        for schedule in schedules:
            self.schedules.schedule(p, cluster, schedule, backups)
            self.schedules.retain(p, cluster, schedule, backups)
        self.schedules.report_last_success(cluster, backups)
        live = [b for b in backups if self.status.phase(b) not in TERMINAL]
        running = [b for b in live if self.status.phase(b) == "running"]
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
            raw = target.get(PLAN_FILE)
            if raw is not None:  # started before (our status write was lost or is late)
                self.status.mark_running(p, cluster, obj, self.read_plan(obj, raw), target)
                return
            blocker = start_blocker(self.planner.cluster_state(p, cluster))
            if blocker:
                self.status.mark_pending(p, cluster, obj, f"waiting: {blocker}")
                return
            plan = self.planner.make_plan(p, cluster, obj)
            target.put(PLAN_FILE, plan.to_json())  # the decision, in the world, first
        except BackupFailed as err:
            self.fail(p, cluster, obj, err.reason, err.message, None, None)
            return
        except TargetError as err:
            self.fail(p, cluster, obj, "TargetFailed", str(err), None, None)
            return
        p.events.append(("Normal", "BackupStarted", (
            f"KaiwuBackup/{name}: exporting {len(plan.items())} item(s) from pod {plan.pod} "
            f"(node {plan.node_id}), relational tables as of {plan.consistent_to}")))
        self.ctx.count("backup-start")
        self.status.mark_running(p, cluster, obj, plan, target)

    def advance(self, p: Pass, cluster: Cluster, obj: Obj) -> None:
        """One step of a running backup: the next item, or the manifest."""
        plan: Plan | None = None
        target: Target | None = None
        try:
            target = self.target(cluster, obj)
            if target.get(MANIFEST_FILE) is not None:
                self.status.mark_completed(p, cluster, obj, json.loads(target.get(
                    MANIFEST_FILE) or b"{}"), target, None)
                return
            failed = target.get(FAILED_FILE)
            if failed is not None:
                reason = json.loads(failed)
                self.fail(p, cluster, obj, reason.get("reason", "Failed"),
                          reason.get("message", ""), None, None, write_marker=False)
                return
            raw = target.get(PLAN_FILE)
            if raw is None:
                raise BackupFailed("PlanMissing", f"{target.location}/{PLAN_FILE} is gone: "
                                   "the target lost the backup's files")
            plan = self.read_plan(obj, raw)
            self.exporter.check_node(p, cluster, plan)
            done = {key.removeprefix(f"{ITEMS_DIR}/").removesuffix(".json")
                    for key in target.list(ITEMS_DIR)}
            todo = [item for item in plan.items() if item.id not in done]
            if todo:
                item = todo[0]
                outcome = self.exporter.export_item(cluster, plan, item, target)
                if isinstance(outcome, str):  # the EXPORT runs on: look again later
                    self.status.mark_running(p, cluster, obj, plan, target, progress=(
                        f"{len(done)}/{len(plan.items())} items; exporting {item.shown} "
                        f"({outcome})"))
                    p.requeue_in(self.settings.running_poll_s)
                    return
                target.put(f"{ITEMS_DIR}/{outcome.id}.json", outcome.to_json())
                self.status.mark_running(p, cluster, obj, plan, target,
                                         progress=f"{len(done) + 1}/{len(plan.items())} items")
                p.requeue_in(self.settings.poll_s)
                return
            manifest = write_manifest(plan, target)
        except BackupFailed as err:
            self.fail(p, cluster, obj, err.reason, err.message, plan, target)
            return
        except TargetError as err:
            self.fail(p, cluster, obj, "TargetFailed", str(err), plan, target)
            return
        self.exporter.remove_run_dir(cluster, plan)
        self.status.mark_completed(p, cluster, obj, manifest, target, plan)

    @staticmethod
    def read_plan(obj: Obj, raw: bytes) -> Plan:
        """plan.json read back from the target, checked as hostile data: a plan of another
        backup, another layout or with names a backup cannot carry fails the backup."""
        try:
            plan = Plan.from_json(raw)
        except ValueError as err:
            raise BackupFailed("PlanUnreadable", str(err)) from err
        problem = plan.problem()
        if not problem and plan.uid != str(meta(obj).get("uid")):
            problem = f"{PLAN_FILE} belongs to another backup (uid {plan.uid})"
        if problem:
            raise BackupFailed("PlanUnreadable", problem)
        return plan

    def fail(self, p: Pass, cluster: Cluster, obj: Obj, reason: str, message: str,
             plan: Plan | None, target: Target | None, *, write_marker: bool = True) -> None:
        """The backup marked failed; failed.json written first (the world remembers the outcome
        too: a lagging pass never resumes it) and the node cleaned."""
        if write_marker and target is not None:
            try:
                target.put(FAILED_FILE, json.dumps({"reason": reason,
                                                    "message": message}).encode())
            except TargetError as err:
                log.info("backup %s: failed.json not written: %s", meta(obj).get("name"), err)
        self.exporter.remove_run_dir(cluster, plan)
        self.status.mark_failed(p, cluster, obj, reason, message)
