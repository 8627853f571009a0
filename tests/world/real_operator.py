"""The operator as shipped on real nodes of the test world (issue 30): the image `make image`
builds, loaded into two real nodes' containerd, and the bundle `kaiwu install` prints, with the
test overlay (`tests.world.real_node.on_real_node`), applied whole with Debian's kubectl.

Who calls it: the node tier's stories (tests/world_stories/node/) and the demo when this machine
can run a real node (tests/world/demo.py, `make demo`). What a real node needs and why is
tests/world/real_node.py's docstring; this module only puts the operator on such nodes.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.world import image
from tests.world.build import locate_kubectl
from tests.world.controlplane import ControlPlane
from tests.world.kube_rest import KubeRest
from tests.world.real_node import RealNode, RealNodeError, RealNodeSpec, on_real_node

# Two real nodes, so the bundle's two replicas run at two addresses (host network: each
# listens on its node's address) and elect one leader.
NODES = (RealNodeSpec(), RealNodeSpec(name="real-node-2", address="198.18.0.2",
                                      kubelet_port=10360, healthz_port=10368))
NAMESPACE = "kaiwu-system"  # the bundle's default
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/kaiwu-reconciler"
# Who the reconciler's pods are to the API server (its audit log tells their requests apart).
RECONCILER_USER = f"system:serviceaccount:{NAMESPACE}:kaiwu-reconciler"


def save_image(directory: Path) -> Path:
    """`make image` (podman; cached layers make a rebuild of unchanged sources seconds), saved
    as an OCI archive in `directory` for `RealNode.import_image`."""
    tag = image.build()
    archive = directory / "image.oci.tar"
    image.podman("save", "--format", "oci-archive", "--output", str(archive), tag)
    return archive


@contextlib.contextmanager
def real_nodes(plane: ControlPlane, archive: Path, specs: Sequence[RealNodeSpec] = NODES,
               ) -> Iterator[dict[str, RealNode]]:
    """The nodes started (each Ready, the image archive `save_image` wrote imported); every
    node is stopped on the way out, whatever the others' stops did. The plane must list the
    nodes in ControlPlaneSettings.real_nodes."""
    with contextlib.ExitStack() as stack:
        nodes = {}
        for spec in specs:
            node = RealNode(plane, spec)
            stack.callback(node.stop)
            node.start()
            node.import_image(archive)
            nodes[spec.name] = node
        yield nodes


def kubectl(plane: ControlPlane, *args: str, stdin: str = "") -> str:
    """Debian's kubectl (fetched by `make world`) as the admin; RealNodeError on failure."""
    found = locate_kubectl()
    if found is None:
        raise RealNodeError("no kubectl: run make world")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "kubeconfig"
        config.write_text(yaml.safe_dump(plane.kubeconfig()))
        done = subprocess.run([str(found), f"--kubeconfig={config}", *args], input=stdin,
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RealNodeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def install(plane: ControlPlane, settings: Mapping[str, str] | None = None) -> list[str]:
    """`kaiwu install --kube-version 1.20`, the test overlay (with `settings`, KAIWU_* variables
    for the reconciler's container), `kubectl apply --server-side`: the kind/name of every
    document applied."""
    bundle = subprocess.run([sys.executable, "-m", "reconciler.cli", "install",
                             "--kube-version", "1.20"], check=True, capture_output=True,
                            text=True).stdout
    docs = on_real_node(list(yaml.safe_load_all(bundle)), plane.server, settings)
    kubectl(plane, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    return [f"{d['kind']}/{d['metadata']['name']}" for d in docs if d]


def pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def wait_for_replicas(rest: KubeRest, count: int, timeout_s: float) -> list[dict[str, Any]]:
    """The reconciler's pods once `count` of them are Ready (the kubelets judged their
    startup and readiness probes); RealNodeError naming what they showed last."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = rest.get(PODS)["items"]
        ready = [p for p in pods if pod_ready(p) and not p["metadata"].get("deletionTimestamp")]
        if len(ready) >= count:
            return ready
        if time.monotonic() > deadline:
            shown = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in pods}
            raise RealNodeError(f"{count} reconciler pods not Ready within {timeout_s:g} s: "
                                f"{shown}")
        time.sleep(0.5)


def leader(rest: KubeRest) -> str:
    """The Lease's holder: with the bundle's KAIWU_IDENTITY, a pod's name ('' when none)."""
    lease = rest.get_or_none(LEASE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
