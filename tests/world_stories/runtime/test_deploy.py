"""The manifests users install the reconciler with (deploy/install.yaml, `kaiwu install`'s
output), checked against a real API server.

Stories: an administrator applies the bundle's RBAC and the reconciler, running with nothing but
that service account's token, reconciles a KaiwuCluster with the real Controller without a
single request refused (RBAC is enforced by the test world's apiserver); the Deployment is
accepted by the API server and its probes and port match the reconciler's own defaults.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from reconciler.runtime.process import Runtime
from reconciler.settings import Settings
from tests.support.runtime import create_cluster, runtime_settings
from tests.support.waiting import eventually
from tests.world.controlplane import REPO_ROOT, ControlPlane, service_account_token

DEPLOY = REPO_ROOT / "deploy"


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def manifests(*kinds: str) -> list[dict[str, Any]]:
    """The objects of deploy/install.yaml of these kinds, in file order."""
    return [doc for doc in yaml.safe_load_all((DEPLOY / "install.yaml").read_text())
            if doc and doc["kind"] in kinds]


def rbac_for(namespace: str) -> list[dict[str, Any]]:
    """The bundle's RBAC moved into the test's namespace (cluster-wide names made unique)."""
    docs = copy.deepcopy(manifests(*RBAC_KINDS))
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            meta["name"] = f"{meta['name']}-{namespace}"
        else:
            meta["namespace"] = namespace
        if "roleRef" in doc and doc["roleRef"]["kind"] == "ClusterRole":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{namespace}"
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
    return docs


def test_the_reconciler_needs_no_more_than_the_bundles_rbac(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    docs = rbac_for(namespace)
    for doc in docs:
        # kubectl create -f, with the client's helper (it leaves itself unannotated).
        k8s_utils.create_from_dict(kube, doc)  # type: ignore[no-untyped-call,unused-ignore]
    token = service_account_token(k8s.CoreV1Api(kube), namespace, "kaiwu-reconciler")
    user = f"system:serviceaccount:{namespace}:kaiwu-reconciler"
    settings = runtime_settings(control_plane, namespace, kubeconfig=None,
                                lease_name="kaiwu-reconciler", identity="rbac-check")
    # Cluster-wide caches, as deployed (no --watch-namespace): list/watch must be cluster-wide.
    settings = settings.replace(watch_namespace="")
    started = time.monotonic()
    runtime = Runtime(settings, api_client=control_plane.api_client(token=token))
    runtime.start()
    try:
        eventually(runtime.is_leader, 20, "leadership with the Role's lease rights")
        assert runtime.caches.wait_synced(20), runtime.caches.unsynced()
        create_cluster(kube, namespace, "guarded", {"replicas": 3})
        apps = k8s.AppsV1Api(kube)

        def statefulset() -> bool:
            return any(s.metadata is not None and s.metadata.name == "guarded"
                       for s in apps.list_namespaced_stateful_set(namespace).items)

        eventually(statefulset, 30, "the StatefulSet written by the reconciler")
        eventually(lambda: runtime.metrics.value("kaiwu_reconcile_total",
                                                 {"result": "success"}) >= 1, 30,
                   "a successful reconcile")
        time.sleep(1.0)
    finally:
        runtime.stop()
    # Cluster-wide caches also see other tests' clusters, whose namespaces may be terminating
    # (also answered 403): judge the requests about this test's namespace and cluster-wide ones.
    def ours(uri: str) -> bool:
        return "/namespaces/" not in uri or f"/namespaces/{namespace}/" in uri

    refused = [f"{e.get('verb')} {e.get('requestURI')} -> {e['responseStatus'].get('code')}"
               for e in control_plane.audit_events(user=user)
               if e.get("responseStatus", {}).get("code") == 403
               and ours(str(e.get("requestURI", "")))]
    assert refused == [], "requests RBAC refused:\n" + "\n".join(refused)
    writes = control_plane.audit_events(user=user, verbs={"create", "patch", "update"})
    assert any("statefulsets" in e.get("requestURI", "") for e in writes)
    print(f"\nreconciled with deploy/install.yaml RBAC only: {len(writes)} writes, 0 refused, "
          f"{time.monotonic() - started:.1f} s")


def test_the_deployment_is_accepted_and_matches_the_reconcilers_defaults(
        kube: k8s.ApiClient, namespace: str) -> None:
    services = manifests("Service")  # the metrics Service and the webhook's
    (deployment,) = manifests("Deployment")
    assert sorted(doc["metadata"]["name"] for doc in services) == [
        "kaiwu-reconciler-metrics", "kaiwu-reconciler-webhook"]
    defaults = Settings()
    _, port = defaults.http_host_port
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert container["ports"][0]["containerPort"] == port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > defaults.shutdown_grace_s, "time to finish reconciles and release the lease"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "kaiwu-reconciler"

    for doc in (deployment, *services):
        doc["metadata"]["namespace"] = namespace
    # Server-side dry run: schema, defaulting and admission, nothing stored.
    # The client sends plain dicts as they are; its annotations only know its model classes.
    k8s.AppsV1Api(kube).create_namespaced_deployment(
        namespace, deployment, dry_run="All")  # type: ignore[arg-type,unused-ignore]
    for service in services:
        k8s.CoreV1Api(kube).create_namespaced_service(
            namespace, service, dry_run="All")  # type: ignore[arg-type,unused-ignore]


