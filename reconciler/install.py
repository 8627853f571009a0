"""`kaiwu install`: the reconciler's install bundle, one YAML stream for one `kubectl apply`.

Called by `reconciler.cli.main` for `kaiwu install ...`; tests call `bundle` and `render`.
The bundle holds the KaiwuCluster CRD (and the backup CRDs), the Namespace, the ServiceAccount,
the RBAC, the metrics and webhook Services, the admission webhook's registration, the
NetworkPolicy, the PodDisruptionBudget and the Deployment, in that order (kubectl applies in
file order: the CRDs first); `--crds-only` and `--skip-crds` split it in two, for teams that
manage CRDs apart. The registration (a ValidatingWebhookConfiguration) ships without what only
the reconciler knows: its leader puts in the caBundle of the certificate it serves, the
failurePolicy and the time-out (reconciler.runtime.webhook), so applying the bundle again never
undoes them, and the reconciler needs no right to create one.

This module is the one source of truth for the deploy manifests: deploy/install.yaml is its
output with the defaults and deploy/kustomize/ its variants as a kustomize base and overlays
(both written by `make manifests`, reconciler.kustomize; unit tests fail when they are stale),
and the CRD comes from `renderer.cel.crd_for`: the very schema the renderer validates
with, plus, for `--kube-version` 1.25 or later, the renderer's rules in CEL. The manifests are
code rather than YAML files shipped as package data because the variants (scope, watched
namespace, directory mode) change which objects exist, not only values in them; code says why per
rule, and a generated deploy/ keeps kustomize users served.

Two scopes:
- cluster (default): one ClusterRole with everything, bound cluster-wide; the reconciler watches
  every namespace.
- namespaced: one watched namespace (the reconciler's caches watch one namespace or all). Its
  rights are a Role and RoleBinding in that namespace; the one ClusterRole left only reads Nodes
  (failover watches them) and PersistentVolumes (a local volume's node affinity).
Both grant leader election in the install namespace only. `--directory-mode` adds the verbs
directory mode writes KaiwuClusters with, and a git-sync sidecar (an example image) feeding it.
`--shard NAME` makes one shard's bundle: the shared objects (CRD, ServiceAccount, RBAC) as in
every bundle, and its own Deployment, Lease Role and metrics Service, all named
kaiwu-reconciler-NAME (docs/reconciler.md, "Sharding").
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.metadata
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from reconciler.runtime.webhook import SKIP_LABEL, SKIP_VALUE, placeholder
from reconciler.settings import SHARD_LABEL, Settings
from renderer.builders.disruption_budget import POLICY_V1
from renderer.builders.statefulset import HOSTNAME_KEY
from renderer.cel import crd_for
from renderer.emit import to_yaml
from renderer.schema import (
    BACKUP_CRD_FILES,
    BACKUP_PLURAL,
    GROUP,
    PLURAL,
    SCHEDULE_PLURAL,
    crd_manifest,
)
from renderer.settings import CEL_SINCE, DEFAULT_KUBE_VERSION, KubeVersion, supported_version

Obj = dict[str, Any]

NAME = "kaiwu-reconciler"
# The reconciler's image repository: the one place its name is set. `make image` tags
# <IMAGE_REPOSITORY>:<version> (tests/world/image.py), `make push IMAGE=REF` copies that tag to
# REF, and `kaiwu install` runs it unless --image names another. Nothing is published there yet
# (docs/reconciler.md, "The image and your registry"): build it and push it to your registry.
IMAGE_REPOSITORY = "ghcr.io/kaiwu-operator/kaiwu-reconciler"
DEFAULT_NAMESPACE = "kaiwu-system"
SCOPES = ("cluster", "namespaced")
# An example: the bundle names it, nothing in this project pulls or tests it.
GIT_SYNC_IMAGE = "registry.k8s.io/git-sync/git-sync:v4.2.4"
GIT_ROOT = "/git"
GIT_LINK = "repo"  # git-sync keeps /git/repo pointing at the current checkout
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster clients look
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "kaiwu-operator"}
REPLICAS = 2  # a leader and a standby, each serving the admission webhook
ZONE_KEY = "topology.kubernetes.io/zone"
EXIT_OK, EXIT_INVALID = 0, 2
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def version() -> str:
    """The installed kaiwu-operator version: the default image tag and the bundle's header."""
    try:
        return importlib.metadata.version("kaiwu-operator")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        return "0.0.0"


def default_image() -> str:
    """The image the bundle runs unless --image names another: IMAGE_REPOSITORY:<version>."""
    return f"{IMAGE_REPOSITORY}:{version()}"


