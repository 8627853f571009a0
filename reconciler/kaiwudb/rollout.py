"""Rolling updates, gated on KaiwuDB's health, one pod at a time.

A new version or any template change: the StatefulSet's rollingUpdate partition stays at its
replica count, so a new template moves no pod by itself. Each pass of a rollout lowers it by one
(the highest ordinal first, as the StatefulSet updates) only when the pods already moved run the
new revision, no pod is down (loss.disrupted: every pod Ready), every KaiwuDB node is live,
replication is healthy, no other operation runs, and nobody else changed the template (drift is
repaired first, never rolled out). Once every pod runs it, the partition closes again. A pod
that moves to another kwbase image moves as KWDB upgrades a node: its node is marked UPGRADING
first, and it restarts with --upgrade-complete (reconciler.kaiwudb.upgrade); the next pod waits
until that mark is gone (the node is available again).
KaiwuDB documents no downgrade and no in-place change of major version (2.x to 3.x needs export
and import): such a version change is refused, Stalled, with no pod moved. Used by the
lifecycle step (reconciler.kaiwudb.lifecycle).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.kwbase.nodes import NodeStatus
from reconciler.kaiwudb.pods import (
    REVISION_LABEL,
    exec_pod,
    partition_of,
    rolling,
)
from reconciler.kaiwudb.tools import Part
from reconciler.kaiwudb.upgrade import Upgrades
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import Obj, Pass, meta
from renderer.spec import Cluster

log = logging.getLogger(__name__)

# Managers whose writes to a StatefulSet are not someone else's drift.
OWN_WRITERS = frozenset({"kube-controller-manager"})


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
    for entry in meta(sts).get("managedFields") or ():
        name = str(entry.get("manager"))
        if name == manager or name in OWN_WRITERS:
            continue
        spec = ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        if "f:template" in spec:
            found.append(name)
    return found


class Rollout(Part):
    """The partition a pass applies (see the module docstring)."""

    def __init__(self, ctx: StepContext, upgrades: Upgrades) -> None:
        super().__init__(ctx)
        self.upgrades = upgrades

    def rollout(self, p: Pass, sts: Obj | None, pods: Mapping[str, Obj], admin: KwbaseAdmin,
                nodes: list[NodeStatus] | None, upgrading: frozenset[int] | None, *,
                busy: str) -> None:
        """Set the partition this pass applies (see the module docstring)."""
        cluster = p.cluster
        assert cluster is not None
        replicas = p.live.replicas if p.live.replicas is not None else cluster.replicas
        live = partition_of(sts)
        partition = replicas
        if rolling(sts):
            assert live is not None and sts is not None
            partition = min(live, replicas)
            update = str(sts["status"]["updateRevision"])
            moved = sum(1 for pod in pods.values()
                        if (meta(pod).get("labels") or {}).get(REVISION_LABEL) == update)
            refused = version_change_problem(cluster.version, pods)
            if refused:
                p.stalled.append(("VersionChangeRefused", refused))
            name = str(meta(sts).get("name"))
            blocker = refused or busy or self.rollout_blocker(
                cluster, sts, pods, admin, nodes, upgrading, partition, update)
            if not blocker and partition > 0:
                assert nodes is not None and upgrading is not None
                blocker = self.upgrades.prepare(p, cluster, sts, pods, admin, nodes, upgrading,
                                                f"{name}-{partition - 1}")
            if not blocker and partition > 0:
                partition -= 1
                self.count("upgrade-step")
                p.act("Upgrading", f"Pod/{name}-{partition}", (
                    f"every KaiwuDB node live and replication healthy: pod {name}-{partition} "
                    f"moves to revision {update} ({moved}/{replicas} there before it)"))
            message = f"rolling update to revision {update}: {moved}/{replicas} pods moved" + (
                f"; next pod waits: {blocker}" if blocker else "")
            p.not_ready.append(("Upgrading", message))
            p.progressing.append(("Upgrading", message))
            p.requeue_in(self.settings.poll_s)
        p.live = replace(p.live, partition=partition)
        if sts is not None and live != partition and not meta(sts).get("deletionTimestamp"):
            # The drift comparison ignores the partition (it is ours to move), so the repair
            # step never writes it: set it here. Closing the gate after a rollout, opening it
            # one pod further, or adding it to a StatefulSet made before it was rendered.
            md = meta(sts)
            try:
                self.kube.patch(k.STATEFUL_SET, str(md.get("namespace")),
                                str(md.get("name")), {"spec": {"updateStrategy": {
                                    "rollingUpdate": {"partition": partition}}}})
            except ApiError as error:
                if not (error.conflict or error.not_found):
                    raise
                p.requeue_in(self.settings.poll_s)

    def rollout_blocker(self, cluster: Cluster, sts: Obj, pods: Mapping[str, Obj],
                        admin: KwbaseAdmin, nodes: list[NodeStatus] | None,
                        upgrading: frozenset[int] | None, partition: int, update: str) -> str:
        """Why the rollout may not move the next pod now ("" when it may). The next pod's own
        node may be UPGRADING: KWDB's first move for it was made (reconciler.kaiwudb.upgrade),
        perhaps by a pass that stopped before it moved the pod."""
        others = template_changed_by_others(sts, self.kube.field_manager)
        if others:
            return (f"the pod template was changed by {', '.join(others)}: that is drift, "
                    "repaired rather than rolled out")
        live_replicas = int((sts.get("spec") or {}).get("replicas") or 0)
        name = str(meta(sts).get("name"))
        # Readiness (every pod of the StatefulSet, moved or not) is the caller's `busy`
        # (loss.disrupted); here: the pods already moved run the new revision.
        for ordinal_ in range(partition, live_replicas):
            pod = pods.get(f"{name}-{ordinal_}")
            if pod is None or (meta(pod).get("labels") or {}).get(REVISION_LABEL) != update:
                return f"pod {name}-{ordinal_} is not on the new revision yet"
        if nodes is None:
            return "KaiwuDB node status unknown"
        if upgrading is None:
            return "which KaiwuDB nodes are UPGRADING is unknown"
        if not self.upgrades.flags.known(cluster):
            return f"the start-flags ConfigMap {cluster.start_flags_config_map} is not written"
        next_pod = f"{name}-{partition - 1}"
        not_live = [n for n in nodes if not n.healthy and not n.is_decommissioning
                    and not (n.id in upgrading and n.is_live and n.pod_name == next_pod)]
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
