"""The StatefulSet that runs kwbase: the real start line, probes, certificates, volume, placement.

The start line follows KWDB's documented multi-node form (kaiwudb-facts.md): every flag as one
argument (never a shell), the pod's stable DNS name as advertise address through $(POD_NAME)
expansion, a join list that does not depend on `replicas` (so scaling never restarts pods).
"""

from __future__ import annotations

from typing import Any

from renderer import quantity
from renderer.builders import (
    BRPC_PORT,
    CERTS_DIR,
    CERTS_HASH_ANNOTATION,
    CONTAINER,
    DATA_DIR,
    DATA_VOLUME,
    HTTP_PORT,
    KWBASE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SQL_PORT,
    UPGRADE_COMPLETE_ENV,
    UPGRADE_COMPLETE_KEY,
    metadata,
    selector_labels,
)
from renderer.semantics.resources import FRACTION
from renderer.settings import RenderSettings
from renderer.spec import Cluster, StartMode

# The first three ordinals always exist in a multi-replica cluster (replicas >= 3). A join list
# of them is the same at every scale, so scaling out or in never changes the pod template.
JOIN_ORDINALS = range(3)
TUNING_IMAGE = "busybox:1.36"
TUNING_CONTAINER = "tune-host"
RUNTIME_DEFAULT = "RuntimeDefault"
# With fsGroup the mounted keys are group-readable, which kwbase refuses unless told not to
# check (the variable kwbase/pkg/security/certificate_loader.go reads in KWDB V3.2).
SKIP_KEY_CHECK_ENV = "KWBASE_SKIP_KEY_PERMISSION_CHECK"
HOSTNAME_KEY = "kubernetes.io/hostname"


def build(cluster: Cluster, settings: RenderSettings, name: str) -> dict[str, Any]:
    labels = selector_labels(cluster)
    pod_meta = metadata(cluster, cluster.name)
    pod_meta.pop("name")
    pod_meta.pop("namespace")
    # Claims carry the managed-by label so the reconciler's watch cache sees them; not the
    # user's labels: the template is immutable, a label change would force a recreate.
    claim: dict[str, Any] = {
        "metadata": {"name": DATA_VOLUME,
                     "labels": {**labels, MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": quantity.canonical(cluster.storage_size)}}},
    }
    if cluster.storage_class:
        claim["spec"]["storageClassName"] = cluster.storage_class
    live = settings.live
    if live.certs_hash:
        pod_meta.setdefault("annotations", {})[CERTS_HASH_ANNOTATION] = live.certs_hash
    update: dict[str, Any] = {"type": "RollingUpdate"}
    if live.partition is not None:
        update["rollingUpdate"] = {"partition": live.partition}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": metadata(cluster, name),
        "spec": {
            "serviceName": cluster.headless_service,
            "replicas": live.replicas if live.replicas is not None else cluster.replicas,
            # Nodes must all be up to init the cluster; ordering buys nothing for kwbase.
            "podManagementPolicy": "Parallel",
            "updateStrategy": update,
            "selector": {"matchLabels": labels},
            "template": {"metadata": pod_meta, "spec": _pod_spec(cluster, settings)},
            "volumeClaimTemplates": [claim],
        },
    }


def _pod_spec(cluster: Cluster, settings: RenderSettings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": cluster.name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": cluster.grace_period_seconds,
        "securityContext": _pod_security_context(cluster),
        "containers": [_container(cluster, settings)],
    }
    if cluster.tls:
        spec["volumes"] = _volumes(cluster)
    affinity = _anti_affinity(cluster)
    if affinity:
        spec["affinity"] = affinity
    if cluster.topology_spread:
        spec["topologySpreadConstraints"] = [
            {"maxSkew": spread.max_skew, "topologyKey": spread.topology_key,
             "whenUnsatisfiable": spread.when_unsatisfiable,
             "labelSelector": {"matchLabels": selector_labels(cluster)}}
            for spread in cluster.topology_spread]
    if cluster.node_selector:
        spec["nodeSelector"] = dict(cluster.node_selector)
    if cluster.tolerations:
        spec["tolerations"] = [dict(toleration) for toleration in cluster.tolerations]
    if cluster.priority_class:
        spec["priorityClassName"] = cluster.priority_class
    if cluster.pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in cluster.pull_secrets]
    if cluster.node_tuning:
        spec["initContainers"] = [_tuning_container(cluster)]
    return spec


def _pod_security_context(cluster: Cluster) -> dict[str, Any]:
    """Who every container runs as (spec.podSecurity), for the Pod Security "restricted" level.

    fsGroup makes the fresh data volume writable by the non-root user; OnRootMismatch skips the
    recursive ownership walk when the volume's root already matches, which on a large store
    would otherwise delay every pod start."""
    security = cluster.pod_security
    return {
        "runAsNonRoot": security.run_as_non_root,
        "runAsUser": security.run_as_user,
        "runAsGroup": security.run_as_group,
        "fsGroup": security.fs_group,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": RUNTIME_DEFAULT},
    }


def _anti_affinity(cluster: Cluster) -> dict[str, Any] | None:
    term = {"labelSelector": {"matchLabels": selector_labels(cluster)},
            "topologyKey": HOSTNAME_KEY}
    if cluster.anti_affinity == "required":
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if cluster.anti_affinity == "preferred":
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}}
    return None


