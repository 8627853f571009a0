"""Pods and claims of a KaiwuDB cluster, as the lifecycle and failover steps read them.

Helpers over cached objects (and one API read for a claim the cache lacks): which pods the
cluster has, whether kwbase runs and the pod is Ready, which pod to exec cluster-wide commands
in, a pod's claim, and the StatefulSet's rollout partition. Two writes: `force_delete`, which the
failover step and the scale-in both make for a pod no kubelet will ever confirm gone, and
`delete_claim`, the one way a claim is deleted (scale-in, a stray node's claim, failover's
volume replacement). Used by every module of reconciler.kaiwudb.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.model import Obj, meta
from renderer.builders import selector_labels
from renderer.spec import Cluster

log = logging.getLogger(__name__)


CLAIM_TEMPLATE = "data"  # the renderer's volumeClaimTemplate: claims are data-<pod>
REVISION_LABEL = "controller-revision-hash"



def ordinal(pod_name: str) -> int:
    """The StatefulSet ordinal at the end of a pod name (-1 when there is none)."""
    tail = pod_name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def kwbase_running(pod: Obj | None) -> bool:
    """The pod is not being deleted and its kwbase container runs (it may wait for init)."""
    if pod is None or meta(pod).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("name") == "kwbase" and "running" in (c.get("state") or {})
        for c in status.get("containerStatuses") or ())


def pod_ready(pod: Obj | None) -> bool:
    return kwbase_running(pod) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in ((pod or {}).get("status") or {}).get("conditions") or ())


def cluster_pods(view: CacheView, cluster: Cluster) -> dict[str, Obj]:
    return {str(meta(pod).get("name")): pod
            for pod in view.peek_list(k.POD, cluster.namespace, selector_labels(cluster))}


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


def claim_of(view: CacheView, kube: Kube, namespace: str, pod: str) -> Obj | None:
    """The claim behind a pod's data volume. Claims made from the rendered template carry the
    managed-by label the PVC cache selects on; a claim made before the template had it is read
    once from the API (only while a lifecycle action is under way, never in a steady pass)."""
    name = f"{CLAIM_TEMPLATE}-{pod}"
    return view.peek(k.PVC, namespace, name) or kube.get(k.PVC, namespace, name)


def exec_pod(pods: Mapping[str, Obj], avoid: str = "") -> str | None:
    """The pod to run cluster-wide commands in: a Ready one (its node is live), lowest ordinal
    first, else any whose kwbase runs; never `avoid` (the node being removed) if another will do.
    """
    names = sorted(pods, key=ordinal)
    # Any other pod that runs kwbase comes before `avoid`, even a Ready `avoid`: the node
    # being removed may be cut off, and a pod whose readiness fails still answers.
    for allowed in ([name for name in names if name != avoid], names):
        for check in (pod_ready, kwbase_running):
            found = [name for name in allowed if check(pods[name])]
            if found:
                return found[0]
    return None


def delete_claim(kube: Kube, namespace: str, claim: Obj) -> bool:
    """Delete the claim as it was judged: the uid precondition makes a claim of the same name
    made since (the StatefulSet's new one for a new pod) a 409, never deleted. True once the
    server accepted the delete; False when the claim was already gone (404) or is a successor
    (409): either way the judged claim is no more, which is what every caller wanted. Other
    errors are raised: the caller's pass fails and is retried."""
    md = meta(claim)
    name, uid = str(md.get("name")), md.get("uid")
    try:
        deleted = kube.delete(k.PVC, namespace, name, uid=str(uid) if uid else None)
    except ApiError as error:
        if not error.conflict:
            raise
        log.info("claim %s/%s was made again since it was judged (uid %s): left alone",
                 namespace, name, uid)
        return False
    if deleted:
        log.info("deleted claim %s/%s (uid %s)", namespace, name, uid)
    return deleted


def force_delete(kube: Kube, pod: Obj) -> None:
    """Delete the pod with grace 0, guarded by the uid it was judged on (repeating it after a
    crash is harmless: a successor with the same name is never the one deleted)."""
    md = meta(pod)
    try:
        kube.delete(k.POD, str(md.get("namespace")), str(md.get("name")),
                    uid=str(md.get("uid")), grace_period_seconds=0)
    except ApiError as error:
        if not error.conflict:  # a successor with the same name is there already
            raise
