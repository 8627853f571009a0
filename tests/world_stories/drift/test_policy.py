"""Stories: the cluster's owner decides what the reconciler does about drift.

spec.drift.policy `warn` reports drift in status and Events and changes nothing; `off` neither
repairs nor reports; `spec.paused` stops every action but keeps reporting; ignore rules make a
field someone else owns not drift. And when the spec stops rendering an object, the reconciler
prunes it (from the inventory in status), but never the data volumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support import world_kube
from tests.support.drift import (
    NAME,
    RENDERED_IMAGE,
    container,
    dev_with_pdb,
    scale,
    set_image,
    sts,
)
from tests.support.harness import (
    Reconciler,
    brief,
    condition,
    now_stamp,
    user,
    wait_for,
)


def start(reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient, namespace: str,
          **spec: Any) -> tuple[Reconciler, Obj]:
    reconciler = reconciler_factory()
    cluster = dev_with_pdb(namespace, **spec)
    user(kube, "kubectl").apply(cluster)
    reconciler.settle(NAME)
    return reconciler, cluster


def events(kube: k8s.ApiClient, namespace: str, reason: str) -> list[str]:
    return [e.message or "" for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
            if e.reason == reason]


def not_status(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Writes other than the KaiwuCluster's status."""
    return [w for w in writes if (w["objectRef"]["resource"], w["objectRef"].get(
        "subresource")) != ("kaiwuclusters", "status")]


def statefulset_writes(reconciler: Reconciler, since: str) -> list[dict[str, Any]]:
    return reconciler.writes(since, resource="statefulsets")


