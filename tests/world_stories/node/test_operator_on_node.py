"""The operator as shipped, run by real kubelets (issue 30, items 2 and 3): the image `make
image` builds, loaded into two real nodes' containerd, and the bundle `kaiwu install` prints,
applied whole with Debian's kubectl. Both reconcilers start from the image with in-cluster
configuration and pass their startup, liveness and readiness probes as the kubelet judges them;
the API server reaches the admission webhook through its Service and refuses a bad spec with
the renderer's message; a KaiwuCluster (its KaiwuDB pods on simulated nodes) is brought to Ready
by the reconciler in its pod; and when the leader's pod is deleted the other takes over.

The test overlay (`tests.world.real_node.on_real_node`) changes only what this machine needs:
host network (the API server listens on 127.0.0.1), the real nodes' taint tolerated, the image
used as loaded, listeners on the pod's own address, and the API server's address for in-cluster
configuration (no kube-proxy turns the `kubernetes` Service's ClusterIP into it). The API
server dials the webhook Service's endpoints (`route_to_endpoints`), for the same reason.

Runs only in the node tier (`make test-node`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.waiting import eventually
from tests.world import image
from tests.world.build import locate_kubectl
from tests.world.controlplane import ControlPlane, ControlPlaneSettings
from tests.world.kube_rest import ApiError, KubeAccess, KubeRest
from tests.world.kubelet import default_nodes
from tests.world.real_node import RealNode, RealNodeSpec, on_real_node
from tests.world.simworld import SimWorld, WorldSettings

pytestmark = [
    pytest.mark.world,
    pytest.mark.own_world,  # a control plane of its own: not the shared world, not its gate
    pytest.mark.skipif(os.environ.get("KAIWU_TESTWORLD_REAL_NODE") != "1",
                       reason="a real kubelet: this story runs in the node tier (make test-node)"),
]
# Two real nodes, so the bundle's two replicas run at two addresses and elect one leader.
NODES = (RealNodeSpec(), RealNodeSpec(name="real-node-2", address="198.18.0.2",
                                      kubelet_port=10360, healthz_port=10368))
NAMESPACE = "kaiwu-system"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/kaiwu-reconciler"
CLUSTERS = "/apis/kaiwu.inspur.com/v1/namespaces/kaiwu-dev/kaiwuclusters"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """The control plane, two real nodes with the image loaded, three simulated nodes for
    KaiwuDB."""
    tag = image.build()
    settings = ControlPlaneSettings(crd_paths=(), real_nodes=tuple(n.name for n in NODES),
                                    route_to_endpoints=True)
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(ControlPlane(settings))
        archive = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "image.oci.tar"
        image.podman("save", "--format", "oci-archive", "--output", str(archive), tag)
        world = SimWorld(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token),
                         WorldSettings(nodes=default_nodes(3, prefix="sim-node")))
        stack.callback(world.stop)  # each stops whatever the others' stops did
        world.start()
        for spec in NODES:
            node = RealNode(plane, spec)
            stack.callback(node.stop)
            node.start()
            node.import_image(archive)
        kubectl(plane, "create", "namespace", "kaiwu-dev")  # where clusters/dev.yaml lives
        yield plane


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod["status"].get("conditions") or ())


def kubectl(plane: ControlPlane, *args: str, stdin: str = "") -> str:
    found = locate_kubectl()
    assert found is not None, "make world fetches Debian's kubectl"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "kubeconfig"
        config.write_text(yaml.safe_dump(plane.kubeconfig()))
        done = subprocess.run([str(found), f"--kubeconfig={config}", *args], input=stdin,
                              capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> KubeRest:
    """The bundle installed (`kaiwu install --kube-version 1.20`, the test overlay, `kubectl
    apply --server-side`) and both reconciler pods Ready on the real nodes."""
    bundle = subprocess.run([sys.executable, "-m", "reconciler.cli", "install",
                             "--kube-version", "1.20"], check=True, capture_output=True,
                            text=True).stdout
    docs = on_real_node(list(yaml.safe_load_all(bundle)), plane.server)
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    rest = KubeRest(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token))
    eventually(lambda: len([p for p in rest.get(PODS)["items"] if ready(p)]) == 2, 180,
               "both reconciler pods Ready on the real nodes")
    return rest


def test_both_replicas_run_from_the_image_on_the_real_nodes_past_their_probes(
        api: KubeRest) -> None:
    pods = api.get(PODS)["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(n.name for n in NODES)
    assert {p["status"]["podIP"] for p in pods} == {n.address for n in NODES}
    for pod in pods:
        [status] = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, status
        assert status["containerID"].startswith("containerd://")


def test_the_api_server_reaches_the_webhook_through_its_service_and_a_bad_spec_is_refused(
        api: KubeRest) -> None:
    bad = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
           "metadata": {"name": "bad", "namespace": "kaiwu-dev"}, "spec": {"replicas": 2}}

    def refusal() -> str | None:
        try:
            api.create(CLUSTERS, bad)
        except ApiError as err:
            return str(err) if err.status == 422 else None
        api.delete(f"{CLUSTERS}/bad")  # admitted: the registration has no CA yet
        return None
    message = eventually(refusal, 60, "the webhook, through its Service, to refuse")
    assert 'admission webhook "kaiwuclusters.kaiwu.inspur.com" denied the request' in message
    assert "spec.replicas: multi-replica needs at least 3 nodes, got 2" in message


def test_a_cluster_is_brought_to_ready_by_the_reconciler_in_its_pod(
        plane: ControlPlane, api: KubeRest) -> None:
    kubectl(plane, "apply", "-f", str(REPO / "clusters" / "dev.yaml"))

    def ready_cluster() -> dict[str, Any] | None:
        found = api.get(f"{CLUSTERS}/dev")
        conditions = (found.get("status") or {}).get("conditions") or ()
        return found if any(c["type"] == "Ready" and c["status"] == "True"
                            for c in conditions) else None
    cluster = eventually(ready_cluster, 180, "the dev cluster Ready")
    kaiwudb = api.get("/api/v1/namespaces/kaiwu-dev/pods")["items"]
    assert sorted(p["spec"]["nodeName"] for p in kaiwudb) == [
        "sim-node-1", "sim-node-2", "sim-node-3"], "KaiwuDB on the simulated nodes"
    assert cluster["status"]["initialized"] is True


def test_the_leaders_pod_deleted_the_other_takes_over(api: KubeRest) -> None:
    names = {p["metadata"]["name"] for p in api.get(PODS)["items"]}
    leader = eventually(lambda: api.get(LEASE)["spec"].get("holderIdentity") in names
                        and api.get(LEASE)["spec"]["holderIdentity"], 60, "one pod to lead")
    api.delete(f"{PODS}/{leader}")
    (standby,) = names - {leader}
    eventually(lambda: api.get(LEASE)["spec"].get("holderIdentity") == standby, 90,
               "the standby to take over the Lease")
    eventually(lambda: len([p for p in api.get(PODS)["items"]
                            if ready(p) and p["metadata"]["name"] != leader]) == 2, 180,
               "a new pod Ready in the deleted one's place")
