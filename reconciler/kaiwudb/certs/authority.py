"""The certificate authority: a cluster's CA (its common name, a new one, a renewal that keeps its
key) and the name-constrained CAs of the restore file server.

Called by reconciler.kaiwudb.certs.rotation (the cluster CA),
reconciler.kaiwudb.backup.file_server and the webhook's certificates
(reconciler.runtime.webhook_certs). Like `kwbase cert create-ca`: an RSA 2048 key, valid for 10
years (CertSettings).
"""

from __future__ import annotations

import hashlib
import ipaddress
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from reconciler.kaiwudb.certs.keys import CertKey, CertSettings, _new_key
from renderer.spec import Cluster

# X.509 caps a common name at 64 characters (RFC 5280 ub-common-name); namespace and cluster
# names may each be 63.
CN_MAX = 64


def ca_common_name(cluster: Cluster) -> str:
    """`KaiwuDB CA <namespace>/<cluster>`, shortened with a hash of the full text when it would
    exceed the 64-character limit (so two long names still give different CAs)."""
    full = f"KaiwuDB CA {cluster.namespace}/{cluster.name}"
    if len(full) <= CN_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[:CN_MAX - 9]}~{digest}"


def _ca_builder(subject: x509.Name, key: rsa.RSAPrivateKey, now: datetime,
                settings: CertSettings) -> x509.CertificateBuilder:
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - settings.backdate)
        .not_valid_after(now + settings.ca_validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
    )


def new_ca(common_name: str, now: datetime, settings: CertSettings = CertSettings(),
           permitted_hosts: tuple[str, ...] = ()) -> CertKey:
    """A self-signed CA with a fresh key; with `permitted_hosts`, one that may sign only for
    those (a critical NameConstraints extension: IP addresses as /32 or /128, names as DNS)."""
    key = _new_key(settings)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "KaiwuDB"),
                         x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = _ca_builder(subject, key, now, settings)
    if permitted_hosts:
        permitted: list[x509.GeneralName] = []
        for host in permitted_hosts:
            try:
                permitted.append(x509.IPAddress(ipaddress.ip_network(host)))
            except ValueError:
                permitted.append(x509.DNSName(host))
        builder = builder.add_extension(x509.NameConstraints(permitted, None), critical=True)
    cert = builder.sign(key, hashes.SHA256())
    return CertKey(cert, key)


def renew_ca(ca: CertKey, now: datetime, settings: CertSettings = CertSettings()) -> CertKey:
    """The same CA (same key and subject) with a new validity period. Certificates signed by the
    old CA certificate verify against the new one and the other way round, which is what lets
    pods restart one at a time across a CA renewal."""
    cert = _ca_builder(ca.cert.subject, ca.key, now, settings).sign(ca.key, hashes.SHA256())
    return CertKey(cert, ca.key)
