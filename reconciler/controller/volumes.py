"""The "volumes" step: every claim of a cluster grown to spec.storage.size.

Run by the Controller (reconciler.controller.controller) after "prune", unless paused.

How Kubernetes grows a volume, and what this step does about each part:
- A bound claim's `spec.resources.requests.storage` may rise (never fall: API validation), and
  only when its StorageClass sets `allowVolumeExpansion: true` (the API server's
  PersistentVolumeClaimResize admission answers 403 otherwise). This step raises it on every
  claim of the cluster below spec.storage.size: one merge patch per claim, repeated harmlessly.
  A refusal stalls the cluster (VolumeExpansionRefused) with the server's words and the fix; the
  patch is tried again every `Settings.volume_retry_s`, so enabling expansion on the class is
  picked up without any other change. A claim not yet bound is left alone (validation forbids
  changing it); it is grown once bound.
- The storage provider's resizer then expands the volume (claim condition `Resizing`) and, for
  a file system volume, hands the rest to the kubelet of the node that mounts it
  (`FileSystemResizePending`), which grows the file system while the pod runs; the claim's
  status.capacity shows the new size once both are done. Until then the cluster is not Ready
  (VolumesResizing, naming each claim and what it waits for). Nothing is restarted: storage
  that can only grow a file system offline waits for its pod's next start, and the message says
  so.
- The StatefulSet's claim template cannot change in place: the render step renders the new
  size, and the recreate step (reconciler.controller.repair) deletes the StatefulSet with its
  pods and claims orphaned and makes it again, adopting them (no pod restarts), so claims made
  later (a scale-out, a replaced volume) get the new size from the template.

Nothing here is remembered but the server's last refusal of each claim (to keep from asking
again at every pass); a restarted reconciler asks once and reaches the same state.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import SHORT_REQUEUE_S, Shared
from reconciler.kaiwudb.pods import CLAIM_TEMPLATE
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import Obj, meta
from renderer import quantity
from renderer.builders import selector_labels

# Claim conditions the resizer and the kubelet set (core/v1 PersistentVolumeClaimConditionType).
RESIZING = "Resizing"
FILE_SYSTEM_RESIZE_PENDING = "FileSystemResizePending"


@dataclass(frozen=True)
class Refusal:
    """The server's last answer to growing one claim: asked again after `until`."""

    until: float
    message: str


