"""ServiceMonitor (optional, needs the prometheus-operator CRDs): scrape KaiwuDB's /_status/vars.

KWDB serves its Prometheus page at `/_status/vars` on the HTTP port, without authentication
(kwbase/pkg/server/status.go:96-97, server/server.go:2219-2220 at KWDB V3.2.1), over TLS in
secure mode: a plain-HTTP request there is only redirected to https (server/server.go:2621-2658),
and the certificate served is the node certificate (security/certificate_manager.go:603-607),
verified here against the cluster's CA. The relabelings give every scraped series the labels
the shipped alert rules and dashboard group by (deploy/monitoring/kaiwu-rules.yaml, group
`kaiwudb`): `job="kaiwudb"` (the job name of KWDB's own monitoring/prometheus.yml, so its
dashboards work unchanged too) and `cluster` (the KaiwuCluster's name; the operator adds
`namespace` and `pod` itself). deploy/monitoring/kaiwudb-podmonitor.yaml is the same scrape,
written by hand, for a cluster rendered without this object.
"""

from __future__ import annotations

from typing import Any

from renderer.builders import metadata, selector_labels
from renderer.builders.service import CLIENT_ROLE_LABEL
from renderer.settings import RenderSettings
from renderer.spec import Cluster

# The `job` label of every KaiwuDB series: what the rules in deploy/monitoring select.
KWDB_JOB = "kaiwudb"


def relabelings(cluster: Cluster) -> list[dict[str, Any]]:
    """Target labels for the alert rules. `action: replace` is written out (it is the CRD's
    default) so the API server adds nothing the drift check would have to explain."""
    return [{"action": "replace", "targetLabel": "job", "replacement": KWDB_JOB},
            {"action": "replace", "targetLabel": "cluster", "replacement": cluster.name}]


def build(cluster: Cluster, settings: RenderSettings, name: str) -> dict[str, Any]:
    """The monitor, when the spec asks for one (renderer.render.BUILDERS asks)."""
    endpoint: dict[str, Any] = {"port": "http", "path": "/_status/vars",
                                "interval": cluster.scrape_interval,
                                "scheme": "https" if cluster.tls else "http",
                                "relabelings": relabelings(cluster)}
    if cluster.tls:
        endpoint["tlsConfig"] = {
            "ca": {"secret": {"name": cluster.node_secret, "key": "ca.crt"}},
            "serverName": (f"{cluster.client_service}.{cluster.namespace}.svc."
                           f"{settings.cluster_domain}")}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": metadata(cluster, name),
            "spec": {"selector": {"matchLabels": {**selector_labels(cluster),
                                                  CLIENT_ROLE_LABEL: "public"}},
                     "namespaceSelector": {"matchNames": [cluster.namespace]},
                     "endpoints": [endpoint]}}