@dataclass(frozen=True)
class Options:
    """What `kaiwu install` was asked for; the defaults make deploy/install.yaml."""

    image: str = ""  # "" = default_image()
    namespace: str = DEFAULT_NAMESPACE
    scope: str = "cluster"
    watch_namespace: str = ""  # namespaced scope only
    directory_mode: bool = False
    git_repo: str = ""  # directory mode only
    # Directory mode: the namespaces its files may put KaiwuClusters in ("*": any; () = the
    # reconciler's own, or the watched one).
    source_namespaces: tuple[str, ...] = ()
    # The oldest supported release: the default bundle installs everywhere. From 1.25 the CRD
    # carries CEL rules (renderer/cel.py).
    kube_version: KubeVersion = DEFAULT_KUBE_VERSION
    shard: str = ""  # "" = the unnamed shard: the clusters without the shard label
    # ReadWriteMany claims (in the install namespace) mounted for volume backup targets.
    backup_volume_claims: tuple[str, ...] = ()
    # For teams that manage CRDs apart: the CRDs alone, or everything but them.
    crds_only: bool = False
    skip_crds: bool = False

    @property
    def effective_image(self) -> str:
        return self.image or default_image()

    @property
    def component(self) -> str:
        """The name of this shard's Deployment, pods' app label and metrics Service: its own,
        so two shards' Deployments never select each other's pods."""
        return f"{NAME}-{self.shard}" if self.shard else NAME

    @property
    def lease_name(self) -> str:
        return Settings(shard=self.shard).effective_lease_name()

    def problems(self) -> list[str]:
        """Every option the bundle cannot be made with, as '--flag: what is wrong and the fix'."""
        found: list[str] = []
        if not _DNS_LABEL.match(self.namespace):
            found.append(f"--namespace: {self.namespace!r} is not a namespace name "
                         "(lower-case letters, digits and '-', at most 63)")
        if self.scope not in SCOPES:
            found.append(f"--scope: {self.scope!r} is not one of {', '.join(SCOPES)}")
        elif self.scope == "namespaced" and not self.watch_namespace:
            found.append("--scope namespaced: needs --watch-namespace NS (the namespace whose "
                         "KaiwuClusters it reconciles)")
        elif self.scope == "cluster" and self.watch_namespace:
            found.append("--watch-namespace: only with --scope namespaced (a cluster-wide "
                         "install watches every namespace)")
        if self.watch_namespace and not _DNS_LABEL.match(self.watch_namespace):
            found.append(f"--watch-namespace: {self.watch_namespace!r} is not a namespace name")
        if self.directory_mode and not self.git_repo:
            found.append("--directory-mode: needs --git-repo URL (the repository git-sync "
                         "clones the KaiwuCluster files from)")
        if self.git_repo and not self.directory_mode:
            found.append("--git-repo: only with --directory-mode")
        if self.source_namespaces and not self.directory_mode:
            found.append("--source-namespace: only with --directory-mode")
        for source in self.source_namespaces:
            if source != "*" and not _DNS_LABEL.match(source):
                found.append(f"--source-namespace: {source!r} is not a namespace name (or *)")
            elif self.watch_namespace and source not in (self.watch_namespace, "*"):
                found.append(f"--source-namespace: {source} is outside the watched namespace "
                             f"{self.watch_namespace}: the reconciler would refuse every file "
                             "for it")
        if self.shard and not _DNS_LABEL.match(self.shard):
            found.append(f"--shard: {self.shard!r} is not a shard name (lower-case letters, "
                         "digits and '-': it names the Deployment and the Lease)")
        elif len(self.component) > 63:
            found.append(f"--shard: {self.shard!r} is too long (the Deployment "
                         f"{self.component} must be at most 63 characters)")
        if self.shard and self.directory_mode:
            found.append("--shard: not with --directory-mode (directory mode applies every "
                         "file it finds: run it unsharded)")
        for claim in self.backup_volume_claims:
            if not _DNS_SUBDOMAIN.match(claim):
                found.append(f"--backup-volume-claim: {claim!r} is not a claim name "
                             "(lower-case letters, digits, '-' and '.')")
        if not self.effective_image.strip() or any(c.isspace() for c in self.effective_image):
            found.append(f"--image: {self.image!r} is not an image reference")
        if self.crds_only and self.skip_crds:
            found.append("--crds-only, --skip-crds: give one (the CRDs alone, or everything "
                         "but them)")
        elif self.crds_only and self.ignored_by_crds_only():
            found.append(f"--crds-only: prints the CRDs alone, which only --kube-version "
                         f"changes; drop {', '.join(self.ignored_by_crds_only())}")
        return found

    def ignored_by_crds_only(self) -> list[str]:
        """The flags given that change nothing the CRDs alone are made of."""
        defaults = Options()
        return [_FLAGS.get(f.name, "--" + f.name.replace("_", "-")) for f in fields(self)
                if f.name not in ("kube_version", "crds_only", "skip_crds")
                and getattr(self, f.name) != getattr(defaults, f.name)]

    def command(self) -> str:
        """The `kaiwu install` command line that makes this bundle (for its header)."""
        if self.crds_only:
            return "kaiwu install --crds-only" + (
                f" --kube-version {self.kube_version}"
                if self.kube_version != DEFAULT_KUBE_VERSION else "")
        words = ["kaiwu install", f"--namespace {self.namespace}", f"--scope {self.scope}"]
        if self.watch_namespace:
            words.append(f"--watch-namespace {self.watch_namespace}")
        if self.directory_mode:
            words.append(f"--directory-mode --git-repo {self.git_repo}")
            words += [f"--source-namespace {n}" for n in self.source_namespaces]
        if self.kube_version != DEFAULT_KUBE_VERSION:
            words.append(f"--kube-version {self.kube_version}")
        if self.shard:
            words.append(f"--shard {self.shard}")
        words += [f"--backup-volume-claim {claim}" for claim in self.backup_volume_claims]
        if self.skip_crds:
            words.append("--skip-crds")
        words.append(f"--image {self.effective_image}")
        return " ".join(words)


