"""Stories of the volumes step (reconciler.controller.volumes): an owner raises
spec.storage.size and the claim of each ordinal the cluster runs is asked to grow, once; the
VolumesExpanded condition says how far it got (apart from Ready): what each claim waits for, a
resize error, or the API server's refusal with the fix, asked again only after
`volume_retry_s`; unbound claims, other clusters' claims, strays beyond spec.replicas and claims
already big enough are left alone; an old unlabelled claim is read and labelled once. Claims
and answers are small fakes here; the same on the real API server with the simulated resizer
and kubelet: tests/world_stories/lifecycle/test_volumes.py.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, cast

from reconciler import status as st
from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import ControllerMemory
from reconciler.controller.volumes import VolumesStep
from reconciler.kaiwudb.context import StepContext
from reconciler.keys import ClusterKey
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer.builders import MANAGED_BY, MANAGED_BY_LABEL
from renderer.schema import apply_defaults
from renderer.spec import Cluster
from tests.support.peeks import Peeks

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
                                    MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": {"resources": {"requests": {"storage": requested}},
                     "storageClassName": "standard"},
            "status": status}


class Claims(Peeks):
    """The claim cache (labelled claims only, as the PVC cache selects) and the API (every
    claim): each patch recorded, answered by `refuse` (an ApiError) or applied to the stored
    claim."""

    def __init__(self, *claims: Obj) -> None:
        self.claims = {c["metadata"]["name"]: c for c in claims}
        self.patches: list[tuple[str, Obj]] = []
        self.reads: list[str] = []
        self.refuse: ApiError | None = None

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """The cache's get: only claims with the managed-by label."""
        found = self.claims.get(name)
        labels = (found or {}).get("metadata", {}).get("labels") or {}
        return copy.deepcopy(found) if found and MANAGED_BY_LABEL in labels else None

    def api_get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        self.reads.append(name)
        return copy.deepcopy(self.claims.get(name))

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj) -> Obj:
        self.patches.append((name, patch))
        if self.refuse is not None and "spec" in patch:
            raise self.refuse
        stored = self.claims[name]
        assert patch["metadata"]["uid"] == stored["metadata"]["uid"]
        stored["metadata"].setdefault("labels", {}).update(patch["metadata"].get("labels", {}))
        if "spec" in patch:
            stored["spec"]["resources"]["requests"].update(
                patch["spec"]["resources"]["requests"])
        return copy.deepcopy(stored)


def step_with(claims: Claims, **settings: Any) -> VolumesStep:
    kube = SimpleNamespace(get=claims.api_get, patch=claims.patch)
    ctx = SimpleNamespace(view=claims, kube=kube, metrics=Metrics(),
                          settings=Settings(**settings))
    return VolumesStep(cast(StepContext, ctx), cast(ControllerMemory, SimpleNamespace()))


def run(step: VolumesStep, size: str, now: float = 1000.0, replicas: int = 3) -> ObjectPass:
    obj = kaiwu_cluster(size)
    obj["spec"]["replicas"] = replicas
    p = ObjectPass(ClusterKey(NS, NAME), obj, now, {})
    p.cluster = Cluster.from_object(apply_defaults(obj))
    step.run(p)
    return p


def verdict(p: ObjectPass) -> st.Condition:
    [found] = p.conditions
    assert found.type == "VolumesExpanded"
    return found


def grow(name: str, uid: str, size: str = "20Gi") -> tuple[str, Obj]:
    return name, {"metadata": {"uid": uid}, "spec": {"resources": {"requests": {
        "storage": size}}}}


def test_raising_the_size_asks_each_bound_claim_the_cluster_runs_to_grow_once() -> None:
    claims = Claims(claim(0, "10Gi", "10Gi"), claim(1, "10Gi", "10Gi"),
                    claim(2, "10Gi", "10Gi", phase="Pending"),
                    claim(0, "10Gi", "10Gi", cluster="other"),
                    claim(3, "10Gi", "10Gi"))  # beyond replicas: a stray, no pod runs it
    step = step_with(claims)
    p = run(step, "20Gi")
    assert claims.patches == [grow("data-orders-0", "orders-0"),
                              grow("data-orders-1", "orders-1")]
    assert [(a.action, a.target, a.message) for a in p.actions] == [
        ("VolumeExpanding", "PersistentVolumeClaim/data-orders-0", "10Gi -> 20Gi"),
        ("VolumeExpanding", "PersistentVolumeClaim/data-orders-1", "10Gi -> 20Gi")]
    found = verdict(p)
    assert (found.status, found.reason) == ("False", "VolumesResizing")
    assert found.message.startswith("growing to 20Gi: data-orders-0 (10Gi -> 20Gi: no resizer "
                                    "has acted yet (kubectl describe pvc")
    assert not p.stalled and not p.not_ready, "Ready is not held by a resize"
    assert p.requeue == [60.0]

    # The next pass finds them asked for: it waits, and writes nothing.
    claims.patches.clear()
    p = run(step, "20Gi")
    assert claims.patches == [] and verdict(p).reason == "VolumesResizing"
    assert claims.reads == [], "every claim is in the cache: nothing is read from the API"


def test_a_claim_growing_says_what_it_waits_for_and_a_grown_one_is_done() -> None:
    pending = [{"type": "FileSystemResizePending", "status": "True"}]
    claims = Claims(claim(0, "20Gi", "10Gi", conditions=pending),
                    claim(1, "20Gi", "10Gi", conditions=[{"type": "Resizing", "status": "True"}]),
                    claim(2, "20Gi", "20Gi"))
    message = verdict(run(step_with(claims), "20Gi")).message
    assert "data-orders-0 (10Gi -> 20Gi: the kubelet of its node growing the file system" in (
        message)
    assert "data-orders-1 (10Gi -> 20Gi: the storage provider expanding the volume)" in message
    assert "data-orders-2" not in message
    assert claims.patches == []

    claims = Claims(*(claim(n, "20Gi", "20Gi") for n in range(3)))
    p = run(step_with(claims), "20Gi")
    assert verdict(p) == st.Condition("VolumesExpanded", "True", "SizeReached",
                                      "every bound volume has 20Gi or more")
    assert not p.requeue


