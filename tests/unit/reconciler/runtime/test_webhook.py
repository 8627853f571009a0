"""Stories about the webhook's server and registration without a test world: an AdmissionReview
POSTed over HTTPS the way the API server sends it, a certificate swapped while serving, and the
ValidatingWebhookConfiguration the leader registers. The API server's side: the admission world
stories.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import ssl
import threading
import time
import warnings
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from cryptography import x509

from reconciler.kube import kinds as kk
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError
from reconciler.listeners import Limits, tls_context
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.runtime import webhook
from reconciler.runtime.webhook import (
    PATH,
    WebhookServer,
    configuration,
    decider,
    differs,
    live_bundle,
    policy_of,
)
from reconciler.settings import Settings
from renderer.settings import KubeVersion
from tests.support.fake_api import FakeApi
from tests.support.peeks import Peeks
from tests.support.threads import holding_up_exit, serve_forever_polls, threads_started
from tests.support.waiting import eventually
from tests.support.webhook_client import certificate, post, review


class EmptyView(Peeks):
    def get(self, kind: Any, namespace: str, name: str) -> None:
        return None

    def list(self, kind: Any, namespace: str, labels: Any = None) -> list[Any]:
        return []


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
    assert (config["apiVersion"], config["kind"]) == (
        "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration")
    assert config["metadata"]["name"] == "kaiwu-reconciler-kaiwu-system"
    assert config["metadata"]["labels"] == {"app.kubernetes.io/name": "kaiwu-reconciler",
                                            "app.kubernetes.io/part-of": "kaiwu-operator"}
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
    # The comparison the leader makes leaves the caBundle aside (compared on its own) and sees
    # every other change.
    assert not differs(configuration(settings, "kaiwu-system", b"OTHER"), config)
    ignore = configuration(settings.replace(webhook_failure_policy="Ignore"), "kaiwu-system",
                           b"PEM")
    assert differs(ignore, config)


NAMESPACE = "kaiwu-system"
REGISTRATION = "kaiwu-reconciler-kaiwu-system"
TLS_SECRET = "kaiwu-reconciler-webhook-tls"


class Api(FakeApi):
    """The fast tier's one API (tests/support/fake_api.py: resourceVersions, 409 on a stale
    PUT, copies on read), also noting the resourceVersion each PUT names: the certificate loop
    replaces over the version it read, never blindly."""

    def __init__(self, version: str = "v1.20.2") -> None:
        super().__init__(version=version)
        self.replaced_over: list[str | None] = []

    def replace(self, obj: Obj) -> Obj:
        self.replaced_over.append(obj["metadata"].get("resourceVersion"))
        return super().replace(obj)


def written(api: FakeApi) -> list[tuple[str, str]]:
    """Each write that reached the store: (verb, kind)."""
    return [(verb, kind) for verb, kind, _ in api.writes]


def registration(api: FakeApi) -> Obj:
    found = api.get(kk.VALIDATING_WEBHOOK, None, REGISTRATION)
    assert found is not None, "no registration"
    return found


def secret(api: FakeApi, name: str = TLS_SECRET) -> Obj:
    found = api.get(kk.SECRET, NAMESPACE, name)
    assert found is not None, f"no Secret {name}"
    return found


def issued_secret(api: FakeApi, ca: bytes, cert: bytes, key: bytes) -> None:
    """cert-manager's Secret "issued" (its CA, certificate and key), stored."""
    api.put({"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "issued", "namespace": NAMESPACE}, "data": {
                 "ca.crt": base64.b64encode(ca).decode(),
                 "tls.crt": base64.b64encode(cert).decode(),
                 "tls.key": base64.b64encode(key).decode()}})


def edit_registration(api: FakeApi, change: Any) -> None:
    """Someone (kubectl edit) changes the stored registration's first webhook."""
    api.edit(kk.VALIDATING_WEBHOOK, None, REGISTRATION, lambda o: change(o["webhooks"][0]))


def manager(kube: FakeApi, leader: bool, **settings: Any) -> Any:
    from reconciler.runtime.webhook import WebhookManager

    server = WebhookServer("127.0.0.1", 0, Metrics(), lambda body: body)
    values = {"webhook": True, "lease_namespace": "kaiwu-system", "webhook_hosts": "127.0.0.1",
              **settings}
    return WebhookManager(kube, Settings(**values), server,  # type: ignore[arg-type]
                          lambda: leader), server


def test_the_leader_makes_the_certificate_and_registers_it_a_standby_only_serves_it() -> None:
    kube = Api()
    standby, standby_server = manager(kube, leader=False)
    standby.tick()
    assert written(kube) == [] and standby_server.serving is None, "a standby never writes"
    leader, leader_server = manager(kube, leader=True)
    leader.tick()
    assert written(kube) == [("create", "Secret"), ("create", "ValidatingWebhookConfiguration")]
    leader.tick()
    assert len(kube.writes) == 2, "nothing due: no write"
    standby.tick()
    tls = secret(kube)
    assert standby_server.serving == leader_server.serving == (
        base64.b64decode(tls["data"]["tls.crt"]), base64.b64decode(tls["data"]["tls.key"]))
    registered = registration(kube)
    assert base64.b64decode(registered["webhooks"][0]["clientConfig"]["caBundle"]) == \
        base64.b64decode(tls["data"]["ca.crt"])
    assert registered["webhooks"][0]["clientConfig"]["service"]["namespace"] == "kaiwu-system"


