"""What the drift normaliser needs to know about Kubernetes object shapes, and nothing more.

reconciler.drift.normalise walks desired and live objects with these type descriptions: which lists
match items by key (and whether their order counts), which maps hold resource quantities, which
map keys only count when we render them (labels, annotations), and which values the API server
fills in by default. Types not described here are walked generically (maps by key, lists by
position), so an unknown kind (a ServiceMonitor) still compares sensibly.

Defaults are those of Kubernetes 1.20 (pkg/apis/core/v1/defaults.go, pkg/apis/apps/v1/defaults.go,
pkg/apis/networking/v1/defaults.go and the generated zz_generated.defaults.go), plus the few that
later releases added to the kinds we render, so that the same reconciler runs on newer clusters.
They matter only for fields we do not render: they tell a default the server filled in (and that
a client-side ``kubectl apply`` or ``create`` recorded as its own in managedFields) from a field
someone set by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

MapKind = Literal["struct", "labels", "quantities", "secret-data"]
ListSemantics = Literal["keyed", "set", "atomic"]


class _NoDefault:
    """Marker: the field has no default in this object."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class Derived:
    """A default computed from the object holding the field (e.g. imagePullPolicy from image)."""

    compute: Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class ListSpec:
    """How a list field compares.

    ``keyed``: items match by ``key_fields`` (dotted paths; ``key_defaults`` fill a key field the
    server defaults, such as a port's protocol), never by position; only ``ordered`` lists also
    compare their order. ``set``: scalars where only the values we render count (finalizers).
    ``atomic``: compared as a whole, in order (args, command).
    """

    semantics: ListSemantics
    item_type: str = ""
    key_fields: tuple[str, ...] = ()
    key_defaults: Mapping[str, Any] = field(default_factory=dict)
    ordered: bool = False
    # Env vars: order matters once one value refers to another with $(NAME).
    ordered_when_referenced: bool = False

    def key_values(self, item: Any) -> tuple[Any, ...] | None:
        """The values of the key fields of ``item``, or None when it has no usable key."""
        if not isinstance(item, Mapping):
            return None
        values = []
        for dotted in self.key_fields:
            value: Any = item
            for part in dotted.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is None:
                value = self.key_defaults.get(dotted)
            values.append(value)
        if all(value is None for value in values):
            return None
        return tuple(values)

    def key_text(self, item: Any) -> str | None:
        """The item's key as one path segment: ``kwbase``, ``26257/TCP``."""
        values = self.key_values(item)
        if values is None:
            return None
        return "/".join("" if value is None else str(value) for value in values)


@dataclass(frozen=True)
class TypeSpec:
    """The comparison-relevant shape of one Kubernetes type."""

    # Child field -> type name, for fields whose values are typed objects.
    fields: Mapping[str, str] = field(default_factory=dict)
    lists: Mapping[str, ListSpec] = field(default_factory=dict)
    map_kind: MapKind = "struct"
    # Scalar fields holding a resource.Quantity.
    quantities: frozenset[str] = frozenset()
    # Field -> the value the API server fills in when it is unset.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # Fields whose empty object still means something (``emptyDir: {}`` picks the volume type).
    keep_empty: frozenset[str] = frozenset()
    # Fields the server sets or that are bookkeeping: dropped from both sides.
    server_set: frozenset[str] = frozenset()
    # Fields others may add to without it being drift (labels, annotations, finalizers).
    open_to_others: frozenset[str] = frozenset()


def _keyed(item_type: str = "", *keys: str, ordered: bool = False, **key_defaults: Any) -> ListSpec:
    return ListSpec("keyed", item_type, keys, key_defaults, ordered)


def _atomic(item_type: str = "") -> ListSpec:
    return ListSpec("atomic", item_type)


def image_pull_policy_default(container: Mapping[str, Any]) -> Any:
    """Always for ``:latest`` or untagged images, else IfNotPresent (SetDefaults_Container)."""
    image = container.get("image")
    if not isinstance(image, str):
        return NO_DEFAULT
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    # No tag means "latest", unless the image is pinned by digest (ParseImageName).
    tag = last.rpartition(":")[2] if ":" in last else ("" if digest else "latest")
    return "Always" if tag == "latest" else "IfNotPresent"


def _service_port_target(port: Mapping[str, Any]) -> Any:
    return port.get("port", NO_DEFAULT)


def _external_traffic_policy(spec: Mapping[str, Any]) -> Any:
    return "Cluster" if spec.get("type") in ("NodePort", "LoadBalancer") else NO_DEFAULT


