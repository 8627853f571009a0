"""Fixtures the runtime stories share.

``installed`` (function): apply a `kaiwu install` bundle's ServiceAccount, RBAC and webhook
registration as an administrator would (the CRD is installed by the test world, the Namespace
by the namespace fixture); its cluster-wide objects are removed after the test. Used by the
install and image stories, so the reconciler runs under exactly the bundle's RBAC.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from reconciler import install
from reconciler.model import Obj

# Applied by the test world itself (the CRD) and the namespace fixture (the Namespace).
PREINSTALLED = ("CustomResourceDefinition", "Namespace")


@pytest.fixture
def installed(kube: k8s.ApiClient) -> Iterator[Callable[[install.Options], list[Obj]]]:
    """Apply a bundle's RBAC (kubectl create -f); remove its cluster-wide objects after."""
    cluster_wide: list[tuple[str, str]] = []

    def apply(opts: install.Options) -> list[Obj]:
        docs = [d.obj for d in install.bundle(opts)]
        for doc in docs:
            if doc["kind"] in PREINSTALLED or doc["kind"] in ("Deployment", "Service"):
                continue
            if doc["kind"] == "ValidatingWebhookConfiguration" and \
                    (doc["kind"], doc["metadata"]["name"]) in cluster_wide:
                continue  # every shard's bundle ships the same one (`kubectl apply` keeps it)
            k8s_utils.create_from_dict(kube, doc)  # type: ignore[no-untyped-call,unused-ignore]
            if doc["kind"].startswith("Cluster") or \
                    doc["kind"] == "ValidatingWebhookConfiguration":
                cluster_wide.append((doc["kind"], doc["metadata"]["name"]))
        return docs

    yield apply
    rbac = k8s.RbacAuthorizationV1Api(kube)
    for kind, name in cluster_wide:
        with contextlib.suppress(k8s.ApiException):  # a story may have removed it already
            if kind == "ValidatingWebhookConfiguration":
                k8s.AdmissionregistrationV1Api(kube).delete_validating_webhook_configuration(name)
            else:
                (rbac.delete_cluster_role if kind == "ClusterRole"
                 else rbac.delete_cluster_role_binding)(name)
