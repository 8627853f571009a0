"""The KaiwuDB admin adapter: the one place that knows the `kwbase` command line.

Called by the reconciler's lifecycle and failover actions (init, scale-in, upgrades, dead-node
clean-up) through `KwbaseAdmin`. Every command runs inside one of the cluster's pods through the
Kubernetes exec API (`reconciler.kube.client.Kube.exec`: an argv, never a shell), in the `kwbase`
container, as `/kaiwudb/bin/kwbase <command> --host=<node> --certs-dir=/kaiwudb/certs` (both the
node and the root client certificates are mounted there in secure mode) or `--insecure`.
Results are read in `--format=csv`, the format kwbase writes with its fork of Go's encoding/csv
(kwbase/pkg/cli/format_table.go `csvReporter`: a header line, one line per row, RFC 4180
quoting), which Python's csv module reads back exactly. Column names follow
kwbase/pkg/cli/node.go (see kaiwudb-facts.md "Cluster operations").

Failures become typed errors: `ExecFailed` (the command could not be run or gave no exit status:
pod gone, container not running, exec transport error, time-out), and `CommandFailed` (kwbase
ran and exited non-zero) with the subclasses `NodeUnreachable`, `NotInitialized`, `UnknownNode`
and `DecommissionRefused` for the answers the lifecycle code acts upon. Messages carry the
command line and the CLI's `ERROR:` text; neither ever holds secrets (certificates stay files
in the pod).
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Literal, Protocol, TypeVar

from renderer.spec import Cluster

log = logging.getLogger(__name__)
T = TypeVar("T")

BACKUP_RUN_MARK = "/kaiwu-backup-"
"""What every EXPORT of the reconciler's backups holds in its text: its destination's run
directory, kaiwu-backup-<uid> (reconciler.kaiwudb.backup_plan.Plan.run_dir)."""

RUNNING_JOB_TYPES_QUERY = (
    "SELECT job_type, count(*) AS running FROM [SHOW JOBS] WHERE status = 'running' "
    f"AND COALESCE(strpos(statement, '{BACKUP_RUN_MARK}'), 0) = 0 "
    "GROUP BY job_type ORDER BY job_type"
)
"""Running jobs by type. Never a plain count: every KWDB 3.2.1 server start makes sure a `TS TXN`
job runs (kwbase/pkg/server/server.go:2299, kwbase/pkg/sql/kwdb_descriptor.go:390-420) and it
never ends (kwbase/pkg/sql/handle_ts_txn.go:36-56); SHOW JOBS hides only automatic statistics
jobs (kwbase/pkg/sql/delegate/show_jobs.go:39-69). A gate on every running job never opens.
The reconciler's own backup EXPORTs are left out: scale-in and backups already wait for each
other (reconciler.kaiwudb.backup.running_backup), and an EXPORT whose node restarted midway keeps
its row running for ever (the row has no lease, so nothing adopts or ends it: sql/
conn_executor_exec.go:719-723, jobs/registry.go:1321-1326), which would hold every later
scale-in. `statement` is NULL only in a row whose payload cannot be read (sql/kwdb_internal.go:
557-578): such a row counts."""

DRAIN_CONFLICTING_JOB_TYPES = frozenset({
    "IMPORT", "EXPORT", "BACKUP", "RESTORE", "SCHEMA CHANGE", "SYNC META CACHE",
    "REPLICA REBALANCE",
})
"""The job types (kwbase/pkg/jobs/jobspb/jobs.proto:672-697, named as wrap.go:222-228 prints
them) a scale-in waits for: bulk work that ends by itself and that a drain would break or slow
down: files read from or written to one node's external-I/O directory (IMPORT, EXPORT), bulk
reads and writes of ranges the drain is moving (BACKUP, RESTORE, a SCHEMA CHANGE's backfill,
the time-series metadata sync of SYNC META CACHE), and KWDB's own replica moves (REPLICA
REBALANCE), which compete with the decommission's. Not waited for: jobs that never end (TS TXN,
CHANGEFEED, STREAM, REPLICATION STREAM, REPLICATION INGESTION: a gate on them never opens) and
periodic maintenance that a moved replica does not disturb (CREATE STATS, AUTO CREATE STATS,
SCHEMA CHANGE GC, SQL SCHEDULE, COMPRESS, RETENTION, STATISTICS, RESTART HISTORY)."""


@dataclass(frozen=True)
class RunningJobs:
    """Running jobs by KWDB job type (RUNNING_JOB_TYPES_QUERY)."""

    by_type: tuple[tuple[str, int], ...] = ()

    def conflicting(self) -> tuple[tuple[str, int], ...]:
        """The running jobs a drain waits for (DRAIN_CONFLICTING_JOB_TYPES)."""
        return tuple((t, n) for t, n in self.by_type if t in DRAIN_CONFLICTING_JOB_TYPES)

    def describe_conflicting(self) -> str:
        """"" when none conflicts, else e.g. "jobs running (SHOW JOBS): 2 IMPORT"."""
        found = self.conflicting()
        if not found:
            return ""
        return "jobs running (SHOW JOBS): " + ", ".join(f"{n} {t}" for t, n in found)


@dataclass(frozen=True)
class KwbaseSettings:
    """How the adapter reaches kwbase. Defaults match the renderer's StatefulSet.

    binary: the kwbase binary in the official image.
    container: the container in each pod that has it.
    certs_dir: where the pod mounts ca.crt, node.crt/key and client.root.crt/key (secure mode).
    sql_port: the node's RPC/SQL port (--listen-addr).
    cluster_domain: the cluster's DNS domain, for connect_via="pod-dns".
    connect_via: "localhost" (default): a command exec'd in pod P talks to P's own node, with no
        dependence on cluster DNS; "pod-dns": through P's advertised name
        <pod>.<headless>.<ns>.svc.<domain>, the path other nodes use.
    timeout_s: how long one exec may take before it counts as failed (Settings.exec_timeout_s).
    long_timeout_s: the same for a bulk statement, EXPORT or IMPORT, which runs for minutes to
        hours on real data (Settings.long_statement_timeout_s).
    """

    binary: str = "/kaiwudb/bin/kwbase"
    container: str = "kwbase"
    certs_dir: str = "/kaiwudb/certs"
    sql_port: int = 26257
    cluster_domain: str = "cluster.local"
    connect_via: Literal["localhost", "pod-dns"] = "localhost"
    timeout_s: float = 60.0
    long_timeout_s: float = 3 * 3600.0


class ExecRunner(Protocol):
    """What the adapter needs from the API: `reconciler.kube.client.Kube` fits."""

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]: ...


# --- errors ----------------------------------------------------------------------------------


class KwbaseError(Exception):
    """Any failure of an admin command; `pod` is where it was exec'd, `argv` what ran."""

    def __init__(self, message: str, pod: str, argv: Sequence[str]) -> None:
        super().__init__(message)
        self.pod = pod
        self.argv = tuple(argv)