class VolumesStep:
    """See the module docstring."""

    name = "volumes"
    always = False

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._lock = threading.Lock()
        # (namespace, cluster) -> {(claim uid, size asked) -> the server's refusal}
        self._refused: dict[ClusterKey, dict[tuple[str, str], Refusal]] = {}

    def wanted(self, p: ObjectPass) -> bool:
        return not p.paused and p.cluster is not None

    def forget(self, key: ClusterKey) -> None:
        with self._lock:
            self._refused.pop(key, None)

    def run(self, p: ObjectPass) -> None:
        cluster = p.cluster
        assert cluster is not None
        want = quantity.parse(cluster.storage_size).value
        size = quantity.canonical(cluster.storage_size)
        refused: list[tuple[Obj, str]] = []
        resizing: list[str] = []
        for claim in self.claims(p):
            name = str(meta(claim).get("name"))
            requested = _size(claim.get("spec"), "resources", "requests")
            capacity = _size(claim.get("status"), "capacity")
            if requested is None or capacity is None or capacity[0] >= want:
                continue
            if (claim.get("status") or {}).get("phase") != "Bound":
                continue  # its spec cannot change until bound; grown then
            if requested[0] < want:
                answer = self.grow(p, claim, requested[1], size)
                if isinstance(answer, Refusal):
                    refused.append((claim, answer.message))
                if answer is not True:
                    continue
            resizing.append(f"{name} ({capacity[1]} -> {size}: {_waiting_for(claim)})")
        if refused:
            names = ", ".join(str(meta(claim).get("name")) for claim, _ in refused)
            classes = sorted({str((claim.get("spec") or {}).get("storageClassName") or "")
                              for claim, _ in refused} - {""})
            where = (f"StorageClass {', '.join(classes)}" if classes
                     else "the claims' StorageClass")
            p.stalled.append(("VolumeExpansionRefused", (
                f"claims {names} cannot grow to {size}: {refused[0][1]}. Set "
                f"allowVolumeExpansion: true on {where} if its provisioner can expand volumes "
                f"(tried again every {self.shared.settings.volume_retry_s:g}s); until then they "
                "keep their size and only new claims get the new one (spec.storage.size cannot "
                "go back down)")))
            p.requeue_in(self.shared.settings.volume_retry_s)
        if resizing:
            p.not_ready.append(("VolumesResizing", "growing claims: " + "; ".join(resizing)))
            p.requeue_in(self.shared.settings.lifecycle_poll_s)

    def claims(self, p: ObjectPass) -> list[Obj]:
        """The cluster's data claims (data-<cluster>-<ordinal>), from the cache."""
        cluster = p.cluster
        assert cluster is not None
        pattern = re.compile(rf"{re.escape(CLAIM_TEMPLATE)}-{re.escape(cluster.name)}-\d+")
        return sorted((claim for claim in self.shared.view.list(
            k.PVC, cluster.namespace, selector_labels(cluster))
            if pattern.fullmatch(str(meta(claim).get("name")))
            and not meta(claim).get("deletionTimestamp")),
            key=lambda claim: str(meta(claim).get("name")))

    def grow(self, p: ObjectPass, claim: Obj, before: str, size: str) -> bool | Refusal:
        """Ask for `size` on the claim (`before` it asks for less): True once asked, the
        server's refusal if it refuses (now or lately), False if the claim changed meanwhile
        (the next pass looks again)."""
        md = meta(claim)
        uid, name = str(md.get("uid")), str(md.get("name"))
        with self._lock:
            known = self._refused.get(p.key, {}).get((uid, size))
        if known is not None and p.now < known.until:
            return known
        self.shared.metrics.writes_total.labels(verb="patch", kind=k.PVC.kind).inc()
        try:
            # The uid guards against a claim of the same name made again since it was read;
            # repeating the patch after a crash changes nothing.
            self.shared.kube.patch(k.PVC, p.key.namespace, name, {
                "metadata": {"uid": uid},
                "spec": {"resources": {"requests": {"storage": size}}}})
        except ApiError as error:
            if error.not_found or error.conflict:
                p.requeue_in(SHORT_REQUEUE_S)  # gone or made again: the next pass looks
                return False
            if error.status not in (403, 422):
                raise
            self.shared.metrics.errors_total.labels(stage="apply").inc()
            refusal = Refusal(p.now + self.shared.settings.volume_retry_s, error.message)
            with self._lock:
                self._refused.setdefault(p.key, {})[(uid, size)] = refusal
            return refusal
        with self._lock:
            self._refused.get(p.key, {}).pop((uid, size), None)
        p.act("VolumeExpanding", f"PersistentVolumeClaim/{name}", f"{before} -> {size}")
        return True


def _size(section: Any, *path: str) -> tuple[Decimal, str] | None:
    """The storage quantity at section[path...]["storage"]: its value and its text as written;
    None if absent or not a quantity (a claim is data from the cluster: read with care)."""
    value: Any = section
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    text = value.get("storage") if isinstance(value, Mapping) else None
    if not isinstance(text, str | int):
        return None
    try:
        return quantity.parse(text).value, str(text)
    except quantity.QuantityError:
        return None


def _waiting_for(claim: Obj) -> str:
    """What a claim asked to grow waits for, from its conditions."""
    conditions = {str(c.get("type")): c for c in (claim.get("status") or {}).get(
        "conditions") or () if isinstance(c, Mapping) and c.get("status") == "True"}
    if FILE_SYSTEM_RESIZE_PENDING in conditions:
        return ("the file system resize by the kubelet of its node (done while the pod runs; "
                "storage that grows only offline needs the pod restarted)")
    if RESIZING in conditions:
        return "the storage provider expanding the volume"
    for kind, condition in sorted(conditions.items()):
        if "Error" in kind:
            return f"{kind}: {str(condition.get('message') or '')[:200]}"
    return "the storage provider's resizer"
