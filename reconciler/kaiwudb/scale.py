"""Scale-in through decommission, one node at a time, as explicit phases.

A scale-in: the StatefulSet has more replicas than spec.replicas, whoever raised it (the spec
lowered, or someone scaling the StatefulSet up by hand: the same world, so the same step;
killing a joined pod instead can take the quorum of a range with two replicas, one on it),
unless spec.drift.ignore hands the replicas to someone else. Multi-replica only (the renderer
already refuses fewer than 3 nodes, and a single-replica cluster is refused here, Stalled, the
extra pods kept): the highest ordinal first, one at a time. Scale-out needs nothing: new pods
join through --join; their node ids show in status.nodes.

The operation is kept in `status.operation` (reconciler.model.ScaleIn), so a restarted
reconciler resumes it. Its phases, one method of `Scaling` each:

  1. start (`Scaling.start`, no operation yet): the guards (`Scaling.start_guard`: every node
     live, none other decommissioning, no pod down, replication healthy, no conflicting job)
     give a reconciler.reasons.Verdict; on GO the target pod's live node id is decommissioned
     (--wait=none) and the operation begins in phase Decommissioning. A pod that never joined
     (no view lists its node, `Scaling.seen_elsewhere`) goes straight to Removing.
  2. Decommissioning (`Scaling.drain`): passes poll (requeue, never blocking a worker) until
     the node holds no replicas (`Scaling.replicas_left`), then the phase is Removing, in the
     same pass. "No replicas" is the `replicas` column of `node decommission <id> --wait=none`,
     asked again on every poll: a meta scan of the range descriptors. Never the
     gossiped_replicas of `node status`: that expires to 0 two minutes after a node stops
     gossiping, so a node that dies mid-drain would look empty while descriptors still list
     replicas on it (a decommissioned store can never rejoin: a later scale-out must start
     with an empty volume).
  3. Removing (`Scaling.remove`): the StatefulSet shrinks by one, the pod goes (force-deleted
     if its Kubernetes node is lost), then the claim of the removed ordinal; the operation
     ends, and the next pass starts on the next node.
  Cancelled (`Scaling.cancel`), from any phase: a scale-out while a node is still
  decommissioning recommissions it and ends the operation; so does a StatefulSet raised by
  hand past the operation (shrinking it then would take the pods above undrained): the next
  pass starts again from the highest pod.

Nodes gone without a scale-in (strays, long-gone nodes, wanted nodes that came back
decommissioning) are reconciler.kaiwudb.strays'. Used by the lifecycle step
(reconciler.kaiwudb.lifecycle).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.kwbase.jobs import RunningJobs
from reconciler.kaiwudb.kwbase.nodes import NodeStatus
from reconciler.kaiwudb.loss import disrupted, node_loss, pod_node
from reconciler.kaiwudb.nodes import Nodes
from reconciler.kaiwudb.pods import (
    CLAIM_TEMPLATE,
    claim_of,
    delete_claim,
    exec_pod,
    force_delete,
    kwbase_running,
)
from reconciler.kaiwudb.tools import Part
from reconciler.model import Obj, Pass, ScaleIn, meta, rfc3339
from reconciler.reasons import DECOMMISSIONING, GO, REMOVING, Verdict, Wait
from renderer.spec import Cluster, StartMode

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Unknown:
    """The replicas left on a node could not be counted: why."""

    why: str


ReplicasLeft = int | Unknown
"""What `Scaling.replicas_left` finds: the count range descriptors list, or Unknown."""


@dataclass(frozen=True)
class ScaleScene:
    """What the lifecycle step hands each scale-in phase: the pass, the cluster's pods, the
    kwbase adapter, KaiwuDB's nodes (None when the probe failed: it said why and requeued) and
    the StatefulSet's replicas (None without a StatefulSet)."""

    p: Pass
    cluster: Cluster
    pods: Mapping[str, Obj]
    admin: KwbaseAdmin
    nodes: list[NodeStatus] | None
    live_replicas: int | None


