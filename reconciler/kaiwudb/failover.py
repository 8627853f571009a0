"""Failover in the reconciler's pass: pods on lost Kubernetes nodes are replaced.

The Controller (reconciler.controller) runs `Failover.run` as the pipeline step "failover",
after "lifecycle" (whose KaiwuDB node probe it reads from the pass) and before "report". Facts
come from the cache view through reconciler.kaiwudb.lookout (what each pod shows, as Findings),
reconciler.kaiwudb.loss (Nodes, pods, claims and the nodes their volumes are pinned to) and from
KaiwuDB through reconciler.kaiwudb.kwbase. Crash loops are reconciler.kaiwudb.crashloop's.

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

The step, phase by phase (`Failover.run`; CloudNativePG documents its failover the same way):

  1. Look: `Lookout.look` gives one Finding per pod that shows something, with its stage
     (reconciler.reasons.FailoverStage); status.failures is written from them.
  2. Act: each finding, the longest-failing first, goes to its stage's handler in
     `Failover.STAGES` (every stage has one; a unit test checks it):
       NodeLost          `node_lost`: wait out nodeLostTimeout; the guards; `evict`.
       VolumeOnLostNode  `volume_on_lost_node`: wait out nodeLostTimeout; the volume policy;
                         the guards; `replace_volume`.
       ClaimGone         `claim_gone`: wait for the old claim to go, then delete the pod.
       StoreReplaced     `store_replaced`: decommission the dead node ids.
       CrashLoop         `crash_loop` (CrashLoops.restart): wait out podNotReadyTimeout; the
                         guards; delete the pod, counted; Stalled at maxCrashRestarts.
     The guards are `guard` (this pod may be disrupted now: not the scale-in's, no backup, no
     other pod down) and, before a store is given up, `kaiwudb_allows_replacing` (KaiwuDB's
     fresh view: every other node live, ranges with their quorum elsewhere). Each is a
     reconciler.reasons.Verdict: `GO`, or a `Wait` saying why not.
  3. Say: a handler returns its Waits, most specific first (the guard's before the stage's
     own); they go before every other step's reasons in Ready (a lost node is the cause, a
     node not live the symptom), the last-handled finding's first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from reconciler import failpoints
from reconciler.kaiwudb.backup.status import running_backup
from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.crashloop import CrashLoops
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.lifecycle import Lifecycle
from reconciler.kaiwudb.lookout import FailoverSettings, Finding, Lookout, replaced_stores
from reconciler.kaiwudb.loss import disrupted, node_loss, volume_node
from reconciler.kaiwudb.nodes import node_entries
from reconciler.kaiwudb.pods import (
    CLAIM_TEMPLATE,
    claim_of,
    cluster_pods,
    delete_claim,
    exec_pod,
    force_delete,
)
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.metrics import Metrics
from reconciler.model import Obj, Pass, meta, rfc3339
from reconciler.reasons import (
    CLAIM_GONE,
    CRASH_LOOP,
    GO,
    NODE_LOST,
    STORE_REPLACED,
    VOLUME_ON_LOST_NODE,
    FailoverStage,
    LifecycleMetric,
    Verdict,
    Wait,
)
from renderer.spec import Cluster, StartMode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scene:
    """What one failover pass found, as every handler sees it."""

    p: Pass
    cluster: Cluster
    findings: Sequence[Finding]
    pods: Mapping[str, Obj]
    names: list[str]  # the pods the StatefulSet wants, by name


def kaiwudb_allows_replacing(admin: KwbaseAdmin, metrics: Metrics, p: Pass, cluster: Cluster,
                             pod: str, pods: Mapping[str, Obj]) -> Verdict:
    """May the store of `pod` be given up now? Decided from a fresh node status: every other
    KaiwuDB node must be live (they hold the other copies), the pod's own node must not be
    (else it is not lost at all), and no range may lack its quorum elsewhere. A Wait's
    message says why not, for the caller to put in its words."""
    runner = exec_pod({name: obj for name, obj in pods.items() if name != pod})
    if runner is None:
        return Wait("FailoverWaiting", "no other pod runs kwbase to ask KaiwuDB")
    try:
        nodes = admin.node_status(runner, decommission=True)
    except KwbaseError as error:
        metrics.errors_total.labels(stage="failover").inc()
        return Wait("FailoverWaiting", f"KaiwuDB node status unknown: {error}")
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
        return Wait("FailoverWaiting", "KaiwuDB nodes not live: " + ", ".join(
            f"{n.id} ({n.pod_name or n.address})" for n in not_live))
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
        return Wait("FailoverWaiting", (
            f"KaiwuDB's view from pod {runner} lists no {', no '.join(missing)}: a node "
            "missing from one gateway's view is neither live nor dead; asking again"))
    own_live = [n.id for n in nodes if n.pod_name == pod and n.is_live]
    if own_live:
        return Wait("FailoverWaiting", (
            f"KaiwuDB still counts node(s) {', '.join(map(str, own_live))} of this pod "
            "live; its store is not given up while it is"))
    # Every other node live is not enough: a range whose other copies include a store given
    # up earlier and not yet re-replicated, or one still up-replicating (two copies, or
    # one), has lost its quorum with this node, and this store may hold its last copies.
    # The range descriptors say so at once; the range metrics count a range with no live
    # replica nowhere, and the others only some 45 s after the loss.
    live = [n.id for n in nodes if n.is_live]
    try:
        stranded = admin.ranges_without_quorum(runner, live)
        health = admin.replication_health(runner)
    except KwbaseError as error:
        metrics.errors_total.labels(stage="failover").inc()
        return Wait("FailoverWaiting", f"KaiwuDB replication health unknown: {error}")
    if stranded:
        return Wait("FailoverWaiting", (
            f"{stranded} ranges have no quorum of their replicas on live KaiwuDB nodes "
            "(range descriptors): this store may hold their last copies; it is kept until "
            "the node is back or KaiwuDB no longer needs it"))
    if health.unavailable != 0 or health.stale:
        # A stale read says nothing: a node started moments ago reports 0 until it has
        # computed its metrics (kwbase.replication.stale_records).
        return Wait("FailoverWaiting", (
            f"KaiwuDB reports {health.describe()}: this store may hold the last copies of a "
            "range without its quorum; it is kept until none is unavailable"))
    return GO


Handler = Callable[["Failover", Scene, Finding], list[Wait]]
"""A stage's handler: acts on one finding, returns why Ready is not True, first reason first."""


