"""KWDB's own version upgrade, node by node, and the one start flag that ends it.

KWDB upgrades a node in three moves (kaiwudb_install/utils/kaiwudb_upgrade.sh:216-275):
`kwbase node upgrade <id>` marks the node UPGRADING (cli/node.go:548-636), the binary is
replaced, and the node restarts once with `--upgrade-complete`, which clears the mark and resets
server.time_until_store_dead from the 3 h `node upgrade` set (cli/start.go:711-715,
server/server.go:2824-2874). Only that one start carries the flag: KWDB's script removes it
again, and a start with it fails when the node cannot read its own liveness record yet
(server.go:2855-2874 returns GetLiveness's error), a risk for a new node's first start.
While any node is UPGRADING, KWDB refuses every decommission and any other `node upgrade`
(server.go:2764-2777, 2824-2837).

Here the image is the binary. Every pod's start line passes
`--upgrade-complete=$(KAIWU_UPGRADE_COMPLETE)`, which the kubelet reads at each container start
from the cluster's start-flags ConfigMap (renderer.builders.statefulset). This module keeps that
ConfigMap (`StartFlags`): "true" while a version upgrade is in flight (the StatefulSet's
template runs another kwbase image than some pod) or any node is UPGRADING, "false" otherwise;
made with the cluster, before its pods can start. `Upgrades.prepare` does KWDB's first move for
the pod the rollout moves next (reconciler.kaiwudb.rollout): the flag set, then its node marked;
the StatefulSet then restarts the pod on the new image, with the flag. `Upgrades.finish` restarts
the pod of a node left UPGRADING with nothing to move it (a mark made by hand, or before a
rollback of spec.version), so it starts once with the flag. Each write is repeatable: the
marks are read back from KWDB every pass, never remembered (the flag's value is cached only to
save a read). Used by the lifecycle step (reconciler.kaiwudb.lifecycle) and the rollout.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import KwbaseError
from reconciler.kaiwudb.kwbase.nodes import NodeStatus
from reconciler.kaiwudb.loss import parse_time
from reconciler.kaiwudb.pods import exec_pod, pod_ready
from reconciler.kaiwudb.tools import Part
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import Obj, Pass, meta, with_owner
from renderer.builders import (
    CONTAINER,
    UPGRADE_COMPLETE_KEY,
    common_labels,
)
from renderer.spec import Cluster

log = logging.getLogger(__name__)

# A pod whose node is still UPGRADING this long after it turned Ready started without the flag
# (a start with it clears the mark before the server answers): it is restarted.
FINISH_AFTER_READY_S = 30.0
# How long a value of the start-flags ConfigMap seen by this replica is trusted without a read.
SEEN_FOR_S = 300.0
CONFIG_ERROR = "CreateContainerConfigError"


def kwbase_image(pod_or_template_spec: Obj | None) -> str:
    """The kwbase container's image in a pod spec ("" when there is none)."""
    for item in (pod_or_template_spec or {}).get("containers") or ():
        if item.get("name") == CONTAINER:
            return str(item.get("image") or "")
    return ""


def template_image(sts: Obj | None) -> str:
    return kwbase_image((((sts or {}).get("spec") or {}).get("template") or {}).get("spec"))


def new_binary(pod: Obj | None, sts: Obj | None) -> bool:
    """Moving this pod to the StatefulSet's template changes the kwbase image it runs."""
    wanted = template_image(sts)
    return bool(pod is not None and wanted and kwbase_image(pod.get("spec")) != wanted)


def flag_wanted(cluster: Cluster, pods: Mapping[str, Obj],
                nodes: Sequence[NodeStatus] | None, upgrading: frozenset[int] | None
                ) -> bool | None:
    """`--upgrade-complete` for the starts to come: on while a pod runs another kwbase image
    than the spec's (a version upgrade in flight) or a node is UPGRADING; off only once every
    node is healthy and every pod Ready on the spec's image (an UPGRADING node is never
    available: cli/node.go:174); None, leave it as it is, when that cannot be told (a node
    down may be UPGRADING, and a pod re-made on the new image may not have started yet)."""
    images = {kwbase_image(pod.get("spec")) for pod in pods.values()} - {""}
    if upgrading or images - {cluster.image}:
        return True
    if nodes is None or upgrading is None or suspects(nodes) or \
            not all(pod_ready(pod) for pod in pods.values()):
        return None
    return False


def suspects(nodes: Sequence[NodeStatus] | None) -> bool:
    """Whether `node status` shows a node that may be UPGRADING: any node not available and not
    decommissioning (cli/node.go:174 folds the mark into is_available; a marked node that is
    down is not even live). Only then is the mark read."""
    return any(not n.healthy and not n.is_decommissioning for n in nodes or ())


