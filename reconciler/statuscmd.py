"""`kaiwu status`: what each KaiwuCluster is doing, for a person on call (or a script).

`reconciler.cli.main` hands `kaiwu status ...` here. It reads the API like kubectl (a kubeconfig
and context, or the pod's service account in a pod) through `reconciler.kube.client.Kube`, and
prints per cluster: conditions with reasons and since when, the version and the StatefulSet's
rollout (partition, revisions), each pod (Kubernetes node, KaiwuDB node id from status.nodes,
liveness, ready, restarts), the operation in progress (a scale-in from status.operation, an
upgrade from the rollout, a failover from status.failures), the drift state (the Drifted
condition), when the node certificate expires (read from its Secret) and the last actions.

Cost: one list per kind (KaiwuClusters, StatefulSets, Pods, Secrets, KaiwuBackups,
KaiwuBackupSchedules) per namespace shown, or one cluster-wide list each with -A, never one
request per pod; everything else is computed. So 50 clusters cost six requests. Per cluster it
also shows its backups: the last success, one running, the next scheduled run, failures since
the last success (an install without the backup CRDs shows none).

`gather` builds plain data (what `-o json|yaml` print), `table` formats it for people; both are
pure, so the unit tests need no API. Exit codes: 0 every cluster shown is Ready, 1 some are not,
2 an error (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn, TextIO

import urllib3
import yaml
from cryptography import x509

from reconciler import status as st
from reconciler.kube import kinds as kk
from reconciler.kube.client import (
    ApiError,
    ConnectionSetupError,
    Kube,
    add_connection_flags,
    check_reachable,
    context_namespace,
    load_api_client,
)
from reconciler.model import Obj
from renderer.builders import INSTANCE_LABEL, MANAGED_SELECTOR

EXIT_READY, EXIT_NOT_READY, EXIT_ERROR = 0, 1, 2
WATCH_INTERVAL_S = 3.0
# A schedule's next time this long past: its backups are not being made (the reconciler is
# down, the cluster paused, the cron unreadable), not merely a pass away.
OVERDUE_AFTER_S = 60.0
FIELD_MANAGER = "kaiwu-status"  # never writes; named so an audit log tells its reads apart


class UsageError(Exception):
    """Bad flags: one line naming the flag and the fix."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage block and exits; the CLI's rule is one line, exit 2.
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see kaiwu status --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kaiwu status", description="Show what each KaiwuCluster is doing. "
                "Exit 0: every cluster shown is Ready; 1: some are not; 2: error.")
    p.add_argument("cluster", nargs="?", help="one cluster's name (default: every cluster)")
    p.add_argument("-A", "--all-namespaces", action="store_true",
                   help="clusters in every namespace")
    p.add_argument("-o", "--output", default="table", choices=("table", "json", "yaml"))
    p.add_argument("--watch", action="store_true",
                   help=f"redraw every {WATCH_INTERVAL_S:g} s until Ctrl-C")
    add_connection_flags(p)
    return p


# ---- reading the API -------------------------------------------------------------------------

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


