"""TLS certificates for secure KaiwuDB clusters: issue, check, renew, and plan the Secrets.

Called by the controller (reconciler/controller/controller.py) once per reconcile of a cluster with
`spec.tls.enabled`, through `certs_action`; the lower-level functions (issuing, validation,
`needs_renewal`) are public for tests and tools. Everything is done in-process with the
`cryptography` package, never by shelling out to `kwbase cert` or openssl. Files and their
contents follow what `kwbase cert create-ca | create-node | create-client` produce (see
kaiwudb-facts.md "Certificates"): RSA 2048 keys in PKCS#1 PEM, a CA valid for 10 years, node and
root client certificates valid for 5 years; the node certificate has CN `node` and both server and
client usage (kwbase uses it for node-to-node connections in both directions), the root client
certificate has CN `root` and client usage.

Secrets of a cluster N (managed mode, `spec.tls.nodeSecretName` empty):
- `N-ca`: ca.crt, ca.key. The CA key lives only here; it is never mounted in a pod.
- `N-node-certs`: ca.crt, node.crt, node.key.
- `N-root-client-certs`: ca.crt, client.root.crt, client.root.key.
- `N-client-<user>-certs` for each user of `spec.tls.clientUsers` (`_` in the name becomes `-`):
  ca.crt, client.<user>.crt, client.<user>.key (what kwbase looks for in a --certs-dir) and the
  same certificate and key again as tls.crt, tls.key (cert-manager's layout, what generic
  clients and sidecars expect), so kwbase and a psql/JDBC client can both mount it. Pods never
  mount these, so they are not in the certs hash and their renewal restarts nothing. A user
  removed from the list keeps its Secret (Secrets are never pruned: reconciler.kube.kinds
  NEVER_PRUNED); it is no longer renewed.
All carry app.kubernetes.io/managed-by=kaiwu-operator and app.kubernetes.io/instance=N.
With user-provided Secrets (`nodeSecretName` and `clientSecretName` set) nothing is written: the
Secrets are validated and problems are reported. They hold KWDB's key names or, with
`spec.tls.secretLayout: cert-manager`, ca.crt, tls.crt, tls.key (Cluster.node_secret_keys and
client_secret_keys say which); the checks are the same for both layouts.

Contract with the controller (`certs_action(cluster, secrets, now) -> CertsPlan`):
1. Before applying the StatefulSet, perform `plan.writes` in order. `verb == "create"`: create the
   Secret (Kube.create); 409 AlreadyExists means the cache view was stale: requeue, never
   overwrite (a stale view must not replace a CA). `verb == "update"`: server-side apply of the
   body, which carries the live object's `metadata.resourceVersion` as a precondition (409
   Conflict: stale view, requeue). Add the ownerReference to the KaiwuCluster as for every
   applied object.
2. Put `plan.certs_hash` on the StatefulSet's pod template as the annotation
   `CERTS_HASH_ANNOTATION` (kaiwu.inspur.com/certs-hash). It is a hash of the public certificates
   the pods mount (never of keys), so any renewal, or a user rotating their own Secrets, changes
   it and the StatefulSet rolls the pods one at a time. Why a restart instead of SIGHUP: kwbase
   does reload certificates on SIGHUP (pkg/security/certificate_manager.go), but the kubelet
   refreshes mounted Secrets only after its sync delay and the image has no tool to send the
   signal; a restart reads the new files at once and its health gating already exists.
   A rolling restart is safe because a renewal never changes the CA key: leaves are reissued by
   the same CA, and a renewed CA certificate keeps its key and subject, so old and new
   certificates trust each other while pods restart one by one.
3. `plan.problems` non-empty: the certificates cannot be used or repaired without the user
   (user-provided Secrets wrong, or the managed CA lost while its leaves remain). Report Stalled
   with `format_problem` texts and do not roll pods onto them. `plan.warnings` (e.g. a user
   certificate expiring soon) go to an Event, not to Stalled.
Secret data is never put in a message; where a value must be told apart it is `mask`ed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from reconciler.kube.kinds import TLS_SECRET_LABEL as TLS_SECRET_LABEL  # its home, re-exported
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from renderer.redact import mask
from renderer.spec import CERT_MANAGER_LAYOUT, Cluster

Obj = dict[str, Any]


def unmarked_secrets(cluster: Cluster, secrets: Mapping[str, Obj]) -> tuple[str, ...]:
    """The user's own Secrets (nodeSecretName, clientSecretName) that exist without
    TLS_SECRET_LABEL=true; () for the Secrets the reconciler manages."""
    if not cluster.user_provided_certs:
        return ()
    return tuple(name for name in dict.fromkeys((cluster.node_secret, cluster.client_secret))
                 if name in secrets and ((secrets[name].get("metadata") or {}).get("labels")
                                         or {}).get(TLS_SECRET_LABEL) != "true")


CA_CRT, CA_KEY = "ca.crt", "ca.key"
NODE_CRT, NODE_KEY = "node.crt", "node.key"
ROOT_CRT, ROOT_KEY = "client.root.crt", "client.root.key"
NODE_KEYS = (CA_CRT, NODE_CRT, NODE_KEY)
CLIENT_KEYS = (CA_CRT, ROOT_CRT, ROOT_KEY)
CA_KEYS = (CA_CRT, CA_KEY)
SQL_PORT_HOSTS = ("localhost", "127.0.0.1")
LOCAL_HOST = SQL_PORT_HOSTS[0]
# cert-manager's key names (a kubernetes.io/tls Secret plus ca.crt).
TLS_CRT, TLS_KEY = "tls.crt", "tls.key"


def user_keys(user: str) -> tuple[str, str]:
    """KWDB's file names for a SQL user's client certificate and key."""
    return f"client.{user}.crt", f"client.{user}.key"


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


@dataclass(frozen=True)
class SecretWrite:
    """One Secret to write: `create` (must not exist yet) or `update` (resourceVersion-guarded)."""

    verb: Literal["create", "update"]
    secret: Obj = field(repr=False)
    reason: str

    @property
    def name(self) -> str:
        return str(self.secret["metadata"]["name"])


@dataclass(frozen=True)
class CertsPlan:
    """What the controller must do about certificates for one cluster (see module docstring).

    writes: Secrets to create or update, in order (CA first).
    certs_hash: value for the pod template annotation CERTS_HASH_ANNOTATION once the writes are
        done; None when TLS is off or the pods' Secrets do not (yet) exist.
    restart: the writes change certificates running pods already mounted (a renewal), so the
        pods will roll; for Events and lastActions (the hash alone drives the restart).
    problems: blocking; needs the user (Stalled).
    warnings: not blocking (Event).
    """

    writes: tuple[SecretWrite, ...] = ()
    certs_hash: str | None = None
    restart: bool = False
    problems: tuple[CertProblem, ...] = ()
    warnings: tuple[CertProblem, ...] = ()

    def summary(self) -> str:
        parts = [f"{w.verb} Secret {w.name} ({w.reason})" for w in self.writes]
        parts += [format_problem(p) for p in self.problems]
        return "; ".join(parts) if parts else "certificates up to date"


# --- names ---------------------------------------------------------------------------------


def ca_secret_name(cluster: Cluster) -> str:
    return f"{cluster.name}-ca"


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


# --- issuing ---------------------------------------------------------------------------------


def _new_key(settings: CertSettings) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=settings.key_size)


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


# --- Secret bodies ---------------------------------------------------------------------------


def _secret(cluster: Cluster, name: str, data: Mapping[str, bytes]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": cluster.namespace,
                     "labels": {MANAGED_BY_LABEL: MANAGED_BY, INSTANCE_LABEL: cluster.name,
                                TLS_SECRET_LABEL: "true"}},
        "type": "Opaque",
        "data": {key: base64.b64encode(value).decode() for key, value in sorted(data.items())},
    }


def ca_secret(cluster: Cluster, ca: CertKey) -> Obj:
    return _secret(cluster, ca_secret_name(cluster), {CA_CRT: ca.cert_pem, CA_KEY: ca.key_pem})


def node_secret(cluster: Cluster, ca_pem: bytes, node: CertKey) -> Obj:
    return _secret(cluster, cluster.node_secret,
                   {CA_CRT: ca_pem, NODE_CRT: node.cert_pem, NODE_KEY: node.key_pem})


def client_secret(cluster: Cluster, ca_pem: bytes, client: CertKey) -> Obj:
    return _secret(cluster, cluster.client_secret,
                   {CA_CRT: ca_pem, ROOT_CRT: client.cert_pem, ROOT_KEY: client.key_pem})


def user_secret(cluster: Cluster, user: str, ca_pem: bytes, client: CertKey) -> Obj:
    """A named SQL user's client Secret in both layouts (see the module docstring)."""
    crt, key = user_keys(user)
    return _secret(cluster, cluster.user_client_secret(user),
                   {CA_CRT: ca_pem, crt: client.cert_pem, key: client.key_pem,
                    TLS_CRT: client.cert_pem, TLS_KEY: client.key_pem})