def ready_since(pod: Obj) -> float | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def config_error(pod: Obj) -> bool:
    """The kubelet cannot create the pod's kwbase container (the ConfigMap is missing)."""
    return any(((c.get("state") or {}).get("waiting") or {}).get("reason") == CONFIG_ERROR
               for c in (pod.get("status") or {}).get("containerStatuses") or ())


def flags_object(cluster: Cluster, owner: Obj, on: bool) -> Obj:
    return with_owner({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cluster.start_flags_config_map, "namespace": cluster.namespace,
                     "labels": common_labels(cluster)},
        "data": {UPGRADE_COMPLETE_KEY: "true" if on else "false"},
    }, owner)


UPGRADE_REFUSED = "can not upgrade nodes when cluster has node"
"""KWDB's refusal of `node upgrade` while some node is neither LIVE nor DECOMMISSIONED
(server/server.go:2833-2837)."""


def refusal_hint(error: str) -> str:
    """What a person reading the status should know about KWDB's refusal to mark a node: the
    wait ends by itself. A node decommissioned after it died reads DECOMMISSIONING until
    `server.time_until_store_dead` (30 min by default) has passed since its liveness expired
    (kv/kvserver/store_pool.go:148-176); a stopped or restarting node reads UNAVAILABLE until it
    is back. "" for any other failure."""
    if UPGRADE_REFUSED not in error:
        return ""
    return ("; KWDB marks a node for upgrade only while every node is LIVE or DECOMMISSIONED: a "
            "node decommissioned after it died counts as DECOMMISSIONING until "
            "server.time_until_store_dead (30 min by default) has passed since it stopped, a "
            "stopped node as UNAVAILABLE until it is back; the upgrade goes on by itself then")


class StartFlags(Part):
    """The start-flags ConfigMap of each cluster (see the module docstring)."""

    def __init__(self, ctx: StepContext) -> None:
        super().__init__(ctx)
        # What each cluster's ConfigMap was last seen to hold, and when: saves a read per
        # pass. Never a decision: the two writes that matter (before a node is marked, before
        # a marked node's pod restarts) read it afresh, a pod that cannot start for want of it
        # makes it read again, and any value is read again after SEEN_FOR_S (another replica,
        # or a person, may have changed it).
        self._seen: dict[tuple[str, str], tuple[bool, float]] = {}

    def forget(self, namespace: str, name: str) -> None:
        self._seen.pop((namespace, name), None)

    def known(self, cluster: Cluster) -> bool:
        """Whether the ConfigMap was written or read by this reconciler (it exists)."""
        return (cluster.namespace, cluster.name) in self._seen

    def keep(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj], on: bool | None, *,
             fresh: bool = False) -> bool:
        """Make the ConfigMap say `on` (None: only that it exists, "false" when made); whether
        it does now (False: retried next pass). `fresh`: read it whatever was seen."""
        key = (cluster.namespace, cluster.name)
        seen = self._seen.get(key)
        if not fresh and seen is not None and on in (None, seen[0]) and \
                p.now - seen[1] < SEEN_FOR_S and not any(config_error(pod)
                                                         for pod in pods.values()):
            return True
        wanted = flags_object(cluster, p.obj, bool(on))
        value = wanted["data"][UPGRADE_COMPLETE_KEY]
        try:
            live = self.kube.get(k.CONFIG_MAP, cluster.namespace, cluster.start_flags_config_map)
            if live is None:
                self.kube.create(wanted)
            elif on is None:
                value = str((live.get("data") or {}).get(UPGRADE_COMPLETE_KEY))
            elif (live.get("data") or {}).get(UPGRADE_COMPLETE_KEY) != value:
                self.kube.patch(k.CONFIG_MAP, cluster.namespace, cluster.start_flags_config_map,
                                {"data": {UPGRADE_COMPLETE_KEY: value}})
        except ApiError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            p.not_ready.append(("StartFlags", (
                f"ConfigMap {cluster.start_flags_config_map} (the pods' start flags) could not "
                f"be written (retrying): {error}")))
            p.requeue_in(self.settings.poll_s)
            self._seen.pop(key, None)
            return False
        self._seen[key] = (value == "true", p.now)
        return True


