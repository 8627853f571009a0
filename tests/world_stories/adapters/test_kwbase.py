"""The kwbase admin adapter through the real apiserver's exec, into pods of a rendered cluster.

Story: a user's secure KaiwuCluster is rendered, its certificate Secrets made by
reconciler.kaiwudb.certs, and everything created in the test world; the simulated kubelet starts
the pods, which wait for init. The adapter, exec'ing through the real kube-apiserver
(reconciler.kube.client.Kube.exec), initialises the cluster once (a second init is success),
reads node status until every node is live and mapped to its pod, the pods turn Ready, and a
pod that does not exist is an ExecFailed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s

from reconciler.kaiwudb.certs.rotation import certs_action
from reconciler.kaiwudb.kwbase.admin import InitOutcome, KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import ExecFailed
from reconciler.kaiwudb.kwbase.nodes import NodeStatus
from reconciler.kube.client import Kube
from reconciler.kube.kinds import POD
from renderer.render import build_objects, read_live
from renderer.schema import apply_defaults
from renderer.settings import KubeVersion, RenderSettings
from renderer.spec import Cluster
from tests.support.waiting import eventually
from tests.world.simworld import SimWorld

NAME = "orders"



def kaiwu_cluster(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {"version": "3.2.1", "replicas": 3,
                     "storage": {"size": "1Gi"},
                     "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}}


def container_state(pod: dict[str, Any]) -> tuple[bool, bool]:
    """(kwbase container running, pod Ready)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    running = any(s.get("name") == "kwbase" and "running" in (s.get("state") or {})
                  for s in statuses)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or [])
    return running, ready


def test_init_and_node_status_through_the_real_exec_path(
        sim_world: SimWorld, kube: k8s.ApiClient, namespace: str) -> None:
    api = Kube(kube, "kaiwu-reconciler-test")
    obj = kaiwu_cluster(namespace)
    cluster = Cluster.from_object(apply_defaults(obj))
    assert cluster.tls, "the default is secure mode: certificates in /kaiwudb/certs"
    plan = certs_action(cluster, {}, datetime.now(UTC))
    for write in plan.writes:
        api.create(write.secret)
    # What the reconciler makes with every cluster: the pods' start flags (upgrade.py).
    api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": cluster.start_flags_config_map, "namespace": namespace},
        "data": {"upgrade-complete": "false"}})
    settings = RenderSettings(kube_version=KubeVersion.parse(api.server_version()))
    for rendered in build_objects(read_live(obj), settings):
        api.create(rendered)

    def pods(want_ready: bool) -> list[str] | None:
        names = [f"{NAME}-{i}" for i in range(3)]
        found = [api.get(POD, namespace, name) for name in names]
        states = [container_state(p) if p else (False, False) for p in found]
        if all(running and (ready or not want_ready) for running, ready in states):
            return names
        return None

    eventually(lambda: pods(want_ready=False), 90, "three pods with kwbase running")
    admin = KwbaseAdmin.for_cluster(api, cluster)

    assert admin.init("orders-0") is InitOutcome.INITIALIZED
    assert admin.init("orders-1") is InitOutcome.ALREADY_INITIALIZED

    def all_live() -> tuple[NodeStatus, ...] | None:
        nodes = admin.node_status("orders-2", decommission=True)
        return nodes if len(nodes) == 3 and all(n.healthy for n in nodes) else None

    nodes = eventually(all_live, 60, "three live KaiwuDB nodes")
    assert sorted(n.pod_name or "" for n in nodes) == ["orders-0", "orders-1", "orders-2"]
    assert all(n.address.endswith(f".{NAME}.{namespace}.svc.cluster.local:26257")
               for n in nodes)
    assert not any(n.is_decommissioning or n.is_draining for n in nodes)
    eventually(lambda: pods(want_ready=True), 60, "three Ready pods after init")
    health = eventually(lambda: h if (h := admin.replication_health("orders-1")).healthy
                        else None, 60, "replication to heal")
    assert health.unavailable == 0

    with pytest.raises(ExecFailed) as failed:
        admin.node_status("orders-9")
    assert f"{namespace}/orders-9" in str(failed.value)
