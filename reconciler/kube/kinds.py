"""Every Kubernetes kind the reconciler reads or writes: where it lives in the REST API.

One registry (`KINDS`) from which the other modules derive what they need: the API client
(reconciler.kube.client) builds request paths from a `Kind`, the watch caches
(reconciler.kube.cache) list which kinds they cache and what they keep of each (`slim`), and the
controller looks rendered objects up by (apiVersion, kind). Imports only the leaf model and the
renderer's schema names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from reconciler.model import Obj
from renderer import schema
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the REST API, and how the reconciler treats it.

    cached: kept in a watch cache selected by the managed-by label (reconciler.kube.cache): the
        kinds the renderer emits, and the pods and claims health and failover read.
    always_served: every Kubernetes the renderer targets serves it; others (a CRD's kind, an
        API version newer than 1.20) are looked up before they are read or written.
    prunable: may be deleted once no longer rendered; claims hold the data and Secrets the CA
        (losing it breaks every certificate), so those never are.
    list_page: objects per page of a list (0: the client's default).
    """

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    cached: bool = False
    always_served: bool = True
    prunable: bool = True
    # Objects per page of a list (0: the client's LIST_PAGE_SIZE). Secrets come in small pages:
    # anyone may label a 1 MiB one as ours, and a page is held whole while it is read.
    list_page: int = 0

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        prefix = f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"
        if self.namespaced and namespace:
            prefix += f"/namespaces/{quote(namespace)}"
        prefix += f"/{self.plural}"
        return f"{prefix}/{quote(name)}" if name else prefix


# Every kind the reconciler reads or writes. Rendered kinds are looked up by (apiVersion, kind).
KAIWU_CLUSTER = Kind(schema.API_VERSION, schema.KIND, schema.PLURAL,  # as the CRD names it
                     always_served=False)
# Backups (docs/backup.md): watched in full (no managed-by label), served once their CRDs are.
# Small pages, as Secrets: anyone who may create one in a watched namespace may make it 1.5 MiB.
KAIWU_BACKUP = Kind(schema.API_VERSION, schema.BACKUP_KIND, schema.BACKUP_PLURAL,
                    always_served=False, prunable=False, list_page=25)
KAIWU_BACKUP_SCHEDULE = Kind(schema.API_VERSION, schema.SCHEDULE_KIND, schema.SCHEDULE_PLURAL,
                             always_served=False, prunable=False, list_page=25)
# The label a KaiwuBackupSchedule puts on each backup it makes (its own name), and the
# annotation with the slot (an RFC 3339 time) the backup was made for
# (reconciler.kaiwudb.backup.schedule).
SCHEDULE_LABEL = f"{schema.GROUP}/schedule"
SLOT_ANNOTATION = f"{SCHEDULE_LABEL}-slot"
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts", cached=True)
SERVICE = Kind("v1", "Service", "services", cached=True)
SECRET = Kind("v1", "Secret", "secrets", cached=True, prunable=False, list_page=25)
# The start flags the pods read (reconciler.kaiwudb.upgrade): read when needed, not cached.
CONFIG_MAP = Kind("v1", "ConfigMap", "configmaps", prunable=False)
POD = Kind("v1", "Pod", "pods", cached=True)
PVC = Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", cached=True,
           prunable=False)
PV = Kind("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
EVENT = Kind("v1", "Event", "events")
NODE = Kind("v1", "Node", "nodes", namespaced=False)
STATEFUL_SET = Kind("apps/v1", "StatefulSet", "statefulsets", cached=True)
PDB_V1 = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", cached=True,
              always_served=False)
PDB_V1BETA1 = Kind("policy/v1beta1", "PodDisruptionBudget", "poddisruptionbudgets", cached=True)
NETWORK_POLICY = Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", cached=True)
SERVICE_MONITOR = Kind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors",
                       cached=True, always_served=False)
LEASE = Kind("coordination.k8s.io/v1", "Lease", "leases")
# The reconciler's own admission webhook registration (reconciler.runtime.webhook).
VALIDATING_WEBHOOK = Kind("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration",
                          "validatingwebhookconfigurations", namespaced=False, prunable=False)
