"""The simulated half of the test world: nodes, kubelets, storage and KaiwuDB around a real
control plane.

Made by the `sim_world` fixture (tests/world/kubelet_fixtures.py) or by hand next to a
ControlPlane (tests/world/controlplane.py):

    with SimWorld(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token)) as world:
        world.faults.lose_node("kw-node-2")

The kubelet and provisioner act under their own service accounts
(system:serviceaccount:kube-system:sim-kubelet and ...:sim-provisioner, bound to cluster-admin),
so the apiserver's audit log tells their writes apart from the tests' and the reconciler's.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.world.faults import Faults
from tests.world.kube_rest import ApiError, KubeAccess, KubeRest
from tests.world.kubelet import KubeletSettings, NodeSpec, SimKubelet, default_nodes
from tests.world.kwdb import KwdbSettings, KwdbWorld
from tests.world.kwdb_port import KwdbAdapter
from tests.world.simclock import SimClock
from tests.world.storage import Disks, SimStorage, StorageSettings

AGENT_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class WorldSettings:
    """What the simulated world looks like.

    nodes: the simulated nodes (default: four, kw-node-1..4, in zones a, b, c, a — one spare
        beyond a 3-node cluster, so replacing a lost node's pod is possible).
    clock_speed: how much faster than wall time the simulated KaiwuDB's clock runs.
    kubelet / storage / kwdb: each part's own settings.
    kubelet_account / provisioner_account: service accounts (in kube-system) the agents use.
    """

    nodes: tuple[NodeSpec, ...] = field(default_factory=lambda: default_nodes(4))
    clock_speed: float = 1.0
    kubelet: KubeletSettings = field(default_factory=KubeletSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    kwdb: KwdbSettings = field(default_factory=KwdbSettings)
    kubelet_account: str = "sim-kubelet"
    provisioner_account: str = "sim-provisioner"


def agent_access(admin: KubeRest, account: str, timeout_s: float = 30.0) -> KubeAccess:
    """Credentials of a cluster-admin service account in kube-system, made if missing."""
    sa_path = f"/api/v1/namespaces/{AGENT_NAMESPACE}/serviceaccounts"
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"kaiwu-test-world:{account}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": AGENT_NAMESPACE}],
    }
    for path, body in (
        (sa_path, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
    ):
        try:
            admin.create(path, body)
        except ApiError as err:
            if err.status != 409:
                raise
    # A token from the TokenRequest API (1.24 and later make no token Secrets; 1.20 serves
    # TokenRequest too): valid a day, longer than any test session.
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 86400}}
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answer = admin.create(f"{sa_path}/{account}/token", request)
            return KubeAccess(admin.access.server, admin.access.ca_path,
                              str(answer["status"]["token"]))
        except ApiError as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise RuntimeError(f"no token for service account {AGENT_NAMESPACE}/{account}: "
                                   f"{err}") from err
        time.sleep(0.1)


class SimWorld:
    """Simulated nodes (kubelets with exec endpoints), local storage and KaiwuDB.

    Attributes once constructed: `clock`, `kwdb` (the KwdbWorld model), `kwdb_port` (the
    kubelet's view of it), `disks`, `storage`, `kubelet`, `faults`, `settings`.
    """

    def __init__(self, access: KubeAccess, settings: WorldSettings | None = None) -> None:
        self.settings = settings or WorldSettings()
        self.clock = SimClock(self.settings.clock_speed)
        self.kwdb = KwdbWorld(self.settings.kwdb)
        self.kwdb_port = KwdbAdapter(self.kwdb, self.clock)
        self.disks = Disks()
        self._admin = KubeRest(access)
        self._dir = Path(tempfile.mkdtemp(prefix="kaiwu-simworld-"))
        self._kubelet_rest = KubeRest(agent_access(self._admin, self.settings.kubelet_account))
        self._storage_rest = KubeRest(
            agent_access(self._admin, self.settings.provisioner_account)
        )
        self.kubelet = SimKubelet(
            self._kubelet_rest,
            self.kwdb_port,
            self.disks,
            self.settings.nodes,
            cert_dir=self._dir / "kubelet-certs",
            settings=self.settings.kubelet,
        )
        self.storage = SimStorage(
            self._storage_rest,
            self.disks,
            self.settings.storage,
            node_alive=lambda name: self.kubelet.node(name).alive,
        )
        self.faults = Faults(self._admin, self.kubelet, self.kwdb_port, self.disks)
        self._running = False

    def start(self, timeout_s: float = 60.0) -> None:
        """Storage first (so claims can bind at once), then the nodes; returns when every node
        is Ready and schedulable."""
        self._running = True
        try:
            self.storage.start(timeout_s)
            self.kubelet.start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self, *, delete_nodes: bool = True) -> None:
        """End every thread and server; remove the Nodes unless told not to. Idempotent."""
        if self._running:
            self.kubelet.stop(delete_nodes=delete_nodes)
            self.storage.stop()
            self._running = False
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> SimWorld:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
