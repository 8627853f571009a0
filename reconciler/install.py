"""`kaiwu install`: the reconciler's install bundle, one YAML stream for one `kubectl apply`.

Called by `reconciler.cli.main` for `kaiwu install ...`; tests call `bundle` and `render`.
The bundle holds the KaiwuCluster CRD, the Namespace, the ServiceAccount, the RBAC, the metrics
Service and the Deployment, in that order (kubectl applies in file order: the CRD first).

This module is the one source of truth for the deploy manifests: deploy/install.yaml is its
output with the defaults (`kaiwu install > deploy/install.yaml`, a unit test fails when the file
is stale), and the CRD comes from `renderer.schema.crd_manifest`, the very schema the renderer
validates with. The manifests are code rather than YAML files shipped as package data because
the variants (scope, watched namespace, directory mode) change which objects exist, not only
values in them; code says why per rule, and a generated deploy/ keeps kustomize users served.

Two scopes:
- cluster (default): one ClusterRole with everything, bound cluster-wide; the reconciler watches
  every namespace.
- namespaced: one watched namespace (the reconciler's caches watch one namespace or all). Its
  rights are a Role and RoleBinding in that namespace; the one ClusterRole left only reads Nodes
  (failover watches them) and PersistentVolumes (a local volume's node affinity).
Both grant leader election in the install namespace only. `--directory-mode` adds the verbs
directory mode writes KaiwuClusters with, and a git-sync sidecar (an example image) feeding it.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from reconciler.settings import Settings
from renderer.emit import to_yaml
from renderer.schema import (
    BACKUP_CRD_FILES,
    BACKUP_PLURAL,
    GROUP,
    PLURAL,
    SCHEDULE_PLURAL,
    crd_manifest,
)

Obj = dict[str, Any]

NAME = "kaiwu-reconciler"
DEFAULT_NAMESPACE = "kaiwu-system"
SCOPES = ("cluster", "namespaced")
# An example: the bundle names it, nothing in this project pulls or tests it.
GIT_SYNC_IMAGE = "registry.k8s.io/git-sync/git-sync:v4.2.4"
GIT_ROOT = "/git"
GIT_LINK = "repo"  # git-sync keeps /git/repo pointing at the current checkout
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "kaiwu-operator"}
EXIT_OK, EXIT_INVALID = 0, 2
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def version() -> str:
    """The installed kaiwu-operator version: the default image tag and the bundle's header."""
    try:
        return importlib.metadata.version("kaiwu-operator")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        return "0.0.0"


@dataclass(frozen=True)
class Options:
    """What `kaiwu install` was asked for; the defaults make deploy/install.yaml."""

    image: str = ""  # "" = kaiwu-reconciler:<version>
    namespace: str = DEFAULT_NAMESPACE
    scope: str = "cluster"
    watch_namespace: str = ""  # namespaced scope only
    directory_mode: bool = False
    git_repo: str = ""  # directory mode only
    # ReadWriteMany claims (in the install namespace) mounted for volume backup targets.
    backup_volume_claims: tuple[str, ...] = ()

    @property
    def effective_image(self) -> str:
        return self.image or f"{NAME}:{version()}"

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
        for claim in self.backup_volume_claims:
            if not _DNS_SUBDOMAIN.match(claim):
                found.append(f"--backup-volume-claim: {claim!r} is not a claim name "
                             "(lower-case letters, digits, '-' and '.')")
        if not self.effective_image.strip() or any(c.isspace() for c in self.effective_image):
            found.append(f"--image: {self.image!r} is not an image reference")
        return found

    def command(self) -> str:
        """The `kaiwu install` command line that makes this bundle (for its header)."""
        words = ["kaiwu install", f"--namespace {self.namespace}", f"--scope {self.scope}"]
        if self.watch_namespace:
            words.append(f"--watch-namespace {self.watch_namespace}")
        if self.directory_mode:
            words.append(f"--directory-mode --git-repo {self.git_repo}")
        words += [f"--backup-volume-claim {claim}" for claim in self.backup_volume_claims]
        words.append(f"--image {self.effective_image}")
        return " ".join(words)


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
        # Health and failover: pods are read and, when their node is lost, deleted; claims
        # pinned to a lost node are deleted when the failover policy allows; a claim carries the
        # count of crash restarts of its pod (patch).
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


def _meta(name: str, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name, "labels": dict(LABELS)}
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


def _crd() -> Obj:
    # As the file says, unchanged: the API server must validate with the renderer's schema.
    return copy.deepcopy(crd_manifest())  # cached by the renderer: never hand out its copy


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
        rules = namespaced_rules(options.directory_mode) + cluster_read_rules()
        docs.append(Document("Everything the reconciler does, in every namespace.", {
            "apiVersion": rbac, "kind": "ClusterRole", "metadata": _meta(cluster_name),
            "rules": rules}))
    else:
        docs.append(Document(
            "Namespaced install: the only cluster-wide rights left, read-only (Nodes for "
            "failover, PersistentVolumes for a local volume's node).", {
                "apiVersion": rbac, "kind": "ClusterRole", "metadata": _meta(cluster_name),
                "rules": cluster_read_rules()}))
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
    lease = f"{NAME}-leader-election"
    docs.append(Document(
        "Leader election: one Lease, in the reconciler's own namespace. `create` cannot be "
        "limited to a name (the name is in the body); get and patch can.", {
            "apiVersion": rbac, "kind": "Role", "metadata": _meta(lease, ns),
            "rules": [_rule("coordination.k8s.io", ["leases"], ["create"]),
                      _rule("coordination.k8s.io", ["leases"], ["get", "patch"],
                            names=[Settings().lease_name])]}))
    docs.append(Document("", _binding("RoleBinding", lease, ns, "Role", lease, ns)))
    return docs