KINDS = {(k.api_version, k.kind): k for k in (
    KAIWU_CLUSTER, KAIWU_BACKUP, KAIWU_BACKUP_SCHEDULE, SERVICE_ACCOUNT, SERVICE, SECRET,
    CONFIG_MAP, POD, PVC, PV, EVENT, NODE, STATEFUL_SET, PDB_V1, PDB_V1BETA1, NETWORK_POLICY,
    SERVICE_MONITOR, LEASE, VALIDATING_WEBHOOK)}


def kind_of(obj: Obj) -> Kind:
    """The Kind of a plain object (KeyError for a kind the reconciler does not manage)."""
    return KINDS[(obj["apiVersion"], obj["kind"])]


# Every list of kinds is derived from the registry above.
CACHED_KINDS: tuple[Kind, ...] = tuple(kind for kind in KINDS.values() if kind.cached)
ALWAYS_SERVED = frozenset(kind for kind in KINDS.values() if kind.always_served)
NEVER_PRUNED = frozenset(kind.kind for kind in KINDS.values() if not kind.prunable)


@dataclass(frozen=True)
class Short:
    """In KEPT: a value kept only while its text is at most `chars` long; a longer one is
    dropped, as if absent (anyone who may create the object may make an annotation 256 KiB)."""

    chars: int


