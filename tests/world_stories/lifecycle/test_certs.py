"""Story: a node certificate nears its expiry; the reconciler renews it and rolls the pods.

A TLS cluster runs. Its node certificate is swapped for one that expires in 10 days (as if four
years and more had passed): the reconciler sees it is inside the 30-day renewal window, issues a
new one from the same CA (old and new pods trust each other), and changes the pod template's
certs-hash annotation, so the StatefulSet restarts every pod onto the new certificate, gated like
any rollout: one pod at a time, never two kwbase nodes down together. The KaiwuDB node ids do
not change (stores stay with their volumes). Timings are printed (pytest -s).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client as k8s

from reconciler.kaiwudb.certs.keys import CertKey, CertSettings
from reconciler.kaiwudb.certs.layout import earliest_expiry, node_secret
from reconciler.kaiwudb.certs.leaves import issue_node, node_hosts
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from renderer.builders import CERTS_HASH_ANNOTATION
from renderer.schema import apply_defaults
from renderer.spec import Cluster
from tests.support.harness import Reconciler, user, wait_for
from tests.support.lifecycle import (
    NAME,
    bring_up,
    live_nodes,
    report,
    small_cluster,
    wait_ready,
)
from tests.world.simworld import SimWorld


def secret_bytes(secret: Obj, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def cluster_ca(api: Kube, namespace: str) -> CertKey:
    secret = api.get(kk.SECRET, namespace, f"{NAME}-ca")
    assert secret is not None
    key = serialization.load_pem_private_key(secret_bytes(secret, "ca.key"), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return CertKey(x509.load_pem_x509_certificate(secret_bytes(secret, "ca.crt")), key)


def certs_hash(api: Kube, namespace: str) -> str | None:
    statefulset = api.get(kk.STATEFUL_SET, namespace, NAME)
    assert statefulset is not None
    annotations = statefulset["spec"]["template"]["metadata"].get("annotations") or {}
    found: str | None = annotations.get(CERTS_HASH_ANNOTATION)
    return found


def pods(api: Kube, namespace: str) -> dict[str, Obj]:
    """The cluster's pods by name."""
    found, _ = api.list_objects(kk.POD, namespace, f"app.kubernetes.io/instance={NAME}")
    return {pod["metadata"]["name"]: pod for pod in found}


def is_ready(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def test_a_node_certificate_near_expiry_is_renewed_and_the_pods_roll_one_at_a_time(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace, tls={"enabled": True}))
    report("apply -> Ready (3 TLS nodes)", took)
    api = Kube(kube, "test")
    nodes_before = live_nodes(obj)
    hash_before = certs_hash(api, namespace)
    uids_before = {name: pod["metadata"]["uid"] for name, pod in pods(api, namespace).items()}
    assert hash_before and len(uids_before) == 3

    # Ten days left: issued (backdated) almost five years ago by the cluster's own CA.
    spec = apply_defaults({key: value for key, value in obj.items() if key != "status"})
    cluster = Cluster.from_object(spec)
    ca = cluster_ca(api, namespace)
    validity = CertSettings().leaf_validity
    aging = issue_node(ca, node_hosts(cluster),
                       datetime.now(UTC) - validity + timedelta(days=10))
    live = api.get(kk.SECRET, namespace, f"{NAME}-node-certs")
    assert live is not None
    aged = node_secret(cluster, secret_bytes(live, "ca.crt"), aging)
    aged["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    started = time.monotonic()
    user(kube, "cert-tool").apply(aged)

    def renewed() -> bool:
        secret = api.get(kk.SECRET, namespace, f"{NAME}-node-certs")
        expiry = earliest_expiry(secret) if secret else None
        return expiry is not None and expiry > datetime.now(UTC) + timedelta(days=365)
    wait_for("the node certificate to be renewed", renewed, 30, 0.2)
    report("near-expiry certificate -> renewed", time.monotonic() - started)
    hash_after = wait_for("a new certs-hash on the pod template",
                          lambda: (h := certs_hash(api, namespace)) != hash_before and h, 30, 0.2)
    assert hash_after

    # Every pod restarts onto the new certificate, and never two at once.
    most_down = 0

    def all_restarted() -> bool:
        nonlocal most_down
        current = pods(api, namespace)
        most_down = max(most_down, 3 - sum(is_ready(pod) for pod in current.values()))
        restarted = {name for name, pod in current.items()
                     if pod["metadata"]["uid"] != uids_before.get(name) and is_ready(pod)}
        return len(restarted) == 3
    wait_for("every pod to restart onto the new certificate", all_restarted, 120, 0.1)
    report("renewed -> every pod restarted and Ready", time.monotonic() - started)
    assert most_down <= 1, f"{most_down} kwbase pods were down at the same time"
    obj = wait_ready(reconciler, 60)
    assert live_nodes(obj) == nodes_before, "the same KaiwuDB nodes, stores kept"
