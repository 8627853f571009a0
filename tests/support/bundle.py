"""Applying `kaiwu install`'s bundle as an administrator does: `kubectl apply --server-side -f -`,
each document a server-side apply under the field manager kubectl, conflicts refused as kubectl
refuses them without --force-conflicts.

Used by the `installed` fixture (tests/world_stories/runtime/conftest.py) and the install story
that applies the bundle again over a running reconciler, as an upgrade does.
"""

from __future__ import annotations

import copy
import json
from typing import Protocol

from kubernetes import client as k8s

from reconciler import install
from reconciler.kube.client import send
from reconciler.model import Obj


class Installer(Protocol):
    """The `installed` fixture: apply a bundle whole; `webhook=False` for a story that runs
    the reconciler with its webhook off (the registration is deleted then)."""

    def __call__(self, opts: install.Options, webhook: bool = True) -> list[Obj]: ...

# Where each kind of the bundle lives in the API: (plural, namespaced); its group and version
# are the document's apiVersion (the PodDisruptionBudget's depends on the release).
PATHS = {
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "Service": ("services", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", False),
    "NetworkPolicy": ("networkpolicies", True),
    "PodDisruptionBudget": ("poddisruptionbudgets", True),
    "Deployment": ("deployments", True),
}
# Shared by every story in the world (installed when it starts): never removed by one.
WORLD_OWNED = ("CustomResourceDefinition",)


def server_side_apply(kube: k8s.ApiClient, doc: Obj, *, dry_run: bool = False) -> Obj:
    """`kubectl apply --server-side` of one document: field manager kubectl, conflicts refused
    (409), as kubectl does without --force-conflicts."""
    plural, namespaced = PATHS[doc["kind"]]
    api = doc["apiVersion"]
    group_version = f"/apis/{api}" if "/" in api else f"/api/{api}"
    meta = doc["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    query = [("fieldManager", "kubectl"), ("force", "false")]
    if dry_run:
        query.append(("dryRun", "All"))
    raw = send(kube, "PATCH", f"{group_version}{where}/{plural}/{meta['name']}", query=query,
               headers={"Content-Type": "application/apply-patch+yaml",
                        "Accept": "application/json"}, body=json.dumps(doc), timeout=30)
    text = raw.data.decode("utf-8", "replace")
    raw.release_conn()
    assert raw.status == 200 or raw.status == 201, (
        f"the API server refused {doc['kind']}/{meta['name']}: {raw.status} {text}")
    answer: Obj = json.loads(text)
    return answer


def apply_bundle(kube: k8s.ApiClient, docs: list[Obj], webhook_url: str = "") -> None:
    """Apply every document in order; the Deployment only as a dry run (no kubelet here runs
    its image: the stories run the reconciler as it would). `webhook_url`: the registration
    names this URL instead of the bundle's Service, as the reconciler registered it in a world
    without a Service routing to a local process."""
    for doc in docs:
        if webhook_url and doc["kind"] == "ValidatingWebhookConfiguration":
            doc = copy.deepcopy(doc)
            for webhook in doc["webhooks"]:
                webhook["clientConfig"] = {"url": webhook_url}
        server_side_apply(kube, doc, dry_run=doc["kind"] == "Deployment")
