"""Stories about the webhook's server and registration without a test world: an AdmissionReview
POSTed over HTTPS the way the API server sends it, a certificate swapped while serving, and the
ValidatingWebhookConfiguration the leader registers. The API server's side: the admission world
stories.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509

from reconciler.kube.cache import CacheView
from reconciler.metrics import Metrics
from reconciler.runtime.webhook import PATH, WebhookServer, configuration, decider
from reconciler.runtime.webhook_certs import ServingPolicy, next_step, read_state
from reconciler.settings import Settings
from renderer.settings import KubeVersion

POLICY = ServingPolicy(common_name="kaiwu-reconciler-webhook", hosts=("127.0.0.1",),
                       ca_validity=timedelta(days=30), cert_validity=timedelta(days=10),
                       overlap=timedelta(minutes=5))


class EmptyView:
    def get(self, kind: Any, namespace: str, name: str) -> None:
        return None

    def peek(self, kind: Any, namespace: str, name: str) -> None:
        return None

    def list(self, kind: Any, namespace: str, labels: Any = None) -> list[Any]:
        return []


def certificate(now: datetime) -> tuple[bytes, bytes, bytes]:
    """(ca.crt, tls.crt, tls.key) as the leader's first step makes them."""
    step = next_step(read_state(None), b"", now, POLICY)
    assert step is not None
    state = step[0]
    assert state.ca is not None and state.leaf is not None
    return state.ca.cert_pem, state.leaf.cert_pem, state.leaf.key_pem