def test_with_a_cert_manager_secret_nothing_is_written_but_the_registration() -> None:
    kube = Api()
    ca, cert, key = certificate(datetime.now(UTC))
    issued_secret(kube, ca, cert, key)
    leader, server = manager(kube, leader=True, webhook_cert_source="secret",
                             webhook_secret="issued")
    leader.tick()
    assert written(kube) == [("create", "ValidatingWebhookConfiguration")]
    assert server.serving == (cert, key)
    registered = registration(kube)
    assert base64.b64decode(registered["webhooks"][0]["clientConfig"]["caBundle"]) == ca


# ---- what the server answers besides reviews ---------------------------------------------------

def raw_post(port: int, ca_pem: bytes, path: str, body: bytes
             ) -> tuple[int, str, dict[str, Any]]:
    """(status, content type, answer) of a POST with any body."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, answer.getheader("Content-Type") or "", json.loads(answer.read())
    finally:
        connection.close()


def test_what_is_no_review_is_answered_with_an_error_and_counted() -> None:
    metrics = Metrics()

    def decide(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("explode"):
            raise RuntimeError("a bug")
        return {"response": {"allowed": True}}
    server = WebhookServer("127.0.0.1", 0, metrics, decide)
    server.start()
    try:
        ca, cert, key = certificate(datetime.now(UTC))
        server.load(cert, key)
        assert raw_post(server.port, ca, "/other", b"") == (
            404, "application/json", {"error": "not found: POST /validate"})
        assert raw_post(server.port, ca, PATH, b"") == (
            400, "application/json", {"error": "an AdmissionReview body is required"})
        assert raw_post(server.port, ca, PATH, b'{"explode": true}') == (
            500, "application/json", {"error": "the review could not be decided"})
        assert raw_post(server.port, ca, PATH + "?timeout=5s", b"{}")[0] == 200
        assert metrics.value("kaiwu_admission_reviews_total", {"result": "error"}) == 2
        assert metrics.value("kaiwu_admission_reviews_total", {"result": "allowed"}) == 1
        assert metrics.value("kaiwu_admission_duration_seconds_count") == 1
        not_after = x509.load_pem_x509_certificate(cert).not_valid_after_utc
        assert server.not_after == not_after
        assert metrics.value("kaiwu_webhook_certificate_expiry_seconds") == \
            not_after.timestamp()
    finally:
        server.stop()


def test_a_body_larger_than_any_review_is_refused_unread() -> None:
    metrics = Metrics()
    server = WebhookServer("127.0.0.1", 0, metrics, lambda body: body)
    server.start()
    try:
        ca, cert, key = certificate(datetime.now(UTC))
        server.load(cert, key)
        context = ssl.create_default_context(cadata=ca.decode())
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context,
                                                 timeout=10)
        try:
            connection.putrequest("POST", PATH)
            connection.putheader("Content-Length", str(4 * 1024 * 1024 + 1))
            connection.endheaders()
            answer = connection.getresponse()
            assert answer.status == 413
        finally:
            connection.close()
        assert metrics.value("kaiwu_admission_reviews_total", {"result": "error"}) == 1
    finally:
        server.stop()


class OneClusterView(EmptyView):
    def __init__(self, cluster: dict[str, Any] | None) -> None:
        self.cluster = cluster

    def get(self, kind: Any, namespace: str, name: str) -> Any:
        return self.cluster if (kind.kind, namespace, name) == ("KaiwuCluster", "db",
                                                                 "orders") else None


class ReadingKube:
    """The API for a scale review's stored cluster: answers, or fails, and counts reads."""

    def __init__(self, cluster: dict[str, Any] | None = None,
                 error: Exception | None = None) -> None:
        self.cluster, self.error, self.reads = cluster, error, 0
        self.read: list[tuple[str, str | None, str]] = []

    def get(self, kind: Any, namespace: str | None, name: str) -> Any:
        self.reads += 1
        self.read.append((kind.kind, namespace, name))
        if self.error is not None:
            raise self.error
        return self.cluster


def scale_review(replicas: int, namespace: str = "db") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-2", "operation": "UPDATE", "subResource": "scale", "namespace": namespace,
        "name": "orders", "object": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                                     "spec": {"replicas": replicas}}}}


def stored_cluster() -> dict[str, Any]:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": "orders", "namespace": "db", "uid": "u"},
            "spec": {"replicas": 3}}


def test_a_scale_is_judged_from_the_cache_or_else_from_the_api() -> None:
    kube = ReadingKube()
    decide = decider(OneClusterView(stored_cluster()), kube, Settings())  # type: ignore[arg-type]
    assert decide(scale_review(2))["response"]["allowed"] is False
    assert kube.reads == 0, "the cache held it"
    kube = ReadingKube(stored_cluster())
    decide = decider(OneClusterView(None), kube, Settings())  # type: ignore[arg-type]
    assert decide(scale_review(2))["response"]["allowed"] is False
    assert kube.read == [("KaiwuCluster", "db", "orders")]


def test_a_scale_whose_cluster_cannot_be_read_passes_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    for error in (ApiError(403, "Forbidden", "rbac"), OSError("connection refused")):
        decide = decider(OneClusterView(None), cast(Any, ReadingKube(error=error)), Settings())
        with caplog.at_level("WARNING", logger="reconciler.runtime.webhook"):
            answer = decide(scale_review(2))["response"]
        assert caplog.records[-1].getMessage() == \
            f"webhook could not read KaiwuCluster db/orders: {error}"
        assert answer["allowed"] is True
        assert answer["warnings"] == ["KaiwuCluster db/orders could not be read: the "
                                      "reconciler checks this scale instead"]