# Option fields whose flag is not their name with dashes.
_FLAGS = {"source_namespaces": "--source-namespace",
          "backup_volume_claims": "--backup-volume-claim"}


@dataclass(frozen=True)
class Document:
    """One object of the bundle and the comment printed above it."""

    comment: str
    obj: Obj


def _rule(group: str, resources: list[str], verbs: list[str],
          names: list[str] | None = None) -> Obj:
    rule: Obj = {"apiGroups": [group], "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


_RW = ["get", "list", "watch", "create", "patch", "delete"]


def namespaced_rules(directory_mode: bool) -> list[Obj]:
    """What the reconciler does inside the namespaces it watches. Every verb is used:
    list/watch by the watch caches (reconciler.kube.cache), get by direct reads (user-provided
    Secrets), patch by server-side apply and field removal, create by POSTs (Secrets, Events),
    delete by pruning, orphaning recreate of a StatefulSet and failover."""
    # The Controller only reads KaiwuClusters and writes their status; directory mode applies
    # them from files (patch; create when new) and deletes those removed from git (with
    # --prune-deleted-clusters): those verbs exist only in the directory-mode bundle.
    # patch: the restore step records its progress in the annotation kaiwu.inspur.com/restore
    # (reconciler/kaiwudb/restore.py); nothing else is patched outside directory mode.
    cluster_verbs = ["get", "list", "watch", "patch"] + (
        ["create", "delete"] if directory_mode else [])
    return [
        _rule(GROUP, [PLURAL], cluster_verbs),
        _rule(GROUP, [f"{PLURAL}/status"], ["get", "update", "patch"]),
        # ownerReferences with blockOwnerDeletion need this where the
        # OwnerReferencesPermissionEnforcement admission plugin is on.
        _rule(GROUP, [f"{PLURAL}/finalizers"], ["update"]),
        # Backups (docs/backup.md): schedules make KaiwuBackups and retention deletes them; the
        # backup step writes their status and reads the S3 credentials Secret (get, above).
        _rule(GROUP, [BACKUP_PLURAL], ["get", "list", "watch", "create", "delete"]),
        _rule(GROUP, [SCHEDULE_PLURAL], ["get", "list", "watch"]),
        _rule(GROUP, [f"{BACKUP_PLURAL}/status", f"{SCHEDULE_PLURAL}/status"],
              ["get", "update", "patch"]),
        # What the renderer emits.
        _rule("", ["services", "serviceaccounts"], _RW),
        _rule("apps", ["statefulsets"], _RW),
        _rule("policy", ["poddisruptionbudgets"], _RW),
        _rule("networking.k8s.io", ["networkpolicies"], _RW),
        _rule("monitoring.coreos.com", ["servicemonitors"], _RW),
        # TLS certificates: made and rotated, never deleted (the CA must survive).
        _rule("", ["secrets"], ["get", "list", "watch", "create", "patch"]),
        # The pods' start flags (reconciler.kaiwudb.upgrade): made, read and switched.
        _rule("", ["configmaps"], ["get", "create", "patch"]),
        # Health and failover: pods are read and, when their node is lost, deleted; claims
        # pinned to a lost node are deleted when the failover policy allows; claims are patched
        # for the count of crash restarts of their pod, to grow them to spec.storage.size, and
        # to label one made before the claim template carried our labels.
        _rule("", ["pods"], ["get", "list", "watch", "delete"]),
        _rule("", ["persistentvolumeclaims"], ["get", "list", "watch", "patch", "delete"]),
        # kwbase commands in the database containers. Exec over a websocket is authorised as
        # "get" (Kubernetes before 1.31) or "create" (SPDY, and 1.31 on).
        _rule("", ["pods/exec"], ["get", "create"]),
        _rule("", ["events"], ["create", "patch"]),
    ]


def cluster_read_rules() -> list[Obj]:
    """What the reconciler reads outside any namespace, in either scope."""
    return [
        # Failover watches Nodes (Ready, taints) whatever namespace the cluster is in.
        _rule("", ["nodes"], ["get", "list", "watch"]),
        # Which node a pre-made local volume is pinned to (its node affinity), failover only.
        _rule("", ["persistentvolumes"], ["get"]),
    ]


def webhook_rules(options: Options) -> list[Obj]:
    """The one cluster-wide object the reconciler writes: its own webhook registration, which
    the bundle ships; so no `create` (that cannot be limited to a name), only get and update of
    that one name."""
    return [_rule("admissionregistration.k8s.io", ["validatingwebhookconfigurations"],
                  ["get", "update"], names=[f"{NAME}-{options.namespace}"])]


def _meta(name: str, namespace: str | None = None, app: str = NAME) -> Obj:
    meta: Obj = {"name": name, "labels": {**LABELS, "app.kubernetes.io/name": app}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _binding(kind: str, name: str, namespace: str | None, role_kind: str, role: str,
             sa_namespace: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": _meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": sa_namespace}],
    }