def gather(kube: Kube, namespace: str | None, name: str | None,
           now: float | None = None) -> list[dict[str, Any]]:
    """Every cluster asked for, as `cluster_report`s with their `backups_summary`. `namespace`
    None: every namespace. Six lists at most (the kinds below), however many clusters and pods
    there are."""
    now = time.time() if now is None else now
    if name is not None:
        assert namespace is not None
        one = kube.get(kk.KAIWU_CLUSTER, namespace, name)
        if one is None:
            raise LookupError(f"KaiwuCluster {namespace}/{name} not found (check the name, "
                              "or the namespace with -n)")
        clusters = [one]
    else:
        clusters, _ = kube.list_objects(kk.KAIWU_CLUSTER, namespace)
    if not clusters:
        return []
    selector = MANAGED_SELECTOR
    if name is not None:
        selector += f",{INSTANCE_LABEL}={name}"

    def by_cluster(kind: kk.Kind) -> dict[tuple[str, str], list[Obj]]:
        found: dict[tuple[str, str], list[Obj]] = {}
        try:
            items, _ = kube.list_objects(kind, namespace, selector)
        except ApiError as error:
            if not error.forbidden:
                raise
            items = []  # e.g. no right to read Secrets: that part is left out, not fatal
        for item in items:
            m = item.get("metadata") or {}
            owner = (m.get("labels") or {}).get(INSTANCE_LABEL)
            if owner:
                found.setdefault((m.get("namespace", ""), owner), []).append(item)
        return found

    unreadable: list[str] = []

    def backup_objects(kind: kk.Kind) -> dict[tuple[str, str], list[Obj]]:
        """KaiwuBackups or schedules by the cluster their spec names (no label selects them)."""
        found: dict[tuple[str, str], list[Obj]] = {}
        try:
            items, _ = kube.list_objects(kind, namespace)
        except ApiError as error:
            if error.forbidden:
                unreadable.append(kind.plural)  # said, never shown as "no backups"
            elif not error.not_found:  # the backup CRDs not installed: no backups
                raise
            items = []
        for item in items:
            spec = item.get("spec")
            owner = ((spec.get("cluster") if isinstance(spec, Mapping) else None) or {})
            owner_name = owner.get("name") if isinstance(owner, Mapping) else None
            if owner_name and (name is None or owner_name == name):
                key = ((item.get("metadata") or {}).get("namespace", ""), str(owner_name))
                found.setdefault(key, []).append(item)
        return found

    sets, pods, secrets = (by_cluster(kind) for kind in (kk.STATEFUL_SET, kk.POD, kk.SECRET))
    backups, schedules = (backup_objects(kind) for kind in (kk.KAIWU_BACKUP,
                                                            kk.KAIWU_BACKUP_SCHEDULE))
    reports = []
    for obj in sorted(clusters, key=lambda o: (o["metadata"].get("namespace", ""),
                                               o["metadata"]["name"])):
        m = obj["metadata"]
        key = (m.get("namespace", ""), m["name"])
        sts = next((s for s in sets.get(key, ()) if s["metadata"]["name"] == m["name"]), None)
        wanted = ((obj.get("spec") or {}).get("tls") or {}).get("nodeSecretName") \
            or f"{m['name']}-node-certs"
        secret = next((s for s in secrets.get(key, ()) if s["metadata"]["name"] == wanted), None)
        report = cluster_report(obj, sts, pods.get(key, []), secret, now)
        report["backups"] = backups_summary(backups.get(key, []), schedules.get(key, []), now,
                                            readable=not unreadable)
        reports.append(report)
    return reports


# ---- formatting ------------------------------------------------------------------------------