class ExecFailed(KwbaseError):
    """The command could not be run, or gave no exit status: the pod or its kwbase container is
    not running, the exec connection failed, or the command outlived the time-out."""


class ExecTimedOut(ExecFailed):
    """The exec ended with no exit status: the command outlived the time-out, or its stream was
    cut (a streaming idle time-out on the way, a kubelet restarting, a node losing power). The
    command itself may still be running in the pod: a process
    started by exec is not killed when its exec session ends (kubernetes/kubernetes#73056,
    #89031: the kubelet logs "Exec session ... terminated but process still running!")."""


class CommandFailed(KwbaseError):
    """kwbase ran and exited non-zero; `stderr` is what it printed."""

    def __init__(self, pod: str, argv: Sequence[str], exit_code: int, stderr: str,
                 summary: str = "") -> None:
        self.exit_code = exit_code
        self.stderr = stderr
        detail = summary or error_text(stderr) or f"exit code {exit_code}"
        super().__init__(f"{' '.join(argv)} (in pod {pod}) failed: {detail}", pod, argv)


class NodeUnreachable(CommandFailed):
    """The CLI could not talk to the node: not running, not listening, draining, or (SQL
    commands) still waiting for `kwbase init`, which a SQL client cannot tell from a hang."""


class NotInitialized(CommandFailed):
    """The node answers but the cluster has not been initialised (`kwbase init` not yet run)."""


class UnknownNode(CommandFailed):
    """A node id the cluster does not know."""


class DecommissionRefused(CommandFailed):
    """The cluster refuses `node decommission` and `node recommission` for good: KWDB's
    start-single-replica ("mpp") mode cannot move a range's only replica (server/admin.go:
    `node cannot be decommissioned in mpp mode`). Retrying never helps."""


class UnexpectedOutput(KwbaseError):
    """kwbase succeeded but printed something this adapter cannot read (a format change)."""


class NotOneStatement(KwbaseError):
    """A statement the adapter refuses to send: it would run as several (a `;` or a comment
    outside quotes), or it holds a NUL. Names from KaiwuDB go in quoted (backup_plan's
    quote_ident); this is the last check that none slipped in unquoted."""


_IDENT_CHAR = re.compile(r"[\w$]")


def quote_end(text: str, start: int) -> int:
    """The index of the quote that closes the string or name opened at `start`, or -1. A `'`
    right after a lone e, E, b or B opens an escape string, where a backslash escapes the next
    character (kwbase/pkg/sql/parser/scan.go:249-279, 1025-1031); elsewhere only a doubled
    quote stands for itself."""
    quote = text[start]
    prefix = text[start - 1:start] if start else ""
    escapes = quote == "'" and prefix in ("e", "E", "b", "B") and not (
        start >= 2 and _IDENT_CHAR.match(text[start - 2]))
    i = start + 1
    while i < len(text):
        if escapes and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            if text[i + 1:i + 2] == quote:
                i += 2
                continue
            return i
        i += 1
    return -1


def statement_problem(text: str) -> str:
    """Why `text` is not exactly one SQL statement ("" when it is): a `;`, `--` or `/*`
    outside string literals ('...', '' inside; e'...' with backslash escapes) and quoted
    identifiers ("...", "" inside), a `$` that starts a token (a placeholder or a dollar
    quote, scan.go:224-231, 1102-1160, which this check does not read), an unterminated quote,
    or a NUL. KWDB's CLI sends a whole -e text to the server, which runs every statement in it
    (kwbase/pkg/cli/sql.go, runQueryAndFormatResults; the parser splits at `;` tokens only,
    parser/parse.go:262-264)."""
    if "\x00" in text:
        return "it holds a NUL character"
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            end = quote_end(text, i)
            if end < 0:
                return f"an unterminated {ch} quote at character {i}"
            i = end + 1
            continue
        if ch == ";" and text[i + 1:].strip():
            return f"a ';' at character {i} would end it and start another"
        if text.startswith(("--", "/*"), i):
            return f"a comment starts at character {i}"
        if ch == "$" and not (i and _IDENT_CHAR.match(text[i - 1])):
            return f"a '$' at character {i} starts a placeholder or a dollar quote"
        i += 1
    return ""


def error_text(stderr: str) -> str:
    """The CLI's error, without the `Failed running` trailer: `ERROR:` onwards, on one line."""
    lines = [line.strip() for line in stderr.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), None)
    chosen = lines[start:] if start is not None else lines
    kept = [line for line in chosen if line and not line.startswith("Failed running")]
    return " ".join(kept)


_DECOMMISSION_REFUSED = ("cannot be decommissioned in mpp mode",)
# Substrings of kwbase's decorated errors (kwbase/pkg/cli/error.go MaybeDecorateGRPCError and
# the server's gRPC statuses), checked in this order.
_NOT_INITIALIZED = ("node waiting for init", "before it has been initialized")
_UNKNOWN_NODE = ("doesn't exist", "not in the liveness table", "cannot find status of node")
_UNREACHABLE = ("cannot dial server", "initial connection heartbeat failed", "connection refused",
                "i/o timeout", "no such host", "server is not accepting clients",
                "node not ready to perform cluster initialization")


def classify_failure(pod: str, argv: Sequence[str], exit_code: int, stderr: str
                     ) -> CommandFailed:
    """The typed error for a non-zero exit (never ExecFailed: the command did run)."""
    text = stderr.lower()
    if any(marker in text for marker in _DECOMMISSION_REFUSED):
        return DecommissionRefused(pod, argv, exit_code, stderr)
    if any(marker in text for marker in _NOT_INITIALIZED):
        return NotInitialized(pod, argv, exit_code, stderr)
    if any(marker in text for marker in _UNKNOWN_NODE):
        return UnknownNode(pod, argv, exit_code, stderr)
    if any(marker in text for marker in _UNREACHABLE):
        return NodeUnreachable(pod, argv, exit_code, stderr)
    return CommandFailed(pod, argv, exit_code, stderr)


