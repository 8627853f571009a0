"""The two Services: headless for peer discovery and stable pod DNS, client for SQL and HTTP."""

from __future__ import annotations

from typing import Any

from renderer.builders import BRPC_PORT, HTTP_PORT, SQL_PORT, metadata, selector_labels
from renderer.spec import Cluster

CLIENT_ROLE_LABEL = "kaiwu.inspur.com/service"


def _port(name: str, number: int) -> dict[str, Any]:
    return {"name": name, "port": number, "protocol": "TCP", "targetPort": name}


def build_headless(cluster: Cluster, name: str) -> dict[str, Any]:
    """Every pod gets <pod>.<name>.<ns>.svc DNS, published before it is ready (for --join)."""
    meta = metadata(cluster, name)
    meta["labels"][CLIENT_ROLE_LABEL] = "peers"
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "ports": [_port("sql", SQL_PORT), _port("http", HTTP_PORT),
                      _port("brpc", BRPC_PORT)],
            "selector": selector_labels(cluster),
        },
    }


def build_client(cluster: Cluster, name: str) -> dict[str, Any]:
    """Load-balanced SQL (26257) and HTTP (8080) over ready pods only."""
    meta = metadata(cluster, name, **dict(cluster.service_annotations))
    meta["labels"][CLIENT_ROLE_LABEL] = "public"
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {
            "type": cluster.service_type,
            "ports": [_port("sql", SQL_PORT), _port("http", HTTP_PORT)],
            "selector": selector_labels(cluster),
        },
    }
