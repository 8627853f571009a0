"""Faults on demand for the test world: lose a node, crash-loop a pod, make it unready, lose a disk.

Tests (through the `faults` fixture in tests/world/kubelet_fixtures.py) and later reconciler
tests call these to make real Kubernetes and the simulated KaiwuDB see a failure; `heal()` undoes
every fault that can be undone, so one test's faults do not leak into the next.

What each fault looks like from outside:
- lose_node: the node's kubelet stops posting status and renewing its Lease, its endpoint
  refuses connections (exec fails). Powered off (the default), its KaiwuDB processes stop;
  with partition=True they run on, unreachable. The REAL node lifecycle controller marks the node
  Unknown after its grace period, marks its pods not ready, taints the node and (after the pods'
  tolerations run out) evicts them, which leaves them Terminating for good because no kubelet
  confirms. restore_node brings it back: pods marked for deletion go; after a power-off the
  others' containers restart, after a partition they run on.
- crash_loop: the containers of the pod of that name (now, or recreated later) exit with the
  given code now and at every start; the kubelet restarts them with its CrashLoopBackOff
  back-off.
- set_unready: the readiness probes of the pod of that name fail; its containers keep running.
- lose_volume: the claim's local disk is gone: the store vanishes from KaiwuDB, the containers
  using it stop, and mounts fail from then on (ContainerCreating, FailedMount events). Permanent:
  only deleting the claim (and the pod) brings a fresh, empty volume.
"""

from __future__ import annotations

import threading

from tests.world.kube_rest import KubeRest
from tests.world.kubelet import SimKubelet
from tests.world.kwdb_port import ClusterKey, KwdbPort
from tests.world.storage import Disks


class Faults:
    """The fault switches of one simulated world. Thread-safe; every call takes effect at once."""

    def __init__(self, rest: KubeRest, kubelet: SimKubelet, kwdb: KwdbPort, disks: Disks) -> None:
        self._rest = rest
        self._kubelet = kubelet
        self._kwdb = kwdb
        self._disks = disks
        self._lock = threading.Lock()
        self._lost_nodes: set[str] = set()
        self._crashing: set[tuple[str, str]] = set()
        self._unready: set[tuple[str, str]] = set()

    def lose_node(self, name: str, *, partition: bool = False) -> None:
        with self._lock:
            self._kubelet.lose_node(name, partition=partition)
            self._lost_nodes.add(name)

    def restore_node(self, name: str) -> None:
        with self._lock:
            self._kubelet.restore_node(name)
            self._lost_nodes.discard(name)

    def crash_loop(
        self, namespace: str, pod: str, *, exit_code: int = 1, message: str = "simulated crash"
    ) -> None:
        with self._lock:
            self._kubelet.crash_loop(namespace, pod, exit_code=exit_code, message=message)
            self._crashing.add((namespace, pod))

    def stop_crash_loop(self, namespace: str, pod: str) -> None:
        with self._lock:
            self._kubelet.stop_crash_loop(namespace, pod)
            self._crashing.discard((namespace, pod))

    def set_unready(self, namespace: str, pod: str, unready: bool = True) -> None:
        with self._lock:
            self._kubelet.set_unready(namespace, pod, unready)
            if unready:
                self._unready.add((namespace, pod))
            else:
                self._unready.discard((namespace, pod))

    def lose_volume(self, namespace: str, claim: str) -> str:
        """Lose the disk under a bound claim; returns the claim's uid (the lost store's key).

        The claim's KaiwuDB cluster is its StatefulSet: named by the claim's
        app.kubernetes.io/instance label (the renderer's), else by the claim's name
        (`<template>-<statefulset>-<ordinal>`)."""
        live = self._rest.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
        uid = str(live["metadata"]["uid"])
        instance = (live["metadata"].get("labels") or {}).get("app.kubernetes.io/instance")
        statefulset = instance or claim.split("-", 1)[-1].rsplit("-", 1)[0]
        with self._lock:
            self._disks.lose(uid)
            self._kwdb.lose_store(ClusterKey(namespace, statefulset), uid)
            self._kubelet.volume_lost(uid)
        return uid

    def heal(self) -> None:
        """Restore lost nodes, end crash loops, clear forced unreadiness. Lost volumes stay
        lost, as real disks do."""
        with self._lock:
            for name in sorted(self._lost_nodes):
                self._kubelet.restore_node(name)
            for namespace, pod in sorted(self._crashing):
                self._kubelet.stop_crash_loop(namespace, pod)
            for namespace, pod in sorted(self._unready):
                self._kubelet.set_unready(namespace, pod, False)
            self._lost_nodes.clear()
            self._crashing.clear()
            self._unready.clear()