# --- results ---------------------------------------------------------------------------------


class InitOutcome(Enum):
    """What `init` found: it initialised the cluster now, or it already was."""

    INITIALIZED = "initialized"
    ALREADY_INITIALIZED = "already-initialized"


@dataclass(frozen=True)
class NodeStatus:
    """One row of `kwbase node status`. Optional groups are None unless their flag was given:
    --ranges (replica and range counts), --stats (byte counts; --all gives both and the rest),
    --decommission (gossiped_replicas, is_decommissioning, is_draining). A count the node does
    not report (NULL) is None too. gossiped_replicas is a gossip estimate (expires to 0 two
    minutes after a node stops gossiping): never evidence that a node is empty."""

    id: int
    address: str
    sql_address: str
    build: str
    started_at: datetime | None
    updated_at: datetime | None
    locality: str
    start_mode: str
    is_available: bool
    is_live: bool
    replicas_leaders: int | None = None
    replicas_leaseholders: int | None = None
    ranges: int | None = None
    ranges_unavailable: int | None = None
    ranges_underreplicated: int | None = None
    live_bytes: int | None = None
    key_bytes: int | None = None
    value_bytes: int | None = None
    intent_bytes: int | None = None
    system_bytes: int | None = None
    gossiped_replicas: int | None = None
    is_decommissioning: bool | None = None
    is_draining: bool | None = None

    @property
    def address_known(self) -> bool:
        """KaiwuDB still holds the node's descriptor. It forgets it two hours after the node
        last gossiped it (kwbase/pkg/gossip/gossip.go:133-140: gossiped hourly while the node
        runs, NodeDescriptorTTL 2 h), and `node status` then prints NULL for the address
        (cli/node.go:165-179 LEFT JOINs descriptors to liveness records)."""
        return self.address not in ("", "NULL")

    @property
    def pod_name(self) -> str | None:
        """The pod behind this node id, from its advertised address
        (<pod>.<headless>.<ns>.svc...:26257); None for an address that is not such a name, or
        none at all (address_known). Node ids belong to stores, so a node id's pod can change
        when a store moves."""
        if not self.address_known:
            return None
        host = self.address.rsplit(":", 1)[0]
        if not host or host.startswith("[") or host.replace(".", "").isdigit():
            return None
        return host.split(".", 1)[0]

    def long_gone(self, now: float, after_s: float = 3600.0) -> bool:
        """A node that has not run for an hour at least, by every sign KaiwuDB gives: its
        descriptor is forgotten (address_known; a running node gossips it hourly with a 2 h
        TTL, gossip.go:133-140, so it stopped an hour ago at least), it is neither live nor
        available (its liveness record expired: cli/node.go:174-178), and its liveness record
        was last gossiped `after_s` ago at least (updated_at; KWDB's interval is 1 h). A
        gateway restarted moments ago may not know a live node's descriptor yet, but the
        liveness record still shows that node available: such a node is never long gone."""
        return (not self.address_known and not self.is_live and not self.is_available
                and not self.is_decommissioning and self.updated_at is not None
                and now - self.updated_at.timestamp() >= after_s)

    @property
    def healthy(self) -> bool:
        """Available and live: what KaiwuDB calls a healthy node."""
        return self.is_available and self.is_live


@dataclass(frozen=True)
class DecommissionStatus:
    """One row of `node decommission` / `node recommission` output."""

    id: int
    is_live: bool
    replicas: int
    is_decommissioning: bool
    is_draining: bool

    @property
    def drained_of_replicas(self) -> bool:
        """Decommissioning and holding no replicas: the node can be stopped for good."""
        return self.is_decommissioning and self.replicas == 0


@dataclass(frozen=True)
class ReplicationHealth:
    """Summed range health; None means no store reported the metric yet (not known healthy).
    `catching_up` counts the replicas live stores wait to send or are applying raft snapshots
    for (`snapshots_in_flight`). `stale` says why the sums may predate the last disruption (""
    when they cannot): then they are not evidence of health, whatever they say
    (`stale_records`)."""

    unavailable: int | None
    underreplicated: int | None
    catching_up: int | None
    stale: str = ""

    @property
    def healthy(self) -> bool:
        return (self.unavailable == 0 and self.underreplicated == 0 and self.catching_up == 0
                and not self.stale)

    def describe(self) -> str:
        if self.unavailable is None or self.underreplicated is None:
            return "replication health unknown (no store has reported range metrics yet)"
        if self.catching_up is None:
            return ("replication health unknown (a live store has not reported its raft "
                    "snapshot gauges)")
        if self.stale:
            return f"replication health not known yet: {self.stale}"
        if self.healthy:
            return "all ranges available and fully replicated"
        if self.unavailable or self.underreplicated:
            return (f"{self.unavailable} unavailable and {self.underreplicated} "
                    "under-replicated ranges")
        return (f"{self.catching_up} replicas are waiting for or applying a raft snapshot "
                "(catching up after their node was away; until then they cannot acknowledge "
                "writes, whatever the range metrics say)")


def replication_health_of(statuses: Sequence[NodeStatus],
                          snapshots: Mapping[int, int | None]) -> ReplicationHealth:
    """Replication health as KaiwuDB documents it (the precondition of scale-in and upgrades):
    the sums of the `ranges_unavailable` and `ranges_underreplicated` store metrics of the rows
    of `node status --ranges`. Those are each store's persisted status, a dead node's stale one
    included (better to wait than to act on missing data), but KaiwuDB lists no node that is
    decommissioned and no longer live: its last status, frozen when it died, would count the
    ranges that were under-replicated then for ever (kwdb_internal.kv_store_status keeps it,
    which is why that table is not summed for them).

    Those two metrics count a replica as up to date whenever its node is live
    (calcRangeCounter, kv/kvserver/replica_metrics.go:170-201), so they call a range healthy
    while a replica of it still waits for the raft snapshot it needs after its node was away.
    `snapshots` (node id to `snapshots_in_flight`) adds that, summed over the live nodes."""
    if not statuses or any(s.ranges_unavailable is None or s.ranges_underreplicated is None
                           for s in statuses):
        return ReplicationHealth(None, None, None)
    live = [snapshots.get(s.id) for s in statuses if s.is_live]
    catching_up = None if any(n is None for n in live) else sum(n or 0 for n in live)
    return ReplicationHealth(sum(s.ranges_unavailable or 0 for s in statuses),
                             sum(s.ranges_underreplicated or 0 for s in statuses), catching_up)


