"""PodDisruptionBudget: voluntary disruptions (drains) never take more than one node at a time.

policy/v1 exists from Kubernetes 1.21; older targets get policy/v1beta1 (same fields we use).
"""

from __future__ import annotations

from typing import Any

from renderer.builders import metadata, selector_labels
from renderer.settings import KubeVersion, RenderSettings
from renderer.spec import Cluster

POLICY_V1 = KubeVersion(1, 21)


def build(cluster: Cluster, settings: RenderSettings, name: str) -> dict[str, Any]:
    """The budget, when the spec enables it (renderer.render.BUILDERS asks)."""
    api = "policy/v1" if settings.kube_version >= POLICY_V1 else "policy/v1beta1"
    return {"apiVersion": api, "kind": "PodDisruptionBudget",
            "metadata": metadata(cluster, name),
            "spec": {"maxUnavailable": cluster.pdb_max_unavailable,
                     "selector": {"matchLabels": selector_labels(cluster)}}}
