"""What `kaiwu install` and `kaiwu uninstall` are asked for, checked, and the names every object
of the install bundle shares (the reconciler's name, labels, image and namespace).

Called by the rest of reconciler.install: reconciler.install.rbac, reconciler.install.workload and
reconciler.install.documents build the bundle from an Options; reconciler.install.command makes
one from the flags and prints its problems.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass, fields
from typing import Any

from reconciler.settings import Settings
from renderer.settings import DEFAULT_KUBE_VERSION, KubeVersion

Obj = dict[str, Any]

NAME = "kaiwu-reconciler"
# The reconciler's image repository: the one place its name is set. `make image` tags
# <IMAGE_REPOSITORY>:<version> (tests/world/image.py), `make push IMAGE=REF` copies that tag to
# REF, and `kaiwu install` runs it unless --image names another. Nothing is published there yet
# (docs/install.md, "The image and your registry"): build it and push it to your registry.
IMAGE_REPOSITORY = "ghcr.io/kaiwu-operator/kaiwu-reconciler"
DEFAULT_NAMESPACE = "kaiwu-system"
SCOPES = ("cluster", "namespaced")
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "kaiwu-operator"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
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
        if not DNS_LABEL.match(self.namespace):
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
        if self.watch_namespace and not DNS_LABEL.match(self.watch_namespace):
            found.append(f"--watch-namespace: {self.watch_namespace!r} is not a namespace name")
        if self.directory_mode and not self.git_repo:
            found.append("--directory-mode: needs --git-repo URL (the repository git-sync "
                         "clones the KaiwuCluster files from)")
        if self.git_repo and not self.directory_mode:
            found.append("--git-repo: only with --directory-mode")
        if self.source_namespaces and not self.directory_mode:
            found.append("--source-namespace: only with --directory-mode")
        for source in self.source_namespaces:
            if source != "*" and not DNS_LABEL.match(source):
                found.append(f"--source-namespace: {source!r} is not a namespace name (or *)")
            elif self.watch_namespace and source not in (self.watch_namespace, "*"):
                found.append(f"--source-namespace: {source} is outside the watched namespace "
                             f"{self.watch_namespace}: the reconciler would refuse every file "
                             "for it")
        if self.shard and not DNS_LABEL.match(self.shard):
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


def object_meta(name: str, namespace: str | None = None, app: str = NAME) -> Obj:
    meta: Obj = {"name": name, "labels": {**LABELS, "app.kubernetes.io/name": app}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta
