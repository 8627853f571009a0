"""ServiceMonitor (optional, needs the prometheus-operator CRDs): scrape /_status/vars."""

from __future__ import annotations

from typing import Any

from renderer.builders import metadata, selector_labels
from renderer.builders.service import CLIENT_ROLE_LABEL
from renderer.settings import RenderSettings
from renderer.spec import Cluster


def build(cluster: Cluster, settings: RenderSettings) -> dict[str, Any] | None:
    if not cluster.service_monitor:
        return None
    endpoint: dict[str, Any] = {"port": "http", "path": "/_status/vars",
                                "interval": cluster.scrape_interval,
                                "scheme": "https" if cluster.tls else "http"}
    if cluster.tls:
        endpoint["tlsConfig"] = {
            "ca": {"secret": {"name": cluster.node_secret, "key": "ca.crt"}},
            "serverName": (f"{cluster.client_service}.{cluster.namespace}.svc."
                           f"{settings.cluster_domain}")}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": metadata(cluster, cluster.name),
            "spec": {"selector": {"matchLabels": {**selector_labels(cluster),
                                                  CLIENT_ROLE_LABEL: "public"}},
                     "namespaceSelector": {"matchNames": [cluster.namespace]},
                     "endpoints": [endpoint]}}
