"""Client `kwbase` commands exec'd into a simulated pod: init, node *, quit, sql, version.

Called by tests/world/kwdb/world.py `KwdbWorld.exec` with a parsed command line. Each handler
follows the kwbase source named in its docstring (KWDB/KWDB `kwbase/pkg/cli/`, forked from
CockroachDB v20.1); connections go through tests/world/kwdb/client.py, SQL through
tests/world/kwdb/sql.py, output through tests/world/kwdb/render.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from tests.world.kwdb.client import (
    Env,
    Fail,
    bool_text,
    connect,
    output_format,
    rpc_node,
    sql_session,
)
from tests.world.kwdb.flags import Invocation
from tests.world.kwdb.model import (
    DEAD,
    DECOMMISSIONED,
    DECOMMISSIONING,
    LIVE,
    MODE_MULTI,
    MODE_SINGLE_REPLICA,
    UPGRADE_STORE_DEAD_S,
    UPGRADING,
    LogicalCluster,
    NodeRecord,
)
from tests.world.kwdb.render import cli_error, format_timestamp, render
from tests.world.kwdb.sql import run_sql
from tests.world.kwdb.state import DRAIN_DONE, ExecResult, Proc, ProcessExit

NO_MORE_DATA = (
    "No more data reported on target nodes. Please verify cluster health before removing the nodes."
)


# ----- init -------------------------------------------------------------------------------------
def run_init(env: Env, inv: Invocation) -> ExecResult:
    """kwbase/pkg/cli/init.go: wait for the node, Bootstrap, `Cluster successfully initialized`.

    A node that cannot be reached makes the real command retry forever, printing
    `warning: node not ready to perform cluster initialization: ... (retrying)`.
    """
    try:
        target = connect(env, inv, grpc=True)
    except Fail as f:
        warning = (
            f"warning: node not ready to perform cluster initialization: {f.message} (retrying)\n"
        )
        return ExecResult("", warning, 1, duration_s=math.inf)
    store = env.group.store_of(target)
    if target.waiting is None or (store is not None and store.node_id is not None):
        raise Fail(
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
    (proportional to the replica count). gossiped_replicas is the gossiped store descriptor's
    range count (kwdb_internal.gossip_nodes `ranges`): 0 once the node has not gossiped for the
    store TTL (see model.py), whatever replicas range descriptors still list on it.
    """
    fmt = output_format(inv)
    _, cluster = sql_session(env, inv)
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
            raise Fail(f"could not parse node_id {raw}")
        wanted = int(raw)
        nodes = [n for n in nodes if n.node_id == wanted]
        if not nodes:
            raise Fail(f"node {wanted} doesn't exist")
    epoch = env.group.settings.epoch_unix_s
    rows: list[list[str]] = []
    for n in nodes:
        live = cluster.is_live(n, t)
        known = cluster.descriptor_known(n, t)
        described = [n.address, n.sql_address, n.build, format_timestamp(n.started_at, epoch)]
        row = [
            str(n.node_id),
            *(described if known else ["NULL"] * 4),
            format_timestamp(cluster.last_heartbeat(n, t), epoch),
            n.locality if known else "NULL",
            n.start_mode if known else "NULL",
            bool_text(cluster.is_available(n, t)),
            # ifnull(is_live, false): is_live comes from the descriptor's side of the join.
            bool_text(live and known),
        ]
        m = cluster.metrics(n, t)
        if show_ranges:
            row += [str(v) for v in (m.leaders, m.leaseholders, m.replicas, m.unavailable)]
            row.append(str(m.underreplicated))
        if show_stats:
            row += [str(m.replicas * k) for k in (262144, 32768, 229376, 0, 4096)]
        if show_decom:
            row += [str(cluster.gossiped_replicas(n, t)), bool_text(n.decommissioning)]
            row.append(bool_text(n.draining))
        rows.append(row)
    return ExecResult(render(fmt, headers, rows, align), "", 0)


