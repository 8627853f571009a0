"""Stories: what the reconciler tells people, in status, Events and metrics.

A spec the API server accepts but that breaks a rule the renderer knows (multi-replica with two
nodes) stalls the cluster with the renderer's own words and touches nothing; fixing the spec
clears it; so does a change the admission webhook would have refused (the start mode), stored
while it was down, while the other clusters are served. Events are real v1 Events about the
KaiwuCluster, from the kaiwu-reconciler component, and a repeat of the same event is counted on
the existing Event rather than written anew. The metrics count what was found and repaired.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from tests.support import world_kube
from tests.support.drift import NAME, dev_with_pdb, set_image
from tests.support.harness import (
    Reconciler,
    brief,
    condition,
    now_stamp,
    user,
    wait_for,
)


@world_kube.STORED_ONLY_WITHOUT_CEL
def test_an_invalid_spec_stalls_with_the_renderers_words_and_touches_nothing(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler = reconciler_factory()
    cluster = dev_with_pdb(namespace)
    user(kube, "kubectl").apply(cluster)
    reconciler.settle(NAME)
    since = now_stamp()

    cluster["spec"]["replicas"] = 2
    user(kube, "kubectl").apply(cluster)
    obj = wait_for("Stalled=True", lambda: (o := reconciler.cluster(NAME)) and condition(
        o, "Stalled").get("status") == "True" and o, timeout_s=5)
    stalled = condition(obj, "Stalled")
    print(f"\nStalled {stalled['reason']}: {stalled['message']}")
    assert stalled["reason"] == "InvalidSpec"
    assert "spec.replicas" in stalled["message"] and "at least 3" in stalled["message"]
    assert condition(obj, "Ready")["status"] == "False"
    # The stall is about this generation (kstatus: observed, and stuck).
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    # What runs keeps running: the StatefulSet still has 3 replicas and its inventory entry.
    statefulset = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert statefulset is not None and statefulset["spec"]["replicas"] == 3
    assert any("StatefulSet" in entry for entry in obj["status"]["inventory"])
    time.sleep(1)
    touched = [w for w in reconciler.writes(since)
               if w["objectRef"]["resource"] not in ("kaiwuclusters", "events")]
    assert touched == [], brief(touched)
    warnings = [e for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
                if e.reason == "InvalidSpec"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"

    cluster["spec"]["replicas"] = 3
    user(kube, "kubectl").apply(cluster)
    wait_for("Stalled=False", lambda: condition(reconciler.cluster(NAME), "Stalled").get(
        "status") == "False", timeout_s=5)


@world_kube.STORED_ONLY_WITHOUT_CEL
def test_a_change_the_webhook_would_refuse_stored_while_it_was_down_stalls_only_that_cluster(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    # No webhook runs here, as when it was down or not yet installed: the API stores anything
    # the schema admits, and the reconciler is the last guard.
    reconciler = reconciler_factory()
    cluster = dev_with_pdb(namespace)
    user(kube, "kubectl").apply(cluster)
    reconciler.settle(NAME)
    since = now_stamp()

    # Valid on its own, refused as a change from what runs (and as the webhook would say it).
    cluster["spec"]["startMode"] = "single-replica"
    user(kube, "kubectl").apply(cluster)
    other = dev_with_pdb(namespace)
    other["metadata"]["name"] = "other"
    user(kube, "kubectl").apply(other)
    obj = wait_for("Stalled=True", lambda: (o := reconciler.cluster(NAME)) and condition(
        o, "Stalled").get("status") == "True" and o, timeout_s=5)
    stalled = condition(obj, "Stalled")
    assert stalled["reason"] == "InvalidSpec"
    assert stalled["message"] == (
        f"the spec cannot be rendered: KaiwuCluster {namespace}/{NAME}: spec.startMode: the "
        "start mode cannot change (multi-replica -> single-replica): it is written into every "
        "store (keep the old start mode, or create a new cluster and migrate the data)")
    # The other cluster is served meanwhile.
    reconciler.settle("other")
    assert Kube(kube, "test").get(kk.STATEFUL_SET, namespace, "other") is not None
    time.sleep(1)
    touched = [w for w in reconciler.writes(since)
               if w["objectRef"]["resource"] not in ("kaiwuclusters", "events")
               and not w["objectRef"].get("name", "").startswith("other")]
    assert touched == [], brief(touched)

    # Changed back to what runs: accepted, the pass goes on.
    cluster["spec"]["startMode"] = "multi-replica"
    user(kube, "kubectl").apply(cluster)
    wait_for("Stalled=False", lambda: condition(reconciler.cluster(NAME), "Stalled").get(
        "status") == "False", timeout_s=5)


def test_events_are_v1_events_about_the_cluster_and_repeats_are_counted(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler = reconciler_factory()
    user(kube, "kubectl").apply(dev_with_pdb(namespace))
    reconciler.settle(NAME)
    uid = reconciler.cluster(NAME)["metadata"]["uid"]  # type: ignore[index]

    # The same drift twice: one Event, counted twice.
    for _ in range(2):
        set_image(kube, namespace)
        wait_for("the repair", lambda: image_of(kube, namespace) == "kwdb/kwdb:3.2.1")
    repaired = wait_for("a DriftRepaired Event counted twice", lambda: [
        e for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
        if e.reason == "DriftRepaired" and (e.count or 0) >= 2], timeout_s=5)
    event = repaired[0]
    assert len(repaired) == 1
    assert event.type == "Normal"
    assert event.involved_object.kind == "KaiwuCluster"
    assert event.involved_object.name == NAME and event.involved_object.uid == uid
    assert event.source.component == "kaiwu-reconciler"
    assert event.reporting_component == "kaiwu-reconciler"
    assert event.first_timestamp is not None and event.last_timestamp >= event.first_timestamp
    assert "StatefulSet/dev" in (event.message or "") and "image" in (event.message or "")

    metrics = reconciler.metrics
    assert metrics.value("kaiwu_drift_detected_total", {"kind": "StatefulSet"}) == 2
    assert metrics.value("kaiwu_drift_repaired_total", {"kind": "StatefulSet"}) == 2
    assert metrics.value("kaiwu_writes_total", {"verb": "apply", "kind": "StatefulSet"}) >= 3


def image_of(kube: k8s.ApiClient, namespace: str) -> str | None:
    """The StatefulSet's kwbase image as the API server has it (None while it is missing)."""
    statefulset = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    if statefulset is None:
        return None
    image: str = statefulset["spec"]["template"]["spec"]["containers"][0]["image"]
    return image
