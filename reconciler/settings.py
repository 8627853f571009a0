"""The reconciler's one settings object: every knob, its default, its flag and its variable.

Built by `reconciler.cli` from command-line flags and `KAIWU_*` environment variables (a flag
wins over a variable, a variable over the default), and handed to every part of the runtime and
to the Controller. Each field `name` has the flag `--name-with-dashes` and the variable
`KAIWU_NAME`; its help text below is also what `kaiwu reconcile --help` prints. Durations are
seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "KAIWU_"
# The label that assigns a KaiwuCluster to a shard (as Flux's sharding.fluxcd.io/key does).
SHARD_LABEL = "kaiwu.inspur.com/shard"
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# Where a pod finds the namespace it runs in (the service account's projected files).
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LOG_FORMATS = ("json", "text")
LOG_LEVELS = ("debug", "info", "warning", "error")


class SettingsError(ValueError):
    """A flag or variable with a value the reconciler cannot run with; says which and why."""


def _default_identity() -> str:
    # Pod name (the hostname in a pod) plus pid: unique per replica and per restart.
    return f"{socket.gethostname()}_{os.getpid()}"


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class Settings:
    """How the reconciler runs. The defaults suit a production Deployment of two replicas."""

    # ---- connection -------------------------------------------------------------------------
    kubeconfig: str | None = field(default=None, metadata=_help(
        "kubeconfig file; unset: the pod's service account (in-cluster), else ~/.kube/config"))
    context: str | None = field(default=None, metadata=_help(
        "kubeconfig context to use (default: the file's current context)"))
    watch_namespace: str = field(default="", metadata=_help(
        "only reconcile KaiwuClusters in this namespace (default: all namespaces)"))
    shard: str = field(default="", metadata=_help(
        "reconcile only the KaiwuClusters labelled kaiwu.inspur.com/shard=SHARD, with a Lease "
        "of its own (LEASE_NAME-SHARD); empty (the default): only the clusters without that "
        "label. Run one reconciler per shard to split a fleet"))
    shard_handover_s: float = field(default=2.0, metadata=_help(
        "a cluster that comes to this shard from another (its label changed) is first "
        "reconciled this long after it arrived, so the shard it left, which stops at the "
        "same watch event, has stopped before this one starts"))
    field_manager: str = field(default="kaiwu-reconciler", metadata=_help(
        "server-side apply field manager: every field the reconciler writes is owned by it"))

    # ---- work queue and workers -------------------------------------------------------------
    workers: int = field(default=2, metadata=_help(
        "clusters reconciled in parallel (one cluster is never reconciled by two at once)"))
    resync_period_s: float = field(default=300.0, metadata=_help(
        "safety net: every cluster is queued again this often even if no event arrived"))
    cluster_burst: int = field(default=3, metadata=_help(
        "per-cluster token bucket: reconciles a quiet cluster may start at once (the first "
        "event after quiet is served immediately); events while a reconcile waits or runs "
        "are merged into the next one"))
    cluster_rate_per_s: float = field(default=1.0, metadata=_help(
        "per-cluster token bucket: refill rate, the sustained reconciles per second of one "
        "cluster under an event storm"))
    overall_burst: int = field(default=200, metadata=_help(
        "overall token bucket shared by every cluster: reconciles started at once (a resync, "
        "a Node event touching many clusters)"))
    overall_rate_per_s: float = field(default=50.0, metadata=_help(
        "overall token bucket: refill rate, the sustained reconciles per second of the "
        "whole process"))
    free_echoes: bool = field(default=True, metadata=_help(
        "the watch event of the reconciler's own write (same resourceVersion) queues the "
        "cluster without spending its token, so it never delays the next repair; at most one "
        "such free reconcile per paid one"))
    min_reconcile_interval_s: float = field(default=0.0, metadata=_help(
        "the old fixed-interval limiter, kept for comparison: when above 0, a cluster is "
        "reconciled at most once per interval, its own writes' echoes included, instead of "
        "the token buckets (0: off)"))
    error_backoff_base_s: float = field(default=1.0, metadata=_help(
        "first retry delay after a reconcile failed; doubles with each further failure"))
    error_backoff_max_s: float = field(default=300.0, metadata=_help(
        "longest retry delay after repeated failures"))
    shutdown_grace_s: float = field(default=20.0, metadata=_help(
        "on shutdown or lost leadership, how long to wait for reconciles in progress"))

    # ---- watch caches -----------------------------------------------------------------------
    watch_timeout_s: int = field(default=300, metadata=_help(
        "the API server ends each watch after this long; the cache resumes where it was"))
    reconnect_backoff_base_s: float = field(default=0.5, metadata=_help(
        "first delay before reconnecting a watch after the API server went away; doubles"))
    reconnect_backoff_max_s: float = field(default=30.0, metadata=_help(
        "longest delay between reconnect attempts"))
    api_timeout_s: float = field(default=30.0, metadata=_help(
        "timeout of one API request (connect and read; watches read longer)"))

    # ---- health and metrics -----------------------------------------------------------------
    http_address: str = field(default="0.0.0.0:8090", metadata=_help(
        "HOST:PORT serving /metrics, /healthz and /readyz (port 0: any free port)"))

    # ---- admission webhook (reconciler.runtime.webhook) --------------------------------------
    webhook: bool = field(default=False, metadata=_help(
        "serve the validating admission webhook for KaiwuClusters on every replica and register "
        "it (the leader keeps its ValidatingWebhookConfiguration and certificate). Off by "
        "default: the API server must reach this process, through the install bundle's Service "
        "(which turns it on) or --webhook-url. Turned off in the bundle's Deployment, delete "
        "the bundle's ValidatingWebhookConfiguration too, or its default failurePolicy Fail "
        "refuses every KaiwuCluster write"))
    webhook_address: str = field(default="0.0.0.0:9443", metadata=_help(
        "HOST:PORT serving the webhook over HTTPS (port 0: any free port)"))
    webhook_service: str = field(default="kaiwu-reconciler-webhook", metadata=_help(
        "the Service, in the reconciler's own namespace, the API server calls the webhook "
        "through (port 443)"))
    webhook_url: str = field(default="", metadata=_help(
        "register this https:// URL instead of the Service (a reconciler outside the "
        "cluster); its host must be one the certificate covers (--webhook-hosts)"))
    webhook_hosts: str = field(default="", metadata=_help(
        "more DNS names or IP addresses for the webhook's serving certificate, comma-separated "
        "(the Service's names are always in it)"))
    webhook_configuration: str = field(default="", metadata=_help(
        "name of the ValidatingWebhookConfiguration (default kaiwu-reconciler-<namespace>)"))
    webhook_failure_policy: str = field(default="Fail", metadata=_help(
        "'Fail': while no replica answers, KaiwuCluster creates and updates are refused; "
        "'Ignore': they are let through unchecked (the reconciler still refuses an invalid "
        "spec: Stalled)"))
    webhook_timeout_s: int = field(default=5, metadata=_help(
        "how long the API server waits for an answer (1-30); an answer takes milliseconds"))
    webhook_cert_source: str = field(default="reconciler", metadata=_help(
        "'reconciler': the serving certificate and its CA are made, stored in --webhook-secret "
        "and rotated by the reconciler; 'secret': --webhook-secret is issued by someone else "
        "(cert-manager: tls.crt, tls.key, ca.crt) and only read"))
    webhook_secret: str = field(default="kaiwu-reconciler-webhook-tls", metadata=_help(
        "the Secret, in the reconciler's own namespace, holding the serving certificate"))
    webhook_ca_validity_s: float = field(default=5 * 365 * 86400.0, metadata=_help(
        "lifetime of the webhook's own CA; a next CA is made with a third of it left"))
    webhook_cert_validity_s: float = field(default=365 * 86400.0, metadata=_help(
        "lifetime of the serving certificate; reissued with a third of it left (at most a "
        "third of the CA's lifetime)"))
    webhook_ca_overlap_s: float = field(default=300.0, metadata=_help(
        "during a CA rotation, old and new CA are both trusted (in the caBundle) this long "
        "before and after the switch (at least twice --webhook-reload-s)"))
    webhook_reload_s: float = field(default=30.0, metadata=_help(
        "every replica reads the certificate Secret again this often (the leader also renews "
        "and registers)"))

    # ---- leader election --------------------------------------------------------------------
    leader_election: bool = field(default=True, metadata=_help(
        "elect a leader on a coordination.k8s.io Lease so only one replica writes; turn off "
        "only when a single replica runs"))
    lease_name: str = field(default="kaiwu-reconciler", metadata=_help(
        "name of the leader-election Lease"))
    lease_namespace: str = field(default="", metadata=_help(
        "namespace of the Lease (default: the pod's own namespace, else 'default')"))
    lease_duration_s: float = field(default=15.0, metadata=_help(
        "a standby takes over a Lease not renewed for this long"))
    renew_deadline_s: float = field(default=10.0, metadata=_help(
        "a leader that could not renew for this long stops writing (< lease duration)"))
    retry_period_s: float = field(default=2.0, metadata=_help(
        "how often the leader renews and a standby tries to acquire (< renew deadline)"))
    identity: str = field(default_factory=_default_identity, metadata=_help(
        "this replica's name in the Lease (default: hostname_pid)"))

    # ---- where KaiwuClusters come from ------------------------------------------------------
    source: str = field(default="cluster", metadata=_help(
        "'cluster': reconcile the KaiwuClusters in the API; 'dir:PATH': also apply the "
        "KaiwuCluster files under PATH (a git checkout, e.g. kept by git-sync)"))
    prune_deleted_clusters: bool = field(default=False, metadata=_help(
        "directory mode: delete KaiwuClusters whose file was removed from the directory "
        "(their data volumes stay). Off: they are reported and kept"))
    source_debounce_s: float = field(default=0.5, metadata=_help(
        "directory mode: wait for this much quiet after a file change before reading"))
    source_namespaces: str = field(default="", metadata=_help(
        "directory mode: the namespaces it may create, change and prune KaiwuClusters in, "
        "comma-separated; '*' for every namespace the reconciler may write to (default: "
        "--watch-namespace if set, else the reconciler's own namespace)"))

    # ---- the Controller's repair policy -----------------------------------------------------
    drift_backoff_base_s: float = field(default=1.0, metadata=_help(
        "first back-off after repairing an object that someone keeps changing back"))
    drift_backoff_max_s: float = field(default=300.0, metadata=_help(
        "longest back-off between repairs of a fought-over object"))
    fight_threshold: int = field(default=5, metadata=_help(
        "repairs of one object within the fight window before it counts as a fight"))
    fight_window_s: float = field(default=60.0, metadata=_help(
        "the window fight_threshold counts repairs in"))
    exec_timeout_s: float = field(default=60.0, metadata=_help(
        "timeout of one command run in a KaiwuDB container (kwbase node status, ...)"))
    long_statement_timeout_s: float = field(default=10800.0, metadata=_help(
        "how long the exec of one EXPORT or IMPORT is held open for its answer (3 h: below "
        "the kubelet's default --streaming-connection-idle-timeout, 4 h, which ends a silent "
        "exec); a longer statement runs on and is followed through KaiwuDB's job row "
        "(docs/backup.md)"))
    lifecycle_poll_s: float = field(default=1.0, metadata=_help(
        "while KaiwuDB is busy (init pending, nodes joining, a decommission draining), a "
        "cluster is looked at again this soon; each look costs one exec"))
    volume_retry_s: float = field(default=60.0, metadata=_help(
        "a claim whose growth the API server refused (its StorageClass does not allow volume "
        "expansion) is asked again this often"))
    node_probe_every_s: float = field(default=300.0, metadata=_help(
        "longest time between two `kwbase node status` probes of a steady cluster"))
    long_gone_after_s: float = field(default=3600.0, metadata=_help(
        "a KaiwuDB node not live, not available, whose address KaiwuDB forgot and whose "
        "liveness record is this old is decommissioned (KWDB gossips a running node's "
        "descriptor every hour: gossip.NodeDescriptorInterval); lower it only in tests"))

    # ---- backups (docs/backup.md) -------------------------------------------------------------
    backup_volumes_dir: str = field(default="/backup-volumes", metadata=_help(
        "where the ReadWriteMany claims of volume backup targets are mounted, one directory "
        "per claim name (kaiwu install --backup-volume-claim NAME)"))
    backup_poll_s: float = field(default=1.0, metadata=_help(
        "while a backup runs, its cluster is looked at again this soon (one table or file "
        "set per pass)"))
    backup_running_poll_s: float = field(default=5.0, metadata=_help(
        "while an EXPORT or IMPORT runs, its cluster is looked at again this soon (a look "
        "after a reconciler restart costs two execs)"))
    restore_http_address: str = field(default="0.0.0.0:8091", metadata=_help(
        "where the leader serves a backup being restored over http for KaiwuDB's IMPORT "
        "(started on first use; docs/backup.md)"))
    restore_advertise_host: str = field(default="", metadata=_help(
        "the address KaiwuDB pods reach that server at: the reconciler pod's IP (kaiwu "
        "install sets it from the downward API); empty: this host's name resolved"))
    backup_remove_node_files: bool = field(default=True, metadata=_help(
        "remove each exported file set from the node's external-I/O directory once it is "
        "verified in the target"))

    # ---- logs -------------------------------------------------------------------------------
    log_format: str = field(default="json", metadata=_help(
        "'json': one JSON object per line (for log collectors); 'text': for people"))
    log_level: str = field(default="info", metadata=_help("debug, info, warning or error"))

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise SettingsError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every value the reconciler cannot run with, as 'flag: what is wrong'."""
        found: list[str] = []

        def check(ok: bool, name: str, message: str) -> None:
            if not ok:
                found.append(f"--{flag_name(name)}: {message}")

        check(self.workers >= 1, "workers", "must be at least 1")
        for name in ("resync_period_s", "lease_duration_s", "renew_deadline_s",
                     "retry_period_s", "reconnect_backoff_base_s", "error_backoff_base_s",
                     "api_timeout_s", "exec_timeout_s", "long_statement_timeout_s",
                     "fight_window_s", "backup_poll_s", "backup_running_poll_s",
                     "lifecycle_poll_s", "volume_retry_s", "node_probe_every_s",
                     "long_gone_after_s", "drift_backoff_base_s"):
            check(getattr(self, name) > 0, name, "must be greater than 0")
        for name in ("min_reconcile_interval_s", "shutdown_grace_s", "source_debounce_s"):
            check(getattr(self, name) >= 0, name, "must not be negative")
        for name in ("cluster_rate_per_s", "overall_rate_per_s"):
            check(getattr(self, name) > 0, name, "must be greater than 0")
        for name in ("cluster_burst", "overall_burst"):
            check(getattr(self, name) >= 1, name, "must be at least 1")
        check(self.watch_timeout_s >= 1, "watch_timeout_s", "must be at least 1")
        check(self.fight_threshold >= 1, "fight_threshold", "must be at least 1")
        check(self.error_backoff_max_s >= self.error_backoff_base_s, "error_backoff_max_s",
              "must not be below --error-backoff-base-s")
        check(self.reconnect_backoff_max_s >= self.reconnect_backoff_base_s,
              "reconnect_backoff_max_s", "must not be below --reconnect-backoff-base-s")
        check(self.drift_backoff_max_s >= self.drift_backoff_base_s, "drift_backoff_max_s",
              "must not be below --drift-backoff-base-s")
        # The leader must give up before a standby may take over, and retry within the deadline
        # (client-go's rule), or two replicas could write at once.
        check(self.renew_deadline_s < self.lease_duration_s, "renew_deadline_s",
              "must be shorter than --lease-duration-s")
        check(self.retry_period_s < self.renew_deadline_s, "retry_period_s",
              "must be shorter than --renew-deadline-s")
        check(bool(self.identity), "identity", "must not be empty")
        check(bool(self.lease_name), "lease_name", "must not be empty")
        check(bool(_LABEL_VALUE.match(self.shard)), "shard",
              f"{self.shard!r} is not a label value (letters, digits, '-', '_', '.', at most "
              "63, starting and ending with a letter or digit)")
        check(not self.shard or self.source == "cluster", "shard",
              "directory mode applies every file it finds: run it unsharded")
        check(self.shard_handover_s >= 0, "shard_handover_s", "must not be negative")
        check(bool(self.field_manager), "field_manager", "must not be empty")
        check(self.source == "cluster" or (self.source.startswith("dir:")
                                           and len(self.source) > len("dir:")),
              "source", f"{self.source!r} is neither 'cluster' nor 'dir:PATH'")
        check(self.log_format in LOG_FORMATS, "log_format", f"one of {', '.join(LOG_FORMATS)}")
        check(self.log_level in LOG_LEVELS, "log_level", f"one of {', '.join(LOG_LEVELS)}")
        check(self.webhook_failure_policy in ("Fail", "Ignore"), "webhook_failure_policy",
              "one of Fail, Ignore")
        check(1 <= self.webhook_timeout_s <= 30, "webhook_timeout_s",
              "must be 1 to 30 (the API server's limit)")
        check(self.webhook_cert_source in ("reconciler", "secret"), "webhook_cert_source",
              "one of reconciler, secret")
        check(not self.webhook_url or self.webhook_url.startswith("https://"), "webhook_url",
              "must start with https://")
        for name in ("webhook_ca_validity_s", "webhook_cert_validity_s", "webhook_ca_overlap_s",
                     "webhook_reload_s"):
            check(getattr(self, name) > 0, name, "must be greater than 0")
        check(self.webhook_cert_validity_s <= self.webhook_ca_validity_s / 3,
              "webhook_cert_validity_s", "must be at most a third of --webhook-ca-validity-s")
        check(self.webhook_ca_overlap_s >= 2 * self.webhook_reload_s, "webhook_ca_overlap_s",
              "must be at least twice --webhook-reload-s (every replica reloads in between)")
        check(self.webhook_ca_validity_s / 3 > 2 * (self.webhook_ca_overlap_s
                                                    + self.webhook_reload_s),
              "webhook_ca_validity_s",
              "must leave a third of it for a rotation: above 6 x (--webhook-ca-overlap-s + "
              "--webhook-reload-s)")
        for name in ("http_address", "webhook_address"):
            address = getattr(self, name)
            _host, sep, port = address.rpartition(":")
            check(bool(sep) and port.isdigit() and int(port) < 65536, name,
                  f"{address!r} is not HOST:PORT")
        return found

    @property
    def source_dir(self) -> Path | None:
        """The directory of directory mode, or None when reconciling what is in the API."""
        return Path(self.source[len("dir:"):]) if self.source.startswith("dir:") else None

    def source_namespaces_list(self) -> list[str]:
        """The namespaces directory mode writes KaiwuClusters in ("*": any): as set, else the
        watched namespace, else the reconciler's own (else 'default')."""
        wanted = [n.strip() for n in self.source_namespaces.split(",") if n.strip()]
        return wanted or [self.watch_namespace or pod_namespace() or "default"]

    def source_namespace_allowed(self, namespace: str) -> bool:
        """Whether directory mode may write a KaiwuCluster in `namespace` (never outside the
        watched namespace, when one is set)."""
        if self.watch_namespace and namespace != self.watch_namespace:
            return False
        lane = self.source_namespaces_list()
        return "*" in lane or namespace in lane

    def described_source_namespaces(self) -> str:
        """Where directory mode writes, for people."""
        lane = self.source_namespaces_list()
        if self.watch_namespace and "*" in lane:
            lane = [self.watch_namespace]
        return "every namespace" if "*" in lane else f"--source-namespaces {', '.join(lane)}"

    @property
    def http_host_port(self) -> tuple[str, int]:
        host, _, port = self.http_address.rpartition(":")
        return host or "0.0.0.0", int(port)

    @property
    def shard_selector(self) -> str:
        """The label selector of this shard's KaiwuClusters."""
        return f"{SHARD_LABEL}={self.shard}" if self.shard else f"!{SHARD_LABEL}"

    def owns_labels(self, labels: Mapping[str, str] | None) -> bool:
        """Whether a KaiwuCluster with these labels is this shard's (the selector, in Python)."""
        value = (labels or {}).get(SHARD_LABEL)
        return value == self.shard if self.shard else value is None

    def effective_lease_name(self) -> str:
        """The Lease this replica competes for: one per shard."""
        return f"{self.lease_name}-{self.shard}" if self.shard else self.lease_name

    @property
    def webhook_host_port(self) -> tuple[str, int]:
        host, _, port = self.webhook_address.rpartition(":")
        return host or "0.0.0.0", int(port)

    def effective_webhook_configuration(self) -> str:
        """The ValidatingWebhookConfiguration's name: as set, else one per install namespace."""
        return self.webhook_configuration or f"kaiwu-reconciler-{self.effective_lease_namespace()}"

    def effective_lease_namespace(self) -> str:
        """The Lease's namespace: as set, else the pod's own namespace, else 'default'."""
        if self.lease_namespace:
            return self.lease_namespace
        return pod_namespace() or "default"

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def pod_namespace() -> str:
    """The namespace this process runs in when it is a pod ('' outside a cluster)."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return POD_NAMESPACE_FILE.read_text().strip()
    except OSError:
        return ""


def flag_name(field_name: str) -> str:
    return field_name.replace("_", "-")


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _field_type(f: dataclasses.Field[Any]) -> type:
    # Annotations are strings (postponed evaluation); the settings use only these four types.
    text = str(f.type)
    if text.startswith("bool"):
        return bool
    if text.startswith("int"):
        return int
    if text.startswith("float"):
        return float
    return str


def _convert(name: str, raw: str, kind: type, where: str) -> Any:
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise SettingsError(f"{where}: {raw!r} is not a boolean (true or false)")
    try:
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{where}: {raw!r} is not {'an' if kind is int else 'a'} "
                            f"{kind.__name__}") from None


def parser(prog: str = "kaiwu reconcile") -> argparse.ArgumentParser:
    """The command-line parser: one flag per setting, every default None (= not given)."""
    result = argparse.ArgumentParser(
        prog=prog, description="Run the KaiwuCluster reconciler. Every flag can also be set "
        f"with an environment variable {ENV_PREFIX}<FLAG> (dashes as underscores, upper case); "
        "a flag wins over a variable.")
    for f in dataclasses.fields(Settings):
        kind = _field_type(f)
        default = f.default if f.default is not dataclasses.MISSING else None
        shown = f"; default {default}" if default not in (None, "") else ""
        help_text = f"{f.metadata.get('help', '')} [{env_name(f.name)}{shown}]"
        if kind is bool:
            result.add_argument(f"--{flag_name(f.name)}", dest=f.name, default=None,
                                action=argparse.BooleanOptionalAction, help=help_text)
        else:
            result.add_argument(f"--{flag_name(f.name)}", dest=f.name, default=None,
                                type=str, metavar=f.name.upper(), help=help_text)
    return result


def from_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags, then KAIWU_* variables, then defaults. Raises SettingsError."""
    env = os.environ if environ is None else environ
    args = parser().parse_args(list(argv))
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        kind = _field_type(f)
        given = getattr(args, f.name)
        if given is not None:
            values[f.name] = given if kind is bool else _convert(
                f.name, given, kind, f"--{flag_name(f.name)}")
        elif env.get(env_name(f.name), "") != "":
            values[f.name] = _convert(f.name, env[env_name(f.name)], kind, env_name(f.name))
    return Settings(**values)
