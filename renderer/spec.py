"""The meaning of a KaiwuCluster: frozen dataclasses built from a validated, defaulted object.

`renderer.render` builds a `Cluster` for every spec that passed schema and semantic checks and
hands it to the builders; the reconciler builds one from each live object. Only this module knows
the spec's field names, so a renamed field changes one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any


class StartMode(Enum):
    """kwbase start modes; the value is the spec spelling, `command` the kwbase subcommand."""

    MULTI_REPLICA = "multi-replica"
    SINGLE_REPLICA = "single-replica"
    SINGLE_NODE = "single-node"

    @property
    def command(self) -> str:
        return {"multi-replica": "start", "single-replica": "start-single-replica",
                "single-node": "start-single-node"}[self.value]


_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h)")
_DURATION_UNIT = {"ms": timedelta(milliseconds=1), "s": timedelta(seconds=1),
                  "m": timedelta(minutes=1), "h": timedelta(hours=1)}


def parse_duration(text: str) -> timedelta:
    """`1h30m`, `90s`, `500ms` -> timedelta (the form the CRD's pattern admits)."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m or 1h30m")
    try:
        return sum((int(number) * _DURATION_UNIT[unit] for number, unit in parts), timedelta())
    except OverflowError as error:  # the CRD's pattern admits 99999999999h
        raise ValueError(f"{text!r} is longer than a timedelta can hold") from error


# spec.tls.secretLayout: the keys of user-provided certificate Secrets.
KWBASE_LAYOUT = "kwbase"  # ca.crt, node.crt, node.key / client.root.crt, client.root.key
CERT_MANAGER_LAYOUT = "cert-manager"  # ca.crt, tls.crt, tls.key in both Secrets


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None = None
    secret_name: str | None = None
    secret_key: str | None = None


@dataclass(frozen=True)
class TopologySpread:
    topology_key: str
    max_skew: int
    when_unsatisfiable: str


@dataclass(frozen=True)
class DriftIgnore:
    """A user rule from spec.drift.ignore, as written (reconciler.drift.ignore makes it a
    matcher)."""

    pointer: str
    kind: str = ""
    name: str = ""


@dataclass(frozen=True)
class Failover:
    enabled: bool
    node_lost_timeout: timedelta
    pod_not_ready_timeout: timedelta
    replace_lost_volumes: bool
    max_crash_restarts: int


@dataclass(frozen=True)
class PodSecurity:
    """spec.podSecurity: the user, group and volume group the kwbase processes run with."""

    run_as_non_root: bool
    run_as_user: int
    run_as_group: int
    fs_group: int


@dataclass(frozen=True)
class Cluster:
    """Everything the builders and the reconciler need to know about one cluster."""

    name: str
    namespace: str
    version: str
    repository: str
    pull_policy: str
    pull_secrets: tuple[str, ...]
    start_mode: StartMode
    replicas: int
    requests: tuple[tuple[str, str], ...]
    limits: tuple[tuple[str, str], ...]
    storage_size: str
    storage_class: str | None
    tls: bool
    node_secret: str
    client_secret: str
    user_provided_certs: bool
    secret_layout: str
    client_users: tuple[str, ...]
    cache: str
    max_sql_memory: str
    grace_period_seconds: int
    anti_affinity: str
    topology_spread: tuple[TopologySpread, ...]
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[tuple[tuple[str, Any], ...], ...]
    priority_class: str | None
    service_type: str
    service_annotations: tuple[tuple[str, str], ...]
    extra_args: tuple[str, ...]
    extra_env: tuple[EnvVar, ...]
    labels: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    pdb_enabled: bool
    pdb_max_unavailable: int
    failover: Failover
    drift_policy: str
    drift_ignore: tuple[DriftIgnore, ...]
    pod_security: PodSecurity
    node_tuning: bool
    max_map_count: int
    network_policy: bool
    allowed_namespaces: tuple[str, ...]
    service_monitor: bool
    scrape_interval: str
    paused: bool
    # spec.bootstrap.fromBackup.name: the KaiwuBackup a new cluster is restored from
    # (reconciler/kaiwudb/backup/restore.py); nothing rendered depends on it.
    restore_from: str | None = None

    @property
    def image(self) -> str:
        return f"{self.repository}:{self.version}"

    @property
    def headless_service(self) -> str:
        return self.name

    @property
    def start_flags_config_map(self) -> str:
        """The ConfigMap the reconciler writes and every pod's start line reads
        (`--upgrade-complete`, reconciler/kaiwudb/upgrade.py)."""
        return f"{self.name}-start-flags"

    @property
    def client_service(self) -> str:
        return f"{self.name}-public"

    @property
    def node_secret_keys(self) -> tuple[str, str, str]:
        """The keys in the node Secret holding (ca.crt, node.crt, node.key): KWDB's names, or
        cert-manager's for a user's Secret in that layout. The StatefulSet builder maps them to
        KWDB's file names in the pods; reconciler.kaiwudb.certs.user_secrets checks them."""
        if self.user_provided_certs and self.secret_layout == CERT_MANAGER_LAYOUT:
            return ("ca.crt", "tls.crt", "tls.key")
        return ("ca.crt", "node.crt", "node.key")

    @property
    def client_secret_keys(self) -> tuple[str, str, str]:
        """The keys in the root client Secret holding (ca.crt, client.root.crt,
        client.root.key); see node_secret_keys."""
        if self.user_provided_certs and self.secret_layout == CERT_MANAGER_LAYOUT:
            return ("ca.crt", "tls.crt", "tls.key")
        return ("ca.crt", "client.root.crt", "client.root.key")

    def user_client_secret(self, user: str) -> str:
        """The Secret with a named SQL user's client certificate (spec.tls.clientUsers); `_`,
        which a Secret name may not hold and a user name in the CRD's pattern may, becomes `-`
        (user names hold no `-`, so two users never share a Secret)."""
        return f"{self.name}-client-{user.replace('_', '-')}-certs"

    def pod_name(self, ordinal: int) -> str:
        return f"{self.name}-{ordinal}"

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Cluster:
        """Build from a validated KaiwuCluster with defaults applied (see renderer.schema)."""
        meta, spec = obj["metadata"], obj["spec"]
        name = meta["name"]
        tls = spec["tls"]
        scheduling = spec["scheduling"]
        failover = spec["failover"]
        return cls(
            name=name,
            namespace=meta.get("namespace") or "default",
            version=spec["version"],
            repository=spec["image"]["repository"],
            pull_policy=spec["image"]["pullPolicy"],
            pull_secrets=tuple(spec["image"].get("pullSecrets", ())),
            start_mode=StartMode(spec["startMode"]),
            replicas=spec["replicas"],
            requests=_pairs(spec["resources"].get("requests")),
            limits=_pairs(spec["resources"].get("limits")),
            storage_size=str(spec["storage"]["size"]),
            storage_class=spec["storage"].get("storageClassName") or None,
            tls=tls["enabled"],
            node_secret=tls.get("nodeSecretName") or f"{name}-node-certs",
            client_secret=tls.get("clientSecretName") or f"{name}-root-client-certs",
            user_provided_certs=bool(tls.get("nodeSecretName")),
            secret_layout=tls.get("secretLayout") or KWBASE_LAYOUT,
            client_users=tuple(tls.get("clientUsers", ())),
            cache=spec["cache"],
            max_sql_memory=spec["maxSQLMemory"],
            grace_period_seconds=spec["terminationGracePeriodSeconds"],
            anti_affinity=scheduling["antiAffinity"],
            topology_spread=tuple(
                TopologySpread(item["topologyKey"], item["maxSkew"], item["whenUnsatisfiable"])
                for item in scheduling.get("topologySpread", ())),
            node_selector=_pairs(scheduling.get("nodeSelector")),
            tolerations=tuple(tuple(sorted(item.items()))
                              for item in scheduling.get("tolerations", ())),
            priority_class=scheduling.get("priorityClassName") or None,
            service_type=spec["service"]["type"],
            service_annotations=_pairs(spec["service"].get("annotations")),
            extra_args=tuple(spec.get("extraArgs", ())),
            extra_env=tuple(
                EnvVar(item["name"], item.get("value"),
                       item.get("secretKeyRef", {}).get("name"),
                       item.get("secretKeyRef", {}).get("key"))
                for item in spec.get("extraEnv", ())),
            labels=_pairs(spec.get("labels")),
            annotations=_pairs(spec.get("annotations")),
            pdb_enabled=spec["podDisruptionBudget"]["enabled"],
            pdb_max_unavailable=spec["podDisruptionBudget"]["maxUnavailable"],
            failover=Failover(
                enabled=failover["enabled"],
                node_lost_timeout=parse_duration(failover["nodeLostTimeout"]),
                pod_not_ready_timeout=parse_duration(failover["podNotReadyTimeout"]),
                replace_lost_volumes=failover["replaceLostVolumes"],
                max_crash_restarts=failover["maxCrashRestarts"],
            ),
            drift_policy=spec["drift"]["policy"],
            drift_ignore=tuple(DriftIgnore(item["pointer"], item.get("kind", ""),
                                          item.get("name", ""))
                               for item in spec["drift"].get("ignore", ())),
            pod_security=PodSecurity(
                run_as_non_root=spec["podSecurity"]["runAsNonRoot"],
                run_as_user=spec["podSecurity"]["runAsUser"],
                run_as_group=spec["podSecurity"]["runAsGroup"],
                fs_group=spec["podSecurity"]["fsGroup"],
            ),
            node_tuning=spec["nodeTuning"]["enabled"],
            max_map_count=spec["nodeTuning"]["maxMapCount"],
            network_policy=spec["networkPolicy"]["enabled"],
            allowed_namespaces=tuple(spec["networkPolicy"].get("allowedNamespaces", ())),
            service_monitor=spec["monitoring"]["serviceMonitor"],
            scrape_interval=spec["monitoring"]["interval"],
            paused=spec["paused"],
            restore_from=((spec.get("bootstrap") or {}).get("fromBackup") or {}).get("name"),
        )


def _pairs(mapping: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """A mapping as sorted (key, value) pairs: hashable, and ordered for deterministic output."""
    return tuple(sorted((str(key), str(value)) for key, value in (mapping or {}).items()))
