"""`kaiwu uninstall`'s list: the reconciler's own objects of a bundle, in the order to delete
them, and what is kept (the CRDs, every KaiwuCluster and what it owns, the namespace).

Called by reconciler.install.command (`kaiwu uninstall` prints render_removal's text).
"""

from __future__ import annotations

import dataclasses

from reconciler.install.documents import operator_documents, wrap
from reconciler.install.options import Document, Options, version
from reconciler.settings import Settings
from renderer.emit import to_yaml
from renderer.settings import DEFAULT_KUBE_VERSION

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
    "pods (docs/install.md, \"Uninstalling\").")


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
    docs = [doc for doc in operator_documents(options) + made
            if doc.obj["kind"] != "Namespace"]
    if options.shard:
        shared = {_identity(doc) for doc in operator_documents(
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

