"""The "volumes" step: every claim of a cluster grown to spec.storage.size.

Run by the Controller (reconciler.controller.controller) after "prune", unless paused. Its
verdict is the VolumesExpanded condition (reconciler.status), apart from Ready: a cluster whose
volumes cannot grow, or grow slowly, serves as before, and a storage class that cannot expand
must not hold a cluster not-Ready (or Degraded in Argo CD) for ever.

How Kubernetes grows a volume, and what this step does about each part:
- A bound claim's `spec.resources.requests.storage` may rise (API validation refuses a decrease
  before 1.34), and only when its StorageClass sets `allowVolumeExpansion: true` (the API
  server's PersistentVolumeClaimResize admission answers 403 otherwise). This step raises it on
  the claim of every ordinal the cluster runs (data-<cluster>-<n>, n < spec.replicas) that is
  below spec.storage.size: one merge patch per claim, guarded by the claim's uid, repeated
  harmlessly. A refusal is VolumeExpansionRefused with the server's words and the fix (a Warning
  Event when first heard); the patch is tried again every `Settings.volume_retry_s`, so enabling
  expansion on the class is picked up with no other change. Until then the volumes keep their
  size and the cluster runs on. A claim not yet bound is left alone (validation forbids changing
  it); it is grown once bound.
- The storage provider's resizer then expands the volume (claim condition `Resizing`) and, for
  a file system volume, hands the rest to the kubelet of the node that mounts it
  (`FileSystemResizePending`), which grows the file system while the pod runs; the claim's
  status.capacity shows the new size once both are done: VolumesResizing until then, naming
  each claim and what it waits for; VolumeExpansionFailed when a claim reports an error
  (`ControllerResizeError`, `NodeResizeError`, `allocatedResourceStatuses` ...Infeasible).
  Nothing is restarted: storage that can grow a file system only offline waits for the pod's
  next start, and the message says so. Claim status changes come through the watch; the step
  also looks again every `volume_retry_s`.
- The StatefulSet's claim template cannot change in place: the render step renders the new
  size, and the recreate step (reconciler.controller.repair) deletes the StatefulSet with its
  pods and claims orphaned and makes it again, adopting them (no pod restarts), so claims made
  later (a scale-out, a replaced volume) get the new size from the template.

Claims made before the claim template carried the managed-by label are not in the watch cache:
such a claim is read from the API and labelled once, after which the cache has it (a steady
pass reads nothing). Nothing here is remembered but the server's last refusal of each claim (to
keep from asking again at every pass); a restarted reconciler asks once and reaches the same
state.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from reconciler import status as st
from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import SHORT_REQUEUE_S, ControllerMemory
from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.pods import CLAIM_TEMPLATE
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import Obj, meta
from renderer import quantity
from renderer.builders import MANAGED_BY, MANAGED_BY_LABEL, selector_labels

# Claim conditions of a resize (core/v1 PersistentVolumeClaimConditionType), and the text of
# the PersistentVolumeClaimResize admission's refusal (plugin/pkg/admission/storage/
# persistentvolume/resize): the one refusal the StorageClass fixes.
RESIZING = "Resizing"
FILE_SYSTEM_RESIZE_PENDING = "FileSystemResizePending"
CLASS_REFUSAL = "storageclass that provisions the pvc must support resize"
# Claims named in one condition message; the rest are counted (messages are clipped at 2 KiB).
NAMED_CLAIMS = 10


@dataclass(frozen=True)
class Refusal:
    """The server's last answer to growing one claim: asked again after `until`."""

    until: float
    message: str

    @property
    def by_class(self) -> bool:
        return CLASS_REFUSAL in self.message