def _crd(kube_version: KubeVersion) -> Obj:
    # The renderer's schema, unchanged, plus the CEL rules the target release runs (none on
    # 1.20): the API server must validate with the renderer's own rules.
    return crd_for(kube_version)


def _backup_crds() -> list[Obj]:
    return [copy.deepcopy(crd_manifest(path))  # type: ignore[arg-type]  # files are hashable
            for path in BACKUP_CRD_FILES]


def _rbac(options: Options) -> list[Document]:
    ns = options.namespace
    # Cluster-wide names carry the install namespace: two installs (e.g. namespaced ones for
    # two teams) never overwrite each other's ClusterRole.
    cluster_name = f"{NAME}-{ns}"
    rbac = "rbac.authorization.k8s.io/v1"
    docs: list[Document] = []
    if options.scope == "cluster":
        rules = namespaced_rules(options.directory_mode) + cluster_read_rules() + \
            webhook_rules(options)
        docs.append(Document("Everything the reconciler does, in every namespace, and its "
                             "webhook registration.", {
            "apiVersion": rbac, "kind": "ClusterRole", "metadata": _meta(cluster_name),
            "rules": rules}))
    else:
        docs.append(Document(
            "Namespaced install: the only cluster-wide rights left: read-only (Nodes for "
            "failover, PersistentVolumes for a local volume's node) and the reconciler's own "
            "webhook registration.", {
                "apiVersion": rbac, "kind": "ClusterRole", "metadata": _meta(cluster_name),
                "rules": cluster_read_rules() + webhook_rules(options)}))
    docs.append(Document("", _binding("ClusterRoleBinding", cluster_name, None, "ClusterRole",
                                      cluster_name, ns)))
    if options.scope == "namespaced":
        watched = options.watch_namespace
        docs.append(Document(f"What the reconciler does in the one namespace it watches, "
                             f"{watched}.", {
                                 "apiVersion": rbac, "kind": "Role",
                                 "metadata": _meta(NAME, watched),
                                 "rules": namespaced_rules(options.directory_mode)}))
        docs.append(Document("", _binding("RoleBinding", NAME, watched, "Role", NAME, ns)))
    # Per shard: the Lease, and the Role naming it (a shard's bundle must not narrow another
    # shard's Role to its own Lease).
    lease = f"{options.component}-leader-election"
    what = f"shard {options.shard}'s Lease" if options.shard else "one Lease"
    docs.append(Document(
        f"Leader election: {what}, in the reconciler's own namespace. `create` cannot be "
        "limited to a name (the name is in the body); get and patch can.", {
            "apiVersion": rbac, "kind": "Role",
            "metadata": _meta(lease, ns, options.component),
            "rules": [_rule("coordination.k8s.io", ["leases"], ["create"]),
                      _rule("coordination.k8s.io", ["leases"], ["get", "patch"],
                            names=[options.lease_name])]}))
    docs.append(Document("", _binding("RoleBinding", lease, ns, "Role", lease, ns)
                         | {"metadata": _meta(lease, ns, options.component)}))
    webhook = f"{NAME}-webhook"
    docs.append(Document(
        "The webhook's serving certificate: one Secret in the reconciler's own namespace, made "
        "and rotated by the leader, read by every replica.", {
            "apiVersion": rbac, "kind": "Role", "metadata": _meta(webhook, ns),
            "rules": [_rule("", ["secrets"], ["create"]),
                      _rule("", ["secrets"], ["get", "update"],
                            names=[Settings().webhook_secret])]}))
    docs.append(Document("", _binding("RoleBinding", webhook, ns, "Role", webhook, ns)))
    return docs


def _selector(options: Options) -> Obj:
    """This shard's pods: the Deployment's selector, its spreading's and its budget's."""
    return {"matchLabels": {"app.kubernetes.io/name": options.component}}


def _http_get(path: str, period: int, failures: int) -> Obj:
    return {"httpGet": {"path": path, "port": "http-metrics"}, "periodSeconds": period,
            "failureThreshold": failures}