def test_a_namespaced_install_judges_only_its_own_namespace() -> None:
    decide = decider(OneClusterView(stored_cluster()), cast(Any, ReadingKube()),
                     Settings(watch_namespace="db"))
    assert decide(scale_review(2))["response"]["allowed"] is False
    assert decide(scale_review(2, namespace="other"))["response"]["allowed"] is True
    # Even where the API would hold a cluster of that name: another install's business.
    kube = ReadingKube(stored_cluster())
    decide = decider(OneClusterView(None), cast(Any, kube), Settings(watch_namespace="db"))
    assert decide(scale_review(2, namespace="other"))["response"]["allowed"] is True
    assert kube.reads == 0


def test_a_change_is_judged_against_what_this_replicas_caches_say_was_applied() -> None:
    from reconciler.controller.admission import facts_annotation
    from renderer.render import check_live
    from tests.support.admission import View, accepted_statefulset, cluster, pod
    upgrading = cluster(version="3.2.2")
    sts = accepted_statefulset(facts_annotation(check_live(upgrading)["spec"]))
    # One pod moved to 3.2.2 (and crashes there): setting the version back is allowed.
    view = View(sts, pod("orders-0", "3.2.1"), pod("orders-1", "3.2.1"), pod("orders-2", "3.2.2"))
    decide = decider(cast(Any, view), cast(Any, ReadingKube()), Settings())
    answer = decide({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "request": {"uid": "u-3", "operation": "UPDATE", "namespace": "db",
                                 "name": "orders", "object": cluster(version="3.2.1"),
                                 "oldObject": upgrading}})
    assert answer["response"]["allowed"] is True


def test_another_shards_cluster_is_judged_against_what_the_api_says_was_applied() -> None:
    """The unnamed shard's webhook judges every shard's clusters, but its caches hold only its
    own clusters' objects (reconciler.kube.selection): for another's, the StatefulSet and pods
    are read from the API server, so the same spec gets the same verdict."""
    from reconciler.controller.admission import facts_annotation
    from renderer.render import check_live
    from tests.support.admission import accepted_statefulset, cluster, pod
    from tests.support.fake_api import FakeApi
    upgrading = cluster(version="3.2.2")
    api = FakeApi()
    for obj in (accepted_statefulset(facts_annotation(check_live(upgrading)["spec"])),
                pod("orders-0", "3.2.1"), pod("orders-1", "3.2.1"), pod("orders-2", "3.2.2")):
        api.create(obj)
    setting_back = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {"uid": "u-4", "operation": "UPDATE", "namespace": "db",
                                "name": "orders", "object": cluster(version="3.2.1"),
                                "oldObject": upgrading}}
    another_shards = decider(EmptyView(), cast(Any, api), Settings(),
                             holds=lambda namespace, name: False)
    assert another_shards(setting_back)["response"]["allowed"] is True, \
        "one pod moved to 3.2.2 (and crashes there): setting the version back is allowed"
    # Judged from empty caches instead, the same change would be a downgrade.
    from_empty_caches = decider(EmptyView(), cast(Any, api), Settings())
    assert from_empty_caches(setting_back)["response"]["allowed"] is False


def test_a_decider_is_ready_to_judge_before_the_first_review_comes() -> None:
    from renderer import schema_explain
    schema_explain._validator.cache_clear()
    decider(EmptyView(), cast(Any, ReadingKube()), Settings())
    assert schema_explain._validator.cache_info().currsize == 1, "the schema validator is built"


def test_the_certificate_covers_the_service_in_every_form_and_the_extra_hosts() -> None:
    policy = policy_of(Settings(webhook_service="hook", webhook_hosts=" a.example, ,10.0.0.1,"
                                "hook"), "kaiwu-system")
    assert policy.hosts == ("hook.kaiwu-system.svc", "hook.kaiwu-system.svc.cluster.local",
                            "hook.kaiwu-system", "hook", "a.example", "10.0.0.1")
    assert policy.common_name == "hook"
    long = policy_of(Settings(webhook_service="h" * 70), "ns")
    assert long.common_name == "h" * 64 and long.hosts[-1] == "h" * 70
    settings = Settings(webhook_ca_validity_s=3000.0, webhook_cert_validity_s=900.0,
                        webhook_ca_overlap_s=120.0, webhook_reload_s=30.0)
    timed = policy_of(settings, "ns")
    assert (timed.ca_validity, timed.cert_validity, timed.overlap) == (
        timedelta(seconds=3000), timedelta(seconds=900), timedelta(seconds=120))


def test_a_webhook_outside_the_cluster_is_registered_by_its_url() -> None:
    settings = Settings(webhook=True, webhook_url="https://hook.example:8443/",
                        lease_namespace="kaiwu-system")
    [webhook] = configuration(settings, "kaiwu-system", b"PEM")["webhooks"]
    assert webhook["clientConfig"] == {"url": "https://hook.example:8443/validate",
                                       "caBundle": base64.b64encode(b"PEM").decode()}
    assert (webhook["name"], webhook["matchPolicy"]) == ("kaiwuclusters.kaiwu.inspur.com",
                                                         "Equivalent")
    ending_in_x = settings.replace(webhook_url="https://hook.example/kaiwuX//")
    [webhook] = configuration(ending_in_x, "kaiwu-system", b"PEM")["webhooks"]
    assert webhook["clientConfig"]["url"] == "https://hook.example/kaiwuX/validate", \
        "only the trailing slashes go"