# --- reading Secrets -------------------------------------------------------------------------


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


def _key(secret: Obj, key: str) -> PrivateKeyTypes:
    loaded = LOADED_KEYS.load(_raw(secret, key))
    if loaded is None:
        raise _Unusable(key, "not an unencrypted PEM private key")
    return loaded


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


def _name(secret: Obj) -> str:
    return str((secret.get("metadata") or {}).get("name", "?"))


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


def earliest_expiry(secret: Obj) -> datetime | None:
    """The earliest notAfter among every certificate in the Secret's `*.crt` keys (bundles
    included); None when the Secret holds no readable certificate."""
    expiries: list[datetime] = []
    for key in sorted(secret.get("data") or {}):
        if key.endswith(".crt"):
            try:
                expiries += [c.not_valid_after_utc for c in _certs(secret, key)]
            except _Unusable:
                return None
    return min(expiries) if expiries else None


def _aware(now: datetime) -> datetime:
    # Certificate times are UTC-aware; a naive `now` would fail deep inside a comparison.
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware, e.g. datetime.now(timezone.utc)")
    return now


def needs_renewal(secret: Obj | None, now: datetime,
                  renew_before: timedelta = timedelta(days=30)) -> bool:
    """True when the Secret's certificates must be (re)issued: the Secret is absent, a `*.crt` key
    does not parse, or the earliest certificate expires at or before now + renew_before."""
    _aware(now)
    if secret is None:
        return True
    expiry = earliest_expiry(secret)
    return expiry is None or expiry <= now + renew_before


