"""Story: the owner asks for a change Kubernetes cannot make in place, and nothing is lost.

The volume claim template of a StatefulSet is immutable. When the owner of the dev cluster
raises spec.storage.size, the reconciler deletes the StatefulSet with its pods and claims
orphaned, recreates it with the new template, and the new StatefulSet adopts the very same pods
and claims (their uids do not change). The story prints how long the swap took. A change that
cannot be made that way (a selector the running pods would not match) stalls the cluster with
instructions, and nothing is touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.controller.objects import ObjectPass
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.harness import (
    Reconciler,
    condition,
    example,
    now_stamp,
    parked,
    user,
    wait_for,
)

NAME = "dev"


def uids(objects: list[Obj]) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["uid"] for o in objects}


def owner_uids(objects: list[Obj]) -> set[str]:
    return {ref["uid"] for o in objects for ref in o["metadata"].get("ownerReferences") or ()}


def test_new_storage_size_recreates_the_statefulset_keeping_pods_and_claims(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler = reconciler_factory()
    cluster = parked(example("dev", namespace))
    user(kube, "kubectl").apply(cluster)
    reconciler.settle(NAME)
    admin = Kube(kube, "test")
    selector = f"app.kubernetes.io/instance={NAME}"
    pods = wait_for("three pods", lambda: len(
        p := admin.list_objects(kk.POD, namespace, selector)[0]) == 3 and p)
    claims = wait_for("three claims", lambda: len(
        c := admin.list_objects(kk.PVC, namespace)[0]) == 3 and c)
    old = admin.get(kk.STATEFUL_SET, namespace, NAME)
    assert old is not None
    assert owner_uids(pods) == {old["metadata"]["uid"]}

    cluster["spec"]["storage"]["size"] = "6Gi"
    user(kube, "kubectl").apply(cluster)
    changed_at = time.monotonic()

    def recreated() -> Obj | None:
        new = admin.get(kk.STATEFUL_SET, namespace, NAME)
        if new is None or new["metadata"]["uid"] == old["metadata"]["uid"]:
            return None
        return new
    new = wait_for("a new StatefulSet", recreated, timeout_s=15, interval_s=0.01)
    took = time.monotonic() - changed_at
    template = new["spec"]["volumeClaimTemplates"][0]
    assert template["spec"]["resources"]["requests"]["storage"] == "6Gi"

    # The same pods and claims, now owned by the new StatefulSet.
    adopted = wait_for("the pods to be adopted", lambda: owner_uids(
        p := admin.list_objects(kk.POD, namespace, selector)[0]) == {new["metadata"]["uid"]}
        and p, timeout_s=15)
    print(f"\nstorage size change: StatefulSet recreated in {took * 1000:.0f} ms, pods adopted "
          f"after {time.monotonic() - changed_at:.1f}s")
    assert uids(adopted) == uids(pods)
    assert uids(admin.list_objects(kk.PVC, namespace)[0]) == uids(claims)

    obj = reconciler.settle(NAME)
    actions = obj["status"]["lastActions"]
    assert any(a["action"] == "Recreating" and a["target"] == "StatefulSet/dev" and
               "volumeClaimTemplates" in a["message"] for a in actions), actions
    assert condition(obj, "Stalled")["status"] == "False"
    assert condition(obj, "Drifted")["status"] == "False"
    events = [e.reason for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items]
    assert "Recreating" in events


def test_a_selector_change_cannot_be_made_safely_and_stalls_with_instructions(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler = reconciler_factory()
    cluster = parked(example("dev", namespace))
    user(kube, "kubectl").apply(cluster)
    reconciler.settle(NAME)
    old = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert old is not None
    since = now_stamp()

    # A later reconciler renders a narrower selector. A recreated StatefulSet with it would not
    # own the running pods, so this one must not be recreated: the cluster stalls instead.
    controller = reconciler.controller
    render = next(step for step in controller.steps if step.name == "render")

    class NarrowerRender:
        """The render step of a reconciler built from a later spec: a narrower selector."""

        name, always, ctx = "render", False, render.ctx

        def wanted(self, p: ObjectPass) -> bool:
            return render.wanted(p)

        def run(self, p: ObjectPass) -> None:
            render.run(p)
            for obj in p.desired:
                if obj["kind"] == "StatefulSet":
                    obj["spec"]["selector"]["matchLabels"]["example.com/generation"] = "2"
                    obj["spec"]["template"]["metadata"]["labels"][
                        "example.com/generation"] = "2"
    controller.steps = [NarrowerRender() if step is render else step
                        for step in controller.steps]
    reconciler.enqueue(ClusterKey(namespace, NAME))

    obj = wait_for("Stalled=True", lambda: (o := reconciler.cluster(NAME)) and condition(
        o, "Stalled").get("status") == "True" and o, timeout_s=10)
    stalled = condition(obj, "Stalled")
    print(f"\nStalled {stalled['reason']}: {stalled['message']}")
    assert stalled["reason"] == "ImmutableField"
    assert "/spec/selector" in stalled["message"] and "--cascade=orphan" in stalled["message"]
    assert "kubectl label pods -l app.kubernetes.io/instance=dev,app.kubernetes.io/name=kaiwudb" \
        " example.com/generation=2" in stalled["message"]
    time.sleep(1)
    assert reconciler.writes(since, resource="statefulsets") == []
    now = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert now is not None and now["metadata"]["uid"] == old["metadata"]["uid"]
