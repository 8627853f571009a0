"""Applications connect with their own SQL users, and users bring cert-manager's Secrets.

Stories: a cluster listing spec.tls.clientUsers gets one Secret per user, holding the client
certificate under KWDB's names (client.<user>.crt/.key) and cert-manager's (tls.crt/.key) with
the cluster CA; the next reconcile leaves them alone, renewal reissues them without restarting the
pods, a copy that drifted apart is repaired, and a user dropped from the list is no longer
planned (its Secret stays). Secrets a user brings in cert-manager's layout (ca.crt, tls.crt,
tls.key) get the same checks as KWDB's layout, and problems name the cert-manager keys.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from reconciler.kaiwudb.certs.authority import new_ca
from reconciler.kaiwudb.certs.keys import CertKey
from reconciler.kaiwudb.certs.layout import earliest_expiry, node_secret, secret_names
from reconciler.kaiwudb.certs.leaves import issue_client, issue_node
from reconciler.kaiwudb.certs.rotation import certs_action
from reconciler.kaiwudb.certs.user_secrets import CertProblem
from tests.support.certs import make_cluster, stored

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
Obj = dict[str, Any]


def raw(secret: Obj, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def test_each_client_user_gets_a_secret_in_both_layouts_signed_by_the_cluster_ca() -> None:
    cluster = make_cluster(clientUsers=["app", "report_ro"])
    plan = certs_action(cluster, {}, NOW)

    assert [(w.verb, w.name) for w in plan.writes] == [
        ("create", "orders-ca"), ("create", "orders-node-certs"),
        ("create", "orders-root-client-certs"), ("create", "orders-client-app-certs"),
        ("create", "orders-client-report-ro-certs")]
    live = stored(plan)
    ca = x509.load_pem_x509_certificate(raw(live["orders-ca"], "ca.crt"))
    for user, name in (("app", "orders-client-app-certs"),
                       ("report_ro", "orders-client-report-ro-certs")):
        secret = live[name]
        assert sorted(secret["data"]) == sorted(
            ["ca.crt", f"client.{user}.crt", f"client.{user}.key", "tls.crt", "tls.key"])
        assert secret["data"]["tls.crt"] == secret["data"][f"client.{user}.crt"]
        assert secret["data"]["tls.key"] == secret["data"][f"client.{user}.key"]
        assert raw(secret, "ca.crt") == raw(live["orders-ca"], "ca.crt")
        cert = x509.load_pem_x509_certificate(raw(secret, "tls.crt"))
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == user
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        key = serialization.load_pem_private_key(raw(secret, "tls.key"), password=None)
        assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]
        labels = secret["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "kaiwu-operator"
    assert secret_names(cluster)[-2:] == ("orders-client-app-certs",
                                          "orders-client-report-ro-certs")


def test_user_secrets_are_left_alone_then_renewed_without_restarting_the_pods() -> None:
    cluster = make_cluster(clientUsers=["app"])
    live = stored(certs_action(cluster, {}, NOW))
    quiet = certs_action(cluster, live, NOW + timedelta(days=1))
    assert quiet.writes == ()
    without_users = certs_action(make_cluster(), live, NOW).certs_hash
    assert quiet.certs_hash == without_users, "pods do not mount user Secrets"

    expiry = earliest_expiry(live["orders-client-app-certs"])
    assert expiry is not None
    renewal = certs_action(cluster, {"orders-ca": live["orders-ca"],
                                     "orders-client-app-certs": live["orders-client-app-certs"],
                                     "orders-node-certs": live["orders-node-certs"],
                                     "orders-root-client-certs": live["orders-root-client-certs"]},
                           expiry - timedelta(days=29))
    assert "orders-client-app-certs" in [w.name for w in renewal.writes]
    write = next(w for w in renewal.writes if w.name == "orders-client-app-certs")
    assert write.verb == "update" and "renewal window" in write.reason
    assert write.secret["metadata"]["resourceVersion"] == "1"
    renewed = x509.load_pem_x509_certificate(raw(write.secret, "tls.crt"))
    assert renewed.not_valid_after_utc > expiry
    assert write.secret["data"]["tls.crt"] == write.secret["data"]["client.app.crt"]


def test_a_tls_copy_that_drifted_from_the_kwdb_names_is_reissued() -> None:
    cluster = make_cluster(clientUsers=["app"])
    live = stored(certs_action(cluster, {}, NOW))
    del live["orders-client-app-certs"]["data"]["tls.key"]

    (write,) = certs_action(cluster, live, NOW).writes

    assert (write.verb, write.name) == ("update", "orders-client-app-certs")
    assert write.reason == "tls.key differ from client.app.crt, client.app.key"
    assert write.secret["data"]["tls.key"] == write.secret["data"]["client.app.key"]

    del live["orders-client-app-certs"]["data"]["tls.crt"]
    (write,) = certs_action(cluster, live, NOW).writes
    assert write.reason == "tls.crt, tls.key differ from client.app.crt, client.app.key"


def test_a_drifted_copy_is_repaired_even_when_only_ca_crt_was_stale_too() -> None:
    """A stale ca.crt alone is replaced in place; with a copy drifted as well the Secret is
    reissued whole, or the copy would stay wrong."""
    cluster = make_cluster(clientUsers=["app"])
    live = stored(certs_action(cluster, {}, NOW))
    other_ca = new_ca("Another CA", NOW)
    live["orders-client-app-certs"]["data"]["ca.crt"] = base64.b64encode(
        other_ca.cert_pem).decode()

    (write,) = certs_action(cluster, live, NOW).writes
    assert write.reason == "ca.crt differs from the cluster CA's certificate"
    assert write.secret["data"]["tls.crt"] == live["orders-client-app-certs"]["data"]["tls.crt"]

    del live["orders-client-app-certs"]["data"]["tls.key"]
    (write,) = certs_action(cluster, live, NOW).writes
    assert write.reason == "tls.key differ from client.app.crt, client.app.key"
    assert write.secret["data"]["tls.key"] == write.secret["data"]["client.app.key"]
    assert raw(write.secret, "ca.crt") == raw(live["orders-ca"], "ca.crt")


def test_a_user_removed_from_the_spec_is_no_longer_planned_and_never_deleted() -> None:
    live = stored(certs_action(make_cluster(clientUsers=["app"]), {}, NOW))
    later = NOW + timedelta(days=5 * 365)  # long past the app certificate's expiry

    plan = certs_action(make_cluster(), live, later)

    assert "orders-client-app-certs" not in [w.name for w in plan.writes]
    assert "orders-client-app-certs" not in secret_names(make_cluster())


# --- Secrets a user brings in cert-manager's layout -------------------------------------------


def cm_cluster(replicas: int = 3) -> Any:
    return make_cluster(replicas=replicas, nodeSecretName="orders-node-tls",
                        clientSecretName="orders-root-tls", secretLayout="cert-manager")


def cm_secret(name: str, ca: CertKey, leaf: CertKey) -> Obj:
    """What a cert-manager Certificate writes (kubernetes.io/tls with ca.crt)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": "shop"},
            "data": {"ca.crt": base64.b64encode(ca.cert_pem).decode(),
                     "tls.crt": base64.b64encode(leaf.cert_pem).decode(),
                     "tls.key": base64.b64encode(leaf.key_pem).decode()}}