def test_the_bundle_the_api_server_trusts_is_read_from_our_webhook_only() -> None:
    settings = Settings(webhook=True, lease_namespace="kaiwu-system")
    config = configuration(settings, "kaiwu-system", b"PEM")
    assert live_bundle(config) == b"PEM"
    assert live_bundle(None) == b""
    other = {"webhooks": [{**config["webhooks"][0], "name": "other.example.com"}]}
    assert live_bundle(other) == b""
    broken = {"webhooks": [{**config["webhooks"][0], "clientConfig": {"caBundle": "%%%"}}]}
    assert live_bundle(broken) == b""
    unpadded = {"webhooks": [{**config["webhooks"][0], "clientConfig": {"caBundle": "QQQ"}}]}
    assert live_bundle(unpadded) == b"", "not base64: nothing is trusted"
    two = {"webhooks": [other["webhooks"][0], config["webhooks"][0]]}
    assert live_bundle(two) == b"PEM"


def test_a_changed_setting_or_a_lost_registration_is_registered_again() -> None:
    kube = Api()
    leader, _ = manager(kube, leader=True)
    leader.tick()
    assert written(kube)[-1] == ("create", "ValidatingWebhookConfiguration")
    # Someone edits the failure policy by hand.
    edit_registration(kube, lambda hook: hook.update(failurePolicy="Ignore"))
    leader.tick()
    assert written(kube)[-1] == ("replace", "ValidatingWebhookConfiguration")
    assert registration(kube)["webhooks"][0]["failurePolicy"] == "Fail"
    assert len(kube.writes) == 3
    # Fields the API server adds are not an edit.
    edit_registration(kube, lambda hook: (hook.update(objectSelector={}), hook["clientConfig"][
        "service"].update(extra="default")))
    leader.tick()
    assert len(kube.writes) == 3
    # Someone trusts another CA: the bundle no longer matches.
    edit_registration(kube, lambda hook: hook["clientConfig"].update(
        caBundle=base64.b64encode(b"other").decode()))
    read = registration(kube)["metadata"]["resourceVersion"]
    leader.tick()
    assert len(kube.writes) == 4
    assert kube.replaced_over[-1] == read, "over the version read"
    kube.delete(kk.VALIDATING_WEBHOOK, None, REGISTRATION)
    leader.tick()
    assert written(kube)[-1] == ("create", "ValidatingWebhookConfiguration")
    assert len(kube.writes) == 6 and registration(kube)


def test_the_secret_is_replaced_whole_over_the_version_read() -> None:
    kube = Api()
    leader, server = manager(kube, leader=True)
    leader.tick()
    tls = secret(kube)
    assert (tls["apiVersion"], tls["kind"], tls["type"]) == ("v1", "Secret", "kubernetes.io/tls")
    assert tls["metadata"]["labels"] == {"app.kubernetes.io/name": "kaiwu-reconciler",
                                         "app.kubernetes.io/part-of": "kaiwu-operator"}
    assert tls["metadata"]["namespace"] == "kaiwu-system"
    # The CA is unreadable now: a fresh one replaces it, over the version read.
    damaged = kube.edit(kk.SECRET, NAMESPACE, TLS_SECRET, lambda s: s["data"].update({
        "ca.crt": base64.b64encode(b"garbage").decode()}))
    before = server.serving
    leader.tick()
    assert written(kube)[-2:] == [("replace", "Secret"),
                                  ("replace", "ValidatingWebhookConfiguration")]
    assert kube.replaced_over[:1] == [damaged["metadata"]["resourceVersion"]]
    assert server.serving != before, "the new certificate is served"


def test_a_cert_manager_secret_without_its_ca_yet_is_a_problem_said_in_readyz() -> None:
    kube = Api()
    leader, server = manager(kube, leader=True, webhook_cert_source="secret",
                             webhook_secret="issued")
    with pytest.raises(OSError, match="Secret kaiwu-system/issued has no ca.crt yet "
                       r"\(cert-manager issues it\)"):
        leader.tick()
    assert written(kube) == [] and server.serving is None


def test_the_certificate_loop_says_what_went_wrong_and_keeps_going(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="reconciler.runtime.webhook")
    kube = Api()
    leader, server = manager(kube, leader=True, webhook_cert_source="secret",
                             webhook_secret="issued", webhook_reload_s=0.05,
                             webhook_ca_overlap_s=0.1)
    leader.start()
    try:
        deadline = time.monotonic() + 5
        while not leader.problem and time.monotonic() < deadline:
            time.sleep(0.02)
        assert leader.problem == ("webhook certificate: Secret kaiwu-system/issued has no "
                                  "ca.crt yet (cert-manager issues it)")
        assert leader.alive
        ca, cert, key = certificate(datetime.now(UTC))
        issued_secret(kube, ca, cert, key)
        leader.wake()
        while leader.problem and time.monotonic() < deadline:
            time.sleep(0.02)
        assert leader.problem == "" and server.serving == (cert, key)
    finally:
        leader.stop()
    assert leader.alive, "a stopped loop is no failure"
    assert ("webhook certificate loop: Secret kaiwu-system/issued has no ca.crt yet "
            "(cert-manager issues it)") in caplog.messages


