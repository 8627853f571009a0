"""Client `kwbase` commands exec'd into a simulated pod: init, node *, quit, sql, version.

Called by tests/world/kwdb/world.py `KwdbWorld.exec` with a parsed command line. Each handler
follows the kwbase source named in its docstring (KWDB/KWDB `kwbase/pkg/cli/`, forked from
CockroachDB v20.1); output goes through tests/world/kwdb/render.py.

Connections: the client reaches `--host` (default localhost:26257) from inside the exec'd pod,
resolved by `Group.connect`. Failures are decorated as kwbase/pkg/cli/error.go
MaybeDecorateGRPCError does: "cannot dial server. Is the server running? ..." for refused
connections, the insecure/secure mismatch hints, "cannot load certificates" when neither
--insecure nor --certs-dir is given. Certificate files are not checked. Go prints resolved IP
addresses in dial errors; the simulation prints the host name as given.

SQL (`kwbase sql -e`, `node status`, `node ls`) runs only these statements:
- REPLICATION_HEALTH_QUERY (and any `SELECT [node_id,] sum((metrics->>'<metric>')::DECIMAL)
  [::INT] [AS name], ... FROM kwdb_internal.kv_store_status [GROUP BY node_id] [ORDER BY
  node_id]`), summing the persisted status of every node, dead ones included;
- `SHOW JOBS` and RUNNING_JOBS_QUERY;
- `SELECT 1`.
Anything else fails with a `kwdb-sim:` error that says the statement is not modelled.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from tests.world.kwdb.flags import Invocation
from tests.world.kwdb.model import (
    DECOMMISSIONED,
    DECOMMISSIONING,
    LIVE,
    LogicalCluster,
    NodeRecord,
    StoreMetrics,
)
from tests.world.kwdb.render import (
    RENDERED_FORMATS,
    cli_error,
    format_timestamp,
    render,
)
from tests.world.kwdb.state import (
    DEFAULT_PORT,
    ConnectError,
    ExecResult,
    Group,
    Proc,
    ProcessExit,
    split_host_port,
)

REPLICATION_HEALTH_QUERY = (
    "SELECT sum((metrics->>'ranges.unavailable')::DECIMAL)::INT AS ranges_unavailable, "
    "sum((metrics->>'ranges.underreplicated')::DECIMAL)::INT AS ranges_underreplicated "
    "FROM kwdb_internal.kv_store_status"
)
"""The one replication-health query the admin adapter runs (`kwbase sql -e ... --format=csv`).

Answers one row `ranges_unavailable,ranges_underreplicated`; healthy means both are 0.
"""

RUNNING_JOBS_QUERY = "SELECT count(*) FROM [SHOW JOBS] WHERE status = 'running'"
"""The running-jobs query the admin adapter runs: one row, column `count`."""

NO_MORE_DATA = (
    "No more data reported on target nodes. Please verify cluster health before removing the nodes."
)
_DIAL_FAILED = (
    "cannot dial server.\nIs the server running?\n"
    "If the server is running, check --host client-side and --advertise server-side.\n\n"
)
_INSECURE_EXTRA = (
    "\nIf the node is configured to require secure connections,\n"
    "remove --insecure and configure secure credentials instead.\n"
)
_NO_CERTS = (
    "cannot load certificates.\nCheck your certificate settings, set --certs-dir, or use "
    "--insecure for insecure clusters.\n\nproblem using security settings: no certificates "
    "found; does certs dir exist?"
)
_GRPC_HEARTBEAT = (
    "initial connection heartbeat failed: rpc error: code = Unavailable desc = all SubConns "
    'are in TransientFailure, latest connection error: connection error: desc = "transport: '
)


@dataclass
class Env:
    """What a handler works with: the group, the exec'd pod's process, the time."""

    group: Group
    origin: Proc
    now: float

    @property
    def settings_connect_timeout(self) -> float:
        return self.group.settings.connect_timeout_s


class _Fail(Exception):
    """A handler's failure: becomes `ERROR: ...` on stderr and exit code 1."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        sqlstate: str | None = None,
        stderr_before: str = "",
        duration_s: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.sqlstate = sqlstate
        self.stderr_before = stderr_before
        self.duration_s = duration_s


