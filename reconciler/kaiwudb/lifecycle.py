"""KaiwuDB lifecycle in the reconciler's pass: init exactly once, node bookkeeping, scale-in.

The Controller (reconciler.controller) runs `Lifecycle.run` as the pipeline step "lifecycle",
after "certificates" and before "observe", so that the StatefulSet replicas it decides (during a
scale-in they come from the operation, not from spec.replicas) are what "observe" and "repair"
compare and apply. KaiwuDB is reached through the admin adapter (reconciler.kaiwudb.kwbase, exec
into a pod); Kubernetes objects are read from the cache view only.

What a pass does, in order:
- init: a new multi-replica or single-replica cluster waits for `kwbase init` (its readiness
  fails until then). Once every pod of the spec runs its kwbase container, `kwbase init` runs in
  the first pod; "already initialised" counts as success, so a reconciler that dies between the
  init and the status write simply inits again. `status.initialized` records it. A single-node
  cluster initialises itself: it is recorded once its node answers.
- nodes: `kwbase node status --decommission` maps node ids (they belong to stores, not pods) to
  pods; `status.nodes` lists them. Probing costs one exec, so a steady cluster is probed again
  only when its pods change, when something is pending, or once per `probe_every_s`.
- readiness: Ready waits for init and for every KaiwuDB node to be live (`Pass.not_ready`).
- rolling updates (a new version, any template change): the StatefulSet's rollingUpdate
  partition stays at its replica count, so a new template moves no pod by itself. Each pass of a
  rollout lowers it by one (the highest ordinal first, as the StatefulSet updates) only when
  the pods already moved run the new revision and are Ready, every KaiwuDB node is live and
  replication is healthy, no other operation runs, and nobody else changed the template (drift
  is repaired first, never rolled out), and no job (schema change, import) runs. Once every
  pod runs it, the partition closes again. KaiwuDB documents no downgrade and no in-place
  change of major version (2.x to 3.x needs export and import): such a version change is
  refused, Stalled, with no pod moved.
- stray nodes: a KaiwuDB node that is not live and whose pod's ordinal is beyond the
  StatefulSet (its pod was removed without a decommission: someone scaled the StatefulSet up
  by hand and the repair step put it back) is decommissioned, so its ranges re-replicate and
  it stops counting as a node; its claim is deleted once KWDB's meta scan counts no replica on
  it. A single-replica cluster cannot decommission (KWDB refuses in "mpp mode") and the stray
  store holds the only copy of its ranges: nothing is removed, Stalled says how to bring the
  pod back (raise spec.replicas past its ordinal).
- a node that is live and decommissioning while its pod is one the spec wants (decommissioned
  by hand, or a decommissioned store restarted: KWDB V3.2.1 lets it rejoin) is recommissioned,
  so it holds replicas again and stops blocking scale-ins; one the spec does not want is the
  scale-in's target and is finished removing.
- scale-out needs nothing: new pods join through --join; their node ids show in status.nodes.
- scale-in (multi-replica only; the renderer already refuses fewer than 3 nodes, and a
  single-replica cluster is refused here, Stalled): the highest ordinal first, one at a time.
  With every node live and replication healthy, its node id is decommissioned (--wait=none);
  passes poll (requeue, never blocking a worker) until it holds no replicas, then the
  StatefulSet shrinks by one and the claim of the removed ordinal is deleted. "No replicas" is
  the `replicas` column of `node decommission <id> --wait=none`, asked again on every poll: a
  meta scan of the range descriptors. Never the gossiped_replicas of `node status`: that
  expires to 0 two minutes after a node stops gossiping, so a node that dies mid-drain would
  look empty while descriptors still list replicas on it (a decommissioned
  store can never rejoin: a later scale-out must start with an empty volume). The operation is
  kept in `status.operation`, so a restarted reconciler resumes it. A scale-out while a node is
  still decommissioning recommissions it and cancels the operation.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from reconciler.kaiwudb.kwbase import (
    InitOutcome,
    KwbaseAdmin,
    KwbaseError,
    KwbaseSettings,
    NodeStatus,
)
from reconciler.kaiwudb.loss import disrupted
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.metrics import Metrics
from reconciler.model import KaiwuStatus, NodeEntry, Obj, ScaleIn, rfc3339
from renderer.builders import selector_labels
from renderer.spec import Cluster, StartMode

if TYPE_CHECKING:  # the controller imports this module: no import cycle at run time
    from reconciler.model import Pass

log = logging.getLogger(__name__)

DECOMMISSIONING = "Decommissioning"
REMOVING = "Removing"
CLAIM_TEMPLATE = "data"  # the renderer's volumeClaimTemplate: claims are data-<pod>
REVISION_LABEL = "controller-revision-hash"
# Managers whose writes to a StatefulSet are not someone else's drift.
OWN_WRITERS = frozenset({"kube-controller-manager"})


@dataclass(frozen=True)
class LifecycleSettings:
    """Timings of the lifecycle steps.

    poll_s: how soon a pass looks again while KaiwuDB is busy with something no watch announces
        (init pending, nodes joining, a decommission draining replicas). Each look costs an exec.
        (Settings.lifecycle_poll_s)
    probe_every_s: longest time between two node-status probes of a steady cluster.
        (Settings.node_probe_every_s)
    exec_timeout_s: how long one kwbase command may take (Settings.exec_timeout_s).
    """

    poll_s: float = 1.0
    probe_every_s: float = 300.0
    exec_timeout_s: float = 60.0


AdminFactory = Callable[[Kube, Cluster, KwbaseSettings], KwbaseAdmin]


def _admin(kube: Kube, cluster: Cluster, settings: KwbaseSettings) -> KwbaseAdmin:
    return KwbaseAdmin.for_cluster(kube, cluster, settings)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def ordinal(pod_name: str) -> int:
    """The StatefulSet ordinal at the end of a pod name (-1 when there is none)."""
    tail = pod_name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def kwbase_running(pod: Obj | None) -> bool:
    """The pod is not being deleted and its kwbase container runs (it may wait for init)."""
    if pod is None or _meta(pod).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("name") == "kwbase" and "running" in (c.get("state") or {})
        for c in status.get("containerStatuses") or ())


def pod_ready(pod: Obj | None) -> bool:
    return kwbase_running(pod) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in ((pod or {}).get("status") or {}).get("conditions") or ())


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


def cluster_pods(view: CacheView, cluster: Cluster) -> dict[str, Obj]:
    return {str(_meta(pod).get("name")): pod
            for pod in view.list(k.POD, cluster.namespace, selector_labels(cluster))}


def partition_of(sts: Obj | None) -> int | None:
    update = ((sts or {}).get("spec") or {}).get("updateStrategy") or {}
    value = (update.get("rollingUpdate") or {}).get("partition")
    return int(value) if value is not None else None


def rolling(sts: Obj | None) -> bool:
    """A rollout is under way: pods run an older revision than the template's, and the
    partition gates it (without one the StatefulSet rolls on its own)."""
    status = (sts or {}).get("status") or {}
    update, current = status.get("updateRevision"), status.get("currentRevision")
    return bool(update and current and update != current) and partition_of(sts) is not None


def version_tuple(text: str) -> tuple[int, ...] | None:
    """3.2.1 -> (3, 2, 1); None for a tag that is not a plain version."""
    head = text.split("-", 1)[0].lstrip("vV")
    parts = head.split(".")
    return tuple(int(part) for part in parts) if parts and all(
        part.isdigit() for part in parts) else None


def running_versions(pods: Mapping[str, Obj]) -> list[tuple[int, ...]]:
    """The versions the pods' kwbase containers run (from their image tags)."""
    found = []
    for pod in pods.values():
        for item in (pod.get("spec") or {}).get("containers") or ():
            if item.get("name") == "kwbase":
                image = str(item.get("image") or "")
                tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
                version = version_tuple(tag)
                if version is not None:
                    found.append(version)
    return found


