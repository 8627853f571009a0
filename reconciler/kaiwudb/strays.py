"""Nodes gone without a scale-in, and wanted nodes that come back decommissioning.

- stray nodes: a KaiwuDB node that is not live and whose pod's ordinal is beyond the
  StatefulSet (its pod was removed without a decommission: someone scaled the StatefulSet
  down by hand, or a scale-in's pod went in a version before hand scale-ups were scaled in)
  is decommissioned, so its ranges re-replicate and
  it stops counting as a node; its claim is deleted once KWDB's meta scan counts no replica on
  it (reconciler.kaiwudb.scale.Scaling.replicas_left). A single-replica cluster cannot
  decommission (KWDB refuses in "mpp mode") and the stray store holds the only copy of its
  ranges: nothing is removed, Stalled says how to bring the pod back (raise spec.replicas past
  its ordinal).
- a node that is live and decommissioning while its pod is one the spec wants (decommissioned
  by hand, or a decommissioned store restarted: KWDB V3.2.1 lets it rejoin) is recommissioned,
  so it holds replicas again and stops blocking scale-ins; one the spec does not want is the
  scale-in's target and is finished removing (reconciler.kaiwudb.scale).
- long-gone nodes: node ids KaiwuDB shows down an hour at least, their address forgotten, are
  decommissioned (`Strays.retire_long_gone`).

Used by the lifecycle step (reconciler.kaiwudb.lifecycle).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.kwbase.nodes import NodeStatus
from reconciler.kaiwudb.nodes import Nodes
from reconciler.kaiwudb.pods import CLAIM_TEMPLATE, delete_claim, exec_pod, kwbase_running, ordinal
from reconciler.kaiwudb.scale import Scaling
from reconciler.kaiwudb.tools import Part
from reconciler.kube import kinds as k
from reconciler.model import Obj, Pass, meta
from renderer.spec import Cluster, StartMode


class Strays(Part):
    """Nodes whose pods are gone without a decommission, and wanted nodes that came back
    decommissioning (see the module docstring)."""

    def __init__(self, ctx: StepContext, nodes: Nodes, scaling: Scaling) -> None:
        super().__init__(ctx)
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
            claim = self.view.peek(k.PVC, cluster.namespace, f"{CLAIM_TEMPLATE}-{node.pod_name}")
            if claim is None or meta(claim).get("deletionTimestamp"):
                continue
            left = self.scaling.replicas_left(pods, admin, node.id, str(node.pod_name))
            if left != 0:
                p.not_ready.append(("StrayNodes", (
                    f"KaiwuDB node {node.id} ({node.pod_name}) is decommissioning; its claim is "
                    "deleted once no replica is left on it: " + (
                        f"{left} left" if isinstance(left, int) else
                        f"count unknown ({left.why})"))))
                self.nodes.forget(cluster.namespace, cluster.name)
                p.requeue_in(self.settings.poll_s)
                continue
            self.delete_claim(p, cluster, claim, node.id)

    def delete_claim(self, p: Pass, cluster: Cluster, claim: Obj, node_id: int) -> None:
        name = str(meta(claim).get("name"))
        delete_claim(self.kube, cluster.namespace, claim)
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
