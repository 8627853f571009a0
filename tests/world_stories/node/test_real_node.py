"""A real node joins the test world (issue 30, item 1): containerd and a kubelet built from
Debian's sources register beside the simulated nodes, tainted so only what tolerates them lands
there; a host-network pod runs there for real (sandbox and container by runc), gets the node's
address, and ends when deleted. The operator's own Deployment on it comes next (issue 30, items
2 to 4).

Runs only in the node tier (`make test-node`, which installs containerd and builds the kubelet);
`make test` skips it, since a newcomer's machine need not run a container runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.waiting import eventually
from tests.world.controlplane import ControlPlane, ControlPlaneSettings
from tests.world.kube_rest import KubeAccess, KubeRest
from tests.world.real_node import NODE_TIER, PAUSE_IMAGE, TAINT_KEY, RealNode, RealNodeSpec

pytestmark = NODE_TIER
NODE = RealNodeSpec()
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[KubeRest, RealNode]]:
    with ControlPlane(ControlPlaneSettings(crd_paths=(), real_nodes=(NODE.name,))) as plane:
        node = RealNode(plane, NODE)
        try:
            node.start()
            yield KubeRest(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token)), node
        finally:
            node.stop()


def pause_pod(name: str, *, tolerate: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "hostNetwork": True, "terminationGracePeriodSeconds": 2,
        "nodeSelector": {TAINT_KEY: "true"},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists"}] if tolerate else [],
        "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}}


def test_a_real_node_registers_tainted_with_what_really_runs_it(
        world: tuple[KubeRest, RealNode]) -> None:
    api, _ = world
    node = api.get(f"/api/v1/nodes/{NODE.name}")
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://1.6"), info
    assert info["kubeletVersion"] == "v1.20.2"
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
        (TAINT_KEY, "NoSchedule")]
    assert [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"] == [
        NODE.address]


def test_a_pod_that_tolerates_the_node_runs_there_for_real_and_ends_when_deleted(
        world: tuple[KubeRest, RealNode]) -> None:
    api, node = world
    api.create(PODS, pause_pod("runs", tolerate=True))
    running = eventually(lambda: (p if (p := api.get(f"{PODS}/runs"))["status"].get("phase")
                                  == "Running" else None), 60, "the pod to run on the real node")
    assert running["spec"]["nodeName"] == NODE.name
    assert running["status"]["podIP"] == NODE.address, "host network: the node's address"
    [status] = running["status"]["containerStatuses"]
    assert status["ready"] and status["containerID"].startswith("containerd://")
    container = status["containerID"].removeprefix("containerd://")
    assert container in node.ctr("tasks", "ls", "-q").split(), "runc runs it"

    api.delete(f"{PODS}/runs")
    eventually(lambda: container not in node.ctr("tasks", "ls", "-q").split(), 30,
               "the container to end")
    eventually(lambda: api.get_or_none(f"{PODS}/runs") is None, 30, "the pod to be gone")


def test_a_pod_that_does_not_tolerate_the_taint_never_lands_there(
        world: tuple[KubeRest, RealNode]) -> None:
    api, _ = world
    api.create(PODS, pause_pod("refused", tolerate=False))

    def unschedulable() -> bool:
        pod = api.get(f"{PODS}/refused")
        assert not pod["spec"].get("nodeName"), "scheduled onto a tainted node"
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                   for c in pod["status"].get("conditions") or ())
    eventually(unschedulable, 30, "the scheduler to refuse the pod")
    api.delete(f"{PODS}/refused")
