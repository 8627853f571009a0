"""The KaiwuDB lifecycle step in the reconciler's pass: init, node bookkeeping, rolling updates,
scale-in.

The Controller (reconciler.controller) runs `Lifecycle.run` as the pipeline step "lifecycle"
(built from the controller's StepContext, reconciler.kaiwudb.context, which it hands to its parts),
after "certificates" and before "observe", so that the StatefulSet replicas and partition it
decides (during a scale-in the replicas come from the operation, not from spec.replicas) are
what "observe" and "repair" compare and apply. KaiwuDB is reached through the admin adapter
(reconciler.kaiwudb.kwbase, exec into a pod); Kubernetes objects are read from the cache view.

A pass, in order: the pods' start-flags ConfigMap is kept (reconciler.kaiwudb.upgrade), init
once (reconciler.kaiwudb.nodes), a node-status probe (nodes), a node that came back
decommissioning but is wanted is recommissioned, a scale-in is started or carried on
(reconciler.kaiwudb.scale), stray nodes are removed when nothing else is busy (scale), a node
left UPGRADING is restarted unless a pod is down or a backup runs (upgrade; KWDB refuses a
scale-in's decommission until then), and the rollout partition is set
(reconciler.kaiwudb.rollout), a version change following KWDB's `node upgrade` procedure.
While a KaiwuBackup of the cluster runs (reconciler.kaiwudb.backup.status.running_backup) no
scale-in starts and the rollout holds. Scale-out needs nothing: new pods join through --join; their
node ids show in status.nodes. The fields the step owns (reconciler.model.KaiwuStatus) are
remembered across a watch cache that lags our own status write (`StatusMemory`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping

from reconciler.kaiwudb.backup.status import running_backup
from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.loss import disrupted
from reconciler.kaiwudb.nodes import Nodes
from reconciler.kaiwudb.pods import (
    REVISION_LABEL,
    cluster_pods,
    ordinal,
    partition_of,
    rolling,
)
from reconciler.kaiwudb.rollout import Rollout
from reconciler.kaiwudb.scale import ScaleScene, Scaling
from reconciler.kaiwudb.strays import Strays
from reconciler.kaiwudb.tools import LifecycleSettings
from reconciler.kaiwudb.upgrade import Upgrades, flag_wanted
from reconciler.kube import kinds as k
from reconciler.model import KaiwuStatus, Obj, Pass, meta
from renderer.spec import Cluster, StartMode

log = logging.getLogger(__name__)


class StatusMemory:
    """The status fields the lifecycle and failover steps last decided, per cluster, with the
    resourceVersion of the KaiwuCluster that pass read. A pass that starts before the watch
    cache has seen our own status write reads the same resourceVersion again: it then takes
    these fields over the cache's stale ones, so an action is not taken twice (an init, a
    restart counted twice, an operation forgotten).

    A pass may also read an older write of our own arriving late: a pass that read a cached
    copy still at the version our previous write replaced does not write status (the
    controller postpones its report), and the copy that arrives next is that previous write,
    without the newer decision. So a decision that changed the fields is remembered, for up to
    `grace_s`, over any copy whose fields differ from it; a copy that shows it (our write
    arrived) or the grace running out ends that. A pass that decided nothing new leaves
    nothing pending: then any newer object (someone else's change) wins over the memory."""

    def __init__(self, grace_s: float = 5.0) -> None:
        self.grace_s = grace_s
        # (namespace, name) -> (resourceVersion read, fields decided, pending since or None)
        self._last: dict[tuple[str, str], tuple[str, KaiwuStatus, float | None]] = {}

    def recall(self, p: Pass) -> None:
        md = meta(p.obj)
        key = (str(md.get("namespace")), str(md.get("name")))
        remembered = self._last.get(key)
        if remembered is None:
            return
        version, fields, pending = remembered
        if version != str(md.get("resourceVersion")):
            shown = KaiwuStatus.read(p.obj.get("status") or {})
            if pending is None or p.now - pending > self.grace_s or shown == fields:
                del self._last[key]
                return
        p.kaiwu = copy.deepcopy(fields)

    def save(self, p: Pass) -> None:
        md = meta(p.obj)
        key = (str(md.get("namespace")), str(md.get("name")))
        fields = copy.deepcopy(p.kaiwu)
        read = KaiwuStatus.read(p.obj.get("status") or {})
        pending = p.now if fields != read else None
        self._last[key] = (str(md.get("resourceVersion")), fields, pending)

    def forget(self, namespace: str, name: str) -> None:
        self._last.pop((namespace, name), None)


def left_to_rollout(sts: Obj | None, pods: Mapping[str, Obj], cluster: Cluster,
                    busy: str) -> frozenset[str]:
    """The pods a rollout is about to replace: released by the partition but not on the new
    revision yet, and (unless something holds it) the one it moves next."""
    if not rolling(sts):
        return frozenset()
    partition = partition_of(sts) or 0
    update = str(((sts or {}).get("status") or {}).get("updateRevision"))
    left = {name for name, pod in pods.items() if ordinal(name) >= partition
            and (meta(pod).get("labels") or {}).get(REVISION_LABEL) != update}
    if not busy and partition > 0:
        left.add(cluster.pod_name(partition - 1))
    return frozenset(left)


class Lifecycle:
    """The "lifecycle" step (see the module docstring)."""

    name = "lifecycle"
    always = False

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        self.view = ctx.view
        self.settings = LifecycleSettings.of(ctx.settings)
        self.nodes = Nodes(ctx)
        self.upgrades = Upgrades(ctx)
        self.rollouts = Rollout(ctx, self.upgrades)
        self.scaling = Scaling(ctx, self.nodes)
        self.strays = Strays(ctx, self.nodes, self.scaling)
        self.memory = StatusMemory()

    def wanted(self, p: Pass) -> bool:
        if p.cluster is not None and p.paused:
            # Nothing is looked at while paused: whatever happened meanwhile (a pod scaled up
            # and down by hand) must be probed afresh once the pause ends, not in 5 minutes.
            self.nodes.forget(p.cluster.namespace, p.cluster.name)
        return p.cluster is not None and not p.paused and not p.halted

    def forget(self, namespace: str, name: str) -> None:
        self.nodes.forget(namespace, name)
        self.memory.forget(namespace, name)
        self.upgrades.forget(namespace, name)

    def run(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        self.memory.recall(p)
        self.step(p, cluster)
        self.memory.save(p)

    def step(self, p: Pass, cluster: Cluster) -> None:
        pods = cluster_pods(self.view, cluster)
        sts = self.view.peek(k.STATEFUL_SET, cluster.namespace, cluster.name)
        live_replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0) \
            if sts is not None else None
        admin = self.ctx.admin(cluster)
        if not p.kaiwu.initialized:
            # The pods cannot start before their start-flags ConfigMap exists.
            self.upgrades.flags.keep(p, cluster, pods, flag_wanted(cluster, pods, None, None))
            if not self.nodes.initialise(p, cluster, pods, admin):
                self.rollouts.rollout(p, sts, pods, admin, None, frozenset(),
                                      busy="the cluster is not initialised")
                return
        operation = p.kaiwu.operation
        # More pods than spec.replicas is a scale-in, whoever raised the StatefulSet: the
        # spec asking for fewer nodes, or someone scaling it up by hand. The two are the same
        # world (the accepted-spec annotation and the StatefulSet read alike), so they get the
        # same next step; and a joined pod removed without a decommission can take a range's
        # quorum with it (a range still up-replicating onto it has two replicas, one there).
        # Unless spec.drift.ignore hands the replicas to someone else: then they are theirs,
        # and every apply of the StatefulSet keeps them. Or unless the cluster is one
        # single-node KaiwuDB: a pod beyond it starts a KaiwuDB of its own, without --join,
        # holding none of the cluster's data; drift repair removes it.
        if p.replicas_owned_elsewhere and live_replicas is not None:
            self.scaling.override_replicas(p, live_replicas)
        scale_in = (live_replicas is not None and cluster.replicas < live_replicas
                    and not p.replicas_owned_elsewhere
                    and cluster.start_mode is not StartMode.SINGLE_NODE)
        nodes = self.nodes.probe(p, cluster, pods, admin, live_replicas,
                           force=operation is not None or scale_in or rolling(sts))
        if operation is None and nodes is not None:
            self.strays.recommission_wanted(p, cluster, pods, admin, nodes)
        if nodes is not None:
            self.strays.retire_long_gone(p, cluster, pods, admin, nodes)
        upgrading = self.upgrades.upgrading(p, pods, admin, nodes) if nodes is not None else None
        self.upgrades.flags.keep(p, cluster, pods, flag_wanted(cluster, pods, nodes, upgrading))
        backup = running_backup(self.view, cluster.namespace, cluster.name)
        if operation is None and scale_in and backup:
            # A backup exports from one node: no scale-in starts under it (docs/backup.md).
            # The StatefulSet keeps its replicas meanwhile (never scaled down undrained).
            assert live_replicas is not None
            self.scaling.override_replicas(p, live_replicas)
            message = f"scale-in waits for KaiwuBackup {backup} to finish"
            p.not_ready.append(("BackupRunning", message))
            p.progressing.append(("BackupRunning", message))
            p.requeue_in(self.settings.poll_s)
        elif operation is None and scale_in:
            self.scaling.start(ScaleScene(p, cluster, pods, admin, nodes, live_replicas))
        elif operation is not None:
            self.scaling.continue_scale_in(ScaleScene(p, cluster, pods, admin, nodes,
                                                      live_replicas), operation)
        down = disrupted(self.view, pods, [cluster.pod_name(i) for i in range(
            live_replicas if live_replicas is not None else cluster.replicas)])
        busy = ("a scale-in is in progress" if operation is not None or scale_in else
                f"pods are down: {', '.join(down)}" if down else
                f"KaiwuBackup {backup} is running" if backup else "")
        if not busy and nodes is not None and live_replicas is not None:
            self.strays.remove_strays(p, cluster, pods, admin, nodes, live_replicas)
        if nodes is not None and upgrading and not down and not backup:
            # Beside a scale-in too: KWDB refuses its decommission until the mark is gone.
            self.upgrades.finish(p, cluster, pods, nodes, upgrading,
                                 left_to_rollout=left_to_rollout(sts, pods, cluster, busy))
        self.rollouts.rollout(p, sts, pods, admin, nodes, upgrading, busy=busy)