def certs_hash(node: Obj | None, client: Obj | None,
               node_keys: tuple[str, str] = (CA_CRT, NODE_CRT),
               client_keys: tuple[str, str] = (CA_CRT, ROOT_CRT)) -> str | None:
    """Hash of the public certificates pods mount (ca.crt, node.crt, client.root.crt): changes
    whenever any of them is reissued. Keys are left out on purpose; a reissued certificate
    always comes with its new key. None when either Secret is absent. node_keys and client_keys
    name the (CA, certificate) keys in each Secret: tls.crt for a cert-manager layout (the
    default names keep the hash of KWDB-layout Secrets as it was)."""
    if node is None or client is None:
        return None
    digest = hashlib.sha256()
    for secret, keys in ((node, node_keys), (client, client_keys)):
        for key in keys:
            digest.update(key.encode() + b"\0")
            digest.update(str((secret.get("data") or {}).get(key, "")).encode() + b"\0")
    return digest.hexdigest()[:16]


# --- user-provided Secrets -------------------------------------------------------------------


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


# --- the plan for managed certificates -------------------------------------------------------


def _load_ca(secret: Obj) -> CertKey:
    cert = _cert(secret, CA_CRT)
    private = _key(secret, CA_KEY)
    if not isinstance(private, rsa.RSAPrivateKey):
        raise _Unusable(CA_KEY, "not an RSA private key")
    if not _key_matches(cert, private):
        raise _Unusable(CA_KEY, "the private key does not belong to ca.crt")
    return CertKey(cert, private)