def _allocate_lb_node_ports(spec: Mapping[str, Any]) -> Any:
    return True if spec.get("type") == "LoadBalancer" else NO_DEFAULT


def _policy_types(spec: Mapping[str, Any]) -> Any:
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def _service_account(pod_spec: Mapping[str, Any]) -> Any:
    # Deprecated alias the API server copies from serviceAccountName.
    return pod_spec.get("serviceAccountName", NO_DEFAULT)


_OBJECT_META_SERVER_SET = frozenset(
    {
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "clusterName",
    }
)
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"

_CONTAINER_LISTS: Mapping[str, ListSpec] = {
    "ports": _keyed("ContainerPort", "containerPort", "protocol", protocol="TCP"),
    "env": ListSpec("keyed", "EnvVar", ("name",), {}, False, ordered_when_referenced=True),
    "envFrom": _atomic("EnvFromSource"),
    "volumeMounts": _keyed("VolumeMount", "mountPath"),
    "volumeDevices": _keyed("", "devicePath"),
    "args": _atomic(),
    "command": _atomic(),
}

TYPES: Mapping[str, TypeSpec] = {
    # --- metadata ---
    "ObjectMeta": TypeSpec(
        fields={"labels": "Labels", "annotations": "Annotations"},
        lists={
            "finalizers": ListSpec("set"),
            "ownerReferences": _keyed("", "uid"),
        },
        server_set=_OBJECT_META_SERVER_SET,
        open_to_others=frozenset({"labels", "annotations", "finalizers"}),
    ),
    "Labels": TypeSpec(map_kind="labels"),
    "Annotations": TypeSpec(map_kind="labels", server_set=frozenset({LAST_APPLIED_ANNOTATION})),
    "LabelSelector": TypeSpec(lists={"matchExpressions": _atomic()}),
    # --- workloads ---
    "StatefulSet": TypeSpec(fields={"metadata": "ObjectMeta", "spec": "StatefulSetSpec"}),
    "StatefulSetSpec": TypeSpec(
        fields={
            "template": "PodTemplateSpec",
            "selector": "LabelSelector",
            "updateStrategy": "StatefulSetUpdateStrategy",
            "persistentVolumeClaimRetentionPolicy": "PVCRetentionPolicy",
        },
        lists={"volumeClaimTemplates": _keyed("PersistentVolumeClaim", "metadata.name")},
        defaults={"podManagementPolicy": "OrderedReady", "replicas": 1, "revisionHistoryLimit": 10},
    ),
    "StatefulSetUpdateStrategy": TypeSpec(
        fields={"rollingUpdate": "RollingUpdateStatefulSetStrategy"},
        defaults={"type": "RollingUpdate"},
    ),
    "RollingUpdateStatefulSetStrategy": TypeSpec(defaults={"partition": 0}),
    # Kubernetes 1.27+ (beta): the server fills in Retain/Retain.
    "PVCRetentionPolicy": TypeSpec(defaults={"whenDeleted": "Retain", "whenScaled": "Retain"}),
    "PodTemplateSpec": TypeSpec(fields={"metadata": "ObjectMeta", "spec": "PodSpec"}),
    "PodSpec": TypeSpec(
        fields={"overhead": "ResourceList"},
        lists={
            "containers": _keyed("Container", "name", ordered=True),
            "initContainers": _keyed("Container", "name", ordered=True),
            "ephemeralContainers": _keyed("Container", "name"),
            "volumes": _keyed("Volume", "name"),
            "imagePullSecrets": _keyed("", "name"),
            "tolerations": _keyed("", "key", "operator", "value", "effect", operator="Equal"),
            "hostAliases": _keyed("", "ip"),
            "topologySpreadConstraints": _keyed("", "topologyKey", "whenUnsatisfiable"),
            "readinessGates": _keyed("", "conditionType"),
        },
        defaults={
            "dnsPolicy": "ClusterFirst",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": Derived(_service_account),
            # Defaulted on Pods only, but harmless here: true is what an unset field means.
            "enableServiceLinks": True,
        },
    ),
    "Container": TypeSpec(
        fields={
            "resources": "ResourceRequirements",
            "livenessProbe": "Probe",
            "readinessProbe": "Probe",
            "startupProbe": "Probe",
            "lifecycle": "Lifecycle",
        },
        lists=_CONTAINER_LISTS,
        defaults={
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": Derived(image_pull_policy_default),
            "resources": {},
        },
    ),
    "ContainerPort": TypeSpec(defaults={"protocol": "TCP"}),
    "EnvVar": TypeSpec(fields={"valueFrom": "EnvVarSource"}),
    "EnvVarSource": TypeSpec(
        fields={"fieldRef": "ObjectFieldSelector", "resourceFieldRef": "ResourceFieldSelector"}
    ),
    "EnvFromSource": TypeSpec(),
    "ObjectFieldSelector": TypeSpec(defaults={"apiVersion": "v1"}),
    "ResourceFieldSelector": TypeSpec(quantities=frozenset({"divisor"})),
    "VolumeMount": TypeSpec(),
    "ResourceRequirements": TypeSpec(fields={"limits": "ResourceList", "requests": "ResourceList"}),
    "ResourceList": TypeSpec(map_kind="quantities"),
    "Probe": TypeSpec(
        fields={"httpGet": "HTTPGetAction"},
        defaults={
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
    ),
    "HTTPGetAction": TypeSpec(
        lists={"httpHeaders": _keyed("", "name")},
        defaults={"path": "/", "scheme": "HTTP"},
    ),
    "Lifecycle": TypeSpec(fields={"postStart": "LifecycleHandler", "preStop": "LifecycleHandler"}),
    "LifecycleHandler": TypeSpec(fields={"httpGet": "HTTPGetAction"}),
    # --- volumes ---
    "Volume": TypeSpec(
        fields={
            "secret": "SecretVolumeSource",
            "configMap": "ConfigMapVolumeSource",
            "downwardAPI": "DownwardAPIVolumeSource",
            "projected": "ProjectedVolumeSource",
            "emptyDir": "EmptyDirVolumeSource",
            "ephemeral": "EphemeralVolumeSource",
            "hostPath": "HostPathVolumeSource",
        },
        keep_empty=frozenset({"emptyDir"}),
    ),
    "SecretVolumeSource": TypeSpec(lists={"items": _atomic()}, defaults={"defaultMode": 420}),
    "ConfigMapVolumeSource": TypeSpec(lists={"items": _atomic()}, defaults={"defaultMode": 420}),
    "DownwardAPIVolumeSource": TypeSpec(
        lists={"items": _atomic("DownwardAPIVolumeFile")}, defaults={"defaultMode": 420}
    ),
    "DownwardAPIVolumeFile": TypeSpec(
        fields={"fieldRef": "ObjectFieldSelector", "resourceFieldRef": "ResourceFieldSelector"}
    ),
    "ProjectedVolumeSource": TypeSpec(
        lists={"sources": _atomic("VolumeProjection")}, defaults={"defaultMode": 420}
    ),
    "VolumeProjection": TypeSpec(
        fields={
            "downwardAPI": "DownwardAPIProjection",
            "serviceAccountToken": "ServiceAccountTokenProjection",
        }
    ),
    "DownwardAPIProjection": TypeSpec(lists={"items": _atomic("DownwardAPIVolumeFile")}),
    "ServiceAccountTokenProjection": TypeSpec(defaults={"expirationSeconds": 3600}),
    "EmptyDirVolumeSource": TypeSpec(quantities=frozenset({"sizeLimit"})),
    "EphemeralVolumeSource": TypeSpec(fields={"volumeClaimTemplate": "PersistentVolumeClaim"}),
    "HostPathVolumeSource": TypeSpec(defaults={"type": ""}),
    # A claim, or a claim template inside a StatefulSet (whose apiVersion and kind the server
    # fills in, and whose status it sets to Pending).
    "PersistentVolumeClaim": TypeSpec(
        fields={"metadata": "ObjectMeta", "spec": "PVCSpec", "status": "PVCStatus"},
        defaults={"apiVersion": "v1", "kind": "PersistentVolumeClaim"},
    ),
    "PVCStatus": TypeSpec(defaults={"phase": "Pending"}),
    "PVCSpec": TypeSpec(
        fields={"resources": "ResourceRequirements", "selector": "LabelSelector"},
        lists={"accessModes": _atomic()},
        defaults={"volumeMode": "Filesystem"},
    ),
    # --- services and networking ---
    "Service": TypeSpec(fields={"metadata": "ObjectMeta", "spec": "ServiceSpec"}),
    "ServiceSpec": TypeSpec(
        fields={"sessionAffinityConfig": "SessionAffinityConfig"},
        lists={
            "ports": _keyed("ServicePort", "port", "protocol", protocol="TCP"),
            "clusterIPs": _atomic(),
            "ipFamilies": _atomic(),
            "externalIPs": _atomic(),
            "loadBalancerSourceRanges": _atomic(),
        },
        defaults={
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "externalTrafficPolicy": Derived(_external_traffic_policy),
            "allocateLoadBalancerNodePorts": Derived(_allocate_lb_node_ports),
            # Kubernetes 1.22+.
            "internalTrafficPolicy": "Cluster",
        },
    ),
    "SessionAffinityConfig": TypeSpec(fields={"clientIP": "ClientIPConfig"}),
    "ClientIPConfig": TypeSpec(defaults={"timeoutSeconds": 10800}),
    "ServicePort": TypeSpec(
        defaults={"protocol": "TCP", "targetPort": Derived(_service_port_target)}
    ),
    "NetworkPolicy": TypeSpec(fields={"metadata": "ObjectMeta", "spec": "NetworkPolicySpec"}),
    "NetworkPolicySpec": TypeSpec(
        fields={"podSelector": "LabelSelector"},
        lists={
            "ingress": _atomic("NetworkPolicyIngressRule"),
            "egress": _atomic("NetworkPolicyEgressRule"),
            "policyTypes": _atomic(),
        },
        defaults={"policyTypes": Derived(_policy_types)},
    ),
    "NetworkPolicyIngressRule": TypeSpec(
        lists={"ports": _atomic("NetworkPolicyPort"), "from": _atomic("NetworkPolicyPeer")}
    ),
    "NetworkPolicyEgressRule": TypeSpec(
        lists={"ports": _atomic("NetworkPolicyPort"), "to": _atomic("NetworkPolicyPeer")}
    ),
    "NetworkPolicyPort": TypeSpec(defaults={"protocol": "TCP"}),
    "NetworkPolicyPeer": TypeSpec(
        fields={"podSelector": "LabelSelector", "namespaceSelector": "LabelSelector"}
    ),
    # --- the rest of what the renderer and reconciler create ---
    "ServiceAccount": TypeSpec(
        fields={"metadata": "ObjectMeta"},
        lists={"secrets": _keyed("", "name"), "imagePullSecrets": _keyed("", "name")},
    ),
    "PodDisruptionBudget": TypeSpec(fields={"metadata": "ObjectMeta", "spec": "PDBSpec"}),
    "PDBSpec": TypeSpec(fields={"selector": "LabelSelector"}),
    "Secret": TypeSpec(
        fields={"metadata": "ObjectMeta", "data": "SecretData"}, defaults={"type": "Opaque"}
    ),
    "SecretData": TypeSpec(map_kind="secret-data"),
    "ConfigMap": TypeSpec(fields={"metadata": "ObjectMeta"}, defaults={"data": {}}),
    # Any other kind: only its metadata is known.
    "Object": TypeSpec(fields={"metadata": "ObjectMeta"}),
}

# Pointer-typed fields where 0, false or "" is a real value the server keeps (replicas: 0,
# runAsUser: 0, storageClassName: ""). Elsewhere the server drops zero values on output
# (omitempty), so a rendered zero that is absent live is not drift.
ZERO_IS_A_VALUE: frozenset[str] = frozenset(
    {
        "replicas",
        "partition",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
        "terminationGracePeriodSeconds",
        "activeDeadlineSeconds",
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "fsGroup",
        "privileged",
        "allowPrivilegeEscalation",
        "readOnlyRootFilesystem",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "shareProcessNamespace",
        "setHostnameAsFQDN",
        "defaultMode",
        "mode",
        "optional",
        "minAvailable",
        "maxUnavailable",
        "maxSurge",
        "expirationSeconds",
        "tolerationSeconds",
        "allocateLoadBalancerNodePorts",
        "storageClassName",
        "sizeLimit",
        "immutable",
    }
)


def root_type(kind: str) -> TypeSpec:
    """The type description of a whole object of ``kind`` (generic for unknown kinds)."""
    return TYPES.get(kind, TYPES["Object"])


def child_type(parent: TypeSpec | None, key: str) -> tuple[TypeSpec | None, ListSpec | None]:
    """The type of field ``key`` of ``parent``: an object type, a list spec, or neither."""
    if parent is None:
        return None, None
    if key in parent.lists:
        return None, parent.lists[key]
    name = parent.fields.get(key)
    return (TYPES[name] if name else None), None


def item_type(spec: ListSpec) -> TypeSpec | None:
    """The type of the items of a list."""
    return TYPES[spec.item_type] if spec.item_type else None
