"""The renderer's pipeline: documents -> checked KaiwuClusters -> Kubernetes objects.

Called by the CLI (`kaiwu render`, `validate`, `diff`) on files, and by the reconciler on live
objects (`desired_objects`), so a spec means the same thing in CI and in the cluster. Every
problem of every file is collected before anything is returned: a caller either gets every
object or a `RenderError` listing every mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from renderer import schema, semantics
from renderer.builders import (
    DATA_VOLUME,
    disruption_budget,
    network_policy,
    service,
    service_account,
    service_monitor,
    statefulset,
)
from renderer.companions import COMPANION_KINDS, SourceObject, read_companion
from renderer.errors import Problem, RenderError
from renderer.loader import STDIN, Document, find_files, load_documents, load_stdin, to_plain
from renderer.settings import RenderSettings
from renderer.spec import Cluster

# Output order: what others depend on first, as `kubectl apply` and readers expect.
KIND_ORDER = ("ServiceAccount", "Service", "StatefulSet", "PodDisruptionBudget",
              "NetworkPolicy", "ServiceMonitor")


@dataclass(frozen=True)
class SourceCluster:
    """A KaiwuCluster read from a file: where it came from, its defaulted object, its meaning."""

    document: Document
    obj: dict[str, Any]
    cluster: Cluster


def check_object(obj: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[Any, str, str]]]:
    """Schema and semantic checks of one KaiwuCluster; returns (defaulted object, problems as
    (path, message, fix)). Semantic rules run only on schema-valid objects."""
    violations = schema.validate(obj)
    if violations:
        # Name mistakes are worth reporting alongside type errors: they need no defaults.
        names = semantics.check_metadata(obj.get("metadata") or {})
        return obj, [(v.path, v.message, v.fix) for v in violations] + [
            (v.path, v.message, v.fix) for v in names]
    defaulted = schema.apply_defaults(obj)
    return defaulted, [(v.path, v.message, v.fix) for v in semantics.check(defaulted)]


@dataclass(frozen=True)
class Sources:
    """What a tree of files holds: its KaiwuClusters, and the KaiwuBackups and
    KaiwuBackupSchedules kept beside them (renderer.companions)."""

    clusters: list[SourceCluster]
    companions: list[SourceObject]


def read_clusters(documents: Iterable[Document],
                  checked: Iterable[SourceCluster] = ()) -> list[SourceCluster]:
    """The KaiwuClusters of `read_sources` (its companions checked too)."""
    return read_sources(documents, checked).clusters


def read_sources(documents: Iterable[Document],
                 checked: Iterable[SourceCluster] = ()) -> Sources:
    """Check every document; raise one RenderError with every problem, or return them all.

    `checked`: clusters already read from documents sharing content with some of these (the
    other side of a `kaiwu diff`); such a document is not checked again (its cluster is the
    same SourceCluster content and the same Cluster object, which `kaiwu diff` then knows
    unchanged)."""
    problems: list[Problem] = []
    clusters: list[SourceCluster] = []
    companions: list[SourceObject] = []
    seen: dict[tuple[str, str], Document] = {}
    seen_companions: dict[tuple[str, str, str], Document] = {}
    known = {id(source.document.content): source for source in checked}
    for document in documents:
        same = known.get(id(document.content))
        content = to_plain(document.content) if same is None else None
        if isinstance(content, dict) and content.get("kind") in COMPANION_KINDS:
            companion, problem = read_companion(document, content)
            if companion is not None:
                key3 = (companion.kind, companion.namespace, companion.name)
                if key3 in seen_companions:
                    first = seen_companions[key3]
                    problem = [Problem(
                        document.file, document.line_of(["metadata", "name"]), "metadata.name",
                        f"{key3[0]} {key3[1]}/{key3[2]} is already defined in {first.file}:"
                        f"{first.line_of(['metadata', 'name'])}",
                        "rename one of them or move it to another namespace")]
                else:
                    seen_companions[key3] = document
                    companions.append(companion)
            problems.extend(problem)
            continue
        found, problem = ((SourceCluster(document, same.obj, same.cluster), []) if same
                          else _read_one(document, content))
        if problem:
            problems.extend(problem)
            continue
        assert found is not None
        key = (found.cluster.namespace, found.cluster.name)
        if key in seen:
            first = seen[key]
            problems.append(Problem(
                document.file, document.line_of(["metadata", "name"]), "metadata.name",
                f"cluster {key[0]}/{key[1]} is already defined in {first.file}:"
                f"{first.line_of(['metadata', 'name'])}",
                "rename one of them or move it to another namespace"))
            continue
        seen[key] = document
        clusters.append(found)
    problems.extend(_collisions(clusters))
    if problems:
        raise RenderError(problems)
    return Sources(clusters, companions)


def owned_names(cluster: Cluster) -> dict[tuple[str, str], str]:
    """Every object name a cluster takes in its namespace, (kind, name) -> what it is: the
    rendered objects (rendered_names: nothing is built), the pods and volume claims of the
    StatefulSet at its highest scale, and the Secrets and the ConfigMap the reconciler writes
    (reconciler/kaiwudb/certs/layout.py and upgrade.py name them the same way)."""
    names = {key: "a rendered object" for key in rendered_names(cluster)}
    for ordinal in range(cluster.replicas):
        pod = cluster.pod_name(ordinal)
        names[("Pod", pod)] = "a pod"
        names[("PersistentVolumeClaim", f"{DATA_VOLUME}-{pod}")] = "a volume claim"
    if not cluster.user_provided_certs:
        secrets = [f"{cluster.name}-ca", cluster.node_secret, cluster.client_secret]
        secrets += [cluster.user_client_secret(user) for user in cluster.client_users]
        names.update({("Secret", secret): "a certificate Secret" for secret in secrets})
    names[("ConfigMap", cluster.start_flags_config_map)] = "the start-flags ConfigMap"
    return names


def _collisions(clusters: list[SourceCluster]) -> Iterator[Problem]:
    """Two clusters of one namespace that would own the same object (clusters `orders` and
    `orders-public` both render a Service `orders-public`): each would overwrite the other's."""
    owners: dict[tuple[str, str, str], int] = {}
    reported: set[tuple[int, int]] = set()
    for index, source in enumerate(clusters):
        needs = owned_names(source.cluster)
        for (kind, name), what in sorted(needs.items()):
            key = (source.cluster.namespace, kind, name)
            owner = owners.setdefault(key, index)
            if owner == index or (owner, index) in reported:
                continue
            reported.add((owner, index))
            first, document = clusters[owner], source.document
            yield Problem(
                document.file, document.line_of(["metadata", "name"]), "metadata.name",
                f"cluster {source.cluster.name!r} and cluster {first.cluster.name!r} "
                f"({first.document.file}:{first.document.line_of(['metadata', 'name'])}) both "
                f"need {kind} {key[0]}/{name} ({what})",
                "rename one of them or move it to another namespace")