class Failover:
    """The "failover" step (see the module docstring)."""

    name = "failover"
    always = False

    def __init__(self, ctx: StepContext, lifecycle: Lifecycle,
                 settings: FailoverSettings | None = None) -> None:
        self.ctx = ctx
        self.kube = ctx.kube
        self.view = ctx.view
        self.metrics = ctx.metrics
        self.lifecycle = lifecycle
        self.settings = settings or FailoverSettings()
        self.crashes = CrashLoops(ctx.kube, ctx.view, ctx.metrics, self.settings)
        self.lookout = Lookout(ctx.kube, ctx.view, self.crashes.finding)

    def wanted(self, p: Pass) -> bool:
        return (p.cluster is not None and not p.paused and not p.halted
                and p.cluster.failover.enabled and bool(
                    p.kaiwu.initialized))

    def count(self, action: LifecycleMetric) -> None:
        self.ctx.count(action)

    def run(self, p: Pass) -> None:
        """Look, act on each finding by its stage, say why Ready is not True (the module
        docstring's three phases)."""
        cluster = p.cluster
        assert cluster is not None
        pods = cluster_pods(self.view, cluster)
        sts = self.view.peek(k.STATEFUL_SET, cluster.namespace, cluster.name)
        replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0) \
            if sts is not None else cluster.replicas
        names = [cluster.pod_name(i) for i in range(replicas)]
        findings = self.lookout.look(p, cluster, pods, names)
        p.kaiwu.failures = {f.pod: f.record() for f in findings} or None
        scene = Scene(p, cluster, findings, pods, names)
        said: list[Wait] = []
        for finding in sorted(findings, key=lambda f: (f.since or p.now, f.pod)):
            said[:0] = Failover.STAGES[finding.stage](self, scene, finding)
        p.not_ready[:0] = [(wait.reason, wait.message) for wait in said]
        self.lifecycle.memory.save(p)

    # ---- the stages' handlers (Failover.STAGES) --------------------------------------------

    def node_lost(self, s: Scene, f: Finding) -> list[Wait]:
        """NodeLost: once the node has been lost for nodeLostTimeout and the guards allow,
        `evict` the pod."""
        lost = Wait(NODE_LOST, f"pod {f.pod}: Kubernetes node {f.node} is {f.node_ready}")
        if not self.lost_long_enough(s, f):
            return [lost]
        return self.when_guards_allow(s, f, self.evict, lost)

    def volume_on_lost_node(self, s: Scene, f: Finding) -> list[Wait]:
        """VolumeOnLostNode: once the node has been lost for nodeLostTimeout, and if
        spec.failover.replaceLostVolumes and the guards allow, `replace_volume`."""
        lost = Wait(NODE_LOST, f"pod {f.pod}: Kubernetes node {f.node} is {f.node_ready} (the "
                               "pod's volume is there)")
        if not self.lost_long_enough(s, f):
            return [lost]
        if not s.cluster.failover.replace_lost_volumes:
            return [Wait(VOLUME_ON_LOST_NODE, (
                f"pod {f.pod} cannot start elsewhere: its volume ({CLAIM_TEMPLATE}-{f.pod}) is "
                f"on the lost node {f.node}. Bring the node back, or set "
                "spec.failover.replaceLostVolumes to give up that copy of the data and start a "
                "fresh store")), lost]
        return self.when_guards_allow(s, f, self.replace_volume, lost)

    def when_guards_allow(self, s: Scene, f: Finding,
                          act: Callable[[Scene, Finding], list[Wait]], lost: Wait) -> list[Wait]:
        """`act` on the lost node's pod if `guard` allows it, else wait (and look again)."""
        verdict = self.guard(s, f)
        if isinstance(verdict, Wait):
            s.p.requeue_in(self.settings.poll_s)
            return [verdict, lost]
        return [*act(s, f), lost]

    def claim_gone(self, s: Scene, f: Finding) -> list[Wait]:
        """ClaimGone: wait for the old claim to go, then delete the pending pod."""
        if f.claim is not None:
            s.p.requeue_in(self.settings.poll_s)
            return [Wait("Replacing", f"pod {f.pod} waits for its old claim to go")]
        # The StatefulSet recreated the pod while the old claim was still going: the pod names
        # a claim that is gone and would wait forever. Deleted, it comes back with a new claim.
        force_delete(self.kube, s.pods[f.pod])
        failpoints.reached("failover.pending-pod-deleted")
        s.p.requeue_in(self.settings.poll_s)
        return [Wait("Replacing", f"pod {f.pod} is recreated with a new claim")]

    def crash_loop(self, s: Scene, f: Finding) -> list[Wait]:
        """CrashLoop: CrashLoops.restart, under the same guards as a lost node."""
        return self.crashes.restart(s.p, s.cluster, f, s.pods, lambda: self.guard(s, f))

    def store_replaced(self, s: Scene, f: Finding) -> list[Wait]:
        """StoreReplaced: decommission the lost stores' node ids KaiwuDB shows not live now
        beside a live one of the same pod; Stalled where KaiwuDB cannot decommission."""
        p, cluster = s.p, s.cluster
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
            return []
        runner = exec_pod(s.pods)
        if runner is None:
            p.requeue_in(self.settings.poll_s)
            return [Wait("Replacing", f"no pod runs kwbase to decommission the lost node(s) "
                                      f"{ids}")]
        admin = self.ctx.admin(cluster)
        try:
            # Decided on a fresh look, never on a remembered one: only ids KaiwuDB shows not
            # live now, beside a live id at the same address.
            entries = node_entries(admin.node_status(runner, decommission=True))
            dead = list(replaced_stores(entries).get(f.pod, ()))
            if dead:
                admin.decommission(runner, dead)
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="failover").inc()
            p.requeue_in(self.settings.poll_s)
            return [Wait("Replacing", f"decommission of the lost node(s) {ids} failed "
                                      f"(retrying): {error}")]
        if not dead:
            return []
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
        return []

    STAGES: Final[Mapping[FailoverStage, Handler]] = {
        NODE_LOST: node_lost,
        VOLUME_ON_LOST_NODE: volume_on_lost_node,
        CLAIM_GONE: claim_gone,
        STORE_REPLACED: store_replaced,
        CRASH_LOOP: crash_loop,
    }
    """Each failover stage's handler, in the order a pod may go through them."""

    # ---- guards ----------------------------------------------------------------------------

    def lost_long_enough(self, s: Scene, f: Finding) -> bool:
        """The node has been lost for nodeLostTimeout (else look again when it will have)."""
        timeout = s.cluster.failover.node_lost_timeout.total_seconds()
        since = f.since if f.since is not None else s.p.now
        if since + timeout > s.p.now:
            s.p.requeue_in(since + timeout - s.p.now)
            return False
        return True

    def guard(self, s: Scene, f: Finding) -> Verdict:
        """May pod f.pod be disrupted anew now (see the module docstring's guards)?"""
        operation = s.p.kaiwu.operation
        if operation is not None and operation.pod == f.pod:
            # Its store is being drained; a fresh store here would be a live node removed
            # undrained when the StatefulSet shrinks. The scale-in finishes with it.
            return self.waiting(f, "it is the pod a scale-in removes")
        backup = running_backup(self.view, s.p.key.namespace, s.p.key.name)
        if backup:
            # It fails by itself if this pod was its node; otherwise it finishes first.
            return self.waiting(f, f"KaiwuBackup {backup} is running")
        lost = sorted({other.pod for other in s.findings if other.pod != f.pod
                       and other.stage in (NODE_LOST, VOLUME_ON_LOST_NODE)})
        if lost:
            return self.waiting(f, (
                f"other pods are failing too ({', '.join(lost)}): one node at a time, and "
                "never below quorum; bring nodes back or replace pods by hand"))
        down = sorted(set(disrupted(self.view, s.pods, s.names)) - {f.pod})
        if down:
            return self.waiting(f, f"pods {', '.join(down)} are not Ready yet: one pod at a "
                                   "time")
        return GO

    @staticmethod
    def waiting(f: Finding, why: str) -> Wait:
        return Wait("FailoverWaiting", f"pod {f.pod}: {why}")

    # ---- writes ----------------------------------------------------------------------------

    def evict(self, s: Scene, f: Finding) -> list[Wait]:
        """Force-delete the pod on the lost node, and its claim with it when the policy allows
        and its volume is on that node (one step: the new pod then needs no second pass)."""
        p, cluster = s.p, s.cluster
        back = self.came_back(p, f)
        if back is not None:
            return back
        said: list[Wait] = []
        pod = s.pods[f.pod]
        claim = claim_of(self.view, self.kube, cluster.namespace, f.pod)
        replace = ""
        if cluster.failover.replace_lost_volumes and claim is not None and \
                not meta(claim).get("deletionTimestamp") and \
                volume_node(self.kube, claim) == f.node:
            verdict = kaiwudb_allows_replacing(
                self.ctx.admin(cluster), self.metrics, p, cluster, f.pod, s.pods)
            if isinstance(verdict, Wait):
                said.append(Wait(verdict.reason, f"pod {f.pod}: force-deleted; its volume is "
                                                 f"replaced later: {verdict.message}"))
            else:
                replace = self.delete_claim(cluster, claim)
        force_delete(self.kube, pod)
        failpoints.reached("failover.pod-force-deleted")
        self.count("force-delete-pod")
        timeout = cluster.failover.node_lost_timeout.total_seconds()
        p.act("PodForceDeleted", f"Pod/{f.pod}", (
            f"its node {f.node} has been {f.node_ready} since {rfc3339(f.since or p.now)} "
            f"(longer than nodeLostTimeout {timeout:g}s): force-deleted so the StatefulSet "
            "recreates it"), event="Warning")
        if replace:
            self.announce_volume(p, f, replace)
        p.requeue_in(self.settings.poll_s)
        return said

    def replace_volume(self, s: Scene, f: Finding) -> list[Wait]:
        """The pod is gone or pending; its volume is on the lost node: give it up."""
        p = s.p
        back = self.came_back(p, f)
        if back is not None:
            return back
        verdict = kaiwudb_allows_replacing(self.ctx.admin(s.cluster), self.metrics, p,
                                           s.cluster, f.pod, s.pods)
        if isinstance(verdict, Wait):
            p.requeue_in(self.settings.poll_s)
            return [Wait(verdict.reason, f"pod {f.pod}: the volume is replaced only when "
                                         f"KaiwuDB allows: {verdict.message}")]
        assert f.claim is not None
        name = self.delete_claim(s.cluster, f.claim)
        pending = s.pods.get(f.pod)
        if pending is not None:
            # The pending pod holds on to the old claim's name: delete it too, so the
            # StatefulSet creates a new claim (a fresh volume on a live node) with the next pod.
            force_delete(self.kube, pending)
        failpoints.reached("failover.claim-deleted")
        self.announce_volume(p, f, name)
        p.requeue_in(self.settings.poll_s)
        return []

    def came_back(self, p: Pass, f: Finding) -> list[Wait] | None:
        """None while the lost node is still lost in a fresh read of the API; else the pod is
        left alone, and this says why (nothing once the node is Ready again). The watch cache
        may lag a node's return by a moment, and nothing is force-deleted or given up on a
        stale look (the soak saw a volume given up 0.1 s after its node came back)."""
        try:
            fresh = node_loss(self.kube, f.node)
        except ApiError as error:
            self.metrics.errors_total.labels(stage="failover").inc()
            p.requeue_in(self.settings.poll_s)
            return [self.waiting(f, f"node {f.node} could not be read again before acting: "
                                    f"{error}")]
        if fresh is not None:
            return None
        log.info("node %s is Ready again: pod %s and its volume are left alone", f.node, f.pod)
        p.requeue_in(self.settings.poll_s)
        return []

    def announce_volume(self, p: Pass, f: Finding, claim_name: str) -> None:
        self.count("replace-volume")
        p.act("VolumeReplaced", f"PersistentVolumeClaim/{claim_name}", (
            f"its volume is on the lost node {f.node}: deleted with pod {f.pod}, so a fresh "
            "store starts on a live node; the lost store's KaiwuDB node is decommissioned once "
            "the new one is live"), event="Warning")

    def delete_claim(self, cluster: Cluster, claim: Obj) -> str:
        delete_claim(self.kube, cluster.namespace, claim)
        return str(meta(claim).get("name"))