# What the caches keep of the kinds the reconciler reads but never applies: the fields its
# readers use, and nothing else (every Pod's full spec and managedFields would make the Pod cache
# alone weigh more than everything else at a thousand clusters). `True` keeps a value whole; a
# map keeps only the keys it names (in every item of a list); `Short` a short value. metadata is
# kept whole except managedFields, unless KEPT names what to keep of it: managedFields are kept
# only on the kinds the reconciler applies, where drift attribution reads them
# (reconciler.drift.normalise). The readers:
#   Pod   metadata (name, labels, deletionTimestamp, uid, creationTimestamp); spec.nodeName
#         (kaiwudb.loss, the Node event mapping in kube.cache); spec.containers[].name/image
#         (kaiwudb.rollout); status.phase, .conditions (type, status, since when) and
#         .containerStatuses (name, state, last state, restarts, ready): kaiwudb.pods, .loss,
#         .failover
#   PersistentVolumeClaim  metadata (annotations: selected node, crash restarts; uid); spec
#         (volumeName: kaiwudb.loss); status
#   Secret  metadata, type, data (kaiwudb.certs)
#   Node  metadata; spec (taints, unschedulable); status.conditions (kaiwudb.loss, kube.cache)
#   KaiwuCluster  everything but managedFields (it is read, never compared for drift)
#   KaiwuBackup  metadata: name, namespace (the store's key), uid (the delete precondition, the
#         plan's owner), resourceVersion (list diffs, echoes), generation and deletionTimestamp
#         (kube.cache's event filter), creationTimestamp (order, retention), the label
#         SCHEDULE_LABEL and the annotation SLOT_ANNOTATION, while short (a slot is 20
#         characters); no other label or annotation, no ownerReferences, finalizers or
#         managedFields (created, deleted and status-patched, never applied); spec (cluster,
#         target, databases: bounded by its CRD, renderer/crd/kaiwubackups.yaml); status (phase,
#         message, startedAt, completedAt): kaiwudb.backup (status, restore), kube.cache. Status
#         is kept whole: only the status subresource writes it, which the bundle grants the
#         reconciler and a role granting `kaiwubackups` alone does not reach.
#   KaiwuBackupSchedule  metadata as a KaiwuBackup's but no label or annotation (none is read);
#         spec (bounded by its CRD); status (lastScheduleTime, nextScheduleTime,
#         lastSuccessfulBackup: compared before they are written): kaiwudb.backup.schedule
# So whatever a tenant puts in a KaiwuBackup's or schedule's metadata, the cache keeps a few
# hundred bytes of it, its spec (at most about 20 KiB, nearly all of it spec.databases) and the
# status the reconciler wrote.
# tests/unit/reconciler/kube/test_cache.py runs each reader on a slimmed object and on the full
# one and expects the same answer.
_BACKUP_METADATA: Mapping[str, Any] = {key: True for key in (
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp")}
KEPT: Mapping[str, Mapping[str, Any]] = {
    "Pod": {"spec": {"nodeName": True, "containers": {"name": True, "image": True}},
            "status": {"phase": True,
                       "conditions": {"type": True, "status": True, "lastTransitionTime": True},
                       "containerStatuses": {"name": True, "state": True, "lastState": True,
                                             "restartCount": True, "ready": True}}},
    "PersistentVolumeClaim": {"spec": True, "status": True},
    "Secret": {"type": True, "data": True, "stringData": True, "immutable": True},
    "Node": {"spec": True, "status": {"conditions": True}},
    "KaiwuCluster": {"spec": True, "status": True},
    "KaiwuBackup": {"metadata": {**_BACKUP_METADATA, "labels": {SCHEDULE_LABEL: True},
                                 "annotations": {SLOT_ANNOTATION: Short(64)}},
                    "spec": True, "status": True},
    "KaiwuBackupSchedule": {"metadata": _BACKUP_METADATA, "spec": True, "status": True},
}


def _kept(value: Any, keep: Any) -> Any:
    if keep is True:
        return value
    if isinstance(value, list):
        return [_kept(item, keep) for item in value]
    if isinstance(value, Mapping):
        return {key: _kept(value[key], sub) for key, sub in keep.items()
                if key in value and _fits(value[key], sub)}
    return value


def _fits(value: Any, keep: Any) -> bool:
    return not isinstance(keep, Short) or len(str(value)) <= keep.chars


# The most of a Secret's data a cache keeps: a cluster's certificate Secrets hold a few KiB.
SECRET_DATA_CAP = 64 * 1024

TLS_SECRET_LABEL = f"{schema.GROUP}/tls-certs"
"""The label (value "true") marking a Secret as KaiwuDB certificates. The reconciler puts it on
the certificate Secrets it makes, which no KaiwuCluster owns (they outlive a deleted cluster:
the CA with them); a Secret of your own needs it before `spec.tls.nodeSecretName` or
`clientSecretName` may name it: anyone who may write a KaiwuCluster would otherwise have the
reconciler mount any Secret of the namespace into pods it makes and read it (docs/security.md).
cert-manager puts it on the Secrets it writes through a Certificate's `secretTemplate.labels`."""


def _owned_by_a_cluster(obj: Obj) -> bool:
    return any(ref.get("kind") == KAIWU_CLUSTER.kind and ref.get("controller")
               and str(ref.get("apiVersion", "")).startswith(f"{KAIWU_CLUSTER.group}/")
               for ref in (obj.get("metadata") or {}).get("ownerReferences") or ())


def _marked_certificates(obj: Obj) -> bool:
    """A cluster's certificate Secret as the reconciler makes it: labelled managed-by us, for a
    cluster (the instance label), and TLS_SECRET_LABEL=true."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (labels.get(TLS_SECRET_LABEL) == "true" and bool(labels.get(INSTANCE_LABEL))
            and labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


def _secret_size(obj: Obj) -> int:
    return sum(len(str(value)) for field in ("data", "stringData")
               for value in (obj.get(field) or {}).values())


def slim(obj: Obj) -> Obj:
    """What the caches keep of `obj` (see KEPT; objects of other kinds are kept whole).

    Anyone may label a Secret as ours: a Secret neither a KaiwuCluster controls nor marked as a
    cluster's certificates (`_marked_certificates`), or one holding more than SECRET_DATA_CAP,
    is kept as its name, labels, owners and version only (no data, no annotations), so ten
    thousand labelled 1 MiB Secrets cost the cache almost nothing. A reader that finds no
    `data` reads the Secret from the API (controller.certificates)."""
    if obj.get("kind") == SECRET.kind and (
            not (_owned_by_a_cluster(obj) or _marked_certificates(obj))
            or _secret_size(obj) > SECRET_DATA_CAP):
        md = obj.get("metadata") or {}
        return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": {
            key: md[key] for key in ("name", "namespace", "uid", "resourceVersion", "labels",
                                     "ownerReferences", "deletionTimestamp") if key in md}}
    keep = KEPT.get(str(obj.get("kind") or ""))
    if keep is None:
        return obj
    slimmed: Obj = {key: obj[key] for key in ("apiVersion", "kind") if key in obj}
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        slimmed["metadata"] = {key: value for key, value in metadata.items()
                               if key != "managedFields"}
    slimmed.update(_kept(obj, keep))
    return slimmed
