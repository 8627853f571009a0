"""Certificates of a secure cluster: what the reconciler issues, when it renews, what it refuses.

Stories: a new secure cluster gets a CA, a node certificate every pod name verifies against, and a
root client certificate; the next reconcile leaves them alone; as expiry approaches the leaves
are reissued by the same CA (so pods restarting one at a time still trust each other) and the pod
template hash changes; a lost CA is reported, never silently replaced; Secrets a user brings are
checked and every problem names the Secret, the key and the fix, without echoing secret data.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from reconciler.kaiwudb.certs import keys
from reconciler.kaiwudb.certs.authority import ca_common_name, new_ca
from reconciler.kaiwudb.certs.keys import (
    CertKey,
    CertSettings,
    _LoadedKeys,
    covers_host,
    issued_by,
    load_cert_key,
    san_covers,
)
from reconciler.kaiwudb.certs.layout import (
    certs_hash,
    client_secret,
    earliest_expiry,
    needs_renewal,
    node_secret,
)
from reconciler.kaiwudb.certs.leaves import (
    _leaf,
    issue_client,
    issue_node,
    issue_server,
    pod_dns_names,
)
from reconciler.kaiwudb.certs.rotation import CertsPlan, certs_action
from reconciler.kaiwudb.certs.user_secrets import CertProblem, format_problem, validate_user_secrets
from renderer.spec import Cluster
from tests.support.certs import make_cluster, stored

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
Obj = dict[str, Any]




def by_name(secrets: list[Obj]) -> dict[str, Obj]:
    return {s["metadata"]["name"]: s for s in secrets}




def pem(secret: Obj, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def cert_of(secret: Obj, key: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem(secret, key))


def fresh_cluster_secrets(cluster: Cluster, now: datetime = NOW) -> dict[str, Obj]:
    return stored(certs_action(cluster, {}, now))


def test_a_new_secure_cluster_gets_a_ca_a_node_and_a_root_client_secret() -> None:
    cluster = make_cluster()
    plan = certs_action(cluster, {}, NOW)

    assert [(w.verb, w.name, w.reason) for w in plan.writes] == [
        ("create", "orders-ca", "new cluster CA"),
        ("create", "orders-node-certs", "new certificate"),
        ("create", "orders-root-client-certs", "new certificate")]
    assert plan.summary() == ("create Secret orders-ca (new cluster CA); create Secret "
                              "orders-node-certs (new certificate); create Secret "
                              "orders-root-client-certs (new certificate)")
    assert not plan.problems and not plan.restart
    assert plan.certs_hash is not None
    secrets = by_name([w.secret for w in plan.writes])
    assert set(secrets["orders-ca"]["data"]) == {"ca.crt", "ca.key"}
    assert set(secrets["orders-node-certs"]["data"]) == {"ca.crt", "node.crt", "node.key"}
    assert set(secrets["orders-root-client-certs"]["data"]) == {
        "ca.crt", "client.root.crt", "client.root.key"}
    for secret in secrets.values():
        assert (secret["apiVersion"], secret["kind"]) == ("v1", "Secret")
        assert secret["metadata"]["namespace"] == "shop"
        assert secret["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "kaiwu-operator",
            "app.kubernetes.io/instance": "orders", "kaiwu.inspur.com/tls-certs": "true"}
        assert secret["type"] == "Opaque"
    # The CA key exists once, in the Secret no pod mounts.
    ca_key = secrets["orders-ca"]["data"]["ca.key"]
    assert all(ca_key not in s["data"].values() for n, s in secrets.items() if n != "orders-ca")
    assert plan.certs_hash == certs_hash(secrets["orders-node-certs"],
                                         secrets["orders-root-client-certs"])


def test_the_ca_is_a_ten_year_rsa_authority_named_after_the_cluster() -> None:
    secrets = fresh_cluster_secrets(make_cluster())
    ca = cert_of(secrets["orders-ca"], "ca.crt")

    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "KaiwuDB CA shop/orders")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    ca.verify_directly_issued_by(ca)
    assert ca.public_key().key_size == 2048  # type: ignore[union-attr]
    assert ca.not_valid_after_utc - NOW == timedelta(days=3650)
    assert ca.not_valid_before_utc < NOW
    # The key in the Secret is the CA's key, in the PKCS#1 form kwbase cert writes.
    key_pem = pem(secrets["orders-ca"], "ca.key")
    assert key_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert key.public_key() == ca.public_key()


def test_long_namespace_and_cluster_names_still_get_a_ca_within_the_cn_limit() -> None:
    long_ns, long_name = "n" * 63, "c" * 40
    cluster = make_cluster(name=long_name, namespace=long_ns)
    other = make_cluster(name=long_name[:-1] + "d", namespace=long_ns)

    ca = cert_of(fresh_cluster_secrets(cluster)[f"{long_name}-ca"], "ca.crt")

    cn = str(ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
    assert len(cn) == 64 and cn.startswith("KaiwuDB CA nnn")
    assert cn == ca_common_name(cluster) != ca_common_name(other)
    assert ca_common_name(make_cluster()) == "KaiwuDB CA shop/orders"


def test_every_pod_name_and_service_name_verifies_against_the_node_certificate() -> None:
    cluster = make_cluster(replicas=5)
    secrets = fresh_cluster_secrets(cluster)
    node_secret = secrets["orders-node-certs"]
    ca = cert_of(node_secret, "ca.crt")
    node = cert_of(node_secret, "node.crt")

    assert node.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "node"
    assert set(node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == {
        ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert node.not_valid_after_utc - NOW == timedelta(days=5 * 365)
    node.verify_directly_issued_by(ca)
    node_key = serialization.load_pem_private_key(pem(node_secret, "node.key"), password=None)
    assert node_key.public_key() == node.public_key()

    sans = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(sans.get_values_for_type(x509.DNSName))
    assert {"localhost", "orders", "orders.shop", "orders.shop.svc",
            "orders.shop.svc.cluster.local", "orders-public", "orders-public.shop",
            "orders-public.shop.svc", "orders-public.shop.svc.cluster.local",
            "*.orders.shop.svc.cluster.local", "*.orders.shop.svc", "*.orders"} <= dns
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]

    # A TLS client (cryptography's own path validation) accepts the node for every pod name,
    # including ordinals a later scale-out adds, and for the client Service.
    store = Store([ca])
    names = [f"orders-{i}.orders.shop.svc.cluster.local" for i in range(7)]
    names += ["orders-public.shop.svc", "orders-public", "localhost"]
    for name in names:
        verifier = PolicyBuilder().store(store).time(NOW).build_server_verifier(x509.DNSName(name))
        verifier.verify(node, [])
    # ... and refuses names of another cluster or namespace.
    for name in ["orders-0.orders.other.svc.cluster.local", "billing-0.billing.shop.svc"]:
        verifier = PolicyBuilder().store(store).time(NOW).build_server_verifier(x509.DNSName(name))
        with pytest.raises(VerificationError):
            verifier.verify(node, [])


def test_the_root_client_certificate_authenticates_as_root_only_as_a_client() -> None:
    secrets = fresh_cluster_secrets(make_cluster())
    client_secret = secrets["orders-root-client-certs"]
    ca = cert_of(client_secret, "ca.crt")
    root = cert_of(client_secret, "client.root.crt")

    assert root.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "root"
    assert list(root.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    root.verify_directly_issued_by(ca)
    assert pem(client_secret, "ca.crt") == pem(secrets["orders-node-certs"], "ca.crt")
    key = serialization.load_pem_private_key(pem(client_secret, "client.root.key"),
                                             password=None)
    assert key.public_key() == root.public_key()
    # cryptography's client verifier follows the web PKI, which wants a SAN on client
    # certificates; kwbase (Go crypto/x509) does not, and `kwbase cert create-client` adds none.
    client_policy = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
    verified = (PolicyBuilder().store(Store([ca])).time(NOW)
                .extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(),
                                    ee_policy=client_policy)
                .build_client_verifier().verify(root, []))
    assert verified.chain[-1] == ca
    server = PolicyBuilder().store(Store([ca])).time(NOW).build_server_verifier(
        x509.DNSName("localhost"))
    with pytest.raises(VerificationError):
        server.verify(root, [])


def test_a_second_reconcile_with_the_same_secrets_writes_nothing() -> None:
    cluster = make_cluster()
    first = certs_action(cluster, {}, NOW)
    plan = certs_action(cluster, stored(first), NOW + timedelta(days=400))

    assert plan.writes == ()
    assert plan.certs_hash == first.certs_hash
    assert not plan.restart and not plan.problems
    assert plan.summary() == "certificates up to date"



def test_a_key_is_checked_once_however_often_the_certificates_are_looked_at(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Loading an RSA key validates it (~40 ms of CPU): a pass of a TLS cluster reads four.
    # Keys are remembered by their content, so only a changed Secret is loaded again.
    monkeypatch.setattr(keys, "LOADED_KEYS", _LoadedKeys(size=3))
    loads: list[bytes] = []
    real_load = serialization.load_pem_private_key

    def load(data: bytes, password: bytes | None) -> Any:
        loads.append(data)
        return real_load(data, password)
    monkeypatch.setattr(serialization, "load_pem_private_key", load)
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    certs_action(cluster, live, NOW)
    assert loads == [], "the keys it made itself are known"
    monkeypatch.setattr(keys, "LOADED_KEYS", _LoadedKeys(size=4))  # a restart
    certs_action(cluster, live, NOW)
    assert len(loads) == 3, "CA, node and root keys, each once"
    certs_action(cluster, live, NOW + timedelta(days=1))
    assert len(loads) == 3, "the same keys: none loaded again"
    # A tampered key is new content: loaded, judged, and the rest still remembered.
    loads.clear()
    tampered = copy.deepcopy(live)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption())
    tampered["orders-node-certs"]["data"]["node.key"] = base64.b64encode(stranger).decode()
    plan = certs_action(cluster, tampered, NOW)
    assert [(w.name, w.reason) for w in plan.writes] == [
        ("orders-node-certs", "node.key does not belong to node.crt")]
    assert loads == [stranger]
    # Bounded (four here): the first node key, used longest ago, made room for the new one.
    loads.clear()
    certs_action(cluster, live, NOW)
    assert loads == [pem(live["orders-node-certs"], "node.key")]


def test_a_key_that_does_not_load_is_remembered_as_unusable() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    live["orders-node-certs"]["data"]["node.key"] = base64.b64encode(b"not a key").decode()
    for _ in range(2):
        plan = certs_action(cluster, live, NOW)
        assert [(w.name, w.reason) for w in plan.writes] == [
            ("orders-node-certs", "node.key: not an unencrypted PEM private key")]

def test_an_insecure_cluster_has_no_certificate_work() -> None:
    plan = certs_action(make_cluster(enabled=False), {}, NOW)
    assert plan == CertsPlan()
    assert plan.certs_hash is None


def test_renewal_is_due_exactly_when_expiry_enters_the_window() -> None:
    node_secret = fresh_cluster_secrets(make_cluster())["orders-node-certs"]
    expiry = cert_of(node_secret, "node.crt").not_valid_after_utc
    window = timedelta(days=30)

    assert earliest_expiry(node_secret) == expiry
    assert not needs_renewal(node_secret, expiry - window - timedelta(seconds=1))
    assert needs_renewal(node_secret, expiry - window)
    assert needs_renewal(node_secret, expiry + timedelta(days=1))
    assert not needs_renewal(node_secret, expiry - timedelta(days=8), timedelta(days=7))
    assert needs_renewal(None, NOW)
    with pytest.raises(ValueError, match="timezone-aware"):
        needs_renewal(node_secret, datetime(2026, 3, 1))
    broken = copy.deepcopy(node_secret)
    broken["data"]["node.crt"] = base64.b64encode(b"not a certificate").decode()
    assert needs_renewal(broken, NOW)


def test_leaves_near_expiry_are_reissued_by_the_same_ca_and_the_pods_roll() -> None:
    cluster = make_cluster()
    first = certs_action(cluster, {}, NOW)
    live = stored(first, version="41")
    old_node = cert_of(live["orders-node-certs"], "node.crt")
    later = old_node.not_valid_after_utc - timedelta(days=30)

    plan = certs_action(cluster, live, later)

    assert [(w.verb, w.name) for w in plan.writes] == [
        ("update", "orders-node-certs"), ("update", "orders-root-client-certs")]
    assert all("renewal window" in w.reason for w in plan.writes)
    # Guarded by the live resourceVersion: a stale cache cannot overwrite a newer Secret.
    assert all(w.secret["metadata"]["resourceVersion"] == "41" for w in plan.writes)
    assert plan.restart
    assert plan.certs_hash not in (None, first.certs_hash)
    new_node = cert_of(plan.writes[0].secret, "node.crt")
    assert new_node.not_valid_after_utc - later == timedelta(days=5 * 365)
    assert new_node.public_key() != old_node.public_key()
    # Pods not yet restarted still trust the new certificate with the ca.crt they mounted.
    new_node.verify_directly_issued_by(cert_of(live["orders-node-certs"], "ca.crt"))
    new_root = cert_of(plan.writes[1].secret, "client.root.crt")
    new_root.verify_directly_issued_by(cert_of(live["orders-node-certs"], "ca.crt"))


def test_ten_years_on_the_ca_is_renewed_with_its_key_so_old_and_new_certificates_trust() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW), version="7")
    old_ca = cert_of(live["orders-ca"], "ca.crt")
    # Five years on, the leaves were renewed once...
    leaf_renewal = cert_of(live["orders-node-certs"], "node.crt").not_valid_after_utc - timedelta(
        days=30)
    live.update(stored(certs_action(cluster, live, leaf_renewal), version="8"))
    # ... and nearly ten years on, the CA enters its renewal window.
    later = old_ca.not_valid_after_utc - timedelta(days=300)

    plan = certs_action(cluster, live, later)

    writes = {w.name: w for w in plan.writes}
    assert list(writes) == ["orders-ca", "orders-node-certs", "orders-root-client-certs"]
    assert [w.verb for w in plan.writes] == ["update"] * 3
    assert "same key" in writes["orders-ca"].reason
    new_ca = cert_of(writes["orders-ca"].secret, "ca.crt")
    assert new_ca.public_key() == old_ca.public_key()
    assert new_ca.subject == old_ca.subject
    assert new_ca.not_valid_after_utc - later == timedelta(days=3650)
    assert pem(writes["orders-ca"].secret, "ca.key") == pem(live["orders-ca"], "ca.key")
    # The leaves are far from expiry: only their ca.crt copy changes, and the certificates
    # running pods hold verify against the renewed CA, as new ones do against the old CA.
    for name, crt in (("orders-node-certs", "node.crt"),
                      ("orders-root-client-certs", "client.root.crt")):
        write = writes[name]
        assert write.reason == "ca.crt differs from the cluster CA's certificate"
        assert pem(write.secret, crt) == pem(live[name], crt)
        assert pem(write.secret, "ca.crt") == pem(writes["orders-ca"].secret, "ca.crt")
        cert_of(live[name], crt).verify_directly_issued_by(new_ca)
        cert_of(write.secret, crt).verify_directly_issued_by(old_ca)
    assert plan.restart


def test_a_renamed_cluster_domain_reissues_the_node_certificate() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))

    plan = certs_action(cluster, live, NOW, cluster_domain="corp.example")

    assert [w.name for w in plan.writes] == ["orders-node-certs"]
    assert "does not cover" in plan.writes[0].reason
    sans = cert_of(plan.writes[0].secret, "node.crt").extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "*.orders.shop.svc.corp.example" in sans


def test_a_tampered_node_key_is_replaced() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    other = stored(certs_action(make_cluster(name="billing"), {}, NOW))
    live["orders-node-certs"]["data"]["node.key"] = other["billing-node-certs"]["data"][
        "node.key"]

    plan = certs_action(cluster, live, NOW)

    assert [(w.verb, w.name, w.reason) for w in plan.writes] == [
        ("update", "orders-node-certs", "node.key does not belong to node.crt")]


def test_a_lost_ca_is_reported_and_never_silently_replaced() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    del live["orders-ca"]

    plan = certs_action(cluster, live, NOW)

    assert plan.writes == ()
    assert [(p.secret, p.key) for p in plan.problems] == [("orders-ca", "")]
    text = format_problem(plan.problems[0])
    assert "does not exist" in text
    assert "restore orders-ca" in text
    assert "delete orders-node-certs and orders-root-client-certs" in text
    # The pods keep the certificates they have: the template hash does not move.
    assert plan.certs_hash == certs_hash(live["orders-node-certs"],
                                         live["orders-root-client-certs"])


def test_a_broken_ca_with_no_leaves_yet_is_regenerated() -> None:
    cluster = make_cluster()
    ca_only = stored(certs_action(cluster, {}, NOW))["orders-ca"]
    ca_only["data"]["ca.key"] = base64.b64encode(b"garbage").decode()

    plan = certs_action(cluster, {"orders-ca": ca_only}, NOW)

    assert [(w.verb, w.name) for w in plan.writes] == [
        ("update", "orders-ca"), ("create", "orders-node-certs"),
        ("create", "orders-root-client-certs")]
    assert "ca.key" in plan.writes[0].reason

    # The new CA is made with the settings the reconciler runs with.
    short = CertSettings(ca_validity=timedelta(days=400))
    renewed = certs_action(cluster, {"orders-ca": ca_only}, NOW, settings=short)
    assert cert_of(renewed.writes[0].secret, "ca.crt").not_valid_after_utc - NOW == timedelta(
        days=400)


# --- Secrets a user brings ----------------------------------------------------------------


def user_cluster(replicas: int = 3) -> Cluster:
    return make_cluster(replicas=replicas, nodeSecretName="my-node-tls",
                        clientSecretName="my-root-tls")


def user_secrets(now: datetime = NOW,
                 hosts: tuple[str, ...] = ("*.orders.shop.svc.cluster.local", "localhost")
                 ) -> dict[str, Obj]:
    """Secrets as a user makes them with their own CA (kwbase cert create-ca/-node/-client)."""
    cluster = user_cluster()
    ca = new_ca("Shop CA", now)
    node = issue_node(ca, hosts, now)
    root = issue_client(ca, "root", now)
    return {"my-node-tls": node_secret(cluster, ca.cert_pem, node),
            "my-root-tls": client_secret(cluster, ca.cert_pem, root)}


def problems_of(secrets: dict[str, Obj], now: datetime = NOW,
                replicas: int = 3) -> tuple[CertProblem, ...]:
    plan = certs_action(user_cluster(replicas), secrets, now)
    assert plan.writes == (), "the reconciler never writes a user's Secrets"
    return plan.problems


def test_good_user_secrets_pass_and_drive_the_pod_template_hash() -> None:
    secrets = user_secrets()
    plan = certs_action(user_cluster(), secrets, NOW)

    assert plan.problems == () and plan.warnings == () and plan.writes == ()
    assert plan.certs_hash == certs_hash(secrets["my-node-tls"], secrets["my-root-tls"])
    rotated = user_secrets()
    assert certs_action(user_cluster(), rotated, NOW).certs_hash != plan.certs_hash


def test_a_missing_user_secret_names_the_secret_and_the_fix() -> None:
    secrets = user_secrets()
    del secrets["my-root-tls"]

    (problem,) = problems_of(secrets)

    assert problem.secret == "my-root-tls"
    assert "does not exist in namespace shop" in problem.message
    assert "client.root.crt" in problem.fix and "clientSecretName" in problem.fix


def test_a_missing_key_is_named() -> None:
    secrets = user_secrets()
    del secrets["my-node-tls"]["data"]["node.key"]

    (problem,) = problems_of(secrets)

    assert (problem.secret, problem.key) == ("my-node-tls", "node.key")
    assert "missing" in problem.message
    assert format_problem(problem).startswith("Secret my-node-tls key node.key: ")


def test_a_node_certificate_for_other_names_is_refused_with_the_uncovered_pods() -> None:
    secrets = user_secrets(hosts=("orders-0.orders.shop.svc.cluster.local",
                                  "orders-1.orders.shop.svc.cluster.local", "localhost"))

    assert problems_of(secrets, replicas=2) == ()
    (problem,) = problems_of(secrets, replicas=3)
    assert (problem.secret, problem.key) == ("my-node-tls", "node.crt")
    assert problem.message.endswith("do not cover orders-2.orders.shop.svc.cluster.local")
    assert "*.orders.shop.svc.cluster.local" in problem.fix


def test_a_node_certificate_without_localhost_is_refused_because_the_operator_dials_it() -> None:
    """A certificate made for the pods' names only would let the database run, while every
    kwbase command the operator runs in a pod (--host=localhost:26257) fails verification:
    init, drain, decommission and every health read. Refused before any pod starts."""
    secrets = user_secrets(hosts=("*.orders.shop.svc.cluster.local", "127.0.0.1"))

    (problem,) = problems_of(secrets)

    assert (problem.secret, problem.key) == ("my-node-tls", "node.crt")
    assert "do not cover localhost" in problem.message
    assert "--host=localhost:26257" in problem.message
    assert problem.fix.startswith("reissue it with localhost among its names")
    wildcard = user_secrets(hosts=("*.orders.shop.svc.cluster.local", "*"))
    assert [p.message for p in problems_of(wildcard)] == [problem.message], (
        "Go's wildcards match one label of at least two: '*' does not cover localhost")


def test_a_service_monitor_scraping_under_a_name_the_certificate_lacks_is_warned() -> None:
    """Prometheus verifies the nodes under the public Service's name (the ServiceMonitor's
    serverName): the database runs, the scrapes would fail. A warning, not a refusal."""
    secrets = user_secrets()
    monitored = dataclasses.replace(user_cluster(), service_monitor=True)

    plan = certs_action(monitored, secrets, NOW)

    assert plan.problems == ()
    (warning,) = plan.warnings
    assert (warning.secret, warning.key) == ("my-node-tls", "node.crt")
    assert "orders-public.shop.svc.cluster.local" in warning.message
    assert "Prometheus" in warning.message
    covered = user_secrets(hosts=("*.orders.shop.svc.cluster.local", "localhost",
                                  "orders-public.shop.svc.cluster.local"))
    assert certs_action(monitored, covered, NOW).warnings == ()
    assert certs_action(user_cluster(), secrets, NOW).warnings == (), (
        "without a ServiceMonitor nothing verifies that name")


def test_a_principal_among_the_dns_names_is_accepted_as_kwdb_accepts_it() -> None:
    """KWDB reads a certificate's users from its CN and then its DNS names (auth.go:85-92):
    a node certificate with CN "db" and the DNS name "node" serves as node, and Go reads the
    last CN when a subject has two."""
    cluster = user_cluster()
    ca = new_ca("Shop CA", NOW)
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    names = [x509.DNSName("*.orders.shop.svc.cluster.local"), x509.DNSName("localhost")]
    by_dns = _leaf(ca, "db", both, [*names, x509.DNSName("node")], NOW, CertSettings())
    secrets = user_secrets()
    secrets["my-node-tls"] = node_secret(cluster, ca.cert_pem, by_dns)
    secrets["my-root-tls"] = client_secret(cluster, ca.cert_pem,
                                           issue_client(ca, "root", NOW))
    assert problems_of(secrets) == ()

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    two_cns = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "root")])
    cert = (x509.CertificateBuilder().subject_name(two_cns).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(7)
            .not_valid_before(NOW - timedelta(hours=1)).not_valid_after(NOW + timedelta(days=90))
            .add_extension(x509.ExtendedKeyUsage(both), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca.key, hashes.SHA256()))
    secrets["my-node-tls"] = node_secret(cluster, ca.cert_pem, CertKey(cert, key))
    (problem,) = problems_of(secrets)
    assert problem.message.startswith("the subject CN is 'root' and no DNS name is node")


def test_an_expired_user_certificate_is_a_problem_and_a_nearly_expired_one_a_warning() -> None:
    issued = NOW - timedelta(days=5 * 365 - 10)
    secrets = user_secrets(now=issued)

    plan = certs_action(user_cluster(), secrets, NOW)
    assert plan.problems == ()
    assert {(w.secret, w.key) for w in plan.warnings} == {
        ("my-node-tls", "node.crt"), ("my-root-tls", "client.root.crt")}
    assert all("expires at" in w.message for w in plan.warnings)

    expired = problems_of(secrets, now=NOW + timedelta(days=11))
    assert {(p.secret, p.key) for p in expired} == {
        ("my-node-tls", "node.crt"), ("my-root-tls", "client.root.crt")}
    assert all("expired at" in p.message for p in expired)


def test_a_key_that_belongs_to_another_certificate_is_refused() -> None:
    secrets = user_secrets()
    secrets["my-root-tls"]["data"]["client.root.key"] = user_secrets()["my-root-tls"]["data"][
        "client.root.key"]

    (problem,) = problems_of(secrets)

    assert (problem.secret, problem.key) == ("my-root-tls", "client.root.key")
    assert "does not belong to the certificate in client.root.crt" in problem.message


def test_a_client_certificate_from_another_ca_would_be_rejected_by_the_nodes() -> None:
    secrets = user_secrets()
    secrets["my-root-tls"] = user_secrets()["my-root-tls"]

    problems = problems_of(secrets)
    assert [(p.secret, p.key) for p in problems] == [("my-root-tls", "client.root.crt")]
    assert "not signed by the CA in my-node-tls/ca.crt" in problems[0].message
    warnings = certs_action(user_cluster(), secrets, NOW).warnings
    assert [(w.secret, w.key) for w in warnings] == [("my-root-tls", "ca.crt")]


def test_a_node_certificate_without_client_usage_or_cn_node_is_refused() -> None:
    cluster = user_cluster()
    ca = new_ca("Shop CA", NOW)
    server_only = _leaf(ca, "db", [ExtendedKeyUsageOID.SERVER_AUTH],
                        [x509.DNSName("*.orders.shop.svc.cluster.local"),
                               x509.DNSName("localhost")], NOW,
                        CertSettings())
    secrets = user_secrets()
    secrets["my-node-tls"] = node_secret(cluster, ca.cert_pem, server_only)
    secrets["my-root-tls"] = client_secret(cluster, ca.cert_pem,
                                           issue_client(ca, "root", NOW))

    messages = [p.message for p in problems_of(secrets)]
    assert any("CN is 'db'" in m for m in messages)
    assert any("lacks client authentication" in m for m in messages)
    assert len(messages) == 2


def test_messages_never_carry_secret_data() -> None:
    secrets = user_secrets()
    secrets["my-node-tls"]["data"]["node.key"] = "bm90IGEga2V5"  # "not a key"
    secrets["my-node-tls"]["data"]["ca.crt"] = "@@not-base64@@"
    problems = problems_of(secrets)

    text = " ".join(format_problem(p) for p in problems)
    assert {(p.secret, p.key) for p in problems} >= {("my-node-tls", "node.key"),
                                                     ("my-node-tls", "ca.crt")}
    assert "@@not-base64@@" not in text and "bm90IGEga2V5" not in text
    assert "***" in text  # the undecodable value is told apart only by its mask
    for secret in secrets.values():
        for value in secret["data"].values():
            assert value not in text


def test_san_matching_follows_go_wildcards() -> None:
    sans = ["*.orders.shop.svc", "Localhost"]
    assert san_covers(sans, "orders-0.orders.shop.svc")
    assert san_covers(sans, "localhost")
    assert not san_covers(sans, "a.b.orders.shop.svc")
    assert not san_covers(sans, "orders.shop.svc")


# --- what each message says, word for word -------------------------------------------------


def test_the_ca_may_sign_certificates_and_revocation_lists_and_nothing_else() -> None:
    ca = cert_of(fresh_cluster_secrets(make_cluster())["orders-ca"], "ca.crt")

    usage = ca.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value == x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.path_length == 1


def test_issued_by_and_covers_host_answer_for_the_issuing_ca_and_the_names() -> None:
    ca = new_ca("Shop CA", NOW)
    other = new_ca("Other CA", NOW)
    node = issue_node(ca, ("localhost", "127.0.0.1", "*.orders.shop.svc"), NOW)

    assert issued_by(node.cert, ca.cert)
    assert not issued_by(node.cert, other.cert)
    assert covers_host(node.cert, "127.0.0.1")
    assert covers_host(node.cert, "localhost")
    assert not covers_host(node.cert, "10.0.0.1")
    assert not covers_host(node.cert, "db.example")
    assert not covers_host(issue_client(ca, "root", NOW).cert, "127.0.0.1")


def test_a_value_with_stray_characters_is_not_silently_repaired() -> None:
    """Kubernetes Secret data is plain base64; a value with characters outside it is reported,
    never decoded by dropping them."""
    secrets = user_secrets()
    good = secrets["my-node-tls"]["data"]["node.crt"]
    secrets["my-node-tls"]["data"]["node.crt"] = good[:40] + "*" + good[40:]

    (problem,) = problems_of(secrets)

    assert (problem.secret, problem.key) == ("my-node-tls", "node.crt")
    assert problem.message.endswith("is not valid base64")
    assert problem.fix == "put the PEM certificate in node.crt"


def test_missing_user_secrets_say_how_to_make_them_in_either_layout() -> None:
    secrets = user_secrets()
    del secrets["my-node-tls"]

    (problem,) = problems_of(secrets)

    assert format_problem(problem) == (
        "Secret my-node-tls: the Secret does not exist in namespace shop; fix: create it with "
        "ca.crt, node.crt, node.key (kwbase cert create-ca, create-node), or clear "
        "spec.tls.nodeSecretName and clientSecretName to let the operator manage certificates")
    secrets = user_secrets()
    del secrets["my-root-tls"]
    (problem,) = problems_of(secrets)
    assert problem.fix == (
        "create it with ca.crt, client.root.crt, client.root.key (kwbase cert create-client "
        "root), or clear spec.tls.nodeSecretName and clientSecretName to let the operator "
        "manage certificates")

    layout = make_cluster(nodeSecretName="my-node-tls", clientSecretName="my-root-tls",
                          secretLayout="cert-manager")
    plan = certs_action(layout, {}, NOW)
    assert [p.fix for p in plan.problems] == [
        "create it with ca.crt, tls.crt, tls.key (a cert-manager Certificate with commonName "
        "node), or clear spec.tls.nodeSecretName and clientSecretName to let the operator "
        "manage certificates",
        "create it with ca.crt, tls.crt, tls.key (a cert-manager Certificate with commonName "
        "root), or clear spec.tls.nodeSecretName and clientSecretName to let the operator "
        "manage certificates"]


def test_a_certificate_issued_by_a_clock_running_ahead_is_not_yet_valid() -> None:
    secrets = user_secrets(now=NOW + timedelta(days=2))

    problems = problems_of(secrets)

    assert [(p.secret, p.key) for p in problems] == [("my-node-tls", "node.crt"),
                                                     ("my-root-tls", "client.root.crt")]
    not_before = (NOW + timedelta(days=2) - timedelta(hours=1)).isoformat()
    assert problems[0].message == f"the certificate is not valid before {not_before}"
    assert problems[0].fix == ("issue it with a notBefore in the past (check the issuing "
                               "machine's clock)")


def test_a_root_certificate_for_another_user_or_only_for_serving_is_refused() -> None:
    cluster = user_cluster()
    ca = new_ca("Shop CA", NOW)
    secrets = {"my-node-tls": node_secret(cluster, ca.cert_pem, issue_node(
        ca, ("*.orders.shop.svc.cluster.local", "localhost"), NOW))}
    serving = issue_server(ca, "app", ("localhost",), NOW)
    secrets["my-root-tls"] = client_secret(cluster, ca.cert_pem, serving)

    problems = problems_of(secrets)

    assert [format_problem(p) for p in problems] == [
        "Secret my-root-tls key client.root.crt: the subject CN is 'app' and no DNS name is "
        "root; the root user's certificate needs root among its principals (its CN and DNS "
        "names); fix: issue it with kwbase cert create-client root",
        "Secret my-root-tls key client.root.crt: the certificate lacks client authentication "
        "in its extended key usage; fix: issue it with the clientAuth extended key usage"]


def test_an_unreadable_managed_certificate_is_reissued_whole() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    live["orders-node-certs"]["data"]["node.crt"] = base64.b64encode(b"garbage").decode()

    plan = certs_action(cluster, live, NOW)

    ((verb, name, reason),) = [(w.verb, w.name, w.reason) for w in plan.writes]
    assert (verb, name, reason) == ("update", "orders-node-certs",
                                    "node.crt: not a PEM certificate")
    written = plan.writes[0].secret
    node = cert_of(written, "node.crt")
    assert issued_by(node, cert_of(live["orders-ca"], "ca.crt"))
    assert written["metadata"]["resourceVersion"] == "1"
    assert plan.restart


def test_a_lost_ca_says_both_ways_out() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    del live["orders-ca"]

    (problem,) = certs_action(cluster, live, NOW).problems

    assert format_problem(problem) == (
        "Secret orders-ca: the cluster CA is unusable (the Secret does not exist) while "
        "orders-node-certs or orders-root-client-certs still exist, so certificates can be "
        "neither issued nor renewed; fix: restore orders-ca from a backup; or delete "
        "orders-node-certs and orders-root-client-certs as well to have a new CA and "
        "certificates issued (every pod must then be restarted together, since old and new "
        "certificates do not trust each other)")


def test_the_pod_template_hash_of_the_same_certificates_stays_what_earlier_versions_wrote() -> None:
    """The hash is on every secure cluster's pod template: if an upgrade of the reconciler
    computed another value for the same certificates, every pod would restart. Keys are not in
    it (a reissued certificate always comes with its new key)."""
    node = {"data": {"ca.crt": "Q0EgY2VydA==", "node.crt": "bm9kZSBjZXJ0", "node.key": "a2V5"}}
    client = {"data": {"ca.crt": "Q0EgY2VydA==", "client.root.crt": "cm9vdCBjZXJ0",
                       "client.root.key": "a2V5"}}

    assert certs_hash(node, client) == "eb98bec7be31f7ff"
    other_key = {"data": {**client["data"], "client.root.key": "b3RoZXI="}}
    assert certs_hash(node, other_key) == "eb98bec7be31f7ff"
    assert certs_hash(node, None) is None


def test_user_secrets_are_checked_for_cluster_local_names_and_a_30_day_window_by_default() -> None:
    """validate_user_secrets, public for tools: without a cluster domain the pods' names are
    under cluster.local, and a certificate expiring within 30 days is a warning."""
    secrets = user_secrets()
    node, client = secrets["my-node-tls"], secrets["my-root-tls"]

    assert validate_user_secrets(user_cluster(), node, client, NOW) == ((), ())
    problems, _ = validate_user_secrets(user_cluster(), node, client, NOW, "corp.example")
    assert [p.key for p in problems] == ["node.crt"]
    narrow = user_secrets(hosts=("orders-0.orders.shop.svc.cluster.local", "localhost"))
    (problem,), _ = validate_user_secrets(user_cluster(replicas=2), narrow["my-node-tls"],
                                          narrow["my-root-tls"], NOW)
    assert problem.message.endswith("do not cover orders-1.orders.shop.svc.cluster.local")
    assert problem.fix.startswith("reissue it with the SAN *.orders.shop.svc.cluster.local ")
    expiry = cert_of(node, "node.crt").not_valid_after_utc
    _, warnings = validate_user_secrets(user_cluster(), node, client,
                                        expiry - timedelta(days=30))
    assert [(w.secret, w.key) for w in warnings] == [("my-node-tls", "node.crt"),
                                                     ("my-root-tls", "client.root.crt")]
    _, warnings = validate_user_secrets(user_cluster(), node, client,
                                        expiry - timedelta(days=31))
    assert warnings == ()


def test_node_and_client_certificates_are_made_as_kwbase_cert_makes_them() -> None:
    secrets = fresh_cluster_secrets(make_cluster())
    ca = cert_of(secrets["orders-ca"], "ca.crt")
    assert ca.subject.rfc4514_string() == "CN=KaiwuDB CA shop/orders,O=KaiwuDB"
    for name, crt, cn in (("orders-node-certs", "node.crt", "node"),
                          ("orders-root-client-certs", "client.root.crt", "root")):
        leaf = cert_of(secrets[name], crt)
        assert leaf.subject.rfc4514_string() == f"CN={cn},O=KaiwuDB"
        assert leaf.issuer == ca.subject
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage)
        assert usage.critical
        assert usage.value == x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=True,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False)
        constraints = leaf.extensions.get_extension_for_class(x509.BasicConstraints)
        assert constraints.critical and not constraints.value.ca


def test_a_ca_whose_key_is_unreadable_while_leaves_exist_is_reported_not_replaced() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    live["orders-ca"]["data"]["ca.key"] = base64.b64encode(b"garbage").decode()

    plan = certs_action(cluster, live, NOW)

    assert plan.writes == ()
    (problem,) = plan.problems
    assert problem.message.startswith("the cluster CA is unusable (ca.key: not an unencrypted PEM "
                                      "private key) while orders-node-certs or "
                                      "orders-root-client-certs still exist")
    assert plan.certs_hash == certs_hash(live["orders-node-certs"],
                                         live["orders-root-client-certs"])


def test_a_ca_key_that_is_not_rsa_is_replaced_while_no_leaf_exists() -> None:
    cluster = make_cluster()
    ca_only = stored(certs_action(cluster, {}, NOW))["orders-ca"]
    ec_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    ca_only["data"]["ca.key"] = base64.b64encode(ec_key).decode()

    plan = certs_action(cluster, {"orders-ca": ca_only}, NOW)

    first = plan.writes[0]
    assert (first.verb, first.name, first.reason) == (
        "update", "orders-ca", "ca.key: not an RSA private key")


def test_a_managed_secret_missing_its_key_is_reissued_saying_which() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    del live["orders-node-certs"]["data"]["node.key"]

    (write,) = certs_action(cluster, live, NOW).writes

    assert (write.verb, write.name, write.reason) == (
        "update", "orders-node-certs", "node.key: the key is missing or empty")


def test_the_earliest_expiry_is_over_every_certificate_the_secret_holds() -> None:
    """A user's CA that expires before the node certificate it issued: the Secret expires with
    the CA."""
    ca = new_ca("Shop CA", NOW, CertSettings(ca_validity=timedelta(days=10)))
    node = issue_node(ca, ("*.orders.shop.svc.cluster.local", "localhost"), NOW)
    secret = node_secret(user_cluster(), ca.cert_pem, node)

    assert earliest_expiry(secret) == ca.cert.not_valid_after_utc
    assert needs_renewal(secret, NOW)
    assert earliest_expiry({"data": {}}) is None


def test_a_user_certificate_that_expired_says_what_to_replace() -> None:
    secrets = user_secrets(now=NOW - timedelta(days=6 * 365))

    problems = [p for p in problems_of(secrets) if "expired" in p.message]

    assert [format_problem(p).split("; fix: ")[1] for p in problems] == [
        "issue a new certificate and replace node.crt and node.key",
        "issue a new certificate and replace client.root.crt and client.root.key"]


def test_a_node_certificate_with_another_cn_or_only_client_usage_says_how_to_reissue() -> None:
    cluster = user_cluster()
    ca = new_ca("Shop CA", NOW)
    sans = [x509.DNSName("*.orders.shop.svc.cluster.local"), x509.DNSName("localhost")]
    secrets = {"my-root-tls": client_secret(cluster, ca.cert_pem,
                                            issue_client(ca, "root", NOW))}
    for cn, usages, expected in (
            ("db", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
             "Secret my-node-tls key node.crt: the subject CN is 'db' and no DNS name is node; "
             "kwbase requires node among the certificate's principals (its CN and DNS names); "
             "fix: issue it with kwbase cert create-node (or with CN=node)"),
            ("node", [ExtendedKeyUsageOID.CLIENT_AUTH],
             "Secret my-node-tls key node.crt: the certificate lacks server authentication in "
             "its extended key usage (nodes use it both to serve and to connect to each other); "
             "fix: issue it with both serverAuth and clientAuth extended key usages")):
        leaf = _leaf(ca, cn, usages, sans, NOW, CertSettings())
        secrets["my-node-tls"] = node_secret(cluster, ca.cert_pem, leaf)
        assert [format_problem(p) for p in problems_of(secrets)] == [expected]


def test_an_unreadable_user_ca_says_what_belongs_in_ca_crt() -> None:
    secrets = user_secrets()
    secrets["my-node-tls"]["data"]["ca.crt"] = base64.b64encode(b"not a certificate").decode()

    (problem,) = problems_of(secrets)

    assert format_problem(problem) == (
        "Secret my-node-tls key ca.crt: not a PEM certificate; fix: put the PEM certificate of "
        "the CA that issued the certificates in ca.crt")


def test_a_missing_user_secret_is_a_problem_of_the_whole_secret() -> None:
    for missing in ("my-node-tls", "my-root-tls"):
        secrets = user_secrets()
        del secrets[missing]
        (problem,) = problems_of(secrets)
        assert (problem.secret, problem.key) == (missing, "")


def test_a_certificate_and_key_load_together_or_not_at_all() -> None:
    ca = new_ca("Webhook CA", NOW)
    serving = issue_server(ca, "kaiwu-webhook", ("kaiwu-webhook.kaiwu.svc",), NOW)
    other = issue_server(ca, "kaiwu-webhook", ("kaiwu-webhook.kaiwu.svc",), NOW)

    loaded = load_cert_key(serving.cert_pem, serving.key_pem)
    assert loaded is not None
    assert (loaded.cert, loaded.key_pem) == (serving.cert, serving.key_pem)
    assert load_cert_key(serving.cert_pem, other.key_pem) is None
    assert load_cert_key(b"not a certificate", serving.key_pem) is None
    assert load_cert_key(serving.cert_pem, b"not a key") is None
    ec_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    assert load_cert_key(serving.cert_pem, ec_key) is None


def test_a_ca_key_from_another_ca_is_replaced_while_no_leaf_exists() -> None:
    cluster = make_cluster()
    ca_only = stored(certs_action(cluster, {}, NOW))["orders-ca"]
    other = stored(certs_action(make_cluster(name="billing"), {}, NOW))["billing-ca"]
    ca_only["data"]["ca.key"] = other["data"]["ca.key"]

    plan = certs_action(cluster, {"orders-ca": ca_only}, NOW)

    first = plan.writes[0]
    assert (first.verb, first.name, first.reason) == (
        "update", "orders-ca", "ca.key: the private key does not belong to ca.crt")


def test_a_lost_ca_with_only_one_leaf_secret_left_is_still_never_replaced() -> None:
    cluster = make_cluster()
    live = stored(certs_action(cluster, {}, NOW))
    for gone in ("orders-ca", "orders-root-client-certs"):
        del live[gone]

    plan = certs_action(cluster, live, NOW)

    assert plan.writes == ()
    assert [(p.secret, p.key) for p in plan.problems] == [("orders-ca", "")]


def test_a_node_certificate_not_signed_by_the_ca_beside_it_is_refused() -> None:
    secrets = user_secrets()
    stranger = new_ca("Stranger CA", NOW)
    node = issue_node(stranger, ("*.orders.shop.svc.cluster.local", "localhost"), NOW)
    secrets["my-node-tls"]["data"]["node.crt"] = base64.b64encode(node.cert_pem).decode()
    secrets["my-node-tls"]["data"]["node.key"] = base64.b64encode(node.key_pem).decode()

    problems = problems_of(secrets)

    assert [(p.secret, p.key, p.message) for p in problems] == [
        ("my-node-tls", "node.crt", "the certificate is not signed by the CA in "
                                    "my-node-tls/ca.crt")]


def test_pod_names_are_under_cluster_local_unless_told_otherwise() -> None:
    cluster = make_cluster(replicas=2)
    assert pod_dns_names(cluster) == ("orders-0.orders.shop.svc.cluster.local",
                                      "orders-1.orders.shop.svc.cluster.local")
    assert pod_dns_names(cluster, "corp.example")[0] == (
        "orders-0.orders.shop.svc.corp.example")