def _deployment(options: Options) -> Obj:
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
                    "topologyKey": HOSTNAME_KEY, "labelSelector": _selector(options)}}]}},
        # And in different zones where the nodes say which zone they are in.
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": ZONE_KEY, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": _selector(options)}],
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
    meta = _meta(options.component, options.namespace, options.component)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": REPLICAS,
            "selector": _selector(options),
            "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": pod},
        },
    }


def _disruption_budget(options: Options) -> Obj:
    """At most one of the Deployment's pods evicted at a time: a drain waits until the other
    is Ready again. maxUnavailable, not minAvailable: a Deployment scaled to one still drains."""
    api = "policy/v1" if options.kube_version >= POLICY_V1 else "policy/v1beta1"
    return {
        "apiVersion": api, "kind": "PodDisruptionBudget",
        "metadata": _meta(options.component, options.namespace, options.component),
        "spec": {"maxUnavailable": 1, "selector": _selector(options)},
    }


def _service(options: Options) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _meta(f"{options.component}-metrics", options.namespace,
                          options.component),
        "spec": {"selector": {"app.kubernetes.io/name": options.component},
                 "ports": [{"name": "http-metrics", "port": Settings().http_host_port[1],
                            "targetPort": "http-metrics", "protocol": "TCP"}]},
    }


def _webhook_service(options: Options) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _meta(Settings().webhook_service, options.namespace),
        "spec": {"selector": {"app.kubernetes.io/name": NAME},
                 "ports": [{"name": "webhook", "port": 443, "targetPort": "webhook",
                            "protocol": "TCP"}]},
    }


# Namespaces whose pods may scrape the reconciler's /metrics (Prometheus's): label them so.
METRICS_ACCESS_LABEL = "kaiwu.inspur.com/metrics-access"


def _network_policy(options: Options) -> Obj:
    """Who may reach the reconciler's pods: the webhook port from anywhere (the API server's
    address is no pod or namespace a selector can name), the restore file server from KaiwuDB
    pods only, /metrics from namespaces labelled METRICS_ACCESS_LABEL=true. The kubelet's
    probes come from the pod's own node, which a NetworkPolicy never blocks."""
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _meta(options.component, options.namespace, options.component),
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


def _webhook_configuration(options: Options) -> Obj:
    settings = Settings(webhook_configuration=f"{NAME}-{options.namespace}",
                        watch_namespace=options.watch_namespace)
    return placeholder(settings, options.namespace, options.kube_version)


# The Pod Security Standard the reconciler's own namespace enforces, audits and warns about:
# every container of the bundle's pods passes it, the git-sync sidecar included (a unit test
# checks each rule in every variant).
POD_SECURITY_LABELS = {f"pod-security.kubernetes.io/{mode}": "restricted"
                       for mode in ("enforce", "audit", "warn")}


def _owns_namespace(options: Options) -> bool:
    """Whether the install namespace is the reconciler's alone, not the watched namespace its
    KaiwuClusters live in too (a namespaced install into the team's own namespace)."""
    return options.namespace != options.watch_namespace


def _namespace(options: Options) -> Obj:
    meta = _meta(options.namespace)
    if _owns_namespace(options):
        # The escape hatch: KaiwuClusters here are never sent to the webhook, so a broken
        # webhook can always be worked around in the reconciler's own namespace (and any other
        # namespace an administrator labels so).
        meta["labels"][SKIP_LABEL] = SKIP_VALUE
        # Only here: a namespace shared with KaiwuDB pods keeps the level its owner chose
        # (spec.nodeTuning's init container is privileged: no restricted namespace admits it).
        meta["labels"].update(POD_SECURITY_LABELS)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _namespace_note(options: Options) -> str:
    if not _owns_namespace(options):
        return ("The reconciler's namespace, shared with the KaiwuClusters it watches: its Pod "
                "Security labels are left to its owner (a cluster with spec.nodeTuning needs "
                "privileged).")
    note = ("The reconciler's own namespace: Pod Security restricted enforced, which every "
            "container below passes.")
    # Where directory mode's files may put KaiwuClusters: by default the watched namespace,
    # else the reconciler's own (reconciler.settings, source_namespaces).
    targets = options.source_namespaces or (options.watch_namespace or options.namespace,)
    if options.directory_mode and options.namespace in targets:
        note += (" Directory mode puts KaiwuClusters here too: a cluster with spec.nodeTuning "
                 "(a privileged init container) cannot run here; give its files another "
                 "namespace (--source-namespace).")
    return note


def bundle(options: Options) -> list[Document]:
    """Every object of the bundle, in apply order. Raises ValueError on invalid options."""
    problems = options.problems()
    if problems:
        raise ValueError("; ".join(problems))
    crds = _crd_documents(options)
    if options.crds_only:
        return crds
    rest = _operator_documents(options)
    return rest if options.skip_crds else crds + rest


