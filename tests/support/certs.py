"""The operator's TLS certificates as the certificates and client-user stories build them: a
cluster with TLS settings (`make_cluster`), and the Secrets a plan leaves stored (`stored`).
Used by tests/unit/reconciler/kaiwudb/test_certs.py and test_client_users.py.
"""

from __future__ import annotations

import copy
from typing import Any

from reconciler.kaiwudb.certs.rotation import CertsPlan
from reconciler.model import Obj
from renderer.schema import apply_defaults
from renderer.spec import Cluster


def make_cluster(name: str = "orders", namespace: str = "shop", replicas: int = 3,
                 **tls: Any) -> Cluster:
    obj = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"version": "3.2.1", "replicas": replicas, "tls": tls}}
    return Cluster.from_object(apply_defaults(obj))


def stored(plan: CertsPlan, version: str = "1") -> dict[str, Obj]:
    """The Secrets as the API server would hold them after the controller applied the plan."""
    result = {}
    for write in plan.writes:
        body = copy.deepcopy(write.secret)
        body["metadata"]["resourceVersion"] = version
        result[write.name] = body
    return result
