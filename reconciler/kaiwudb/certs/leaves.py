"""Leaf certificates, signed by a CA: the node certificate (CN node, server and client usage, the
names every pod and Service answers to), client certificates (CN the SQL user, client usage) and
serving certificates (server usage only).

Called by reconciler.kaiwudb.certs.rotation, the restore file server
(reconciler.kaiwudb.backup.file_server) and the webhook's certificates
(reconciler.runtime.webhook_certs). Like `kwbase cert create-node | create-client`: RSA 2048 keys,
valid for 5 years (CertSettings).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from reconciler.kaiwudb.certs.keys import CertKey, CertSettings, _new_key
from renderer.spec import Cluster

SQL_PORT_HOSTS = ("localhost", "127.0.0.1")


LOCAL_HOST = SQL_PORT_HOSTS[0]


def pod_dns_names(cluster: Cluster, cluster_domain: str = "cluster.local") -> tuple[str, ...]:
    """The names pods advertise (--advertise-addr): the node certificate must cover all."""
    return tuple(
        f"{cluster.pod_name(i)}.{cluster.headless_service}.{cluster.namespace}.svc."
        f"{cluster_domain}" for i in range(cluster.replicas))


def node_hosts(cluster: Cluster, cluster_domain: str = "cluster.local") -> tuple[str, ...]:
    """SANs of the node certificate: loopback, both Services in every DNS form a client in the
    cluster may use, and wildcards for the pods under the headless Service (so scaling out needs
    no new certificate)."""
    ns, headless = cluster.namespace, cluster.headless_service
    hosts: list[str] = list(SQL_PORT_HOSTS)
    for service in (headless, cluster.client_service):
        hosts += [service, f"{service}.{ns}", f"{service}.{ns}.svc",
                  f"{service}.{ns}.svc.{cluster_domain}"]
    hosts += [f"*.{headless}.{ns}.svc.{cluster_domain}", f"*.{headless}.{ns}.svc",
              f"*.{headless}.{ns}", f"*.{headless}"]
    return tuple(hosts)


def _leaf(ca: CertKey, common_name: str, usages: list[x509.ObjectIdentifier],
          sans: Iterable[x509.GeneralName], now: datetime, settings: CertSettings) -> CertKey:
    key = _new_key(settings)
    public = key.public_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "KaiwuDB"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - settings.backdate)
        .not_valid_after(now + settings.leaf_validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=True,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                       critical=False)
    )
    names = list(sans)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return CertKey(builder.sign(ca.key, hashes.SHA256()), key)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue_node(ca: CertKey, hosts: Iterable[str], now: datetime,
               settings: CertSettings = CertSettings()) -> CertKey:
    """Node certificate: CN node, server and client auth, hosts as DNS or IP SANs."""
    return _leaf(ca, "node", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
                 [_general_name(h) for h in hosts], now, settings)


def issue_client(ca: CertKey, user: str, now: datetime,
                 settings: CertSettings = CertSettings()) -> CertKey:
    """Client certificate for a SQL user (CN = user name, client auth)."""
    return _leaf(ca, user, [ExtendedKeyUsageOID.CLIENT_AUTH], [], now, settings)


def issue_server(ca: CertKey, common_name: str, hosts: Iterable[str], now: datetime,
                 settings: CertSettings = CertSettings()) -> CertKey:
    """Serving certificate (server auth only), hosts as DNS or IP SANs: the reconciler's own
    admission webhook (reconciler.runtime.webhook_certs)."""
    return _leaf(ca, common_name, [ExtendedKeyUsageOID.SERVER_AUTH],
                 [_general_name(h) for h in hosts], now, settings)