class Upgrades(Part):
    """KWDB's upgrade moves (see the module docstring)."""

    def __init__(self, ctx: StepContext) -> None:
        super().__init__(ctx)
        self.flags = StartFlags(ctx)
        # (namespace, pod) -> the uid `finish` deleted: a pass whose cache still shows that
        # pod does not delete (and count) it twice; a new pod has a new uid.
        self._restarted: dict[tuple[str, str], str] = {}

    def forget(self, namespace: str, name: str) -> None:
        self.flags.forget(namespace, name)
        for key in [key for key in self._restarted
                    if key[0] == namespace and key[1].rsplit("-", 1)[0] == name]:
            self._restarted.pop(key, None)

    def upgrading(self, p: Pass, pods: Mapping[str, Obj], admin: KwbaseAdmin,
                  nodes: Sequence[NodeStatus] | None) -> frozenset[int] | None:
        """The node ids KWDB marks UPGRADING (empty without a suspect; None: unknown now)."""
        if not suspects(nodes):
            return frozenset()
        runner = exec_pod(pods)
        if runner is None:
            return None
        try:
            return admin.upgrading_nodes(runner)
        except KwbaseError as error:
            self.retry_later(p, "Upgrading", "reading which KaiwuDB nodes are UPGRADING", error)
            return None

    def prepare(self, p: Pass, cluster: Cluster, sts: Obj, pods: Mapping[str, Obj],
                admin: KwbaseAdmin, nodes: Sequence[NodeStatus], upgrading: frozenset[int],
                pod: str) -> str:
        """Before `pod` moves to a new kwbase image: the flag on, its node UPGRADING (KWDB's
        `node upgrade`). "" once done (the pod may move now), else why it may not yet."""
        if not new_binary(pods.get(pod), sts):
            return ""
        if not self.flags.keep(p, cluster, pods, True, fresh=True):
            return f"the start-flags ConfigMap {cluster.start_flags_config_map} is not written"
        mine = [n for n in nodes if n.pod_name == pod and n.is_live]
        if not mine:
            return f"no live KaiwuDB node of pod {pod} to mark UPGRADING"
        node = mine[0]
        if node.id in upgrading:
            return ""
        runner = exec_pod(pods)
        assert runner is not None  # the rollout checked every pod Ready
        try:
            admin.upgrade(runner, node.id)
        except KwbaseError as error:
            self.metrics.errors_total.labels(stage="lifecycle").inc()
            return f"`kwbase node upgrade {node.id}` failed: {error}{refusal_hint(str(error))}"
        self.count("node-upgrade")
        p.act("NodeUpgrading", f"Pod/{pod}", (
            f"KaiwuDB node {node.id} marked UPGRADING (kwbase node upgrade): the pod restarts "
            f"on {template_image(sts)} with --upgrade-complete, as KWDB's own upgrade does"))
        return ""

    def finish(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
               nodes: Sequence[NodeStatus], upgrading: frozenset[int], *,
               left_to_rollout: frozenset[str]) -> None:
        """Restart the pod of a node left UPGRADING that nothing else will restart: a pod the
        rollout is not about to move or replace (`left_to_rollout`: the pods it has released
        and the one it moves next), once every other node is healthy and the pod has been
        Ready for FINISH_AFTER_READY_S. The flag is read back as on first (a fresh read), so
        its next start clears the mark, whatever image it runs (KWDB clears it on any start
        with the flag). One pod a pass; several marks go one after another."""
        others_healthy = all(n.healthy or n.id in upgrading or n.is_decommissioning
                             for n in nodes)
        for node in sorted((n for n in nodes if n.id in upgrading), key=lambda n: n.id):
            name = str(node.pod_name or "")
            pod = pods.get(name)
            if pod is None or name in left_to_rollout:
                continue
            uid = str(meta(pod).get("uid"))
            since = ready_since(pod) if pod_ready(pod) else None
            waited = since is not None and p.now - since >= FINISH_AFTER_READY_S
            if self._restarted.get((cluster.namespace, name)) == uid:
                continue  # deleted already; the cache has not shown it yet
            if not (others_healthy and waited):
                p.not_ready.append(("Upgrading", (
                    f"KaiwuDB node {node.id} of pod {name} is UPGRADING: KWDB refuses "
                    "decommissions meanwhile; its pod restarts with --upgrade-complete once "
                    "it has been Ready a while and every other node is healthy")))
                p.requeue_in(self.settings.poll_s)
                continue
            if not self.flags.keep(p, cluster, pods, True, fresh=True):
                return
            # A plain delete (the pod's grace period: kwbase drains), guarded by its uid.
            try:
                self.kube.delete(k.POD, cluster.namespace, name, uid=uid)
            except ApiError as error:
                if not (error.conflict or error.not_found):
                    raise
            self._restarted[(cluster.namespace, name)] = uid
            self.count("upgrade-complete-restart")
            p.act("UpgradeCompleting", f"Pod/{name}", (
                f"KaiwuDB node {node.id} is UPGRADING with no rollout to restart it: the pod "
                "restarts with --upgrade-complete, which ends KWDB's upgrade mark"))
            p.requeue_in(self.settings.poll_s)
            return
