"""The nodes KaiwuDB counts, and the one-time `kwbase init`.

init: a new multi-replica or single-replica cluster waits for `kwbase init` (its readiness fails
until then). Once every pod of the spec runs its kwbase container, `kwbase init` runs in the
first pod; "already initialised" counts as success, so a reconciler that dies between the init
and the status write simply inits again. `status.initialized` records it. A single-node cluster
initialises itself: it is recorded once its node answers.

nodes: `kwbase node status --decommission` maps node ids (they belong to stores, not pods) to
pods; `status.nodes` lists them, and Ready waits for every node to be live. Probing costs one
exec, so a steady cluster is probed again only when its pods change, when something is pending
(a node not live, a live node without a pod, two live ids at one pod), or once per
`probe_every_s`. Used by the lifecycle step (reconciler.kaiwudb.lifecycle).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.admin import InitOutcome, KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.kwbase.nodes import NodeStatus
from reconciler.kaiwudb.pods import exec_pod, kwbase_running, pod_ready
from reconciler.kaiwudb.tools import Part
from reconciler.model import NodeEntry, Obj, Pass, meta
from renderer.spec import Cluster, StartMode

log = logging.getLogger(__name__)


def node_state(node: NodeStatus) -> str:
    if node.is_decommissioning:
        return "decommissioning"
    return "live" if node.healthy else "not-live"


def node_entries(nodes: Sequence[NodeStatus]) -> tuple[NodeEntry, ...]:
    """status.nodes: every node id KaiwuDB still counts (a decommissioned node that stopped is
    gone for good and left out)."""
    return tuple(NodeEntry(node.id, node.address, node_state(node), node.pod_name)
                 for node in sorted(nodes, key=lambda n: n.id)
                 if not (node.is_decommissioning and not node.is_live))


def bootstrap_down(cluster: Cluster, entries: Sequence[NodeEntry]) -> str:
    """What a single-replica cluster's down bootstrap node means ("" otherwise): KWDB's
    start-single-replica ("mpp") mode never moves a range (kwbase/pkg/kv/kvserver/
    replicate_queue.go:248-250), so every range, the liveness range included, has its only
    copy on node 1, the node `kwbase init` ran on. While it is down no node can heartbeat and
    the whole cluster is unavailable, whatever the other pods show."""
    if cluster.start_mode is not StartMode.SINGLE_REPLICA:
        return ""
    first = next((e for e in entries if e.node_id == 1), None)
    if first is None or first.state == "live":
        return ""
    return (f"; a single-replica cluster keeps every range, system ranges included, on node 1 "
            f"({first.pod or first.address}): while it is down the whole cluster is "
            "unavailable; bring that pod and its volume back")


class Nodes(Part):
    """Init once, and node status probes (see the module docstring)."""

    def __init__(self, ctx: StepContext) -> None:
        super().__init__(ctx)
        # Per cluster: (pods fingerprint, when probed, all nodes live then). A pass whose pods
        # look the same as at a probe that found all nodes live needs no new exec.
        self._probes: dict[tuple[str, str], tuple[Any, float, bool]] = {}

    def forget(self, namespace: str, name: str) -> None:
        """Probe again at the next pass (the nodes changed, or the cluster is gone)."""
        self._probes.pop((namespace, name), None)

    def initialise(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
                   admin: KwbaseAdmin) -> bool:
        """Init once; True when the cluster is (now known to be) initialised."""
        first = cluster.pod_name(0)
        if cluster.start_mode is StartMode.SINGLE_NODE:
            # start-single-node initialises itself: record it once the node answers.
            if not kwbase_running(pods.get(first)):
                p.not_ready.append(("WaitingForPods", f"waiting for pod {first} to run"))
                return False
            p.kaiwu.initialized = True
            return True
        wanted = [cluster.pod_name(i) for i in range(cluster.replicas)]
        waiting = [name for name in wanted if not kwbase_running(pods.get(name))]
        if waiting:
            # Pod changes come as watch events: nothing to poll.
            p.not_ready.append(("WaitingForInit", "kwbase init waits for every pod to run; "
                                f"not running yet: {', '.join(waiting)}"))
            return False
        try:
            outcome = admin.init(first)
        except KwbaseError as error:
            self.retry_later(p, "WaitingForInit", "kwbase init", error)
            return False
        p.kaiwu.initialized = True
        if outcome is InitOutcome.INITIALIZED:
            self.count("init")
            p.act("Initialized", f"Pod/{first}", "kwbase init: cluster successfully initialized")
        else:
            p.act("Initialized", f"Pod/{first}", "kwbase init: the cluster was already "
                  "initialized", event=None)
        return True

    def probe(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj], admin: KwbaseAdmin,
              live_replicas: int | None, *, force: bool) -> list[NodeStatus] | None:
        """Node status (with decommission columns), recorded in status.nodes, and readiness.
        None when not probed (steady and unchanged) or when no pod could answer."""
        key = (cluster.namespace, cluster.name)
        fingerprint = (live_replicas, tuple(sorted(
            (name, str(meta(pod).get("uid")), pod_ready(pod)) for name, pod in pods.items())))
        last = self._probes.get(key)
        if not force and last is not None and last[0] == fingerprint and last[2] and \
                p.now - last[1] < self.settings.probe_every_s and p.kaiwu.nodes:
            return None
        target = exec_pod(pods)
        if target is None:
            p.not_ready.append(("WaitingForPods", "no pod runs kwbase"))
            return None
        try:
            nodes = list(admin.node_status(target, decommission=True))
        except KwbaseError as error:
            self.retry_later(p, "NodeStatusUnknown", "kwbase node status", error)
            self._probes.pop(key, None)
            return None
        entries = node_entries(nodes)
        p.kaiwu.nodes = entries
        expected = live_replicas if live_replicas is not None else cluster.replicas
        not_live = [e for e in entries if e.state == "not-live"]
        live = [e for e in entries if e.state == "live"]
        # Live nodes whose pod is gone (removed without a decommission) stop being live within
        # the liveness TTL: keep looking until they do (see remove_strays).
        podless = [e for e in live if e.pod not in pods]
        # Two live ids at one pod: its store was replaced moments ago and the old id's liveness
        # has yet to expire (KaiwuDB runs one process per address). Keep looking until it does:
        # the failover step decommissions it then, and a steady cluster would not probe again
        # for probe_every_s, leaving its ranges under-replicated and status.nodes wrong.
        per_pod = Counter(e.pod for e in live if e.pod)
        doubled = [e for e in live if e.pod and per_pod[e.pod] > 1]
        all_live = not not_live and not podless and not doubled and len(live) >= expected
        if not_live:
            p.not_ready.append(("NodesNotLive", "KaiwuDB nodes not live: " + ", ".join(
                f"{e.node_id} ({e.pod or e.address})" for e in not_live)
                + bootstrap_down(cluster, entries)))
        elif podless:
            p.not_ready.append(("NodesWithoutPods", "KaiwuDB nodes whose pod is gone: " +
                                ", ".join(f"{e.node_id} ({e.pod})" for e in podless)))
        elif doubled:
            p.not_ready.append(("NodesReplaced", "KaiwuDB nodes sharing a pod (a replaced store "
                                "whose old id is not yet dead): " +
                                ", ".join(f"{e.node_id} ({e.pod})" for e in doubled)))
        elif len(live) < expected:
            p.not_ready.append(("NodesJoining", f"{len(live)}/{expected} KaiwuDB nodes live"))
        if not all_live:
            p.requeue_in(self.settings.poll_s)
        self._probes[key] = (fingerprint, p.now, all_live)
        return nodes
