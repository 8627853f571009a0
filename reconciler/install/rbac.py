"""The reconciler's rights in the install bundle: its ClusterRole or Role per scope, their
bindings, the leader-election Lease's Role and the webhook certificate's, each rule with why.

Called by reconciler.install.documents (the bundle's RBAC documents); tests read
namespaced_rules to check every verb the reconciler uses is granted.
"""

from __future__ import annotations

from reconciler.install.options import NAME, Document, Obj, Options, object_meta
from reconciler.settings import Settings
from renderer.schema import BACKUP_PLURAL, GROUP, PLURAL, SCHEDULE_PLURAL


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
    # (reconciler/kaiwudb/backup/restore.py); nothing else is patched outside directory mode.
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


def _binding(kind: str, name: str, namespace: str | None, role_kind: str, role: str,
             sa_namespace: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": object_meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": sa_namespace}],
    }


def rbac_documents(options: Options) -> list[Document]:
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
            "apiVersion": rbac, "kind": "ClusterRole", "metadata": object_meta(cluster_name),
            "rules": rules}))
    else:
        docs.append(Document(
            "Namespaced install: the only cluster-wide rights left: read-only (Nodes for "
            "failover, PersistentVolumes for a local volume's node) and the reconciler's own "
            "webhook registration.", {
                "apiVersion": rbac, "kind": "ClusterRole", "metadata": object_meta(cluster_name),
                "rules": cluster_read_rules() + webhook_rules(options)}))
    docs.append(Document("", _binding("ClusterRoleBinding", cluster_name, None, "ClusterRole",
                                      cluster_name, ns)))
    if options.scope == "namespaced":
        watched = options.watch_namespace
        docs.append(Document(f"What the reconciler does in the one namespace it watches, "
                             f"{watched}.", {
                                 "apiVersion": rbac, "kind": "Role",
                                 "metadata": object_meta(NAME, watched),
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
            "metadata": object_meta(lease, ns, options.component),
            "rules": [_rule("coordination.k8s.io", ["leases"], ["create"]),
                      _rule("coordination.k8s.io", ["leases"], ["get", "patch"],
                            names=[options.lease_name])]}))
    docs.append(Document("", _binding("RoleBinding", lease, ns, "Role", lease, ns)
                         | {"metadata": object_meta(lease, ns, options.component)}))
    webhook = f"{NAME}-webhook"
    docs.append(Document(
        "The webhook's serving certificate: one Secret in the reconciler's own namespace, made "
        "and rotated by the leader, read by every replica.", {
            "apiVersion": rbac, "kind": "Role", "metadata": object_meta(webhook, ns),
            "rules": [_rule("", ["secrets"], ["create"]),
                      _rule("", ["secrets"], ["get", "update"],
                            names=[Settings().webhook_secret])]}))
    docs.append(Document("", _binding("RoleBinding", webhook, ns, "Role", webhook, ns)))
    return docs

