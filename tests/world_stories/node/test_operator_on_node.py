"""The operator as shipped, run by a real kubelet (issue 30, item 2): the image `make image`
builds, loaded into the real node's containerd, and the bundle `kaiwu install` prints, applied
whole with Debian's kubectl; the reconciler starts from its image with in-cluster configuration
and passes its startup, liveness and readiness probes as the kubelet judges them; two replicas on
two real nodes elect one leader, and when the leader's pod is deleted the other takes over.

The test overlay (tests/world/real_node.py: `on_real_node`) changes only what this machine
needs: host network (the API server listens on 127.0.0.1), the node's taint tolerated, the
image used as loaded, and the API server's address for in-cluster configuration (no kube-proxy
runs to turn the `kubernetes` Service's ClusterIP into it).

Runs only in the node tier (`make test-node`).
"""

from __future__ import annotations

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
from tests.world.kube_rest import KubeAccess, KubeRest
from tests.world.real_node import NodeSpec, RealNode, on_real_node

pytestmark = [
    pytest.mark.world,  # a world of its own: no session fixture marks it
    pytest.mark.skipif(os.environ.get("KAIWU_TESTWORLD_REAL_NODE") != "1",
                       reason="a real kubelet: this story runs in the node tier (make test-node)"),
]
# Two nodes, so the bundle's two replicas run at two addresses and elect one leader.
NODES = (NodeSpec(), NodeSpec(name="real-node-2", address="198.18.0.2", kubelet_port=10360,
                              healthz_port=10368))
NAMESPACE = "kaiwu-system"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/kaiwu-reconciler"


@pytest.fixture(scope="module")
def world() -> Iterator[ControlPlane]:
    tag = image.build()
    with ControlPlane(ControlPlaneSettings(crd_paths=(),
                                           real_nodes=tuple(n.name for n in NODES))) as plane, \
            tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "image.oci.tar"
        image.podman("save", "--format", "oci-archive", "--output", str(archive), tag)
        nodes = [RealNode(plane, spec) for spec in NODES]
        try:
            for node in nodes:
                node.start()
                node.import_image(archive)
            yield plane
        finally:
            for node in nodes:
                node.stop()


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod["status"].get("conditions") or ())


def install(plane: ControlPlane) -> None:
    """`kaiwu install --kube-version 1.20`, the test overlay, `kubectl apply --server-side`."""
    bundle = subprocess.run([sys.executable, "-m", "reconciler.cli", "install",
                             "--kube-version", "1.20"], check=True, capture_output=True,
                            text=True).stdout
    docs = on_real_node(list(yaml.safe_load_all(bundle)), plane.server)
    kubectl = locate_kubectl()
    assert kubectl is not None, "make world fetches Debian's kubectl"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "kubeconfig"
        config.write_text(yaml.safe_dump(plane.kubeconfig()))
        applied = subprocess.run(
            [str(kubectl), f"--kubeconfig={config}", "apply", "--server-side", "-f", "-"],
            input=yaml.safe_dump_all(docs), capture_output=True, text=True, check=False)
    assert applied.returncode == 0, applied.stderr


def test_the_bundle_applied_whole_runs_two_replicas_from_the_image_and_one_leads(
        world: ControlPlane) -> None:
    api = KubeRest(KubeAccess(world.server, str(world.ca_path), world.admin_token))
    install(world)

    def both_ready() -> list[dict[str, Any]] | None:
        pods = [p for p in api.get(PODS)["items"] if ready(p)]
        return pods if len(pods) == 2 else None
    pods = eventually(both_ready, 180, "both reconciler pods Ready on the real nodes")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(n.name for n in NODES)
    assert {p["status"]["podIP"] for p in pods} == {n.address for n in NODES}
    for pod in pods:
        [status] = pod["status"]["containerStatuses"]
        assert status["restartCount"] == 0, status
        assert status["imageID"], "run from the image loaded into containerd"
    names = {p["metadata"]["name"] for p in pods}
    leader = eventually(lambda: api.get(LEASE)["spec"].get("holderIdentity") in names
                        and api.get(LEASE)["spec"]["holderIdentity"], 60, "one pod to lead")

    # The leader's pod is deleted: the other takes over, and the Deployment makes a new one.
    api.delete(f"{PODS}/{leader}")
    (standby,) = names - {leader}
    eventually(lambda: api.get(LEASE)["spec"].get("holderIdentity") == standby, 90,
               "the standby to take over the Lease")
    eventually(lambda: len([p for p in api.get(PODS)["items"]
                            if ready(p) and p["metadata"]["name"] != leader]) == 2, 180,
               "a new pod Ready in the deleted one's place")