LIVENESS_TTL_S = 15.0
"""How long a node's liveness record outlives its last heartbeat (base/config.go:134)."""
METRICS_SAMPLE_S = 10.0
"""How often a KWDB node computes its periodic store metrics (ranges.unavailable,
ranges.underreplicated) and, on a second ticker, writes them into its status record:
base.DefaultMetricsSampleInterval (server/config.go:76; server/node.go:525, 763-846). A record
carries metrics computed up to one interval before it was written, and a new process's gauges
are 0 until its first computation."""


@dataclass(frozen=True)
class StatusTimes:
    """When a node's status record (kwdb_internal.kv_node_status) was written, and when the
    process that wrote it started."""

    started_at: datetime
    updated_at: datetime


def stale_records(statuses: Sequence[NodeStatus], times: dict[int, StatusTimes],
                  sample_s: float = METRICS_SAMPLE_S) -> str:
    """Why the range metrics of `statuses` may not show the last start of a live node yet, or "".

    The newest process start among the live nodes is the last disruption those metrics must
    reflect (a restart, a failover's new node, a scale-out). Each live node's record must have
    been written two sampling intervals after it: then its metrics were computed one interval
    after it at least. Both times are KWDB's own clocks, which KWDB keeps within 500 ms
    (--max-offset). A dead node's record is old by nature and still counted in the sums; it is
    not waited for (it will never be rewritten)."""
    live = [s for s in statuses if s.is_live]
    # A record older than the node's current process (its started_at, the same value KWDB
    # gossips with the descriptor) was written by the process before: SQL serves before a new
    # process writes its first record (server/server.go:2118-2144).
    missing = [s.id for s in live if s.id not in times or (
        s.started_at is not None and times[s.id].started_at < s.started_at)]
    if missing:
        return ("no status record yet from the running process of KaiwuDB node "
                + ", ".join(map(str, missing))
                + f" (written at start, then every {sample_s:g} s)")
    if not live:
        return ""
    newest = max(live, key=lambda s: times[s.id].started_at)
    started = times[newest.id].started_at
    behind = sorted(s.id for s in live
                    if (times[s.id].updated_at - started).total_seconds() < 2 * sample_s)
    if behind:
        return (f"node {newest.id} started at {started:%H:%M:%S} and the store metrics of node "
                + ", ".join(map(str, behind)) + f" were written less than {2 * sample_s:g} s "
                f"after that; KWDB computes and writes them every {sample_s:g} s "
                "(server/node.go:763-846)")
    # A node that stopped counting as live is a disruption too: the metrics count its replicas
    # up to date until its liveness expired (replica_metrics.go:170-201), at most one record
    # interval after its last record plus the liveness TTL (base/config.go:134). Until every
    # live record was written two intervals after that, a range that lost its quorum with it
    # may still read as available.
    gone = [s for s in statuses if not s.is_live and s.id in times]
    if not gone:
        return ""
    lost = max(gone, key=lambda s: times[s.id].updated_at)
    expired = times[lost.id].updated_at + timedelta(seconds=sample_s + LIVENESS_TTL_S)
    behind = sorted(s.id for s in live
                    if (times[s.id].updated_at - expired).total_seconds() < 2 * sample_s)
    if not behind:
        return ""
    return (f"node {lost.id} stopped counting as live by {expired:%H:%M:%S} at the latest and "
            "the store metrics of node " + ", ".join(map(str, behind)) + " were written less "
            f"than {2 * sample_s:g} s after that")


# --- parsing ---------------------------------------------------------------------------------


class _ParseError(Exception):
    pass


def _csv_rows(text: str) -> list[dict[str, str]]:
    """The first csv table in text (kwbase may print a blank line and a note after it)."""
    block: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            if block:
                break
            continue
        block.append(line)
    if not block:
        raise _ParseError("no output")
    reader = csv.DictReader(io.StringIO("\n".join(block) + "\n"))
    rows = list(reader)
    for row in rows:
        if None in row or any(value is None for value in row.values()):
            raise _ParseError(f"a row does not have the header's {len(reader.fieldnames or [])} "
                              "columns")
    return rows


def _bool(value: str, column: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "t"):
        return True
    if lowered in ("false", "f"):
        return False
    raise _ParseError(f"column {column}: {value!r} is not a boolean")


