"""Certificates and keys in memory: how they are made (CertSettings), held (CertKey), read out of
a Secret's data (each key loaded once: LOADED_KEYS) and read the way KWDB and Go read them
(principals, SANs, usages, issuer).

Imported by the other modules of reconciler.kaiwudb.certs and by the webhook's certificates
(reconciler.runtime.webhook_certs: load_cert_key, issued_by, covers_host). Names with a leading
underscore are shared by this package's modules only. A value read from a Secret is never put in
a message; where it must be told apart it is `mask`ed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from reconciler.model import Obj
from renderer.redact import mask


@dataclass(frozen=True)
class CertSettings:
    """How certificates are made and when they are renewed.

    key_size: RSA modulus bits for every key (kwbase cert's default, 2048).
    ca_validity: lifetime of a CA certificate (kwbase cert create-ca: 10 years).
    leaf_validity: lifetime of node and client certificates (kwbase cert: 5 years).
    leaf_renew_before: a node or client certificate is reissued once it expires within this.
    ca_renew_before: the CA certificate is renewed (same key) once it expires within this; longer
        than the leaves' window so a renewed CA is in place well before anything depends on it.
    backdate: notBefore lies this far before `now`, so a node whose clock lags the reconciler's
        slightly does not reject a certificate as not yet valid.
    """

    key_size: int = 2048
    ca_validity: timedelta = timedelta(days=3650)
    leaf_validity: timedelta = timedelta(days=5 * 365)
    leaf_renew_before: timedelta = timedelta(days=30)
    ca_renew_before: timedelta = timedelta(days=365)
    backdate: timedelta = timedelta(hours=1)


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: rsa.RSAPrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        # PKCS#1 ("RSA PRIVATE KEY"), the form `kwbase cert` writes; unencrypted as kwbase needs.
        pem = self.key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.TraditionalOpenSSL,
                                     serialization.NoEncryption())
        # What goes into a Secret is read back on the next pass: known already, not loaded.
        LOADED_KEYS.remember(pem, self.key)
        return pem


def _new_key(settings: CertSettings) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=settings.key_size)


def load_cert_key(cert_pem: bytes, key_pem: bytes) -> CertKey | None:
    """A PEM certificate and its RSA key, or None when either does not parse or they do not
    belong together."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return None
    private = LOADED_KEYS.load(key_pem)
    if not isinstance(private, rsa.RSAPrivateKey) or not _key_matches(cert, private):
        return None
    return CertKey(cert, private)


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether `ca` signed `cert`."""
    return _issued_by(cert, [ca])


def covers_host(cert: x509.Certificate, host: str) -> bool:
    """Whether the certificate's SANs cover `host` (a DNS name or an IP address)."""
    return _covers_host(cert, host)


class _LoadedKeys:
    """Private keys already loaded, by the SHA-256 of their PEM bytes (a bounded LRU).

    Loading a PEM RSA key checks it (cryptography's RSA key validation: about 40 ms of CPU on
    this project's 2-core machines), and every pass of a TLS cluster reads three or four keys:
    without this, certificates cost most of a pass (bench/repair_latency.py). Content-addressed,
    so a changed Secret is a new entry and an entry is never out of date; a key that does not
    load is remembered as such too. About 2 KB a key; workers share it, so it locks."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._keys: OrderedDict[bytes, PrivateKeyTypes | None] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, raw: bytes, key: PrivateKeyTypes) -> None:
        """A key made here, as it will be read back from its Secret."""
        self._put(hashlib.sha256(raw).digest(), key)

    def load(self, raw: bytes) -> PrivateKeyTypes | None:
        """The key (None: not an unencrypted PEM private key)."""
        digest = hashlib.sha256(raw).digest()
        with self._lock:
            if digest in self._keys:
                self._keys.move_to_end(digest)
                return self._keys[digest]
        try:
            loaded: PrivateKeyTypes | None = serialization.load_pem_private_key(raw,
                                                                               password=None)
        except (ValueError, TypeError):
            loaded = None
        self._put(digest, loaded)
        return loaded

    def _put(self, digest: bytes, key: PrivateKeyTypes | None) -> None:
        with self._lock:
            self._keys[digest] = key
            self._keys.move_to_end(digest)
            while len(self._keys) > self._size:
                self._keys.popitem(last=False)


# Four keys a TLS cluster (CA, node, root, one SQL user): a thousand clusters' keys, ~8 MB.
LOADED_KEYS = _LoadedKeys(4096)


def _public_der(obj: x509.Certificate | PrivateKeyTypes) -> bytes:
    public = obj.public_key()
    return public.public_bytes(serialization.Encoding.DER,
                               serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_matches(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    return _public_der(cert) == _public_der(key)


def _issued_by(cert: x509.Certificate, cas: Iterable[x509.Certificate]) -> bool:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
            return True
        except (ValueError, TypeError, InvalidSignature):
            continue
    return False


def _cn(cert: x509.Certificate) -> str:
    """The subject's common name as Go reads it: the last CN attribute wins
    (crypto/x509/pkix/pkix.go FillFromRDNSequence)."""
    values = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[-1].value) if values else ""


def principals(cert: x509.Certificate) -> list[str]:
    """The users a certificate speaks for, as KWDB reads them: its CN, then every DNS name
    (kwbase/pkg/security/auth.go:85-92; no --cert-principal-map is set). A node certificate
    needs `node` among them (certificate_loader.go:451-469), client.<user>.crt needs <user>
    (certificate_loader.go:473-487)."""
    return [_cn(cert), *_dns_sans(cert)]


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    try:
        return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        # Go (and so kwbase) treats a certificate without EKU as good for any usage.
        return {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def _dns_sans(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(name) for name in ext.get_values_for_type(x509.DNSName)]


def san_covers(sans: Iterable[str], host: str) -> bool:
    """Whether a DNS SAN list covers host the way Go's crypto/x509 matches: exact (case-folded)
    or a `*.` wildcard standing for exactly one leftmost label."""
    host = host.lower().rstrip(".")
    for san in sans:
        san = san.lower().rstrip(".")
        if san == host:
            return True
        if san.startswith("*.") and "." in host:
            first, rest = host.split(".", 1)
            if first and rest == san[2:]:
                return True
    return False


def _aware(now: datetime) -> datetime:
    # Certificate times are UTC-aware; a naive `now` would fail deep inside a comparison.
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware, e.g. datetime.now(timezone.utc)")
    return now


def _covers_host(cert: x509.Certificate, host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in _dns_sans(cert)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return address in ext.get_values_for_type(x509.IPAddress)


class _Unusable(Exception):
    """A Secret key that is absent or does not parse; message names the key, never the value."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _raw(secret: Obj, key: str) -> bytes:
    data = secret.get("data") or {}
    if key not in data or data[key] in (None, ""):
        raise _Unusable(key, "the key is missing or empty")
    try:
        return base64.b64decode(data[key], validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise _Unusable(key, f"the value ({mask(data[key])}) is not valid base64") from None


def _certs(secret: Obj, key: str) -> list[x509.Certificate]:
    raw = _raw(secret, key)
    try:
        certs = x509.load_pem_x509_certificates(raw)
    except ValueError:
        raise _Unusable(key, "not a PEM certificate") from None
    return certs


def _cert(secret: Obj, key: str) -> x509.Certificate:
    return _certs(secret, key)[0]


def _key(secret: Obj, key: str) -> PrivateKeyTypes:
    loaded = LOADED_KEYS.load(_raw(secret, key))
    if loaded is None:
        raise _Unusable(key, "not an unencrypted PEM private key")
    return loaded


def _name(secret: Obj) -> str:
    return str((secret.get("metadata") or {}).get("name", "?"))
