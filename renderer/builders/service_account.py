"""ServiceAccount of the KaiwuDB pods: no API token mounted, kwbase never talks to Kubernetes."""

from __future__ import annotations

from typing import Any

from renderer.builders import metadata
from renderer.spec import Cluster


def build(cluster: Cluster, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": metadata(cluster, name),
            "automountServiceAccountToken": False}