def test_a_namespaced_install_registers_for_its_namespace_on_a_server_that_can_say_so(
        caplog: pytest.LogCaptureFixture) -> None:
    kube = Api(version="v1.25.3")
    leader, _ = manager(kube, leader=True, watch_namespace="team-a")
    with caplog.at_level("INFO", logger="reconciler.runtime.webhook"):
        leader.tick()
    registered = registration(kube)
    assert {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]} in \
        registered["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    [logged] = [r for r in caplog.records if r.getMessage() == "webhook registered"]
    assert (logged.configuration, logged.cas) == (  # type: ignore[attr-defined]
        "kaiwu-reconciler-kaiwu-system", 1)


# ---- the server's threads, and clients that misbehave ---------------------------------------

def serving(decide: Any = None) -> tuple[WebhookServer, bytes, Metrics]:
    """A started server with a certificate; the CA's PEM."""
    metrics = Metrics()
    server = WebhookServer("127.0.0.1", 0, metrics, decide or (lambda body: {
        "response": {"allowed": True}}))
    ca, cert, key = certificate(datetime.now(UTC))
    server.load(cert, key)
    server.start()
    return server, ca, metrics


def test_the_server_runs_in_one_thread_named_webhook_that_never_holds_up_exit() -> None:
    server = WebhookServer("127.0.0.1", 0, Metrics(), lambda body: body)
    with threads_started() as started:
        server.start()
    try:
        assert [thread.name for thread in started] == ["webhook"]
        assert holding_up_exit(started) == []
    finally:
        server.stop()


def test_the_certificate_loop_runs_in_a_thread_named_webhook_certs_that_never_holds_up_exit(
        ) -> None:
    leader, _ = manager(Api(), leader=False, webhook_reload_s=30.0)
    with threads_started() as started:
        leader.start()
    try:
        assert [thread.name for thread in started] == ["webhook-certs"]
        assert holding_up_exit(started) == []
    finally:
        leader.stop()


def test_a_client_that_stalls_its_handshake_holds_a_thread_only_so_long(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook, "LIMITS", Limits(request_deadline_s=0.2))
    server, ca, _ = serving()
    try:
        with threads_started() as handlers:
            stalled = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            post(server.port, ca, review(3))  # answered meanwhile
        try:
            assert handlers, "the stalled connection has its thread"
            for thread in handlers:
                thread.join(5)  # the stalled client stays until the end of the test
                assert not thread.is_alive(), "given up after the request deadline"
            assert holding_up_exit(handlers) == []
        finally:
            stalled.close()
    finally:
        server.stop()


def test_a_client_that_stalls_does_not_hold_up_the_servers_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A request deadline far past the wait below: a stop that waited for the client would wait
    # for it.
    monkeypatch.setattr(webhook, "LIMITS", replace(webhook.LIMITS, request_deadline_s=60.0))
    server, _, _ = serving()
    before = set(threading.enumerate())
    stalled = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    handlers: list[threading.Thread] = []
    deadline = time.monotonic() + 5
    while not handlers and time.monotonic() < deadline:  # the server took the connection
        handlers = [thread for thread in threading.enumerate() if thread not in before]
        time.sleep(0.01)
    try:
        assert holding_up_exit(handlers) == [], "its thread does not keep the process alive"
        stopper = threading.Thread(target=server.stop, daemon=True)
        stopper.start()
        stopper.join(5)
        assert not stopper.is_alive(), "stop() waited for a client that sends nothing"
    finally:
        stalled.close()


def test_an_answer_says_how_long_it_is_and_a_one_byte_body_is_read_like_any_other() -> None:
    server, ca, _ = serving(lambda body: {"response": {"allowed": body == 7}})
    try:
        context = ssl.create_default_context(cadata=ca.decode())
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context,
                                                 timeout=10)
        try:
            connection.request("POST", PATH, b"7", {"Content-Type": "application/json"})
            answer = connection.getresponse()
            body = answer.read()
            assert (answer.status, json.loads(body)) == (200, {"response": {"allowed": True}})
            assert answer.getheader("Content-Length") == str(len(body))
        finally:
            connection.close()
    finally:
        server.stop()


def test_a_review_that_cannot_be_decided_is_logged_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    def decide(body: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("a bug")
    server, ca, _ = serving(decide)
    try:
        with caplog.at_level(logging.ERROR, logger="reconciler.runtime.webhook"):
            assert raw_post(server.port, ca, PATH, b"{}")[0] == 500
    finally:
        server.stop()
    [failed] = [r for r in caplog.records if r.getMessage() == "admission review failed"]
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert str(failed.exc_info[1]) == "a bug"


def test_a_bug_in_the_certificate_loop_is_logged_said_in_readyz_and_the_loop_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    kube = Api()
    leader, server = manager(kube, leader=True, webhook_reload_s=0.05)
    ticks = 0
    real_tick = leader.tick

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 1:
            raise KeyError("caBundle")
        real_tick()
    leader.tick = tick
    with caplog.at_level(logging.WARNING, logger="reconciler.runtime.webhook"):
        leader.start()
        try:
            deadline = time.monotonic() + 5
            while not leader.problem and time.monotonic() < deadline:
                time.sleep(0.01)
            assert leader.problem == "webhook certificate: 'caBundle'"
            # The next tick serves the certificate, registers, and clears the problem.
            while (server.serving is None or leader.problem) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.serving is not None and leader.problem == ""
        finally:
            leader.stop()
    [failed] = [r for r in caplog.records if r.getMessage() == "webhook certificate loop failed"]
    assert failed.levelno == logging.ERROR and failed.exc_info is not None


def test_a_replica_stops_its_webhook_server_within_a_tenth_of_a_second() -> None:
    # shutdown() returns at the serve loop's next poll: every 0.1 s, not the default 0.5 s.
    with serve_forever_polls() as polls:
        server = WebhookServer("127.0.0.1", 0, Metrics(), lambda body: body)
        server.start()
        eventually(lambda: polls, 5, "the server's loop to start")
        server.stop()
    assert polls == [0.1]


def test_the_path_ends_at_the_first_question_mark_and_a_request_without_length_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    server, ca, metrics = serving()
    try:
        assert raw_post(server.port, ca, PATH + "?timeout=5s?x", b"{}")[0] == 200
        context = ssl.create_default_context(cadata=ca.decode())
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context,
                                                 timeout=5)
        try:
            connection.putrequest("POST", PATH)  # no Content-Length, no body
            connection.endheaders()
            answer = connection.getresponse()
            assert answer.status == 411 and b"a Content-Length is required" in answer.read()
        finally:
            connection.close()
        assert metrics.value("kaiwu_admission_duration_seconds_count") == 1
        assert 0 <= metrics.value("kaiwu_admission_duration_seconds_sum") < 5
    finally:
        server.stop()


