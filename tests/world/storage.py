"""Simulated node-local storage: a StorageClass and a provisioner that pins volumes to nodes.

Made and started by tests/world/simworld.py; the kubelet (tests/world/kubelet.py) asks `Disks`
whether a claim's volume can be mounted, the faults API (tests/world/faults.py) loses disks.

How it plays with the real control plane: the StorageClass uses `WaitForFirstConsumer`, so the
real scheduler picks a node for a pod first and writes it on the pod's unbound claims
(`volume.kubernetes.io/selected-node`); the real PV controller marks such claims for our
provisioner (`volume.beta.kubernetes.io/storage-provisioner`). This provisioner then creates a
`local` PersistentVolume for the claim, pinned by nodeAffinity to that node, with a claimRef; the
real PV controller binds the two and the scheduler binds the pod. Volumes released by deleted
claims are deleted (reclaim policy Delete), as a dynamic provisioner does.

Volume expansion, as a CSI driver with the external-resizer does it: the StorageClass sets
`allowVolumeExpansion` (`StorageSettings.allow_expansion`), so the REAL API server lets a bound
claim's request rise (its PersistentVolumeClaimResize admission refuses it, 403, on a class that
does not; its validation refuses any decrease). The resizer here sees a bound claim asking more
than its status.capacity, marks it `Resizing` (markPVCResizeInProgress), grows the
PersistentVolume (spec.capacity: ControllerExpandVolume) and marks the claim
`FileSystemResizePending` in place of `Resizing` (markPVCAsFSResizeRequired); the kubelet of the
node where a running pod mounts it then grows the file system and writes the claim's new
status.capacity, removing the condition (online expansion, tests/world/kubelet.py). A claim
pending while no pod runs on a live node stays pending, as it would. A write that loses a race
is tried again at once (the real resizer requeues it). The kube-controller-manager's expand
controller (`persistentvolume-expander`) is not among the controllers the test world runs
(controlplane.py DEFAULT_CONTROLLERS); for these `local` volumes it would only record that it
waits for an external resizer.

Not modelled: capacity limits per node, snapshots, `Retain`/`Recycle`, attach/detach, resize
failures and classes without a resizer, `status.allocatedResources` and
`allocatedResourceStatuses` (Kubernetes 1.34+), filesystem contents (KaiwuDB data lives in the
simulated KaiwuDB, keyed by the claim's uid; its store capacity does not follow the claim's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.world.kube_rest import ApiError, JsonObj, KubeRest, Reflector

log = logging.getLogger(__name__)

SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
# The claim conditions of a resize (core/v1 PersistentVolumeClaimConditionType).
FILE_SYSTEM_RESIZE_PENDING = "FileSystemResizePending"
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def storage_bytes(text: object) -> int:
    """A storage quantity in bytes: whole numbers with a binary or decimal suffix, the only
    spellings claims carry (ValueError otherwise)."""
    value = str(text)
    for suffixes in (_BINARY, _DECIMAL):
        for suffix, factor in sorted(suffixes.items(), key=lambda item: -len(item[0])):
            number = value[: len(value) - len(suffix)] if suffix else value
            if value.endswith(suffix) and number.isdigit():
                return int(number) * factor
    raise ValueError(f"{value!r} is not a storage size the simulated storage reads")


@dataclass(frozen=True)
class StorageSettings:
    """The simulated storage class.

    class_name / provisioner: what claims name and what the PV controller hands claims to.
    default_class: whether claims without a class get this one (annotation is-default-class).
    base_path: where the `local` volumes claim to live on the node (shown in PVs and errors).
    allow_expansion: the class's allowVolumeExpansion (the resizer grows any claim the API
        server let grow; a story may turn it off on the live class).
    """

    class_name: str = "kaiwu-local"
    provisioner: str = "kaiwu.test/local-provisioner"
    default_class: bool = True
    base_path: str = "/mnt/kaiwu-local"
    allow_expansion: bool = True


class Disks:
    """Which claim's volume sits on which node's disk, and which disks are gone. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._node_of: dict[str, str] = {}  # claim uid -> node
        self._path_of: dict[str, str] = {}  # claim uid -> directory on that node
        self._lost: set[str] = set()  # claim uids whose disk is gone
        # claim uid -> (namespace, name): volume grown, its file system not yet
        self._resize_pending: dict[str, tuple[str, str]] = {}

    def place(self, claim_uid: str, node: str, path: str) -> None:
        with self._lock:
            self._node_of[claim_uid] = node
            self._path_of[claim_uid] = path

    def path_of(self, claim_uid: str) -> str:
        with self._lock:
            return self._path_of.get(claim_uid, "")

    def node_of(self, claim_uid: str) -> str | None:
        with self._lock:
            return self._node_of.get(claim_uid)

    def lose(self, claim_uid: str) -> None:
        with self._lock:
            self._lost.add(claim_uid)

    def is_lost(self, claim_uid: str) -> bool:
        with self._lock:
            return claim_uid in self._lost

    def file_system_resize_pending(self, claim_uid: str, namespace: str, name: str) -> None:
        with self._lock:
            self._resize_pending[claim_uid] = (namespace, name)

    def file_system_to_resize(self, claim_uid: str) -> tuple[str, str] | None:
        """The claim (namespace, name) whose file system the kubelet mounting it should grow."""
        with self._lock:
            return self._resize_pending.get(claim_uid)

    def file_system_resized(self, claim_uid: str) -> None:
        with self._lock:
            self._resize_pending.pop(claim_uid, None)