def run_node_ls(env: Env, inv: Invocation) -> ExecResult:
    """node.go runLsNodes: ids of nodes not decommissioned (or still live)."""
    fmt = output_format(inv)
    _, cluster = sql_session(env, inv)
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
            raise Fail(f'unable to parse {s}: strconv.ParseInt: parsing "{s}": invalid syntax')
        ids.append(int(s))
    return ids


# server/admin.go Decommission: the server refuses both directions in start-single-replica mode
# ("mpp mode"); the RPC's plain error reaches the CLI as gRPC code Unknown.
MPP_REFUSAL = "rpc error: code = Unknown desc = node cannot be decommissioned in mpp mode"


def _mpp_mode(target: Proc) -> bool:
    return target.opts.mode == MODE_SINGLE_REPLICA


def _upgrading_refusal(cluster: LogicalCluster, t: float) -> str:
    """server/server.go:2764-2777 Decommission (both directions): refused while any node of the
    cluster is UPGRADING, `%+v` of the status printing its name."""
    if any(cluster.liveness_status(n, t) == UPGRADING for n in cluster.nodes.values()):
        return (
            "rpc error: code = Unknown desc = can not run node decommission when cluster has "
            f"node {UPGRADING}"
        )
    return ""


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
                bool_text(cluster.is_live(n, t)),
                str(replicas),
                bool_text(n.decommissioning),
                bool_text(n.draining),
            ]
        )
    return render(fmt, DECOMMISSION_STATUS_HEADERS, rows, "rcrcc"), done