# ----- connections ------------------------------------------------------------------------------
def _dial_text(err: ConnectError) -> str:
    if err.kind == "nohost":
        host = err.address.rsplit(":", 1)[0]
        return f"dial tcp: lookup {host}: no such host"
    if err.kind == "timeout":
        return f"dial tcp {err.address}: i/o timeout"
    return f"dial tcp {err.address}: connect: connection refused"


def _target_address(inv: Invocation) -> tuple[str, int, bool | None]:
    """(host, port, insecure-from-URL) from --url or --host/--port."""
    url = inv.get("url")
    if url:
        parts = urlsplit(url)
        sslmode = parse_qs(parts.query).get("sslmode", [""])[-1]
        return parts.hostname or "", parts.port or DEFAULT_PORT, sslmode == "disable"
    try:
        host, port = split_host_port(inv.get("host"), inv.get("port", str(DEFAULT_PORT)))
    except ValueError as e:
        raise _Fail(str(e)) from e
    return host, int(port) if port.isdigit() else DEFAULT_PORT, None


def _connect(env: Env, inv: Invocation, *, grpc: bool, wrap: str = "") -> Proc:
    """Reach the server the flags name, or raise the decorated error the CLI prints."""
    host, port, url_insecure = _target_address(inv)
    insecure = inv.flag_true("insecure") if url_insecure is None else url_insecure
    if not insecure and not inv.get("certs-dir") and not inv.get("url"):
        raise _Fail(_NO_CERTS)
    target = env.group.connect(env.origin, host, port)
    if isinstance(target, ConnectError):
        dial = _dial_text(target)
        timeout = env.settings_connect_timeout if target.kind == "timeout" else 0.0
        if not grpc:
            raise _Fail(_DIAL_FAILED + dial, duration_s=timeout)
        err = f'{wrap}{_GRPC_HEARTBEAT}Error while dialing {dial}""'
        if target.kind == "refused":
            raise _Fail(_DIAL_FAILED + err)
        raise _Fail(err, duration_s=timeout)
    if target.opts.insecure and not insecure:
        if grpc:
            inner = (
                f"{wrap}{_GRPC_HEARTBEAT}authentication handshake failed: tls: first record "
                'does not look like a TLS handshake"'
            )
        else:
            inner = "pq: SSL is not enabled on the server"
        raise _Fail(
            "cannot establish secure connection to insecure server.\nMaybe use --insecure?\n\n"
            + inner
        )
    if not target.opts.insecure and insecure:
        if grpc:
            raise _Fail(
                "server closed the connection.\nIs this a KwDB node?\n"
                + _INSECURE_EXTRA
                + f"\n{wrap}initial connection heartbeat failed: rpc error: code = Unavailable "
                "desc = transport is closing"
            )
        raise _Fail(
            "SSL authentication error while connecting.\n"
            + _INSECURE_EXTRA
            + "\npq: node is running secure mode, SSL connection required"
        )
    return target


def _sql_session(env: Env, inv: Invocation) -> tuple[Proc, LogicalCluster]:
    """A SQL connection: hangs until the connect timeout on a node waiting for init."""
    target = _connect(env, inv, grpc=False)
    found = env.group.node_of(target)
    if target.waiting is not None or found is None:
        host, port, _ = _target_address(inv)
        raise _Fail(
            _DIAL_FAILED + f"read tcp {host or 'localhost'}:{port}: i/o timeout",
            duration_s=env.settings_connect_timeout,
        )
    if found[1].draining:
        raise _Fail("server is not accepting clients", sqlstate="57P01")
    return target, found[0]