def version_change_problem(wanted: str, pods: Mapping[str, Obj]) -> str:
    """Why moving the pods to version `wanted` is refused ("" when it is not)."""
    target = version_tuple(wanted)
    running = running_versions(pods)
    if target is None or not running:
        return ""
    oldest = min(running)
    shown = ".".join(map(str, oldest))
    if target < oldest:
        return (f"spec.version {wanted} is older than the {shown} the nodes run: KaiwuDB "
                f"cannot be downgraded. Set spec.version back to {shown} or later")
    if target[0] != oldest[0]:
        return (f"spec.version {wanted} changes the major version of the {shown} the nodes "
                "run: KaiwuDB needs an export and import into a new cluster for that. Set "
                f"spec.version back to {shown}")
    return ""


def template_changed_by_others(sts: Obj | None, manager: str) -> list[str]:
    """Managers other than ours (and the StatefulSet controller) that own fields of the pod
    template: someone edited it, and the repair step has yet to put it back."""
    found = []
    for entry in _meta(sts).get("managedFields") or ():
        name = str(entry.get("manager"))
        if name == manager or name in OWN_WRITERS:
            continue
        spec = ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        if "f:template" in spec:
            found.append(name)
    return found


def claim_of(view: CacheView, kube: Kube, namespace: str, pod: str) -> Obj | None:
    """The claim behind a pod's data volume. Claims made from the rendered template carry the
    managed-by label the PVC cache selects on; a claim made before the template had it is read
    once from the API (only while a lifecycle action is under way, never in a steady pass)."""
    name = f"{CLAIM_TEMPLATE}-{pod}"
    return view.get(k.PVC, namespace, name) or kube.get(k.PVC, namespace, name)


