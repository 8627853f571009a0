"""Stories of the volumes step (reconciler.controller.volumes): an owner raises
spec.storage.size and each claim of the cluster is asked to grow, once; the API server's refusal
stalls the cluster with the fix and is asked again only after `volume_retry_s`; a claim growing
says what it waits for; unbound claims, other clusters' claims and claims already big enough are
left alone. Claims and answers are small fakes here; the same on the real API server with the
simulated resizer and kubelet: tests/world_stories/lifecycle/test_volumes.py.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, cast

from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import Shared
from reconciler.controller.volumes import VolumesStep
from reconciler.keys import ClusterKey
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer.schema import apply_defaults
from renderer.spec import Cluster

NS, NAME = "shop", "orders"
REFUSED = ("persistentvolumeclaims \"data-orders-0\" is forbidden: only dynamically provisioned "
           "pvc can be resized and the storageclass that provisions the pvc must support resize")


def kaiwu_cluster(size: str) -> Obj:
    return {"apiVersion": "kaiwudb.io/v1alpha1", "kind": "KaiwuCluster",
            "metadata": {"name": NAME, "namespace": NS, "uid": "c-1", "generation": 2},
            "spec": {"replicas": 3, "storage": {"size": size}}}


def claim(ordinal: int, requested: str, capacity: str, *, phase: str = "Bound",
          cluster: str = NAME, conditions: list[Obj] | None = None) -> Obj:
    status: Obj = {"phase": phase, "capacity": {"storage": capacity}}
    if conditions:
        status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{cluster}-{ordinal}", "namespace": NS,
                         "uid": f"{cluster}-{ordinal}",
                         "labels": {"app.kubernetes.io/instance": cluster,
                                    "app.kubernetes.io/name": "kaiwudb",
                                    "app.kubernetes.io/managed-by": "kaiwu-reconciler"}},
            "spec": {"resources": {"requests": {"storage": requested}},
                     "storageClassName": "standard"},
            "status": status}


class Claims:
    """The claim cache and the API's claim patches: each patch recorded, answered by
    `refuse` (an ApiError) or applied to the stored claim."""

    def __init__(self, *claims: Obj) -> None:
        self.claims = {c["metadata"]["name"]: c for c in claims}
        self.patches: list[tuple[str, Obj]] = []
        self.refuse: ApiError | None = None

    def list(self, kind: Kind, namespace: str, labels: dict[str, str]) -> list[Obj]:
        assert kind.kind == "PersistentVolumeClaim" and namespace == NS
        return [copy.deepcopy(c) for c in self.claims.values() if all(
            c["metadata"]["labels"].get(key) == value for key, value in labels.items())]

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj) -> Obj:
        self.patches.append((name, patch))
        if self.refuse is not None:
            raise self.refuse
        stored = self.claims[name]
        assert patch["metadata"]["uid"] == stored["metadata"]["uid"]
        stored["spec"]["resources"]["requests"].update(patch["spec"]["resources"]["requests"])
        return copy.deepcopy(stored)


def step_with(claims: Claims, **settings: Any) -> VolumesStep:
    shared = SimpleNamespace(view=claims, kube=claims, metrics=Metrics(),
                             settings=Settings(**settings))
    return VolumesStep(cast(Shared, shared))


def run(step: VolumesStep, size: str, now: float = 1000.0) -> ObjectPass:
    obj = kaiwu_cluster(size)
    p = ObjectPass(ClusterKey(NS, NAME), obj, now, {})
    p.cluster = Cluster.from_object(apply_defaults(obj))
    step.run(p)
    return p


def test_raising_the_size_asks_each_bound_claim_of_the_cluster_to_grow_once() -> None:
    claims = Claims(claim(0, "10Gi", "10Gi"), claim(1, "10Gi", "10Gi"),
                    claim(2, "10Gi", "10Gi", phase="Pending"),
                    claim(0, "10Gi", "10Gi", cluster="other"),
                    claim(3, "20Gi", "20Gi"))
    step = step_with(claims)
    p = run(step, "20Gi")
    assert claims.patches == [
        ("data-orders-0", {"metadata": {"uid": "orders-0"},
                           "spec": {"resources": {"requests": {"storage": "20Gi"}}}}),
        ("data-orders-1", {"metadata": {"uid": "orders-1"},
                           "spec": {"resources": {"requests": {"storage": "20Gi"}}}})]
    assert [(a.action, a.target, a.message) for a in p.actions] == [
        ("VolumeExpanding", "PersistentVolumeClaim/data-orders-0", "10Gi -> 20Gi"),
        ("VolumeExpanding", "PersistentVolumeClaim/data-orders-1", "10Gi -> 20Gi")]
    reason, message = p.not_ready[0]
    assert reason == "VolumesResizing"
    assert "data-orders-0 (10Gi -> 20Gi: the storage provider's resizer)" in message
    assert not p.stalled

    # The next pass finds them asked for: it waits, and writes nothing.
    claims.patches.clear()
    p = run(step, "20Gi")
    assert claims.patches == [] and p.not_ready[0][0] == "VolumesResizing"


def test_a_claim_growing_says_what_it_waits_for_and_a_grown_one_is_done() -> None:
    pending = [{"type": "FileSystemResizePending", "status": "True"}]
    claims = Claims(claim(0, "20Gi", "10Gi", conditions=pending),
                    claim(1, "20Gi", "10Gi", conditions=[{"type": "Resizing", "status": "True"}]),
                    claim(2, "20Gi", "20Gi"))
    p = run(step_with(claims), "20Gi")
    message = p.not_ready[0][1]
    assert "data-orders-0 (10Gi -> 20Gi: the file system resize by the kubelet" in message
    assert "data-orders-1 (10Gi -> 20Gi: the storage provider expanding the volume)" in message
    assert "data-orders-2" not in message
    assert claims.patches == []

    claims = Claims(*(claim(n, "20Gi", "20Gi") for n in range(3)))
    p = run(step_with(claims), "20Gi")
    assert not p.not_ready and not p.stalled and not p.requeue


def test_a_refused_expansion_stalls_with_the_fix_and_is_asked_again_only_after_the_retry() -> None:
    claims = Claims(claim(0, "10Gi", "10Gi"), claim(1, "10Gi", "10Gi"))
    claims.refuse = ApiError(403, "Forbidden", REFUSED)
    step = step_with(claims, volume_retry_s=60.0)
    p = run(step, "20Gi", now=1000.0)
    reason, message = p.stalled[0]
    assert reason == "VolumeExpansionRefused"
    assert message.startswith(f"claims data-orders-0, data-orders-1 cannot grow to 20Gi: "
                              f"{REFUSED}. Set allowVolumeExpansion: true on StorageClass "
                              "standard")
    assert "tried again every 60s" in message and not p.actions
    assert p.requeue == [60.0]
    assert len(claims.patches) == 2

    # Within the retry period the refusal is remembered: nothing is asked, the stall stays.
    p = run(step, "20Gi", now=1030.0)
    assert len(claims.patches) == 2 and p.stalled[0][0] == "VolumeExpansionRefused"

    # After it, the class now allows expansion: asked again, and granted.
    claims.refuse = None
    p = run(step, "20Gi", now=1061.0)
    assert len(claims.patches) == 4 and not p.stalled
    assert p.not_ready[0][0] == "VolumesResizing"


def test_a_claim_made_again_meanwhile_is_not_patched_blindly() -> None:
    claims = Claims(claim(0, "10Gi", "10Gi"))
    claims.refuse = ApiError(409, "Conflict", "Precondition failed: UID in precondition")
    p = run(step_with(claims), "20Gi")
    assert not p.stalled and not p.actions and p.requeue == [0.5]


def test_unreadable_sizes_in_a_claim_are_ignored_not_fatal() -> None:
    hostile = claim(0, "10Gi", "lots")
    hostile["spec"]["resources"]["requests"]["storage"] = ["10Gi"]
    claims = Claims(hostile)
    p = run(step_with(claims), "20Gi")
    assert claims.patches == [] and not p.not_ready and not p.stalled
