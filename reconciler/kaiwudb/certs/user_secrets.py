"""Checks of the Secrets a user provides (`spec.tls.nodeSecretName` and `clientSecretName`), and
the problems certificates can have (CertProblem), with the fix for each.

Called by reconciler.kaiwudb.certs.rotation.certs_action for a cluster with user-provided Secrets:
nothing is written then, the Secrets are validated and problems are reported. The checks are the
same for KWDB's key names and cert-manager's layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from reconciler.kaiwudb.certs.keys import (
    _aware,
    _cert,
    _certs,
    _cn,
    _dns_sans,
    _issued_by,
    _key,
    _key_matches,
    _name,
    _Unusable,
    _usages,
    principals,
    san_covers,
)
from reconciler.kaiwudb.certs.layout import CA_CRT, NODE_CRT, ROOT_CRT
from reconciler.kaiwudb.certs.leaves import LOCAL_HOST, pod_dns_names
from reconciler.model import Obj
from renderer.spec import CERT_MANAGER_LAYOUT, Cluster


@dataclass(frozen=True)
class CertProblem:
    """Something wrong with a certificate Secret: which Secret, which key, what, and the fix."""

    secret: str
    key: str
    message: str
    fix: str


def format_problem(problem: CertProblem) -> str:
    """One line for status conditions, Events and logs."""
    where = f"Secret {problem.secret}" + (f" key {problem.key}" if problem.key else "")
    return f"{where}: {problem.message}; fix: {problem.fix}"


def _check_leaf(secret: Obj, crt: str, key: str, cas: list[x509.Certificate], ca_where: str,
                now: datetime, renew_before: timedelta
                ) -> tuple[x509.Certificate | None, list[CertProblem], list[CertProblem]]:
    """Common checks of a certificate/key pair: parse, key match, signed by the CA, validity."""
    name = _name(secret)
    problems: list[CertProblem] = []
    warnings: list[CertProblem] = []
    try:
        cert = _cert(secret, crt)
    except _Unusable as err:
        return None, [CertProblem(name, err.key, err.message,
                                  f"put the PEM certificate in {crt}")], []
    try:
        private = _key(secret, key)
        if not _key_matches(cert, private):
            problems.append(CertProblem(
                name, key, f"the private key does not belong to the certificate in {crt}",
                f"put the key that was generated together with {crt} in {key}"))
    except _Unusable as err:
        problems.append(CertProblem(name, err.key, err.message,
                                    f"put the certificate's unencrypted PEM private key in {key}"))
    if cas and not _issued_by(cert, cas):
        problems.append(CertProblem(
            name, crt, f"the certificate is not signed by the CA in {ca_where}",
            f"issue {crt} with that CA's key, or put the CA that issued it in {ca_where}"))
    if cert.not_valid_after_utc <= now:
        problems.append(CertProblem(
            name, crt, f"the certificate expired at {cert.not_valid_after_utc.isoformat()}",
            f"issue a new certificate and replace {crt} and {key}"))
    elif cert.not_valid_before_utc > now:
        problems.append(CertProblem(
            name, crt,
            f"the certificate is not valid before {cert.not_valid_before_utc.isoformat()}",
            "issue it with a notBefore in the past (check the issuing machine's clock)"))
    elif cert.not_valid_after_utc <= now + renew_before:
        warnings.append(CertProblem(
            name, crt, f"the certificate expires at {cert.not_valid_after_utc.isoformat()}",
            f"issue a new certificate and replace {crt} and {key} before then"))
    return cert, problems, warnings


def _load_cas(secret: Obj) -> tuple[list[x509.Certificate], list[CertProblem]]:
    try:
        return _certs(secret, CA_CRT), []
    except _Unusable as err:
        return [], [CertProblem(_name(secret), err.key, err.message,
                                "put the PEM certificate of the CA that issued the "
                                "certificates in ca.crt")]


def _missing_keys(secret: Obj, keys: tuple[str, ...]) -> list[CertProblem]:
    data = secret.get("data") or {}
    return [CertProblem(_name(secret), key, "the key is missing or empty",
                        f"add {key} to the Secret (it needs {', '.join(keys)})")
            for key in keys if not data.get(key)]


def validate_user_secrets(cluster: Cluster, node: Obj | None, client: Obj | None,
                          now: datetime, cluster_domain: str = "cluster.local",
                          renew_before: timedelta = timedelta(days=30)
                          ) -> tuple[tuple[CertProblem, ...], tuple[CertProblem, ...]]:
    """Check Secrets the user named in spec.tls: (problems, warnings).

    Problems: a Secret or key is missing; a value does not parse; a key does not match its
    certificate; a certificate is not signed by the node Secret's ca.crt (the CA every pod
    trusts: pods mount ca.crt from the node Secret only), expired or not yet valid; node.crt is
    not CN node with server and client usage or does not cover every pod's DNS name and
    localhost (where the operator's kwbase commands connect); client.root.crt is not CN root
    with client usage. Warnings: a certificate expires within renew_before; the client
    Secret's ca.crt does not verify node.crt (clients outside the pods using that Secret would
    reject the nodes); node.crt does not cover the public
    Service's name while a ServiceMonitor scrapes under it.
    """
    _aware(now)
    problems: list[CertProblem] = []
    warnings: list[CertProblem] = []
    ns = cluster.namespace
    node_keys, client_keys = cluster.node_secret_keys, cluster.client_secret_keys
    _, node_crt, node_key = node_keys
    _, root_crt, root_key = client_keys
    cert_manager = cluster.secret_layout == CERT_MANAGER_LAYOUT
    node_tool = ("a cert-manager Certificate with commonName node" if cert_manager
                 else "kwbase cert create-ca, create-node")
    root_tool = ("a cert-manager Certificate with commonName root" if cert_manager
                 else "kwbase cert create-client root")
    if node is None:
        problems.append(CertProblem(
            cluster.node_secret, "", f"the Secret does not exist in namespace {ns}",
            f"create it with {', '.join(node_keys)} ({node_tool}), "
            "or clear spec.tls.nodeSecretName and clientSecretName to let the operator "
            "manage certificates"))
    if client is None:
        problems.append(CertProblem(
            cluster.client_secret, "", f"the Secret does not exist in namespace {ns}",
            f"create it with {', '.join(client_keys)} ({root_tool}), "
            "or clear spec.tls.nodeSecretName and clientSecretName to let the operator "
            "manage certificates"))
    node_cas: list[x509.Certificate] = []
    node_cert: x509.Certificate | None = None
    if node is not None:
        missing = _missing_keys(node, node_keys)
        problems += missing
        if not missing:
            node_cas, found = _load_cas(node)
            problems += found
            node_cert, found, warned = _check_leaf(node, node_crt, node_key, node_cas,
                                                   f"{cluster.node_secret}/{CA_CRT}", now,
                                                   renew_before)
            problems += found
            warnings += warned
        if node_cert is not None:
            problems += _check_node_identity(cluster, node_cert, cluster_domain, node_crt)
            warnings += _node_identity_warnings(cluster, node_cert, cluster_domain, node_crt)
    if client is not None:
        missing = _missing_keys(client, client_keys)
        problems += missing
        if not missing:
            client_cas, found = _load_cas(client)
            problems += found
            root_cert, found, warned = _check_leaf(client, root_crt, root_key, node_cas,
                                                   f"{cluster.node_secret}/{CA_CRT}", now,
                                                   renew_before)
            problems += found
            warnings += warned
            if root_cert is not None:
                problems += _check_root_identity(cluster, root_cert, root_crt)
            if client_cas and node_cert is not None and not _issued_by(node_cert, client_cas):
                warnings.append(CertProblem(
                    cluster.client_secret, CA_CRT,
                    f"this CA does not verify {cluster.node_secret}/{node_crt}: clients using "
                    "this Secret would reject the nodes",
                    f"put the CA from {cluster.node_secret}/{CA_CRT} in {CA_CRT}"))
    return tuple(problems), tuple(warnings)


def _check_node_identity(cluster: Cluster, cert: x509.Certificate, cluster_domain: str,
                         crt: str = NODE_CRT) -> list[CertProblem]:
    problems: list[CertProblem] = []
    secret = cluster.node_secret
    if "node" not in principals(cert):
        problems.append(CertProblem(
            secret, crt, f"the subject CN is {_cn(cert)!r} and no DNS name is node; kwbase "
            "requires node among the certificate's principals (its CN and DNS names)",
            "issue it with kwbase cert create-node (or with CN=node)"))
    usages = _usages(cert)
    for usage, label in ((ExtendedKeyUsageOID.SERVER_AUTH, "server"),
                         (ExtendedKeyUsageOID.CLIENT_AUTH, "client")):
        if usage not in usages:
            problems.append(CertProblem(
                secret, crt,
                f"the certificate lacks {label} authentication in its extended key usage "
                "(nodes use it both to serve and to connect to each other)",
                "issue it with both serverAuth and clientAuth extended key usages"))
    sans = _dns_sans(cert)
    uncovered = [host for host in pod_dns_names(cluster, cluster_domain)
                 if not san_covers(sans, host)]
    if uncovered:
        problems.append(CertProblem(
            secret, crt,
            f"the certificate's DNS names do not cover {', '.join(uncovered)}",
            f"reissue it with the SAN *.{cluster.headless_service}.{cluster.namespace}.svc."
            f"{cluster_domain} (or every pod name)"))
    if not san_covers(sans, LOCAL_HOST):
        # The operator runs every kwbase command in a pod against that pod's own node
        # (--host=localhost:26257, KwbaseSettings.connect_via), and kwbase verifies the node's
        # certificate against the host it dials: gRPC's TLS credentials take the server name
        # from the target (kwbase/pkg/rpc/context.go:687-699, 917-959), SQL connections use
        # sslmode verify-full (base/config.go:369-372).
        problems.append(CertProblem(
            secret, crt,
            f"the certificate's DNS names do not cover {LOCAL_HOST}, which the operator's "
            f"kwbase commands in each pod connect to (--host={LOCAL_HOST}:26257)",
            f"reissue it with {LOCAL_HOST} among its names (kwbase cert create-node "
            f"{LOCAL_HOST} ...)"))
    return problems


def _node_identity_warnings(cluster: Cluster, cert: x509.Certificate, cluster_domain: str,
                            crt: str = NODE_CRT) -> list[CertProblem]:
    """A name the database works without but a client the operator sets up needs: the
    ServiceMonitor scrapes the pods with serverName set to the public Service's name
    (renderer/builders/service_monitor.py)."""
    public = f"{cluster.client_service}.{cluster.namespace}.svc.{cluster_domain}"
    if not cluster.service_monitor or san_covers(_dns_sans(cert), public):
        return []
    return [CertProblem(
        cluster.node_secret, crt,
        f"the certificate's DNS names do not cover {public}: the ServiceMonitor verifies the "
        "nodes under that name, so Prometheus would fail every scrape",
        f"reissue it with {public} among its names")]


def _check_root_identity(cluster: Cluster, cert: x509.Certificate,
                         crt: str = ROOT_CRT) -> list[CertProblem]:
    problems: list[CertProblem] = []
    if "root" not in principals(cert):
        problems.append(CertProblem(
            cluster.client_secret, crt,
            f"the subject CN is {_cn(cert)!r} and no DNS name is root; the root user's "
            "certificate needs root among its principals (its CN and DNS names)",
            "issue it with kwbase cert create-client root"))
    if ExtendedKeyUsageOID.CLIENT_AUTH not in _usages(cert):
        problems.append(CertProblem(
            cluster.client_secret, crt,
            "the certificate lacks client authentication in its extended key usage",
            "issue it with the clientAuth extended key usage"))
    return problems
