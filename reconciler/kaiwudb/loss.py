"""What the cluster shows about lost Kubernetes nodes, their pods and the volumes pinned there.

Pure reads of the watch caches (and, for a claim's volume, one API read), no decisions: the
failover step (reconciler.kaiwudb.failover) decides from these facts on every pass, and the
lifecycle step (reconciler.kaiwudb.lifecycle) asks `disrupted` whether a pod is down before it
moves another one. Nothing here is remembered between passes, so whatever happened before (a pod
force-deleted by an administrator, a reconciler killed between two writes), the same world gives
the same facts.

A Kubernetes node is lost when its Ready condition is False or Unknown (the node lifecycle
controller's verdict once the kubelet stops reporting), or when the Node object is gone. How long
it has been lost comes from the condition's lastTransitionTime; a Node that is gone has no such
time, and the caller supplies when it first saw it missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from reconciler.kaiwudb.pods import pod_ready
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.model import Obj, meta

SELECTED_NODE = "volume.kubernetes.io/selected-node"
HOSTNAME_LABEL = "kubernetes.io/hostname"



def parse_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class NodeLoss:
    """A Kubernetes node that is not Ready: its name, its Ready status ("False", "Unknown", or
    "Missing" when the Node is gone) and since when (None: not known from the Node)."""

    name: str
    status: str
    since: float | None


def node_loss(view: CacheView | Kube, name: str) -> NodeLoss | None:
    """The node's loss, or None while it is Ready (`view` a cache, or the API for a fresh
    read)."""
    node = view.get(k.NODE, "", name)
    if node is None:
        return NodeLoss(name, "Missing", None)
    for item in (node.get("status") or {}).get("conditions") or ():
        if item.get("type") == "Ready":
            status = str(item.get("status"))
            if status == "True":
                return None
            return NodeLoss(name, status, parse_time(str(item.get("lastTransitionTime") or "")))
    return NodeLoss(name, "Unknown", None)


def pod_node(pod: Obj | None) -> str:
    """The Kubernetes node a pod is bound to ("" while unscheduled)."""
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


def ready_condition(pod: Obj | None) -> tuple[bool, float | None]:
    """(the pod's Ready condition is True, when it last changed)."""
    for item in ((pod or {}).get("status") or {}).get("conditions") or ():
        if item.get("type") == "Ready":
            return (item.get("status") == "True",
                    parse_time(str(item.get("lastTransitionTime") or "")))
    return False, None


def volume_node(kube: Kube, claim: Obj | None) -> str:
    """The node a claim's volume is pinned to ("" when it is not pinned to one node).

    A claim provisioned for a node carries the scheduler's selected-node annotation (dynamic
    provisioning with WaitForFirstConsumer, as node-local provisioners do); a claim bound to a
    pre-made local volume has none, and the PersistentVolume's required node affinity says it
    (one API read, made only for a pod that is down; skipped when RBAC forbids it)."""
    if claim is None:
        return ""
    selected = str((meta(claim).get("annotations") or {}).get(SELECTED_NODE) or "")
    volume = str((claim.get("spec") or {}).get("volumeName") or "")
    if selected or not volume:
        return selected
    try:
        return _affinity_node(kube.get(k.PV, None, volume))
    except ApiError as error:
        if error.forbidden:
            return ""
        raise


def _affinity_node(volume: Obj | None) -> str:
    """The one node a volume's required node affinity allows by hostname ("" otherwise)."""
    required = ((((volume or {}).get("spec") or {}).get("nodeAffinity") or {})
                .get("required") or {})
    names: set[str] = set()
    for term in required.get("nodeSelectorTerms") or ():
        for expression in term.get("matchExpressions") or ():
            if expression.get("key") == HOSTNAME_LABEL and expression.get("operator") == "In":
                names.update(str(value) for value in expression.get("values") or ())
        for field_ in term.get("matchFields") or ():
            if field_.get("key") == "metadata.name" and field_.get("operator") == "In":
                names.update(str(value) for value in field_.get("values") or ())
    return names.pop() if len(names) == 1 else ""


def disrupted(view: CacheView, pods: Mapping[str, Obj], names: list[str]) -> list[str]:
    """The pods of `names` that are down as Kubernetes sees it: missing, terminating,
    unscheduled, on a node that is not Ready, or not Ready themselves (as a
    PodDisruptionBudget counts them: a failing readiness probe is KaiwuDB's `/health?ready=1`
    saying no, whatever its liveness shows yet). Every disruptive step waits while another pod
    is down (one disruption at a time). KaiwuDB's own view is the node probe's."""
    down = []
    for name in names:
        pod = pods.get(name)
        node = pod_node(pod)
        if pod is None or meta(pod).get("deletionTimestamp") or not node or \
                node_loss(view, node) is not None or not pod_ready(pod):
            down.append(name)
    return down