def _rpc_node(env: Env, inv: Invocation, method: str) -> tuple[Proc, LogicalCluster, NodeRecord]:
    """A gRPC admin/status connection to an initialised node."""
    target = _connect(env, inv, grpc=True, wrap="Failed to connect to the node: ")
    found = env.group.node_of(target)
    if target.waiting is not None or found is None:
        raise _Fail(
            "rpc error: code = Unavailable desc = node waiting for init; "
            f"/kwbase.server.serverpb.{method} not available"
        )
    return target, found[0], found[1]


def _output_format(inv: Invocation) -> str:
    fmt = inv.get("format", "tsv")  # exec has no terminal: kwbase defaults to tsv
    if fmt not in RENDERED_FORMATS:
        raise _Fail(f"kwdb-sim: --format={fmt} is not modelled by the simulated KaiwuDB")
    return fmt


def _bool(value: bool) -> str:
    return "true" if value else "false"


# ----- init -------------------------------------------------------------------------------------
def run_init(env: Env, inv: Invocation) -> ExecResult:
    """kwbase/pkg/cli/init.go: wait for the node, Bootstrap, `Cluster successfully initialized`.

    A node that cannot be reached makes the real command retry forever, printing
    `warning: node not ready to perform cluster initialization: ... (retrying)`.
    """
    try:
        target = _connect(env, inv, grpc=True)
    except _Fail as f:
        warning = (
            f"warning: node not ready to perform cluster initialization: {f.message} (retrying)\n"
        )
        return ExecResult("", warning, 1, duration_s=math.inf)
    store = env.group.store_of(target)
    if target.waiting is None or (store is not None and store.node_id is not None):
        raise _Fail(
            "rpc error: code = Unknown desc = cluster has already been initialized",
            hint="Please ensure all your start commands are using --join.",
        )
    env.group.bootstrap(target, env.now)
    return ExecResult("Cluster successfully initialized\n", "", 0)


# ----- node status / ls -------------------------------------------------------------------------
BASE_HEADERS = (
    "id",
    "address",
    "sql_address",
    "build",
    "started_at",
    "updated_at",
    "locality",
    "start_mode",
    "is_available",
    "is_live",
)
RANGES_HEADERS = (
    "replicas_leaders",
    "replicas_leaseholders",
    "ranges",
    "ranges_unavailable",
    "ranges_underreplicated",
)
STATS_HEADERS = ("live_bytes", "key_bytes", "value_bytes", "intent_bytes", "system_bytes")
DECOMMISSION_HEADERS = ("gossiped_replicas", "is_decommissioning", "is_draining")


def run_node_status(env: Env, inv: Invocation) -> ExecResult:
    """kwbase/pkg/cli/node.go runStatusNode: columns, filter, alignment, `node %d doesn't exist`.

    Without --decommission/--all, nodes that are decommissioning and no longer live are hidden
    (the `decommissioning = false OR expiration > now` filter). --stats values are synthetic
    (proportional to the replica count).
    """
    fmt = _output_format(inv)
    _, cluster = _sql_session(env, inv)
    t = env.now
    show_all = inv.flag_true("all")
    show_ranges = show_all or inv.flag_true("ranges")
    show_stats = show_all or inv.flag_true("stats")
    show_decom = show_all or inv.flag_true("decommission")
    headers = list(BASE_HEADERS)
    align = "rlllll"
    if show_ranges:
        headers += RANGES_HEADERS
        align += "rrrrrr"
    if show_stats:
        headers += STATS_HEADERS
        align += "rrrrrr"
    if show_decom:
        headers += DECOMMISSION_HEADERS
        align += "rcrcc"
    nodes = sorted(cluster.nodes.values(), key=lambda n: n.node_id)
    if not show_decom:
        nodes = [n for n in nodes if not n.decommissioning or cluster.is_live(n, t)]
    if inv.args:
        raw = inv.args[0]
        if not re.fullmatch(r"[+-]?\d+", raw):
            raise _Fail(f"could not parse node_id {raw}")
        wanted = int(raw)
        nodes = [n for n in nodes if n.node_id == wanted]
        if not nodes:
            raise _Fail(f"node {wanted} doesn't exist")
    epoch = env.group.settings.epoch_unix_s
    rows: list[list[str]] = []
    for n in nodes:
        live = cluster.is_live(n, t)
        row = [
            str(n.node_id),
            n.address,
            n.sql_address,
            n.build,
            format_timestamp(n.started_at, epoch),
            format_timestamp(cluster.last_heartbeat(n, t), epoch),
            n.locality,
            n.start_mode,
            _bool(live),
            _bool(live),
        ]
        m = cluster.metrics(n, t)
        if show_ranges:
            row += [str(v) for v in (m.leaders, m.leaseholders, m.replicas, m.unavailable)]
            row.append(str(m.underreplicated))
        if show_stats:
            row += [str(m.replicas * k) for k in (262144, 32768, 229376, 0, 4096)]
        if show_decom:
            row += [str(cluster.replica_count(n.node_id)), _bool(n.decommissioning)]
            row.append(_bool(n.draining))
        rows.append(row)
    return ExecResult(render(fmt, headers, rows, align), "", 0)