def test_a_body_as_large_as_allowed_is_read_and_decided() -> None:
    server, ca, _ = serving(lambda body: {"response": {"allowed": len(body["pad"]) > 0}})
    try:
        head = b'{"pad": "'
        cap = webhook.LIMITS.max_body_bytes
        body = head + b"x" * (cap - len(head) - 2) + b'"}'
        assert len(body) == cap
        assert raw_post(server.port, ca, PATH, body)[::2] == (200, {"response": {
            "allowed": True}})
    finally:
        server.stop()


def test_each_request_is_logged_at_debug_level_and_a_failed_handshake_too(
        caplog: pytest.LogCaptureFixture) -> None:
    server, ca, _ = serving()
    try:
        # The handshake is the TLS listener's (reconciler.listeners), named for the webhook.
        with caplog.at_level(logging.DEBUG, logger="reconciler.runtime.webhook"), \
                caplog.at_level(logging.DEBUG, logger="reconciler.listeners"):
            post(server.port, ca, review(3))
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
                plain.sendall(b"POST /validate HTTP/1.1\r\n\r\n")  # no TLS
            deadline = time.monotonic() + 5
            while not any(m.startswith("webhook: TLS handshake failed: ")
                          for m in caplog.messages) and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        server.stop()
    webhook_lines = [r for r in caplog.records
                     if r.name in ("reconciler.runtime.webhook", "reconciler.listeners")]
    assert all(r.levelno == logging.DEBUG for r in webhook_lines)
    messages = [r.getMessage() for r in webhook_lines]
    assert 'webhook "POST /validate HTTP/1.1" 200 -' in messages
    [failed] = [m for m in messages if m.startswith("webhook: TLS handshake failed: ")]
    assert "SSL" in failed or "ssl" in failed, failed


def test_a_handler_that_breaks_is_logged_with_the_client_and_the_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    server, ca, _ = serving(lambda body: {})  # an answer without a response: a bug
    try:
        with caplog.at_level(logging.WARNING, logger="reconciler.listeners"), \
                pytest.raises(http.client.HTTPException):
            post(server.port, ca, review(3))
    finally:
        server.stop()
    [failed] = [r for r in caplog.records if r.getMessage().startswith("webhook: request from")]
    assert failed.levelno == logging.WARNING
    assert failed.exc_info and failed.exc_info[0] is KeyError, "with its traceback"
    assert failed.getMessage().startswith("webhook: request from ('127.0.0.1', ")
    assert failed.getMessage().endswith(") failed")


def test_before_it_has_a_certificate_the_server_closes_connections_quietly(
        caplog: pytest.LogCaptureFixture) -> None:
    server = WebhookServer("127.0.0.1", 0, Metrics(), lambda body: body)
    server.start()
    try:
        with caplog.at_level(logging.WARNING, logger="reconciler.runtime.webhook"), \
                socket.create_connection(("127.0.0.1", server.port), timeout=5) as early:
            early.sendall(b"\x16\x03\x01")
            assert early.recv(100) == b"", "closed: the API server sees a refusal"
    finally:
        server.stop()
    assert caplog.records == []


def test_a_certificate_loop_not_started_yet_is_alive_and_has_no_problem() -> None:
    leader, _ = manager(Api(), leader=True)
    assert leader.alive and leader.problem == ""


def test_the_leaders_certificate_names_the_service_in_the_install_namespace() -> None:
    kube = Api()
    leader, server = manager(kube, leader=True)
    leader.tick()
    assert server.serving is not None
    sans = x509.load_pem_x509_certificate(server.serving[0]).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "kaiwu-reconciler-webhook.kaiwu-system.svc" in sans