GREEN, RED, YELLOW, BOLD, RESET = "\033[32m", "\033[31m", "\033[33m", "\033[1m", "\033[0m"


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def _rows(header: Sequence[str], rows: Iterable[Sequence[str]], indent: str,
          paint: Callable[[int, Sequence[str], str], str]) -> list[str]:
    """Aligned columns; `paint(column, row, padded)` may colour a padded cell (`row`: the
    row's raw cells), so colour codes never count towards the widths."""
    rows = [list(header)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [cell.ljust(widths[i]) if i < len(row) - 1 else cell
                 for i, cell in enumerate(row)]
        if n > 0:
            cells = [paint(i, row, cells[i]) for i in range(len(cells))]
        lines.append(indent + "  ".join(cells).rstrip())
    return lines


def table(reports: Sequence[Mapping[str, Any]], colour: bool = False) -> str:
    """The reports as aligned text for people (colour: ANSI colours on the status words)."""
    def c(code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if colour else text

    def status_colour(raw: str, padded: str) -> str:
        if raw in ("True", "live", "yes"):
            return c(GREEN, padded)
        if raw in ("False", "not-live", "no", "CrashLoopBackOff", "Error"):
            return c(RED, padded)
        if raw in ("Unknown", "decommissioning", "Pending"):
            return c(YELLOW, padded)
        return padded

    def condition_colour(row: Sequence[str], padded: str) -> str:
        # Ready is good when True; Reconciling, Stalled and Drifted (kstatus's abnormal-true
        # conditions) when False: a healthy cluster's condition table is all green.
        kind, status = row[0], row[1]
        if kind in (st.RECONCILING, st.STALLED, st.DRIFTED) and status in ("True", "False"):
            if status == "False":
                return c(GREEN, padded)
            return c(YELLOW if kind == st.RECONCILING else RED, padded)
        return status_colour(status, padded)

    if not reports:
        return "No KaiwuClusters found.\n"
    out: list[str] = []
    for r in reports:
        head = f"{r['namespace']}/{r['name']}"
        word = "Ready" if r["ready"] else f"NotReady ({r['reason'] or 'no status yet'})"
        version = r["version"] or "-"
        if r["specVersion"] and r["specVersion"] != r["version"]:
            version += f" (spec {r['specVersion']})"
        out.append(f"{c(BOLD, head)}  {c(GREEN if r['ready'] else RED, word)}  "
                   f"nodes {r['readyNodes']}/{r['replicas']}  version {version}"
                   + (f"  phase {r['phase']}" if r["phase"] else "")
                   + (f"  {c(YELLOW, 'PAUSED')}" if r["paused"] else ""))
        if r["message"] and not r["ready"]:
            out.append(f"  {r['message']}")
        if r["conditions"]:
            out += _rows(("CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE"),
                         ((x["type"] or "", x["status"] or "", x["reason"],
                           f"{x['for']} ago" if x["for"] else "-", st.one_line(x["message"]))
                          for x in r["conditions"]), "  ",
                         lambda i, row, padded: condition_colour(row, padded) if i == 1
                         else padded)
        op = r["operation"]
        out.append("  operation: " + (c(YELLOW, f"{op['type']} {op['summary']}") if op
                                      else "none"))
        if r.get("backups"):
            out.append("  backups: " + _backups_line(r["backups"], c))
        ro = r["rollout"]
        if ro:
            out.append(f"  rollout: {ro['updated']}/{ro['replicas']} updated, partition "
                       f"{ro['partition']}, revision {ro['updateRevision'] or '-'}"
                       + ("" if ro["updateRevision"] == ro["currentRevision"]
                          else f" (current {ro['currentRevision'] or '-'})"))
        else:
            out.append("  rollout: no StatefulSet yet")
        d = r["drift"]
        out.append("  drift: " + (f"{d['reason']}" + (f" ({st.one_line(d['message'], 100)})"
                                                        if d["status"] == "True" else "")
                                  if d else "not reported yet"))
        cert = r["certificates"]
        if cert:
            text = f"node certificate ({cert['secret']}) expires {cert['notAfter']}"
            text += f" (in {cert['expiresIn']})" if cert["expiresIn"] != "expired" \
                else " (EXPIRED)"
            out.append("  certificates: " + (c(RED, text) if cert["days"] < 30 else text))
        else:
            out.append("  certificates: " + ("none found" if r["tls"] else "TLS off"))
        if r["pods"]:
            out += _rows(("POD", "K8S NODE", "KWDB ID", "LIVENESS", "READY", "RESTARTS",
                          "STATE"),
                         ((p["name"], p["node"] or "-",
                           str(p["nodeId"]) if p["nodeId"] is not None else "-",
                           p["liveness"] or "-", "yes" if p["ready"] else "no",
                           str(p["restarts"]), p["state"]) for p in r["pods"]), "  ",
                         lambda i, row, padded: status_colour(row[i], padded)
                         if i in (3, 4, 6) else padded)
        else:
            out.append("  pods: none")
        for n in r["nodesWithoutPod"]:
            out.append(f"  kwdb node {n['nodeId']} ({n['address']}): {n['state']}, no pod")
        if r["lastActions"]:
            out.append("  last actions:")
            out += _rows(("TIME", "ACTION", "TARGET", "MESSAGE"),
                         ((a.get("time", ""), a.get("action", ""), a.get("target", ""),
                           st.one_line(a.get("message", ""))) for a in r["lastActions"][:5]),
                         "    ", lambda i, row, padded: padded)
        out.append("")
    return "\n".join(out)


def _backups_line(b: Mapping[str, Any], c: Callable[[str, str], str]) -> str:
    if not b["readable"]:
        return c(YELLOW, "not readable (you may not list kaiwubackups or kaiwubackupschedules)")
    last = b["lastSuccess"]
    if last:
        ago_text = f" ({last['ago']} ago)" if last.get("ago") else ""
        parts = [f"last {st.one_line(last['name'], 60)}{ago_text}"]
    else:
        parts = [c(YELLOW, "none completed")]
    if b["running"]:
        parts.append(f"running {st.one_line(str(b['running']['name']), 60)}")
    nxt = b["next"]
    if nxt and nxt["overdue"]:
        parts.append(c(RED, f"next was due {nxt['at']} ({st.one_line(nxt['schedule'], 60)}): "
                        "overdue, no backups are being made"))
    elif nxt:
        parts.append(f"next {nxt['at']} ({st.one_line(nxt['schedule'], 60)})")
    elif b["schedules"] and len(b["suspended"]) == len(b["schedules"]):
        parts.append(c(YELLOW, "every schedule suspended"))
    elif b["schedules"]:
        parts.append("schedule not yet seen by the reconciler")
    else:
        parts.append("no schedule")
    if b["failedSinceCount"]:
        parts.append(c(RED, f"{b['failedSinceCount']} failed since: " + ", ".join(
            f"{st.one_line(str(f['name']), 60)} ({st.one_line(str(f['reason'] or 'failed'), 40)})"
            for f in b["failedSince"]) + (", ..." if b["failedSinceCount"] > 3 else "")))
    return "; ".join(parts)


def render(reports: Sequence[Mapping[str, Any]], output: str, colour: bool) -> str:
    if output == "json":
        return json.dumps({"clusters": list(reports)}, indent=2, sort_keys=True) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump({"clusters": [dict(r) for r in reports]}, sort_keys=True))
    return table(reports, colour)


def exit_code(reports: Sequence[Mapping[str, Any]]) -> int:
    return EXIT_READY if all(r["ready"] for r in reports) else EXIT_NOT_READY


# ---- the command -----------------------------------------------------------------------------

def main(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None,
         sleep: Callable[[float], None] = time.sleep) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = parser().parse_args(list(argv))
        if args.all_namespaces and args.cluster:
            raise UsageError("a cluster name needs one namespace: drop -A or the name")
        if args.all_namespaces and args.namespace:
            raise UsageError("-A and -n exclude each other: drop one")
        api = load_api_client(args.kubeconfig, args.context)
        check_reachable(api, 10.0)
    except UsageError as error:
        print(f"kaiwu status: {error}", file=err)
        return EXIT_ERROR
    except ConnectionSetupError as error:
        print(f"kaiwu status: {error}", file=err)
        return EXIT_ERROR
    kube = Kube(api, FIELD_MANAGER, timeout=15.0)
    namespace = None if args.all_namespaces else context_namespace(
        args.namespace, args.kubeconfig, args.context)
    colour = args.output == "table" and use_colour(out)
    code = EXIT_ERROR
    try:
        while True:
            try:
                reports = gather(kube, namespace, args.cluster)
            except ApiError as error:
                if error.not_found:
                    print("kaiwu status: the KaiwuCluster CRD is not installed here (kaiwu "
                          "install | kubectl apply -f -, or check --context)", file=err)
                else:
                    print(f"kaiwu status: reading the API failed: {error}", file=err)
                return EXIT_ERROR
            except (urllib3.exceptions.HTTPError, OSError) as error:
                print(f"kaiwu status: lost the API server: {' '.join(str(error).split())} "
                      "(check that it is running, and --context)", file=err)
                return EXIT_ERROR
            except LookupError as error:
                print(f"kaiwu status: {error.args[0]}", file=err)
                return EXIT_ERROR
            text = render(reports, args.output, colour)
            code = exit_code(reports)
            if args.watch and out.isatty():
                out.write("\033[H\033[2J")  # redraw in place, as `watch` does
            if args.watch and args.output == "table":
                text = time.strftime("%Y-%m-%d %H:%M:%S  ") + "(Ctrl-C to stop)\n" + text
            out.write(text)
            out.flush()
            if not args.watch:
                return code
            sleep(WATCH_INTERVAL_S)
    except KeyboardInterrupt:
        # Ctrl-C is how --watch ends: exit with the last view's code, no traceback.
        return code
