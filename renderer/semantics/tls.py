"""spec.tls beyond the schema: your own certificates name both Secrets, and the client users the
operator issues certificates for are valid, few, not reserved, and need its managed CA and TLS.

Called by renderer.semantics (check).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from renderer.semantics.violation import Path, Violation

# spec.tls.clientUsers (the CRD's pattern too): a SQL name needing no quotes, and a Secret name
# once `_` becomes `-`.
SQL_USER = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")
# root has its own Secret; a client certificate with CN node would authenticate as a node.
RESERVED_USERS = {"root": "root's certificate is the cluster's <cluster>-root-client-certs",
                  "node": "a certificate with CN node authenticates as a KaiwuDB node"}
MAX_CLIENT_USERS = 20


def check_tls(tls: dict[str, Any]) -> Iterator[Violation]:
    """spec.tls beyond the schema: both Secrets or neither, client user names, and what needs
    managed certificates."""
    path: Path = ("spec", "tls")
    if bool(tls.get("nodeSecretName")) != bool(tls.get("clientSecretName")):
        yield Violation(path,
                        "name both nodeSecretName and clientSecretName, or neither",
                        "your own certificates need both Secrets; leave both empty to let the "
                        "operator manage them")
    own = bool(tls.get("nodeSecretName"))
    users = tls.get("clientUsers", [])
    if len(users) > MAX_CLIENT_USERS:
        yield Violation((*path, "clientUsers"), f"{len(users)} users are listed",
                        f"list at most {MAX_CLIENT_USERS}")
    seen: set[str] = set()
    for index, name in enumerate(users):
        where = (*path, "clientUsers", index)
        if not (isinstance(name, str) and SQL_USER.match(name)):
            yield Violation(where, f"{name!r} is not a SQL user name this operator issues for",
                            "use a lower-case letter, then lower-case letters, digits or '_', "
                            "at most 32 characters")
        elif name in RESERVED_USERS:
            yield Violation(where, f"{name!r} is reserved: {RESERVED_USERS[name]}",
                            "remove it" if name == "root" else "choose another user name")
        elif name in seen:
            yield Violation(where, f"{name!r} is listed twice", "keep one")
        seen.add(name)
    if users and own:
        yield Violation((*path, "clientUsers"),
                        "client certificates are issued with the cluster's CA, which the "
                        "reconciler holds only when it manages the certificates",
                        "issue them with your own CA, or clear nodeSecretName and "
                        "clientSecretName")
    if users and not tls["enabled"]:
        yield Violation((*path, "clientUsers"), "client certificates need TLS",
                        "set spec.tls.enabled: true, or remove clientUsers")
    if tls.get("secretLayout", "kwbase") != "kwbase" and not own:
        yield Violation((*path, "secretLayout"),
                        f"secretLayout {tls['secretLayout']} describes your own Secrets, and "
                        "none are named",
                        "set nodeSecretName and clientSecretName, or remove secretLayout")