def run_decommission(env: Env, inv: Invocation) -> ExecResult:
    """node.go runDecommissionNode / runDecommissionNodeImpl.

    Warnings for unknown or already decommissioning ids go to stderr, the status table to
    stdout, then the `No more data reported...` line once every target has 0 replicas.
    --wait=none returns after one table; --wait=all (the default) keeps polling, so while
    replicas remain the result has duration_s=inf (the real command blocks). The replicas
    column is the meta scan of admin.go DecommissionStatus: the exact count. A single-replica
    ("mpp mode") server refuses after the warnings: `ERROR: while trying to mark as
    decommissioning: rpc error: code = Unknown desc = node cannot be decommissioned in mpp mode`.
    """
    fmt = output_format(inv)
    ids = _parse_node_ids(inv.args)
    target, cluster, _ = rpc_node(env, inv, "Status/Nodes")
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
    if _mpp_mode(target):
        raise Fail(
            f"while trying to mark as decommissioning: {MPP_REFUSAL}", stderr_before=stderr + "\n"
        )
    refused = _upgrading_refusal(cluster, t)
    if refused:
        raise Fail(
            f"while trying to mark as decommissioning: {refused}", stderr_before=stderr + "\n"
        )
    for node_id in ids:
        if node_id not in cluster.nodes:
            raise Fail(
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
    """node.go runRecommissionNode: warnings, clear the flag, print the status table. The same
    Decommission RPC refuses in single-replica mode: `ERROR: rpc error: code = Unknown desc =
    node cannot be decommissioned in mpp mode`."""
    fmt = output_format(inv)
    ids = _parse_node_ids(inv.args)
    target, cluster, _ = rpc_node(env, inv, "Status/Nodes")
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
    if _mpp_mode(target):
        raise Fail(MPP_REFUSAL, stderr_before=stderr)
    refused = _upgrading_refusal(cluster, t)
    if refused:
        raise Fail(refused, stderr_before=stderr)
    for node_id in ids:
        if node_id not in cluster.nodes:
            raise Fail(
                "rpc error: code = Unknown desc = during liveness update "
                f"{node_id} -> false: node not in the liveness table",
                stderr_before=stderr,
            )
        cluster.set_flags(node_id, t, decommissioning=False)
    table, _ = _decommission_table(fmt, cluster, ids, t)
    return ExecResult(table, stderr, 0)


# ----- upgrade ---------------------------------------------------------------------------------
def _upgrade_terminated(hint: str) -> Fail:
    """cli/node.go:590-621: expectNodesUpgradable prints its refusal to stdout, then fails
    with the same text."""
    text = f"Upgrade ternimated. Hint: {hint}"
    return Fail(text, stdout_before=text + "\n")


def run_upgrade(env: Env, inv: Invocation) -> ExecResult:
    """cli/node.go:558-636 runUpgradeNode, server/server.go:2824-2852 Upgrade.

    The CLI checks each id: unknown (`cannot find status of node N`) or neither LIVE, DEAD nor
    DECOMMISSIONED (`node N is not eligible to upgrade...`); a node not started with `start`
    skips those checks and asks the server for the single-replica variant, which first dials
    every node (kv/kvserver/node_liveness.go:370-397). The server refuses while any node of the
    cluster is neither LIVE nor DECOMMISSIONED (an UPGRADING one included, the target too: a
    second `node upgrade` of the same node fails), else sets each target's Upgrading flag and
    server.time_until_store_dead to 3 h. Success prints nothing.
    """
    ids = _parse_node_ids(inv.args)
    target, cluster, _ = rpc_node(env, inv, "Status/Nodes")
    t = env.now
    mpp = target.opts.mode != MODE_MULTI  # connNodeStatus.Desc.StartMode != startCmd.Use
    if not mpp:
        for node_id in ids:
            node = cluster.nodes.get(node_id)
            if node is None:
                raise _upgrade_terminated(f"cannot find status of node {node_id}")
            if cluster.liveness_status(node, t) not in (LIVE, DEAD, DECOMMISSIONED):
                raise _upgrade_terminated(
                    f"node {node_id} is not eligible to upgrade, check the node status and "
                    "upgrader later."
                )
    for node in sorted(cluster.nodes.values(), key=lambda n: n.node_id):
        status = cluster.liveness_status(node, t)
        if status not in (LIVE, DECOMMISSIONED):
            raise Fail(
                "rpc error: code = Unknown desc = can not upgrade nodes when cluster has node "
                f"{status}"
            )
    for node_id in ids:
        if mpp:
            down = [n.node_id for n in cluster.nodes.values() if not n.heartbeating]
            if down:
                raise Fail(
                    f"rpc error: code = Unknown desc = during liveness update {node_id} -> true: "
                    f"cluster has node unreachable. Can not connect to node {min(down)} "
                )
        if node_id in cluster.nodes:
            cluster.set_flags(node_id, t, upgrading=True)
        cluster.store_dead_s = UPGRADE_STORE_DEAD_S
    return ExecResult("", "", 0)


# ----- drain / quit -------------------------------------------------------------------------------
def _drain(env: Env, cluster: LogicalCluster, node: NodeRecord) -> str:
    """quit.go doDrainNoTimeout's stderr; marks the node draining (leases move away)."""
    leases = cluster.current_metrics(node, env.now).leaseholders
    cluster.set_flags(node.node_id, env.now, draining=True)
    text = f"node is draining... remaining: {leases}\n" if leases else ""
    return text + "node is draining... remaining: 0 (complete)\n"


def run_drain(env: Env, inv: Invocation) -> ExecResult:
    """node.go runDrain: drain without stopping; stdout `ok`."""
    try:
        _, cluster, node = rpc_node(env, inv, "Admin/Drain")
    except Fail as f:
        if "node waiting for init" in f.message:
            raise Fail(
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
        target, cluster, node = rpc_node(env, inv, "Admin/Drain")
    except Fail as f:
        if "node waiting for init" in f.message:
            raise Fail(
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
    target.log.append(f"{DRAIN_DONE}\n")
    return ExecResult("ok\n", stderr, 0, exited=(ProcessExit(target.pod_name, 0, "kwbase quit"),))


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
    ("node", "upgrade"): run_upgrade,
}


def run_client_command(env: Env, inv: Invocation) -> ExecResult:
    """Run one parsed client command; failures become the CLI's error text and exit code 1."""
    handler = HANDLERS[inv.command.path]
    try:
        return handler(env, inv)
    except Fail as f:
        stderr = f.stderr_before + cli_error(
            f.message, inv.command.name, hint=f.hint, sqlstate=f.sqlstate
        )
        return ExecResult(f.stdout_before, stderr, 1, duration_s=f.duration_s)
