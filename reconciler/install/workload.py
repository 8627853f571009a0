"""The reconciler's own running objects in the install bundle: its Namespace, Deployment (and,
in directory mode, the git-sync sidecar), PodDisruptionBudget, metrics and webhook Services,
NetworkPolicy and the webhook's registration.

Called by reconciler.install.documents, which puts each in the bundle with its comment.
"""

from __future__ import annotations

from reconciler.install.options import NAME, Obj, Options, object_meta
from reconciler.runtime.webhook import SKIP_LABEL, SKIP_VALUE, placeholder
from reconciler.settings import Settings
from renderer.builders.disruption_budget import POLICY_V1
from renderer.builders.statefulset import HOSTNAME_KEY

# An example: the bundle names it, nothing in this project pulls or tests it.
GIT_SYNC_IMAGE = "registry.k8s.io/git-sync/git-sync:v4.2.4"
GIT_ROOT = "/git"
GIT_LINK = "repo"  # git-sync keeps /git/repo pointing at the current checkout
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster clients look
REPLICAS = 2  # a leader and a standby, each serving the admission webhook
ZONE_KEY = "topology.kubernetes.io/zone"


def selector(options: Options) -> Obj:
    """This shard's pods: the Deployment's selector, its spreading's and its budget's."""
    return {"matchLabels": {"app.kubernetes.io/name": options.component}}


def _http_get(path: str, period: int, failures: int) -> Obj:
    return {"httpGet": {"path": path, "port": "http-metrics"}, "periodSeconds": period,
            "failureThreshold": failures}


def deployment(options: Options) -> Obj:
    defaults = Settings()
    _, port = defaults.http_host_port
    _, webhook_port = defaults.webhook_host_port
    env: list[Obj] = [
        {"name": "KAIWU_IDENTITY",  # the pod's name: unique per replica
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE",  # where the Lease lives
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "KAIWU_LOG_FORMAT", "value": "json"},
        # Where KaiwuDB pods reach the restore file server (docs/backup.md, "Restore").
        {"name": "KAIWU_RESTORE_ADVERTISE_HOST",
         "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if not options.shard:
        # Every replica of the unnamed shard serves the admission webhook (the Service selects
        # them) for the whole fleet; named shards leave it to them, so only one leader keeps
        # the webhook's certificate and registration.
        env.append({"name": "KAIWU_WEBHOOK", "value": "true"})
    if options.watch_namespace:
        env.append({"name": "KAIWU_WATCH_NAMESPACE", "value": options.watch_namespace})
    if options.shard:
        env.append({"name": "KAIWU_SHARD", "value": options.shard})
    reconciler: Obj = {
        "name": "reconciler", "image": options.effective_image,
        "imagePullPolicy": "IfNotPresent", "env": env,
        "ports": [{"name": "http-metrics", "containerPort": port, "protocol": "TCP"},
                  {"name": "webhook", "containerPort": webhook_port, "protocol": "TCP"},
                  {"name": "restore-files", "containerPort":
                   int(defaults.restore_http_address.rpartition(":")[2]), "protocol": "TCP"}],
        "livenessProbe": _http_get("/healthz", 10, 3),
        "readinessProbe": _http_get("/readyz", 5, 2),
        "startupProbe": _http_get("/healthz", 2, 30),
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    containers = [reconciler]
    pod: Obj = {
        "serviceAccountName": NAME,
        # The leader releases its Lease on SIGTERM after its reconciles finish (at most
        # shutdown_grace_s): leave it time to do so.
        "terminationGracePeriodSeconds": int(defaults.shutdown_grace_s) + 10,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        # Spread, never required: a one-node cluster still runs both replicas (the
        # PodDisruptionBudget then keeps a drain from evicting both at once).
        "affinity": {"podAntiAffinity": {
            # Leader and standby on different nodes: losing one node never loses both.
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {
                    "topologyKey": HOSTNAME_KEY, "labelSelector": selector(options)}}]}},
        # And in different zones where the nodes say which zone they are in.
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": ZONE_KEY, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": selector(options)}],
        "containers": containers,
    }
    if options.directory_mode:
        # git-sync keeps a checkout in the shared emptyDir; the reconciler applies the
        # KaiwuCluster files under it (directory mode, reconciler.runtime.source_dir).
        env.append({"name": "KAIWU_SOURCE", "value": f"dir:{GIT_ROOT}/{GIT_LINK}"})
        if options.source_namespaces:
            env.append({"name": "KAIWU_SOURCE_NAMESPACES",
                        "value": ",".join(options.source_namespaces)})
        # Off: a cluster whose file disappears from git is reported, not deleted. Turn on to
        # delete it (its data volumes stay).
        env.append({"name": "KAIWU_PRUNE_DELETED_CLUSTERS", "value": "false"})
        mount = {"name": "git", "mountPath": GIT_ROOT}
        # git-sync runs what a remote repository holds and needs no API access: the pod mounts
        # no token by default, and only the reconciler container gets one, the same projected
        # token, CA and namespace the kubelet would mount (BoundServiceAccountTokenVolume).
        pod["automountServiceAccountToken"] = False
        reconciler["volumeMounts"] = [{**mount, "readOnly": True},
                                      {"name": "api-token", "mountPath": TOKEN_DIR,
                                       "readOnly": True}]
        containers.append({
            "name": "git-sync", "image": GIT_SYNC_IMAGE, "imagePullPolicy": "IfNotPresent",
            "args": [f"--repo={options.git_repo}", f"--root={GIT_ROOT}", f"--link={GIT_LINK}",
                     "--period=30s"],
            "volumeMounts": [mount],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                          "limits": {"memory": "128Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}},
        })
        pod["volumes"] = [{"name": "git", "emptyDir": {}}, {"name": "api-token", "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]
    if options.backup_volume_claims:
        # Volume backup targets (docs/backup.md): each claim at <backup_volumes_dir>/<claim>.
        mounts = reconciler.setdefault("volumeMounts", [])
        volumes = pod.setdefault("volumes", [])
        for i, claim in enumerate(options.backup_volume_claims):
            mounts.append({"name": f"backup-{i}",
                           "mountPath": f"{defaults.backup_volumes_dir}/{claim}"})
            volumes.append({"name": f"backup-{i}",
                            "persistentVolumeClaim": {"claimName": claim}})
    meta = object_meta(options.component, options.namespace, options.component)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": REPLICAS,
            "selector": selector(options),
            "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": pod},
        },
    }


