"""Helpers of the drift stories (tests/world_stories/drift/): the dev example cluster with a
PodDisruptionBudget, parked (its pods stay Pending), and the edits kubectl makes to its
StatefulSet.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.harness import example, parked

NAME = "dev"


RENDERED_IMAGE = "kwdb/kwdb:3.2.1"


def dev_with_pdb(namespace: str, **spec: Any) -> Obj:
    obj = parked(example("dev", namespace))
    obj["spec"]["podDisruptionBudget"] = {"enabled": True}
    obj["spec"].update(spec)
    return obj


def sts(kube: k8s.ApiClient, namespace: str) -> Obj:
    found = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert found is not None
    return found


def container(obj: Obj) -> dict[str, Any]:
    kwbase: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return kwbase


def set_image(kube: k8s.ApiClient, namespace: str) -> None:
    k8s.AppsV1Api(kube).patch_namespaced_stateful_set(NAME, namespace, {"spec": {"template": {
        "spec": {"containers": [{"name": "kwbase", "image": "kwdb/kwdb:9.9.9"}]}}}},
        field_manager="kubectl-set")


def scale(kube: k8s.ApiClient, namespace: str) -> None:
    k8s.AppsV1Api(kube).patch_namespaced_stateful_set_scale(
        NAME, namespace, {"spec": {"replicas": 5}}, field_manager="kubectl-scale")
