"""Scale-in through decommission, stray nodes, and nodes that come back decommissioning.

- stray nodes: a KaiwuDB node that is not live and whose pod's ordinal is beyond the
  StatefulSet (its pod was removed without a decommission: someone scaled the StatefulSet
  down by hand, or a scale-in's pod went in a version before hand scale-ups were scaled in)
  is decommissioned, so its ranges re-replicate and
  it stops counting as a node; its claim is deleted once KWDB's meta scan counts no replica on
  it. A single-replica cluster cannot decommission (KWDB refuses in "mpp mode") and the stray
  store holds the only copy of its ranges: nothing is removed, Stalled says how to bring the
  pod back (raise spec.replicas past its ordinal).
- a node that is live and decommissioning while its pod is one the spec wants (decommissioned
  by hand, or a decommissioned store restarted: KWDB V3.2.1 lets it rejoin) is recommissioned,
  so it holds replicas again and stops blocking scale-ins; one the spec does not want is the
  scale-in's target and is finished removing.
- scale-out needs nothing: new pods join through --join; their node ids show in status.nodes.
- scale-in: the StatefulSet has more replicas than spec.replicas, whoever raised it (the spec
  lowered, or someone scaling the StatefulSet up by hand: the same world, so the same step;
  killing a joined pod instead can take the quorum of a range with two replicas, one on it),
  unless spec.drift.ignore hands the replicas to someone else. Multi-replica only (the
  renderer already refuses fewer than 3 nodes, and a single-replica cluster is refused here,
  Stalled, the extra pods kept): the highest ordinal first, one at a time.
  With every node live and replication healthy, its node id is decommissioned (--wait=none);
  passes poll (requeue, never blocking a worker) until it holds no replicas, then the
  StatefulSet shrinks by one and the claim of the removed ordinal is deleted. "No replicas" is
  the `replicas` column of `node decommission <id> --wait=none`, asked again on every poll: a
  meta scan of the range descriptors. Never the gossiped_replicas of `node status`: that
  expires to 0 two minutes after a node stops gossiping, so a node that dies mid-drain would
  look empty while descriptors still list replicas on it (a decommissioned
  store can never rejoin: a later scale-out must start with an empty volume). The operation is
  kept in `status.operation`, so a restarted reconciler resumes it. A scale-out while a node is
  still decommissioning recommissions it and cancels the operation; so does a StatefulSet raised
  by hand past the operation (shrinking it then would take the pods above undrained): the next
  pass starts again from the highest pod.

Used by the lifecycle step (reconciler.kaiwudb.lifecycle).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from reconciler.kaiwudb.kwbase import (
    KwbaseAdmin,
    KwbaseError,
    NodeStatus,
    RunningJobs,
)
from reconciler.kaiwudb.loss import disrupted, node_loss, pod_node
from reconciler.kaiwudb.nodes import Nodes
from reconciler.kaiwudb.pods import (
    CLAIM_TEMPLATE,
    claim_of,
    exec_pod,
    force_delete,
    kwbase_running,
    ordinal,
)
from reconciler.kaiwudb.tools import Part, Tools
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import Obj, Pass, ScaleIn, meta, rfc3339
from renderer.spec import Cluster, StartMode

log = logging.getLogger(__name__)

DECOMMISSIONING = "Decommissioning"
REMOVING = "Removing"


class Scaling(Part):
    """Scale-in through decommission, one node at a time (see the module docstring)."""

    def __init__(self, tools: Tools, nodes: Nodes) -> None:
        super().__init__(tools)
        self.nodes = nodes

    @staticmethod
    def override_replicas(p: Pass, replicas: int) -> None:
        """The StatefulSet replicas this pass renders (else spec.replicas)."""
        p.live = replace(p.live, replicas=replicas)

    def start_scale_in(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
                       admin: KwbaseAdmin, nodes: list[NodeStatus] | None,
                       live_replicas: int) -> None:
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
        waiting = self.scale_in_blocker(nodes, admin, pods, target, kept)
        if waiting:
            p.not_ready.append(("ScaleInWaiting", f"scale-in to {cluster.replicas} waits: "
                                f"{waiting}"))
            p.progressing.append(("ScaleInWaiting", waiting))
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
            assert runner is not None  # scale_in_blocker checked every node is live
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

    def scale_in_blocker(self, nodes: Sequence[NodeStatus], admin: KwbaseAdmin,
                         pods: Mapping[str, Obj], target: str, kept: list[str]) -> str:
        """Why a scale-in step may not start now ("" when it may): `target` is the pod it
        would drain, `kept` the pods that stay."""
        counted = [n for n in nodes if not (n.is_decommissioning and not n.is_live)]
        not_live = [n for n in counted if not n.healthy]
        if not_live:
            return "KaiwuDB nodes not live: " + ", ".join(str(n.id) for n in not_live)
        busy = [n for n in counted if n.is_decommissioning and n.pod_name != target]
        if busy:
            return "KaiwuDB nodes decommissioning: " + ", ".join(str(n.id) for n in busy)
        # KaiwuDB may still count a node live whose pod is already down (its liveness outlives
        # the process by seconds, and a failing readiness probe is not a dead node): a drain
        # beside it would be a second disruption.
        down = disrupted(self.view, pods, kept)
        if down:
            return "pods are down: " + ", ".join(down)
        runner = exec_pod(pods, avoid=target)
        if runner is None:
            return "no pod runs kwbase"
        try:
            health = admin.replication_health(runner)
            jobs = admin.running_jobs(runner) if health.healthy else RunningJobs()
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            return f"replication health unknown: {error}"
        if not health.healthy:
            return health.describe()
        return jobs.describe_conflicting()

    def scaling(self, p: Pass, operation: ScaleIn, left: int | str | None = None) -> None:
        message = (f"scaling in {operation.replicas} -> {operation.target_replicas}: "
                   + (f"decommissioning KaiwuDB node {operation.node_id} "
                      f"({operation.pod})" if operation.phase == DECOMMISSIONING
                      else f"removing pod {operation.pod}"))
        if isinstance(left, int):
            message += f", {left} replicas left on it"
        elif left:
            message += f"; replica count unknown ({left})"
        p.not_ready.append(("ScalingIn", message))
        p.progressing.append(("ScalingIn", message))
        p.requeue_in(self.settings.poll_s)

    def continue_scale_in(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
                          admin: KwbaseAdmin, nodes: list[NodeStatus] | None,
                          operation: ScaleIn, live_replicas: int | None) -> None:
        replicas = operation.replicas
        pod = operation.pod
        # Someone raised the StatefulSet past the operation (kubectl scale): its pod is no longer
        # the highest, and shrinking now would take the pods above it undrained. The operation
        # ends as a scale-out's does; the next pass starts again from the highest pod.
        raised = live_replicas is not None and live_replicas > replicas
        if raised:
            assert live_replicas is not None
            self.cancel(p, cluster, pods, admin, operation.node_id, pod, keep=live_replicas,
                        why=f"the StatefulSet was raised to {live_replicas} during the scale-in")
            return
        if operation.phase == DECOMMISSIONING and operation.node_id is not None:
            self.override_replicas(p, replicas)
            node_id = operation.node_id
            if cluster.replicas >= replicas:
                self.cancel(p, cluster, pods, admin, node_id, pod, keep=cluster.replicas,
                            why=f"spec.replicas is {cluster.replicas} again")
                return
            if nodes is None:
                self.scaling(p, operation)
                return
            node = next((n for n in nodes if n.id == node_id), None)
            if node is not None and not node.is_decommissioning:
                # Someone recommissioned it: the scale-in starts again from its checks.
                p.kaiwu.operation = None
                p.requeue_in(0)
                return
            remaining = self.replicas_left(pods, admin, node_id, pod)
            if remaining != 0:
                self.scaling(p, operation, remaining)
                return
            operation = replace(operation, phase=REMOVING)
            p.kaiwu.operation = operation
            p.act("NodeDecommissioned", f"Pod/{pod}", f"KaiwuDB node {node_id} holds no "
                  f"replicas (range descriptors list none): the StatefulSet shrinks to "
                  f"{replicas - 1}", event="Normal")
        # REMOVING: the StatefulSet shrinks, the pod goes, then its claim.
        self.override_replicas(p, replicas - 1)
        if live_replicas is not None and live_replicas > replicas - 1:
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
            try:
                self.kube.delete(k.PVC, cluster.namespace, claim_name,
                                 uid=meta(claim).get("uid"))
            except ApiError as error:
                if not error.conflict:
                    raise
            self.metrics.writes_total.labels(verb="delete", kind="PersistentVolumeClaim").inc()
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
        force_delete(self.kube, self.metrics, pod)
        self.count("force-delete-removed-pod")
        p.act("PodForceDeleted", f"Pod/{meta(pod).get('name')}", (
            f"scale-in: its node {node} is {loss.status} and no kubelet will confirm the "
            "deletion; its KaiwuDB store holds no replicas: force-deleted"), event="Warning")

    def replicas_left(self, pods: Mapping[str, Obj], admin: KwbaseAdmin, node_id: int,
                      pod: str) -> int | str:
        """The replicas range descriptors still list on node_id: the `replicas` column of
        `node decommission <id> --wait=none` (a meta scan; asking again is idempotent while
        the node decommissions). Why it is unknown, as text, when no pod could answer."""
        runner = exec_pod(pods, avoid=pod)
        if runner is None or runner == pod:
            # Never ask the node being removed: it may be gone or cut off.
            return "no other pod runs kwbase"
        try:
            found = [s for s in admin.decommission(runner, [node_id]) if s.id == node_id]
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            return str(error)
        if not found:
            return f"node {node_id} missing from the decommission status"
        return 0 if found[0].drained_of_replicas else max(found[0].replicas, 1)

    def cancel(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj], admin: KwbaseAdmin,
               node_id: int | None, pod: str, *, keep: int, why: str) -> None:
        """A scale-out came, or the StatefulSet was raised, while the operation ran: recommission
        its node (if it has one), drop the operation, and render `keep` replicas."""
        self.override_replicas(p, max(keep, p.live.replicas or 0))
        if node_id is not None:
            runner = exec_pod(pods)
            if runner is None:
                p.not_ready.append(("ScalingIn", "recommission waits for a pod that runs kwbase"))
                p.requeue_in(self.settings.poll_s)
                return
            try:
                admin.recommission(runner, [node_id])
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


class Strays(Part):
    """Nodes whose pods are gone without a decommission, and wanted nodes that came back
    decommissioning (see the module docstring)."""

    def __init__(self, tools: Tools, nodes: Nodes, scaling: Scaling) -> None:
        super().__init__(tools)
        self.nodes = nodes
        self.scaling = scaling

    def retire_long_gone(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
                         admin: KwbaseAdmin, nodes: Sequence[NodeStatus]) -> None:
        """Decommission node ids KaiwuDB shows long gone (NodeStatus.long_gone: down an hour at
        least, their address forgotten). Without an address no pod can be paired with them, so
        neither store replacement nor stray removal would ever retire them, and as not-live
        nodes they would hold every later scale-in, rollout and failover for ever. They run
        nowhere: KWDB re-replicated their ranges after its dead-store timeout, and decommission
        only has it move what is left. Should one come back, it rejoins decommissioning and
        `recommission_wanted` recommissions it if its pod is wanted. Multi-replica only: KWDB
        refuses decommission in the other modes (server/admin.go, "mpp mode")."""
        gone = [n for n in nodes if n.long_gone(p.now, self.settings.long_gone_after_s)]
        if not gone:
            return
        ids = [n.id for n in gone]
        if cluster.start_mode is not StartMode.MULTI_REPLICA:
            p.stalled.append(("LongGoneNodes", (
                f"KaiwuDB node(s) {', '.join(map(str, ids))} have not run for over an hour and "
                f"KaiwuDB no longer knows their address; a {cluster.start_mode.value} cluster "
                "cannot decommission them and keeps one copy of each range: restore what they "
                "held from a backup")))
            return
        runner = exec_pod(pods)
        if runner is None:
            return
        try:
            admin.decommission(runner, ids)
        except KwbaseError as error:
            self.retry_later(p, "LongGoneNodes", f"decommission of long-gone nodes {ids}", error)
            return
        self.count("decommission-long-gone-node")
        p.act("LongGoneNodeDecommissioned", f"StatefulSet/{cluster.name}", (
            f"KaiwuDB node(s) {', '.join(map(str, ids))} have not run for over an hour and "
            "KaiwuDB no longer knows their address (no pod can be matched to them): "
            "decommissioned, so they stop holding back scale-ins, rollouts and failovers"),
            event="Warning")
        self.nodes.forget(cluster.namespace, cluster.name)
        p.requeue_in(self.settings.poll_s)

    def remove_strays(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
                      admin: KwbaseAdmin, nodes: Sequence[NodeStatus],
                      live_replicas: int) -> None:
        """Nodes of pods beyond the StatefulSet, gone without a decommission (see the module
        docstring): decommission them, then delete each one's claim once KWDB counts no
        replica on it."""
        beyond = [n for n in nodes if not n.is_live and n.pod_name and n.pod_name not in pods
                  and ordinal(n.pod_name) >= live_replicas]
        strays = [n for n in beyond if not n.is_decommissioning]
        if strays and cluster.start_mode is StartMode.SINGLE_REPLICA:
            # KWDB refuses to decommission in single-replica ("mpp") mode, and each range has
            # one replica: the stray store holds the only copy of its ranges. Keep its claim.
            names = sorted({str(n.pod_name) for n in strays}, key=ordinal)
            p.stalled.append(("StrayNodeNotRemovable", (
                f"KaiwuDB node(s) {', '.join(str(n.id) for n in strays)} of pod(s) "
                f"{', '.join(names)} beyond the StatefulSet's {live_replicas} replicas are gone "
                "without a decommission; a single-replica cluster cannot decommission and these "
                "stores hold the only copy of their ranges, so their claims are kept. Set "
                f"spec.replicas to {ordinal(names[-1]) + 1} to bring the pods back")))
            return
        others = [n for n in nodes if n not in beyond and not n.is_decommissioning]
        if strays and all(n.healthy for n in others):
            runner = exec_pod(pods)
            if runner is None:
                return
            ids = [n.id for n in strays]
            try:
                admin.decommission(runner, ids)
            except KwbaseError as error:
                self.retry_later(p, "StrayNodes",
                                 f"decommission of nodes {ids} whose pods are gone", error)
                return
            self.count("decommission-stray-node")
            p.act("StrayNodeDecommissioned", f"StatefulSet/{cluster.name}", (
                f"KaiwuDB node(s) {', '.join(map(str, ids))} of pods beyond the StatefulSet's "
                f"{live_replicas} replicas ({', '.join(str(n.pod_name) for n in strays)}) are "
                "gone without a decommission: decommissioned so their ranges re-replicate; "
                "their claims go once no replica is left on them"), event="Warning")
            self.nodes.forget(cluster.namespace, cluster.name)
            p.requeue_in(self.settings.poll_s)
            return
        # Decommissioned strays whose claims are still there: delete each claim once range
        # descriptors list no replica on its node (only the cache is read: a claim without
        # the managed-by label was read from the API when its node was decommissioned).
        for node in beyond:
            if not node.is_decommissioning:
                continue
            claim = self.view.get(k.PVC, cluster.namespace, f"{CLAIM_TEMPLATE}-{node.pod_name}")
            if claim is None or meta(claim).get("deletionTimestamp"):
                continue
            left = self.scaling.replicas_left(pods, admin, node.id, str(node.pod_name))
            if left != 0:
                p.not_ready.append(("StrayNodes", (
                    f"KaiwuDB node {node.id} ({node.pod_name}) is decommissioning; its claim is "
                    "deleted once no replica is left on it: " + (
                        f"{left} left" if isinstance(left, int) else f"count unknown ({left})"))))
                self.nodes.forget(cluster.namespace, cluster.name)
                p.requeue_in(self.settings.poll_s)
                continue
            self.delete_claim(p, cluster, claim, node.id)

    def delete_claim(self, p: Pass, cluster: Cluster, claim: Obj, node_id: int) -> None:
        name = str(meta(claim).get("name"))
        self.metrics.writes_total.labels(verb="delete", kind="PersistentVolumeClaim").inc()
        try:
            self.kube.delete(k.PVC, cluster.namespace, name, uid=meta(claim).get("uid"))
        except ApiError as error:
            if not (error.conflict or error.not_found):
                raise
        self.count("delete-claim")
        p.act("ClaimDeleted", f"PersistentVolumeClaim/{name}", (
            f"KaiwuDB node {node_id} is decommissioned and range descriptors list no replica "
            "on it: its store can never rejoin, so its claim is deleted"))

    def recommission_wanted(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
                            admin: KwbaseAdmin, nodes: Sequence[NodeStatus]) -> None:
        """Recommission live, decommissioning nodes of pods the spec wants (see the module
        docstring). Only the one node id that pod runs now: never an older id of the same pod
        (a replaced store that came back for a moment, still decommissioning)."""
        if cluster.start_mode is not StartMode.MULTI_REPLICA:
            return  # nothing decommissions there (KWDB refuses it)
        wanted = []
        for node in nodes:
            pod = node.pod_name
            if not (node.is_decommissioning and node.is_live and pod and pod in pods
                    and ordinal(pod) < cluster.replicas and kwbase_running(pods[pod])):
                continue
            if any(n.id != node.id and n.pod_name == pod and not n.is_decommissioning
                   for n in nodes):
                continue  # another node id is that pod's store now
            wanted.append(node)
        if not wanted:
            return
        runner = exec_pod(pods)
        if runner is None:
            return
        ids = [n.id for n in wanted]
        try:
            admin.recommission(runner, ids)
        except KwbaseError as error:
            self.retry_later(p, "NodesDecommissioning",
                             f"recommission of nodes {ids}, whose pods the spec wants,", error)
            return
        self.count("recommission")
        p.act("Recommissioned", f"StatefulSet/{cluster.name}", (
            f"KaiwuDB node(s) {', '.join(map(str, ids))} of wanted pods "
            f"({', '.join(str(n.pod_name) for n in wanted)}) were decommissioning: "
            "recommissioned so they hold replicas again"), event="Warning")
        self.nodes.forget(cluster.namespace, cluster.name)
        p.requeue_in(self.settings.poll_s)