def _crd_documents(options: Options) -> list[Document]:
    return [
        Document("The KaiwuCluster schema (crd/kaiwuclusters.yaml), cluster-scoped: installed "
                 "by a cluster administrator. "
                 + (f"Without CEL rules, for every Kubernetes from {options.kube_version} on; "
                    f"--kube-version {CEL_SINCE} or later adds them."
                    if options.kube_version < CEL_SINCE else
                    f"With the CEL validation rules of Kubernetes {options.kube_version}."),
                 _crd(options.kube_version)),
        *[Document(f"The {crd['spec']['names']['kind']} schema ({crd['metadata']['name']}): "
                   "backups (docs/backup.md).", crd) for crd in _backup_crds()],
    ]


def _operator_documents(options: Options) -> list[Document]:
    """Everything but the CRDs: the reconciler and what it runs with."""
    ns = options.namespace
    return [
        Document(_namespace_note(options), _namespace(options)),
        Document("The reconciler's identity: every right below is granted to it.", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, ns)}),
        *_rbac(options),
        Document(f"For Prometheus: scrape {options.component}-metrics.{ns}:8090/metrics (both "
                 "replicas report; kaiwu_leader tells which one leads).", _service(options)),
        Document("The admission webhook: the API server sends KaiwuCluster creates and updates "
                 "here, to any ready replica.", _webhook_service(options)),
        Document("Its registration, shipped here so the reconciler needs no right to create "
                 "one: the leader puts its CA in (caBundle) and its failurePolicy and "
                 "timeoutSeconds (settings), which this copy leaves out, so applying it again "
                 "never undoes them. Until then, KaiwuCluster writes are refused outside "
                 f"namespaces labelled {SKIP_LABEL}={SKIP_VALUE}: wait for the Deployment"
                 + (" of the unnamed shard, whose leader registers it for every shard (install "
                    "its bundle too)." if options.shard else "."),
                 _webhook_configuration(options)),
        Document("Who may reach the reconciler: the webhook port from anywhere (the API "
                 "server), the restore file server from KaiwuDB pods, /metrics from namespaces "
                 f"labelled {METRICS_ACCESS_LABEL}=true (label your Prometheus's). Enforced "
                 "where the network plugin enforces NetworkPolicies.", _network_policy(options)),
        Document("At most one replica evicted at a time (a drain waits until the other is "
                 "Ready): the other "
                 + ("keeps serving the admission webhook, whose failurePolicy Fail refuses "
                    "every KaiwuCluster write while no replica answers, and "
                    if not options.shard else "")
                 + "takes over the Lease. The Deployment prefers other nodes (and zones) for "
                 "the two: a one-node cluster still runs both.",
                 _disruption_budget(options)),
        Document("Two replicas: one leads (holds the Lease) and writes, the other takes over "
                 "within seconds. Settings are KAIWU_* variables (kaiwu reconcile --help). "
                 + _shard_note(options), _deployment(options)),
    ]


def _shard_note(options: Options) -> str:
    if options.shard:
        return (f"Shard {options.shard}: reconciles only the KaiwuClusters labelled "
                f"{SHARD_LABEL}={options.shard}.")
    return (f"Reconciles the KaiwuClusters without the label {SHARD_LABEL} (each shard "
            "installed with `kaiwu install --shard NAME` takes those labelled NAME).")


def render(options: Options) -> str:
    """The bundle as one YAML stream, deterministic: the same options give the same bytes."""
    head = (f"# kaiwu-operator {version()}: the reconciler's install bundle, made by\n"
            f"#   {options.command()}\n"
            "# Apply it with `kubectl apply -f`. Do not edit: change reconciler/install.py.\n")
    if options.skip_crds:
        crds = Options(crds_only=True, kube_version=options.kube_version).command()
        head += f"# Without the CRDs (--skip-crds): apply `{crds}` first.\n"
    return head + "".join(document_text(doc) for doc in bundle(options))


def document_text(doc: Document) -> str:
    """One document of a YAML stream: `---`, its comment, its object (also the text
    reconciler.kustomize writes the same objects with)."""
    comment = "".join(f"# {line}\n" for line in wrap(doc.comment)) if doc.comment else ""
    return f"---\n{comment}{to_yaml(doc.obj)}"


def wrap(text: str, width: int = 96) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


# ---- kaiwu uninstall ------------------------------------------------------------------------

# The order to delete the reconciler's own objects in (kubectl deletes in file order): the
# webhook's registration first (with no replica left to answer, its failurePolicy Fail would
# refuse every KaiwuCluster write), then the reconciler itself, then what it ran with.
REMOVAL_ORDER = ("ValidatingWebhookConfiguration", "Deployment", "PodDisruptionBudget",
                 "NetworkPolicy", "Service", "Lease", "Secret", "RoleBinding", "Role",
                 "ClusterRoleBinding", "ClusterRole", "ServiceAccount")

