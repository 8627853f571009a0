"""Render settings: the few knobs that are not part of a KaiwuCluster spec.

Built by the CLI from flags (`--kube-version`, `--cluster-domain`) and by the reconciler from the
live API server's version. Defaults are documented on the fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_VERSION = re.compile(r"^v?(?P<major>[0-9]+)\.(?P<minor>[0-9]+)(\.[0-9]+)?([-+].*)?$")


@dataclass(frozen=True, order=True)
class KubeVersion:
    """A Kubernetes minor version: API choices depend only on major.minor."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> KubeVersion:
        match = _VERSION.match(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a Kubernetes version (examples: 1.20, v1.29.3)")
        return cls(int(match["major"]), int(match["minor"]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


# The oldest Kubernetes the manifests support: the test world's v1.20 (apps/v1, apiextensions/v1,
# topology spread constraints GA-ready, policy/v1beta1 PodDisruptionBudget).
OLDEST_SUPPORTED = KubeVersion(1, 20)

# x-kubernetes-validations is beta and on by default from 1.25 (alpha and gated in 1.23, 1.24).
CEL_SINCE = KubeVersion(1, 25)

DEFAULT_KUBE_VERSION = KubeVersion(1, 28)
"""What `kaiwu render`, `diff`, `validate`, `crd` and `install` target unless told: the oldest
release KaiwuDB's users run (1.28 to 1.36). Its manifests and CRD (policy/v1, the CEL rules of
1.25 to 1.28) are accepted by every release from 1.28 on; a later `--kube-version` adds the
rules of that release (a smaller volume refused from 1.29), an earlier one (down to 1.20) drops
what that release lacks. The reconciler itself renders for the API server it talks to."""


def supported_version(text: str) -> KubeVersion:
    """A `--kube-version` flag's value: a version this project renders for, or ValueError."""
    version = KubeVersion.parse(text)
    if version < OLDEST_SUPPORTED:
        raise ValueError(f"Kubernetes {version} is older than the oldest supported release, "
                         f"{OLDEST_SUPPORTED}")
    return version


@dataclass(frozen=True)
class LiveState:
    """What the reconciler decides for a running cluster that its spec cannot say, handed to the
    renderer so that rendering stays the only producer of desired objects. Rendering for CI and
    previews leaves it empty: the spec alone.

    replicas: the StatefulSet's replicas during a scale-in (one node at a time, each
        decommissioned first), instead of spec.replicas.
    partition: the rolling-update partition that gates a rollout on KaiwuDB's health (None:
        none rendered).
    certs_hash: the certificates' hash on the pod template, so a renewal rolls the pods.
    """

    replicas: int | None = None
    partition: int | None = None
    certs_hash: str | None = None


@dataclass(frozen=True)
class InputLimits:
    """How much a spec file may ask of the reader, checked while it is parsed (renderer.loader)
    so that no file, however hostile, makes `kaiwu validate/render/diff` or the reconciler's
    directory source run out of memory, time or stack. Each is generous for real specs: a
    KaiwuCluster is a few KB, nests about 8 levels and has about 200 nodes.
    """

    max_file_bytes: int = 4 * 1024 * 1024
    """Largest spec file read, 4 MiB: a thousand clusters in one file fit; Kubernetes refuses
    objects above about 1.5 MiB anyway (etcd's request limit), and annotations above 256 KiB."""

    max_documents: int = 10_000
    """Most YAML documents (`---`) in one file."""

    max_depth: int = 64
    """Deepest nesting of mappings and sequences (a KaiwuCluster's deepest is about 8); far below
    the depth at which Python's recursion limit would stop a reader of the parsed object."""

    max_aliases: int = 10_000
    """Most alias nodes (`*name`) in one file."""

    max_nodes: int = 250_000
    """Most nodes in one file counted with every alias expanded to the nodes it stands for (the
    size the parsed objects take once copied): what stops a "billion laughs" alias bomb. A
    thousand clusters of about 200 nodes each fit."""

    max_expanded_bytes: int = 8 * 1024 * 1024
    """Most bytes of content in one file with every alias expanded (each node 1, each scalar its
    text besides): node counts alone let an alias of one long scalar, repeated, turn a 100 KB
    file into tens of MB. Twice max_file_bytes: a file without aliases always fits."""


INPUT_LIMITS = InputLimits()


@dataclass(frozen=True)
class RenderSettings:
    """How to render. The defaults suit a current Kubernetes release with the usual DNS domain."""

    kube_version: KubeVersion = DEFAULT_KUBE_VERSION
    """Target Kubernetes version: picks API versions (policy/v1 from 1.21)."""

    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain: pods advertise <pod>.<headless service>.<ns>.svc.<domain>."""

    live: LiveState = field(default_factory=LiveState)
    """The reconciler's decisions for a running cluster (empty when rendering for CI)."""
