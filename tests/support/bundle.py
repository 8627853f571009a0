"""Applying `kaiwu install`'s bundle as an administrator does: `kubectl apply --server-side -f -`,
each document a server-side apply under the field manager kubectl, conflicts refused as kubectl
refuses them without --force-conflicts; deleting what `kaiwu uninstall` prints as `kubectl delete
--ignore-not-found -f -` does; and running the reconciler as the bundle's Deployment would
(`run_as_deployed`: `python -m reconciler` with the Deployment's variables and the
ServiceAccount's token).

Used by the `installed` fixture (tests/world_stories/runtime/conftest.py), the install story
that applies the bundle again over a running reconciler, as an upgrade does, the uninstall
stories, and the README's quickstart (tests/support/quickstart.py: route_webhook, run_as_deployed).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

import yaml
from kubernetes import client as k8s

from reconciler import install
from reconciler.kube.client import send
from reconciler.model import Obj
from tests.support.harness import REPO
from tests.world.controlplane import ControlPlane, free_port, service_account_token


class Installer(Protocol):
    """The `installed` fixture: apply a bundle whole; `webhook=False` for a story that runs
    the reconciler with its webhook off (the registration is deleted then); `webhook_url` for
    one applied over a running reconciler (see apply_bundle)."""

    def __call__(self, opts: install.Options, webhook: bool = True,
                 webhook_url: str = "") -> list[Obj]: ...

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
    "Lease": ("leases", True),  # kaiwu uninstall's: made by the reconciler, not the bundle
    "Secret": ("secrets", True),
}
# Shared by every story in the world (installed when it starts): never removed by one.
WORLD_OWNED = ("CustomResourceDefinition",)


def _path(doc: Obj) -> str:
    plural, namespaced = PATHS[doc["kind"]]
    api = doc["apiVersion"]
    group_version = f"/apis/{api}" if "/" in api else f"/api/{api}"
    meta = doc["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    return f"{group_version}{where}/{plural}/{meta['name']}"


def server_side_apply(kube: k8s.ApiClient, doc: Obj, *, dry_run: bool = False,
                      force: bool = False) -> Obj:
    """`kubectl apply --server-side` of one document: field manager kubectl, conflicts refused
    (409), as kubectl does without --force-conflicts (`force`: with it)."""
    meta = doc["metadata"]
    query = [("fieldManager", "kubectl"), ("force", "true" if force else "false")]
    if dry_run:
        query.append(("dryRun", "All"))
    raw = send(kube, "PATCH", _path(doc), query=query,
               headers={"Content-Type": "application/apply-patch+yaml",
                        "Accept": "application/json"}, body=json.dumps(doc), timeout=30)
    text = raw.data.decode("utf-8", "replace")
    raw.release_conn()
    assert raw.status == 200 or raw.status == 201, (
        f"the API server refused {doc['kind']}/{meta['name']}: {raw.status} {text}")
    answer: Obj = json.loads(text)
    return answer


def route_webhook(doc: Obj, webhook_url: str) -> Obj:
    """`doc`, or a webhook registration naming `webhook_url` instead of the bundle's Service, as
    the reconciler registered it in a world where no Service routes to a local process."""
    if doc["kind"] != "ValidatingWebhookConfiguration":
        return doc
    doc = copy.deepcopy(doc)
    for webhook in doc["webhooks"]:
        webhook["clientConfig"] = {"url": webhook_url}
    return doc


def apply_bundle(kube: k8s.ApiClient, docs: list[Obj], webhook_url: str = "") -> None:
    """Apply every document in order; the Deployment only as a dry run (no kubelet here runs
    its image: the stories run the reconciler as it would). `webhook_url`: the registration
    names this URL (route_webhook)."""
    for doc in docs:
        if webhook_url:
            doc = route_webhook(doc, webhook_url)
        server_side_apply(kube, doc, dry_run=doc["kind"] == "Deployment")


def delete_documents(kube: k8s.ApiClient, docs: list[Obj]) -> list[str]:
    """`kubectl delete --ignore-not-found -f -`: each document deleted in order, with kubectl's
    default cascade (background: dependents go through the garbage collector). Returns
    "Kind/name" of each one that existed."""
    deleted = []
    for doc in docs:
        body = json.dumps({"kind": "DeleteOptions", "apiVersion": "v1",
                           "propagationPolicy": "Background"})
        raw = send(kube, "DELETE", _path(doc), headers={"Content-Type": "application/json"},
                   body=body, timeout=30)
        text = raw.data.decode("utf-8", "replace")
        raw.release_conn()
        assert raw.status in (200, 202, 404), (
            f"the API server refused to delete {doc['kind']}/{doc['metadata']['name']}: "
            f"{raw.status} {text}")
        if raw.status != 404:
            deleted.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return deleted


def run_as_deployed(plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
                    docs: list[Obj], tmp: Path, *, source: Path = REPO,
                    identity: str = "installed-0",
                    webhook_port: int = 0) -> tuple[subprocess.Popen[bytes], Path, str]:
    """`python -m reconciler` with the Deployment's variables and the ServiceAccount's token.
    `source`: the checkout whose reconciler runs (an earlier version's: tests/support/earlier).
    `webhook_port`: where it serves its webhook (default: a free port)."""
    token = service_account_token(k8s.CoreV1Api(kube), namespace, install.NAME)
    kubeconfig = tmp / "reconciler.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(plane.kubeconfig(token=token, user="reconciler")))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {**os.environ, "POD_NAMESPACE": namespace, "KAIWU_IDENTITY": identity,
           **{e["name"]: e["value"] for e in container["env"] if "value" in e}}
    if source != REPO:
        env["PYTHONPATH"] = str(source)
    log = tmp / f"reconciler-{identity}.log"
    # The webhook as deployed (certificate Secret, registration) but called by URL: this world
    # has no Service routing the API server to a local process.
    port = webhook_port or free_port()
    argv = [sys.executable, "-m", "reconciler", "--kubeconfig", str(kubeconfig),
            "--lease-duration-s", "3", "--renew-deadline-s", "2", "--retry-period-s", "0.5",
            "--http-address", "127.0.0.1:0", "--log-format", "text",
            "--webhook-address", f"127.0.0.1:{port}", "--webhook-url", f"https://127.0.0.1:{port}",
            "--webhook-hosts", "127.0.0.1"]
    with log.open("wb") as out:
        popen = subprocess.Popen(argv, cwd=source, env=env, stdout=out, stderr=subprocess.STDOUT)
    return popen, log, f"system:serviceaccount:{namespace}:{install.NAME}"


def stop(popen: subprocess.Popen[bytes]) -> None:
    """Stop a reconciler process as its Deployment's pod is stopped: SIGTERM, then SIGKILL
    after 15 s."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(15)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(5)