KEPT_ON_UNINSTALL = (
    "Kept: the CRDs, and with them every KaiwuCluster, KaiwuBackup and KaiwuBackupSchedule; "
    "every KaiwuDB StatefulSet, pod, claim, volume, Service and Secret (their owner is their "
    "KaiwuCluster, never the reconciler): KaiwuDB runs on, unmanaged (no repair, failover, "
    "scaling, upgrade, certificate renewal or scheduled backup) until a reconciler is "
    "installed again, which takes the clusters over as they are. Never `kaiwu install | "
    "kubectl delete -f -`: that deletes the CRDs, and with them every KaiwuCluster and its "
    "pods (docs/reconciler.md, \"Uninstalling\").")


def removal(options: Options) -> list[Document]:
    """What `kaiwu uninstall` prints: the reconciler's own objects of the bundle `options`
    makes, in REMOVAL_ORDER, plus what the reconciler made itself in its namespace (its Lease,
    and the webhook's certificate Secret). Never the CRDs, nor the Namespace (it may hold
    KaiwuClusters: a namespaced install into the team's own namespace, or directory mode's
    default). With a shard: that shard's own objects only (its Deployment, budget, policy,
    metrics Service, Lease and the Role that grants it): the shared ones are removed with the
    unnamed shard's. Raises ValueError on invalid options."""
    problems = options.problems()
    if problems:
        raise ValueError("; ".join(problems))
    settings = Settings(shard=options.shard)
    made = [
        Document("", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": settings.effective_lease_name(),
                                   "namespace": options.namespace}}),
        Document("", {"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": settings.webhook_secret,
                                   "namespace": options.namespace}}),
    ]
    docs = [doc for doc in _operator_documents(options) + made
            if doc.obj["kind"] != "Namespace"]
    if options.shard:
        shared = {_identity(doc) for doc in _operator_documents(
            dataclasses.replace(options, shard="")) + made[1:]}
        docs = [doc for doc in docs if _identity(doc) not in shared]
    docs.sort(key=lambda doc: REMOVAL_ORDER.index(doc.obj["kind"]))
    return [Document("", {"apiVersion": doc.obj["apiVersion"], "kind": doc.obj["kind"],
                          "metadata": {key: doc.obj["metadata"][key] for key in
                                       ("name", "namespace") if key in doc.obj["metadata"]}})
            for doc in docs]


def _identity(doc: Document) -> tuple[str, str, str]:
    meta = doc.obj["metadata"]
    return doc.obj["kind"], str(meta.get("namespace") or ""), str(meta["name"])


def uninstall_command(options: Options) -> str:
    """The `kaiwu uninstall` command line for these options (for its header)."""
    words = ["kaiwu uninstall", f"--namespace {options.namespace}", f"--scope {options.scope}"]
    if options.watch_namespace:
        words.append(f"--watch-namespace {options.watch_namespace}")
    if options.kube_version != DEFAULT_KUBE_VERSION:
        words.append(f"--kube-version {options.kube_version}")
    if options.shard:
        words.append(f"--shard {options.shard}")
    return " ".join(words)


def render_removal(options: Options) -> str:
    """`kaiwu uninstall`'s output: what it removes, what it keeps, and how (deterministic)."""
    head = [f"kaiwu-operator {version()}: what removing the reconciler deletes, made by",
            f"  {uninstall_command(options)}",
            "Delete it, in this order, with `kubectl delete --ignore-not-found -f -`: the "
            "webhook's registration first (with no replica left to answer it, KaiwuCluster "
            "writes would be refused), then the reconciler, then its rights."]
    if options.shard:
        head.append(f"Shard {options.shard}'s own objects only: the shared ones (ServiceAccount, "
                    "RBAC, webhook) go with the unnamed shard's `kaiwu uninstall`, last.")
    head += [KEPT_ON_UNINSTALL,
             f"Also kept: the namespace {options.namespace}; delete it yourself once nothing "
             "else lives there (deleting a namespace deletes everything in it)."]
    lines = [line for text in head for line in wrap(text)]
    parts = ["".join(f"# {line}\n" for line in lines)]
    parts += [f"---\n{to_yaml(doc.obj)}" for doc in removal(options)]
    return "".join(parts)


def uninstall_parser() -> argparse.ArgumentParser:
    result = _Parser(prog="kaiwu uninstall", description=(
        "Print what removing the reconciler deletes (its Deployment, RBAC, Services, webhook "
        "registration, Lease; never the CRDs, the namespace or anything of a KaiwuCluster), "
        "for: kaiwu uninstall | kubectl delete --ignore-not-found -f -. Give the flags the "
        "install was made with."))
    result.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                        help="where the reconciler runs (default: %(default)s)")
    result.add_argument("--scope", default="cluster", choices=SCOPES,
                        help="the install's scope (default: %(default)s)")
    result.add_argument("--watch-namespace", default="", metavar="NS",
                        help="with --scope namespaced: the namespace it reconciled")
    result.add_argument("--kube-version", type=_kube_version, default=DEFAULT_KUBE_VERSION,
                        help="your cluster's Kubernetes version (default: %(default)s; 1.20 "
                        "names the PodDisruptionBudget policy/v1beta1)")
    result.add_argument("--shard", default="", metavar="NAME",
                        help="remove one shard's own objects only")
    return result