def test_a_resize_error_on_a_claim_is_said_before_anything_it_waits_for() -> None:
    failing = [{"type": "FileSystemResizePending", "status": "True"},
               {"type": "NodeResizeError", "status": "True", "message": "resize2fs failed"}]
    infeasible = claim(1, "20Gi", "10Gi")
    infeasible["status"]["allocatedResourceStatuses"] = {"storage": "ControllerResizeInfeasible"}
    claims = Claims(claim(0, "20Gi", "10Gi", conditions=failing), infeasible)
    found = verdict(run(step_with(claims), "20Gi"))
    assert (found.status, found.reason) == ("False", "VolumeExpansionFailed")
    assert found.message == (
        "resize failed (kubectl describe pvc NAME shows the storage provider's events): "
        "data-orders-0: NodeResizeError: resize2fs failed; data-orders-1: "
        "allocatedResourceStatuses.storage is ControllerResizeInfeasible")


def test_a_class_that_cannot_expand_is_said_with_the_fix_and_asked_again_after_the_retry(
) -> None:
    claims = Claims(claim(0, "10Gi", "10Gi"), claim(1, "10Gi", "10Gi"))
    claims.refuse = ApiError(403, "Forbidden", REFUSED)
    step = step_with(claims, volume_retry_s=60.0)
    p = run(step, "20Gi", now=1000.0, replicas=2)
    found = verdict(p)
    assert (found.status, found.reason) == ("False", "VolumeExpansionRefused")
    assert found.message.startswith(
        "set allowVolumeExpansion: true on StorageClass standard if its provisioner can expand "
        "volumes (asked again every 60s); until then the volumes keep their size, the cluster "
        "runs on and new volumes get 20Gi. Claims data-orders-0, data-orders-1 cannot grow to "
        f"20Gi: {REFUSED}")
    assert not p.stalled and not p.not_ready and not p.actions
    assert [e[:2] for e in p.events] == [("Warning", "VolumeExpansionRefused")] * 2
    assert p.requeue == [60.0]
    assert len(claims.patches) == 2

    # Within the retry period the refusal is remembered: nothing is asked, nothing said again.
    p = run(step, "20Gi", now=1030.0, replicas=2)
    assert len(claims.patches) == 2 and verdict(p).reason == "VolumeExpansionRefused"
    assert not p.events

    # After it, the class now allows expansion: asked again, and granted.
    claims.refuse = None
    p = run(step, "20Gi", now=1061.0, replicas=2)
    assert len(claims.patches) == 4 and verdict(p).reason == "VolumesResizing"


def test_another_refusal_is_said_as_the_server_said_it_without_the_class_advice() -> None:
    claims = Claims(claim(0, "10Gi", "10Gi"))
    claims.refuse = ApiError(403, "Forbidden", 'persistentvolumeclaims "data-orders-0" is '
                             "forbidden: exceeded quota: storage, requested: requests.storage=10Gi")
    found = verdict(run(step_with(claims), "20Gi", replicas=1))
    assert found.reason == "VolumeExpansionRefused"
    assert found.message.startswith("the API server refused growing claims data-orders-0 to "
                                    "20Gi (asked again every 60s): persistentvolumeclaims")
    assert "allowVolumeExpansion" not in found.message


def test_a_claim_made_again_meanwhile_is_not_patched_blindly() -> None:
    claims = Claims(claim(0, "10Gi", "10Gi"))
    # What the API server answers a merge patch whose metadata.uid is not the stored claim's.
    claims.refuse = ApiError(422, "Invalid", 'PersistentVolumeClaim "data-orders-0" is invalid: '
                             "metadata.uid: Invalid value: \"orders-0\": field is immutable")
    p = run(step_with(claims), "20Gi", replicas=1)
    assert verdict(p).status == "True", "nothing refused: the next pass judges the new claim"
    assert not p.actions and not p.events and p.requeue == [0.5]


def test_a_claim_made_before_claims_were_labelled_is_read_labelled_once_and_grown() -> None:
    old = claim(0, "10Gi", "10Gi")
    del old["metadata"]["labels"]
    claims = Claims(old)
    p = run(step_with(claims), "20Gi", replicas=1)
    assert claims.reads == ["data-orders-0"]
    assert claims.patches[0] == ("data-orders-0", {"metadata": {"uid": "orders-0", "labels": {
        "app.kubernetes.io/instance": NAME, "app.kubernetes.io/name": "kaiwudb",
        MANAGED_BY_LABEL: MANAGED_BY}}})
    assert claims.patches[1] == grow("data-orders-0", "orders-0")
    assert verdict(p).reason == "VolumesResizing"

    # Labelled, it is in the cache from now on.
    claims.reads.clear()
    run(step_with(claims), "20Gi", replicas=1)
    assert claims.reads == []


def test_unreadable_sizes_and_conditions_in_a_claim_are_ignored_not_fatal() -> None:
    hostile = claim(0, "10Gi", "lots")
    hostile["spec"]["resources"]["requests"]["storage"] = ["10Gi"]
    odd = claim(1, "20Gi", "10Gi")
    odd["status"]["conditions"] = 7
    claims = Claims(hostile, odd)
    p = run(step_with(claims), "20Gi", replicas=2)
    assert claims.patches == []
    assert "data-orders-1 (10Gi -> 20Gi: no resizer has acted yet" in verdict(p).message