def _read_one(document: Document, content: Any) -> tuple[SourceCluster | None, list[Problem]]:
    """One document's KaiwuCluster; `content` is the document's to_plain copy."""
    def problem(path: tuple[Any, ...], message: str, fix: str) -> Problem:
        return Problem(document.file, document.line_of(list(path)), _dotted(path), message, fix)

    if not isinstance(content, dict):
        return None, [problem((), f"expected a KaiwuCluster mapping, got {type(content).__name__}",
                              "each YAML document must be one KaiwuCluster object")]
    kind, api_version = content.get("kind"), content.get("apiVersion")
    if kind != schema.KIND:
        return None, [problem(("kind",), f"unknown kind {kind!r}",
                              f"only kinds {schema.KIND}, {', '.join(COMPANION_KINDS)} "
                              f"(apiVersion {schema.API_VERSION}) belong in cluster files")]
    if api_version != schema.API_VERSION:
        return None, [problem(("apiVersion",), f"unknown apiVersion {api_version!r}",
                              f"use apiVersion: {schema.API_VERSION}")]
    if not isinstance(content.get("metadata"), dict):
        return None, [problem(("metadata",), "metadata is missing",
                              "add metadata with at least a name")]
    if "status" in content:
        return None, [problem(("status",), "status is written by the reconciler",
                              "remove the status block from the file")]
    defaulted, found = check_object(content)
    if found:
        return None, [problem(tuple(path), message, fix) for path, message, fix in found]
    return SourceCluster(document, defaulted, Cluster.from_object(defaulted)), []


