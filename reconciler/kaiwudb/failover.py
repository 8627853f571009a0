"""Failover in the reconciler's pass: pods on lost Kubernetes nodes are replaced.

The Controller (reconciler.controller) runs `Failover.run` as the pipeline step "failover",
after "lifecycle" (whose KaiwuDB node probe it reads from the pass) and before "report". Facts
come from the cache view through reconciler.kaiwudb.loss (Nodes, pods, claims and the nodes their
volumes are pinned to) and from KaiwuDB through reconciler.kaiwudb.kwbase.

Level-triggered: every pass looks at each pod ordinal of the StatefulSet and decides its next
step from what the cluster shows now, never from what an earlier pass remembered. A pod
force-deleted by an administrator, a reconciler killed between a write and its status write, or
`status.failures` deleted by hand all lead to the same next step. `status.failures` lists what
is failing and since when, for people; nothing reads it back to decide. Every write is guarded
by the uid it was decided on, so repeating a step after a crash is harmless.

What a pod can show, and the step it gets (each with an Event and
`lifecycle_actions_total{action}`):

  NodeLost          the pod is bound to a node whose Ready condition has been False or Unknown
                    (or that is gone) for spec.failover.nodeLostTimeout: force-delete it (grace
                    0; no kubelet will ever confirm the deletion, so the StatefulSet would never
                    recreate it). When its claim's volume is pinned to that node and
                    spec.failover.replaceLostVolumes allows, the claim is deleted in the same
                    step (only while KaiwuDB shows every other node live, this pod's node not
                    live and no range unavailable, by the range descriptors and by fresh
                    range metrics: the lost store's copy of the data is given up, and no range
                    may need it).
  VolumeOnLostNode  the pod is unscheduled or absent (however it came to be gone) and its claim's
                    volume is pinned to a node lost for nodeLostTimeout: with the policy, delete
                    the claim and the pending pod so a fresh volume is provisioned on a live
                    node; without it, wait for the node, and say in Ready how to let it go.
  ClaimGone         the pod is unscheduled and its claim is gone (it was deleted while the
                    StatefulSet recreated the pod against it): delete the pod, and the
                    StatefulSet makes a new claim with the next one. A claim still terminating
                    is waited for.
  StoreReplaced     KaiwuDB lists a pod's address under a live node id and an older one that is
                    not live: the older store was lost with its volume. Decommission the old id
                    so its ranges re-replicate now rather than after KWDB's 30-minute dead-store
                    timeout. A single-replica cluster cannot decommission (KWDB refuses in that
                    mode) and its data had one copy: Stalled, with what to do.
  CrashLoop         the kwbase container crash-loops on a healthy node and the pod has not been
                    Ready for spec.failover.podNotReadyTimeout: delete it for a fresh start, at
                    most spec.failover.maxCrashRestarts times per pod template revision, then
                    Stalled with its last words (a configuration error is not fixed by deleting
                    pods). The count lives on the pod's claim (annotation CRASH_RESTARTS, written
                    before the delete), the one object that outlives the pods; it is cleared
                    once the pod is Ready.

Guards: nothing new is disrupted while another pod of the cluster is down (a second lost node
means quorum is at stake and a person should look), or while a KaiwuBackup runs. A scale-in's
own pod is left to the scale-in (it is removed once drained), but another pod lost during the
scale-in is failed over: the drain moves replicas only onto live nodes, so with three left it
may need that node back, and waiting for each other would wait forever. A step that finishes a
disruption already made (ClaimGone, StoreReplaced) needs no such guard.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from reconciler import failpoints
from reconciler.kaiwudb.backup import running_backup
from reconciler.kaiwudb.kwbase import KwbaseError
from reconciler.kaiwudb.lifecycle import Lifecycle
from reconciler.kaiwudb.loss import (
    NodeLoss,
    disrupted,
    node_loss,
    parse_time,
    pod_node,
    ready_condition,
    volume_node,
)
from reconciler.kaiwudb.nodes import node_entries
from reconciler.kaiwudb.pods import (
    CLAIM_TEMPLATE,
    claim_of,
    cluster_pods,
    exec_pod,
    force_delete,
    pod_ready,
)
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.metrics import Metrics
from reconciler.model import NodeEntry, Obj, meta, rfc3339
from renderer.spec import Cluster, StartMode

if TYPE_CHECKING:
    from reconciler.model import Pass

log = logging.getLogger(__name__)

# Failover stages; the first three are reasons too (reconciler.reasons), hence Final: mypy
# keeps their Literal types.
NODE_LOST: Final = "NodeLost"
VOLUME_ON_LOST_NODE: Final = "VolumeOnLostNode"
CLAIM_GONE: Final = "ClaimGone"
STORE_REPLACED: Final = "StoreReplaced"
CRASH_LOOP: Final = "CrashLoop"
REVISION_LABEL = "controller-revision-hash"
# On a pod's claim: "<template revision>:<restarts>", the crash restarts made for that revision.
CRASH_RESTARTS = "kaiwu.inspur.com/crash-restarts"


@dataclass(frozen=True)
class FailoverSettings:
    """poll_s: how soon a pass looks again while a replacement is under way (pods scheduling,
    a claim going away, a new store joining)."""

    poll_s: float = 1.0


@dataclass(frozen=True)
class Finding:
    """What one pod shows (see the module docstring for each stage)."""

    pod: str
    stage: str
    node: str = ""  # the lost Kubernetes node (NodeLost, VolumeOnLostNode)
    node_ready: str = ""  # its Ready status: False, Unknown or Missing
    since: float | None = None  # lost / not Ready since
    dead_ids: tuple[int, ...] = ()  # StoreReplaced: the lost stores' node ids
    claim: Obj | None = field(default=None, compare=False)
    words: str = ""  # CrashLoop: exit code and message
    restarts: int = 0  # CrashLoop: restarts made for the pod's revision

    def record(self) -> dict[str, Any]:
        """The finding as status.failures shows it (information for people)."""
        entry: dict[str, Any] = {"stage": self.stage}
        if self.node:
            entry.update(node=self.node, nodeReady=self.node_ready)
        if self.since is not None:
            entry["since"] = rfc3339(self.since)
        if self.dead_ids:
            entry["deadNodeIds"] = list(self.dead_ids)
        if self.stage == CRASH_LOOP:
            entry.update(restarts=self.restarts, lastWords=self.words)
        return entry



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
            said = str(last.get('message') or last.get('reason')).strip()
            words += f": {said[:200]}"
            cause = crash_cause(said)
            words += f"; {cause}" if cause else ""
        return waiting or exited, words
    return False, ""


CRASH_CAUSES = (
    ("clock synchronization error", "the node's clock is too far from its peers' (KWDB stops "
     "a node that is more than --max-offset away from half of them, rpc/clock_offset.go:"
     "203-284): fix the hosts' time sync (NTP, chrony); restarts do not"),
    ("maximum clock offset", "the nodes' --max-offset differ (rpc/heartbeat.go:160-167): give "
     "every node the same value"),
)
"""Last words whose cause is known, and what to do: said with the crash loop."""


def crash_cause(words: str) -> str:
    """What to do about last words of a known cause ("" for any other)."""
    return next((advice for marker, advice in CRASH_CAUSES if marker in words), "")


def crash_restarts(claim: Obj | None, revision: str) -> int:
    """Crash restarts recorded on the claim for this template revision (0 for another)."""
    value = str((meta(claim).get("annotations") or {}).get(CRASH_RESTARTS) or "")
    recorded, _, count = value.rpartition(":")
    return int(count) if recorded == revision and count.isdigit() else 0


def replaced_stores(nodes: Sequence[NodeEntry]) -> dict[str, tuple[int, ...]]:
    """pod -> node ids KaiwuDB lists for the pod's address that are not live while another id
    there is: stores lost with their volume and replaced by a fresh one (a decommissioned node
    that stopped is already left out of status.nodes)."""
    found: dict[str, tuple[int, ...]] = {}
    for pod in sorted({e.pod for e in nodes if e.pod}):
        mine = [e for e in nodes if e.pod == pod]
        if any(e.state == "live" for e in mine):
            dead = tuple(sorted(e.node_id for e in mine if e.state == "not-live"))
            if dead:
                found[pod] = dead
    return found


class CrashLoops:
    """Crash-looping pods on healthy nodes: found, restarted a bounded number of times per
    template revision (counted on the pod's claim), then Stalled (see the module docstring).
    Part of the failover step."""

    def __init__(self, kube: Kube, view: CacheView, metrics: Metrics,
                 settings: FailoverSettings) -> None:
        self.kube = kube
        self.view = view
        self.metrics = metrics
        self.settings = settings

    def finding(self, p: Pass, cluster: Cluster, name: str, pod: Obj) -> Finding | None:
        """A pod on a healthy node that crash-loops (or was restarted by us and is not back);
        clears the claim's restart count once the pod is Ready."""
        ready, changed = ready_condition(pod)
        if meta(pod).get("deletionTimestamp"):
            return None
        revision = str((meta(pod).get("labels") or {}).get(REVISION_LABEL) or "")
        claim = self.view.get(k.PVC, cluster.namespace, f"{CLAIM_TEMPLATE}-{name}")
        if ready and pod_ready(pod):
            if claim is not None and CRASH_RESTARTS in (meta(claim).get("annotations") or {}):
                self.write_restarts(cluster, claim, None)  # the story ends: a fresh count
            return None
        crashing, words = crash_state(pod)
        restarts = crash_restarts(claim, revision)
        if not crashing and not restarts:
            return None
        created = parse_time(str(meta(pod).get("creationTimestamp") or ""))
        since = changed if changed is not None else created
        return Finding(name, CRASH_LOOP, since=min(since or p.now, p.now) if crashing else None,
                       claim=claim, words=words, restarts=restarts)

    def restart(self, p: Pass, cluster: Cluster, f: Finding, pods: Mapping[str, Obj],
                blocker: Callable[[], str]) -> None:
        """Restart the pod once it has crash-looped for podNotReadyTimeout, unless `blocker`
        says why not now; Stalled at the limit."""
        limit = cluster.failover.max_crash_restarts
        if f.since is None:
            p.not_ready.insert(0, (CRASH_LOOP, f"pod {f.pod} was restarted after crashing; "
                                   "waiting for it to come up"))
            return
        if f.restarts >= limit:
            p.stalled.append((CRASH_LOOP, (
                f"pod {f.pod} keeps crashing ({f.words}); the reconciler restarted it "
                f"{f.restarts} times (spec.failover.maxCrashRestarts) and stops here: restarts "
                f"do not fix a configuration error. See `kubectl logs {f.pod} --previous`, fix "
                "the spec or the cause (a new spec revision allows new restarts)")))
            return
        timeout = cluster.failover.pod_not_ready_timeout.total_seconds()
        p.not_ready.insert(0, (CRASH_LOOP, f"pod {f.pod} is crash-looping ({f.words})"))
        # Whole seconds, rounded up: the timeout is never cut short.
        due = math.ceil(f.since) + timeout
        if due > p.now:
            p.requeue_in(due - p.now)
            return
        waiting = blocker()
        if waiting:
            p.not_ready.insert(0, ("FailoverWaiting", f"pod {f.pod}: {waiting}"))
            p.requeue_in(self.settings.poll_s)
            return
        pod = pods[f.pod]
        if f.claim is None:
            p.not_ready.insert(0, (CRASH_LOOP, f"pod {f.pod} has no claim to count restarts "
                                   "on; not restarted"))
            return
        revision = str((meta(pod).get("labels") or {}).get(REVISION_LABEL) or "")
        # Counted before the delete: a crash in between costs a restart, never adds one.
        self.write_restarts(cluster, f.claim, f"{revision}:{f.restarts + 1}")
        self.metrics.writes_total.labels(verb="delete", kind="Pod").inc()
        try:
            self.kube.delete(k.POD, cluster.namespace, f.pod, uid=str(meta(pod).get("uid")))
        except ApiError as error:
            if not error.conflict:
                raise
        failpoints.reached("failover.crash-restart")
        self.metrics.lifecycle_actions_total.labels(action="restart-crashing-pod").inc()
        p.act("CrashLoopRestarted", f"Pod/{f.pod}", (
            f"crash-looping for more than podNotReadyTimeout {timeout:g}s ({f.words}): deleted "
            f"for a fresh start, restart {f.restarts + 1} of {limit}"), event="Warning")

    def write_restarts(self, cluster: Cluster, claim: Obj, value: str | None) -> None:
        self.metrics.writes_total.labels(verb="patch", kind="PersistentVolumeClaim").inc()
        self.kube.patch(k.PVC, cluster.namespace, str(meta(claim).get("name")),
                        {"metadata": {"annotations": {CRASH_RESTARTS: value}}})


class Lookout:
    """What each pod of the cluster shows, as Findings: read anew on every pass (see the module
    docstring); the only thing kept between passes is when a Node that is gone was first seen
    missing. Part of the failover step."""

    def __init__(self, kube: Kube, view: CacheView, crashes: CrashLoops) -> None:
        self.kube = kube
        self.view = view
        self.crashes = crashes
        # A Node that is gone has no condition to date its loss from: when a pass first found
        # it missing (shared by the workers, hence the lock).
        self._lock = threading.Lock()
        self._missing_since: dict[str, float] = {}

    def look(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
             names: list[str]) -> list[Finding]:
        findings: list[Finding] = []
        for name in names:
            pod = pods.get(name)
            node = pod_node(pod)
            if node:
                loss = node_loss(self.view, node)
                if loss is not None:
                    findings.append(Finding(name, NODE_LOST, node, loss.status,
                                            self.lost_since(p, loss, name)))
                    continue
                assert pod is not None
                crash = self.crashes.finding(p, cluster, name, pod)
                if crash is not None:
                    findings.append(crash)
                continue
            if pod is not None and meta(pod).get("deletionTimestamp"):
                continue  # going away: the StatefulSet recreates it
            claim = claim_of(self.view, self.kube, cluster.namespace, name)
            if claim is None or meta(claim).get("deletionTimestamp"):
                if pod is not None:
                    findings.append(Finding(name, CLAIM_GONE, claim=claim))
                continue
            pinned = volume_node(self.kube, claim)
            loss = node_loss(self.view, pinned) if pinned else None
            if loss is not None:
                findings.append(Finding(name, VOLUME_ON_LOST_NODE, pinned, loss.status,
                                        self.lost_since(p, loss, name), claim=claim))
        nodes = p.kaiwu.nodes or ()
        for pod_name, dead in replaced_stores(nodes).items():
            if pod_name in names and not any(f.pod == pod_name for f in findings):
                findings.append(Finding(pod_name, STORE_REPLACED, dead_ids=dead))
        with self._lock:
            for gone in [n for n in self._missing_since if self.view.get(k.NODE, "", n)]:
                del self._missing_since[gone]
        return findings

    def lost_since(self, p: Pass, loss: NodeLoss, pod: str) -> float:
        """When the node was lost: its Ready condition's transition; for a Node that is gone,
        when a pass first found it missing (after a restart, the time status.failures shows,
        which only people otherwise read: without it the wait starts again, never shorter)."""
        if loss.since is not None:
            return min(loss.since, p.now)
        shown = (p.kaiwu.failures or {}).get(pod) or {}
        recorded = parse_time(str(shown.get("since"))) if shown.get("node") == loss.name else None
        with self._lock:
            first = self._missing_since.setdefault(loss.name, p.now)
        return min(first, recorded) if recorded is not None else first


class Failover:
    """The "failover" step (see the module docstring). Its reasons for not being Ready go
    before the lifecycle's (a node not live is the symptom; a lost Kubernetes node the
    cause)."""

    name = "failover"
    always = False

    def __init__(self, kube: Kube, view: CacheView, metrics: Metrics, lifecycle: Lifecycle,
                 settings: FailoverSettings | None = None) -> None:
        self.kube = kube
        self.view = view
        self.metrics = metrics
        self.lifecycle = lifecycle
        self.settings = settings or FailoverSettings()
        self.crashes = CrashLoops(kube, view, metrics, self.settings)
        self.lookout = Lookout(kube, view, self.crashes)

    def wanted(self, p: Pass) -> bool:
        return (p.cluster is not None and not p.paused and not p.halted
                and p.cluster.failover.enabled and bool(
                    p.kaiwu.initialized))

    def count(self, action: str) -> None:
        self.metrics.lifecycle_actions_total.labels(action=action).inc()

    # ---- what the cluster shows ------------------------------------------------------------

    def run(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        pods = cluster_pods(self.view, cluster)
        sts = self.view.get(k.STATEFUL_SET, cluster.namespace, cluster.name)
        replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0) \
            if sts is not None else cluster.replicas
        names = [cluster.pod_name(i) for i in range(replicas)]
        findings = self.lookout.look(p, cluster, pods, names)
        p.kaiwu.failures = {f.pod: f.record() for f in findings} or None
        for finding in sorted(findings, key=lambda f: (f.since or p.now, f.pod)):
            self.advance(p, cluster, finding, findings, pods, names)
        self.lifecycle.memory.save(p)



    # ---- what to do about it ---------------------------------------------------------------

    def advance(self, p: Pass, cluster: Cluster, f: Finding, findings: Sequence[Finding],
                pods: Mapping[str, Obj], names: list[str]) -> None:
        if f.stage in (NODE_LOST, VOLUME_ON_LOST_NODE):
            timeout = cluster.failover.node_lost_timeout.total_seconds()
            since = f.since if f.since is not None else p.now
            p.not_ready.insert(0, (NODE_LOST, f"pod {f.pod}: Kubernetes node {f.node} is "
                                   f"{f.node_ready}" + (" (the pod's volume is there)"
                                                        if f.stage == VOLUME_ON_LOST_NODE
                                                        else "")))
            if since + timeout > p.now:
                p.requeue_in(since + timeout - p.now)
                return
            if f.stage == VOLUME_ON_LOST_NODE and not cluster.failover.replace_lost_volumes:
                p.not_ready.insert(0, (VOLUME_ON_LOST_NODE, (
                    f"pod {f.pod} cannot start elsewhere: its volume "
                    f"({CLAIM_TEMPLATE}-{f.pod}) is on the lost node {f.node}. Bring the node "
                    "back, or set spec.failover.replaceLostVolumes to give up that copy of the "
                    "data and start a fresh store")))
                return
            blocker = self.blocker(p, f, findings, pods, names)
            if blocker:
                p.not_ready.insert(0, ("FailoverWaiting", f"pod {f.pod}: {blocker}"))
                p.requeue_in(self.settings.poll_s)
                return
            if f.stage == NODE_LOST:
                self.evict(p, cluster, f, pods, timeout)
            else:
                self.replace_volume(p, cluster, f, pods)
        elif f.stage == CLAIM_GONE:
            self.recreate_pending(p, cluster, f, pods)
        elif f.stage == STORE_REPLACED:
            self.decommission_replaced(p, cluster, f, pods)
        elif f.stage == CRASH_LOOP:
            self.crashes.restart(p, cluster, f, pods,
                                 lambda: self.blocker(p, f, findings, pods, names))

    def blocker(self, p: Pass, f: Finding, findings: Sequence[Finding], pods: Mapping[str, Obj],
                names: list[str]) -> str:
        """Why a new disruption of pod f.pod may not happen now ("" when it may)."""
        operation = p.kaiwu.operation
        if operation is not None and operation.pod == f.pod:
            # Its store is being drained; a fresh store here would be a live node removed
            # undrained when the StatefulSet shrinks. The scale-in finishes with it.
            return "it is the pod a scale-in removes"
        backup = running_backup(self.view, p.key.namespace, p.key.name)
        if backup:
            # It fails by itself if this pod was its node; otherwise it finishes first.
            return f"KaiwuBackup {backup} is running"
        lost = sorted({other.pod for other in findings if other.pod != f.pod
                       and other.stage in (NODE_LOST, VOLUME_ON_LOST_NODE)})
        if lost:
            return (f"other pods are failing too ({', '.join(lost)}): one node at a time, and "
                    "never below quorum; bring nodes back or replace pods by hand")
        down = sorted(set(disrupted(self.view, pods, names)) - {f.pod})
        if down:
            return f"pods {', '.join(down)} are not Ready yet: one pod at a time"
        return ""

    def kaiwudb_allows_replacing(self, p: Pass, cluster: Cluster, pod: str,
                                 pods: Mapping[str, Obj]) -> str:
        """Why the store of `pod` may not be given up now, from a fresh node status ("" when it
        may): every other KaiwuDB node must be live (they hold the other copies) and the pod's
        own node must not be (else it is not lost at all)."""
        runner = exec_pod({name: obj for name, obj in pods.items() if name != pod})
        if runner is None:
            return "no other pod runs kwbase to ask KaiwuDB"
        try:
            nodes = self.lifecycle.admin(cluster).node_status(runner, decommission=True)
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="failover").inc()
            return f"KaiwuDB node status unknown: {error}"
        # One gateway's view: a node missing from it is unknown, never live nor dead (a gateway
        # restarted moments ago lists only the nodes gossip has told it of so far).
        remembered = {e.node_id for e in p.kaiwu.nodes or () if e.pod == pod}
        entries = node_entries(nodes)
        p.kaiwu.nodes = entries
        replaced = {i for ids in replaced_stores(entries).values() for i in ids}
        others = [n for n in nodes if n.pod_name != pod and n.id not in replaced
                  and not (n.is_decommissioning and not n.is_live)]
        not_live = [n for n in others if not n.healthy]
        if not_live:
            return "KaiwuDB nodes not live: " + ", ".join(
                f"{n.id} ({n.pod_name or n.address})" for n in not_live)
        seen_live = {n.pod_name for n in others if n.healthy}
        # The StatefulSet's own pods that stay (not a copy with our labels, not one on its way
        # out after a scale-in): each must show a live node in this view.
        staying = [name for name, obj in sorted(pods.items())
                   if re.fullmatch(rf"{re.escape(cluster.name)}-[0-9]+", name)
                   and not meta(obj).get("deletionTimestamp")]
        unseen = [name for name in staying if name not in (pod, *seen_live)]
        unseen_own = sorted(remembered - {n.id for n in nodes})
        if unseen or unseen_own:
            missing = [f"pod {name}" for name in unseen] + [f"node {i} of this pod"
                                                             for i in unseen_own]
            return (f"KaiwuDB's view from pod {runner} lists no {', no '.join(missing)}: a "
                    "node missing from one gateway's view is neither live nor dead; asking "
                    "again")
        own_live = [n.id for n in nodes if n.pod_name == pod and n.is_live]
        if own_live:
            return (f"KaiwuDB still counts node(s) {', '.join(map(str, own_live))} of this pod "
                    "live; its store is not given up while it is")
        # Every other node live is not enough: a range whose other copies include a store given
        # up earlier and not yet re-replicated, or one still up-replicating (two copies, or
        # one), has lost its quorum with this node, and this store may hold its last copies.
        # The range descriptors say so at once; the range metrics count a range with no live
        # replica nowhere, and the others only some 45 s after the loss.
        live = [n.id for n in nodes if n.is_live]
        try:
            stranded = self.lifecycle.admin(cluster).ranges_without_quorum(runner, live)
            health = self.lifecycle.admin(cluster).replication_health(runner)
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="failover").inc()
            return f"KaiwuDB replication health unknown: {error}"
        if stranded:
            return (f"{stranded} ranges have no quorum of their replicas on live KaiwuDB nodes "
                    "(range descriptors): this store may hold their last copies; it is kept "
                    "until the node is back or KaiwuDB no longer needs it")
        if health.unavailable != 0 or health.stale:
            # A stale read says nothing: a node started moments ago reports 0 until it has
            # computed its metrics (kwbase.stale_records).
            return (f"KaiwuDB reports {health.describe()}: this store may hold the last copies "
                    "of a range without its quorum; it is kept until none is unavailable")
        return ""

    def evict(self, p: Pass, cluster: Cluster, f: Finding, pods: Mapping[str, Obj],
              timeout: float) -> None:
        """Force-delete the pod on the lost node, and its claim with it when the policy allows
        and its volume is on that node (one step: the new pod then needs no second pass)."""
        if self.came_back(p, f):
            return
        pod = pods[f.pod]
        claim = claim_of(self.view, self.kube, cluster.namespace, f.pod)
        replace = ""
        if cluster.failover.replace_lost_volumes and claim is not None and \
                not meta(claim).get("deletionTimestamp") and \
                volume_node(self.kube, claim) == f.node:
            refused = self.kaiwudb_allows_replacing(p, cluster, f.pod, pods)
            if refused:
                p.not_ready.insert(0, ("FailoverWaiting", f"pod {f.pod}: force-deleted; its "
                                       f"volume is replaced later: {refused}"))
            else:
                replace = self.delete_claim(cluster, claim)
        force_delete(self.kube, self.metrics, pod)
        failpoints.reached("failover.pod-force-deleted")
        self.count("force-delete-pod")
        p.act("PodForceDeleted", f"Pod/{f.pod}", (
            f"its node {f.node} has been {f.node_ready} since {rfc3339(f.since or p.now)} "
            f"(longer than nodeLostTimeout {timeout:g}s): force-deleted so the StatefulSet "
            "recreates it"), event="Warning")
        if replace:
            self.announce_volume(p, f, replace)
        p.requeue_in(self.settings.poll_s)

    def replace_volume(self, p: Pass, cluster: Cluster, f: Finding,
                       pods: Mapping[str, Obj]) -> None:
        """The pod is gone or pending; its volume is on the lost node: give it up."""
        if self.came_back(p, f):
            return
        refused = self.kaiwudb_allows_replacing(p, cluster, f.pod, pods)
        if refused:
            p.not_ready.insert(0, ("FailoverWaiting", f"pod {f.pod}: the volume is replaced "
                                   f"only when KaiwuDB allows: {refused}"))
            p.requeue_in(self.settings.poll_s)
            return
        assert f.claim is not None
        name = self.delete_claim(cluster, f.claim)
        pending = pods.get(f.pod)
        if pending is not None:
            # The pending pod holds on to the old claim's name: delete it too, so the
            # StatefulSet creates a new claim (a fresh volume on a live node) with the next pod.
            force_delete(self.kube, self.metrics, pending)
        failpoints.reached("failover.claim-deleted")
        self.announce_volume(p, f, name)
        p.requeue_in(self.settings.poll_s)

    def came_back(self, p: Pass, f: Finding) -> bool:
        """The lost node is Ready again in a fresh read of the API: the watch cache may lag
        its return by a moment, and nothing is force-deleted or given up on a stale look (the
        soak saw a volume given up 0.1 s after its node came back)."""
        try:
            fresh = node_loss(self.kube, f.node)
        except ApiError as error:
            self.metrics.errors_total.labels(stage="failover").inc()
            p.not_ready.insert(0, ("FailoverWaiting", f"pod {f.pod}: node {f.node} could not "
                                   f"be read again before acting: {error}"))
            p.requeue_in(self.settings.poll_s)
            return True
        if fresh is not None:
            return False
        log.info("node %s is Ready again: pod %s and its volume are left alone", f.node, f.pod)
        p.requeue_in(self.settings.poll_s)
        return True

    def announce_volume(self, p: Pass, f: Finding, claim_name: str) -> None:
        self.count("replace-volume")
        p.act("VolumeReplaced", f"PersistentVolumeClaim/{claim_name}", (
            f"its volume is on the lost node {f.node}: deleted with pod {f.pod}, so a fresh "
            "store starts on a live node; the lost store's KaiwuDB node is decommissioned once "
            "the new one is live"), event="Warning")

    def recreate_pending(self, p: Pass, cluster: Cluster, f: Finding,
                         pods: Mapping[str, Obj]) -> None:
        if f.claim is not None:
            p.not_ready.insert(0, ("Replacing", f"pod {f.pod} waits for its old claim to go"))
            p.requeue_in(self.settings.poll_s)
            return
        # The StatefulSet recreated the pod while the old claim was still going: the pod names
        # a claim that is gone and would wait forever. Deleted, it comes back with a new claim.
        force_delete(self.kube, self.metrics, pods[f.pod])
        failpoints.reached("failover.pending-pod-deleted")
        p.not_ready.insert(0, ("Replacing", f"pod {f.pod} is recreated with a new claim"))
        p.requeue_in(self.settings.poll_s)

    def decommission_replaced(self, p: Pass, cluster: Cluster, f: Finding,
                              pods: Mapping[str, Obj]) -> None:
        ids = ", ".join(map(str, f.dead_ids))
        if cluster.start_mode is not StartMode.MULTI_REPLICA:
            # KWDB refuses `node decommission` outside multi-replica mode ("node cannot be
            # decommissioned in mpp mode"), and the lost store held the only copy of its ranges.
            p.stalled.append((STORE_REPLACED, (
                f"KaiwuDB node(s) {ids} of pod {f.pod} lost their store with its volume; a "
                f"{cluster.start_mode.value} cluster keeps one copy of each range, so their "
                "data is gone, and KaiwuDB cannot decommission a node in this mode. Restore the "
                "lost data from a backup; the dead node id stays listed by KaiwuDB. Other "
                "failovers of this cluster go on")))
            return
        runner = exec_pod(pods)
        if runner is None:
            p.not_ready.insert(0, ("Replacing", "no pod runs kwbase to decommission the lost "
                                   f"node(s) {ids}"))
            p.requeue_in(self.settings.poll_s)
            return
        admin = self.lifecycle.admin(cluster)
        try:
            # Decided on a fresh look, never on a remembered one: only ids KaiwuDB shows not
            # live now, beside a live id at the same address.
            entries = node_entries(admin.node_status(runner, decommission=True))
            dead = list(replaced_stores(entries).get(f.pod, ()))
            if dead:
                admin.decommission(runner, dead)
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="failover").inc()
            p.not_ready.insert(0, ("Replacing", f"decommission of the lost node(s) {ids} "
                                   f"failed (retrying): {error}"))
            p.requeue_in(self.settings.poll_s)
            return
        if not dead:
            return
        failpoints.reached("failover.dead-node-decommissioned")
        live = [e.node_id for e in entries if e.pod == f.pod and e.state == "live"]
        self.count("decommission-dead-node")
        p.act("DeadNodeDecommissioned", f"Pod/{f.pod}", (
            f"KaiwuDB node(s) {', '.join(map(str, dead))} lost with their volume: "
            f"decommissioned (their ranges re-replicate); node "
            f"{', '.join(map(str, live))} replaces them"))
        # Look again at once: the decommissioned ids leave status.nodes with the next probe.
        self.lifecycle.forget(cluster.namespace, cluster.name)
        p.requeue_in(self.settings.poll_s)


    # ---- writes -----------------------------------------------------------------------------


    def delete_claim(self, cluster: Cluster, claim: Obj) -> str:
        name = str(meta(claim).get("name"))
        self.metrics.writes_total.labels(verb="delete", kind="PersistentVolumeClaim").inc()
        try:
            self.kube.delete(k.PVC, cluster.namespace, name, uid=str(meta(claim).get("uid")))
        except ApiError as error:
            if not error.conflict:  # a newer claim of that name: not the one we judged
                raise
        return name
