"""Stories: someone changes what the reconciler manages, and it puts it back at once.

A user runs the dev example cluster (with a PodDisruptionBudget) under the reconciler. Then
someone edits what it manages the way people do: kubectl set image, scale, set env, edit, label,
delete. Each change is detected and repaired by the pass its watch event starts (well inside the
300 s resync); the story prints how long that took (from the change being stored to the repair
being stored; bench/repair_latency.py measures the target, under a second). Changes that are
not drift (someone's own labels, values the API server filled in, a quantity spelled
differently) cause no write at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from reconciler.runtime.process import Runtime
from reconciler.settings import Settings
from tests.support import world_kube
from tests.support.drift import NAME, RENDERED_IMAGE, container, dev_with_pdb, scale, set_image, sts
from tests.support.harness import (
    Reconciler,
    condition,
    now_stamp,
    reconciler_identity,
    user,
    wait_for,
)
from tests.world.controlplane import ControlPlane


def running(reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
            namespace: str, cluster: Obj | None = None) -> Reconciler:
    reconciler = reconciler_factory()
    user(kube, "kubectl").apply(cluster or dev_with_pdb(namespace))
    reconciler.settle(NAME)
    return reconciler


def kubectl_edit(kube: k8s.ApiClient, namespace: str, edit: Callable[[Obj], None]) -> None:
    """What `kubectl edit statefulset dev` does: read, change, write the whole object back."""
    obj = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert obj is not None
    edit(obj)
    # A PUT with the resourceVersion read, as kubectl edit sends (a conflict fails the test).
    # The typed client takes the plain dict as it is (its annotation says a model).
    k8s.AppsV1Api(kube).replace_namespaced_stateful_set(
        NAME, namespace, cast(Any, obj), field_manager="kubectl-edit")


def set_env(kube: k8s.ApiClient, namespace: str) -> None:
    k8s.AppsV1Api(kube).patch_namespaced_stateful_set(NAME, namespace, {"spec": {"template": {
        "spec": {"containers": [{"name": "kwbase", "env": [
            {"name": "KWBASE_DEBUG", "value": "1"}]}]}}}}, field_manager="kubectl-set")


def change_port(kube: k8s.ApiClient, namespace: str) -> None:
    def edit(obj: Obj) -> None:
        for port in container(obj)["ports"]:
            if port["name"] == "http":
                port["containerPort"] = 8081
    kubectl_edit(kube, namespace, edit)


def change_service_port(kube: k8s.ApiClient, namespace: str) -> None:
    """What `kubectl edit service dev-public` does to its first port (a PUT of the object)."""
    obj = Kube(kube, "test").get(kk.SERVICE, namespace, f"{NAME}-public")
    assert obj is not None
    obj["spec"]["ports"][0]["port"] += 1000
    k8s.CoreV1Api(kube).replace_namespaced_service(
        f"{NAME}-public", namespace, cast(Any, obj), field_manager="kubectl-edit")


def change_and_add_service_port(kube: k8s.ApiClient, namespace: str) -> None:
    """`kubectl edit service dev-public` renumbering our first port and adding one of its own
    in the same edit (a PUT of the object)."""
    obj = Kube(kube, "test").get(kk.SERVICE, namespace, f"{NAME}-public")
    assert obj is not None
    obj["spec"]["ports"][0]["port"] += 1000
    obj["spec"]["ports"].append({"name": "extra", "port": 9999, "protocol": "TCP",
                                 "targetPort": 9999})
    k8s.CoreV1Api(kube).replace_namespaced_service(
        f"{NAME}-public", namespace, cast(Any, obj), field_manager="kubectl-edit")


def _service_ports(kube: k8s.ApiClient, namespace: str) -> list[int]:
    obj = Kube(kube, "test").get(kk.SERVICE, namespace, f"{NAME}-public")
    return sorted(port["port"] for port in (obj or {}).get("spec", {}).get("ports") or ())


def remove_label(kube: k8s.ApiClient, namespace: str) -> None:
    Kube(kube, "kubectl-label").patch(kk.STATEFUL_SET, namespace, NAME, {
        "metadata": {"labels": {"app.kubernetes.io/component": None}}})


_deleted_uids: set[str] = set()


def _delete(kube: k8s.ApiClient, namespace: str, kind: kk.Kind, name: str) -> None:
    live = Kube(kube, "kubectl").get(kind, namespace, name)
    assert live is not None
    _deleted_uids.add(live["metadata"]["uid"])
    assert Kube(kube, "kubectl").delete(kind, namespace, name)


def delete_client_service(kube: k8s.ApiClient, namespace: str) -> None:
    _delete(kube, namespace, kk.SERVICE, f"{NAME}-public")


def delete_pdb(kube: k8s.ApiClient, namespace: str) -> None:
    _delete(kube, namespace, world_kube.PDB, NAME)


def _recreated(kind: kk.Kind, name: str) -> Callable[[k8s.ApiClient, str], bool]:
    """It exists again, as a new object (not the one that was deleted)."""
    def check(kube: k8s.ApiClient, namespace: str) -> bool:
        live = Kube(kube, "test").get(kind, namespace, name)
        return live is not None and live["metadata"]["uid"] not in _deleted_uids
    return check


def edit_probe(kube: k8s.ApiClient, namespace: str) -> None:
    def edit(obj: Obj) -> None:
        container(obj)["readinessProbe"]["periodSeconds"] = 30
    kubectl_edit(kube, namespace, edit)


def _ports(obj: Obj) -> list[int]:
    return sorted(port["containerPort"] for port in container(obj)["ports"])


@dataclass(frozen=True)
class Drift:
    """Something someone does, and how to tell it was undone."""

    story: str
    change: Callable[[k8s.ApiClient, str], None]
    repaired: Callable[[k8s.ApiClient, str], bool]
    target: str  # Kind/name as status and Events name it


DRIFTS = [
    Drift("kubectl set image puts another image on the StatefulSet", set_image,
          lambda kube, ns: container(sts(kube, ns))["image"] == RENDERED_IMAGE,
          "StatefulSet/dev"),
    Drift("kubectl scale changes the replicas", scale,
          lambda kube, ns: sts(kube, ns)["spec"]["replicas"] == 3, "StatefulSet/dev"),
    Drift("kubectl set env adds an env var by hand", set_env,
          lambda kube, ns: all(e["name"] != "KWBASE_DEBUG" for e in container(sts(kube, ns))[
              "env"]), "StatefulSet/dev"),
    Drift("kubectl edit changes a container port", change_port,
          lambda kube, ns: _ports(sts(kube, ns)) == [8080, 26257, 27257], "StatefulSet/dev"),
    Drift("kubectl edit changes the client Service's port", change_service_port,
          lambda kube, ns: _service_ports(kube, ns) == [8080, 26257], "Service/dev-public"),
    Drift("kubectl edit renumbers the client Service's port and adds one",
          change_and_add_service_port,
          lambda kube, ns: {8080, 26257} <= set(_service_ports(kube, ns)), "Service/dev-public"),
    Drift("kubectl label removes a label we render", remove_label,
          lambda kube, ns: sts(kube, ns)["metadata"]["labels"].get(
              "app.kubernetes.io/component") == "database", "StatefulSet/dev"),
    Drift("someone deletes the client Service", delete_client_service,
          _recreated(kk.SERVICE, f"{NAME}-public"), "Service/dev-public"),
    Drift("someone deletes the PodDisruptionBudget", delete_pdb,
          _recreated(world_kube.PDB, NAME), "PodDisruptionBudget/dev"),
    Drift("kubectl edit changes a probe", edit_probe,
          lambda kube, ns: container(sts(kube, ns))["readinessProbe"]["periodSeconds"] == 5,
          "StatefulSet/dev"),
]


@pytest.mark.parametrize("drift", DRIFTS, ids=[d.change.__name__ for d in DRIFTS])
def test_drift_is_repaired_as_soon_as_its_watch_event_arrives(
        drift: Drift, reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler = running(reconciler_factory, kube, namespace)
    since = now_stamp()

    # The change is stored when the call returns (the reconciler may undo it before we look).
    drift.change(kube, namespace)
    changed_at = time.monotonic()
    wait_for(f"the reconciler to undo: {drift.story}",
             lambda: drift.repaired(kube, namespace), timeout_s=10, interval_s=0.005)
    took = time.monotonic() - changed_at
    print(f"\n{drift.story}: repaired in {took * 1000:.0f} ms")

    # The repair is reported: status lastActions and an Event, and the cluster is not drifted.
    def reported() -> Obj | None:
        obj = reconciler.cluster(NAME)
        actions = ((obj or {}).get("status") or {}).get("lastActions") or []
        return obj if any(a["action"] == "DriftRepaired" and a["target"] == drift.target
                          for a in actions) else None
    obj = wait_for("the repair in status.lastActions", reported, timeout_s=5)
    assert condition(obj, "Drifted")["status"] == "False"
    wait_for("a DriftRepaired Event", lambda: any(
        e.reason == "DriftRepaired" and drift.target in (e.message or "")
        for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items), timeout_s=5)
    # One repair, not a loop: a few writes, then quiet.
    time.sleep(1.5)
    writes = [w for w in reconciler.writes(since)
              if w["objectRef"]["resource"] not in ("events", "kaiwuclusters")]
    assert 1 <= len(writes) <= 3, writes
    # Started by the watch event, not the periodic resync (300 s). The target, under a second,
    # is bench/repair_latency.py's to measure; a busy machine must not fail the gate on it.
    assert took < 3.0, f"repair took {took:.2f}s"


def add_foreign_metadata(kube: k8s.ApiClient, namespace: str) -> None:
    """Someone labels and annotates our objects for their own purposes."""
    meta = {"metadata": {"labels": {"team.example.com/owner": "payments"},
                         "annotations": {"backup.example.com/schedule": "nightly"}}}
    Kube(kube, "kubectl-label").patch(kk.STATEFUL_SET, namespace, NAME, meta)
    Kube(kube, "kubectl-annotate").patch(kk.SERVICE, namespace, f"{NAME}-public", meta)


def write_back_spelled_differently(kube: k8s.ApiClient, namespace: str) -> None:
    """kubectl edit writes the same quantities in other spellings (1000m for 1, 2048Mi for
    2Gi) and every field the server defaulted back; the note it adds is its own business."""
    def edit(obj: Obj) -> None:
        resources = container(obj)["resources"]
        resources["requests"]["cpu"] = "1000m"
        resources["limits"]["memory"] = "2048Mi"
        obj["metadata"].setdefault("annotations", {})["note.example.com/edited"] = "yes"
        obj["metadata"].pop("managedFields", None)
    kubectl_edit(kube, namespace, edit)


@pytest.mark.parametrize("change", [add_foreign_metadata, write_back_spelled_differently])
def test_what_is_not_drift_causes_no_write(
        change: Callable[[k8s.ApiClient, str], None],
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    cluster = dev_with_pdb(namespace)
    cluster["spec"]["resources"]["requests"]["cpu"] = "1"
    reconciler = running(reconciler_factory, kube, namespace, cluster)
    live = sts(kube, namespace)
    # The server filled in fields we never render; they are not drift either.
    assert live["spec"]["revisionHistoryLimit"] == 10
    assert container(live)["terminationMessagePath"] == "/dev/termination-log"
    since = now_stamp()
    passes = reconciler.passes

    change(kube, namespace)
    wait_for("the reconciler to look at the change", lambda: reconciler.passes > passes)
    time.sleep(2)

    assert reconciler.writes(since) == []
    obj = reconciler.cluster(NAME)
    assert condition(obj, "Drifted")["status"] == "False"


def test_through_the_runtime_repairs_take_under_a_second(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    """The same repairs with the production runtime (watch caches, work queue with its
    once-per-second limit per cluster, two workers), timed from change to repair."""
    api, _ = reconciler_identity(control_plane, kube, namespace)
    runtime = Runtime(Settings(watch_namespace=namespace, leader_election=False,
                               http_address="127.0.0.1:0", identity=f"runtime-{namespace}"),
                      api_client=api)
    runtime.start()
    try:
        user(kube, "kubectl").apply(dev_with_pdb(namespace))
        wait_for("the StatefulSet", lambda: _recreated(kk.STATEFUL_SET, NAME)(kube, namespace),
                 timeout_s=30)
        timings = []
        for drift in (DRIFTS[0], DRIFTS[2], DRIFTS[5], DRIFTS[7]):
            time.sleep(1.5)  # quiet, as between two people's edits
            drift.change(kube, namespace)
            changed_at = time.monotonic()
            wait_for(f"the runtime to undo: {drift.story}",
                     lambda d=drift: d.repaired(kube, namespace),  # type: ignore[misc]
                     timeout_s=10, interval_s=0.005)
            timings.append((drift.story, time.monotonic() - changed_at))
    finally:
        runtime.stop()
    for story, took in timings:
        print(f"\nwith the runtime, {story}: repaired in {took * 1000:.0f} ms")
    # Each started by its watch event, not the 300 s resync (seconds: bench/repair_latency.py).
    assert max(took for _, took in timings) < 3.0
