"""Stories: an owner gives a running KaiwuCluster bigger volumes.

Raising spec.storage.size grows every claim in place where the StorageClass allows expansion:
the reconciler raises each bound claim's request, the storage provider grows the volume and the
kubelet of the node that mounts it grows the file system while the pod runs (simulated, as a CSI
driver with the external-resizer does it: tests/world/storage.py; the API server's admission and
validation are the real ones). The StatefulSet's claim template, which cannot change in place,
is swapped by an orphaning delete. No pod restarts, no claim is replaced, no KaiwuDB node
changes; the VolumesExpanded condition says how far the growth got. On a class that does not
allow expansion the API server refuses the claim's new request: the condition says which class
and what to do, with a Warning Event, the cluster stays Ready (new volumes get the new size),
and the volumes grow by themselves once the class allows it. Timings are printed (pytest -s).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import cast

import pytest
from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import NAME, bring_up, live_nodes, report, small_cluster
from tests.world.simworld import SimWorld

FIXED_CLASS = "kaiwu-local-fixed"


def claims(kube: k8s.ApiClient, namespace: str) -> dict[str, Obj]:
    found, _ = Kube(kube, "test").list_objects(kk.PVC, namespace)
    return {c["metadata"]["name"]: c for c in found}


def pods(kube: k8s.ApiClient, namespace: str) -> dict[str, tuple[str, int]]:
    """pod -> (uid, restarts of its kwbase container)."""
    found, _ = Kube(kube, "test").list_objects(kk.POD, namespace,
                                               f"app.kubernetes.io/instance={NAME}")
    return {p["metadata"]["name"]: (p["metadata"]["uid"], sum(
        int(c.get("restartCount") or 0) for c in (p.get("status") or {}).get(
            "containerStatuses") or ())) for p in found}


def grown_to(size: str, kube: k8s.ApiClient, namespace: str) -> bool:
    """Every claim asks for `size` and has it (its file system grown), no resize pending."""
    found = claims(kube, namespace)
    return len(found) == 3 and all(
        c["spec"]["resources"]["requests"]["storage"] == size
        and (c.get("status") or {}).get("capacity", {}).get("storage") == size
        and not (c.get("status") or {}).get("conditions") for c in found.values())


def resize(kube: k8s.ApiClient, namespace: str, size: str) -> None:
    """What `kubectl patch kwc dev --type merge -p '{"spec":{"storage":{"size":...}}}'` does."""
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"storage": {"size": size}}})


def template_size(kube: k8s.ApiClient, namespace: str) -> str:
    sts = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert sts is not None
    return str(sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"])


@pytest.fixture
def fixed_class(sim_world: SimWorld, kube: k8s.ApiClient) -> Iterator[str]:
    """A StorageClass of the simulated provisioner that does not allow expansion (yet)."""
    storage = k8s.StorageV1Api(kube)
    body = sim_world.storage.storage_class()
    body["metadata"] = {"name": FIXED_CLASS}
    body["allowVolumeExpansion"] = False
    storage.create_storage_class(cast(k8s.V1StorageClass, body))  # a dict serves as well
    yield FIXED_CLASS
    storage.delete_storage_class(FIXED_CLASS)


def test_a_bigger_storage_size_grows_every_volume_in_place_without_restarting_a_pod(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, _ = bring_up(reconciler_factory, kube, namespace, small_cluster(namespace))
    before_pods, before_claims = pods(kube, namespace), claims(kube, namespace)
    nodes = live_nodes(obj)
    assert grown_to("1Gi", kube, namespace)

    started = time.monotonic()
    resize(kube, namespace, "2Gi")
    reasons: set[str] = set()

    def done() -> bool:
        obj = reconciler.cluster(NAME)
        reasons.add(str(condition(obj, "VolumesExpanded").get("reason")))
        return grown_to("2Gi", kube, namespace) and condition(obj, "Ready").get(
            "status") == "True" and condition(obj, "VolumesExpanded").get("status") == "True"
    wait_for("every claim grown to 2Gi, VolumesExpanded and Ready", done, 60, 0.05)
    report("storage 1Gi -> 2Gi: every volume grown, Ready", time.monotonic() - started)
    print(f"VolumesExpanded reasons seen meanwhile: {sorted(reasons)}")

    # The claim template follows (a new StatefulSet adopted the same pods and claims).
    assert template_size(kube, namespace) == "2Gi"
    assert pods(kube, namespace) == before_pods, "no pod was replaced or restarted"
    after = claims(kube, namespace)
    assert {n: c["metadata"]["uid"] for n, c in after.items()} == {
        n: c["metadata"]["uid"] for n, c in before_claims.items()}, "the same claims"
    volumes = {c["spec"]["volumeName"] for c in after.values()}
    for volume in volumes:
        pv = Kube(kube, "test").get(kk.PV, None, volume)
        assert pv is not None and pv["spec"]["capacity"]["storage"] == "2Gi"
    now = reconciler.cluster(NAME)
    assert now is not None and live_nodes(now) == nodes, "the same KaiwuDB nodes"
    grown = {a["target"] for a in now["status"]["lastActions"]
             if a["action"] == "VolumeExpanding" and a["message"] == "1Gi -> 2Gi"}
    assert grown == {f"PersistentVolumeClaim/{name}" for name in before_claims}

    # At rest: nothing more to grow, so nothing is asked again.
    asked = reconciler.metrics.value("kaiwu_writes_total", {"verb": "patch",
                                                            "kind": "PersistentVolumeClaim"})
    reconciler.settle(NAME)
    assert reconciler.metrics.value("kaiwu_writes_total", {
        "verb": "patch", "kind": "PersistentVolumeClaim"}) == asked


def test_a_class_that_cannot_expand_is_said_and_the_volumes_grow_once_it_can(
        fixed_class: str, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, _, _ = bring_up(
        lambda: reconciler_factory(volume_retry_s=2.0), kube, namespace,
        small_cluster(namespace, storage={"size": "1Gi", "storageClassName": fixed_class}))
    before_pods = pods(kube, namespace)

    resize(kube, namespace, "2Gi")
    refused = wait_for("the refusal to be said", lambda: (
        c := condition(reconciler.cluster(NAME), "VolumesExpanded")).get("reason")
        == "VolumeExpansionRefused" and c, 30, 0.1)
    message = refused["message"]
    print(f"\nVolumesExpanded: {message}")
    assert refused["status"] == "False"
    assert message.startswith(f"set allowVolumeExpansion: true on StorageClass {fixed_class}")
    # The API server's own words (PersistentVolumeClaimResize admission) are passed on.
    assert "storageclass that provisions the pvc must support resize" in message
    assert all(c["spec"]["resources"]["requests"]["storage"] == "1Gi"
               for c in claims(kube, namespace).values()), "nothing half-applied"
    # The cluster runs on: Ready, not Stalled (a class that never expands must not hold it).
    obj = wait_for("Ready with the new claim template", lambda: (
        o := reconciler.cluster(NAME)) and condition(o, "Ready").get("status") == "True"
        and template_size(kube, namespace) == "2Gi" and o, 30, 0.1)
    assert condition(obj, "Stalled")["status"] == "False"
    assert condition(obj, "VolumesExpanded")["reason"] == "VolumeExpansionRefused"
    events = [e for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
              if e.reason == "VolumeExpansionRefused"]
    assert events and events[0].type == "Warning"

    # The administrator allows expansion on the class: the next try grows every volume.
    started = time.monotonic()
    k8s.StorageV1Api(kube).patch_storage_class(fixed_class, {"allowVolumeExpansion": True})
    wait_for("every claim grown once the class allows it", lambda: grown_to(
        "2Gi", kube, namespace) and condition(reconciler.cluster(NAME), "VolumesExpanded").get(
        "status") == "True", 30, 0.1)
    report("class allows expansion -> every volume grown", time.monotonic() - started)
    assert condition(reconciler.cluster(NAME), "Ready")["status"] == "True"
    assert pods(kube, namespace) == before_pods, "no pod was replaced or restarted"
