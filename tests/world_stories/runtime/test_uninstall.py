"""Stories: taking things away (docs/install.md, "Uninstalling").

1. A team runs the operator namespaced in its own namespace, with a TLS KaiwuCluster beside it,
   and removes the operator as the docs say: `kaiwu uninstall ... | kubectl delete
   --ignore-not-found -f -` (the webhook registration first, then the reconciler, then its
   rights). Every KaiwuDB pod runs on (same uid, no restart, Ready), every claim, Secret,
   Service and the StatefulSet are as they were, the namespace stays, and the KaiwuCluster can
   still be edited (no webhook is left to refuse it).
2. A user deletes a TLS KaiwuCluster (`kubectl delete kwc dev`, the default background cascade).
   What the docs list goes: the StatefulSet and its pods, the Services, the ServiceAccount, the
   start-flags ConfigMap (the PodDisruptionBudget where one is rendered). What they list stays:
   every claim (and its volume) and every certificate Secret, the CA among them, untouched; the
   reconciler's Event ClusterDeleted names them, with how to free them. Applied again, the same
   spec finds them: Ready on the same claims, with the same KaiwuDB node ids and the same CA
   (`kwbase init` finds the cluster initialised and changes nothing).

3. An administrator deletes the KaiwuCluster CRD. On a control plane of the story's own (the
   session's CRDs are every story's), with simulated nodes of its own: every KaiwuCluster is
   deleted by the API server, and each one's cascade is the one of story 2: pods and their
   objects gone, claims and certificate Secrets kept.

Each runs on the real API server and controllers (garbage collector, StatefulSet) of the test
world; timings are printed (pytest -s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from reconciler import install
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from renderer.builders import INSTANCE_LABEL
from tests.support.bundle import Installer, delete_documents, run_as_deployed, stop
from tests.support.harness import Reconciler, condition, user, wait_for
from tests.support.lifecycle import (
    NAME,
    bring_up,
    lifecycle_count,
    live_nodes,
    pod_ready,
    report,
    small_cluster,
)
from tests.support.world_kube import PDB, VERSION
from tests.world.controlplane import ControlPlane
from tests.world.fixtures import make_namespace
from tests.world.kube_rest import KubeAccess
from tests.world.kubelet import default_nodes
from tests.world.simworld import SimWorld, WorldSettings

SELECTOR = f"{INSTANCE_LABEL}={NAME}"


def listed(api: Kube, kind: kk.Kind, namespace: str) -> list[Obj]:
    items, _ = api.list_objects(kind, namespace, SELECTOR)
    return items


def snapshot(api: Kube, namespace: str) -> dict[str, Any]:
    """What a KaiwuDB user would not want disturbed: each object by name, with its uid and, for
    pods, restarts, node and readiness."""
    pods = {pod["metadata"]["name"]: (
        pod["metadata"]["uid"], pod["spec"].get("nodeName"), pod_ready(pod),
        sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or ()))
        for pod in listed(api, kk.POD, namespace)}
    found: dict[str, Any] = {"pods": pods}
    for kind in (kk.PVC, kk.SECRET, kk.SERVICE, kk.STATEFUL_SET, kk.SERVICE_ACCOUNT):
        found[kind.kind] = {obj["metadata"]["name"]: obj["metadata"]["uid"]
                            for obj in listed(api, kind, namespace)}
    found["claims bound"] = sorted(c["metadata"]["name"] for c in listed(api, kk.PVC, namespace)
                                   if (c.get("status") or {}).get("phase") == "Bound")
    cluster = api.get(kk.KAIWU_CLUSTER, namespace, NAME)
    found["KaiwuCluster"] = cluster["metadata"]["uid"] if cluster else None
    return found


def gone_with_the_cluster(api: Kube, namespace: str) -> bool:
    """Nothing left that the cluster owned (pods go with the StatefulSet)."""
    return not any(listed(api, kind, namespace) for kind in (
        kk.POD, kk.STATEFUL_SET, kk.SERVICE, kk.SERVICE_ACCOUNT, PDB, kk.CONFIG_MAP))


def test_removing_the_operator_leaves_every_kaiwudb_pod_claim_and_secret_as_it_was(
        control_plane: ControlPlane, sim_world: SimWorld, kube: k8s.ApiClient,
        namespace: str, installed: Installer, tmp_path: Path) -> None:
    # The riskiest layout: the operator installed into the team's own namespace, so the
    # bundle's Namespace is the one holding KaiwuDB (deleting the bundle whole would take it).
    options = install.Options(namespace=namespace, scope="namespaced",
                              watch_namespace=namespace, image="kaiwu-reconciler:test")
    docs = installed(options)
    popen, log, _ = run_as_deployed(control_plane, kube, namespace, docs, tmp_path)
    api = Kube(kube, "test")
    admission = k8s.AdmissionregistrationV1Api(kube)
    registration = f"{install.NAME}-{namespace}"

    def registered() -> bool:
        assert popen.poll() is None, log.read_text(errors="replace")[-3000:]
        webhooks = admission.read_validating_webhook_configuration(registration).webhooks
        return bool(webhooks and webhooks[0].client_config.ca_bundle)
    try:
        wait_for("the leader to register its webhook", registered, 30, 0.2)
        user(kube, "kubectl").apply(small_cluster(namespace, tls={"enabled": True}))

        def ready() -> bool:
            assert popen.poll() is None, log.read_text(errors="replace")[-3000:]
            return condition(api.get(kk.KAIWU_CLUSTER, namespace, NAME),
                             "Ready").get("status") == "True"
        wait_for("the cluster to be Ready", ready, 90, 0.2)
        before = snapshot(api, namespace)
        assert len(before["pods"]) == 3 and all(ready for _, _, ready, _ in
                                                before["pods"].values())
        assert {f"{NAME}-ca", f"{NAME}-node-certs", f"{NAME}-root-client-certs"} <= set(
            before["Secret"])

        # As the docs say: kaiwu uninstall (same flags as the install) | kubectl delete.
        started = time.monotonic()
        printed = install.render_removal(dataclasses.replace(options, kube_version=VERSION))
        removal = [doc for doc in yaml.safe_load_all(printed) if doc]
        assert not any(doc["kind"] in ("Namespace", "CustomResourceDefinition")
                       for doc in removal)
        cut = next(i for i, doc in enumerate(removal) if doc["kind"] == "Deployment") + 1
        # No kubelet runs the Deployment's pods here: its process stops when the Deployment
        # is deleted, as its pods would.
        deleted = delete_documents(kube, removal[:cut])
        stop(popen)
        deleted += delete_documents(kube, removal[cut:])
        report("kaiwu uninstall | kubectl delete", time.monotonic() - started)
    finally:
        stop(popen)
        with contextlib.suppress(k8s.ApiException):
            admission.delete_validating_webhook_configuration(registration)
    assert deleted[0] == f"ValidatingWebhookConfiguration/{registration}"
    assert {f"ServiceAccount/{install.NAME}", f"Lease/{install.NAME}",
            "Role/kaiwu-reconciler-leader-election"} <= set(deleted)

    # Time for any controller that would act on what went (garbage collector, StatefulSet).
    time.sleep(3.0)
    after = snapshot(api, namespace)
    assert after == before
    still = k8s.CoreV1Api(kube).read_namespace(namespace).status
    assert still is not None and still.phase == "Active"
    # KaiwuDB itself never noticed: every node live.
    live = sim_world.kwdb.nodes((namespace, NAME), sim_world.clock.now())
    assert len(live) == 3 and all(node.is_live for node in live), live
    # Nothing is left to refuse a KaiwuCluster write (the registration went first).
    user(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"metadata": {"labels": {"team": "still-here"}}})


def test_deleting_a_cluster_removes_its_pods_and_keeps_its_claims_and_certificates(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    spec = small_cluster(namespace, tls={"enabled": True, "clientUsers": ["app"]})
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, spec)
    report("apply -> Ready (3 TLS nodes)", took)
    api = Kube(kube, "test")
    before = snapshot(api, namespace)
    node_ids = live_nodes(obj)
    secrets = {s["metadata"]["name"]: s for s in listed(api, kk.SECRET, namespace)}
    assert set(secrets) == {f"{NAME}-ca", f"{NAME}-node-certs", f"{NAME}-root-client-certs",
                            f"{NAME}-client-app-certs"}
    assert before["claims bound"] == [f"data-{NAME}-{i}" for i in range(3)]
    volumes = {c["spec"]["volumeName"] for c in listed(api, kk.PVC, namespace)}
    owned = {kind.kind: sorted(o["metadata"]["name"] for o in listed(api, kind, namespace))
             for kind in (kk.STATEFUL_SET, kk.SERVICE, kk.SERVICE_ACCOUNT, kk.CONFIG_MAP)}
    assert owned == {"StatefulSet": [NAME], "Service": [NAME, f"{NAME}-public"],
                     "ServiceAccount": [NAME], "ConfigMap": [f"{NAME}-start-flags"]}, \
        "what docs/reconciler.md lists (the dev example renders no PodDisruptionBudget)"

    started = time.monotonic()
    user(kube, "kubectl").delete(kk.KAIWU_CLUSTER, namespace, NAME, propagation="Background")

    wait_for("the garbage collector to delete what the cluster owned",
             lambda: gone_with_the_cluster(api, namespace), 60, 0.2)
    report("kubectl delete kwc -> its pods and objects gone", time.monotonic() - started)
    # The reconciler says so, on the deleted cluster: `kubectl get events` shows it.
    told = wait_for("the reconciler's ClusterDeleted Event", lambda: [
        e for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
        if e.reason == "ClusterDeleted" and e.involved_object.name == NAME], 20, 0.2)
    assert (f"kept: claims data-{NAME}-0, data-{NAME}-1, data-{NAME}-2 (the data) and Secrets "
            f"{', '.join(sorted(secrets))} (the CA and certificates)") in told[0].message
    after = snapshot(api, namespace)
    assert after["KaiwuCluster"] is None
    # Kept: the data (claims, bound to the same volumes) and the certificates, untouched.
    assert after["PersistentVolumeClaim"] == before["PersistentVolumeClaim"]
    assert after["claims bound"] == before["claims bound"]
    assert all(Kube(kube, "test").get(kk.PV, None, volume) is not None for volume in volumes)
    for name, secret in secrets.items():
        now = api.get(kk.SECRET, namespace, name)
        assert now is not None, f"Secret {name} was deleted with the cluster"
        assert (now["metadata"]["uid"], now["data"]) == (secret["metadata"]["uid"],
                                                        secret["data"])

    # The same spec applied again finds its stores and its CA.
    started = time.monotonic()
    user(kube, "kubectl").apply(spec)
    again = wait_for("the cluster to be Ready again", lambda: (
        found if condition(found := reconciler.cluster(NAME), "Ready").get("status") == "True"
        else None), 75, 0.2)
    report("applied again -> Ready on the kept claims", time.monotonic() - started)
    assert live_nodes(again) == node_ids, "the same stores, so the same KaiwuDB node ids"
    assert lifecycle_count(reconciler, "init") == 1, "init found the cluster initialised"
    back = snapshot(api, namespace)
    assert back["PersistentVolumeClaim"] == before["PersistentVolumeClaim"]
    for name, secret in secrets.items():
        now = api.get(kk.SECRET, namespace, name)
        assert now is not None and now["metadata"]["uid"] == secret["metadata"]["uid"], name
        assert now["data"] == secret["data"], f"{name} was reissued"


@pytest.mark.world  # a world of its own: no session fixture marks it
def test_deleting_the_crd_deletes_every_cluster_and_keeps_their_claims_and_certificates(
        ) -> None:
    started = time.monotonic()
    with ControlPlane() as plane:
        admin = plane.api_client()
        world = SimWorld(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token),
                         WorldSettings(nodes=default_nodes(3, prefix="crd-node")))
        world.start()
        try:
            namespace = "crd-story"
            make_namespace(k8s.CoreV1Api(admin), namespace)
            reconciler = Reconciler(plane, admin, namespace).start()
            try:
                user(admin, "kubectl").apply(small_cluster(namespace, tls={"enabled": True}))
                wait_for("the cluster to be Ready", lambda: condition(
                    reconciler.cluster(NAME), "Ready").get("status") == "True", 75, 0.2)
            finally:
                reconciler.stop()
            report("own control plane and nodes, cluster Ready", time.monotonic() - started)
            api = Kube(admin, "test")
            before = snapshot(api, namespace)
            assert len(before["pods"]) == 3 and len(before["Secret"]) == 3

            started = time.monotonic()
            k8s.ApiextensionsV1Api(admin).delete_custom_resource_definition(
                f"{kk.KAIWU_CLUSTER.plural}.{kk.KAIWU_CLUSTER.group}")
            wait_for("the CRD, its clusters and what they owned to be gone", lambda: (
                gone_with_the_cluster(api, namespace) and not [
                    crd for crd in k8s.ApiextensionsV1Api(admin)
                    .list_custom_resource_definition().items
                    if crd.metadata and crd.metadata.name and
                    crd.metadata.name.startswith(kk.KAIWU_CLUSTER.plural)]), 60, 0.2)
            report("CRD deleted -> clusters, pods and their objects gone",
                   time.monotonic() - started)
            after = snapshot(api, namespace)
            assert after["PersistentVolumeClaim"] == before["PersistentVolumeClaim"]
            assert after["claims bound"] == before["claims bound"]
            assert after["Secret"] == before["Secret"], "the certificate Secrets stay"
        finally:
            world.stop(delete_nodes=True)
