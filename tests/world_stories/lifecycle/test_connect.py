"""Stories: how applications get certificates to connect with (docs/operations.md "Connecting
applications").

1. A TLS cluster lists `spec.tls.clientUsers: [app]`: the reconciler writes dev-client-app-certs
   holding the app user's client certificate under KWDB's names (client.app.crt/.key, what
   `kwbase sql --certs-dir` reads) and cert-manager's (tls.crt/.key, what a JDBC or psql client
   mounts), signed by the cluster CA the nodes trust; the pods do not mount it. Dropping the user
   from the spec leaves the Secret where it is.
2. A user brings certificates as cert-manager writes them (ca.crt, tls.crt, tls.key) and says
   `secretLayout: cert-manager`: the cluster comes up Ready, and the pods' certs volume takes
   every file kwbase reads in /kaiwudb/certs (ca.crt, node.crt, node.key, client.root.crt,
   client.root.key) from a key that exists in those Secrets. The simulated kubelet does not mount
   volumes, so the story checks what a real kubelet would refuse: an item whose key is missing.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import UTC, datetime

from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client as k8s

from reconciler.kaiwudb.certs.authority import new_ca
from reconciler.kaiwudb.certs.keys import CertKey
from reconciler.kaiwudb.certs.leaves import issue_client, issue_node
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.kube.kinds import TLS_SECRET_LABEL
from reconciler.model import Obj
from tests.support.harness import Reconciler, condition, user, wait_for
from tests.support.lifecycle import NAME, bring_up, report, small_cluster
from tests.world.simworld import SimWorld

KWDB_FILES = {"ca.crt", "node.crt", "node.key", "client.root.crt", "client.root.key"}


def secret(api: Kube, namespace: str, name: str) -> Obj:
    found = api.get(kk.SECRET, namespace, name)
    assert found is not None, f"Secret {name} does not exist"
    return found


def raw(obj: Obj, key: str) -> bytes:
    return base64.b64decode(obj["data"][key])


def test_a_client_user_gets_a_secret_kwbase_and_generic_clients_can_both_mount(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(
        reconciler_factory, kube, namespace,
        small_cluster(namespace, tls={"enabled": True, "clientUsers": ["app"]}))
    report("apply -> Ready (3 TLS nodes, client user app)", took)
    api = Kube(kube, "test")

    app = secret(api, namespace, f"{NAME}-client-app-certs")
    assert set(app["data"]) == {"ca.crt", "client.app.crt", "client.app.key", "tls.crt",
                                "tls.key"}
    assert app["data"]["tls.crt"] == app["data"]["client.app.crt"]
    assert app["data"]["tls.key"] == app["data"]["client.app.key"]
    ca_pem = raw(secret(api, namespace, f"{NAME}-ca"), "ca.crt")
    assert raw(app, "ca.crt") == ca_pem
    cert = x509.load_pem_x509_certificate(raw(app, "tls.crt"))
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "app"
    # Owned by nobody: deleting the cluster keeps it (docs/install.md, "Deleting a cluster").
    assert "ownerReferences" not in app["metadata"]
    assert app["metadata"]["labels"][TLS_SECRET_LABEL] == "true"
    statefulset = api.get(kk.STATEFUL_SET, namespace, NAME)
    assert statefulset is not None
    assert f"{NAME}-client-app-certs" not in str(statefulset["spec"]["template"]), (
        "pods do not mount a client user's Secret")

    # The user leaves the spec: the next pass (observedGeneration moves) keeps the Secret.
    generation = obj["metadata"]["generation"]
    user(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"tls": {"clientUsers": []}}})
    wait_for("the reconciler to observe the new spec",
             lambda: int(((reconciler.cluster(NAME) or {}).get("status") or {}).get(
                 "observedGeneration") or 0) > generation, 30, 0.1)
    kept = secret(api, namespace, f"{NAME}-client-app-certs")
    assert kept["data"] == app["data"]


def cert_manager_secret(name: str, namespace: str, ca: CertKey,
                        leaf: CertKey) -> Obj:
    """What a cert-manager Certificate writes: a kubernetes.io/tls Secret with ca.crt, labelled
    for KaiwuDB through the Certificate's secretTemplate.labels."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {TLS_SECRET_LABEL: "true"}},
            "data": {"ca.crt": base64.b64encode(ca.cert_pem).decode(),
                     "tls.crt": base64.b64encode(leaf.cert_pem).decode(),
                     "tls.key": base64.b64encode(leaf.key_pem).decode()}}


def mounted_files(api: Kube, namespace: str, statefulset: Obj) -> set[str]:
    """The files the pods' certs volume gives kwbase, after checking each item's key exists in
    its Secret (a missing key keeps a real pod in ContainerCreating)."""
    pod = statefulset["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "certs"]
    files: set[str] = set()
    for source in volume["projected"]["sources"]:
        data = secret(api, namespace, source["secret"]["name"])["data"]
        for item in source["secret"]["items"]:
            assert item["key"] in data, (
                f"Secret {source['secret']['name']} has no key {item['key']}: the kubelet "
                "would not mount the volume")
            files.add(item["path"])
    return files


def test_a_cluster_on_cert_manager_layout_secrets_comes_up_ready(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    now = datetime.now(UTC)
    ca = new_ca("Team issuer", now)
    node = issue_node(ca, (f"*.{NAME}.{namespace}.svc.cluster.local", "localhost",
                           "127.0.0.1"), now)
    root = issue_client(ca, "root", now)
    tool = user(kube, "cert-manager")
    tool.create(cert_manager_secret("dev-node-tls", namespace, ca, node))
    tool.create(cert_manager_secret("dev-root-tls", namespace, ca, root))

    started = time.monotonic()
    _, obj, took = bring_up(
        reconciler_factory, kube, namespace,
        small_cluster(namespace, tls={"enabled": True, "nodeSecretName": "dev-node-tls",
                                      "clientSecretName": "dev-root-tls",
                                      "secretLayout": "cert-manager"}))
    report("apply -> Ready (3 TLS nodes on cert-manager Secrets)", took)
    assert condition(obj, "Stalled").get("status") != "True"
    api = Kube(kube, "test")
    statefulset = api.get(kk.STATEFUL_SET, namespace, NAME)
    assert statefulset is not None
    assert mounted_files(api, namespace, statefulset) == KWDB_FILES
    assert "--certs-dir=/kaiwudb/certs" in statefulset["spec"]["template"]["spec"][
        "containers"][0]["command"]
    assert time.monotonic() - started < 120