def exec_pod(pods: Mapping[str, Obj], avoid: str = "") -> str | None:
    """The pod to run cluster-wide commands in: a Ready one (its node is live), lowest ordinal
    first, else any whose kwbase runs; never `avoid` (the node being removed) if another will do.
    """
    names = sorted(pods, key=ordinal)
    for check in (pod_ready, kwbase_running):
        found = [name for name in names if check(pods[name])]
        preferred = [name for name in found if name != avoid]
        if preferred or found:
            return (preferred or found)[0]
    return None


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
        meta = _meta(p.obj)
        key = (str(meta.get("namespace")), str(meta.get("name")))
        remembered = self._last.get(key)
        if remembered is None:
            return
        version, fields, pending = remembered
        if version != str(meta.get("resourceVersion")):
            shown = KaiwuStatus.read(p.obj.get("status") or {})
            if pending is None or p.now - pending > self.grace_s or shown == fields:
                del self._last[key]
                return
        p.kaiwu = copy.deepcopy(fields)

    def save(self, p: Pass) -> None:
        meta = _meta(p.obj)
        key = (str(meta.get("namespace")), str(meta.get("name")))
        fields = copy.deepcopy(p.kaiwu)
        read = KaiwuStatus.read(p.obj.get("status") or {})
        pending = p.now if fields != read else None
        self._last[key] = (str(meta.get("resourceVersion")), fields, pending)

    def forget(self, namespace: str, name: str) -> None:
        self._last.pop((namespace, name), None)


