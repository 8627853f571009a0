"""Stories: `kaiwu install`'s bundle on a real authorizer (the test world's apiserver enforces
RBAC), cluster-wide and namespace-scoped, on Kubernetes 1.20 and (make test-136) 1.36.

An administrator applies the whole bundle, rendered for the world's release, server-side (the
`installed` fixture: CRDs, Namespace, RBAC, Services, webhook registration, NetworkPolicy; the
Deployment as a dry run); the reconciler runs as it would in the bundle's Deployment: `python -m
reconciler` in its own process, its KAIWU_* variables taken from the Deployment, with nothing but
the ServiceAccount's token. Once it has registered its webhook it brings a small KaiwuCluster to
Ready (the simulated kubelets run the pods) without a single request refused in the audit log;
the bundle applied again, as an upgrade does, conflicts with nothing the leader registered. The
namespace-scoped reconciler's token cannot read Secrets or delete claims outside its namespace
(403), nor write cluster-wide. The webhook's Secret and registration are made with the bundle's
rights too (the webhook is called by URL: no Service routes to a local process here). Each
variant's Deployment passes a server-side dry run. The bundle's namespace, labelled Pod Security
restricted, admits a pod made from its Deployment's template (the reconciler and, in directory
mode, git-sync) and, from Kubernetes 1.23 where the PodSecurity admission plugin runs, refuses
the same pod with one rule loosened. Timings are printed (pytest -s).
"""

from __future__ import annotations

import contextlib
import json
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
from renderer.settings import KubeVersion
from tests.support.bundle import Installer, apply_bundle, run_as_deployed, stop
from tests.support.harness import condition, refused, user, wait_for
from tests.support.lifecycle import NAME, report, small_cluster
from tests.support.world_kube import VERSION
from tests.world.controlplane import ControlPlane, service_account_token
from tests.world.simworld import SimWorld


def options(scope: str, namespace: str, **more: Any) -> install.Options:
    return install.Options(namespace=namespace, scope=scope, image="kaiwu-reconciler:test",
                           watch_namespace=namespace if scope == "namespaced" else "", **more)


def forbidden(call: Callable[[], object]) -> bool:
    try:
        call()
    except k8s.ApiException as error:
        return bool(error.status == 403)
    return False


@pytest.mark.parametrize("scope", ["cluster", "namespaced"])
def test_the_bundle_is_all_the_reconciler_needs_to_bring_a_cluster_to_ready(
        scope: str, control_plane: ControlPlane, sim_world: SimWorld, kube: k8s.ApiClient,
        namespace: str, installed: Installer,
        tmp_path: Path) -> None:
    started = time.monotonic()
    docs = installed(options(scope, namespace))
    popen, log, who = run_as_deployed(control_plane, kube, namespace, docs, tmp_path)
    registration = f"{install.NAME}-{namespace}"
    admission = k8s.AdmissionregistrationV1Api(kube)

    def registered() -> list[k8s.V1ValidatingWebhook]:
        assert popen.poll() is None, log.read_text(errors="replace")[-3000:]
        webhooks = admission.read_validating_webhook_configuration(registration).webhooks
        return list(webhooks or []) if webhooks and webhooks[0].client_config.ca_bundle else []
    try:
        # Until the leader has put its CA into the bundle's registration, KaiwuCluster writes
        # are refused (failurePolicy Fail): the administrator waits for the reconciler first.
        wait_for("the leader to register its webhook", registered, 30, 0.2)
        user(kube, "kubectl").apply(small_cluster(namespace))

        def ready() -> Obj | None:
            assert popen.poll() is None, log.read_text(errors="replace")[-3000:]
            found = Kube(kube, "test").get(kk.KAIWU_CLUSTER, namespace, NAME)
            return found if condition(found, "Ready").get("status") == "True" else None
        wait_for("the cluster to be Ready", ready, 90, 0.2)
        report(f"{scope} bundle: RBAC applied -> cluster Ready", time.monotonic() - started)
        time.sleep(1.0)  # a few more requests (status, caches) into the audit log
        # The bundle's rights were enough to make the webhook's Secret and register it.
        webhooks = registered()
        policy = (webhooks[0].failure_policy, webhooks[0].timeout_seconds)
        assert policy == ("Fail", 5)
        # An upgrade applies the bundle again (`kubectl apply --server-side`) over what the
        # leader registered: no conflict, and the leader's CA, policy and time-out stay. (Its
        # registration names the URL the leader registered: no Service routes here.)
        apply_bundle(kube, docs, webhook_url=str(webhooks[0].client_config.url))
        again = registered()
        assert (again[0].failure_policy, again[0].timeout_seconds) == policy
        assert again[0].client_config.ca_bundle == webhooks[0].client_config.ca_bundle
    finally:
        stop(popen)
        with contextlib.suppress(k8s.ApiException):
            admission.delete_validating_webhook_configuration(registration)
    assert refused(control_plane, who, namespace, scope) == [], \
        "requests RBAC refused:\n" + "\n".join(refused(control_plane, who, namespace, scope))
    writes = control_plane.audit_events(user=who, verbs={"create", "patch", "update"})
    assert any("statefulsets" in e.get("requestURI", "") for e in writes)

    # Without directory mode the reconciler cannot delete a cluster, in either scope.
    token = service_account_token(k8s.CoreV1Api(kube), namespace, install.NAME)
    as_reconciler = control_plane.api_client(token=token)
    custom = k8s.CustomObjectsApi(as_reconciler)
    assert forbidden(lambda: custom.delete_namespaced_custom_object(
        "kaiwu.inspur.com", "v1", namespace, "kaiwuclusters", NAME))
    if scope == "namespaced":
        core = k8s.CoreV1Api(as_reconciler)
        assert forbidden(lambda: core.list_namespaced_secret("kube-system"))
        assert forbidden(lambda: core.read_namespaced_secret("anything", "default"))
        assert forbidden(lambda: core.list_secret_for_all_namespaces())
        assert forbidden(lambda: core.delete_namespaced_persistent_volume_claim(
            "data-dev-0", "default"))
        assert forbidden(lambda: core.list_persistent_volume_claim_for_all_namespaces())
        assert not forbidden(lambda: core.list_node())  # the one ClusterRole: read Nodes