def _int(value: str, column: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise _ParseError(f"column {column}: {value!r} is not an integer") from None


STATEMENT_JOB_COLUMNS = ("statement", "description")


def statement_jobs_query(job_type: str, column: str, needle: str) -> str:
    """The jobs of one statement, newest first: job rows of `job_type` whose `column` holds
    `needle` (SHOW JOBS lists running jobs and those finished in the last seven days,
    kwbase/pkg/sql/delegate/show_jobs.go:43-60). An EXPORT's row carries its text in `statement`
    (sql/conn_executor_exec.go:719-723); an IMPORT's in `description`, URLs sanitised
    (sql/importer/import_stmt.go:655-680)."""
    if column not in STATEMENT_JOB_COLUMNS:
        raise ValueError(f"column must be one of {', '.join(STATEMENT_JOB_COLUMNS)}")
    return ("SELECT job_id, status, created, error FROM [SHOW JOBS] WHERE job_type = "
            f"{quote_literal(job_type)} AND strpos({column}, {quote_literal(needle)}) > 0 "
            "ORDER BY created DESC")


def quote_ident(name: str) -> str:
    """An identifier as KWDB reads it back exactly: double-quoted, a `"` inside doubled, case
    and reserved words kept (kwbase/pkg/sql/lex/encode.go:172-194, EncodeEscapedSQLIdent)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A string literal as KWDB reads it back exactly: single quotes, a `'` inside doubled
    (kwbase/pkg/sql/lex/encode.go EncodeSQLStringWithFlags writes them so; a backslash is no
    escape in a standard string)."""
    return "'" + text.replace("'", "''") + "'"


JOB_ENDED_WELL = "succeeded"
JOB_ENDED_BADLY = frozenset({"failed", "canceled"})
"""KWDB's terminal job statuses (jobs/jobs.go Status*); every other one (pending, running,
paused, pause-requested, cancel-requested, reverting, ...) means the job is not over."""


@dataclass(frozen=True)
class JobRow:
    """One job of statement_jobs_query: KWDB's id, status (running, succeeded, failed, ...),
    when it was created, and its error text (KWDB's words: shown, never acted upon)."""

    job_id: str
    status: str
    created: datetime
    error: str

    @property
    def over(self) -> bool:
        return self.status == JOB_ENDED_WELL or self.status in JOB_ENDED_BADLY

    @property
    def failed(self) -> bool:
        return self.status in JOB_ENDED_BADLY


def parse_statement_jobs(text: str) -> tuple[JobRow, ...]:
    """statement_jobs_query's CSV, newest first."""
    try:
        rows = _csv_rows(text)
        if rows and not {"job_id", "status", "created", "error"} <= set(rows[0]):
            raise _ParseError(f"expected columns job_id, status, created, error, got "
                              f"{', '.join(rows[0])}")
        found = []
        for row in rows:
            created = _time(row["created"])
            if created is None:
                raise _ParseError(f"job {row['job_id']} has no created time")
            found.append(JobRow(row["job_id"], row["status"], created, row["error"]))
        return tuple(found)
    except _ParseError as err:
        raise ValueError(f"unreadable SHOW JOBS output: {err}") from None


STATUS_TIMES_QUERY = (
    "SELECT node_id, started_at, updated_at FROM kwdb_internal.kv_node_status ORDER BY node_id")
"""kwdb_internal.kv_node_status (sql/kwdb_internal.go:3406-3430; admin only, the reconciler is
root): each node's persisted status record, UpdatedAt when it was written and StartedAt when its
process started (server/status/recorder.go:451-452)."""

SNAPSHOTS_QUERY = (
    "SELECT node_id, "
    "sum((metrics->>'queue.raftsnapshot.pending')::DECIMAL)::INT AS snapshots_queued, "
    "sum((metrics->>'replicas.reserved')::DECIMAL)::INT AS snapshots_applying "
    "FROM kwdb_internal.kv_store_status GROUP BY node_id ORDER BY node_id")
"""Each node's raft snapshots in flight, from its stores' persisted status records
(kwdb_internal.kv_store_status, sql/kwdb_internal.go:3515-3620: a `metrics` JSON column;
admin only). `queue.raftsnapshot.pending` (kv/kvserver/metrics.go:724-728) counts the ranges a
leader queued because a follower needs a snapshot (raft_snapshot_queue.go:79-98; queued at once,
replica_raft.go:2003-2006), less the one being sent; `replicas.reserved` (metrics.go:48-52)
counts the snapshots a store is receiving and applying (store_snapshot.go:935-939). Both are
kept current, not sampled, and written with every record (every 10 s)."""

UPGRADING_NODES_QUERY = (
    "SELECT node_id FROM kwdb_internal.gossip_liveness WHERE upgrading ORDER BY node_id")
"""kwdb_internal.gossip_liveness (sql/kwdb_internal.go:2995-3064) has the liveness record's
`upgrading` flag, which `node status` shows only folded into is_available (cli/node.go:174)."""


def parse_upgrading_nodes(text: str) -> frozenset[int]:
    """UPGRADING_NODES_QUERY's CSV: header `node_id`, one id per row."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"node_id"}:
            raise _ParseError(f"expected the column node_id, got {', '.join(rows[0])}")
        return frozenset(_int(row["node_id"], "node_id") for row in rows)
    except _ParseError as err:
        raise ValueError(f"unreadable upgrading nodes: {err}") from None


def parse_status_times(text: str) -> dict[int, StatusTimes]:
    """STATUS_TIMES_QUERY's CSV: header `node_id,started_at,updated_at`, one row per record."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"node_id", "started_at", "updated_at"}:
            raise _ParseError("expected columns node_id, started_at, updated_at, got "
                              + ", ".join(rows[0]))
        found: dict[int, StatusTimes] = {}
        for row in rows:
            started, updated = _time(row["started_at"]), _time(row["updated_at"])
            if started is None or updated is None:
                raise _ParseError("a status record without its times")
            found[_int(row["node_id"], "node_id")] = StatusTimes(started, updated)
        return found
    except _ParseError as err:
        raise ValueError(f"unreadable status record times: {err}") from None


RANGE_REPLICA_SETS_QUERY = (
    "SELECT array_to_string(replicas, ',') AS stores, count(*) AS ranges "
    "FROM kwdb_internal.ranges_no_leases GROUP BY stores ORDER BY stores")
"""How many ranges have each set of voting replicas, from the range descriptors (a meta scan:
kwdb_internal.ranges_no_leases, sql/kwdb_internal.go:2227-2330, admin only, the reconciler is
root; `replicas` is the voters' store ids, sorted). Unlike the range metrics, which count a
range by its first live replica and so count a range with none by no one
(kv/kvserver/replica_metrics.go:170-201), the descriptors list every range. Grouped by replica
set, the answer stays a few rows however many ranges there are."""

STORE_NODES_QUERY = (
    "SELECT node_id, store_id FROM kwdb_internal.kv_store_status ORDER BY store_id")
"""The node of each store that ever wrote a status record (kwdb_internal.kv_store_status,
sql/kwdb_internal.go:3515-3620): store ids are not node ids (KWDB allocates them apart)."""


def parse_replica_sets(text: str) -> dict[tuple[int, ...], int]:
    """RANGE_REPLICA_SETS_QUERY's CSV: header `stores,ranges`; stores is a comma-separated list
    of store ids (empty for a range without voters, which no quorum can serve)."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"stores", "ranges"}:
            raise _ParseError(f"expected columns stores, ranges, got {', '.join(rows[0])}")
        found: dict[tuple[int, ...], int] = {}
        for row in rows:
            stores = tuple(_int(part, "stores") for part in row["stores"].split(",")
                           if part.strip()) if row["stores"] not in ("", "NULL") else ()
            count = _int(row["ranges"], "ranges")
            if count < 0 or any(store <= 0 for store in stores):
                raise _ParseError("a negative count or store id")
            found[stores] = found.get(stores, 0) + count
        return found
    except _ParseError as err:
        raise ValueError(f"unreadable range replica sets: {err}") from None


def parse_store_nodes(text: str) -> dict[int, int]:
    """STORE_NODES_QUERY's CSV: header `node_id,store_id`, one row per store."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"node_id", "store_id"}:
            raise _ParseError(f"expected columns node_id, store_id, got {', '.join(rows[0])}")
        return {_int(row["store_id"], "store_id"): _int(row["node_id"], "node_id")
                for row in rows}
    except _ParseError as err:
        raise ValueError(f"unreadable store nodes: {err}") from None


def ranges_without_quorum(replica_sets: Mapping[tuple[int, ...], int],
                          store_nodes: Mapping[int, int], live: Collection[int]) -> int:
    """The ranges whose voting replicas on live nodes are not a majority of their voters: no
    write or lease is possible, and their last copies may be on the nodes that are not live.
    A store whose node is unknown counts as not live (better to wait than to give up a copy)."""
    return sum(count for stores, count in replica_sets.items()
               if 2 * sum(store_nodes.get(store) in live for store in stores) <= len(stores))


def parse_snapshots(text: str) -> dict[int, int | None]:
    """SNAPSHOTS_QUERY's CSV: header `node_id,snapshots_queued,snapshots_applying`, one row per
    node; a node's count is None when a gauge is missing (NULL: not known to be 0)."""
    try:
        rows = _csv_rows(text)
        wanted = {"node_id", "snapshots_queued", "snapshots_applying"}
        if rows and set(rows[0]) != wanted:
            raise _ParseError(f"expected columns {', '.join(sorted(wanted))}, got "
                              + ", ".join(rows[0]))
        found: dict[int, int | None] = {}
        for row in rows:
            queued = _opt_int(row, "snapshots_queued")
            applying = _opt_int(row, "snapshots_applying")
            if (queued or 0) < 0 or (applying or 0) < 0:
                raise _ParseError("a negative snapshot count")
            found[_int(row["node_id"], "node_id")] = (
                None if queued is None or applying is None else queued + applying)
        return found
    except _ParseError as err:
        raise ValueError(f"unreadable raft snapshot gauges: {err}") from None


def parse_running_jobs(text: str) -> RunningJobs:
    """RUNNING_JOB_TYPES_QUERY's CSV: header `job_type,running`, one row per type. The type is
    KWDB's text; it is only compared with known names, never used elsewhere."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"job_type", "running"}:
            raise _ParseError(f"expected columns job_type, running, got {', '.join(rows[0])}")
        return RunningJobs(tuple((r["job_type"], _int(r["running"], "running")) for r in rows))
    except _ParseError as err:
        raise ValueError(f"unreadable running jobs: {err}") from None


def _opt_int(row: dict[str, str], column: str) -> int | None:
    if column not in row or row[column].strip().upper() in ("", "NULL"):
        return None
    return _int(row[column], column)


def _opt_bool(row: dict[str, str], column: str) -> bool | None:
    if column not in row or row[column].strip().upper() in ("", "NULL"):
        return None
    return _bool(row[column], column)


def _time(value: str) -> datetime | None:
    """kwbase prints TIMESTAMP columns as `2026-01-01 00:00:05.25` (CockroachDB v20.1 added
    `+00:00`); both are UTC."""
    value = value.strip()
    if not value or value.upper() == "NULL":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _ParseError(f"{value!r} is not a timestamp") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_BASE_COLUMNS = ("id", "address", "sql_address", "build", "started_at", "updated_at",
                 "locality", "start_mode", "is_available", "is_live")


def parse_node_status(text: str) -> tuple[NodeStatus, ...]:
    """Rows of `kwbase node status --format=csv [--ranges] [--decommission] [--all]`.
    Raises ValueError when a required column is missing or a value does not parse."""
    try:
        rows = _csv_rows(text)
        if rows:
            missing = [c for c in _BASE_COLUMNS if c not in rows[0]]
            if missing:
                raise _ParseError(f"missing columns {', '.join(missing)}")
        return tuple(
            NodeStatus(
                id=_int(row["id"], "id"),
                address=row["address"],
                sql_address=row["sql_address"],
                build=row["build"],
                started_at=_time(row["started_at"]),
                updated_at=_time(row["updated_at"]),
                locality=row["locality"],
                start_mode=row["start_mode"],
                is_available=_bool(row["is_available"], "is_available"),
                is_live=_bool(row["is_live"], "is_live"),
                replicas_leaders=_opt_int(row, "replicas_leaders"),
                replicas_leaseholders=_opt_int(row, "replicas_leaseholders"),
                ranges=_opt_int(row, "ranges"),
                ranges_unavailable=_opt_int(row, "ranges_unavailable"),
                ranges_underreplicated=_opt_int(row, "ranges_underreplicated"),
                live_bytes=_opt_int(row, "live_bytes"),
                key_bytes=_opt_int(row, "key_bytes"),
                value_bytes=_opt_int(row, "value_bytes"),
                intent_bytes=_opt_int(row, "intent_bytes"),
                system_bytes=_opt_int(row, "system_bytes"),
                gossiped_replicas=_opt_int(row, "gossiped_replicas"),
                is_decommissioning=_opt_bool(row, "is_decommissioning"),
                is_draining=_opt_bool(row, "is_draining"),
            )
            for row in rows)
    except _ParseError as err:
        raise ValueError(f"unreadable node status output: {err}") from None


def parse_decommission(text: str) -> tuple[DecommissionStatus, ...]:
    """Rows of `kwbase node decommission|recommission --format=csv` (the table before the
    `No more data reported on target nodes` note)."""
    try:
        return tuple(
            DecommissionStatus(
                id=_int(row["id"], "id"),
                is_live=_bool(row["is_live"], "is_live"),
                replicas=_int(row["replicas"], "replicas"),
                is_decommissioning=_bool(row["is_decommissioning"], "is_decommissioning"),
                is_draining=_bool(row["is_draining"], "is_draining"),
            )
            for row in _csv_rows(text))
    except (_ParseError, KeyError) as err:
        raise ValueError(f"unreadable decommission output: {err}") from None


# --- the adapter -----------------------------------------------------------------------------


class KwbaseAdmin:
    """Admin commands for one KaiwuDB cluster, each exec'd in a pod the caller chooses (any pod
    whose kwbase container runs; cluster-wide commands work from any node)."""

    def __init__(self, runner: ExecRunner, namespace: str, headless_service: str, *,
                 secure: bool, settings: KwbaseSettings | None = None) -> None:
        self.runner = runner
        self.namespace = namespace
        self.headless_service = headless_service
        self.secure = secure
        self.settings = settings or KwbaseSettings()

    @classmethod
    def for_cluster(cls, runner: ExecRunner, cluster: Cluster,
                    settings: KwbaseSettings | None = None) -> KwbaseAdmin:
        return cls(runner, cluster.namespace, cluster.headless_service, secure=cluster.tls,
                   settings=settings)

    def host(self, pod: str) -> str:
        """The --host a command exec'd in pod uses (see KwbaseSettings.connect_via)."""
        s = self.settings
        if s.connect_via == "localhost":
            return f"localhost:{s.sql_port}"
        return (f"{pod}.{self.headless_service}.{self.namespace}.svc.{s.cluster_domain}:"
                f"{s.sql_port}")

    def argv(self, pod: str, *words: str) -> list[str]:
        """The full command line: binary, subcommand words and flags, connection flags."""
        security = (f"--certs-dir={self.settings.certs_dir}" if self.secure else "--insecure")
        return [self.settings.binary, *words, f"--host={self.host(pod)}", security]

    def _run(self, pod: str, argv: list[str], timeout_s: float | None = None
             ) -> tuple[str, str, int]:
        log.debug("kwbase in %s/%s: %s", self.namespace, pod, " ".join(argv))
        try:
            stdout, stderr, code = self.runner.exec(
                self.namespace, pod, self.settings.container, argv,
                timeout=self.settings.timeout_s if timeout_s is None else timeout_s)
        except Exception as err:
            # The exec path fails in many ways (ApiException for a missing pod or a stopped
            # container, websocket and TLS errors, socket time-outs); all mean the same here.
            raise ExecFailed(f"could not exec {' '.join(argv)} in pod {self.namespace}/{pod}: "
                             f"{type(err).__name__}: {err}", pod, argv) from err
        return stdout, stderr, code

    def _checked(self, pod: str, argv: list[str]) -> str:
        """Run argv; stdout on exit 0, else the typed error."""
        stdout, stderr, code = self._run(pod, argv)
        if code != 0:
            raise self._failure(pod, argv, stdout, stderr, code)
        return stdout

    def _failure(self, pod: str, argv: list[str], stdout: str, stderr: str,
                 code: int, timeout_s: float | None = None) -> KwbaseError:
        if code < 0:
            waited = self.settings.timeout_s if timeout_s is None else timeout_s
            return ExecTimedOut(f"{' '.join(argv)} in pod {self.namespace}/{pod} gave no exit "
                                f"status (its stream was cut, or it ran past {waited:g} s) "
                                f"({error_text(stderr) or 'no output'})", pod, argv)
        if code in (126, 127) and "ERROR:" not in stderr:
            # The runtime's answers for "cannot execute" and "not found": kwbase never ran.
            return ExecFailed(f"{' '.join(argv)} could not run in pod {self.namespace}/{pod}: "
                              f"{(stderr or stdout).strip()}", pod, argv)
        return classify_failure(pod, argv, code, stderr)

    def init(self, pod: str) -> InitOutcome:
        """`kwbase init` against pod's node. Idempotent: an already initialised cluster is
        success (ALREADY_INITIALIZED). A node that cannot be reached makes kwbase retry until
        the time-out: NodeUnreachable."""
        argv = self.argv(pod, "init")
        stdout, stderr, code = self._run(pod, argv)
        if code == 0:
            return InitOutcome.INITIALIZED
        if "cluster has already been initialized" in stderr:
            return InitOutcome.ALREADY_INITIALIZED
        if code < 0 and "node not ready to perform cluster initialization" in stderr:
            raise NodeUnreachable(pod, argv, code, stderr,
                                  summary=f"the node did not accept init within "
                                          f"{self.settings.timeout_s:g} s: "
                                          f"{error_text(stderr.splitlines()[-1])}")
        raise self._failure(pod, argv, stdout, stderr, code)

    def node_status(self, pod: str, node_id: int | None = None, *, ranges: bool = False,
                    decommission: bool = False, all_columns: bool = False
                    ) -> tuple[NodeStatus, ...]:
        """`kwbase node status [<id>] --format=csv [--ranges] [--decommission] [--all]`.
        Without --decommission/--all, kwbase hides decommissioned nodes that are not live."""
        words = ["node", "status"] + ([str(node_id)] if node_id is not None else [])
        words += ["--format=csv"]
        words += ["--ranges"] if ranges else []
        words += ["--decommission"] if decommission else []
        words += ["--all"] if all_columns else []
        argv = self.argv(pod, *words)
        return self._parsed(pod, argv, parse_node_status)

    def decommission(self, pod: str, node_ids: Sequence[int]) -> tuple[DecommissionStatus, ...]:
        """`kwbase node decommission <ids> --wait=none`: mark the nodes decommissioning and
        return at once with their status. Its `replicas` column is a meta scan of the range
        descriptors (server/admin.go DecommissionStatus), the authoritative count; call it
        again (idempotent while decommissioning) until every node is drained_of_replicas.
        Never poll node_status's gossiped_replicas for that: it reads 0 once a dead node's
        gossip expires, replicas or not. DecommissionRefused in single-replica mode."""
        argv = self.argv(pod, "node", "decommission", *map(str, node_ids), "--wait=none",
                         "--format=csv")
        return self._parsed(pod, argv, parse_decommission)

    def recommission(self, pod: str, node_ids: Sequence[int]) -> tuple[DecommissionStatus, ...]:
        """`kwbase node recommission <ids>`: clear the decommissioning flag
        (DecommissionRefused in single-replica mode)."""
        argv = self.argv(pod, "node", "recommission", *map(str, node_ids), "--format=csv")
        return self._parsed(pod, argv, parse_decommission)

    def drain(self, pod: str) -> None:
        """`kwbase node drain` of the node the command connects to (with connect_via=localhost,
        pod's own node): it stops taking clients and moves its leases away, but keeps running."""
        self._checked(pod, self.argv(pod, "node", "drain"))

    def upgrade(self, pod: str, node_id: int) -> None:
        """`kwbase node upgrade <id>` (cli/node.go:548-636): mark the node UPGRADING, the first
        step of KWDB's own version upgrade. Refused (CommandFailed) while any node of the
        cluster is neither LIVE nor DECOMMISSIONED, an UPGRADING one included
        (server/server.go:2824-2837): so never twice. Prints nothing on success."""
        self._checked(pod, self.argv(pod, "node", "upgrade", str(node_id)))

    def upgrading_nodes(self, pod: str) -> frozenset[int]:
        """The ids whose liveness record carries KWDB's Upgrading flag (UPGRADING_NODES_QUERY),
        as the gateway's gossip sees them."""
        argv = self.argv(pod, "sql", "--format=csv", "-e", UPGRADING_NODES_QUERY)
        return self._parsed(pod, argv, parse_upgrading_nodes)

    def ranges_without_quorum(self, pod: str, live: Collection[int]) -> int:
        """How many ranges lack a quorum of voters on the `live` node ids, by the range
        descriptors (`ranges_without_quorum`)."""
        argv = self.argv(pod, "sql", "--format=csv", "-e", STORE_NODES_QUERY)
        store_nodes = self._parsed(pod, argv, parse_store_nodes)
        argv = self.argv(pod, "sql", "--format=csv", "-e", RANGE_REPLICA_SETS_QUERY)
        replica_sets = self._parsed(pod, argv, parse_replica_sets)
        return ranges_without_quorum(replica_sets, store_nodes, frozenset(live))

    def replication_health(self, pod: str) -> ReplicationHealth:
        """`replication_health_of` the nodes `node status --ranges` lists, marked stale while
        their records may predate the newest start of a live node (`stale_records`)."""
        # The times first: a record rewritten between the two reads then makes the sums newer
        # than the times say, never older.
        argv = self.argv(pod, "sql", "--format=csv", "-e", STATUS_TIMES_QUERY)
        times = self._parsed(pod, argv, parse_status_times)
        argv = self.argv(pod, "sql", "--format=csv", "-e", SNAPSHOTS_QUERY)
        snapshots = self._parsed(pod, argv, parse_snapshots)
        statuses = self.node_status(pod, ranges=True)
        health = replication_health_of(statuses, snapshots)
        return replace(health, stale=stale_records(statuses, times))

    def running_jobs(self, pod: str) -> RunningJobs:
        """The running jobs by type (RUNNING_JOB_TYPES_QUERY)."""
        argv = self.argv(pod, "sql", "--format=csv", "-e", RUNNING_JOB_TYPES_QUERY)
        return self._parsed(pod, argv, parse_running_jobs)

    def _parsed(self, pod: str, argv: list[str], parse: Callable[[str], T]) -> T:
        stdout = self._checked(pod, argv)
        try:
            return parse(stdout)
        except ValueError as err:
            raise UnexpectedOutput(f"{' '.join(argv)} in pod {self.namespace}/{pod}: {err}",
                                   pod, argv) from err


    # --- SQL statements and the external-I/O directory (backups, reconciler.kaiwudb.backup) ---

    def sql(self, pod: str, statement: str, *, bulk: bool = False,
            database: str = "") -> SqlAnswer:
        """One statement through `kwbase sql --format=csv -e`: its columns, rows and the
        server's notices (the CLI prints each as `NOTICE: ...` on stderr, exit code 0).
        bulk: an EXPORT or IMPORT, given KwbaseSettings.long_timeout_s; ExecTimedOut when it
        outlives even that (the statement may run on: statement_jobs says). database: the
        session's current database (`--database`, kwbase/pkg/cli/flags.go), for statements
        that name objects in it unqualified; one argument of its own, never parsed as SQL."""
        chosen = (f"--database={database}",) if database else ()
        argv = self.argv(pod, "sql", "--format=csv", *chosen, "-e", statement)
        problem = statement_problem(statement)
        if problem:
            raise NotOneStatement(f"refusing to run {statement[:200]!r}: {problem}", pod, argv)
        timeout_s = self.settings.long_timeout_s if bulk else self.settings.timeout_s
        stdout, stderr, code = self._run(pod, argv, timeout_s)
        if code != 0:
            raise self._failure(pod, argv, stdout, stderr, code, timeout_s)
        notices = tuple(line[len("NOTICE: "):].strip() for line in stderr.splitlines()
                        if line.startswith("NOTICE: "))
        reader = csv.reader(io.StringIO(stdout))
        table = [row for row in reader]
        headers = tuple(table[0]) if table else ()
        rows = tuple(dict(zip(headers, row, strict=False)) for row in table[1:])
        return SqlAnswer(headers, rows, notices)

    def statement_jobs(self, pod: str, job_type: str, column: str, needle: str
                       ) -> tuple[JobRow, ...]:
        """The jobs of one statement, newest first (statement_jobs_query)."""
        argv = self.argv(pod, "sql", "--format=csv", "-e",
                         statement_jobs_query(job_type, column, needle))
        return self._parsed(pod, argv, parse_statement_jobs)

    def file_sums(self, pod: str, directory: str) -> dict[str, str]:
        """Every file under `directory` in pod's kwbase container, relative path -> sha256
        (`find DIR -type f`, then `sha256sum`); {} when the directory does not exist."""
        argv = ["find", directory, "-type", "f"]
        stdout, stderr, code = self._run(pod, argv)
        if code != 0:
            if "No such file or directory" in stderr:
                return {}
            raise self._failure(pod, argv, stdout, stderr, code)
        paths = [line for line in stdout.splitlines() if line]
        if not paths:
            return {}
        sums = self._checked(pod, ["sha256sum", *paths])
        root = directory.rstrip("/") + "/"
        found = {}
        for line in sums.splitlines():
            digest, _, path = line.partition("  ")
            if path.startswith(root):
                found[path[len(root):]] = digest
        return found

    def read_file(self, pod: str, path: str) -> bytes:
        """A file's contents through `cat` (text files: exec streams carry text)."""
        return self._checked(pod, ["cat", path]).encode()

    def remove_dir(self, pod: str, directory: str) -> None:
        """`rm -rf DIR` in pod's kwbase container."""
        self._checked(pod, ["rm", "-rf", directory])


@dataclass(frozen=True)
class SqlAnswer:
    """A statement's result: column names, rows (column -> text) and server notices."""

    headers: tuple[str, ...]
    rows: tuple[dict[str, str], ...]
    notices: tuple[str, ...]