def _condition(kind: str, message: str) -> JsonObj:
    condition: JsonObj = {"type": kind, "status": "True",
                          "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if message:
        condition["message"] = message
    return condition


def volume_name(claim_uid: str) -> str:
    """PVs are named after the claim's uid, as Kubernetes' dynamic provisioners do."""
    return f"pvc-{claim_uid}"


class SimStorage:
    """The StorageClass and its provisioner, running in reflector threads."""

    def __init__(
        self,
        rest: KubeRest,
        disks: Disks,
        settings: StorageSettings | None = None,
        *,
        node_alive: Callable[[str], bool] = lambda _node: True,
    ) -> None:
        self.settings = settings or StorageSettings()
        self.disks = disks
        self._rest = rest
        self._node_alive = node_alive
        self._claims = Reflector(rest, "/api/v1/persistentvolumeclaims", self._on_claim,
                                 name="sim-provisioner-claims")
        self._volumes = Reflector(rest, "/api/v1/persistentvolumes", self._on_volume,
                                  name="sim-provisioner-volumes")

    def start(self, timeout_s: float = 10.0) -> None:
        self.ensure_storage_class()
        self._volumes.start()
        self._claims.start()
        if not (self._volumes.wait_synced(timeout_s) and self._claims.wait_synced(timeout_s)):
            raise RuntimeError("simulated provisioner could not list claims and volumes")

    def stop(self) -> None:
        self._claims.stop()
        self._volumes.stop()

    def storage_class(self) -> JsonObj:
        s = self.settings
        annotations = {DEFAULT_CLASS: "true"} if s.default_class else {}
        return {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": s.class_name, "annotations": annotations},
            "provisioner": s.provisioner,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": s.allow_expansion,
        }

    def ensure_storage_class(self) -> None:
        try:
            self._rest.create("/apis/storage.k8s.io/v1/storageclasses", self.storage_class())
        except ApiError as err:
            if err.status != 409:
                raise

    # ---- provisioning ------------------------------------------------------------------

    def _on_claim(self, kind: str, claim: JsonObj) -> None:
        if kind == "DELETED":
            self.disks.file_system_resized(claim["metadata"]["uid"])
            return
        if claim.get("status", {}).get("phase") == "Bound":
            self._resize(claim)
            return
        meta = claim["metadata"]
        annotations: dict[str, str] = meta.get("annotations") or {}
        node = annotations.get(SELECTED_NODE)
        if (
            annotations.get(STORAGE_PROVISIONER) != self.settings.provisioner
            or not node
            or claim.get("spec", {}).get("volumeName")
            or claim.get("status", {}).get("phase") not in (None, "Pending")
        ):
            return
        if not self._node_alive(node):
            # The provisioner's agent on that node cannot create the directory: hand the claim
            # back to the scheduler, as external-provisioner does when provisioning fails there.
            self._reschedule(claim, node)
            return
        self._provision(claim, node)

    def _provision(self, claim: JsonObj, node: str) -> None:
        meta = claim["metadata"]
        uid = meta["uid"]
        spec = claim.get("spec", {})
        name = volume_name(uid)
        volume: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "annotations": {PROVISIONED_BY: self.settings.provisioner},
                "labels": {"kaiwu.test/node": node},
            },
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "persistentVolumeReclaimPolicy": "Delete",
                # Any class naming this provisioner (a story may add one): the PV controller binds
                # a claim only to a volume of its own class.
                "storageClassName": spec.get("storageClassName") or self.settings.class_name,
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": uid,
                },
                "local": {"path": f"{self.settings.base_path}/{name}"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [node],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        }
        self.disks.place(uid, node, volume["spec"]["local"]["path"])
        try:
            self._rest.create("/api/v1/persistentvolumes", volume)
            log.info("provisioned %s on %s for %s/%s", name, node, meta["namespace"], meta["name"])
        except ApiError as err:
            if err.status != 409:  # already provisioned on an earlier event
                raise

    # ---- resizing ----------------------------------------------------------------------

    def _resize(self, event_claim: JsonObj) -> None:
        """The external-resizer's part of a volume expansion (see the module docstring),
        judged on the claim and volume as they are now: an event may be older than the
        resizer's own last write."""
        meta = event_claim["metadata"]
        if self.disks.node_of(meta["uid"]) is None:
            return  # not one of ours
        path = f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}"
        for _attempt in range(5):
            try:
                self._resize_once(path, meta["uid"])
                return
            except ApiError as err:
                if err.status == 404:
                    return
                if err.status != 409:
                    raise
                # Lost a race with another writer: read again and retry, as the resizer's work
                # queue does.
        log.warning("claim %s/%s: not resized (conflicts)", meta["namespace"], meta["name"])

    def _resize_once(self, path: str, uid: str) -> None:
        claim = self._rest.get_or_none(path)
        if claim is None or claim["metadata"]["uid"] != uid:
            return
        meta, spec, status = claim["metadata"], claim.get("spec", {}), claim.get("status", {})
        volume_path = f"/api/v1/persistentvolumes/{spec.get('volumeName', '')}"
        volume = self._rest.get_or_none(volume_path) if spec.get("volumeName") else None
        if volume is None or status.get("phase") != "Bound":
            return
        requested = spec["resources"]["requests"]["storage"]
        try:
            wanted = storage_bytes(requested)
            capacity = storage_bytes((status.get("capacity") or {}).get("storage"))
            grown = storage_bytes(volume["spec"]["capacity"]["storage"])
        except (KeyError, ValueError):
            log.warning("claim %s/%s: unreadable sizes, not resized", meta["namespace"],
                        meta["name"])
            return
        if wanted <= capacity:
            return
        kinds = {c.get("type") for c in status.get("conditions") or ()
                 if c.get("status") == "True"}
        if grown < wanted:
            # markPVCResizeInProgress, then ControllerExpandVolume: the volume itself grows.
            if "Resizing" not in kinds:
                self._rest.patch(path + "/status", {"status": {"conditions": [_condition(
                    "Resizing", "")]}})
            volume["spec"]["capacity"]["storage"] = requested
            self._rest.put(volume_path, volume)
            log.info("claim %s/%s: volume %s grown to %s", meta["namespace"], meta["name"],
                     volume["metadata"]["name"], requested)
            kinds = {"Resizing"}
        if FILE_SYSTEM_RESIZE_PENDING not in kinds:
            # markPVCAsFSResizeRequired: the file system is the kubelet's part.
            self._rest.patch(path + "/status", {"status": {"conditions": [_condition(
                FILE_SYSTEM_RESIZE_PENDING, "Waiting for user to (re-)start a pod to finish "
                "file system resize of volume on node.")]}})
        self.disks.file_system_resize_pending(uid, meta["namespace"], meta["name"])

    def _reschedule(self, claim: JsonObj, node: str) -> None:
        meta = claim["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}"
        try:
            self._rest.patch(path, {"metadata": {"annotations": {SELECTED_NODE: None}}})
        except ApiError as err:
            if err.status != 404:
                raise
        log.info("claim %s/%s: node %s is down, rescheduling", meta["namespace"], meta["name"],
                 node)

    # ---- reclaiming --------------------------------------------------------------------

    def _on_volume(self, kind: str, volume: JsonObj) -> None:
        if kind == "DELETED":
            return
        meta = volume["metadata"]
        if (meta.get("annotations") or {}).get(PROVISIONED_BY) != self.settings.provisioner:
            return
        if meta.get("deletionTimestamp"):
            return
        spec = volume.get("spec", {})
        claim_uid = (spec.get("claimRef") or {}).get("uid")
        node = (meta.get("labels") or {}).get("kaiwu.test/node")
        if claim_uid and node:
            # Volumes made before this provisioner started.
            self.disks.place(claim_uid, node, (spec.get("local") or {}).get("path", ""))
        if (
            volume.get("status", {}).get("phase") == "Released"
            and spec.get("persistentVolumeReclaimPolicy") == "Delete"
        ):
            try:
                self._rest.delete(f"/api/v1/persistentvolumes/{meta['name']}")
                log.info("deleted released volume %s", meta["name"])
            except ApiError as err:
                if err.status != 404:
                    raise