def run_node_ls(env: Env, inv: Invocation) -> ExecResult:
    """node.go runLsNodes: ids of nodes not decommissioned (or still live)."""
    fmt = _output_format(inv)
    _, cluster = _sql_session(env, inv)
    rows = [
        [str(n.node_id)]
        for n in sorted(cluster.nodes.values(), key=lambda n: n.node_id)
        if not n.decommissioning or cluster.is_live(n, env.now)
    ]
    return ExecResult(render(fmt, ["id"], rows, "r"), "", 0)


# ----- decommission / recommission ------------------------------------------------------------
DECOMMISSION_STATUS_HEADERS = ("id", "is_live", "replicas", "is_decommissioning", "is_draining")


def _parse_node_ids(args: Sequence[str]) -> list[int]:
    ids = []
    for s in args:
        if not re.fullmatch(r"[+-]?\d+", s) or not -(2**31) <= int(s) < 2**31:
            raise _Fail(f'unable to parse {s}: strconv.ParseInt: parsing "{s}": invalid syntax')
        ids.append(int(s))
    return ids


def _decommission_table(
    fmt: str, cluster: LogicalCluster, ids: Sequence[int], t: float
) -> tuple[str, bool]:
    rows = []
    done = True
    for node_id in sorted(set(ids)):
        n = cluster.nodes[node_id]
        replicas = cluster.replica_count(node_id)
        done = done and replicas == 0 and n.decommissioning
        rows.append(
            [
                str(node_id),
                _bool(cluster.is_live(n, t)),
                str(replicas),
                _bool(n.decommissioning),
                _bool(n.draining),
            ]
        )
    return render(fmt, DECOMMISSION_STATUS_HEADERS, rows, "rcrcc"), done


def run_decommission(env: Env, inv: Invocation) -> ExecResult:
    """node.go runDecommissionNode / runDecommissionNodeImpl.

    Warnings for unknown or already decommissioning ids go to stderr, the status table to
    stdout, then the `No more data reported...` line once every target has 0 replicas.
    --wait=none returns after one table; --wait=all (the default) keeps polling, so while
    replicas remain the result has duration_s=inf (the real command blocks).
    """
    fmt = _output_format(inv)
    ids = _parse_node_ids(inv.args)
    _, cluster, _ = _rpc_node(env, inv, "Status/Nodes")
    t = env.now
    stderr = ""
    for node_id in ids:
        node = cluster.nodes.get(node_id)
        if node is None:
            stderr += f"warning: cannot find status of node {node_id}\n"
        elif cluster.liveness_status(node, t) in (DECOMMISSIONING, DECOMMISSIONED):
            stderr += f"warning: node {node_id} is already decommissioning or decommissioned\n"
    wait = inv.get("wait", "all")
    if wait == "live":
        stderr += "\n--wait=live is deprecated and is treated as --wait=all\n"
    for node_id in ids:
        if node_id not in cluster.nodes:
            raise _Fail(
                "while trying to mark as decommissioning: rpc error: code = Unknown desc = "
                f"during liveness update {node_id} -> true: node not in the liveness table",
                stderr_before=stderr + "\n",
            )
        cluster.set_flags(node_id, t, decommissioning=True)
    table, done = _decommission_table(fmt, cluster, ids, t)
    stderr += "\n"
    if done:
        return ExecResult(table + "\n" + NO_MORE_DATA + "\n", stderr, 0)
    return ExecResult(table, stderr, 0, duration_s=0.0 if wait == "none" else math.inf)