def _leaf_fault(secret: Obj, crt: str, key: str, ca: CertKey, ca_pem: bytes,
                now: datetime, settings: CertSettings, cn: str,
                hosts: tuple[str, ...]) -> tuple[str | None, bool]:
    """Why a managed leaf Secret must be rewritten: (reason or None, whether the leaf itself must
    be reissued; False means only ca.crt is stale)."""
    try:
        cert = _cert(secret, crt)
        private = _key(secret, key)
    except _Unusable as err:
        return f"{err.key}: {err.message}", True
    if not _key_matches(cert, private):
        return f"{key} does not belong to {crt}", True
    if not _issued_by(cert, [ca.cert]):
        return f"{crt} is not signed by the cluster CA", True
    if _cn(cert) != cn:
        return f"{crt} has CN {_cn(cert)!r}, not {cn!r}", True
    expiry = cert.not_valid_after_utc
    if expiry <= now + settings.leaf_renew_before:
        return (f"{crt} expires at {expiry.isoformat()}, within the "
                f"{settings.leaf_renew_before.days}-day renewal window"), True
    missing = [h for h in hosts if not _covers_host(cert, h)]
    if missing:
        return f"{crt} does not cover {', '.join(missing)}", True
    try:
        current_ca = _raw(secret, CA_CRT)
    except _Unusable:
        current_ca = b""
    if current_ca != ca_pem:
        return f"{CA_CRT} differs from the cluster CA's certificate", False
    return None, False


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


def _with_resource_version(body: Obj, live: Obj) -> Obj:
    version = (live.get("metadata") or {}).get("resourceVersion")
    if version:
        body["metadata"]["resourceVersion"] = version
    return body


def _with_ca(cluster: Cluster, live: Obj, ca_pem: bytes) -> Obj:
    """The live leaf Secret as a managed body with only ca.crt replaced (the leaf is fine)."""
    data = {**(live.get("data") or {}), CA_CRT: base64.b64encode(ca_pem).decode()}
    body = _secret(cluster, _name(live), {})
    body["data"] = dict(sorted(data.items()))
    return _with_resource_version(body, live)


def _plan_leaf(cluster: Cluster, live: Obj | None, fresh: Callable[[], Obj], crt: str, key: str,
               cn: str, hosts: tuple[str, ...], ca: CertKey, now: datetime,
               settings: CertSettings, aliases: tuple[tuple[str, str], ...] = ()
               ) -> tuple[Obj, SecretWrite | None]:
    """The leaf Secret after the plan, and the write that gets it there (None: keep live).
    aliases: (copy, original) keys that must hold the same value (tls.crt = client.<user>.crt);
    a copy that differs or is missing gets the Secret reissued whole."""
    if live is None:
        body = fresh()
        return body, SecretWrite("create", body, "new certificate")
    reason, reissue = _leaf_fault(live, crt, key, ca, ca.cert_pem, now, settings, cn, hosts)
    if reason is None or not reissue:
        data = live.get("data") or {}
        stale = [copy for copy, original in aliases if data.get(copy) != data.get(original)]
        if stale:
            reason, reissue = f"{', '.join(stale)} differ from {crt}, {key}", True
    if reason is None:
        return live, None
    body = (_with_resource_version(fresh(), live) if reissue
            else _with_ca(cluster, live, ca.cert_pem))
    return body, SecretWrite("update", body, reason)


