"""NetworkPolicy (optional): peers reach each other on every port; clients reach SQL and HTTP.

Namespaces are matched by the `kubernetes.io/metadata.name` label, which Kubernetes sets itself
from 1.21; on older clusters label the allowed namespaces by hand.
"""

from __future__ import annotations

from typing import Any

from renderer.builders import BRPC_PORT, HTTP_PORT, SQL_PORT, metadata, selector_labels
from renderer.spec import Cluster


def build(cluster: Cluster, name: str) -> dict[str, Any]:
    """The policy, when the spec enables it (renderer.render.BUILDERS asks)."""
    peers = {"from": [{"podSelector": {"matchLabels": selector_labels(cluster)}}],
             "ports": [{"port": port, "protocol": "TCP"}
                       for port in (SQL_PORT, HTTP_PORT, BRPC_PORT)]}
    clients: dict[str, Any] = {"ports": [{"port": port, "protocol": "TCP"}
                                         for port in (SQL_PORT, HTTP_PORT)]}
    if cluster.allowed_namespaces:
        clients["from"] = [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
            for namespace in cluster.allowed_namespaces]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata(cluster, name),
            "spec": {"podSelector": {"matchLabels": selector_labels(cluster)},
                     "policyTypes": ["Ingress"], "ingress": [peers, clients]}}