def post(port: int, ca_pem: bytes, body: dict[str, Any]) -> tuple[int, dict[str, Any], bytes]:
    """(status, answer, the certificate the server presented)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST", PATH, json.dumps(body),
                           {"Content-Type": "application/json"})
        assert isinstance(connection.sock, ssl.SSLSocket)
        peer = connection.sock.getpeercert(binary_form=True)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read()), peer or b""
    finally:
        connection.close()


def review(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "operation": "CREATE", "namespace": "db", "name": "orders",
        "object": {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                   "metadata": {"name": "orders", "namespace": "db"},
                   "spec": {"replicas": replicas}}}}


def test_a_review_is_answered_over_tls_and_a_new_certificate_is_served_without_a_restart(
        ) -> None:
    metrics = Metrics()
    view: CacheView = EmptyView()
    server = WebhookServer("127.0.0.1", 0, metrics,
                           decider(view, None, Settings()))  # type: ignore[arg-type]
    server.start()
    try:
        now = datetime.now(UTC)
        ca, cert, key = certificate(now)
        server.load(cert, key)
        status, answer, peer = post(server.port, ca, review(2))
        assert status == 200
        assert answer["response"] == {
            "uid": "u-1", "allowed": False, "status": {
                "code": 422, "reason": "Invalid", "message":
                "KaiwuCluster db/orders: spec.replicas: multi-replica needs at least 3 nodes, "
                "got 2 (set replicas to 3 or more, or use startMode single-replica)"}}
        assert post(server.port, ca, review(3))[1]["response"] == {"uid": "u-1", "allowed": True}
        assert x509.load_der_x509_certificate(peer) == x509.load_pem_x509_certificate(cert)

        other_ca, other_cert, other_key = certificate(now)
        server.load(other_cert, other_key)
        _, _, peer = post(server.port, other_ca, review(3))
        assert x509.load_der_x509_certificate(peer) == x509.load_pem_x509_certificate(
            other_cert), "the next handshake presents the new certificate"
        assert metrics.value("kaiwu_admission_reviews_total", {"result": "denied"}) == 1
        assert metrics.value("kaiwu_admission_reviews_total", {"result": "allowed"}) == 2
    finally:
        server.stop()


def test_the_registration_covers_clusters_and_their_scale_with_v1_reviews_and_an_escape_hatch(
        ) -> None:
    settings = Settings(webhook=True, lease_namespace="kaiwu-system")
    config = configuration(settings, "kaiwu-system", b"PEM")
    assert config["metadata"]["name"] == "kaiwu-reconciler-kaiwu-system"
    [webhook] = config["webhooks"]
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["rules"] == [{
        "apiGroups": ["kaiwu.inspur.com"], "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"], "resources": ["kaiwuclusters", "kaiwuclusters/scale"],
        "scope": "Namespaced"}]
    assert (webhook["failurePolicy"], webhook["timeoutSeconds"], webhook["sideEffects"]) == \
        ("Fail", 5, "None")
    assert webhook["clientConfig"] == {
        "service": {"namespace": "kaiwu-system", "name": "kaiwu-reconciler-webhook",
                    "path": "/validate", "port": 443},
        "caBundle": base64.b64encode(b"PEM").decode()}
    assert webhook["namespaceSelector"] == {"matchExpressions": [
        {"key": "kaiwu.inspur.com/admission", "operator": "NotIn", "values": ["skip"]}]}
    # A namespaced install narrows to its namespace where namespaces carry their name (1.21+).
    scoped = settings.replace(watch_namespace="team-a")
    on_120 = configuration(scoped, "kaiwu-system", b"PEM", KubeVersion(1, 20))
    on_121 = configuration(scoped, "kaiwu-system", b"PEM", KubeVersion(1, 21))
    assert len(on_120["webhooks"][0]["namespaceSelector"]["matchExpressions"]) == 1
    assert {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]} in \
        on_121["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    # The hash the leader compares ignores the caBundle (a rotation alone is no re-registration
    # of everything) but sees every other change.
    assert configuration(settings, "kaiwu-system", b"OTHER")["metadata"] == config["metadata"]
    ignore = configuration(settings.replace(webhook_failure_policy="Ignore"), "kaiwu-system",
                           b"PEM")
    assert ignore["metadata"]["annotations"] != config["metadata"]["annotations"]


class FakeKube:
    """The API for the certificate loop: Secrets and the registration, writes recorded."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []

    def get(self, kind: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind.kind, name))

    def _store(self, verb: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.writes.append((verb, obj["kind"]))
        stored: dict[str, Any] = json.loads(json.dumps(obj))
        stored["metadata"]["resourceVersion"] = str(len(self.writes))
        self.objects[(obj["kind"], obj["metadata"]["name"])] = stored
        return stored

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._store("create", obj)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._store("replace", obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._store("apply", obj)

    def server_version(self) -> str:
        return "v1.20.2"


def manager(kube: FakeKube, leader: bool, **settings: Any) -> Any:
    from reconciler.runtime.webhook import WebhookManager

    server = WebhookServer("127.0.0.1", 0, Metrics(), lambda body: body)
    values = {"webhook": True, "lease_namespace": "kaiwu-system", "webhook_hosts": "127.0.0.1",
              **settings}
    return WebhookManager(kube, Settings(**values), server,  # type: ignore[arg-type]
                          lambda: leader), server


def test_the_leader_makes_the_certificate_and_registers_it_a_standby_only_serves_it() -> None:
    kube = FakeKube()
    standby, standby_server = manager(kube, leader=False)
    standby.tick()
    assert kube.writes == [] and standby_server.serving is None, "a standby never writes"
    leader, leader_server = manager(kube, leader=True)
    leader.tick()
    assert kube.writes == [("create", "Secret"), ("apply", "ValidatingWebhookConfiguration")]
    leader.tick()
    assert len(kube.writes) == 2, "nothing due: no write"
    standby.tick()
    secret = kube.objects[("Secret", "kaiwu-reconciler-webhook-tls")]
    assert standby_server.serving == leader_server.serving == (
        base64.b64decode(secret["data"]["tls.crt"]), base64.b64decode(secret["data"]["tls.key"]))
    registered = kube.objects[("ValidatingWebhookConfiguration", "kaiwu-reconciler-kaiwu-system")]
    assert base64.b64decode(registered["webhooks"][0]["clientConfig"]["caBundle"]) == \
        base64.b64decode(secret["data"]["ca.crt"])


def test_with_a_cert_manager_secret_nothing_is_written_but_the_registration() -> None:
    kube = FakeKube()
    ca, cert, key = certificate(datetime.now(UTC))
    kube.objects[("Secret", "issued")] = {"metadata": {"name": "issued"}, "data": {
        "ca.crt": base64.b64encode(ca).decode(), "tls.crt": base64.b64encode(cert).decode(),
        "tls.key": base64.b64encode(key).decode()}}
    leader, server = manager(kube, leader=True, webhook_cert_source="secret",
                             webhook_secret="issued")
    leader.tick()
    assert kube.writes == [("apply", "ValidatingWebhookConfiguration")]
    assert server.serving == (cert, key)
    registered = kube.objects[("ValidatingWebhookConfiguration", "kaiwu-reconciler-kaiwu-system")]
    assert base64.b64decode(registered["webhooks"][0]["clientConfig"]["caBundle"]) == ca