def run_recommission(env: Env, inv: Invocation) -> ExecResult:
    """node.go runRecommissionNode: warnings, clear the flag, print the status table."""
    fmt = _output_format(inv)
    ids = _parse_node_ids(inv.args)
    _, cluster, _ = _rpc_node(env, inv, "Status/Nodes")
    t = env.now
    stderr = ""
    for node_id in ids:
        node = cluster.nodes.get(node_id)
        if node is None:
            stderr += f"warning: cannot find status of node {node_id}\n"
            continue
        status = cluster.liveness_status(node, t)
        if status == LIVE:
            stderr += f"warning: node {node_id} is not decommissioned\n"
        elif status not in (DECOMMISSIONING, DECOMMISSIONED):
            stderr += f"warning: node {node_id} is in unexpected state {status}\n"
    for node_id in ids:
        if node_id not in cluster.nodes:
            raise _Fail(
                "rpc error: code = Unknown desc = during liveness update "
                f"{node_id} -> false: node not in the liveness table",
                stderr_before=stderr,
            )
        cluster.set_flags(node_id, t, decommissioning=False)
    table, _ = _decommission_table(fmt, cluster, ids, t)
    return ExecResult(table, stderr, 0)


# ----- drain / quit -------------------------------------------------------------------------------
def _drain(env: Env, cluster: LogicalCluster, node: NodeRecord) -> str:
    """quit.go doDrainNoTimeout's stderr; marks the node draining (leases move away)."""
    leases = cluster.metrics(node, env.now).leaseholders
    cluster.set_flags(node.node_id, env.now, draining=True)
    text = f"node is draining... remaining: {leases}\n" if leases else ""
    return text + "node is draining... remaining: 0 (complete)\n"


def run_drain(env: Env, inv: Invocation) -> ExecResult:
    """node.go runDrain: drain without stopping; stdout `ok`."""
    try:
        _, cluster, node = _rpc_node(env, inv, "Admin/Drain")
    except _Fail as f:
        if "node waiting for init" in f.message:
            raise _Fail(
                "node cannot be drained before it has been initialized",
                stderr_before="node is draining... \n",
            ) from f
        raise
    return ExecResult("ok\n", _drain(env, cluster, node), 0)


def run_quit(env: Env, inv: Invocation) -> ExecResult:
    """quit.go runQuit: drain, then shut the server process down; stdout `ok`."""
    stderr = ""
    if inv.has("decommission"):
        stderr += (
            "Flag --decommission has been deprecated, use 'kwbase node decommission' then "
            "'kwbase quit' instead\n"
        )
    try:
        target, cluster, node = _rpc_node(env, inv, "Admin/Drain")
    except _Fail as f:
        if "node waiting for init" in f.message:
            raise _Fail(
                "hard shutdown failed: node cannot be shut down before it has been initialized",
                hint="You can still stop the process using a service manager or a signal.",
                stderr_before=stderr + "node is draining... \n",
            ) from f
        raise
    if inv.flag_true("decommission"):
        cluster.set_flags(node.node_id, env.now, decommissioning=True)
        if cluster.replica_count(node.node_id):
            table, _ = _decommission_table("tsv", cluster, [node.node_id], env.now)
            return ExecResult(table, stderr + "\n", 0, duration_s=math.inf)
    stderr += _drain(env, cluster, node)
    target.running = False
    env.group.sync_heartbeat(target, env.now)
    target.log.append("server drained and shutdown completed\n")
    return ExecResult("ok\n", stderr, 0, exited=(ProcessExit(target.pod_name, 0, "kwbase quit"),))


