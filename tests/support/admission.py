"""What the admission stories judge a KaiwuCluster change against: the cluster db/orders, the
StatefulSet that remembers the spec it was applied from (`accepted_statefulset`) and its pods,
as the watch caches show them (`View`). Used by tests/unit/reconciler/controller/
test_admission.py and the webhook stories (tests/unit/reconciler/runtime/test_webhook.py).
"""

from __future__ import annotations

from typing import Any

from reconciler.controller import admission
from reconciler.model import Obj
from tests.support.peeks import Peeks

NS, NAME = "db", "orders"


def cluster(**spec: Any) -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": NAME, "namespace": NS, "uid": "uid-1", "generation": 1},
            "spec": {"tls": {"enabled": False}, **spec}}


def accepted_statefulset(annotation: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": NAME, "namespace": NS,
                         "annotations": {admission.ACCEPTED_ANNOTATION: annotation},
                         "ownerReferences": [{"uid": "uid-1", "controller": True,
                                              "kind": "KaiwuCluster", "name": NAME}]}}


class View(Peeks):
    """The watch caches: a StatefulSet and pods by name (`peek`: tests.support.peeks)."""

    def __init__(self, *objects: Obj) -> None:
        self.objects = objects

    def get(self, kind: Any, namespace: str, name: str) -> Obj | None:
        return next((o for o in self.objects if o["kind"] == kind.kind
                     and o["metadata"]["name"] == name), None)

    def list(self, kind: Any, namespace: str, labels: Any = None) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind.kind]


def pod(name: str, version: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"app.kubernetes.io/instance": NAME}},
            "spec": {"containers": [{"name": "kwbase", "image": f"kwdb/kwdb:{version}"}]}}
