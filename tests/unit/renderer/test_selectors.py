"""Stories about selectors with two KaiwuDB clusters in one namespace: every rendered object that
selects pods (Services, the PodDisruptionBudget, the NetworkPolicy) selects exactly the pods of
its own StatefulSet, and never the other cluster's; the ServiceMonitor selects only its own
cluster's client Service. (Before this, only golden files, which a developer refreshes on
purpose, would catch a selector that matches every KaiwuDB cluster in the namespace.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from renderer.loader import parse_text
from renderer.render import build_objects, read_clusters
from renderer.settings import RenderSettings

NAMESPACE = "shop"


def render(name: str) -> list[dict[str, Any]]:
    obj = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
           "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"replicas": 3, "tls": {"enabled": False},
                    "networkPolicy": {"enabled": True},
                    "monitoring": {"serviceMonitor": True}}}
    source = read_clusters(parse_text(json.dumps(obj), f"{name}.yaml"))[0]
    return build_objects(source.cluster, RenderSettings())


def pod_selector(obj: dict[str, Any]) -> dict[str, str] | None:
    """The labels an object selects pods by (None when it selects no pods)."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Service":
        return dict(spec.get("selector") or {})
    if obj["kind"] in ("PodDisruptionBudget", "StatefulSet"):
        return dict(spec["selector"]["matchLabels"])
    if obj["kind"] == "NetworkPolicy":
        return dict(spec["podSelector"]["matchLabels"])
    return None


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


CLUSTERS = {name: render(name) for name in ("orders", "billing")}


def statefulset(name: str) -> dict[str, Any]:
    return next(obj for obj in CLUSTERS[name] if obj["kind"] == "StatefulSet")


def test_both_clusters_render_every_kind_that_selects() -> None:
    for objects in CLUSTERS.values():
        kinds = sorted(obj["kind"] for obj in objects if pod_selector(obj) is not None)
        assert kinds == ["NetworkPolicy", "PodDisruptionBudget", "Service", "Service",
                         "StatefulSet"]


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_every_pod_selector_equals_the_statefulsets_and_misses_the_other_cluster(
        name: str) -> None:
    own = statefulset(name)
    other = statefulset("billing" if name == "orders" else "orders")
    own_pods = own["spec"]["template"]["metadata"]["labels"]
    other_pods = other["spec"]["template"]["metadata"]["labels"]
    assert matches(own["spec"]["selector"]["matchLabels"], own_pods)
    for obj in CLUSTERS[name]:
        selector = pod_selector(obj)
        if selector is None:
            continue
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert selector == own["spec"]["selector"]["matchLabels"], where
        assert matches(selector, own_pods), where
        assert not matches(selector, other_pods), f"{where} selects {other['metadata']['name']}"


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_the_service_monitor_selects_only_its_own_client_service(name: str) -> None:
    monitor = next(obj for obj in CLUSTERS[name] if obj["kind"] == "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [f"{cluster}/{obj['metadata']['name']}" for cluster, objects in CLUSTERS.items()
                for obj in objects if obj["kind"] == "Service"
                and matches(selector, obj["metadata"].get("labels") or {})]
    client = [obj["metadata"]["name"] for obj in CLUSTERS[name] if obj["kind"] == "Service"
              and "clusterIP" not in obj["spec"]]
    assert len(selected) == 1 and selected[0].startswith(f"{name}/"), selected
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert client, "the client Service is rendered"