def disruption_budget(options: Options) -> Obj:
    """At most one of the Deployment's pods evicted at a time: a drain waits until the other
    is Ready again. maxUnavailable, not minAvailable: a Deployment scaled to one still drains."""
    api = "policy/v1" if options.kube_version >= POLICY_V1 else "policy/v1beta1"
    return {
        "apiVersion": api, "kind": "PodDisruptionBudget",
        "metadata": object_meta(options.component, options.namespace, options.component),
        "spec": {"maxUnavailable": 1, "selector": selector(options)},
    }


def metrics_service(options: Options) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": object_meta(f"{options.component}-metrics", options.namespace,
                          options.component),
        "spec": {"selector": {"app.kubernetes.io/name": options.component},
                 "ports": [{"name": "http-metrics", "port": Settings().http_host_port[1],
                            "targetPort": "http-metrics", "protocol": "TCP"}]},
    }


def webhook_service(options: Options) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": object_meta(Settings().webhook_service, options.namespace),
        "spec": {"selector": {"app.kubernetes.io/name": NAME},
                 "ports": [{"name": "webhook", "port": 443, "targetPort": "webhook",
                            "protocol": "TCP"}]},
    }


# Namespaces whose pods may scrape the reconciler's /metrics (Prometheus's): label them so.
METRICS_ACCESS_LABEL = "kaiwu.inspur.com/metrics-access"


def network_policy(options: Options) -> Obj:
    """Who may reach the reconciler's pods: the webhook port from anywhere (the API server's
    address is no pod or namespace a selector can name), the restore file server from KaiwuDB
    pods only, /metrics from namespaces labelled METRICS_ACCESS_LABEL=true. The kubelet's
    probes come from the pod's own node, which a NetworkPolicy never blocks."""
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": object_meta(options.component, options.namespace, options.component),
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": options.component}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"port": "webhook", "protocol": "TCP"}]},
                {"ports": [{"port": "restore-files", "protocol": "TCP"}],
                 "from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
                     "app.kubernetes.io/name": "kaiwudb"}}}]},
                {"ports": [{"port": "http-metrics", "protocol": "TCP"}],
                 "from": [{"namespaceSelector": {"matchLabels": {
                     METRICS_ACCESS_LABEL: "true"}}}]},
            ],
        },
    }


def webhook_configuration(options: Options) -> Obj:
    settings = Settings(webhook_configuration=f"{NAME}-{options.namespace}",
                        watch_namespace=options.watch_namespace)
    return placeholder(settings, options.namespace, options.kube_version)


# The Pod Security Standard the reconciler's own namespace enforces, audits and warns about:
# every container of the bundle's pods passes it, the git-sync sidecar included (a unit test
# checks each rule in every variant).
POD_SECURITY_LABELS = {f"pod-security.kubernetes.io/{mode}": "restricted"
                       for mode in ("enforce", "audit", "warn")}


def owns_namespace(options: Options) -> bool:
    """Whether the install namespace is the reconciler's alone, not the watched namespace its
    KaiwuClusters live in too (a namespaced install into the team's own namespace)."""
    return options.namespace != options.watch_namespace


def namespace_object(options: Options) -> Obj:
    meta = object_meta(options.namespace)
    if owns_namespace(options):
        # The escape hatch: KaiwuClusters here are never sent to the webhook, so a broken
        # webhook can always be worked around in the reconciler's own namespace (and any other
        # namespace an administrator labels so).
        meta["labels"][SKIP_LABEL] = SKIP_VALUE
        # Only here: a namespace shared with KaiwuDB pods keeps the level its owner chose
        # (spec.nodeTuning's init container is privileged: no restricted namespace admits it).
        meta["labels"].update(POD_SECURITY_LABELS)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