# ----- sql ----------------------------------------------------------------------------------------
_SUM_ITEM = re.compile(
    r"sum\(\s*\(\s*metrics\s*->>\s*'(?P<metric>[a-z0-9._-]+)'\s*\)\s*::\s*decimal\s*\)"
    r"(?P<int>\s*::\s*int[48]?)?(?:\s+as\s+(?P<alias>[a-z_][a-z0-9_]*))?",
    re.IGNORECASE,
)
_KV_STORE_STATUS = re.compile(
    r"select\s+(?P<items>.+?)\s+from\s+kwdb_internal\.kv_store_status"
    r"(?P<group>\s+group\s+by\s+node_id)?(?:\s+order\s+by\s+node_id)?",
    re.IGNORECASE | re.DOTALL,
)
_RUNNING_JOBS = re.compile(
    r"select\s+count\(\s*\*\s*\)\s+from\s+\[\s*show\s+jobs\s*\]\s+"
    r"where\s+status\s*=\s*'running'",
    re.IGNORECASE,
)
_JOB_HEADERS = (
    "job_id",
    "job_type",
    "description",
    "statement",
    "user_name",
    "status",
    "running_status",
    "created",
    "started",
    "finished",
    "modified",
    "fraction_completed",
    "error",
    "coordinator_id",
)
_METRIC_FIELDS: dict[str, Callable[[StoreMetrics], int]] = {
    "replicas": lambda m: m.replicas,
    "replicas.leaders": lambda m: m.leaders,
    "replicas.leaseholders": lambda m: m.leaseholders,
    "ranges.unavailable": lambda m: m.unavailable,
    "ranges.underreplicated": lambda m: m.underreplicated,
}


def _metric_value(metric: str, m: StoreMetrics) -> int | None:
    """`metrics->>'<metric>'`: NULL (None) for a metric the simulation does not keep."""
    getter = _METRIC_FIELDS.get(metric)
    return getter(m) if getter else None