def test_the_leader_rotates_the_ca_once_the_api_server_trusts_the_next_one(
        caplog: pytest.LogCaptureFixture) -> None:
    from reconciler.runtime.webhook import WebhookManager
    from reconciler.runtime.webhook_certs import CA_CRT, NEXT_CRT, NEXT_SINCE
    kube = Api()
    now = [datetime(2030, 1, 1, tzinfo=UTC)]
    server = WebhookServer("127.0.0.1", 0, Metrics(), lambda body: body)
    leader = WebhookManager(cast(Any, kube), Settings(
        webhook=True, lease_namespace="kaiwu-system", webhook_ca_validity_s=600.0,
        webhook_cert_validity_s=200.0, webhook_ca_overlap_s=40.0, webhook_reload_s=10.0),
        server, lambda: True,
        clock=lambda: now[0])
    secret_name = "kaiwu-reconciler-webhook-tls"
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.webhook"):
        leader.tick()
        now[0] += timedelta(seconds=450)  # a third of the CA's life left
        leader.tick()
        rotating = secret(kube, secret_name)
        assert rotating["metadata"]["annotations"] == {NEXT_SINCE: now[0].isoformat()}
        next_ca = rotating["data"][NEXT_CRT]
        now[0] += timedelta(seconds=50)  # past the overlap; the registration trusts it
        leader.tick()
    assert secret(kube, secret_name)["data"][CA_CRT] == next_ca
    reasons = [m for m in caplog.messages if m.startswith("webhook certificate: ")]
    assert reasons == [
        "webhook certificate: created a CA and serving certificate",
        "webhook certificate: the CA expires soon: made the next CA (trusted before it is used)",
        "webhook certificate: the next CA took over and issued a new serving certificate"]


def test_a_served_certificate_is_kept_when_its_secret_goes_and_each_load_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    kube = Api()
    leader, server = manager(kube, leader=True)
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.webhook"):
        leader.tick()
    served = server.serving
    assert served is not None
    [loaded] = [r for r in caplog.records if r.getMessage() == "webhook serving certificate loaded"]
    assert getattr(loaded, "not_after", None) == str(server.not_after)
    standby, standby_server = manager(kube, leader=False)
    standby.tick()
    kube.delete(kk.SECRET, NAMESPACE, TLS_SECRET)  # deleted by hand
    standby.tick()
    assert standby_server.serving == served, "the standby serves what it loaded"


def test_the_loop_looks_quickly_until_it_serves_then_every_reload_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook, "UNSERVED_RELOAD_S", 0.02)
    kube = Api()
    standby, server = manager(kube, leader=False, webhook_reload_s=30.0)
    looks = 0
    real_tick = standby.tick

    def tick() -> None:
        nonlocal looks
        looks += 1
        real_tick()
    standby.tick = tick
    standby.start()
    try:
        deadline = time.monotonic() + 5
        while looks < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert looks >= 3, "nothing served yet: it looks again soon"
        leader, _ = manager(kube, leader=True)
        leader.tick()  # the leader's Secret appears
        while server.serving is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.serving is not None
        after = looks
        time.sleep(0.2)
        assert looks == after, "serving: the next look is a reload period away"
    finally:
        standby.stop()