def certs_action(cluster: Cluster, secrets: Mapping[str, Obj], now: datetime,
                 cluster_domain: str = "cluster.local",
                 settings: CertSettings = CertSettings()) -> CertsPlan:
    """Decide what to do about a cluster's certificates.

    secrets: the live Secrets of the cluster's namespace by name (at least the CA, node and
    client Secret names when they exist; others are ignored). now: a timezone-aware time.
    Managed mode: create what is missing; reissue leaves that are unreadable, mismatched, not
    signed by the CA, wrong in CN or SANs, or inside leaf_renew_before of expiry; renew the CA
    certificate (keeping its key) inside ca_renew_before; refresh stale ca.crt copies. A CA Secret
    that is missing or unusable while leaf Secrets exist is a problem, not a reason to make a new
    CA: running pods trust the old one, so a new CA would need every pod restarted at once, which
    is the user's decision (the fix says how).
    """
    _aware(now)
    if not cluster.tls:
        return CertsPlan()
    node_live = secrets.get(cluster.node_secret)
    client_live = secrets.get(cluster.client_secret)
    if cluster.user_provided_certs:
        problems, warnings = validate_user_secrets(
            cluster, node_live, client_live, now, cluster_domain, settings.leaf_renew_before)
        return CertsPlan(certs_hash=_pods_hash(cluster, node_live, client_live),
                         problems=problems, warnings=warnings)

    ca_name = ca_secret_name(cluster)
    ca_live = secrets.get(ca_name)
    writes: list[SecretWrite] = []
    if ca_live is None:
        if node_live is not None or client_live is not None:
            return _ca_lost(cluster, node_live, client_live, "the Secret does not exist")
        ca = new_ca(ca_common_name(cluster), now, settings)
        writes.append(SecretWrite("create", ca_secret(cluster, ca), "new cluster CA"))
    else:
        try:
            ca = _load_ca(ca_live)
        except _Unusable as err:
            if node_live is not None or client_live is not None:
                return _ca_lost(cluster, node_live, client_live, f"{err.key}: {err.message}")
            ca = new_ca(ca_common_name(cluster), now, settings)
            writes.append(SecretWrite("update", _with_resource_version(
                ca_secret(cluster, ca), ca_live), f"{err.key}: {err.message}"))
        else:
            expiry = ca.cert.not_valid_after_utc
            if expiry <= now + settings.ca_renew_before:
                ca = renew_ca(ca, now, settings)
                writes.append(SecretWrite("update", _with_resource_version(
                    ca_secret(cluster, ca), ca_live),
                    f"CA certificate expires at {expiry.isoformat()}: renewed with the same key"))
    hosts = node_hosts(cluster, cluster_domain)
    node_body, node_write = _plan_leaf(
        cluster, node_live,
        lambda: node_secret(cluster, ca.cert_pem, issue_node(ca, hosts, now, settings)),
        NODE_CRT, NODE_KEY, "node", hosts, ca, now, settings)
    client_body, client_write = _plan_leaf(
        cluster, client_live,
        lambda: client_secret(cluster, ca.cert_pem, issue_client(ca, "root", now, settings)),
        ROOT_CRT, ROOT_KEY, "root", (), ca, now, settings)
    leaf_writes = [w for w in (node_write, client_write) if w is not None]
    writes += leaf_writes
    for user in cluster.client_users:
        crt, key = user_keys(user)
        _, user_write = _plan_leaf(
            cluster, secrets.get(cluster.user_client_secret(user)),
            partial(_new_user_secret, cluster, user, ca, now, settings),
            crt, key, user, (), ca, now, settings, aliases=((TLS_CRT, crt), (TLS_KEY, key)))
        if user_write is not None:
            writes.append(user_write)
    # Only the node and root Secrets are mounted by pods: a user's renewal restarts nothing.
    return CertsPlan(writes=tuple(writes), certs_hash=certs_hash(node_body, client_body),
                     restart=any(w.verb == "update" for w in leaf_writes))


def _new_user_secret(cluster: Cluster, user: str, ca: CertKey, now: datetime,
                     settings: CertSettings) -> Obj:
    return user_secret(cluster, user, ca.cert_pem, issue_client(ca, user, now, settings))


def secret_names(cluster: Cluster) -> tuple[str, ...]:
    """Every certificate Secret certs_action reads for the cluster: CA, node, root client and
    one per spec.tls.clientUsers entry (the controller's certificates step fetches these)."""
    return (ca_secret_name(cluster), cluster.node_secret, cluster.client_secret,
            *(cluster.user_client_secret(user) for user in cluster.client_users))


def _pods_hash(cluster: Cluster, node: Obj | None, client: Obj | None) -> str | None:
    """certs_hash over the keys the pods mount, in the cluster's Secret layout."""
    node_ca, node_crt, _ = cluster.node_secret_keys
    client_ca, root_crt, _ = cluster.client_secret_keys
    return certs_hash(node, client, (node_ca, node_crt), (client_ca, root_crt))


def _ca_lost(cluster: Cluster, node: Obj | None, client: Obj | None, why: str) -> CertsPlan:
    ca_name = ca_secret_name(cluster)
    problem = CertProblem(
        ca_name, "", f"the cluster CA is unusable ({why}) while {cluster.node_secret} or "
        f"{cluster.client_secret} still exist, so certificates can be neither issued nor renewed",
        f"restore {ca_name} from a backup; or delete {cluster.node_secret} and "
        f"{cluster.client_secret} as well to have a new CA and certificates issued (every pod "
        "must then be restarted together, since old and new certificates do not trust each "
        "other)")
    return CertsPlan(certs_hash=certs_hash(node, client), problems=(problem,))
