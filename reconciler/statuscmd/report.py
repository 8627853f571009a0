"""`kaiwu status`'s view of one cluster, as plain data: its conditions, version and rollout,
each pod, the operation in progress, when the node certificate expires, and its backups (the
last success, one running, the next scheduled run, failures since).

Called by reconciler.statuscmd.reading (gather) for each cluster it read; pure, so the unit tests
call cluster_report and backups_summary on plain objects.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from reconciler import status as st
from reconciler.model import Obj

# A schedule's next time this long past: its backups are not being made (the reconciler is
# down, the cluster paused, the cron unreadable), not merely a pass away.
OVERDUE_AFTER_S = 60.0


def _stamp(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def ago(seconds: float) -> str:
    """A duration as kubectl prints ages: 45s, 12m, 3h, 5d."""
    s = max(int(seconds), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size * (2 if unit != "m" else 1):
            return f"{s // size}{unit}"
    return f"{s}s"


def node_cert_expiry(secret: Obj | None) -> float | None:
    """The not-after of node.crt in a node certificate Secret (None when there is none)."""
    data = ((secret or {}).get("data") or {}).get("node.crt")
    if not data:
        return None
    try:
        cert = x509.load_pem_x509_certificate(base64.b64decode(data))
    except ValueError:
        return None
    return cert.not_valid_after_utc.timestamp()


def _pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _restarts(pod: Obj) -> int:
    return sum(int(c.get("restartCount") or 0)
               for c in (pod.get("status") or {}).get("containerStatuses") or ())


def _pod_state(pod: Obj) -> str:
    """The pod's phase, or why its container waits (CrashLoopBackOff, ContainerCreating)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for c in (pod.get("status") or {}).get("containerStatuses") or ():
        reason = ((c.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return str(reason)
    return str((pod.get("status") or {}).get("phase") or "Unknown")


def _ordinal(name: str) -> tuple[int, str]:
    head, _, tail = name.rpartition("-")
    return (int(tail), head) if tail.isdigit() else (1 << 30, name)


def cluster_report(obj: Obj, sts: Obj | None, pods: Sequence[Obj], node_secret: Obj | None,
                   now: float) -> dict[str, Any]:
    """One cluster as plain data: what -o json|yaml print and `table` formats."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ready = st.condition(status, st.READY)
    conditions = []
    for item in status.get("conditions") or ():
        since = _stamp(item.get("lastTransitionTime"))
        conditions.append({"type": item.get("type"), "status": item.get("status"),
                           "reason": item.get("reason", ""), "message": item.get("message", ""),
                           "since": item.get("lastTransitionTime"),
                           "for": ago(now - since) if since is not None else ""})

    nodes = {str(n.get("pod")): n for n in status.get("nodes") or () if n.get("pod")}
    pod_rows = []
    for pod in sorted(pods, key=lambda p: _ordinal(p["metadata"]["name"])):
        name = pod["metadata"]["name"]
        node = nodes.get(name) or {}
        pod_rows.append({
            "name": name, "node": (pod.get("spec") or {}).get("nodeName") or "",
            "nodeId": node.get("nodeId"), "liveness": node.get("state") or "",
            "ready": _pod_ready(pod), "restarts": _restarts(pod), "state": _pod_state(pod),
            "revision": (pod["metadata"].get("labels") or {}).get("controller-revision-hash",
                                                                  "")})
    # Node ids KaiwuDB still counts but no pod holds (a dead store after failover).
    held = {row["name"] for row in pod_rows}
    orphans = [{"nodeId": n.get("nodeId"), "address": n.get("address"), "state": n.get("state")}
               for n in status.get("nodes") or () if n.get("pod") not in held]

    rollout = None
    if sts is not None:
        sspec, sstatus = sts.get("spec") or {}, sts.get("status") or {}
        rolling = ((sspec.get("updateStrategy") or {}).get("rollingUpdate") or {})
        rollout = {"replicas": int(sspec.get("replicas") or 0),
                   "partition": int(rolling.get("partition") or 0),
                   "currentRevision": sstatus.get("currentRevision", ""),
                   "updateRevision": sstatus.get("updateRevision", ""),
                   "updated": int(sstatus.get("updatedReplicas") or 0),
                   "ready": int(sstatus.get("readyReplicas") or 0)}

    operation = _operation(status, spec, rollout)
    drifted = st.condition(status, st.DRIFTED)
    expiry = node_cert_expiry(node_secret)
    tls = bool((spec.get("tls") or {}).get("enabled", True))
    certificates = None
    if expiry is not None:
        certificates = {"secret": node_secret["metadata"]["name"] if node_secret else "",
                        "notAfter": datetime.fromtimestamp(expiry, UTC).strftime(
                            "%Y-%m-%dT%H:%M:%SZ"),
                        "expiresIn": ago(expiry - now) if expiry > now else "expired",
                        "days": int((expiry - now) // 86400)}
    return {
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "ready": (ready or {}).get("status") == "True",
        "reason": (ready or {}).get("reason", "NoStatus" if not status else ""),
        "message": (ready or {}).get("message", ""),
        "phase": status.get("phase", ""),
        "paused": bool(spec.get("paused")) or (meta.get("annotations") or {}).get(
            "kaiwu.inspur.com/paused") == "true",
        "version": status.get("version", ""), "specVersion": spec.get("version", ""),
        "replicas": spec.get("replicas"), "readyNodes": status.get("readyNodes", 0),
        "generation": meta.get("generation"),
        "observedGeneration": status.get("observedGeneration"),
        "conditions": conditions, "rollout": rollout, "operation": operation,
        "drift": {"status": drifted.get("status"), "reason": drifted.get("reason", ""),
                  "message": drifted.get("message", "")} if drifted else None,
        "tls": tls, "certificates": certificates,
        "pods": pod_rows, "nodesWithoutPod": orphans,
        "lastActions": [dict(a) for a in status.get("lastActions") or ()],
    }


def _operation(status: Mapping[str, Any], spec: Mapping[str, Any],
               rollout: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What is in progress, in the order the reconciler does it: failover first (it holds every
    other step back), then a scale-in, then an upgrade."""
    failures = status.get("failures") or {}
    if failures:
        return {"type": "Failover", "pods": {pod: dict(f) for pod, f in sorted(
            failures.items())}, "summary": "; ".join(
            f"{pod}: {f.get('stage', '?')}" + (f" since {f['since']}" if f.get("since") else "")
            + (f" ({f['restarts']} restarts: {f.get('lastWords', '')})"
               if f.get("stage") == "CrashLoop" else "")
            for pod, f in sorted(failures.items()))}
    op = status.get("operation") or {}
    if op.get("type") == "ScaleIn":
        node = f" node {op['nodeId']}" if op.get("nodeId") is not None else ""
        return {"type": "ScaleIn", **op, "summary":
                f"{op.get('replicas')} -> {op.get('targetReplicas')}: {op.get('phase')}"
                f"{node} ({op.get('pod')}) since {op.get('startedAt')}"}
    if rollout and (rollout["updateRevision"] and rollout["currentRevision"]
                    and rollout["updateRevision"] != rollout["currentRevision"]):
        return {"type": "Upgrade", "from": status.get("version", ""),
                "to": spec.get("version", ""), "updated": rollout["updated"],
                "replicas": rollout["replicas"], "partition": rollout["partition"],
                "summary": f"{status.get('version') or '?'} -> {spec.get('version')}: "
                f"{rollout['updated']}/{rollout['replicas']} pods updated, partition "
                f"{rollout['partition']}"}
    return None


def backups_summary(backups: Sequence[Obj], schedules: Sequence[Obj],
                    now: float, readable: bool = True) -> dict[str, Any]:
    """One cluster's backups (its KaiwuBackups and KaiwuBackupSchedules): the last success, the
    one running, the next scheduled run (overdue when its time has passed: the reconciler is
    not making them), the failures since the last success (how many, the newest three named),
    and its schedules (suspended or not). `readable` False: this user may not list them."""
    if not readable:
        return {"readable": False}

    def section(obj: Obj, key: str) -> dict[str, Any]:
        value = obj.get(key)
        return dict(value) if isinstance(value, Mapping) else {}

    def phase(obj: Obj) -> str:
        return str(section(obj, "status").get("phase") or "pending")

    def entry(obj: Obj) -> dict[str, Any]:
        status = section(obj, "status")
        return {"name": section(obj, "metadata").get("name"), "phase": phase(obj),
                "completedAt": status.get("completedAt"), "reason": status.get("reason")}

    ordered = sorted(backups, key=lambda b: str(section(b, "metadata").get(
        "creationTimestamp") or ""))
    done = [b for b in ordered if phase(b) == "completed"]
    last = done[-1] if done else None
    after = ordered[ordered.index(last) + 1:] if last is not None else ordered
    failed = [entry(b) for b in after if phase(b) == "failed"][::-1]
    running = next((entry(b) for b in reversed(ordered) if phase(b) == "running"), None)
    active = [sch for sch in schedules if not section(sch, "spec").get("suspend")]
    upcoming = sorted((str(section(sch, "status").get("nextScheduleTime")),
                       str(section(sch, "metadata").get("name"))) for sch in active
                      if section(sch, "status").get("nextScheduleTime"))
    last_entry = entry(last) if last is not None else None
    if last_entry is not None:
        since = _stamp(last_entry["completedAt"])
        last_entry["ago"] = ago(now - since) if since is not None else ""
    following = None
    if upcoming:
        at = _stamp(upcoming[0][0])
        following = {"schedule": upcoming[0][1], "at": upcoming[0][0],
                     "overdue": at is not None and at < now - OVERDUE_AFTER_S}
    return {"readable": True, "lastSuccess": last_entry, "running": running,
            "failedSince": failed[:3], "failedSinceCount": len(failed), "next": following,
            "schedules": sorted(str(section(sch, "metadata").get("name")) for sch in schedules),
            "suspended": sorted(str(section(sch, "metadata").get("name")) for sch in schedules
                                if sch not in active)}