def start_command(cluster: Cluster, settings: RenderSettings) -> list[str]:
    """The kwbase command line of every pod (the reconciler's admin adapter reads it too)."""
    domain = f"{cluster.headless_service}.{cluster.namespace}.svc.{settings.cluster_domain}"
    command = [KWBASE, cluster.start_mode.command]
    command.append(f"--certs-dir={CERTS_DIR}" if cluster.tls else "--insecure")
    command += [
        f"--listen-addr=0.0.0.0:{SQL_PORT}",
        f"--advertise-addr=$(POD_NAME).{domain}:{SQL_PORT}",
        f"--http-addr=0.0.0.0:{HTTP_PORT}",
        f"--store={DATA_DIR}",
    ]
    if cluster.start_mode is not StartMode.SINGLE_NODE:
        command.append(f"--brpc-addr=:{BRPC_PORT}")
        peers = ",".join(f"{cluster.pod_name(ordinal)}.{domain}:{SQL_PORT}"
                         for ordinal in JOIN_ORDINALS)
        command.append(f"--join={peers}")
    command += [f"--cache={_memory_flag(cluster.cache)}",
                f"--max-sql-memory={_memory_flag(cluster.max_sql_memory)}",
                "--logtostderr",
                # "true" only while a version upgrade is in flight (reconciler/kaiwudb/upgrade.py)
                f"--{UPGRADE_COMPLETE_KEY}=$({UPGRADE_COMPLETE_ENV})",
                *cluster.extra_args]
    return command


def _memory_flag(value: str) -> str:
    """Fractions pass through (kwbase reads them as shares of the memory limit); sizes become
    bytes, the one spelling kwbase and Kubernetes cannot read differently."""
    if FRACTION.match(value):
        return value
    return str(int(quantity.parse(value).value))


def _container(cluster: Cluster, settings: RenderSettings) -> dict[str, Any]:
    scheme = "HTTPS" if cluster.tls else "HTTP"
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "LD_LIBRARY_PATH", "value": "/kaiwudb/lib"},
        {"name": UPGRADE_COMPLETE_ENV, "valueFrom": {"configMapKeyRef": {
            "name": cluster.start_flags_config_map, "key": UPGRADE_COMPLETE_KEY}}},
    ]
    if cluster.tls:
        # The kubelet gives the mounted keys to the pod's fsGroup (mode 0400 becomes 0440), and
        # kwbase, like the CockroachDB it derives from, refuses keys readable by the group. The
        # group is the pod's own, the volume a pod-private tmpfs: the check protects nothing here.
        env.append({"name": SKIP_KEY_CHECK_ENV, "value": "true"})
    for var in cluster.extra_env:
        if var.secret_name:
            env.append({"name": var.name, "valueFrom": {"secretKeyRef": {
                "name": var.secret_name, "key": var.secret_key}}})
        else:
            env.append({"name": var.name, "value": var.value or ""})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": cluster.image,
        "imagePullPolicy": cluster.pull_policy,
        "workingDir": "/kaiwudb/bin",
        "command": start_command(cluster, settings),
        "env": env,
        "ports": [
            {"name": "sql", "containerPort": SQL_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "brpc", "containerPort": BRPC_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": "http", "scheme": scheme},
            "initialDelaySeconds": 30, "periodSeconds": 5, "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/health?ready=1", "port": "http", "scheme": scheme},
            "initialDelaySeconds": 10, "periodSeconds": 5, "timeoutSeconds": 5,
            "failureThreshold": 2,
        },
        "volumeMounts": [{"name": DATA_VOLUME, "mountPath": DATA_DIR}],
        # kwbase never writes /dev/termination-log: the log tail is the crash reason we report.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # kwbase needs no privilege: it listens on ports above 1024 and writes only its volume.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": RUNTIME_DEFAULT},
        },
    }
    if cluster.tls:
        container["volumeMounts"].append({"name": "certs", "mountPath": CERTS_DIR,
                                          "readOnly": True})
    resources: dict[str, Any] = {}
    if cluster.requests:
        resources["requests"] = {name: quantity.canonical(value)
                                 for name, value in cluster.requests}
    if cluster.limits:
        resources["limits"] = {name: quantity.canonical(value) for name, value in cluster.limits}
    if resources:
        container["resources"] = resources
    return container


def _volumes(cluster: Cluster) -> list[dict[str, Any]]:
    # kwbase refuses key files readable by group or others: project both Secrets read-only 0400.
    # Items map the Secrets' keys (KWDB's or cert-manager's, spec.tls.secretLayout) to the file
    # names kwbase looks for in --certs-dir.
    _, node_crt, node_key = cluster.node_secret_keys
    ca, root_crt, root_key = cluster.client_secret_keys
    return [{"name": "certs", "projected": {"defaultMode": 0o400, "sources": [
        {"secret": {"name": cluster.node_secret, "items": [
            {"key": ca, "path": "ca.crt"}, {"key": node_crt, "path": "node.crt"},
            {"key": node_key, "path": "node.key"}]}},
        {"secret": {"name": cluster.client_secret, "items": [
            {"key": root_crt, "path": "client.root.crt"},
            {"key": root_key, "path": "client.root.key"}]}},
    ]}}]


def _tuning_container(cluster: Cluster) -> dict[str, Any]:
    """vm.max_map_count is not namespaced: setting it needs a privileged container, and root:
    a privileged process of another uid has no effective capabilities to write /proc/sys. The
    one exception to the pod's restricted profile (spec.nodeTuning, off by default)."""
    return {
        "name": TUNING_CONTAINER,
        "image": TUNING_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sysctl", "-w", f"vm.max_map_count={cluster.max_map_count}"],
        "securityContext": {"privileged": True, "runAsUser": 0, "runAsNonRoot": False},
    }