def test_the_servers_tls_uses_no_deprecated_protocol_and_at_least_tls_1_2() -> None:
    _, cert, key = certificate(datetime.now(UTC))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        context = tls_context(cert, key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_the_api_server_is_answered_at_once_while_slow_clients_flood_the_port() -> None:
    """Two hundred connections that never shake hands (three times the connection cap): each
    new one closes the one waiting longest, so the API server's review still gets a thread
    and its answer well within its 10 s time-out; the flood is counted."""
    server, ca, metrics = serving()
    flood = []
    try:
        for _ in range(200):
            flood.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        started = time.monotonic()
        assert post(server.port, ca, review(3))[0] == 200
        assert time.monotonic() - started < 3.0, "well within the API server's 10 s time-out"
        deadline = time.monotonic() + 5
        while metrics.value("kaiwu_http_connections_dropped_total",
                            {"listener": "webhook", "reason": "evicted"}) < 137 and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        assert metrics.value("kaiwu_http_connections_dropped_total",
                             {"listener": "webhook", "reason": "evicted"}) >= 137
    finally:
        for client in flood:
            client.close()
        server.stop()


def test_the_bundles_registration_is_taken_over_whole_and_without_it_the_leader_says_so(
        ) -> None:
    """The bundle ships the registration (no caBundle, failure policy or time-out) because
    the reconciler may not create one: the leader replaces it whole with its CA and settings;
    where it is missing and creating is forbidden, the problem names the fix."""
    from reconciler.kube.client import ApiError
    from reconciler.runtime.webhook import placeholder
    from renderer.settings import KubeVersion

    kube = Api()
    leader, _ = manager(kube, leader=True)
    shipped = placeholder(leader.settings, "kaiwu-system", KubeVersion(1, 20))
    assert "caBundle" not in shipped["webhooks"][0]["clientConfig"]
    assert "failurePolicy" not in shipped["webhooks"][0]  # the API server's default: Fail
    applied = kube.put(shipped)
    leader.tick()
    assert written(kube)[-1] == ("replace", "ValidatingWebhookConfiguration")
    assert kube.replaced_over[-1] == applied["metadata"]["resourceVersion"]
    taken = registration(kube)
    assert taken["webhooks"][0]["failurePolicy"] == "Fail"
    assert taken["webhooks"][0]["clientConfig"]["caBundle"]
    assert taken["metadata"]["labels"] == shipped["metadata"]["labels"]

    class NoCreate(Api):
        def create(self, obj: Obj) -> Obj:
            if obj["kind"] == "ValidatingWebhookConfiguration":
                raise ApiError(403, "Forbidden", "cannot create")
            return super().create(obj)
    bare = NoCreate()
    alone, _ = manager(bare, leader=True)
    with pytest.raises(OSError, match="ValidatingWebhookConfiguration "
                       "kaiwu-reconciler-kaiwu-system is missing: it comes with the install "
                       "bundle"):
        alone.tick()


@pytest.mark.parametrize("policy, timeout", [("Fail", 5), ("Ignore", 12)])
@pytest.mark.parametrize("watch", ["", "shop"])
def test_applying_the_bundle_again_never_conflicts_with_what_the_leader_registered(
        policy: str, timeout: int, watch: str) -> None:
    """`kubectl apply --server-side` of the bundle over a registration the leader took over is
    refused (409) if the bundle claims a field the leader set to another value, and a GitOps
    tool that forces it would undo the leader's write at every sync. So every value the
    bundle's copy holds is the leader's value, for any settings the Deployment may carry."""
    from reconciler.runtime.webhook import placeholder
    from tests.support.places import leaves

    settings = Settings(webhook_failure_policy=policy, webhook_timeout_s=timeout,
                        watch_namespace=watch)
    for version in (KubeVersion(1, 20), KubeVersion(1, 36)):
        shipped = leaves(placeholder(settings, "kaiwu-system", version))
        registered = leaves(configuration(settings, "kaiwu-system", b"CA", version))
        assert {path: registered.get(path) for path in shipped} == shipped
        assert registered["webhooks", 0, "failurePolicy"] == policy  # the leader's own


def test_the_leader_serves_its_certificate_before_the_registration_names_its_ca() -> None:
    """The API server calls the webhook as soon as the registration holds the CA; a leader
    that registered first and loaded its certificate after ended that first handshake (a
    refused write under failurePolicy Fail, seen on the test world)."""
    kube = Api()
    leader, server = manager(kube, leader=True)
    served_when_registered: list[bool] = []
    real_create = kube.create

    def create(obj: Obj) -> Obj:
        if obj["kind"] == "ValidatingWebhookConfiguration":
            served_when_registered.append(server.serving is not None)
        return real_create(obj)
    kube.create = create  # type: ignore[method-assign]
    leader.tick()
    assert served_when_registered == [True]


@pytest.mark.parametrize("bundle_for, server", [((1, 20), "v1.28.4"), ((1, 28), "v1.20.2"),
                                                ((1, 28), "v1.36.2")])
def test_the_leader_keeps_the_bundles_namespace_selector_whatever_the_server_says(
        bundle_for: tuple[int, int], server: str) -> None:
    """A namespaced install's bundle selects its namespace by name or not, for the Kubernetes
    it was made for; a leader deciding again from the server would make the two differ (the
    cluster upgraded since, or the bundle made for another release), and applying the bundle
    again would then conflict with the leader's write."""
    from reconciler.runtime.webhook import placeholder

    kube = Api(version=server)
    leader, _ = manager(kube, leader=True, watch_namespace="team-a")
    shipped = placeholder(leader.settings, "kaiwu-system", KubeVersion(*bundle_for))
    kube.put(shipped)
    leader.tick()
    taken = registration(kube)
    assert taken["webhooks"][0]["clientConfig"]["caBundle"]
    assert taken["webhooks"][0]["namespaceSelector"] == shipped["webhooks"][0][
        "namespaceSelector"]


def test_a_registration_refused_once_is_tried_again_within_a_second() -> None:
    """The leader serves its certificate before it registers: a refused registration must not
    wait out the 30 s reload as a served replica does, while every KaiwuCluster write is
    refused for want of the CA."""
    from reconciler.kube.client import ApiError

    class Flaky(Api):
        refusals = 1

        def create(self, obj: Obj) -> Obj:
            if obj["kind"] == "ValidatingWebhookConfiguration" and self.refusals:
                self.refusals -= 1
                raise ApiError(503, "ServiceUnavailable", "etcd leader changed")
            return super().create(obj)
    kube = Flaky()
    leader, server = manager(kube, leader=True, webhook_reload_s=30)
    leader.start()
    try:
        eventually(lambda: kube.get(kk.VALIDATING_WEBHOOK, None, REGISTRATION), 5,
                   "the registration, tried again")
        assert server.serving is not None
    finally:
        leader.stop()


def test_the_leaders_write_keeps_the_marks_a_gitops_tool_put_on_the_registration() -> None:
    """Argo CD or Flux applied the bundle and marked what it owns: the leader's replacement
    keeps those labels and annotations (its own labels win), or the tool would see its object
    changed and apply it again at every rotation."""
    from reconciler.runtime.webhook import placeholder

    kube = Api()
    leader, _ = manager(kube, leader=True)
    shipped = placeholder(leader.settings, "kaiwu-system", KubeVersion(1, 28))
    marked = {**shipped["metadata"],
              "labels": {**shipped["metadata"]["labels"], "kustomize.toolkit.fluxcd.io/name": "op",
                         "app.kubernetes.io/name": "renamed-by-hand"},
              "annotations": {"argocd.argoproj.io/tracking-id": "op:admissionregistration/x"}}
    kube.put({**shipped, "metadata": marked})
    leader.tick()
    taken = registration(kube)
    assert taken["metadata"]["annotations"] == {
        "argocd.argoproj.io/tracking-id": "op:admissionregistration/x"}
    assert taken["metadata"]["labels"] == {**shipped["metadata"]["labels"],
                                           "kustomize.toolkit.fluxcd.io/name": "op"}
    assert taken["webhooks"][0]["clientConfig"]["caBundle"]
