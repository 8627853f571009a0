"""The simulated kubelet: Nodes, heartbeats and pod lifecycles for the real control plane.

Made and started by tests/world/simworld.py (pytest fixture `sim_world`); faults come in through
tests/world/faults.py. One `SimKubelet` plays every simulated node:

- registers each Node (labels kubernetes.io/hostname, topology.kubernetes.io/zone/region, os,
  arch; capacity; its own 127.0.0.x InternalIP; the port of its HTTPS endpoint in
  status.daemonEndpoints.kubeletEndpoint), posts NodeReady and renews its Lease in
  kube-node-lease, so the REAL node lifecycle controller judges it;
- watches pods bound to its nodes and drives them as a kubelet does: sandbox (pod IP, hostIP),
  init containers one by one, then containers; ContainerCreating -> Running; startup, liveness
  and readiness probes run as the 1.20 kubelet's probe workers run them (initialDelaySeconds,
  periodSeconds, success/failure thresholds; a KaiwuDB container's httpGet, tcpSocket and exec
  probes go to the simulated KaiwuDB at the probe's port, scheme and path; other images pass);
  crashed containers restart with the kubelet's CrashLoopBackOff back-off (restartCount,
  lastState.terminated with exit code and message); killing a container (deletion, liveness)
  is SIGTERM, KaiwuDB's drain, and SIGKILL at the end of the grace period if the drain has not
  finished; a deleted pod whose containers all ended is deleted with grace 0 and a uid
  precondition;
- serves exec, logs and healthz on each node's address (tests/world/exec_server.py).

Kubernetes runs on wall time, so the kubelet's timers are real seconds (shortened by
`KubeletSettings`); a pod's own timings (probe periods and delays, grace periods) and KaiwuDB's
drain run at `KubeletSettings.time_scale` real seconds per second, so that they stay exact
relative to each other; only the KaiwuDB model gets the SimClock.

Not modelled: images and pulls, cgroups and resource enforcement, eviction under pressure,
static/mirror pods, ephemeral containers, projected volume contents, the pod's network (pod IPs
are addresses nobody listens on), CNI, port-forward, attach, TTYs in exec, node-allocatable
reservations.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import queue
import random
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tests.world.container_exec import run_in_container
from tests.world.exec_server import (
    CommandResult,
    ExecRefused,
    KubeletServer,
    ServerLoop,
    ServingCert,
)
from tests.world.kube_rest import (
    STRATEGIC_MERGE_PATCH,
    ApiError,
    JsonObj,
    KubeRest,
    Reflector,
    wait_for,
)
from tests.world.kwdb_port import ExecOutput, KwdbPort, ProcessExit
from tests.world.pod_runtime import (
    ContainerConfigError,
    ContainerRuntime,
    PodRuntime,
    Terminated,
    container_env,
    expand,
    micro_time,
    mounted_file_modes,
    pod_status,
    prune,
    rfc3339,
    termination_message,
)
from tests.world.storage import Disks

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
KUBELET_VERSION = "v1.20.2"  # what the control plane is built from
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
PROBE_KINDS = ("startup", "liveness", "readiness")  # the order a sync runs them in
MINIMUM_GRACE_PERIOD_S = 2  # kuberuntime_container.go minimumGracePeriodInSeconds


@dataclass(frozen=True)
class NodeSpec:
    """One simulated node. Capacity values are Kubernetes quantities."""

    name: str
    zone: str = "zone-a"
    region: str = "region-1"
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    ephemeral_storage: str = "100Gi"
    labels: Mapping[str, str] = field(default_factory=dict)


def default_nodes(
    count: int = 3,
    *,
    prefix: str = "kw-node",
    zones: Sequence[str] = ("zone-a", "zone-b", "zone-c"),
) -> tuple[NodeSpec, ...]:
    """`count` nodes named prefix-1.., spread round-robin over zones."""
    return tuple(
        NodeSpec(name=f"{prefix}-{i + 1}", zone=zones[i % len(zones)]) for i in range(count)
    )


@dataclass(frozen=True)
class KubeletSettings:
    """Timings of the simulated kubelet, in real seconds. Real kubelet defaults in brackets.

    lease_duration_s: the Lease's leaseDurationSeconds [40].
    lease_renew_interval_s: how often Leases are renewed [10 = duration/4]; must stay well under
        the controller-manager's node-monitor-grace-period (8 s in the test control plane).
    node_status_interval_s: how often NodeReady is re-posted when nothing changed [5 min with
        leases; 10 s without]. A restored node posts at once.
    sync_period_s: how often pod state machines advance (the real one reacts to PLEG events).
    container_create_s: pod sandbox + image pull + container create, before a container starts.
    init_container_run_s: how long each init container runs before exiting 0.
    mount_retry_s: pause between attempts to mount the volumes of a pod that cannot mount yet
        (claim unbound, disk lost) [the volume manager's exponential back-off].
    time_scale: real seconds per second of a pod's own timings: its probes' initialDelaySeconds
        and periodSeconds, its terminationGracePeriodSeconds, and the simulated KaiwuDB's drain
        (KwdbSettings.drain_s), so that a period, a threshold or a grace period that is wrong
        relative to KaiwuDB's drain shows as it would in a real cluster, only faster. 0.1: a
        60 s grace period lasts 6 real seconds. Counts (thresholds) are not scaled.
    crash_backoff_initial_s / crash_backoff_max_s: CrashLoopBackOff doubling [10 / 300].
    exec_wait_cap_s: longest an exec answer is held back to match how long the real command
        runs (e.g. a connect timeout); commands that would block until killed are held this long.
    long_statement_cap_s: how long the answer of a command that answers only when it ends (a long
        EXPORT or IMPORT) is waited for; one that runs longer closes the stream with no output
        and no exit status, as the real kubelet's streaming idle time-out does
        (--streaming-connection-idle-timeout, 4 h by default), the statement running on.
    kwdb_image_suffix: images whose repository ends with this are KaiwuDB (any registry).
    pod_cidr_prefix: node i gets <prefix>.<i>.0/24 for pod IPs.
    """

    lease_duration_s: int = 40
    lease_renew_interval_s: float = 1.0
    node_status_interval_s: float = 5.0
    sync_period_s: float = 0.2
    container_create_s: float = 0.3
    init_container_run_s: float = 0.3
    mount_retry_s: float = 1.0
    time_scale: float = 0.1
    crash_backoff_initial_s: float = 1.0
    crash_backoff_max_s: float = 8.0
    exec_wait_cap_s: float = 5.0
    long_statement_cap_s: float = 60.0
    kwdb_image_suffix: str = "kwdb/kwdb"
    pod_cidr_prefix: str = "10.244"

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError(f"KubeletSettings.time_scale must be positive, got {self.time_scale}")


@dataclass(frozen=True)
class NodeInfo:
    """Where a simulated node is and whether it is up (a snapshot)."""

    name: str
    address: str
    port: int
    alive: bool
    zone: str


class _Node:
    """Mutable runtime state of one simulated node."""

    def __init__(self, spec: NodeSpec, index: int, address: str, server: KubeletServer) -> None:
        self.spec = spec
        self.index = index
        self.address = address
        self.server = server
        self.alive = True
        self.partitioned = False  # unreachable but running (False: powered off when not alive)
        self.orphans: list[PodRuntime] = []  # pods deleted from the API while partitioned
        self.uid = ""
        self.boot_id = secrets.token_hex(16)
        self.next_lease = 0.0
        self.next_status = 0.0
        self.ip_counter = itertools.cycle(range(2, 255))

    @property
    def pod_cidr_index(self) -> int:
        return self.index + 1


class _AddressPool:
    """Hands out distinct loopback addresses within this process (127.0.0.10 and up)."""

    _lock = threading.Lock()
    _used: ClassVar[set[str]] = set()

    @classmethod
    def take(cls) -> str:
        with cls._lock:
            for i in range(10, 255):
                address = f"127.0.0.{i}"
                if address not in cls._used:
                    cls._used.add(address)
                    return address
        raise RuntimeError("no free 127.0.0.x address left for simulated nodes")

    @classmethod
    def give_back(cls, address: str) -> None:
        with cls._lock:
            cls._used.discard(address)


class SimKubelet:
    """All simulated nodes' kubelets. start() registers the nodes; stop() ends every thread."""

    def __init__(
        self,
        rest: KubeRest,
        kwdb: KwdbPort,
        disks: Disks,
        nodes: Sequence[NodeSpec],
        *,
        cert_dir: Path,
        settings: KubeletSettings | None = None,
    ) -> None:
        if len({n.name for n in nodes}) != len(nodes):
            raise ValueError("simulated node names must be distinct")
        self.settings = settings or KubeletSettings()
        self._rest = rest
        self._kwdb = kwdb
        self._disks = disks
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._events: queue.SimpleQueue[tuple[str, JsonObj]] = queue.SimpleQueue()
        self._pods: dict[str, PodRuntime] = {}
        # Faults by pod name, so they outlive a pod being recreated under the same name.
        self._crash_faults: dict[tuple[str, str], ProcessExit] = {}
        self._unready_faults: set[tuple[str, str]] = set()
        self._loop = ServerLoop()
        self._nodes: dict[str, _Node] = {}
        for index, spec in enumerate(nodes):
            address = _AddressPool.take()
            cert = ServingCert.create(cert_dir, spec.name, address)
            server = KubeletServer(self._loop, spec.name, address, cert, self)
            self._nodes[spec.name] = _Node(spec, index, address, server)
        self._reflector = Reflector(
            rest,
            "/api/v1/pods",
            self._on_pod_event,
            name="sim-kubelet-pods",
            query={"fieldSelector": "spec.nodeName!="},
        )
        self._threads = [
            threading.Thread(target=self._heartbeat_loop, name="sim-kubelet-heartbeat",
                             daemon=True),
            threading.Thread(target=self._worker_loop, name="sim-kubelet-pods", daemon=True),
        ]
        self._started = False

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        """Serve, register every node, start heartbeats and pod handling; return once the real
        node lifecycle controller has found every node Ready (no not-ready taint left)."""
        for node in self._nodes.values():
            node.server.start()
            self._register(node)
        self._reflector.start()
        for thread in self._threads:
            thread.start()
        self._started = True
        if not self._reflector.wait_synced(timeout_s):
            raise RuntimeError("simulated kubelet could not list pods")
        if not wait_for(self._all_nodes_schedulable, timeout_s=timeout_s, interval_s=0.2):
            raise RuntimeError(f"simulated nodes not Ready/untainted within {timeout_s} s")

    def stop(self, *, delete_nodes: bool = True) -> None:
        """Stop every thread and server; stop KaiwuDB processes; delete the Nodes if asked."""
        self._stop.set()
        self._wake.set()
        self._reflector.stop()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(10)
        with self._lock:
            for pod in self._pods.values():
                self._stop_processes(pod, graceful=False)
            self._pods.clear()
        for node in self._nodes.values():
            node.server.stop()
            _AddressPool.give_back(node.address)
        self._loop.close()
        if delete_nodes and self._started:
            for name in self._nodes:
                for path in (
                    f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{name}",
                    f"/api/v1/nodes/{name}",
                ):
                    try:
                        self._rest.delete(path)
                    except ApiError as err:
                        if err.status != 404:
                            log.warning("could not delete %s: %s", path, err)
                    except Exception as err:
                        log.warning("could not delete %s: %s", path, err)

    # ---- introspection -----------------------------------------------------------------

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def node(self, name: str) -> NodeInfo:
        node = self._nodes[name]
        return NodeInfo(name, node.address, node.server.port, node.alive, node.spec.zone)

    def nodes(self) -> tuple[NodeInfo, ...]:
        return tuple(self.node(name) for name in self._nodes)

    # ---- faults ------------------------------------------------------------------------

    def lose_node(self, name: str, *, partition: bool = False) -> None:
        """The machine stops (or, with partition, drops off the network): no heartbeats, no
        lease renewals, its endpoint refuses connections. Powered off, its KaiwuDB processes
        end; partitioned, they run on but nobody reaches them. Pods stay as they are in the API;
        what happens to them is up to the real controllers."""
        node = self._nodes[name]
        with self._lock:
            if not node.alive:
                return
            node.alive = False
            node.partitioned = partition
            for pod in self._pods.values():
                if pod.node != name:
                    continue
                if partition:
                    if any(c.kwdb and c.state == "running" for c in pod.containers):
                        self._kwdb.set_host_alive(pod.cluster, pod.name, False)
                    continue
                for c in itertools.chain(pod.init, pod.containers):
                    if c.state == "running":
                        c.lost = True
                self._stop_processes(pod, graceful=False)
        node.server.stop()
        log.info("node %s %s", name, "partitioned" if partition else "lost")

    def restore_node(self, name: str) -> None:
        """The machine is back: heartbeats resume at once. After a power-off, containers that
        were running restart (restartCount + 1, lastState terminated, reason Unknown); after a
        partition they simply run on."""
        node = self._nodes[name]
        with self._lock:
            if node.alive:
                return
            node.server.start()
            if not node.partitioned:
                node.boot_id = secrets.token_hex(16)
            for orphan in node.orphans:
                # Kill what the API no longer has, unless a pod of that name runs again (then
                # its process replaced the orphan's already).
                if not any((p.namespace, p.name) == (orphan.namespace, orphan.name)
                           for p in self._pods.values()):
                    self._stop_processes(orphan, graceful=False)
            node.orphans.clear()
            now = time.monotonic()
            for pod in self._pods.values():
                if pod.node != name:
                    continue
                if node.partitioned:
                    if any(c.kwdb and c.state == "running" for c in pod.containers):
                        self._kwdb.set_host_alive(pod.cluster, pod.name, True)
                    continue
                for c in itertools.chain(pod.init, pod.containers):
                    if c.lost:
                        c.lost = False
                        self._exited(pod, c, ProcessExit(255, ""), now, reason="Unknown")
                        c.backoff.reset()
            node.next_lease = 0.0
            node.next_status = 0.0
            node.alive = True
            node.partitioned = False
        self._wake.set()
        log.info("node %s restored", name)

    def crash_loop(
        self, namespace: str, pod: str, *, exit_code: int = 1, message: str = "simulated crash"
    ) -> None:
        """Every container of the pod (and of any pod later made under that name) exits with
        exit_code now and at each start, until stop_crash_loop."""
        crash = ProcessExit(exit_code, message)
        with self._lock:
            self._crash_faults[(namespace, pod)] = crash
            now = time.monotonic()
            for runtime in self._pods.values():
                if (runtime.namespace, runtime.name) == (namespace, pod):
                    for c in runtime.containers:
                        if c.state == "running":
                            self._exited(runtime, c, crash, now)
        self._wake.set()

    def stop_crash_loop(self, namespace: str, pod: str) -> None:
        with self._lock:
            self._crash_faults.pop((namespace, pod), None)
        self._wake.set()

    def set_unready(self, namespace: str, pod: str, unready: bool = True) -> None:
        """Force the readiness probes of the pod named so to fail (True) or answer normally
        again (False)."""
        with self._lock:
            if unready:
                self._unready_faults.add((namespace, pod))
            else:
                self._unready_faults.discard((namespace, pod))
        self._wake.set()

    def volume_lost(self, claim_uid: str) -> None:
        """A disk vanished: containers mounting that claim stop now (mounts then fail)."""
        with self._lock:
            now = time.monotonic()
            for pod in self._pods.values():
                if pod.store_key == claim_uid or claim_uid in self._claim_uids(pod):
                    for c in pod.containers:
                        if c.state == "running":
                            self._exited(pod, c, ProcessExit(137, "volume lost"), now)
                    pod.sandbox = False
        self._wake.set()

    # ---- node registration and heartbeats ---------------------------------------------

    def _node_object(self, node: _Node) -> JsonObj:
        spec = node.spec
        labels = {
            "kubernetes.io/hostname": spec.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": spec.zone,
            "topology.kubernetes.io/region": spec.region,
            "failure-domain.beta.kubernetes.io/zone": spec.zone,
            "failure-domain.beta.kubernetes.io/region": spec.region,
            **spec.labels,
        }
        cidr = f"{self.settings.pod_cidr_prefix}.{node.pod_cidr_index}.0/24"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": spec.name,
                "labels": labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        }

    def _node_status(self, node: _Node, live: JsonObj | None) -> JsonObj:
        spec = node.spec
        now = rfc3339()
        previous = {
            c["type"]: c for c in ((live or {}).get("status", {}).get("conditions") or [])
        }

        def condition(kind: str, status: str, reason: str, message: str) -> JsonObj:
            before = previous.get(kind)
            since = before["lastTransitionTime"] if before and before["status"] == status else now
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": since,
            }

        resources = {
            "cpu": spec.cpu,
            "memory": spec.memory,
            "pods": str(spec.pods),
            "ephemeral-storage": spec.ephemeral_storage,
        }
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                          "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                          "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID",
                          "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": node.address}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": node.server.port}},
            "nodeInfo": {
                "machineID": hashlib.md5(spec.name.encode()).hexdigest(),
                "systemUUID": hashlib.md5(spec.name.encode()).hexdigest(),
                "bootID": node.boot_id,
                "kernelVersion": "6.1.0-sim",
                "osImage": "Simulated Linux (kaiwu test world)",
                "containerRuntimeVersion": "containerd://1.4.13",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _register(self, node: _Node) -> None:
        body = self._node_object(node)
        try:
            created = self._rest.create("/api/v1/nodes", body)
        except ApiError as err:
            if err.status != 409:
                raise
            created = self._rest.patch(
                f"/api/v1/nodes/{node.spec.name}",
                {"metadata": {"labels": body["metadata"]["labels"]}},
            )
        node.uid = created["metadata"]["uid"]
        self._post_node_status(node)
        self._renew_lease(node)

    def _post_node_status(self, node: _Node) -> None:
        path = f"/api/v1/nodes/{node.spec.name}"
        live = self._rest.get(path)
        status = self._node_status(node, live)
        self._rest.patch(f"{path}/status", {"status": status}, content_type=STRATEGIC_MERGE_PATCH)
        node.next_status = time.monotonic() + self.settings.node_status_interval_s

    def _renew_lease(self, node: _Node) -> None:
        name = node.spec.name
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{name}"
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": self.settings.lease_duration_s,
            "renewTime": micro_time(),
        }
        try:
            self._rest.patch(path, {"spec": spec})
        except ApiError as err:
            if err.status != 404:
                raise
            self._rest.create(
                f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": name,
                        "namespace": NODE_LEASE_NAMESPACE,
                        "ownerReferences": [
                            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.uid}
                        ],
                    },
                    "spec": spec,
                },
            )
        node.next_lease = time.monotonic() + self.settings.lease_renew_interval_s

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for node in self._nodes.values():
                if not node.alive:
                    continue
                try:
                    if now >= node.next_lease:
                        self._renew_lease(node)
                    if now >= node.next_status:
                        self._post_node_status(node)
                except Exception as err:
                    log.warning("heartbeat of %s failed: %s", node.spec.name, err)
            self._stop.wait(0.1)

    def _all_nodes_schedulable(self) -> bool:
        for name in self._nodes:
            live = self._rest.get(f"/api/v1/nodes/{name}")
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in live.get("status", {}).get("conditions") or []
            )
            tainted = any(
                t.get("key") == NOT_READY_TAINT for t in live.get("spec", {}).get("taints") or []
            )
            if not ready or tainted:
                return False
        return True

    # ---- pod events and the worker -----------------------------------------------------

    def _on_pod_event(self, kind: str, pod: JsonObj) -> None:
        if pod.get("spec", {}).get("nodeName") in self._nodes:
            self._events.put((kind, pod))
            self._wake.set()

    def _drain_events(self) -> None:
        now = time.monotonic()
        while True:
            try:
                kind, obj = self._events.get_nowait()
            except queue.Empty:
                return
            uid = obj["metadata"]["uid"]
            if kind == "DELETED":
                gone = self._pods.pop(uid, None)
                if gone is not None:
                    node = self._nodes[gone.node]
                    if node.alive:
                        self._stop_processes(gone, graceful=False)
                    elif node.partitioned:
                        # Its kubelet learns of the deletion only when the partition heals.
                        node.orphans.append(gone)
                continue
            known = self._pods.get(uid)
            if known is None:
                self._pods[uid] = PodRuntime(
                    obj,
                    now=now,
                    kwdb_image_suffix=self.settings.kwdb_image_suffix,
                    backoff_initial_s=self.settings.crash_backoff_initial_s,
                    backoff_max_s=self.settings.crash_backoff_max_s,
                )
            elif int(obj["metadata"]["resourceVersion"]) >= int(
                known.pod["metadata"]["resourceVersion"]
            ):
                known.pod = obj

    def _worker_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.settings.sync_period_s)
            self._wake.clear()
            with self._lock:
                self._drain_events()
                for pod in list(self._pods.values()):
                    if self._stop.is_set():
                        break
                    if not self._nodes[pod.node].alive:
                        continue
                    try:
                        self._sync(pod, time.monotonic())
                    except Exception:
                        log.exception("syncing pod %s/%s failed", pod.namespace, pod.name)

    # ---- one pod's state machine -------------------------------------------------------

    def _sync(self, pod: PodRuntime, now: float) -> None:
        meta = pod.pod["metadata"]
        phase = pod.pod.get("status", {}).get("phase")
        if meta.get("deletionTimestamp"):
            self._sync_terminating(pod, now)
            return
        if phase in ("Succeeded", "Failed"):
            return
        if not pod.sandbox:
            if now < max(pod.seen_at + self.settings.container_create_s, pod.next_mount):
                return
            # The volume manager retries a failed mount, but not at every sync.
            pod.next_mount = now + self.settings.mount_retry_s
            error = self._mount_volumes(pod)
            if error:
                pod.volume_error = error
                if not pod.volume_event_sent:
                    self._event(pod, "Warning", "FailedMount", error)
                    pod.volume_event_sent = True
                self._post_status(pod)
                return
            pod.volume_error = ""
            pod.sandbox = True
            node = self._nodes[pod.node]
            if not pod.pod_ip:
                pod.pod_ip = (
                    f"{self.settings.pod_cidr_prefix}.{node.pod_cidr_index}.{next(node.ip_counter)}"
                )
                pod.start_time = rfc3339()
        elif pod.store_key is not None and self._disks.is_lost(pod.store_key):
            self.volume_lost(pod.store_key)
            return
        if pod.store_key is not None:
            self._grow_file_system(pod.store_key)
        if not self._run_init_containers(pod, now):
            self._post_status(pod)
            return
        for c in pod.containers:
            self._sync_container(pod, c, now)
        self._post_status(pod)

    def _grow_file_system(self, claim_uid: str) -> None:
        """Online expansion (the volume manager's NodeExpandVolume, then MarkFSResizeFinished):
        the mounted volume's file system grows to its PersistentVolume's capacity and the
        claim's status.capacity says so; its FileSystemResizePending condition goes. Only here,
        on the node where a pod runs with the claim mounted (tests/world/storage.py)."""
        claim = self._disks.file_system_to_resize(claim_uid)
        if claim is None:
            return
        namespace, name = claim
        path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"
        live = self._rest.get_or_none(path)
        volume = (self._rest.get_or_none(f"/api/v1/persistentvolumes/{live['spec']['volumeName']}")
                  if live is not None and live["metadata"]["uid"] == claim_uid else None)
        if live is None or volume is None:
            self._disks.file_system_resized(claim_uid)
            return
        conditions = [c for c in (live.get("status") or {}).get("conditions") or ()
                      if c.get("type") not in ("FileSystemResizePending", "Resizing")]
        try:
            self._rest.patch(path + "/status", {"status": {
                "capacity": {"storage": volume["spec"]["capacity"]["storage"]},
                "conditions": conditions or None}})
        except ApiError as err:
            if err.status != 404:
                raise
        self._disks.file_system_resized(claim_uid)
        log.info("claim %s/%s: file system grown to %s", namespace, name,
                 volume["spec"]["capacity"]["storage"])

    def _claim_uids(self, pod: PodRuntime) -> list[str]:
        uids = []
        for volume in pod.pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                live = self._rest.get_or_none(
                    f"/api/v1/namespaces/{pod.namespace}/persistentvolumeclaims/{claim}"
                )
                if live is not None:
                    uids.append(str(live["metadata"]["uid"]))
        return uids

    def _mount_volumes(self, pod: PodRuntime) -> str:
        """Resolve claims to volumes as the volume manager would; '' when all can mount.

        The KaiwuDB store key is the uid of the claim in the volume named `data` (the
        StatefulSet's volumeClaimTemplate), else of the first claim; a KaiwuDB pod without any
        claim gets a store that lives and dies with the pod (an emptyDir)."""
        volumes = pod.pod["spec"].get("volumes") or []
        claims = [
            (v["name"], v["persistentVolumeClaim"]["claimName"])
            for v in volumes
            if v.get("persistentVolumeClaim")
        ]
        store_key: str | None = None
        for volume_name, claim in claims:
            path = f"/api/v1/namespaces/{pod.namespace}/persistentvolumeclaims/{claim}"
            live = self._rest.get_or_none(path)
            if live is None:
                return f'persistentvolumeclaim "{claim}" not found'
            if live.get("status", {}).get("phase") != "Bound":
                return f'persistentvolumeclaim "{claim}" is not bound'
            uid = str(live["metadata"]["uid"])
            volume = live["spec"].get("volumeName", "")
            if self._disks.is_lost(uid):
                return (
                    f'MountVolume.NewMounter initialization failed for volume "{volume}" : '
                    f'path "{self._disks.path_of(uid)}" does not exist'
                )
            placed = self._disks.node_of(uid)
            if placed is not None and placed != pod.node:
                return (
                    f'volume "{volume}" is on node {placed}, not on {pod.node}: the local '
                    "disk cannot be mounted here"
                )
            if volume_name == "data" or store_key is None:
                store_key = uid
        pod.store_key = store_key if store_key is not None else f"emptydir-{pod.uid}"
        return ""

    def _run_init_containers(self, pod: PodRuntime, now: float) -> bool:
        """Advance init containers one at a time; True once all have completed."""
        for c in pod.init:
            if c.state == "exited" and c.current is not None and c.current.exit_code == 0:
                continue
            if c.state == "new":
                c.state = "running"
                c.started_wall = time.time()
                c.started_mono = now
                c.container_id = "containerd://" + secrets.token_hex(32)
                return False
            if c.state == "running" and now - c.started_mono >= self.settings.init_container_run_s:
                c.current = Terminated(0, "Completed", "", rfc3339(c.started_wall), rfc3339(),
                                        c.container_id)
                c.state = "exited"
                c.ready = True
                continue
            return False
        return True

    def _sync_container(self, pod: PodRuntime, c: ContainerRuntime, now: float) -> None:
        if c.state == "new":
            self._start(pod, c, now)
            return
        if c.state == "running":
            ended = self._kwdb.exited(pod.cluster, pod.name) if c.kwdb else None
            if ended is not None:
                self._exited(pod, c, ended, now)
                return
            if c.stopping and self._advance_kill(pod, c, now):
                return
            self._probe_ticks(pod, c, now)
            return
        # exited: restart per policy, after the back-off
        assert c.current is not None
        policy = pod.restart_policy
        if policy == "Never" or (policy == "OnFailure" and c.current.exit_code == 0):
            return
        finished = c.finished_mono
        if c.backoff.in_backoff_since(finished, now):
            if not c.backoff_event_sent:
                self._event(pod, "Warning", "BackOff", "Back-off restarting failed container")
                c.backoff_event_sent = True
            return
        c.backoff.next(now)
        c.last = c.current
        c.restart_count += 1
        self._start(pod, c, now)

    def _argv(self, pod: PodRuntime, c: ContainerRuntime) -> tuple[list[str], dict[str, str]]:
        """The container's expanded command line, and its environment."""
        host_ip = self._nodes[pod.node].address

        def config_map(name: str) -> JsonObj | None:
            return self._rest.get_or_none(
                f"/api/v1/namespaces/{pod.namespace}/configmaps/{name}")

        env = container_env(c.spec, pod.pod, pod.pod_ip, host_ip, config_map)
        words = (c.spec.get("command") or []) + (c.spec.get("args") or [])
        return [expand(str(word), env) for word in words], env

    def _start(self, pod: PodRuntime, c: ContainerRuntime, now: float) -> None:
        if c.kwdb:
            try:
                argv, env = self._argv(pod, c)
            except ContainerConfigError as error:
                # Not created: the kubelet retries at its next sync of the pod.
                if c.config_error != str(error):
                    self._event(pod, "Warning", "Failed", f"Error: {error}")
                c.config_error = str(error)
                return
            c.config_error = ""
        c.state = "running"
        c.started_wall = time.time()
        c.started_mono = now
        c.container_id = "containerd://" + secrets.token_hex(32)
        c.ready = False
        c.started_probe = "startupProbe" not in c.spec
        # A new container id: each worker sets its initial result and leaves its hold
        # (worker.go:199-207); its ticker runs on from the first start (one worker per pod).
        c.on_hold = dict.fromkeys(c.on_hold, False)
        for kind in PROBE_KINDS:
            probe = c.spec.get(f"{kind}Probe")
            if probe is not None and kind not in c.probe_tick:
                # worker.go:128-135: the first probe waits a random part of the period.
                c.probe_tick[kind] = now + random.random() * self._period_s(probe)
        c.stopping = ""
        c.current = None
        c.backoff_event_sent = False
        crash = self._crash_faults.get((pod.namespace, pod.name))
        if crash is not None:
            self._exited(pod, c, crash, now)
            return
        if c.kwdb:
            assert pod.store_key is not None  # set when the volumes mounted
            outcome = self._kwdb.start(pod.cluster, pod.name, pod.store_key, argv, c.image,
                                       env=env, files=mounted_file_modes(c.spec, pod.pod))
            if not outcome.started:
                self._exited(pod, c, ProcessExit(outcome.exit_code, outcome.message), now)
                return
        self._event(pod, "Normal", "Started", f"Started container {c.name}")

    def _exited(
        self,
        pod: PodRuntime,
        c: ContainerRuntime,
        ended: ProcessExit,
        now: float,
        *,
        reason: str = "",
        graceful: bool = False,
    ) -> None:
        if c.kwdb:
            self._kwdb.stop(pod.cluster, pod.name, graceful=graceful)
        c.current = Terminated(
            exit_code=ended.exit_code,
            reason=reason or ("Completed" if ended.exit_code == 0 else "Error"),
            message=termination_message(c.spec, ended),
            started_at=rfc3339(c.started_wall),
            finished_at=rfc3339(),
            container_id=c.container_id,
        )
        c.state = "exited"
        c.ready = False
        c.stopping = ""
        c.finished_mono = now

    def _stop_processes(self, pod: PodRuntime, *, graceful: bool) -> None:
        if any(c.kwdb and c.state == "running" for c in pod.containers):
            self._kwdb.stop(pod.cluster, pod.name, graceful=graceful)

    # ---- probes ------------------------------------------------------------------------

    def _handler_ok(self, pod: PodRuntime, c: ContainerRuntime, probe: JsonObj) -> bool:
        """One probe of a KaiwuDB container as the kubelet runs it (pkg/kubelet/prober/
        prober.go runProbe): httpGet at the probe's port (a number, or a name resolved
        through the container's ports, findPortByName), scheme and path; tcpSocket at its
        port; exec. Other images' probes pass."""
        if not c.kwdb:
            return True
        if "httpGet" in probe:
            get = probe["httpGet"]
            return self._kwdb.http_get(pod.cluster, pod.name, _probe_port(c.spec, get.get("port")),
                                       str(get.get("scheme") or "HTTP").upper(),
                                       str(get.get("path") or "/"))
        if "exec" in probe:
            argv = probe["exec"].get("command") or []
            return self._run(pod, c, argv).exit_code == 0
        if "tcpSocket" in probe:
            return self._kwdb.tcp_open(pod.cluster, pod.name,
                                       _probe_port(c.spec, probe["tcpSocket"].get("port")))
        return False  # no handler: the API server refuses such a pod

    def _period_s(self, probe: JsonObj) -> float:
        """A probe's periodSeconds (API default 10) on the kubelet's time scale."""
        return int(probe.get("periodSeconds") or 10) * self.settings.time_scale

    def _probe_ticks(self, pod: PodRuntime, c: ContainerRuntime, now: float) -> None:
        """Run each probe worker whose ticker is due. A ticker that fell behind (a slow sync)
        drops the missed ticks, as Go's time.Ticker does."""
        for kind in PROBE_KINDS:
            probe = c.spec.get(f"{kind}Probe")
            if probe is None:
                if kind == "readiness":
                    # No readiness probe: ready once started (prober_manager.go UpdatePodStatus).
                    c.ready = c.started_probe and (pod.namespace, pod.name) not in \
                        self._unready_faults
                continue
            if now < c.probe_tick[kind]:
                continue
            period = self._period_s(probe)
            while c.probe_tick[kind] <= now:
                c.probe_tick[kind] += period
            self._do_probe(pod, c, kind, probe, now)
            if c.state != "running":
                return

    def _do_probe(
        self, pod: PodRuntime, c: ContainerRuntime, kind: str, probe: JsonObj, now: float
    ) -> None:
        """One tick of a probe worker, as pkg/kubelet/prober/worker.go doProbe (v1.20) runs
        it: on hold after a failure until a new container; nothing during initialDelaySeconds
        after the container started (worker.go:225-228, whole seconds); the startup probe only
        until it succeeded, the others only after (worker.go:230-240); a result changes the
        container's state only after successThreshold / failureThreshold identical results in
        a row (worker.go:259-271, API defaults 1 and 3); a liveness or startup failure kills
        the container, with the pod's termination grace period, and holds the worker
        (worker.go:277-282; kuberuntime_manager.go computePodActions)."""
        if c.on_hold[kind]:
            return
        since_start = (now - c.started_mono) / self.settings.time_scale
        if int(since_start) < int(probe.get("initialDelaySeconds") or 0):
            return
        if c.started_probe == (kind == "startup"):
            return
        if c.stopping and kind != "readiness":
            return  # being killed already
        unready = kind == "readiness" and (pod.namespace, pod.name) in self._unready_faults
        ok = not unready and self._handler_ok(pod, c, probe)
        if not ok:
            # prober.go:111-119 records an Unhealthy event at every failed probe.
            self._event(pod, "Warning", "Unhealthy",
                        f"{kind.capitalize()} probe failed: {_failure_output(probe)}")
        if c.last_result.get(kind) == ok:
            c.result_run[kind] += 1
        else:
            c.last_result[kind] = ok
            c.result_run[kind] = 1
        threshold = int(probe.get("successThreshold") or 1) if ok else \
            int(probe.get("failureThreshold") or 3)
        if c.result_run[kind] < threshold:
            return
        if kind == "readiness":
            c.ready = ok
            return
        if ok:
            if kind == "startup":
                c.started_probe = True
            return
        c.on_hold[kind] = True
        c.result_run[kind] = 0
        self._kill(pod, c, now, self._grace_s(pod),
                   f"Container {c.name} failed {kind} probe, will be restarted")

    # ---- termination -------------------------------------------------------------------

    @staticmethod
    def _grace_s(pod: PodRuntime) -> int:
        """The grace period killContainer gives a container, in the pod's seconds: the
        deletion's grace period if the pod is being deleted, else the pod's
        terminationGracePeriodSeconds (API default 30), at least 2 s
        (pkg/kubelet/kuberuntime/kuberuntime_container.go:605-630; no preStop hook here)."""
        meta, spec = pod.pod["metadata"], pod.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds")
        return max(int(grace if grace is not None else 30), MINIMUM_GRACE_PERIOD_S)

    def _kill(self, pod: PodRuntime, c: ContainerRuntime, now: float, grace_s: int,
              message: str) -> None:
        """killContainer (kuberuntime_container.go:588-646): SIGTERM now, SIGKILL once the
        grace period ends if the process still runs (the runtime's StopContainer). A KaiwuDB
        container drains first and exits when its drain is done (KwdbPort.terminate); other
        images exit at once. A container already being killed keeps the earlier deadline."""
        self._event(pod, "Normal", "Killing", message)
        kill_at = now + grace_s * self.settings.time_scale
        if c.stopping:
            c.kill_at = min(c.kill_at, kill_at)
        else:
            drain_s = self._kwdb.terminate(pod.cluster, pod.name) if c.kwdb else 0.0
            c.stopping = message
            c.drain_done_at = now + drain_s * self.settings.time_scale
            c.kill_at = kill_at
        self._advance_kill(pod, c, now)

    def _advance_kill(self, pod: PodRuntime, c: ContainerRuntime, now: float) -> bool:
        """A container being killed exits when its drain is done (exit code 0: kwbase returns
        no error after SIGTERM, cli/start.go:865-879) or, failing that, at the end of the grace
        period (SIGKILL, 137; the simulated KaiwuDB sees a stop without a finished drain).
        True once it has exited."""
        if now >= c.drain_done_at and c.drain_done_at <= c.kill_at:
            self._exited(pod, c, ProcessExit(0, ""), now, graceful=True)
            return True
        if now >= c.kill_at:
            log.info("%s/%s: container %s killed at the end of its grace period",
                     pod.namespace, pod.name, c.name)
            self._exited(pod, c, ProcessExit(137, ""), now, graceful=False)
            return True
        return False

    def _sync_terminating(self, pod: PodRuntime, now: float) -> None:
        """A deleted pod: kill every running container with the deletion's grace period
        (kubelet.go killPod), and once none runs, delete the pod for good with grace 0 and a
        uid precondition (the status manager's final delete)."""
        if pod.terminating_since is None:
            pod.terminating_since = now
            grace_s = self._grace_s(pod)
            for c in pod.init:
                if c.state == "running":
                    self._exited(pod, c, ProcessExit(0, ""), now)
            for c in pod.containers:
                if c.state == "running":
                    self._kill(pod, c, now, grace_s, f"Stopping container {c.name}")
        for c in pod.containers:
            if c.state == "running":
                ended = self._kwdb.exited(pod.cluster, pod.name) if c.kwdb else None
                if ended is not None:
                    self._exited(pod, c, ended, now)
                elif not c.stopping or not self._advance_kill(pod, c, now):
                    # The readiness worker goes on while the container drains (kwbase fails
                    # /health?ready=1 from SIGTERM on), so the pod turns unready.
                    self._probe_ticks(pod, c, now)
        self._post_status(pod)
        if any(c.state == "running" for c in pod.containers) or pod.delete_sent:
            return
        pod.delete_sent = True
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": pod.uid},
        }
        try:
            self._rest.delete(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", options)
        except ApiError as err:
            if err.status not in (404, 409):
                pod.delete_sent = False  # retry next sync
                raise
        except Exception:
            # The apiserver is restarting (connection refused): retry next sync, as a real
            # kubelet does, or the pod stays Terminating for good.
            pod.delete_sent = False
            raise

    def _post_status(self, pod: PodRuntime) -> None:
        status = pod_status(pod, self._nodes[pod.node].address)
        live = pod.pod.get("status", {})

        def strip_times(value: Any) -> Any:
            # Heartbeat-free comparison: only a change of substance is worth a write.
            if isinstance(value, dict):
                return {k: strip_times(v) for k, v in value.items() if k != "lastTransitionTime"}
            if isinstance(value, list):
                return [strip_times(v) for v in value]
            return value

        if strip_times(prune(status)) == strip_times(prune({k: live.get(k) for k in status})):
            return
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        try:
            updated = self._rest.patch(
                path, {"metadata": {"uid": pod.uid}, "status": status}
            )
        except ApiError as err:
            if err.status in (404, 409, 422):
                # Gone, or replaced by a pod of the same name (the uid no longer matches): the
                # watch will tell.
                return
            raise
        if updated.get("metadata", {}).get("uid") == pod.uid:
            pod.pod = updated

    def _event(self, pod: PodRuntime, kind: str, reason: str, message: str) -> None:
        now = rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod.name}.{secrets.token_hex(8)}", "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": pod.node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": pod.node,
        }
        try:
            self._rest.create(f"/api/v1/namespaces/{pod.namespace}/events", body)
        except ApiError as err:
            log.debug("event for %s/%s not recorded: %s", pod.namespace, pod.name, err)

    # ---- the exec endpoint's backend (called from server threads) ----------------------

    def _exec_target(
        self, node: str, namespace: str, pod: str, container: str
    ) -> tuple[PodRuntime, ContainerRuntime]:
        with self._lock:
            self._drain_events()
            for runtime in self._pods.values():
                if runtime.node == node and runtime.namespace == namespace and runtime.name == pod:
                    c = runtime.container(container)
                    if c is None:
                        raise ExecRefused(404, f'container not found ("{container}")')
                    if c.state != "running":
                        raise ExecRefused(500, f'container not found ("{container}")')
                    return runtime, c
        raise ExecRefused(404, "pod does not exist")

    def check_exec(self, node: str, namespace: str, pod: str, container: str) -> None:
        self._exec_target(node, namespace, pod, container)

    def run_exec(
        self, node: str, namespace: str, pod: str, container: str, argv: Sequence[str]
    ) -> CommandResult:
        runtime, c = self._exec_target(node, namespace, pod, container)
        result = self._run(runtime, c, argv)
        if result.answers_at_end:
            cap = self.settings.long_statement_cap_s
            if result.delay_s > cap:
                return CommandResult(b"", b"", -1, delay_s=cap, no_status=True)
            return result
        return dataclasses.replace(
            result, delay_s=min(result.delay_s, self.settings.exec_wait_cap_s)
        )

    def _run(self, pod: PodRuntime, c: ContainerRuntime, argv: Sequence[str]) -> CommandResult:
        cluster, name = pod.cluster, pod.name

        def kwbase(args: Sequence[str]) -> ExecOutput:
            return self._kwdb.exec(cluster, name, args)

        return run_in_container(argv, hostname=name, kwbase=kwbase if c.kwdb else None)

    def container_log(self, node: str, namespace: str, pod: str, container: str) -> str:
        with self._lock:
            for runtime in self._pods.values():
                if runtime.node == node and runtime.namespace == namespace and runtime.name == pod:
                    c = runtime.container(container)
                    if c is None:
                        raise ExecRefused(404, f'container not found ("{container}")')
                    if not c.kwdb:
                        return ""
                    cluster = runtime.cluster
                    break
            else:
                raise ExecRefused(404, "pod does not exist")
        return self._kwdb.log(cluster, pod)

    # ---- debugging -----------------------------------------------------------------------

    def describe(self) -> Iterator[str]:
        """One line per pod the kubelet runs, for test failure messages."""
        with self._lock:
            for pod in self._pods.values():
                states = ", ".join(
                    f"{c.name}={c.state}/r{c.restart_count}/{'ready' if c.ready else 'unready'}"
                    for c in pod.containers
                )
                yield f"{pod.namespace}/{pod.name} on {pod.node}: {states}"


def _probe_port(container: JsonObj, port: object) -> int | None:
    """A probe's port: a number as it is, a name through the container's ports (the kubelet's
    findPortByName, pkg/kubelet/prober/prober.go); None when the name is no port of the
    container (the probe then fails)."""
    if isinstance(port, int):
        return port
    text = str(port or "")
    if text.isdigit():
        return int(text)
    for each in container.get("ports") or ():
        if each.get("name") == text:
            return int(each.get("containerPort") or 0)
    return None


def _failure_output(probe: JsonObj) -> str:
    """What a failed probe reports, in the words of pkg/probe/http, tcp and exec (the
    simulated KaiwuDB says only whether a probe passed, not why)."""
    if "httpGet" in probe:
        return "HTTP probe failed"
    if "tcpSocket" in probe:
        return "dial tcp: connect: connection refused"
    return "command failed"
