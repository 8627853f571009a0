"""Fixtures the runtime stories share.

``installed`` (function): apply a whole `kaiwu install` bundle, rendered for the test world's
Kubernetes release, as an administrator does (`kubectl apply --server-side -f -`): every
document of the printed YAML, the CRDs and the Namespace included, is server-side applied; the
Deployment only as a dry run, since no kubelet here could run its image (the stories run the
reconciler as that Deployment would). Cluster-wide objects it made are removed after the test,
except the CRDs: they are the test world's own, and every story uses them. Used by the install,
image, fleet and shard stories, so the reconciler runs under exactly the bundle's RBAC.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client as k8s

from reconciler import install
from reconciler.model import Obj
from tests.support.bundle import PATHS, WORLD_OWNED, Installer, apply_bundle
from tests.support.world_kube import VERSION


@pytest.fixture
def installed(kube: k8s.ApiClient) -> Iterator[Installer]:
    """Apply a bundle whole, for the world's release; returns its documents as printed.
    `webhook=False`: the story runs the reconciler with its webhook off. `webhook_url`: applied
    over a running reconciler, the registration names the URL it registered (apply_bundle)."""
    cluster_wide: set[tuple[str, str]] = set()

    def apply(opts: install.Options, webhook: bool = True, webhook_url: str = "") -> list[Obj]:
        printed = install.render(dataclasses.replace(opts, kube_version=VERSION))
        docs: list[Obj] = [doc for doc in yaml.safe_load_all(printed) if doc]
        apply_bundle(kube, docs, webhook_url=webhook_url)
        if not webhook:
            # The story runs the reconciler with its webhook off (this world has no Service
            # routing to a local process): as docs/reconciler.md tells an administrator who
            # turns it off, the registration goes too, or its failurePolicy Fail refuses
            # every KaiwuCluster write.
            registration = next(doc for doc in docs
                                if doc["kind"] == "ValidatingWebhookConfiguration")
            try:
                k8s.AdmissionregistrationV1Api(kube).delete_validating_webhook_configuration(
                    registration["metadata"]["name"])
            except k8s.ApiException as error:
                if error.status != 404:  # a second shard's bundle: gone already
                    raise
        cluster_wide.update((doc["kind"], doc["metadata"]["name"]) for doc in docs
                            if not PATHS[doc["kind"]][1]
                            and doc["kind"] not in (*WORLD_OWNED, "Namespace"))
        return docs

    yield apply
    rbac = k8s.RbacAuthorizationV1Api(kube)
    for kind, name in sorted(cluster_wide):
        with contextlib.suppress(k8s.ApiException):  # a story may have removed it already
            if kind == "ValidatingWebhookConfiguration":
                k8s.AdmissionregistrationV1Api(kube).delete_validating_webhook_configuration(name)
            else:
                (rbac.delete_cluster_role if kind == "ClusterRole"
                 else rbac.delete_cluster_role_binding)(name)