def uninstall_main(argv: Sequence[str]) -> int:
    """`kaiwu uninstall ...`: print the removal list; exit 2 with one line for bad flags."""
    args = uninstall_parser().parse_args(list(argv))
    options = Options(namespace=args.namespace, scope=args.scope,
                      watch_namespace=args.watch_namespace, kube_version=args.kube_version,
                      shard=args.shard)
    return _print("kaiwu uninstall", options, render_removal)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr (exit 2), not usage and a traceback."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INVALID, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _kube_version(text: str) -> KubeVersion:
    try:
        return supported_version(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def parser() -> argparse.ArgumentParser:
    result = _Parser(prog="kaiwu install", description=(
        "Print the reconciler's install bundle (CRDs, Namespace, ServiceAccount, RBAC, "
        "Services, webhook registration, NetworkPolicy, PodDisruptionBudget, Deployment) as "
        "YAML: kaiwu install | kubectl apply -f -"))
    result.add_argument("--image", default="", metavar="REF", help=(
        f"the reconciler's image (default: {default_image()}, not published yet: build it with "
        "`make image`, copy it to your registry with `make push IMAGE=REF` and give that REF "
        "here)"))
    result.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                        help="where the reconciler runs (default: %(default)s)")
    result.add_argument("--scope", default="cluster", choices=SCOPES,
                        help="cluster: reconcile every namespace (default); namespaced: only "
                        "--watch-namespace, with Roles there and no cluster-wide writes")
    result.add_argument("--watch-namespace", action="append", default=[], metavar="NS",
                        help="with --scope namespaced: the one namespace to reconcile")
    result.add_argument("--directory-mode", action="store_true",
                        help="GitOps pull: a git-sync sidecar (example image) and the rights to "
                        "create, apply and delete KaiwuClusters from its checkout")
    result.add_argument("--git-repo", default="", metavar="URL",
                        help="with --directory-mode: the repository holding KaiwuCluster files")
    result.add_argument("--source-namespace", action="append", default=[], metavar="NS",
                        help="with --directory-mode: a namespace its files may put "
                        "KaiwuClusters in (repeatable; * for any; default: --namespace, or "
                        "the watched namespace)")
    result.add_argument("--kube-version", type=_kube_version, default=DEFAULT_KUBE_VERSION,
                        help="your cluster's Kubernetes version (default: %(default)s, which "
                        "installs on 1.28 and every later release; give yours for its extra "
                        "CEL rules, e.g. 1.29 refuses a smaller volume; 1.20 to 1.24 must be "
                        "given: their API servers lack policy/v1 or CEL)")
    result.add_argument("--shard", default="", metavar="NAME",
                        help=f"a bundle for one shard: its Deployment ({NAME}-NAME), Lease and "
                        f"metrics Service reconcile only KaiwuClusters labelled "
                        f"{SHARD_LABEL}=NAME (default: the unnamed shard, the clusters without "
                        "the label)")
    result.add_argument("--backup-volume-claim", action="append", default=[], metavar="NAME",
                        help="a ReadWriteMany claim in --namespace to mount for KaiwuBackups "
                        "with a volume target (repeatable; docs/backup.md)")
    result.add_argument("--crds-only", action="store_true",
                        help="print only the CRDs (KaiwuCluster, KaiwuBackup, "
                        "KaiwuBackupSchedule), for whoever manages CRDs apart; no other flag "
                        "but --kube-version")
    result.add_argument("--skip-crds", action="store_true",
                        help="print everything but the CRDs (apply `kaiwu install --crds-only` "
                        "first)")
    return result


def main(argv: Sequence[str]) -> int:
    """`kaiwu install ...`: print the bundle; exit 2 with one line on stderr for bad flags."""
    args = parser().parse_args(list(argv))
    if len(args.watch_namespace) > 1:
        # The reconciler's caches watch one namespace or all of them.
        print("kaiwu install: --watch-namespace: a namespaced install watches one namespace; "
              "install once per namespace (each with its own --namespace) or use --scope "
              "cluster", file=sys.stderr)
        return EXIT_INVALID
    options = Options(image=args.image, namespace=args.namespace, scope=args.scope,
                      watch_namespace="".join(args.watch_namespace),
                      directory_mode=args.directory_mode,
                      git_repo=args.git_repo, kube_version=args.kube_version,
                      source_namespaces=tuple(args.source_namespace),
                      shard=args.shard,
                      backup_volume_claims=tuple(args.backup_volume_claim),
                      crds_only=args.crds_only, skip_crds=args.skip_crds)
    return _print("kaiwu install", options, render)


def _print(command: str, options: Options, text_of: Callable[[Options], str]) -> int:
    """The YAML `text_of(options)` on stdout, or one line naming every problem of the flags on
    stderr and exit 2 (nothing printed)."""
    problems = options.problems()
    if problems:
        print(f"{command}: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(text_of(options))
    return EXIT_OK
