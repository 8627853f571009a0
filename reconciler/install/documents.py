"""The install bundle as documents in apply order, each with the comment printed above it, and
as one YAML stream: the CRDs first, then the reconciler and what it runs with.

Called by reconciler.install.command (`kaiwu install` prints render's stream), reconciler.kustomize
(deploy/install.yaml and the kustomize base, from bundle and document_text) and
reconciler.install.removal (which objects `kaiwu uninstall` deletes).
"""

from __future__ import annotations

import copy

from reconciler.install.options import NAME, Document, Obj, Options, object_meta, version
from reconciler.install.rbac import rbac_documents
from reconciler.install.workload import (
    METRICS_ACCESS_LABEL,
    deployment,
    disruption_budget,
    metrics_service,
    namespace_object,
    network_policy,
    owns_namespace,
    webhook_configuration,
    webhook_service,
)
from reconciler.runtime.webhook import SKIP_LABEL, SKIP_VALUE
from reconciler.settings import SHARD_LABEL
from renderer.cel import crd_for
from renderer.emit import to_yaml
from renderer.schema import BACKUP_CRD_FILES, crd_manifest
from renderer.settings import CEL_SINCE, KubeVersion


def _crd(kube_version: KubeVersion) -> Obj:
    # The renderer's schema, unchanged, plus the CEL rules the target release runs (none on
    # 1.20): the API server must validate with the renderer's own rules.
    return crd_for(kube_version)


def _backup_crds() -> list[Obj]:
    return [copy.deepcopy(crd_manifest(path))
            for path in BACKUP_CRD_FILES]


def _namespace_note(options: Options) -> str:
    if not owns_namespace(options):
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
    rest = operator_documents(options)
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


def operator_documents(options: Options) -> list[Document]:
    """Everything but the CRDs: the reconciler and what it runs with."""
    ns = options.namespace
    return [
        Document(_namespace_note(options), namespace_object(options)),
        Document("The reconciler's identity: every right below is granted to it.", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(NAME, ns)}),
        *rbac_documents(options),
        Document(f"For Prometheus: scrape {options.component}-metrics.{ns}:8090/metrics (both "
                 "replicas report; kaiwu_leader tells which one leads).", metrics_service(options)),
        Document("The admission webhook: the API server sends KaiwuCluster creates and updates "
                 "here, to any ready replica.", webhook_service(options)),
        Document("Its registration, shipped here so the reconciler needs no right to create "
                 "one: the leader puts its CA in (caBundle) and its failurePolicy and "
                 "timeoutSeconds (settings), which this copy leaves out, so applying it again "
                 "never undoes them. Until then, KaiwuCluster writes are refused outside "
                 f"namespaces labelled {SKIP_LABEL}={SKIP_VALUE}: wait for the Deployment"
                 + (" of the unnamed shard, whose leader registers it for every shard (install "
                    "its bundle too)." if options.shard else "."),
                 webhook_configuration(options)),
        Document("Who may reach the reconciler: the webhook port from anywhere (the API "
                 "server), the restore file server from KaiwuDB pods, /metrics from namespaces "
                 f"labelled {METRICS_ACCESS_LABEL}=true (label your Prometheus's). Enforced "
                 "where the network plugin enforces NetworkPolicies.", network_policy(options)),
        Document("At most one replica evicted at a time (a drain waits until the other is "
                 "Ready): the other "
                 + ("keeps serving the admission webhook, whose failurePolicy Fail refuses "
                    "every KaiwuCluster write while no replica answers, and "
                    if not options.shard else "")
                 + "takes over the Lease. The Deployment prefers other nodes (and zones) for "
                 "the two: a one-node cluster still runs both.",
                 disruption_budget(options)),
        Document("Two replicas: one leads (holds the Lease) and writes, the other takes over "
                 "within seconds. Settings are KAIWU_* variables (kaiwu reconcile --help). "
                 + _shard_note(options), deployment(options)),
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
            "# Apply it with `kubectl apply -f`. Do not edit: change reconciler/install/.\n")
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
