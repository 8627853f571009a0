"""Failover in the reconciler's pass: pods on lost Kubernetes nodes are replaced.

The Controller (reconciler.controller) runs `Failover.run` as the pipeline step "failover",
after "lifecycle" (whose node probe it reads from the pass) and before "report". Reads come from
the cache view (pods, claims, Nodes); KaiwuDB is reached through reconciler.kwbase.

A pod counts as failing once its Kubernetes node's Ready condition is Unknown or False (or the
Node is gone). When that started is kept in `status.failures` (keyed by pod), so a restarted
reconciler does not restart the clock; it is the Node condition's lastTransitionTime when there
is one. After `spec.failover.nodeLostTimeout` the replacement goes through stages, one cluster
action at a time, each with an Event and `lifecycle_actions_total{action}`:

  NodeLost        -> force-delete the pod (grace 0, uid precondition): no kubelet will ever
                     confirm its deletion, so the StatefulSet would never recreate it.
  PodDeleted      -> the StatefulSet recreates the pod; if it cannot schedule because its claim's
                     volume is pinned to the lost node (local disks), and spec.failover
                     .replaceLostVolumes allows, the claim and the pending pod are deleted so a
                     fresh volume is provisioned elsewhere (only while every other KaiwuDB node
                     is live: the lost store's copy is given up). Without the policy the pod waits
                     for its node, and the reason says how to let it go.
  VolumeReplaced  -> the new, empty store joins as a new KaiwuDB node; once it is live, the lost
                     store's node id is decommissioned so its ranges re-replicate and it stops
                     counting as a dead node.

A crash-looping pod (its kwbase container waits in CrashLoopBackOff, or has exited after
restarts) whose node is fine counts as failing once it has not been Ready for
`spec.failover.podNotReadyTimeout`: the reconciler deletes it (a fresh pod, a fresh back-off) at
most `spec.failover.maxCrashRestarts` times per pod template revision, then stops and reports
Stalled with the container's last words (a configuration error is not fixed by deleting pods;
a new revision of the spec starts the count again). A pod that turns Ready ends the story.

Guards: never while a scale-in operation runs; at most one pod past NodeLost at a time; nothing
at all while another node of the cluster is down too (a second lost node means quorum is at
stake and a person should look).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from reconciler import kube as k
from reconciler.cache import CacheView
from reconciler.events import rfc3339
from reconciler.kube import ApiError, Kube, Obj
from reconciler.kwbase import KwbaseError
from reconciler.lifecycle import (
    CLAIM_TEMPLATE,
    Lifecycle,
    claim_of,
    cluster_pods,
    exec_pod,
    pod_ready,
)
from reconciler.metrics import Metrics

if TYPE_CHECKING:
    from reconciler.controller import Pass

log = logging.getLogger(__name__)

NODE_LOST = "NodeLost"
POD_DELETED = "PodDeleted"
VOLUME_REPLACED = "VolumeReplaced"
CRASH_LOOP = "CrashLoop"
REVISION_LABEL = "controller-revision-hash"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


@dataclass(frozen=True)
class FailoverSettings:
    """poll_s: how soon a pass looks again while a replacement is under way (pods scheduling,
    a new store joining)."""

    poll_s: float = 1.0


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def parse_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def node_ready(node: Obj | None) -> tuple[bool, str, str]:
    """(Ready, its status, since when) of a Node; a missing Node is not Ready."""
    if node is None:
        return False, "Missing", ""
    for item in (node.get("status") or {}).get("conditions") or ():
        if item.get("type") == "Ready":
            status = str(item.get("status"))
            return status == "True", status, str(item.get("lastTransitionTime") or "")
    return False, "Unknown", ""


def crash_state(pod: Obj) -> tuple[bool, str]:
    """(the kwbase container crash-loops, its last words: exit code and message)."""
    for item in (pod.get("status") or {}).get("containerStatuses") or ():
        if item.get("name") != "kwbase":
            continue
        state = item.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        exited = "terminated" in state and int(item.get("restartCount") or 0) > 0
        last = state.get("terminated") or (item.get("lastState") or {}).get("terminated") or {}
        words = f"exit code {last.get('exitCode')}" if last else "no exit status yet"
        if last.get("message") or last.get("reason"):
            words += f": {str(last.get('message') or last.get('reason')).strip()[:200]}"
        return waiting or exited, words
    return False, ""


class Failover:
    """The "failover" step (see the module docstring). Its reasons for not being Ready go
    before the lifecycle's (a node not live is the symptom; a lost Kubernetes node the
    cause)."""

    def __init__(self, kube: Kube, view: CacheView, metrics: Metrics, lifecycle: Lifecycle,
                 settings: FailoverSettings | None = None) -> None:
        self.kube = kube
        self.view = view
        self.metrics = metrics
        self.lifecycle = lifecycle
        self.settings = settings or FailoverSettings()

    def wanted(self, p: Pass) -> bool:
        return (p.cluster is not None and not p.paused and not p.halted
                and p.cluster.failover.enabled and bool(
                    p.status_fields.get("initialized", p.previous.get("initialized"))))

    def count(self, action: str) -> None:
        self.metrics.lifecycle_actions_total.labels(action=action).inc()

    def run(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        pods = cluster_pods(self.view, cluster)
        previous: dict[str, dict[str, Any]] = {
            str(name): dict(entry) for name, entry in
            (p.previous.get("failures") or {}).items() if isinstance(entry, Mapping)}
        failures: dict[str, dict[str, Any]] = {}
        # Replacements under way stay until they finish, wherever the pod is now.
        for name, entry in previous.items():
            if entry.get("stage") in (POD_DELETED, VOLUME_REPLACED):
                failures[name] = entry
        for name, pod in pods.items():
            node_name = str((pod.get("spec") or {}).get("nodeName") or "")
            if not node_name or name in failures:
                continue
            ready, status, since = node_ready(self.view.get(k.NODE, "", node_name))
            if ready:
                self.watch_crashes(p, name, pod, previous.get(name), failures)
                continue
            before = previous.get(name)
            if before is not None and before.get("node") == node_name:
                failures[name] = before
                continue
            started = parse_time(since) if since else None
            failures[name] = {"stage": NODE_LOST, "node": node_name, "nodeReady": status,
                              "since": rfc3339(min(started or p.now, p.now)),
                              "podUid": str(_meta(pod).get("uid"))}
        for name, entry in previous.items():
            found = pods.get(name)
            if entry.get("stage") == CRASH_LOOP and name not in failures and (
                    found is None or not (found.get("spec") or {}).get("nodeName")):
                failures[name] = entry  # restarted by us, not back yet: keep the count
        for name, entry in sorted(failures.items(), key=lambda item: str(item[1].get("since"))):
            self.advance(p, name, entry, pods, failures)
        p.status_fields["failures"] = failures or None
        self.lifecycle.memory.save(p)

    def advance(self, p: Pass, name: str, entry: dict[str, Any], pods: Mapping[str, Obj],
                failures: dict[str, dict[str, Any]]) -> None:
        cluster = p.cluster
        assert cluster is not None
        stage = entry.get("stage")
        if stage == NODE_LOST:
            since = parse_time(str(entry.get("since"))) or p.now
            timeout = cluster.failover.node_lost_timeout.total_seconds()
            left = since + timeout - p.now
            p.not_ready.insert(0, ("NodeLost", f"pod {name}: Kubernetes node {entry['node']} "
                                f"is {entry.get('nodeReady', 'not Ready')}"))
            if left > 0:
                p.requeue_in(left)
                return
            blocker = self.blocker(p, name, failures)
            if blocker:
                p.not_ready.insert(0, ("FailoverWaiting", f"pod {name}: {blocker}"))
                p.requeue_in(self.settings.poll_s)
                return
            pod = pods.get(name)
            if pod is not None and str(_meta(pod).get("uid")) == entry.get("podUid"):
                self.force_delete(pod)
                self.count("force-delete-pod")
                p.act("PodForceDeleted", f"Pod/{name}", (
                    f"its node {entry['node']} has been {entry.get('nodeReady')} since "
                    f"{entry['since']} (longer than nodeLostTimeout "
                    f"{timeout:g}s): force-deleted so the StatefulSet recreates it"),
                    event="Warning")
                p.wrote = True
            entry["stage"] = POD_DELETED
            p.requeue_in(self.settings.poll_s)
            return
        if stage == POD_DELETED:
            self.after_delete(p, name, entry, pods, failures)
            return
        if stage == VOLUME_REPLACED:
            self.after_volume(p, name, entry, pods, failures)
        if stage == CRASH_LOOP:
            self.restart_crashing(p, name, entry, pods.get(name), failures)

    def watch_crashes(self, p: Pass, name: str, pod: Obj, before: Mapping[str, Any] | None,
                      failures: dict[str, dict[str, Any]]) -> None:
        """Start, carry or end the crash-loop record of a pod on a healthy node."""
        crashing, words = crash_state(pod)
        uid = str(_meta(pod).get("uid"))
        revision = str((_meta(pod).get("labels") or {}).get(REVISION_LABEL) or "")
        if pod_ready(pod) or (before is None and not crashing):
            return  # healthy (a record, if any, ends here)
        if before is not None and before.get("stage") != CRASH_LOOP:
            return
        if _meta(pod).get("deletionTimestamp"):
            # Going away (we restarted it): its crashes are not the next pod's.
            if before is not None:
                failures[name] = dict(before)
            return
        entry: dict[str, Any] = dict(before or {"stage": CRASH_LOOP, "restarts": 0})
        if entry.get("revision") != revision:
            entry["restarts"] = 0  # a new template: the count starts again
        if entry.get("podUid") != uid:
            entry.pop("since", None)  # a new pod: its own clock, once it crashes
        entry.update(revision=revision, podUid=uid)
        if crashing:
            # Whole seconds, rounded up: the timeout is never cut short.
            entry.setdefault("since", rfc3339(math.ceil(p.now)))
            entry["lastWords"] = words
        if "since" in entry:
            failures[name] = entry
        elif int(entry.get("restarts") or 0) > 0:
            failures[name] = entry  # restarted by us and not Ready yet: keep the count

    def restart_crashing(self, p: Pass, name: str, entry: dict[str, Any], pod: Obj | None,
                         failures: dict[str, dict[str, Any]]) -> None:
        cluster = p.cluster
        assert cluster is not None
        restarts = int(entry.get("restarts") or 0)
        limit = cluster.failover.max_crash_restarts
        words = entry.get("lastWords", "")
        if pod is None or "since" not in entry:
            p.not_ready.insert(0, ("CrashLoop", f"pod {name} was restarted after crashing "
                                f"({words}); waiting for it to come up"))
            return
        if restarts >= limit:
            p.stalled.append(("CrashLoop", (
                f"pod {name} keeps crashing ({words}); the reconciler restarted it {restarts} "
                f"times (spec.failover.maxCrashRestarts) and stops here: restarts do not fix "
                f"a configuration error. See `kubectl logs {name} --previous`, fix the spec or "
                "the cause (a new spec revision allows new restarts)")))
            return
        since = parse_time(str(entry["since"])) or p.now
        timeout = cluster.failover.pod_not_ready_timeout.total_seconds()
        p.not_ready.insert(0, ("CrashLoop", f"pod {name} is crash-looping ({words})"))
        if since + timeout > p.now:
            p.requeue_in(since + timeout - p.now)
            return
        blocker = self.blocker(p, name, failures)
        if blocker:
            p.not_ready.insert(0, ("FailoverWaiting", f"pod {name}: {blocker}"))
            p.requeue_in(self.settings.poll_s)
            return
        meta = _meta(pod)
        self.metrics.writes_total.labels(verb="delete", kind="Pod").inc()
        try:
            self.kube.delete(k.POD, cluster.namespace, name, uid=str(meta.get("uid")))
        except ApiError as error:
            if not error.conflict:
                raise
        self.count("restart-crashing-pod")
        entry["restarts"] = restarts + 1
        entry.pop("since", None)
        p.wrote = True
        p.act("CrashLoopRestarted", f"Pod/{name}", (
            f"crash-looping for more than podNotReadyTimeout {timeout:g}s ({words}): deleted "
            f"for a fresh start, restart {restarts + 1} of {limit}"), event="Warning")

    def blocker(self, p: Pass, name: str, failures: Mapping[str, Mapping[str, Any]]) -> str:
        """Why the failover of `name` may not act now ("" when it may)."""
        if p.status_fields.get("operation", p.previous.get("operation")):
            return "a scale-in is in progress"
        busy = [other for other, entry in failures.items()
                if other != name and entry.get("stage") != NODE_LOST]
        if busy:
            return f"the replacement of {', '.join(busy)} is still in progress"
        others = [other for other in failures if other != name]
        if others:
            return (f"other pods are failing too ({', '.join(sorted(others))}): one node at a "
                    "time, and never below quorum; bring nodes back or replace pods by hand")
        return ""

    def force_delete(self, pod: Obj) -> None:
        meta = _meta(pod)
        self.metrics.writes_total.labels(verb="delete", kind="Pod").inc()
        try:
            self.kube.delete(k.POD, str(meta.get("namespace")), str(meta.get("name")),
                             uid=str(meta.get("uid")), grace_period_seconds=0)
        except ApiError as error:
            if not error.conflict:  # a successor with the same name is there already
                raise

    def after_delete(self, p: Pass, name: str, entry: dict[str, Any], pods: Mapping[str, Obj],
                     failures: dict[str, dict[str, Any]]) -> None:
        cluster = p.cluster
        assert cluster is not None
        pod = pods.get(name)
        if pod is None or str(_meta(pod).get("uid")) == entry.get("podUid"):
            p.not_ready.insert(0, ("Replacing", f"waiting for the StatefulSet to recreate {name}"))
            p.requeue_in(self.settings.poll_s)
            return
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        if node_name:
            ready, _, _ = node_ready(self.view.get(k.NODE, "", node_name))
            if ready:
                del failures[name]  # scheduled on a healthy node: KaiwuDB readiness takes over
                p.requeue_in(self.settings.poll_s)
            return
        claim_name = f"{CLAIM_TEMPLATE}-{name}"
        claim = claim_of(self.view, self.kube, cluster.namespace, name)
        pinned = str((_meta(claim).get("annotations") or {}).get(SELECTED_NODE) or "")
        if not claim or not pinned or node_ready(self.view.get(k.NODE, "", pinned))[0]:
            p.not_ready.insert(0, ("Replacing", f"pod {name} is being scheduled"))
            p.requeue_in(self.settings.poll_s)
            return
        if not cluster.failover.replace_lost_volumes:
            p.not_ready.insert(0, ("VolumeOnLostNode", (
                f"pod {name} cannot start elsewhere: its volume ({claim_name}) is on the lost "
                f"node {pinned}. Bring the node back, or set spec.failover.replaceLostVolumes "
                "to give up that copy of the data and start a fresh store")))
            return
        dead = [e for e in p.status_fields.get("nodes", p.previous.get("nodes")) or ()
                if e.get("pod") == name and e.get("state") != "live"]
        live_others = [e for e in p.status_fields.get("nodes", p.previous.get("nodes")) or ()
                       if e.get("pod") != name]
        if not dead or any(e.get("state") != "live" for e in live_others):
            p.not_ready.insert(0, ("FailoverWaiting", (
                f"pod {name}: the volume is replaced only while every other KaiwuDB node is "
                "live")))
            p.requeue_in(self.settings.poll_s)
            return
        self.metrics.writes_total.labels(verb="delete", kind="PersistentVolumeClaim").inc()
        try:
            self.kube.delete(k.PVC, cluster.namespace, claim_name, uid=_meta(claim).get("uid"))
        except ApiError as error:
            if not error.conflict:
                raise
        # The pending pod holds on to the old claim's name: delete it too, so the StatefulSet
        # creates a new claim (a fresh volume on a live node) with the next pod.
        self.force_delete(pod)
        self.count("replace-volume")
        entry.update(stage=VOLUME_REPLACED, deadNodeIds=[int(e["nodeId"]) for e in dead],
                     podUid=str(_meta(pod).get("uid")))
        p.wrote = True
        p.act("VolumeReplaced", f"PersistentVolumeClaim/{claim_name}", (
            f"its volume is on the lost node {pinned}: deleted with pod {name}, so a fresh "
            f"store starts on a live node; KaiwuDB node(s) "
            f"{', '.join(str(e['nodeId']) for e in dead)} will be decommissioned"),
            event="Warning")
        p.requeue_in(self.settings.poll_s)

    def after_volume(self, p: Pass, name: str, entry: dict[str, Any], pods: Mapping[str, Obj],
                     failures: dict[str, dict[str, Any]]) -> None:
        cluster = p.cluster
        assert cluster is not None
        dead_ids = [int(i) for i in entry.get("deadNodeIds") or ()]
        nodes = p.status_fields.get("nodes", p.previous.get("nodes")) or ()
        replacement = [e for e in nodes if e.get("pod") == name and e.get("state") == "live"
                       and int(e["nodeId"]) not in dead_ids]
        pod = pods.get(name)
        if pod is not None and not (pod.get("spec") or {}).get("nodeName") and \
                str(_meta(pod).get("uid")) != entry.get("podUid"):
            claim = claim_of(self.view, self.kube, cluster.namespace, name)
            if claim is None or _meta(claim).get("deletionTimestamp"):
                # The StatefulSet recreated the pod while the old claim was still going: the
                # pod names a claim that is gone and would wait forever. Deleted again, it comes
                # back with a new claim.
                self.force_delete(pod)
                entry["podUid"] = str(_meta(pod).get("uid"))
                p.wrote = True
                p.requeue_in(self.settings.poll_s)
                return
        if not pod_ready(pods.get(name)) or not replacement:
            p.not_ready.insert(0, ("Replacing", f"pod {name} starts a fresh KaiwuDB store"))
            p.requeue_in(self.settings.poll_s)
            return
        runner = exec_pod(pods)
        admin = self.lifecycle.admin(cluster)
        if dead_ids and runner is not None:
            try:
                admin.decommission(runner, dead_ids)
            except KwbaseError as error:
                self.metrics.errors_total.labels(stage="failover").inc()
                p.not_ready.insert(0, ("Replacing", f"decommission of the lost node(s) "
                                    f"{dead_ids} failed (retrying): {error}"))
                p.requeue_in(self.settings.poll_s)
                return
            self.count("decommission-dead-node")
            p.act("DeadNodeDecommissioned", f"Pod/{name}", (
                f"KaiwuDB node(s) {', '.join(map(str, dead_ids))} lost with their volume: "
                f"decommissioned (their ranges re-replicate); node "
                f"{replacement[0]['nodeId']} replaces them"))
        del failures[name]
        # Look again at once: the decommissioned ids leave status.nodes with the next probe.
        self.lifecycle.forget(cluster.namespace, cluster.name)
        p.requeue_in(self.settings.poll_s)