def cm_secrets(hosts: tuple[str, ...] = ("*.orders.shop.svc.cluster.local", "localhost"),
               now: datetime = NOW) -> dict[str, Obj]:
    ca = new_ca("Shop issuer", now)
    return {"orders-node-tls": cm_secret("orders-node-tls", ca,
                                         issue_node(ca, hosts, now)),
            "orders-root-tls": cm_secret("orders-root-tls", ca,
                                         issue_client(ca, "root", now))}


def cm_problems(secrets: dict[str, Obj], replicas: int = 3) -> tuple[CertProblem, ...]:
    plan = certs_action(cm_cluster(replicas), secrets, NOW)
    assert plan.writes == ()
    return plan.problems


def test_good_cert_manager_secrets_pass_and_their_tls_crt_drives_the_pod_hash() -> None:
    secrets = cm_secrets()
    plan = certs_action(cm_cluster(), secrets, NOW)
    assert plan.problems == () and plan.warnings == ()
    assert plan.certs_hash is not None
    rotated = dict(secrets)
    rotated["orders-node-tls"] = cm_secrets()["orders-node-tls"]
    assert certs_action(cm_cluster(), rotated, NOW).certs_hash != plan.certs_hash
    # The root client certificate pods mount is tls.crt too: renewing it alone rolls the pods.
    renewed = dict(secrets)
    renewed["orders-root-tls"] = {**secrets["orders-root-tls"], "data": {
        **secrets["orders-root-tls"]["data"],
        "tls.crt": base64.b64encode(b"a renewed certificate").decode()}}
    assert certs_action(cm_cluster(), renewed, NOW).certs_hash != plan.certs_hash


def test_uncovered_pods_and_expiry_are_problems_in_cert_manager_layout() -> None:
    narrow = cm_secrets(hosts=("orders-0.orders.shop.svc.cluster.local", "localhost"))
    assert cm_problems(narrow, replicas=1) == ()
    (problem,) = cm_problems(narrow, replicas=2)
    assert (problem.secret, problem.key) == ("orders-node-tls", "tls.crt")
    assert "orders-1.orders.shop.svc.cluster.local" in problem.message

    expired = cm_secrets(now=NOW - timedelta(days=6 * 365))
    found = {(p.secret, p.key) for p in cm_problems(expired) if "expired" in p.message}
    assert found == {("orders-node-tls", "tls.crt"), ("orders-root-tls", "tls.crt")}


def test_a_kwdb_layout_secret_declared_as_cert_manager_is_told_which_keys_are_missing() -> None:
    ca = new_ca("Shop issuer", NOW)
    node = issue_node(ca, ("*.orders.shop.svc.cluster.local", "localhost"), NOW)
    kwdb_layout = node_secret(cm_cluster(), ca.cert_pem, node)
    secrets = cm_secrets()
    secrets["orders-node-tls"] = kwdb_layout
    problems = cm_problems(secrets)
    assert {(p.secret, p.key) for p in problems} == {("orders-node-tls", "tls.crt"),
                                                     ("orders-node-tls", "tls.key")}
    assert all("ca.crt, tls.crt, tls.key" in p.fix for p in problems)

    missing = cm_secrets()
    del missing["orders-root-tls"]
    (problem,) = cm_problems(missing)
    assert problem.secret == "orders-root-tls"
    assert "cert-manager Certificate with commonName root" in problem.fix


def test_a_cert_manager_root_certificate_for_another_user_names_tls_crt() -> None:
    ca = new_ca("Shop issuer", NOW)
    secrets = cm_secrets()
    secrets["orders-node-tls"] = cm_secret("orders-node-tls", ca, issue_node(
        ca, ("*.orders.shop.svc.cluster.local", "localhost"), NOW))
    secrets["orders-root-tls"] = cm_secret("orders-root-tls", ca,
                                           issue_client(ca, "app", NOW))

    (problem,) = cm_problems(secrets)

    assert (problem.secret, problem.key) == ("orders-root-tls", "tls.crt")
    assert "the subject CN is 'app'" in problem.message