def _split_items(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    items.append(current.strip())
    return items


def _kv_store_status(
    cluster: LogicalCluster, items_text: str, grouped: bool, t: float
) -> tuple[list[str], list[list[str]]]:
    headers: list[str] = []
    columns: list[tuple[str, str, bool]] = []  # (kind, metric, as int)
    for item in _split_items(items_text):
        if item.lower() == "node_id":
            if not grouped:
                raise _Fail(
                    'column "node_id" must appear in the GROUP BY clause or be used in an '
                    "aggregate function",
                    sqlstate="42803",
                )
            headers.append("node_id")
            columns.append(("node_id", "", True))
            continue
        m = _SUM_ITEM.fullmatch(item)
        if m is None:
            raise _Fail(f"kwdb-sim: select item not modelled: {item}")
        headers.append(m.group("alias") or "sum")
        columns.append(("sum", m.group("metric"), m.group("int") is not None))
    nodes = sorted(cluster.nodes.values(), key=lambda n: n.node_id)
    groups = [[n] for n in nodes] if grouped else [nodes]
    rows = []
    for members in groups:
        row = []
        for kind, metric, _as_int in columns:
            if kind == "node_id":
                row.append(str(members[0].node_id))
                continue
            values = [_metric_value(metric, cluster.metrics(n, t)) for n in members]
            present = [v for v in values if v is not None]
            row.append(str(sum(present)) if present else "NULL")
        rows.append(row)
    return headers, rows


def _statement(env: Env, cluster: LogicalCluster, stmt: str) -> tuple[list[str], list[list[str]]]:
    text = " ".join(stmt.split())
    m = _KV_STORE_STATUS.fullmatch(text)
    if m is not None:
        return _kv_store_status(cluster, m.group("items"), m.group("group") is not None, env.now)
    if _RUNNING_JOBS.fullmatch(text):
        return ["count"], [[str(cluster.running_jobs)]]
    if text.lower() == "show jobs":
        epoch = env.group.settings.epoch_unix_s
        ts = format_timestamp(env.now, epoch)
        rows = [
            [
                str(600000000000000000 + i),
                "SCHEMA CHANGE",
                f"simulated running job {i + 1}",
                "",
                "root",
                "running",
                "NULL",
                ts,
                ts,
                "NULL",
                ts,
                "0.5",
                "",
                "1",
            ]
            for i in range(cluster.running_jobs)
        ]
        return list(_JOB_HEADERS), rows
    if text.lower() == "select 1":
        return ["?column?"], [["1"]]
    raise _Fail(f"kwdb-sim: statement not modelled by the simulated KaiwuDB: {text}")


def run_sql(env: Env, inv: Invocation) -> ExecResult:
    """kwbase/pkg/cli/sql.go with -e: each statement's result in --format (tsv by default)."""
    fmt = _output_format(inv)
    statements = [s for e in inv.all("execute") for s in e.split(";") if s.strip()]
    if not statements:
        return ExecResult("", "", 0)  # no -e and no stdin: nothing to run
    _, cluster = _sql_session(env, inv)
    out = ""
    for stmt in statements:
        try:
            headers, rows = _statement(env, cluster, stmt)
        except _Fail as f:
            # Results of the statements before the failing one were already printed.
            err = cli_error(f.message, "sql", hint=f.hint, sqlstate=f.sqlstate)
            return ExecResult(out, err, 1)
        # The CLI aligns by column type: integers right, everything else left.
        align = "".join(
            "r" if rows and all(_is_int(r[i]) for r in rows) else "l" for i in range(len(headers))
        )
        out += render(fmt, headers, rows, align)
    return ExecResult(out, "", 0)


def _is_int(value: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", value))


# ----- dispatch -----------------------------------------------------------------------------------
def run_version(env: Env, inv: Invocation) -> ExecResult:
    """cli.go versionCmd (build fields other than the tag are placeholders)."""
    lines = [
        ("KaiwuDB Version:", env.origin.build),
        ("Build Time:", "simulated"),
        ("Distribution:", ""),
        ("Platform:", "linux amd64 (x86_64-linux-gnu)"),
        ("Go Version:", "simulated"),
        ("C Compiler:", "simulated"),
        ("Build SHA-1:", "simulated"),
    ]
    return ExecResult("".join(f"{k.ljust(18)}{v}".rstrip() + "\n" for k, v in lines), "", 0)


HANDLERS: dict[tuple[str, ...], Callable[[Env, Invocation], ExecResult]] = {
    ("init",): run_init,
    ("quit",): run_quit,
    ("sql",): run_sql,
    ("version",): run_version,
    ("node", "ls"): run_node_ls,
    ("node", "status"): run_node_status,
    ("node", "decommission"): run_decommission,
    ("node", "recommission"): run_recommission,
    ("node", "drain"): run_drain,
}


def run_client_command(env: Env, inv: Invocation) -> ExecResult:
    """Run one parsed client command; failures become the CLI's error text and exit code 1."""
    handler = HANDLERS[inv.command.path]
    try:
        return handler(env, inv)
    except _Fail as f:
        stderr = f.stderr_before + cli_error(
            f.message, inv.command.name, hint=f.hint, sqlstate=f.sqlstate
        )
        return ExecResult("", stderr, 1, duration_s=f.duration_s)