def _dotted(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class Builder(NamedTuple):
    """One object a cluster may render: its kind, its name for a cluster (None when the spec
    turns the object off) and the builder, which names the object so. The names come from here
    alone: the check that no two clusters need one name reads them without building anything
    (`rendered_names`)."""

    kind: str
    name: Callable[[Cluster], str | None]
    build: Callable[[Cluster, RenderSettings, str], dict[str, Any]]


BUILDERS: tuple[Builder, ...] = (
    Builder("ServiceAccount", lambda cluster: cluster.name,
            lambda cluster, _, name: service_account.build(cluster, name)),
    Builder("Service", lambda cluster: cluster.headless_service,
            lambda cluster, _, name: service.build_headless(cluster, name)),
    Builder("Service", lambda cluster: cluster.client_service,
            lambda cluster, _, name: service.build_client(cluster, name)),
    Builder("StatefulSet", lambda cluster: cluster.name, statefulset.build),
    Builder("PodDisruptionBudget", lambda cluster: cluster.name if cluster.pdb_enabled else None,
            disruption_budget.build),
    Builder("NetworkPolicy", lambda cluster: cluster.name if cluster.network_policy else None,
            lambda cluster, _, name: network_policy.build(cluster, name)),
    Builder("ServiceMonitor", lambda cluster: cluster.name if cluster.service_monitor else None,
            service_monitor.build),
)


def rendered_names(cluster: Cluster) -> list[tuple[str, str]]:
    """(kind, name) of every object `build_objects` renders for the cluster, in BUILDERS' order,
    without building them."""
    return [(builder.kind, name) for builder in BUILDERS
            if (name := builder.name(cluster)) is not None]


def build_objects(cluster: Cluster, settings: RenderSettings) -> list[dict[str, Any]]:
    """Every object of one cluster, in output order (kind order, then name)."""
    objects = [builder.build(cluster, settings, name) for builder in BUILDERS
               if (name := builder.name(cluster)) is not None]
    return sorted(objects, key=lambda obj: (KIND_ORDER.index(obj["kind"]),
                                            obj["metadata"]["name"]))


def read_live(live: dict[str, Any]) -> Cluster:
    """A live KaiwuCluster read as the renderer reads a file (the reconciler's entry point: the
    spec is parsed once per pass; `build_objects` renders it).

    Raises RenderError naming the object (`namespace/name`) when the spec breaks a rule."""
    return Cluster.from_object(check_live(live))


def check_live(live: dict[str, Any]) -> dict[str, Any]:
    """A live KaiwuCluster checked as `read_live` checks it; returns the object with defaults
    applied (the admission webhook and the reconciler judge a change of spec on it)."""
    obj = {key: value for key, value in live.items() if key != "status"}
    defaulted, found = check_object(obj)
    if found:
        raise RenderError(live_problem(obj, path, message, fix) for path, message, fix in found)
    return defaulted


def live_problem(live: dict[str, Any], path: Iterable[Any], message: str, fix: str) -> Problem:
    """One problem of a live KaiwuCluster, named `KaiwuCluster namespace/name` (no file)."""
    meta = live.get("metadata") or {}
    where = f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    return Problem(f"KaiwuCluster {where}", 0, _dotted(path), message, fix)


def load_clusters(root: Path) -> list[SourceCluster]:
    """Every KaiwuCluster under `root` (a directory or one file; `-`, standard input),
    checked (and the backups and schedules beside them)."""
    return load_sources(root).clusters


def load_sources(root: Path) -> Sources:
    """Every KaiwuCluster, KaiwuBackup and KaiwuBackupSchedule under `root` (a directory or one
    file; `-`, standard input), checked."""
    if str(root) == STDIN:
        return read_sources(load_stdin())
    return read_sources(load_documents(find_files(root)))
