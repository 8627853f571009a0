"""What to do about a cluster's certificates, once per reconcile: create what is missing, reissue
leaves and renew the CA before they expire (rotation), refresh stale ca.crt copies, or, for
user-provided Secrets, report what is wrong (CertsPlan).

Called by the controller's certificates step (reconciler.controller.certificates) for a cluster
with `spec.tls.enabled`, through `certs_action`. Contract with the controller
(`certs_action(cluster, secrets, now) -> CertsPlan`):
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
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Literal

from cryptography.hazmat.primitives.asymmetric import rsa

from reconciler.kaiwudb.certs.authority import ca_common_name, new_ca, renew_ca
from reconciler.kaiwudb.certs.keys import (
    CertKey,
    CertSettings,
    _aware,
    _cert,
    _cn,
    _covers_host,
    _issued_by,
    _key,
    _key_matches,
    _name,
    _raw,
    _Unusable,
)
from reconciler.kaiwudb.certs.layout import (
    CA_CRT,
    CA_KEY,
    NODE_CRT,
    NODE_KEY,
    ROOT_CRT,
    ROOT_KEY,
    TLS_CRT,
    TLS_KEY,
    _secret,
    ca_secret,
    ca_secret_name,
    certs_hash,
    client_secret,
    node_secret,
    user_keys,
    user_secret,
)
from reconciler.kaiwudb.certs.leaves import issue_client, issue_node, node_hosts
from reconciler.kaiwudb.certs.user_secrets import CertProblem, format_problem, validate_user_secrets
from reconciler.model import Obj
from renderer.spec import Cluster


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


def _load_ca(secret: Obj) -> CertKey:
    cert = _cert(secret, CA_CRT)
    private = _key(secret, CA_KEY)
    if not isinstance(private, rsa.RSAPrivateKey):
        raise _Unusable(CA_KEY, "not an RSA private key")
    if not _key_matches(cert, private):
        raise _Unusable(CA_KEY, "the private key does not belong to ca.crt")
    return CertKey(cert, private)


@dataclass(frozen=True)
class Issuer:
    """The cluster CA as this pass leaves it, when (now) and how (settings) it issues leaves."""

    ca: CertKey
    now: datetime
    settings: CertSettings


@dataclass(frozen=True)
class Leaf:
    """A managed leaf Secret as the plan wants it.

    crt, key: the keys holding its certificate and private key.
    cn, hosts: the common name and the hosts (DNS names or IP addresses) its certificate must
        have.
    fresh: issues a new certificate and returns the whole Secret body.
    aliases: (copy, original) keys that must hold the same value (tls.crt = client.<user>.crt);
        a copy that differs or is missing gets the Secret reissued whole.
    """

    crt: str
    key: str
    cn: str
    fresh: Callable[[], Obj] = field(repr=False, compare=False)
    hosts: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()


def _leaf_fault(secret: Obj, leaf: Leaf, issuer: Issuer) -> tuple[str | None, bool]:
    """Why a managed leaf Secret must be rewritten: (reason or None, whether the leaf itself must
    be reissued; False means only ca.crt is stale)."""
    crt, key, settings = leaf.crt, leaf.key, issuer.settings
    try:
        cert = _cert(secret, crt)
        private = _key(secret, key)
    except _Unusable as err:
        return f"{err.key}: {err.message}", True
    if not _key_matches(cert, private):
        return f"{key} does not belong to {crt}", True
    if not _issued_by(cert, [issuer.ca.cert]):
        return f"{crt} is not signed by the cluster CA", True
    if _cn(cert) != leaf.cn:
        return f"{crt} has CN {_cn(cert)!r}, not {leaf.cn!r}", True
    expiry = cert.not_valid_after_utc
    if expiry <= issuer.now + settings.leaf_renew_before:
        return (f"{crt} expires at {expiry.isoformat()}, within the "
                f"{settings.leaf_renew_before.days}-day renewal window"), True
    missing = [h for h in leaf.hosts if not _covers_host(cert, h)]
    if missing:
        return f"{crt} does not cover {', '.join(missing)}", True
    try:
        current_ca = _raw(secret, CA_CRT)
    except _Unusable:
        current_ca = b""
    if current_ca != issuer.ca.cert_pem:
        return f"{CA_CRT} differs from the cluster CA's certificate", False
    return None, False


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


def _plan_leaf(cluster: Cluster, live: Obj | None, leaf: Leaf, issuer: Issuer
               ) -> tuple[Obj, SecretWrite | None]:
    """The leaf Secret after the plan, and the write that gets it there (None: keep live)."""
    if live is None:
        body = leaf.fresh()
        return body, SecretWrite("create", body, "new certificate")
    reason, reissue = _leaf_fault(live, leaf, issuer)
    if reason is None or not reissue:
        data = live.get("data") or {}
        stale = [copy for copy, original in leaf.aliases
                 if data.get(copy) != data.get(original)]
        if stale:
            reason, reissue = f"{', '.join(stale)} differ from {leaf.crt}, {leaf.key}", True
    if reason is None:
        return live, None
    body = (_with_resource_version(leaf.fresh(), live) if reissue
            else _with_ca(cluster, live, issuer.ca.cert_pem))
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
    issuer = Issuer(ca, now, settings)
    node_body, node_write = _plan_leaf(cluster, node_live, Leaf(
        NODE_CRT, NODE_KEY, "node",
        lambda: node_secret(cluster, ca.cert_pem, issue_node(ca, hosts, now, settings)),
        hosts=hosts), issuer)
    client_body, client_write = _plan_leaf(cluster, client_live, Leaf(
        ROOT_CRT, ROOT_KEY, "root",
        lambda: client_secret(cluster, ca.cert_pem, issue_client(ca, "root", now, settings))),
        issuer)
    leaf_writes = [w for w in (node_write, client_write) if w is not None]
    writes += leaf_writes
    for user in cluster.client_users:
        crt, key = user_keys(user)
        _, user_write = _plan_leaf(
            cluster, secrets.get(cluster.user_client_secret(user)),
            Leaf(crt, key, user, partial(_new_user_secret, cluster, user, ca, now, settings),
                 aliases=((TLS_CRT, crt), (TLS_KEY, key))), issuer)
        if user_write is not None:
            writes.append(user_write)
    # Only the node and root Secrets are mounted by pods: a user's renewal restarts nothing.
    return CertsPlan(writes=tuple(writes), certs_hash=certs_hash(node_body, client_body),
                     restart=any(w.verb == "update" for w in leaf_writes))


def _new_user_secret(cluster: Cluster, user: str, ca: CertKey, now: datetime,
                     settings: CertSettings) -> Obj:
    return user_secret(cluster, user, ca.cert_pem, issue_client(ca, user, now, settings))


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
