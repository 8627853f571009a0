"""The webhook's certificates rotate under the API server's calls (issue 30, item 3), with the
operator as shipped on two real nodes (tests/world/real_operator.py): the leader reissues the
serving certificate and replaces its CA (lifetimes of seconds, set as a user would, KAIWU_*
variables in the Deployment through the overlay), the caBundle goes through its both-trusted
step, each replica reloads the Secret and serves the new certificate without a restart, and
meanwhile the API server, dialling the webhook Service's endpoints, keeps judging every
KaiwuCluster write: a bad spec refused with the renderer's message, a good one admitted (server
side dry runs: the webhook is called, nothing is stored). No KaiwuDB is involved.

The steps themselves are reconciler/runtime/webhook_certs.py's; a unit story runs them on a fake
clock and a world story (admission/test_webhook.py) with in-process replicas behind a simulated
Service. Runs only in the node tier (`make test-node`).
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from reconciler.kaiwudb.certs.keys import issued_by
from tests.world.controlplane import ControlPlane, ControlPlaneSettings
from tests.world.kube_rest import ApiError, KubeAccess, KubeRest
from tests.world.real_node import NODE_TIER
from tests.world.real_operator import (
    NAMESPACE,
    NODES,
    PODS,
    install,
    kubectl,
    real_nodes,
    wait_for_replicas,
)

pytestmark = NODE_TIER
REPO = Path(__file__).resolve().parents[3]
# A CA of 60 s (a next one made with 20 s left, in charge 4 s later, the old one dropped 4 s
# after that) and serving certificates of 20 s (reissued with 7 s left); each replica reads
# the Secret every second. Within the settings' rules (reconciler/settings.py).
LIFETIMES = {"KAIWU_WEBHOOK_CA_VALIDITY_S": "60", "KAIWU_WEBHOOK_CERT_VALIDITY_S": "20",
             "KAIWU_WEBHOOK_CA_OVERLAP_S": "4", "KAIWU_WEBHOOK_RELOAD_S": "1"}
SECRET = f"/api/v1/namespaces/{NAMESPACE}/secrets/kaiwu-reconciler-webhook-tls"
REGISTRATION = ("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                f"kaiwu-reconciler-{NAMESPACE}")
CLUSTERS = "/apis/kaiwu.inspur.com/v1/namespaces/kaiwu-dev/kaiwuclusters"
DENIED = 'admission webhook "kaiwuclusters.kaiwu.inspur.com" denied the request'
REFUSAL = "spec.replicas: multi-replica needs at least 3 nodes, got 2"
WEBHOOK_PORT = 9443  # the bundle's containerPort `webhook`


@pytest.fixture(scope="module")
def api(image_archive: Path) -> Iterator[KubeRest]:
    """Two real nodes, the bundle installed with short certificate lifetimes, both replicas
    Ready."""
    settings = ControlPlaneSettings(crd_paths=(), real_nodes=tuple(n.name for n in NODES),
                                    route_to_endpoints=True)
    with contextlib.ExitStack() as stack:
        plane: ControlPlane = stack.enter_context(ControlPlane(settings))
        stack.enter_context(real_nodes(plane, image_archive))
        install(plane, LIFETIMES)
        kubectl(plane, "create", "namespace", "kaiwu-dev")
        rest = KubeRest(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token))
        wait_for_replicas(rest, len(NODES), 180)
        yield rest


def certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def dry_run(api: KubeRest, replicas: int) -> str:
    """A server-side dry run of a KaiwuCluster create (admission runs, nothing is stored):
    'admitted', 'refused' (the renderer's refusal through the webhook) or what else came."""
    obj: dict[str, Any] = yaml.safe_load((REPO / "clusters" / "dev.yaml").read_text())
    obj["spec"]["replicas"] = replicas
    try:
        api.request("POST", CLUSTERS, query={"dryRun": "All"}, body=obj)
    except ApiError as err:
        text = str(err)
        return "refused" if err.status == 422 and DENIED in text and REFUSAL in text else text
    return "admitted"


def test_certificates_rotate_and_the_api_server_keeps_calling_the_webhook(
        api: KubeRest) -> None:
    # Right after an install the registration has no caBundle until the leader writes it
    # (docs/webhook.md, "Admission webhook"): the story starts once the door works.
    began = time.monotonic()
    while dry_run(api, 2) != "refused":
        assert time.monotonic() - began < 60, "the webhook never answered through its Service"
        time.sleep(0.5)
    pods = {p["metadata"]["name"]: p for p in api.get(PODS)["items"]}
    addresses = {name: p["status"]["podIP"] for name, p in pods.items()}
    first_ca = base64.b64decode(api.get(SECRET)["data"]["ca.crt"])
    wrong: list[str] = []
    cas: set[bytes] = {first_ca}
    issued: set[bytes] = set()
    served: dict[str, set[bytes]] = {name: set() for name in pods}
    widest_bundle = 0
    began = time.monotonic()
    while True:
        # The API server's view: every call judged by a replica through the Service.
        for replicas, expected in ((2, "refused"), (3, "admitted")):
            outcome = dry_run(api, replicas)
            if outcome != expected:
                wrong.append(f"{time.monotonic() - began:.1f} s: {replicas} replicas: "
                             f"{outcome[-400:]}")
        data = {k: base64.b64decode(v) for k, v in api.get(SECRET)["data"].items()}
        ca = data["ca.crt"]
        cas.add(ca)
        issued.add(data["tls.crt"])
        bundle = base64.b64decode(api.get(REGISTRATION)["webhooks"][0]["clientConfig"]
                                  ["caBundle"])
        widest_bundle = max(widest_bundle, len(certs(bundle)))
        # Each replica's view: the certificate its listener serves now.
        serving = {}
        for name, address in addresses.items():
            with contextlib.suppress(OSError):
                pem = ssl.get_server_certificate((address, WEBHOOK_PORT), timeout=2).encode()
                served[name].add(pem)
                serving[name] = x509.load_pem_x509_certificate(pem)
        # Done: a new CA alone in the Secret and the caBundle, served by every replica.
        rotated = ca != first_ca and not {"next-ca.crt", "previous-ca.crt"} & data.keys() \
            and certs(bundle) == certs(ca) and len(serving) == len(pods) \
            and all(issued_by(c, certs(ca)[0]) for c in serving.values())
        if rotated and len(issued) >= 3:  # the serving certificate reissued on its own too
            break
        assert time.monotonic() - began < 150, "the CA was not replaced within 150 s"
        time.sleep(0.5)
    print(f"\nCA replaced after {time.monotonic() - began:.1f} s; {len(issued)} serving "
          f"certificates and {len(cas)} CAs in the Secret, up to {widest_bundle} CAs in the "
          f"caBundle; served: {', '.join(f'{n}: {len(s)}' for n, s in served.items())}")

    assert wrong == [], wrong
    assert widest_bundle == 2, "old and new CA trusted side by side during the switch"
    assert all(len(s) >= 2 for s in served.values()), "each replica reloaded what it serves"
    # After the rotation, the door still works both ways.
    assert (dry_run(api, 2), dry_run(api, 3)) == ("refused", "admitted")
    # Reloaded, not restarted: the same pods, no container restart.
    now = {p["metadata"]["name"]: p for p in api.get(PODS)["items"]}
    assert {n: p["metadata"]["uid"] for n, p in now.items()} == {
        n: p["metadata"]["uid"] for n, p in pods.items()}
    for pod in now.values():
        [status] = pod["status"]["containerStatuses"]
        assert status["restartCount"] == 0, status
