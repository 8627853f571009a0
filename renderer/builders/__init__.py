"""One small builder per Kubernetes kind; this module holds what they all share.

`renderer.render.build_objects` calls every builder for one `Cluster`, under the name
`renderer.render.BUILDERS` gives the object (and only for the objects the spec turns on); each
builder returns plain dicts. Labels and ports are decided here once, so the Services, the
StatefulSet and the reconciler agree.
"""

from __future__ import annotations

from typing import Any

from renderer.spec import Cluster

SQL_PORT = 26257
HTTP_PORT = 8080
BRPC_PORT = 27257  # advertised as <host>:27257, so never remapped by a Service
DATA_DIR = "/kaiwudb/deploy/data"
CERTS_DIR = "/kaiwudb/certs"
KWBASE = "/kaiwudb/bin/kwbase"
CONTAINER = "kwbase"
DATA_VOLUME = "data"
MANAGED_BY = "kaiwu-operator"
# The label keys the reconciler selects and recognises our objects by.
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
# KWDB's upgrade ends with a start with --upgrade-complete (kwbase/pkg/cli/start.go:711-715),
# and only that start: the reconciler switches it in the cluster's start-flags ConfigMap
# (Cluster.start_flags_config_map), which every pod reads at each container start.
UPGRADE_COMPLETE_KEY = "upgrade-complete"
UPGRADE_COMPLETE_ENV = "KAIWU_UPGRADE_COMPLETE"
# On the pod template: a hash of the certificates the pods run with (a renewal rolls them).
CERTS_HASH_ANNOTATION = "kaiwu.inspur.com/certs-hash"


def selector_labels(cluster: Cluster) -> dict[str, str]:
    """The labels that select a cluster's pods (immutable in a StatefulSet: keep them few)."""
    return {INSTANCE_LABEL: cluster.name, "app.kubernetes.io/name": "kaiwudb"}


def common_labels(cluster: Cluster) -> dict[str, str]:
    """Labels on every rendered object: the user's, then ours (ours win)."""
    return {**dict(cluster.labels), **selector_labels(cluster),
            "app.kubernetes.io/component": "database",
            MANAGED_BY_LABEL: MANAGED_BY}


def metadata(cluster: Cluster, name: str, **extra_annotations: str) -> dict[str, Any]:
    """Object metadata with the cluster's labels and annotations."""
    meta: dict[str, Any] = {"name": name, "namespace": cluster.namespace,
                            "labels": common_labels(cluster)}
    annotations = {**dict(cluster.annotations), **extra_annotations}
    if annotations:
        meta["annotations"] = annotations
    return meta