class Scaling(Part):
    """Scale-in through decommission, one node at a time (see the module docstring)."""

    def __init__(self, ctx: StepContext, nodes: Nodes) -> None:
        super().__init__(ctx)
        self.nodes = nodes

    @staticmethod
    def override_replicas(p: Pass, replicas: int) -> None:
        """The StatefulSet replicas this pass renders (else spec.replicas)."""
        p.live = replace(p.live, replicas=replicas)

    def continue_scale_in(self, s: ScaleScene, operation: ScaleIn) -> None:
        """The operation's next phase: cancelled when the StatefulSet was raised past it,
        else drain (Decommissioning), then remove (Removing)."""
        # Someone raised the StatefulSet past the operation (kubectl scale): its pod is no longer
        # the highest, and shrinking now would take the pods above it undrained. The operation
        # ends as a scale-out's does; the next pass starts again from the highest pod.
        if s.live_replicas is not None and s.live_replicas > operation.replicas:
            self.cancel(s, operation, keep=s.live_replicas, why=(
                f"the StatefulSet was raised to {s.live_replicas} during the scale-in"))
            return
        if operation.phase == DECOMMISSIONING and operation.node_id is not None:
            drained = self.drain(s, operation, operation.node_id)
            if drained is None:
                return
            operation = drained
        self.remove(s, operation)

    # ---- the phases ------------------------------------------------------------------------

    def start(self, s: ScaleScene) -> None:
        """Phase 1: no operation yet. On the guards' GO, decommission the target pod's node and
        begin the operation (Decommissioning; Removing for a pod that never joined)."""
        p, cluster, pods, admin, nodes = s.p, s.cluster, s.pods, s.admin, s.nodes
        assert s.live_replicas is not None
        live_replicas = s.live_replicas
        self.override_replicas(p, live_replicas)
        if cluster.start_mode is not StartMode.MULTI_REPLICA:
            p.stalled.append(("ScaleInRefused", (
                f"a {cluster.start_mode.value} cluster cannot scale in (its data has one copy: "
                f"removing a node loses it); set spec.replicas to {live_replicas}")))
            return
        if nodes is None:
            return  # node status unknown: the probe said why and requeued
        target = cluster.pod_name(live_replicas - 1)
        kept = [cluster.pod_name(i) for i in range(live_replicas - 1)]
        verdict = self.start_guard(nodes, admin, pods, target, kept)
        if isinstance(verdict, Wait):
            p.not_ready.append(("ScaleInWaiting", f"scale-in to {cluster.replicas} waits: "
                                f"{verdict.message}"))
            p.progressing.append(("ScaleInWaiting", verdict.message))
            p.requeue_in(self.settings.poll_s)
            return
        # The store the target pod runs now: live (an older, dead id of the same pod is not it).
        # It may already be decommissioning (by hand, or restarted after a decommission):
        # decommissioning it again is harmless, and gives the authoritative replica count.
        node = next((n for n in nodes if n.pod_name == target and n.is_live), None)
        if node is None:
            # Absence from one gateway's view is no evidence: a gateway restarted moments ago
            # lists only the nodes it has heard from yet (kwbase/pkg/cli/node.go:165-179 reads
            # its gossip). Before the pod is removed as one that never joined, its own view and
            # a second gateway's must not list it either.
            try:
                seen = self.seen_elsewhere(admin, pods, target)
            except KwbaseError as error:
                self.retry_later(p, "ScaleInWaiting", f"a second view of pod {target}'s node",
                                 error)
                return
            if seen is not None:
                if not seen.is_live:
                    p.not_ready.append(("ScaleInWaiting", (
                        f"scale-in to {cluster.replicas} waits: KaiwuDB node {seen.id} of pod "
                        f"{target} is listed by another view, not live; it is decommissioned "
                        "once live views agree")))
                    p.progressing.append(("ScaleInWaiting", f"node {seen.id} of {target} not "
                                          "in every view"))
                    p.requeue_in(self.settings.poll_s)
                    return
                node = seen
        operation = ScaleIn(replicas=live_replicas, target_replicas=cluster.replicas,
                            pod=target, started_at=rfc3339(p.now), phase=REMOVING)
        if node is None:
            pass  # the pod never joined (or its node is already gone): nothing to decommission
        else:
            runner = exec_pod(pods, avoid=target)
            assert runner is not None  # start_guard checked every node is live
            try:
                admin.decommission(runner, [node.id])
            except KwbaseError as error:
                self.retry_later(p, "ScaleInWaiting", f"decommission of node {node.id}", error)
                return
            operation = replace(operation, phase=DECOMMISSIONING, node_id=node.id)
            self.count("decommission")
            p.act("Decommissioning", f"Pod/{target}", (
                f"scale-in {live_replicas} -> {cluster.replicas}: decommissioning KaiwuDB node "
                f"{node.id}; the pod is removed once it holds no replicas"))
        p.kaiwu.operation = operation
        self.scaling(p, operation)

    def drain(self, s: ScaleScene, operation: ScaleIn, node_id: int) -> ScaleIn | None:
        """Phase 2, Decommissioning: the operation in phase Removing once node_id holds no
        replicas; None while it still does, or when the operation ended (cancelled by a
        scale-out, or the node recommissioned by someone)."""
        p, cluster = s.p, s.cluster
        replicas, pod = operation.replicas, operation.pod
        self.override_replicas(p, replicas)
        if cluster.replicas >= replicas:
            self.cancel(s, operation, keep=cluster.replicas,
                        why=f"spec.replicas is {cluster.replicas} again")
            return None
        if s.nodes is None:
            self.scaling(p, operation)
            return None
        node = next((n for n in s.nodes if n.id == node_id), None)
        if node is not None and not node.is_decommissioning:
            # Someone recommissioned it: the scale-in starts again from its checks.
            p.kaiwu.operation = None
            p.requeue_in(0)
            return None
        left = self.replicas_left(s.pods, s.admin, node_id, pod)
        if left != 0:
            self.scaling(p, operation, left)
            return None
        operation = replace(operation, phase=REMOVING)
        p.kaiwu.operation = operation
        p.act("NodeDecommissioned", f"Pod/{pod}", f"KaiwuDB node {node_id} holds no "
              f"replicas (range descriptors list none): the StatefulSet shrinks to "
              f"{replicas - 1}", event="Normal")
        return operation

    def remove(self, s: ScaleScene, operation: ScaleIn) -> None:
        """Phase 3, Removing: the StatefulSet shrinks, the pod goes, then its claim; the
        operation ends."""
        p, cluster, pods = s.p, s.cluster, s.pods
        replicas, pod = operation.replicas, operation.pod
        self.override_replicas(p, replicas - 1)
        if s.live_replicas is not None and s.live_replicas > replicas - 1:
            p.sync = True  # the shrink is applied whatever the drift policy says
            self.scaling(p, operation)
            return
        if pod in pods:
            self.release_on_lost_node(p, pods[pod])
            self.scaling(p, operation)  # the pod is terminating
            return
        claim_name = f"{CLAIM_TEMPLATE}-{pod}"
        claim = claim_of(self.view, self.kube, cluster.namespace, pod)
        if claim is not None and not meta(claim).get("deletionTimestamp"):
            delete_claim(self.kube, cluster.namespace, claim)
            self.count("delete-claim")
            p.act("ClaimDeleted", f"PersistentVolumeClaim/{claim_name}", (
                "the store of a decommissioned node can never rejoin: its claim is deleted so "
                "a later scale-out starts with an empty volume"))
        p.kaiwu.operation = None
        self.count("scale-in-step")
        p.act("ScaledIn", f"StatefulSet/{cluster.name}", f"{replicas} -> {replicas - 1} "
              f"replicas ({pod} removed)")
        if replicas - 1 > cluster.replicas:
            p.requeue_in(0)  # the next node
        self.nodes.forget(cluster.namespace, cluster.name)

    def cancel(self, s: ScaleScene, operation: ScaleIn, *, keep: int, why: str) -> None:
        """A scale-out came, or the StatefulSet was raised, while the operation ran: recommission
        its node (if it has one), drop the operation, and render `keep` replicas."""
        p, node_id, pod = s.p, operation.node_id, operation.pod
        self.override_replicas(p, max(keep, p.live.replicas or 0))
        if node_id is not None:
            runner = exec_pod(s.pods)
            if runner is None:
                p.not_ready.append(("ScalingIn", "recommission waits for a pod that runs kwbase"))
                p.requeue_in(self.settings.poll_s)
                return
            try:
                s.admin.recommission(runner, [node_id])
            except KwbaseError as error:
                self.retry_later(p, "ScalingIn", f"recommission of node {node_id}", error)
                return
            self.count("recommission")
        p.kaiwu.operation = None
        self.override_replicas(p, keep)
        p.act("Recommissioned" if node_id is not None else "ScaleInCancelled", f"Pod/{pod}", (
            f"{why}: " + (f"KaiwuDB node {node_id} recommissioned, " if node_id is not None
                          else "") + "scale-in cancelled"))
        p.requeue_in(self.settings.poll_s)

    # ---- what the phases ask ---------------------------------------------------------------

    def start_guard(self, nodes: Sequence[NodeStatus], admin: KwbaseAdmin,
                    pods: Mapping[str, Obj], target: str, kept: list[str]) -> Verdict:
        """May a scale-in step start now? `target` is the pod it would drain, `kept` the pods
        that stay."""
        counted = [n for n in nodes if not (n.is_decommissioning and not n.is_live)]
        not_live = [n for n in counted if not n.healthy]
        if not_live:
            return Wait("ScaleInWaiting", "KaiwuDB nodes not live: " + ", ".join(
                str(n.id) for n in not_live))
        busy = [n for n in counted if n.is_decommissioning and n.pod_name != target]
        if busy:
            return Wait("ScaleInWaiting", "KaiwuDB nodes decommissioning: " + ", ".join(
                str(n.id) for n in busy))
        # KaiwuDB may still count a node live whose pod is already down (its liveness outlives
        # the process by seconds, and a failing readiness probe is not a dead node): a drain
        # beside it would be a second disruption.
        down = disrupted(self.view, pods, kept)
        if down:
            return Wait("ScaleInWaiting", "pods are down: " + ", ".join(down))
        runner = exec_pod(pods, avoid=target)
        if runner is None:
            return Wait("ScaleInWaiting", "no pod runs kwbase")
        try:
            health = admin.replication_health(runner)
            jobs = admin.running_jobs(runner) if health.healthy else RunningJobs()
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            return Wait("ScaleInWaiting", f"replication health unknown: {error}")
        if not health.healthy:
            return Wait("ScaleInWaiting", health.describe())
        conflicting = jobs.describe_conflicting()
        return Wait("ScaleInWaiting", conflicting) if conflicting else GO

    def seen_elsewhere(self, admin: KwbaseAdmin, pods: Mapping[str, Obj],
                       target: str) -> NodeStatus | None:
        """The target pod's node as the target itself or a second gateway lists it (None when
        neither does). KwbaseError when the second gateway's view cannot be had: the caller
        waits. The target not answering is no evidence either way: a pod that never joined
        cannot."""
        first = exec_pod(pods, avoid=target)
        other = exec_pod({n: o for n, o in pods.items() if n not in (first, target)})
        gateways = ([target] if kwbase_running(pods.get(target)) else []) + (
            [other] if other is not None else [])
        for gateway in gateways:
            try:
                shown = admin.node_status(gateway)
            except KwbaseError:
                if gateway == target:
                    continue
                raise
            mine = [n for n in shown if n.pod_name == target
                    and not (n.is_decommissioning and not n.is_live)]
            if mine:
                return max(mine, key=lambda n: (n.is_live, n.id))
        return None

    def replicas_left(self, pods: Mapping[str, Obj], admin: KwbaseAdmin, node_id: int,
                      pod: str) -> ReplicasLeft:
        """The replicas range descriptors still list on node_id: the `replicas` column of
        `node decommission <id> --wait=none` (a meta scan; asking again is idempotent while
        the node decommissions). Unknown, saying why, when no pod could answer."""
        runner = exec_pod(pods, avoid=pod)
        if runner is None or runner == pod:
            # Never ask the node being removed: it may be gone or cut off.
            return Unknown("no other pod runs kwbase")
        try:
            found = [s for s in admin.decommission(runner, [node_id]) if s.id == node_id]
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            return Unknown(str(error))
        if not found:
            return Unknown(f"node {node_id} missing from the decommission status")
        return 0 if found[0].drained_of_replicas else max(found[0].replicas, 1)

    def scaling(self, p: Pass, operation: ScaleIn, left: ReplicasLeft | None = None) -> None:
        """Say where the operation is (Ready and Reconciling: ScalingIn) and look again soon."""
        message = (f"scaling in {operation.replicas} -> {operation.target_replicas}: "
                   + (f"decommissioning KaiwuDB node {operation.node_id} "
                      f"({operation.pod})" if operation.phase == DECOMMISSIONING
                      else f"removing pod {operation.pod}"))
        if isinstance(left, int):
            message += f", {left} replicas left on it"
        elif left is not None and left.why:
            message += f"; replica count unknown ({left.why})"
        p.not_ready.append(("ScalingIn", message))
        p.progressing.append(("ScalingIn", message))
        p.requeue_in(self.settings.poll_s)

    def release_on_lost_node(self, p: Pass, pod: Obj) -> None:
        """The pod the StatefulSet let go (terminating) is on a Kubernetes node that is not
        Ready: no kubelet will confirm its deletion, and the failover step looks only at the
        pods the StatefulSet wants. Its store is decommissioned and holds no replicas (or never
        joined), and no pod of its name comes back while the StatefulSet is smaller: it is
        force-deleted, so the scale-in can finish."""
        node = pod_node(pod)
        loss = node_loss(self.view, node) if node else None
        if loss is None or not meta(pod).get("deletionTimestamp"):
            return
        force_delete(self.kube, pod)
        self.count("force-delete-removed-pod")
        p.act("PodForceDeleted", f"Pod/{meta(pod).get('name')}", (
            f"scale-in: its node {node} is {loss.status} and no kubelet will confirm the "
            "deletion; its KaiwuDB store holds no replicas: force-deleted"), event="Warning")