def _http_get(path: str, period: int, failures: int) -> Obj:
    return {"httpGet": {"path": path, "port": "http-metrics"}, "periodSeconds": period,
            "failureThreshold": failures}


def _deployment(options: Options) -> Obj:
    defaults = Settings()
    _, port = defaults.http_host_port
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
    if options.watch_namespace:
        env.append({"name": "KAIWU_WATCH_NAMESPACE", "value": options.watch_namespace})
    reconciler: Obj = {
        "name": "reconciler", "image": options.effective_image,
        "imagePullPolicy": "IfNotPresent", "env": env,
        "ports": [{"name": "http-metrics", "containerPort": port, "protocol": "TCP"},
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
        "affinity": {"podAntiAffinity": {
            # Leader and standby on different nodes: losing one node never loses both.
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}}}}]}},
        "containers": containers,
    }
    if options.directory_mode:
        # git-sync keeps a checkout in the shared emptyDir; the reconciler applies the
        # KaiwuCluster files under it (directory mode, reconciler.runtime.source_dir).
        env.append({"name": "KAIWU_SOURCE", "value": f"dir:{GIT_ROOT}/{GIT_LINK}"})
        # Off: a cluster whose file disappears from git is reported, not deleted. Turn on to
        # delete it (its data volumes stay).
        env.append({"name": "KAIWU_PRUNE_DELETED_CLUSTERS", "value": "false"})
        mount = {"name": "git", "mountPath": GIT_ROOT}
        reconciler["volumeMounts"] = [{**mount, "readOnly": True}]
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
        pod["volumes"] = [{"name": "git", "emptyDir": {}}]
    if options.backup_volume_claims:
        # Volume backup targets (docs/backup.md): each claim at <backup_volumes_dir>/<claim>.
        mounts = reconciler.setdefault("volumeMounts", [])
        volumes = pod.setdefault("volumes", [])
        for i, claim in enumerate(options.backup_volume_claims):
            mounts.append({"name": f"backup-{i}",
                           "mountPath": f"{defaults.backup_volumes_dir}/{claim}"})
            volumes.append({"name": f"backup-{i}",
                            "persistentVolumeClaim": {"claimName": claim}})
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _meta(NAME, options.namespace),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {"metadata": {"labels": dict(LABELS)}, "spec": pod},
        },
    }


def _service(options: Options) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _meta(f"{NAME}-metrics", options.namespace),
        "spec": {"selector": {"app.kubernetes.io/name": NAME},
                 "ports": [{"name": "http-metrics", "port": Settings().http_host_port[1],
                            "targetPort": "http-metrics", "protocol": "TCP"}]},
    }


def bundle(options: Options) -> list[Document]:
    """Every object of the bundle, in apply order. Raises ValueError on invalid options."""
    problems = options.problems()
    if problems:
        raise ValueError("; ".join(problems))
    ns = options.namespace
    return [
        Document("The KaiwuCluster schema (crd/kaiwuclusters.yaml), cluster-scoped: installed "
                 "by a cluster administrator.", _crd()),
        *[Document(f"The {crd['spec']['names']['kind']} schema ({crd['metadata']['name']}): "
                   "backups (docs/backup.md).", crd) for crd in _backup_crds()],
        Document("The reconciler's own namespace.", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns)}),
        Document("The reconciler's identity: every right below is granted to it.", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, ns)}),
        *_rbac(options),
        Document(f"For Prometheus: scrape {NAME}-metrics.{ns}:8090/metrics (both replicas "
                 "report; kaiwu_leader tells which one leads).", _service(options)),
        Document("Two replicas: one leads (holds the Lease) and writes, the other takes over "
                 "within seconds. Settings are KAIWU_* variables (kaiwu reconcile --help).",
                 _deployment(options)),
    ]


def render(options: Options) -> str:
    """The bundle as one YAML stream, deterministic: the same options give the same bytes."""
    head = (f"# kaiwu-operator {version()}: the reconciler's install bundle, made by\n"
            f"#   {options.command()}\n"
            "# Apply it with `kubectl apply -f`. Do not edit: change reconciler/install.py.\n")
    parts = [head]
    for doc in bundle(options):
        comment = "".join(f"# {line}\n" for line in _wrap(doc.comment)) if doc.comment else ""
        parts.append(f"---\n{comment}{to_yaml(doc.obj)}")
    return "".join(parts)


def _wrap(text: str, width: int = 96) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr (exit 2), not usage and a traceback."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INVALID, f"kaiwu install: {message} (see kaiwu install --help)\n")


def parser() -> argparse.ArgumentParser:
    result = _Parser(prog="kaiwu install", description=(
        "Print the reconciler's install bundle (CRD, Namespace, ServiceAccount, RBAC, metrics "
        "Service, Deployment) as YAML: kaiwu install | kubectl apply -f -"))
    result.add_argument("--image", default="", help=f"the reconciler's image (default: "
                        f"{NAME}:{version()})")
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
    result.add_argument("--backup-volume-claim", action="append", default=[], metavar="NAME",
                        help="a ReadWriteMany claim in --namespace to mount for KaiwuBackups "
                        "with a volume target (repeatable; docs/backup.md)")
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
                      git_repo=args.git_repo,
                      backup_volume_claims=tuple(args.backup_volume_claim))
    problems = options.problems()
    if problems:
        print(f"kaiwu install: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(render(options))
    return EXIT_OK