class VolumesStep:
    """See the module docstring."""

    name = "volumes"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory
        self._lock = threading.Lock()
        # cluster -> {(claim uid, size asked) -> the server's refusal}
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
        refused: list[tuple[Obj, Refusal]] = []
        failed: list[str] = []
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
                    refused.append((claim, answer))
                if answer is not True:
                    continue
            problem = _failure(claim)
            if problem:
                failed.append(f"{name}: {problem}")
            else:
                resizing.append(f"{name} ({capacity[1]} -> {size}: {_waiting_for(claim)})")
        p.conditions.append(self.verdict(size, refused, failed, resizing))
        if refused or failed or resizing:
            p.requeue_in(self.ctx.settings.volume_retry_s)

    def verdict(self, size: str, refused: list[tuple[Obj, Refusal]], failed: list[str],
                resizing: list[str]) -> st.Condition:
        """The VolumesExpanded condition: the fix first (messages are clipped at 2 KiB)."""
        parts: list[str] = []
        if refused:
            names = ", ".join(_named([str(meta(claim).get("name")) for claim, _ in refused]))
            by_class = [claim for claim, refusal in refused if refusal.by_class]
            retry = f"asked again every {self.ctx.settings.volume_retry_s:g}s"
            if by_class:
                classes = sorted({str((claim.get("spec") or {}).get("storageClassName") or "")
                                  for claim in by_class} - {""})
                where = (f"StorageClass {', '.join(classes)}" if classes
                         else "the claims' StorageClass")
                parts.append(
                    f"set allowVolumeExpansion: true on {where} if its provisioner can expand "
                    f"volumes ({retry}); until then the volumes keep their size, the cluster "
                    f"runs on and new volumes get {size}. Claims {names} cannot grow to {size}: "
                    f"{refused[0][1].message}")
            else:
                parts.append(f"the API server refused growing claims {names} to {size} "
                             f"({retry}): {refused[0][1].message}")
        if failed:
            parts.append("resize failed (kubectl describe pvc NAME shows the storage "
                         "provider's events): " + "; ".join(_named(failed)))
        if resizing:
            parts.append(f"growing to {size}: " + "; ".join(_named(resizing)))
        if not parts:
            return st.Condition(st.VOLUMES_EXPANDED, "True", "SizeReached",
                                f"every bound volume has {size} or more")
        reason = ("VolumeExpansionRefused" if refused else "VolumeExpansionFailed" if failed
                  else "VolumesResizing")
        return st.Condition(st.VOLUMES_EXPANDED, "False", reason, "; ".join(parts))

    def claims(self, p: ObjectPass) -> list[Obj]:
        """The data claim of each ordinal the cluster runs: from the cache, or, for a claim
        made before the template labelled claims for it, read from the API and labelled once."""
        cluster = p.cluster
        assert cluster is not None
        found = []
        for ordinal in range(cluster.replicas):
            name = f"{CLAIM_TEMPLATE}-{cluster.name}-{ordinal}"
            claim = self.ctx.view.peek(k.PVC, cluster.namespace, name)
            if claim is None:
                claim = self.ctx.kube.get(k.PVC, cluster.namespace, name)
                if claim is None:
                    continue  # not made yet: made from the template, at its size
                self.label(p, claim)
            if not meta(claim).get("deletionTimestamp"):
                found.append(claim)
        return found

    def label(self, p: ObjectPass, claim: Obj) -> None:
        """Give an old claim the labels the claim cache selects on (only if it has none of
        ours: a claim labelled for another cluster is not taken over)."""
        cluster = p.cluster
        assert cluster is not None
        labels = meta(claim).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) is not None:
            return
        wanted = {**selector_labels(cluster), MANAGED_BY_LABEL: MANAGED_BY}
        try:
            self.ctx.kube.patch(k.PVC, cluster.namespace, str(meta(claim).get("name")), {
                "metadata": {"uid": meta(claim).get("uid"), "labels": wanted}})
        except ApiError as error:
            if not (error.not_found or error.conflict or error.status == 422):
                raise

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
        try:
            # The uid guards against a claim of the same name made again since it was read
            # (the server answers 422: metadata.uid is immutable); repeating the patch after a
            # crash changes nothing.
            self.ctx.kube.patch(k.PVC, p.key.namespace, name, {
                "metadata": {"uid": uid},
                "spec": {"resources": {"requests": {"storage": size}}}})
        except ApiError as error:
            if error.not_found or error.conflict or (
                    error.status == 422 and "metadata.uid" in error.message):
                p.requeue_in(SHORT_REQUEUE_S)  # gone or made again: the next pass looks
                return False
            # Anything else (the class, a ResourceQuota, a policy webhook, a server error) is
            # said as the server said it and asked again later; the other steps run on.
            self.ctx.metrics.errors_total.labels(stage="apply").inc()
            refusal = Refusal(p.now + self.ctx.settings.volume_retry_s, error.message)
            with self._lock:
                self._refused.setdefault(p.key, {})[(uid, size)] = refusal
            if known is None:
                p.events.append(("Warning", "VolumeExpansionRefused",
                                 f"PersistentVolumeClaim/{name}: {before} -> {size}: "
                                 f"{error.message}"))
            return refusal
        with self._lock:
            self._refused.get(p.key, {}).pop((uid, size), None)
        p.act("VolumeExpanding", f"PersistentVolumeClaim/{name}", f"{before} -> {size}")
        return True


def _named(items: list[str]) -> list[str]:
    """At most NAMED_CLAIMS items, then how many more."""
    return items[:NAMED_CLAIMS] + ([f"and {len(items) - NAMED_CLAIMS} more"]
                                   if len(items) > NAMED_CLAIMS else [])


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


def _conditions(claim: Obj) -> dict[str, Mapping[str, Any]]:
    """The claim's conditions that hold (status True), by type."""
    status = claim.get("status")
    listed = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(listed, list):
        return {}
    return {str(c.get("type")): c for c in listed
            if isinstance(c, Mapping) and c.get("status") == "True"}


def _failure(claim: Obj) -> str:
    """Why the claim's resize failed, from its conditions and allocatedResourceStatuses
    (Kubernetes 1.34+); '' when nothing failed."""
    for kind, condition in sorted(_conditions(claim).items()):
        if kind.endswith("Error"):  # ControllerResizeError, NodeResizeError
            return f"{kind}: {str(condition.get('message') or '')[:300]}"
    status = claim.get("status")
    statuses = status.get("allocatedResourceStatuses") if isinstance(status, Mapping) else None
    value = statuses.get("storage") if isinstance(statuses, Mapping) else None
    if isinstance(value, str) and value.endswith("Infeasible"):
        return f"allocatedResourceStatuses.storage is {value[:100]}"
    return ""


def _waiting_for(claim: Obj) -> str:
    """What a claim asked to grow waits for, from its conditions."""
    conditions = _conditions(claim)
    if FILE_SYSTEM_RESIZE_PENDING in conditions:
        return ("the kubelet of its node growing the file system (done while the pod runs; "
                "storage that grows only offline needs the pod restarted)")
    if RESIZING in conditions:
        return "the storage provider expanding the volume"
    return ("no resizer has acted yet (kubectl describe pvc shows the storage provider's "
            "events; a class without a resizer never grows it)")
