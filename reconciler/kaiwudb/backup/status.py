"""A KaiwuBackup's status, read and written: its phase (`phase_of`, with what this process
wrote remembered against a lagging cache), the cluster's backup under way (`running_backup`,
which scale-in, rollout and failover wait for), and the writes of each phase (pending,
running, completed, failed) with their Events and metrics, and what a completed backup says
it lacks.

Called by reconciler.kaiwudb.backup.step and its parts (schedule, export), by
reconciler.kaiwudb.backup.restore (a backup must have completed) and by
reconciler.kaiwudb.lifecycle and reconciler.kaiwudb.failover (running_backup).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from reconciler.kaiwudb.backup.plan import Plan, hlc_time
from reconciler.kaiwudb.backup.targets import Target
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.metrics import Metrics
from reconciler.model import Obj, Pass, meta
from renderer.spec import Cluster

NOT_CARRIED = (
    "not carried (a restore cannot bring them back): passwords (EXPORT USERS writes none: set "
    "them with ALTER USER ... WITH PASSWORD after a restore); comments on time-series "
    "databases and tables, and on procedures (docs/backup.md)")
"""What every completed backup says it lacks, in its status message (kwbase/pkg/sql/
export.go:76-111 lists EXPORT's options; EXPORT USERS, export.go:634-712, writes each user's
CREATE USER with its options and role memberships, never a password). Privileges on
databases, schemas and tables, foreign keys within a database and comments on a relational
database, its tables, columns and indexes are carried by the plan (database.Grant,
ForeignKey, Comment) and restored after each database's import."""


class BackupFailed(Exception):
    """A backup cannot complete; `reason` is a CamelCase word, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def time_of(text: object) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def phase_of(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def backups_of(view: CacheView, namespace: str, cluster: str) -> list[Obj]:
    return sorted((b for b in view.peek_list(k.KAIWU_BACKUP, namespace)
                   if ((b.get("spec") or {}).get("cluster") or {}).get("name") == cluster),
                  key=lambda b: (time_of(meta(b).get("creationTimestamp")),
                                 str(meta(b).get("name"))))


def running_backup(view: CacheView, namespace: str, cluster: str) -> str | None:
    """The cluster's backup under way (phase running), if any: scale-in, rollout and failover
    wait for it (reconciler.kaiwudb.lifecycle and failover)."""
    for obj in backups_of(view, namespace, cluster):
        if phase_of(obj) == "running":
            return str(meta(obj).get("name"))
    return None


class BackupStatus:
    """The status writes of every phase of a backup (see the module docstring)."""

    def __init__(self, kube: Kube, metrics: Metrics, poll_s: float) -> None:
        self.kube = kube
        self.metrics = metrics
        self.poll_s = poll_s
        # Phases this process wrote, by backup uid: the cache may show an older one for a
        # moment after our own status write; a finished backup never runs again.
        self._finished: dict[str, str] = {}

    def phase(self, obj: Obj) -> str:
        return self._finished.get(str(meta(obj).get("uid")), phase_of(obj))

    def patch(self, kind: k.Kind, namespace: str, name: str, status: dict[str, Any]) -> None:
        try:
            self.kube.patch(kind, namespace, name, {"status": status}, subresource="status")
        except ApiError as error:
            if not error.not_found:
                raise

    def mark_pending(self, p: Pass, cluster: Cluster, obj: Obj, message: str) -> None:
        status = obj.get("status") or {}
        if status.get("phase") != "pending" or status.get("message") != message:
            self.patch(k.KAIWU_BACKUP, cluster.namespace, str(meta(obj).get("name")),
                       {"phase": "pending", "message": message})
        p.requeue_in(self.poll_s)

    def mark_running(self, p: Pass, cluster: Cluster, obj: Obj, plan: Plan,
                     target: Target, progress: str = "") -> None:
        self.patch(k.KAIWU_BACKUP, cluster.namespace, str(meta(obj).get("name")), {
            "phase": "running", "reason": None,
            "message": f"exporting from pod {plan.pod}" + (f": {progress}" if progress else ""),
            "startedAt": (obj.get("status") or {}).get("startedAt") or stamp(p.now),
            "consistentTo": plan.consistent_to,
            "consistentToTime": stamp(hlc_time(plan.consistent_to).timestamp()),
            "pod": plan.pod, "nodeId": plan.node_id, "location": target.location})
        p.requeue_in(self.poll_s)

    def mark_completed(self, p: Pass, cluster: Cluster, obj: Obj, manifest: Mapping[str, Any],
                       target: Target, plan: Plan | None) -> None:
        name = str(meta(obj).get("name"))
        uid = str(meta(obj).get("uid"))
        first = self._finished.get(uid) != "completed"
        self._finished[uid] = "completed"
        status = obj.get("status") or {}
        completed_at = status.get("completedAt") or stamp(p.now)
        self.patch(k.KAIWU_BACKUP, cluster.namespace, name, {
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
            self.metrics.backup_succeeded(cluster.namespace, cluster.name, time_of(completed_at))
            p.events.append(("Normal", "BackupCompleted", (
                f"KaiwuBackup/{name}: {manifest.get('files')} file(s), "
                f"{manifest.get('sizeBytes')} bytes in {target.location}, relational tables "
                f"consistent to {manifest.get('consistentToTime')}")))

    def mark_failed(self, p: Pass, cluster: Cluster, obj: Obj, reason: str, message: str
                    ) -> None:
        name = str(meta(obj).get("name"))
        uid = str(meta(obj).get("uid"))
        first = self._finished.get(uid) != "failed"
        self._finished[uid] = "failed"
        status = obj.get("status") or {}
        self.patch(k.KAIWU_BACKUP, cluster.namespace, name, {
            "phase": "failed", "reason": reason, "message": message,
            "startedAt": status.get("startedAt") or stamp(p.now),
            "completedAt": stamp(p.now)})
        if first:
            self.metrics.backups_total.labels(result="failed").inc()
            p.events.append(("Warning", "BackupFailed", f"KaiwuBackup/{name}: {reason}: "
                             f"{message}"))