class Lifecycle:
    """The "lifecycle" step (see the module docstring)."""

    name = "lifecycle"
    always = False

    def __init__(self, kube: Kube, view: CacheView, metrics: Metrics,
                 settings: LifecycleSettings | None = None,
                 admin_factory: AdminFactory = _admin) -> None:
        self.kube = kube
        self.view = view
        self.metrics = metrics
        self.settings = settings or LifecycleSettings()
        self.admin_factory = admin_factory
        # Per cluster: (pods fingerprint, when probed, all nodes live then). A pass whose pods
        # look the same as at a probe that found all nodes live needs no new exec.
        self._probes: dict[tuple[str, str], tuple[Any, float, bool]] = {}
        # Per cluster: the StatefulSet replicas the last pass applied. More live replicas than
        # that is someone scaling the StatefulSet by hand (drift, put back by the repair step);
        # a spec asking for fewer than that is a scale-in. (The managedFields cannot tell: on
        # Kubernetes 1.20 a write through the scale subresource leaves our apply owning the
        # field.) After a restart nothing is known, and fewer replicas in the spec than live
        # counts as a scale-in: decommissioning is the safe side.
        self._applied: dict[tuple[str, str], int] = {}
        self.memory = StatusMemory()

    def wanted(self, p: Pass) -> bool:
        return p.cluster is not None and not p.paused and not p.halted

    def forget(self, namespace: str, name: str) -> None:
        self._probes.pop((namespace, name), None)
        self._applied.pop((namespace, name), None)
        self.memory.forget(namespace, name)

    def admin(self, cluster: Cluster) -> KwbaseAdmin:
        return self.admin_factory(self.kube, cluster,
                                  KwbaseSettings(timeout_s=self.settings.exec_timeout_s))

    def count(self, action: str) -> None:
        self.metrics.lifecycle_actions_total.labels(action=action).inc()

    # ---- the step ---------------------------------------------------------------------------

    def run(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        self.memory.recall(p)
        self.step(p, cluster)
        self.memory.save(p)
        for obj in p.desired:
            if obj.get("kind") == "StatefulSet":
                self._applied[(cluster.namespace, cluster.name)] = int(obj["spec"]["replicas"])

    def step(self, p: Pass, cluster: Cluster) -> None:
        pods = cluster_pods(self.view, cluster)
        sts = self.view.get(k.STATEFUL_SET, cluster.namespace, cluster.name)
        live_replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0) \
            if sts is not None else None
        admin = self.admin(cluster)
        if not p.kaiwu.initialized and not self.initialise(p, cluster, pods, admin):
            self.rollout(p, sts, pods, admin, None, busy="the cluster is not initialised")
            return
        operation = p.kaiwu.operation
        # A scale-in is the spec asking for fewer nodes than we applied; a StatefulSet someone
        # scaled up by hand is drift, which the repair step puts back.
        applied = self._applied.get((cluster.namespace, cluster.name))
        scale_in = live_replicas is not None and cluster.replicas < live_replicas and (
            applied is None or live_replicas <= applied)
        nodes = self.probe(p, cluster, pods, admin, live_replicas,
                           force=operation is not None or scale_in or rolling(sts))
        if operation is None and nodes is not None:
            self.recommission_wanted(p, cluster, pods, admin, nodes)
        if operation is None and scale_in:
            assert live_replicas is not None
            self.start_scale_in(p, cluster, pods, admin, nodes, live_replicas)
        elif operation is not None:
            self.continue_scale_in(p, cluster, pods, admin, nodes, operation, live_replicas)
        down = disrupted(self.view, pods, [cluster.pod_name(i) for i in range(
            live_replicas if live_replicas is not None else cluster.replicas)])
        busy = ("a scale-in is in progress" if operation is not None or scale_in else
                f"pods are down: {', '.join(down)}" if down else "")
        if not busy and nodes is not None and live_replicas is not None:
            self.remove_strays(p, cluster, pods, admin, nodes, live_replicas)
        self.rollout(p, sts, pods, admin, nodes, busy=busy)

    # ---- stray nodes ------------------------------------------------------------------------

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
                self.metrics.errors_total.labels(stage="lifecycle").inc()
                p.not_ready.append(("StrayNodes", f"decommission of nodes {ids} whose pods are "
                                    f"gone failed (retrying): {error}"))
                p.requeue_in(self.settings.poll_s)
                return
            self.count("decommission-stray-node")
            p.act("StrayNodeDecommissioned", f"StatefulSet/{cluster.name}", (
                f"KaiwuDB node(s) {', '.join(map(str, ids))} of pods beyond the StatefulSet's "
                f"{live_replicas} replicas ({', '.join(str(n.pod_name) for n in strays)}) are "
                "gone without a decommission: decommissioned so their ranges re-replicate; "
                "their claims go once no replica is left on them"), event="Warning")
            self._probes.pop((cluster.namespace, cluster.name), None)
            p.requeue_in(self.settings.poll_s)
            return
        # Decommissioned strays whose claims are still there: delete each claim once range
        # descriptors list no replica on its node (only the cache is read: a claim without
        # the managed-by label was read from the API when its node was decommissioned).
        for node in beyond:
            if not node.is_decommissioning:
                continue
            claim = self.view.get(k.PVC, cluster.namespace, f"{CLAIM_TEMPLATE}-{node.pod_name}")
            if claim is None or _meta(claim).get("deletionTimestamp"):
                continue
            left = self.replicas_left(p, pods, admin, node.id, str(node.pod_name))
            if left != 0:
                p.not_ready.append(("StrayNodes", (
                    f"KaiwuDB node {node.id} ({node.pod_name}) is decommissioning; its claim is "
                    "deleted once no replica is left on it: " + (
                        f"{left} left" if isinstance(left, int) else f"count unknown ({left})"))))
                self._probes.pop((cluster.namespace, cluster.name), None)
                p.requeue_in(self.settings.poll_s)
                continue
            self.delete_claim(p, cluster, claim, node.id)

    def delete_claim(self, p: Pass, cluster: Cluster, claim: Obj, node_id: int) -> None:
        name = str(_meta(claim).get("name"))
        self.metrics.writes_total.labels(verb="delete", kind="PersistentVolumeClaim").inc()
        try:
            self.kube.delete(k.PVC, cluster.namespace, name, uid=_meta(claim).get("uid"))
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
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            p.not_ready.append(("NodesDecommissioning", f"recommission of nodes {ids}, whose "
                                f"pods the spec wants, failed (retrying): {error}"))
            p.requeue_in(self.settings.poll_s)
            return
        self.count("recommission")
        p.act("Recommissioned", f"StatefulSet/{cluster.name}", (
            f"KaiwuDB node(s) {', '.join(map(str, ids))} of wanted pods "
            f"({', '.join(str(n.pod_name) for n in wanted)}) were decommissioning: "
            "recommissioned so they hold replicas again"), event="Warning")
        self._probes.pop((cluster.namespace, cluster.name), None)
        p.requeue_in(self.settings.poll_s)

    # ---- rolling updates --------------------------------------------------------------------

    def rollout(self, p: Pass, sts: Obj | None, pods: Mapping[str, Obj], admin: KwbaseAdmin,
                nodes: list[NodeStatus] | None, *, busy: str) -> None:
        """Set the partition this pass applies (see the module docstring)."""
        desired = next((obj for obj in p.desired if obj.get("kind") == "StatefulSet"), None)
        if desired is None:
            return
        replicas = int(desired["spec"]["replicas"])
        live = partition_of(sts)
        partition = replicas
        if rolling(sts):
            assert live is not None and sts is not None
            partition = min(live, replicas)
            update = str(sts["status"]["updateRevision"])
            moved = sum(1 for pod in pods.values()
                        if (_meta(pod).get("labels") or {}).get(REVISION_LABEL) == update)
            cluster = p.cluster
            assert cluster is not None
            refused = version_change_problem(cluster.version, pods)
            if refused:
                p.stalled.append(("VersionChangeRefused", refused))
            blocker = refused or busy or self.rollout_blocker(p, sts, pods, admin, nodes,
                                                              partition, update)
            if not blocker and partition > 0:
                partition -= 1
                self.count("upgrade-step")
                name = str(_meta(sts).get("name"))
                p.act("Upgrading", f"Pod/{name}-{partition}", (
                    f"every KaiwuDB node live and replication healthy: pod {name}-{partition} "
                    f"moves to revision {update} ({moved}/{replicas} there before it)"))
            message = f"rolling update to revision {update}: {moved}/{replicas} pods moved" + (
                f"; next pod waits: {blocker}" if blocker else "")
            p.not_ready.append(("Upgrading", message))
            p.progressing.append(("Upgrading", message))
            p.requeue_in(self.settings.poll_s)
        desired["spec"]["updateStrategy"] = {"type": "RollingUpdate",
                                             "rollingUpdate": {"partition": partition}}
        if sts is not None and live != partition and not _meta(sts).get("deletionTimestamp"):
            # The drift comparison ignores the partition (it is ours to move), so the repair
            # step never writes it: set it here. Closing the gate after a rollout, opening it
            # one pod further, or adding it to a StatefulSet made before it was rendered.
            meta = _meta(sts)
            self.metrics.writes_total.labels(verb="patch", kind="StatefulSet").inc()
            try:
                self.kube.patch(k.STATEFUL_SET, str(meta.get("namespace")),
                                str(meta.get("name")), {"spec": {"updateStrategy": {
                                    "rollingUpdate": {"partition": partition}}}})
            except ApiError as error:
                if not (error.conflict or error.not_found):
                    raise
                p.requeue_in(self.settings.poll_s)
            p.wrote = True

    def rollout_blocker(self, p: Pass, sts: Obj, pods: Mapping[str, Obj], admin: KwbaseAdmin,
                        nodes: list[NodeStatus] | None, partition: int, update: str) -> str:
        """Why the rollout may not move the next pod now ("" when it may)."""
        others = template_changed_by_others(sts, self.kube.field_manager)
        if others:
            return (f"the pod template was changed by {', '.join(others)}: that is drift, "
                    "repaired rather than rolled out")
        live_replicas = int((sts.get("spec") or {}).get("replicas") or 0)
        name = str(_meta(sts).get("name"))
        for ordinal_ in range(partition, live_replicas):
            pod = pods.get(f"{name}-{ordinal_}")
            if pod is None or (_meta(pod).get("labels") or {}).get(REVISION_LABEL) != update \
                    or not pod_ready(pod):
                return f"pod {name}-{ordinal_} is not Ready on the new revision yet"
        if nodes is None:
            return "KaiwuDB node status unknown"
        not_live = [n for n in nodes if not n.healthy and not n.is_decommissioning]
        if not_live:
            return "KaiwuDB nodes not live: " + ", ".join(str(n.id) for n in not_live)
        runner = exec_pod(pods)
        if runner is None:
            return "no pod runs kwbase"
        try:
            health = admin.replication_health(runner)
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            return f"replication health unknown: {error}"
        return "" if health.healthy else health.describe()

    # ---- init -------------------------------------------------------------------------------

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
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            p.not_ready.append(("WaitingForInit", f"kwbase init did not succeed yet "
                                f"(retrying in {self.settings.poll_s:g}s): {error}"))
            p.requeue_in(self.settings.poll_s)
            return False
        p.kaiwu.initialized = True
        if outcome is InitOutcome.INITIALIZED:
            self.count("init")
            p.act("Initialized", f"Pod/{first}", "kwbase init: cluster successfully initialized")
        else:
            p.act("Initialized", f"Pod/{first}", "kwbase init: the cluster was already "
                  "initialized", event=None)
        return True

    # ---- nodes ------------------------------------------------------------------------------

    def probe(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj], admin: KwbaseAdmin,
              live_replicas: int | None, *, force: bool) -> list[NodeStatus] | None:
        """Node status (with decommission columns), recorded in status.nodes, and readiness.
        None when not probed (steady and unchanged) or when no pod could answer."""
        key = (cluster.namespace, cluster.name)
        fingerprint = (live_replicas, tuple(sorted(
            (name, str(_meta(pod).get("uid")), pod_ready(pod)) for name, pod in pods.items())))
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
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            p.not_ready.append(("NodeStatusUnknown", f"kwbase node status failed (retrying in "
                                f"{self.settings.poll_s:g}s): {error}"))
            p.requeue_in(self.settings.poll_s)
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
        all_live = not not_live and not podless and len(live) >= expected
        if not_live:
            p.not_ready.append(("NodesNotLive", "KaiwuDB nodes not live: " + ", ".join(
                f"{e.node_id} ({e.pod or e.address})" for e in not_live)))
        elif podless:
            p.not_ready.append(("NodesWithoutPods", "KaiwuDB nodes whose pod is gone: " +
                                ", ".join(f"{e.node_id} ({e.pod})" for e in podless)))
        elif len(live) < expected:
            p.not_ready.append(("NodesJoining", f"{len(live)}/{expected} KaiwuDB nodes live"))
        if not all_live:
            p.requeue_in(self.settings.poll_s)
        self._probes[key] = (fingerprint, p.now, all_live)
        return nodes

    # ---- scale-in ---------------------------------------------------------------------------

    @staticmethod
    def override_replicas(p: Pass, replicas: int) -> None:
        """The StatefulSet replicas this pass applies (the renderer renders spec.replicas)."""
        for obj in p.desired:
            if obj.get("kind") == "StatefulSet":
                obj["spec"]["replicas"] = replicas

    def start_scale_in(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
                       admin: KwbaseAdmin, nodes: list[NodeStatus] | None,
                       live_replicas: int) -> None:
        self.override_replicas(p, live_replicas)
        if cluster.start_mode is not StartMode.MULTI_REPLICA:
            p.stalled.append(("ScaleInRefused", (
                f"a {cluster.start_mode.value} cluster cannot scale in (its data has one copy: "
                f"removing a node loses it); set spec.replicas back to {live_replicas}")))
            return
        if nodes is None:
            return  # node status unknown: the probe said why and requeued
        target = cluster.pod_name(live_replicas - 1)
        waiting = self.scale_in_blocker(nodes, admin, pods, target)
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
                self.metrics.errors_total.labels(stage="lifecycle").inc()
                p.not_ready.append(("ScaleInWaiting", f"decommission of node {node.id} "
                                    f"failed (retrying): {error}"))
                p.requeue_in(self.settings.poll_s)
                return
            operation = replace(operation, phase=DECOMMISSIONING, node_id=node.id)
            self.count("decommission")
            p.act("Decommissioning", f"Pod/{target}", (
                f"scale-in {live_replicas} -> {cluster.replicas}: decommissioning KaiwuDB node "
                f"{node.id}; the pod is removed once it holds no replicas"))
        p.kaiwu.operation = operation
        self.scaling(p, operation)

    def scale_in_blocker(self, nodes: Sequence[NodeStatus], admin: KwbaseAdmin,
                         pods: Mapping[str, Obj], target: str) -> str:
        """Why a scale-in step may not start now ("" when it may)."""
        counted = [n for n in nodes if not (n.is_decommissioning and not n.is_live)]
        not_live = [n for n in counted if not n.healthy]
        if not_live:
            return "KaiwuDB nodes not live: " + ", ".join(str(n.id) for n in not_live)
        busy = [n for n in counted if n.is_decommissioning and n.pod_name != target]
        if busy:
            return "KaiwuDB nodes decommissioning: " + ", ".join(str(n.id) for n in busy)
        runner = exec_pod(pods, avoid=target)
        if runner is None:
            return "no pod runs kwbase"
        try:
            health = admin.replication_health(runner)
            jobs = admin.running_jobs(runner) if health.healthy else 0
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            return f"replication health unknown: {error}"
        if not health.healthy:
            return health.describe()
        return f"{jobs} jobs running (SHOW JOBS)" if jobs else ""

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
        if operation.phase == DECOMMISSIONING and operation.node_id is not None:
            self.override_replicas(p, replicas)
            node_id = operation.node_id
            if cluster.replicas >= replicas:
                self.cancel(p, cluster, pods, admin, node_id, pod)
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
            remaining = self.replicas_left(p, pods, admin, node_id, pod)
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
            self.scaling(p, operation)  # the pod is terminating
            return
        claim_name = f"{CLAIM_TEMPLATE}-{pod}"
        claim = claim_of(self.view, self.kube, cluster.namespace, pod)
        if claim is not None and not _meta(claim).get("deletionTimestamp"):
            try:
                self.kube.delete(k.PVC, cluster.namespace, claim_name,
                                 uid=_meta(claim).get("uid"))
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
        self._probes.pop((cluster.namespace, cluster.name), None)

    def replicas_left(self, p: Pass, pods: Mapping[str, Obj], admin: KwbaseAdmin,
                      node_id: int, pod: str) -> int | str:
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
               node_id: int, pod: str) -> None:
        """A scale-out came while node_id decommissions: recommission it, drop the operation."""
        runner = exec_pod(pods)
        if runner is None:
            p.not_ready.append(("ScalingIn", "recommission waits for a pod that runs kwbase"))
            p.requeue_in(self.settings.poll_s)
            return
        try:
            admin.recommission(runner, [node_id])
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            p.not_ready.append(("ScalingIn", f"recommission of node {node_id} failed "
                                f"(retrying): {error}"))
            p.requeue_in(self.settings.poll_s)
            return
        self.count("recommission")
        p.kaiwu.operation = None
        self.override_replicas(p, cluster.replicas)
        p.act("Recommissioned", f"Pod/{pod}", f"spec.replicas is {cluster.replicas} again: "
              f"KaiwuDB node {node_id} recommissioned, scale-in cancelled")
        p.requeue_in(self.settings.poll_s)
