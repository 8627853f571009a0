"""Helpers of the cluster stories (tests/world_stories/lifecycle/ and failover/): bring a small
KaiwuCluster up under the drift harness's reconciler, read its status, scale it as a user does,
and tell when a pod is ready or a node was lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kubernetes import client as k8s

from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.replication import LIVENESS_TTL_S, METRICS_SAMPLE_S
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from renderer.schema import apply_defaults
from renderer.spec import Cluster
from tests.support.harness import Reconciler, condition, example, user, wait_for
from tests.world.simworld import SimWorld

NAME = "dev"

# After a node is lost, the replication health the failover, scale-in and rollout gates read
# counts only once every live node's store metrics were written two sample intervals after the
# lost node's liveness expired (its last record, one interval at most before it went, plus the
# TTL): KWDB's metrics count its replicas up to date until then
# (reconciler.kaiwudb.kwbase.replication.stale_records). On KWDB's timings, which the simulator
# keeps, up to 45 s more than before.
HEALTH_AFTER_LOSS_S = METRICS_SAMPLE_S + LIVENESS_TTL_S + 2 * METRICS_SAMPLE_S


def report(what: str, seconds: float) -> None:
    print(f"[timing] {what}: {seconds:.2f} s")


def small_cluster(namespace: str, **spec: Any) -> Obj:
    """The dev example (3 nodes, insecure) with small pods, one pod per Kubernetes node."""
    obj = example("dev", namespace)
    obj["spec"]["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    obj["spec"]["storage"] = {"size": "1Gi"}
    obj["spec"]["scheduling"] = {"antiAffinity": "required"}
    obj["spec"].update(spec)
    return obj


def status(reconciler: Reconciler) -> dict[str, Any]:
    found: dict[str, Any] = (reconciler.cluster(NAME) or {}).get("status") or {}
    return found


def ready(reconciler: Reconciler) -> Obj | None:
    obj = reconciler.cluster(NAME)
    return obj if condition(obj, "Ready").get("status") == "True" else None


def wait_ready(reconciler: Reconciler, timeout_s: float = 60.0) -> Obj:
    found: Obj = wait_for(f"cluster {NAME} to be Ready", lambda: ready(reconciler), timeout_s,
                          0.1)
    return found


def live_nodes(obj: Obj) -> dict[str, int]:
    """pod -> KaiwuDB node id of every live node in the cluster's status."""
    return {entry["pod"]: entry["nodeId"] for entry in obj["status"].get("nodes") or ()
            if entry.get("state") == "live"}


def lifecycle_count(reconciler: Reconciler, action: str) -> float:
    return reconciler.metrics.value("kaiwu_lifecycle_actions_total", {"action": action})


def bring_up(reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
             namespace: str, cluster: Obj) -> tuple[Reconciler, Obj, float]:
    """Start the reconciler, apply the cluster as a user would, wait for Ready."""
    reconciler = reconciler_factory()
    started = time.monotonic()
    user(kube, "kubectl").apply(cluster)
    obj = wait_ready(reconciler, 75)
    return reconciler, obj, time.monotonic() - started


def fully_replicated(sim_world: SimWorld, namespace: str, timeout_s: float = 60.0) -> None:
    """Wait until the simulated KaiwuDB holds every range's copies. A cluster Ready moments ago
    is still up-replicating: a node lost then takes the quorum of every range with two
    replicas, one on it. KWDB keeps such a range unavailable until the node is back, and the
    reconciler keeps the lost store (it may hold the range's last copies): a story about a node
    lost from a healthy cluster starts here."""
    wait_for("three copies of every range", lambda: sim_world.kwdb.replication(
        (namespace, NAME), sim_world.clock.now()).underreplicated == 0, timeout_s, 0.1)


def pause(reconciler: Reconciler, kube: k8s.ApiClient, namespace: str) -> None:
    """Set spec.paused as a person would (kubectl patch), and wait until the reconciler says
    Reconciling=False/Paused: from then on it writes nothing for the cluster."""
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"paused": True}})
    wait_for("the pause to be seen", lambda: condition(
        reconciler.cluster(NAME), "Reconciling").get("reason") == "Paused", 20, 0.1)


def scale(kube: k8s.ApiClient, namespace: str, replicas: int) -> None:
    """What `kubectl patch kwc dev --type merge -p '{"spec":{"replicas":N}}'` does."""
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"replicas": replicas}})


def statefulset_replicas(kube: k8s.ApiClient, namespace: str) -> int:
    found = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert found is not None
    return int(found["spec"]["replicas"])


def pod_ready(found: Obj | None) -> bool:
    return found is not None and not found["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (found.get("status") or {}).get("conditions") or ())


def node_lost_since(kube: k8s.ApiClient, node: str) -> float | None:
    """When the node lifecycle controller marked the node's Ready condition not True."""
    found = Kube(kube, "test").get(kk.NODE, None, node)
    for item in ((found or {}).get("status") or {}).get("conditions") or ():
        if item.get("type") == "Ready" and item.get("status") != "True":
            return datetime.fromisoformat(
                str(item["lastTransitionTime"]).replace("Z", "+00:00")).timestamp()
    return None


def kaiwudb_admin(kube: k8s.ApiClient, namespace: str, spec: Obj) -> KwbaseAdmin:
    """The test's own window into KaiwuDB (kwbase through exec, as a person would use it)."""
    return KwbaseAdmin.for_cluster(Kube(kube, "test"), Cluster.from_object(apply_defaults(spec)))
