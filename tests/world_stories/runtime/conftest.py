"""Fixtures the runtime stories share.

``installed`` (function): apply a `kaiwu install` bundle's ServiceAccount and RBAC as an
administrator would (the CRD is installed by the test world, the Namespace by the namespace
fixture); its cluster-wide objects are removed after the test. Used by the install and image
stories, so the reconciler runs under exactly the bundle's RBAC.
"""

from __future__ import annotations

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
            k8s_utils.create_from_dict(kube, doc)  # type: ignore[no-untyped-call,unused-ignore]
            if doc["kind"].startswith("Cluster"):
                cluster_wide.append((doc["kind"], doc["metadata"]["name"]))
        return docs

    yield apply
    rbac = k8s.RbacAuthorizationV1Api(kube)
    for kind, name in cluster_wide:
        (rbac.delete_cluster_role if kind == "ClusterRole"
         else rbac.delete_cluster_role_binding)(name)