@pytest.mark.parametrize("variant", [
    {"scope": "cluster"}, {"scope": "namespaced"},
    {"scope": "cluster", "directory_mode": True, "git_repo": "https://git.example/c.git"}],
    ids=["cluster", "namespaced", "directory-mode"])
def test_every_variants_deployment_and_service_pass_the_api_servers_dry_run(
        variant: dict[str, Any], kube: k8s.ApiClient, namespace: str) -> None:
    scope = variant.pop("scope")
    docs = [d.obj for d in install.bundle(options(scope, namespace, **variant))]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    service = next(d for d in docs if d["kind"] == "Service")
    # The client sends plain dicts as they are; its annotations only know its model classes.
    k8s.AppsV1Api(kube).create_namespaced_deployment(
        namespace, deployment, dry_run="All")  # type: ignore[arg-type,unused-ignore]
    k8s.CoreV1Api(kube).create_namespaced_service(
        namespace, service, dry_run="All")  # type: ignore[arg-type,unused-ignore]


POD_SECURITY_SINCE = KubeVersion(1, 23)  # the PodSecurity admission plugin, on by default


@pytest.mark.parametrize("variant", [
    {"scope": "cluster"},
    {"scope": "cluster", "directory_mode": True, "git_repo": "https://git.example/c.git"}],
    ids=["cluster", "directory-mode"])
def test_the_reconcilers_namespace_admits_its_pods_under_pod_security_restricted(
        variant: dict[str, Any], kube: k8s.ApiClient, namespace: str,
        installed: Installer) -> None:
    scope = variant.pop("scope")
    docs = installed(options(scope, namespace, **variant))
    core = k8s.CoreV1Api(kube)
    meta = core.read_namespace(namespace).metadata
    assert meta is not None and meta.labels is not None
    assert meta.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "pod-security-check", "namespace": namespace,
                        "labels": template["metadata"]["labels"]},
           "spec": template["spec"]}
    core.create_namespaced_pod(namespace, pod, dry_run="All")  # type: ignore[arg-type,unused-ignore]
    if VERSION < POD_SECURITY_SINCE:
        return  # no PodSecurity admission on this release: the labels wait for an upgrade
    # The check is live: the same pod with its last container allowed to escalate is refused.
    loosened = yaml.safe_load(yaml.safe_dump(pod))
    del loosened["spec"]["containers"][-1]["securityContext"]["allowPrivilegeEscalation"]
    with pytest.raises(k8s.ApiException) as refused_:
        core.create_namespaced_pod(
            namespace, loosened, dry_run="All")  # type: ignore[arg-type,unused-ignore]
    assert refused_.value.status == 403
    message = str(json.loads(refused_.value.body or "{}").get("message"))
    assert 'violates PodSecurity "restricted:latest"' in message, message
    assert "allowPrivilegeEscalation != false" in message, message
