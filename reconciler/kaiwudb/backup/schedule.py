"""KaiwuBackupSchedule's decisions: when a backup is due (the latest cron slot only, as a
CronJob without a deadline), its name, and which old backups retention deletes.

`Schedules` is that part of the backup step's pass: it makes the due backup, writes the
schedule's status and deletes what retention names (files first, then the object).

Called by reconciler.kaiwudb.backup.step, for every schedule of the cluster, each pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from reconciler.kaiwudb.backup.status import BackupFailed, BackupStatus, phase_of, stamp, time_of
from reconciler.kaiwudb.backup.targets import Target, TargetError
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError, Kube
from reconciler.metrics import Metrics
from reconciler.model import Obj, Pass, meta
from renderer.cron import cron, cron_problem
from renderer.spec import Cluster


def latest_slot(expr: str, now: float) -> float:
    """The latest time at or before `now` the schedule fires."""
    it = cron(expr, now + 1e-3)
    return float(it.get_prev(float))


def next_slot(expr: str, now: float) -> float:
    return float(cron(expr, now).get_next(float))


def due_slot(expr: str, created: float, now: float, immediate: bool,
             existing_slots: Sequence[float]) -> float | None:
    """The slot a new backup is due for, or None. Only the latest slot counts (missed ones
    while the reconciler was away are not caught up, as a CronJob without a deadline). An
    immediate schedule backs up at its creation time once."""
    if immediate and not existing_slots:
        return created
    slot = latest_slot(expr, now)
    if slot < created or any(abs(s - slot) < 0.5 for s in existing_slots) or \
            any(s > slot for s in existing_slots):
        return None
    return slot


def slot_name(schedule: str, slot: float) -> str:
    return f"{schedule}-{datetime.fromtimestamp(slot, UTC).strftime('%Y%m%d%H%M%S')}"


_AGE = re.compile(r"^(\d+)([smhd])$")


def age_seconds(text: str) -> float:
    m = _AGE.match(text)
    if m is None:
        raise ValueError(f"retention.maxAge {text!r}: expected a number and s, m, h or d")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@dataclass(frozen=True)
class BackupView:
    name: str
    phase: str  # pending, running, completed, failed ("" = not yet seen)
    created: float


def retention_victims(backups: Sequence[BackupView], keep: int, max_age_s: float | None,
                      now: float) -> list[str]:
    """Names of a schedule's backups retention deletes: completed ones beyond the newest
    `keep` or older than max_age_s, failed ones beyond the newest `keep`. The newest completed
    backup is never deleted, whatever the settings; running and pending ones never are."""
    completed = sorted((b for b in backups if b.phase == "completed"),
                       key=lambda b: (b.created, b.name), reverse=True)
    failed = sorted((b for b in backups if b.phase == "failed"),
                    key=lambda b: (b.created, b.name), reverse=True)
    keep = max(keep, 1)
    victims = [b.name for b in completed[keep:]]
    if max_age_s is not None:
        victims += [b.name for b in completed[1:keep] if now - b.created > max_age_s]
    victims += [b.name for b in failed[keep:]]
    return sorted(set(victims))


SLOT_SLACK_S = 86400.0


def _slot(text: object) -> float | None:
    """A backup's slot annotation as a time; None when it is none (hostile or damaged)."""
    try:
        return time_of(text) if text else None
    except (ValueError, OverflowError):
        return None


class Schedules:
    """The schedules' part of the backup step: each KaiwuBackupSchedule makes the backup of its
    latest slot when it is due, and its retention deletes old ones (files first, then the
    object)."""

    def __init__(self, kube: Kube, metrics: Metrics, status: BackupStatus,
                 target: Callable[[Cluster, Obj], Target]) -> None:
        self.kube = kube
        self.metrics = metrics
        self.status = status
        self.target = target

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
        created = time_of(meta(schedule).get("creationTimestamp"))
        # Only a slot between the schedule's creation and tomorrow is one it made: a slot in
        # year 9999 would otherwise stop it for good, one before year 1 break its status.
        slots = [slot for b in mine
                 if (slot := _slot((meta(b).get("annotations") or {}).get(k.SLOT_ANNOTATION)))
                 is not None and created - SLOT_SLACK_S <= slot <= p.now + SLOT_SLACK_S]
        try:
            due = None if spec.get("suspend") else due_slot(
                expr, created, p.now, bool(spec.get("immediate")), slots)
            upcoming = next_slot(expr, p.now)
        except ValueError as err:  # croniter's: a time it cannot find from here
            p.events.append(("Warning", "BackupScheduleInvalid",
                             f"KaiwuBackupSchedule/{name}: spec.schedule {expr!r}: {err}"))
            return
        if due is not None:
            self.create_backup(p, cluster, schedule, due)
        completed = [b for b in mine if self.status.phase(b) == "completed"]
        last = max(slots + ([due] if due is not None else []), default=None)
        status = {
            "lastScheduleTime": stamp(last) if last is not None else None,
            "nextScheduleTime": None if spec.get("suspend") else stamp(upcoming),
            "lastSuccessfulBackup": str(meta(completed[-1]).get("name")) if completed else None,
        }
        if status != {key: (schedule.get("status") or {}).get(key) for key in status}:
            self.status.patch(k.KAIWU_BACKUP_SCHEDULE, cluster.namespace, name, status)
        if not spec.get("suspend"):
            p.requeue_in(max(upcoming - p.now, 0.05))

    def create_backup(self, p: Pass, cluster: Cluster, schedule: Obj, slot: float) -> None:
        spec = schedule.get("spec") or {}
        template = spec.get("template") or {}
        name = slot_name(str(meta(schedule).get("name")), slot)
        body: Obj = {
            "apiVersion": k.KAIWU_BACKUP.api_version, "kind": k.KAIWU_BACKUP.kind,
            "metadata": {"name": name, "namespace": cluster.namespace,
                         "labels": {k.SCHEDULE_LABEL: str(meta(schedule).get("name"))},
                         "annotations": {k.SLOT_ANNOTATION: stamp(slot)}},
            "spec": {"cluster": {"name": cluster.name},
                     "target": template.get("target") or {},
                     **({"databases": template["databases"]} if template.get("databases")
                        else {})},
        }
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
            max_age = age_seconds(retention["maxAge"]) if retention.get("maxAge") else None
        except ValueError as err:
            p.events.append(("Warning", "BackupScheduleInvalid", f"KaiwuBackupSchedule/{name}: "
                             f"{err}"))
            return
        views = [BackupView(n, self.status.phase(b), time_of(meta(b).get("creationTimestamp")))
                 for n, b in mine.items()]
        for victim in retention_victims(views, int(retention.get("keep") or 7), max_age,
                                           p.now):
            obj = mine[victim]
            try:
                self.target(cluster, obj).delete("")
            except (TargetError, BackupFailed) as err:
                p.events.append(("Warning", "BackupRetentionFailed",
                                 f"KaiwuBackup/{victim}: files not deleted: {err}"))
                continue
            self.kube.delete(k.KAIWU_BACKUP, cluster.namespace, victim,
                             uid=str(meta(obj).get("uid")))
            p.events.append(("Normal", "BackupDeleted", f"KaiwuBackup/{victim}: removed by "
                             f"the retention of schedule {name} (files and object)"))

    def report_last_success(self, cluster: Cluster, backups: list[Obj]) -> None:
        done = [time_of((b.get("status") or {}).get("completedAt")) for b in backups
                if phase_of(b) == "completed"]
        if done:
            self.metrics.backup_succeeded(cluster.namespace, cluster.name, max(done))