def test_warn_reports_the_drift_and_changes_nothing(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler, cluster = start(reconciler_factory, kube, namespace,
                                drift={"policy": "warn"})
    since = now_stamp()
    set_image(kube, namespace)

    def reported() -> Obj | None:
        obj = reconciler.cluster(NAME)
        drifted = condition(obj, "Drifted")
        return obj if drifted.get("status") == "True" else None
    obj = wait_for("Drifted=True in status", reported, timeout_s=5)
    drifted = condition(obj, "Drifted")
    print(f"\nwarn mode status: Drifted {drifted['reason']}: {drifted['message']}")
    assert drifted["reason"] == "WarnOnly"
    assert "StatefulSet/dev" in drifted["message"] and "kwdb/kwdb:9.9.9" in drifted["message"]
    assert condition(obj, "Ready")["reason"] == "Drifted"
    assert condition(obj, "Reconciling")["status"] == "False"
    found = wait_for("a DriftDetected Event", lambda: events(kube, namespace, "DriftDetected"),
                     timeout_s=5)
    assert "kwdb/kwdb:9.9.9" in found[0] and "warn" in found[0]

    time.sleep(2)
    assert container(sts(kube, namespace))["image"] == "kwdb/kwdb:9.9.9"
    # The one request to the StatefulSet is the dry run that confirmed the drift (nothing is
    # stored by it), made once for this change, not once per pass.
    touched = statefulset_writes(reconciler, since)
    assert len(touched) == 1 and "dryRun=All" in touched[0]["requestURI"], brief(touched)
    # Reported once, not once per pass.
    assert len(events(kube, namespace, "DriftDetected")) == 1

    # The owner switches to enforce: that new generation is applied and the drift goes.
    cluster["spec"]["drift"] = {"policy": "enforce"}
    user(kube, "kubectl").apply(cluster)
    wait_for("the image to be repaired",
             lambda: container(sts(kube, namespace))["image"] == RENDERED_IMAGE, timeout_s=5)


def test_paused_cluster_reports_but_does_not_touch_anything(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler, cluster = start(reconciler_factory, kube, namespace)
    cluster["spec"]["paused"] = True
    user(kube, "kubectl").apply(cluster)
    reconciler.settle(NAME)
    since = now_stamp()
    set_image(kube, namespace)
    obj = wait_for("Drifted=True (Paused)", lambda: (
        o := reconciler.cluster(NAME)) and condition(o, "Drifted").get("reason") == "Paused"
        and o, timeout_s=5)
    assert condition(obj, "Reconciling")["reason"] == "Paused"
    time.sleep(1.5)
    assert container(sts(kube, namespace))["image"] == "kwdb/kwdb:9.9.9"
    # Reported (status, an Event), confirmed by one dry run; no object is written.
    touched = [w for w in reconciler.writes(since)
               if w["objectRef"]["resource"] not in ("kaiwuclusters", "events")]
    assert all("dryRun=All" in w["requestURI"] for w in touched), brief(touched)
    assert events(kube, namespace, "DriftDetected")


def test_policy_off_neither_repairs_nor_reports(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler, _ = start(reconciler_factory, kube, namespace, drift={"policy": "off"})
    assert condition(reconciler.cluster(NAME), "Drifted")["status"] == "Unknown"
    since = now_stamp()
    passes = reconciler.passes
    set_image(kube, namespace)
    wait_for("a pass over the change", lambda: reconciler.passes > passes)
    time.sleep(1.5)
    assert container(sts(kube, namespace))["image"] == "kwdb/kwdb:9.9.9"
    # Not even a dry run, and no Event.
    # The status still follows the StatefulSet's (replicas), nothing else is written.
    assert not_status(reconciler.writes(since)) == [], brief(reconciler.writes(since))
    assert events(kube, namespace, "DriftDetected") == []


def test_an_ignore_rule_leaves_a_field_to_someone_else(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    # Say an autoscaler owns the replicas: the owner tells the reconciler to leave them alone.
    reconciler, _ = start(reconciler_factory, kube, namespace, drift={
        "policy": "enforce", "ignore": [{"kind": "StatefulSet", "pointer": "/spec/replicas"}]})
    since = now_stamp()
    passes = reconciler.passes
    scale(kube, namespace)
    wait_for("a pass over the change", lambda: reconciler.passes > passes)
    time.sleep(1.5)
    assert sts(kube, namespace)["spec"]["replicas"] == 5
    # The status still follows the StatefulSet's (replicas), nothing else is written.
    assert not_status(reconciler.writes(since)) == [], brief(reconciler.writes(since))
    assert condition(reconciler.cluster(NAME), "Drifted")["status"] == "False"


def test_objects_no_longer_rendered_are_pruned_but_never_the_data(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler, cluster = start(reconciler_factory, kube, namespace)
    admin = Kube(kube, "test")
    pdb = admin.get(world_kube.PDB, namespace, NAME)
    assert pdb is not None
    claims = wait_for("the StatefulSet's claims", lambda: len(
        c := admin.list_objects(kk.PVC, namespace)[0]) == 3 and c)
    before = reconciler.cluster(NAME)
    assert before is not None
    assert f"{world_kube.PDB.api_version}/PodDisruptionBudget/{namespace}/{NAME}" in before[
        "status"]["inventory"]

    cluster["spec"]["podDisruptionBudget"] = {"enabled": False}
    user(kube, "kubectl").apply(cluster)
    wait_for("the PodDisruptionBudget to be pruned",
             lambda: admin.get(world_kube.PDB, namespace, NAME) is None, timeout_s=5)
    obj = reconciler.settle(NAME)
    assert not any("PodDisruptionBudget" in entry for entry in obj["status"]["inventory"])
    assert any(a["action"] == "Pruned" and a["target"] == "PodDisruptionBudget/dev"
               for a in obj["status"]["lastActions"])
    # The claims (data) were never in the inventory and are untouched.
    assert not any("PersistentVolumeClaim" in entry for entry in obj["status"]["inventory"])
    after = admin.list_objects(kk.PVC, namespace)[0]
    assert sorted(c["metadata"]["uid"] for c in after) == sorted(
        c["metadata"]["uid"] for c in claims)
