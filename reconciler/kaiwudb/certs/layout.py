"""The Secret layout: which Secrets a cluster's certificates live in, under which keys, how their
bodies are built, and what is read from them as a whole (the earliest expiry, the hash of what
pods mount).

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
All carry app.kubernetes.io/managed-by=kaiwu-operator, app.kubernetes.io/instance=N and
reconciler.kube.kinds.TLS_SECRET_LABEL. With user-provided Secrets (`nodeSecretName` and
`clientSecretName` set) they hold KWDB's key names or, with `spec.tls.secretLayout: cert-manager`,
ca.crt, tls.crt, tls.key (Cluster.node_secret_keys and client_secret_keys say which).

Called by reconciler.kaiwudb.certs.rotation and user_secrets, the controller's certificates step
(reconciler.controller.certificates: secret_names, unmarked_secrets, earliest_expiry) and
tests.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta

from reconciler.kaiwudb.certs.keys import CertKey, _aware, _certs, _Unusable
from reconciler.kube.kinds import TLS_SECRET_LABEL
from reconciler.model import Obj
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from renderer.spec import Cluster


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


# cert-manager's key names (a kubernetes.io/tls Secret plus ca.crt).
TLS_CRT, TLS_KEY = "tls.crt", "tls.key"


def user_keys(user: str) -> tuple[str, str]:
    """KWDB's file names for a SQL user's client certificate and key."""
    return f"client.{user}.crt", f"client.{user}.key"


def ca_secret_name(cluster: Cluster) -> str:
    return f"{cluster.name}-ca"


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


def secret_names(cluster: Cluster) -> tuple[str, ...]:
    """Every certificate Secret certs_action reads for the cluster: CA, node, root client and
    one per spec.tls.clientUsers entry (the controller's certificates step fetches these)."""
    return (ca_secret_name(cluster), cluster.node_secret, cluster.client_secret,
            *(cluster.user_client_secret(user) for user in cluster.client_users))
