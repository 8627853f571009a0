"""`kaiwu install` and `kaiwu uninstall`: the reconciler's install bundle, one YAML stream for one
`kubectl apply`, and the list of what removing it deletes.

Called by `reconciler.cli.main` for `kaiwu install ...` and `kaiwu uninstall ...` (main,
uninstall_main); tests, reconciler.kustomize and the test world call `bundle` and `render`.
This package's entry point names what callers use; each part is one concern:
reconciler.install.command (the two command lines), reconciler.install.options (what was asked
for, checked), reconciler.install.rbac (the rights), reconciler.install.workload (the Deployment
and what runs beside it), reconciler.install.documents (in apply order, with comments, as YAML)
and reconciler.install.removal (what `kaiwu uninstall` deletes).

The bundle holds the KaiwuCluster CRD (and the backup CRDs), the Namespace, the ServiceAccount,
the RBAC, the metrics and webhook Services, the admission webhook's registration, the
NetworkPolicy, the PodDisruptionBudget and the Deployment, in that order (kubectl applies in
file order: the CRDs first); `--crds-only` and `--skip-crds` split it in two, for teams that
manage CRDs apart. The registration (a ValidatingWebhookConfiguration) ships without what only
the reconciler knows: its leader puts in the caBundle of the certificate it serves, the
failurePolicy and the time-out (reconciler.runtime.webhook), so applying the bundle again never
undoes them, and the reconciler needs no right to create one.

This package is the one source of truth for the deploy manifests: deploy/install.yaml is its
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
kaiwu-reconciler-NAME (docs/sharding.md, "Sharding").
"""

from __future__ import annotations

from reconciler.install.command import main, uninstall_main
from reconciler.install.documents import bundle, document_text, render, wrap
from reconciler.install.options import (
    DEFAULT_NAMESPACE,
    IMAGE_REPOSITORY,
    NAME,
    Document,
    Options,
    default_image,
    version,
)
from reconciler.install.removal import removal, render_removal

__all__ = ["DEFAULT_NAMESPACE", "IMAGE_REPOSITORY", "NAME", "Document", "Options", "bundle",
           "default_image", "document_text", "main", "removal", "render", "render_removal",
           "uninstall_main", "version", "wrap"]
