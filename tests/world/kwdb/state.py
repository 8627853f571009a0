"""Per-StatefulSet state of the simulated KaiwuDB: stores, processes, clusters, name lookup.

Shared by tests/world/kwdb/world.py (the facade the simulated kubelet calls) and
tests/world/kwdb/commands.py (exec'd `kwbase` client commands). Also defines the public result
types both return.

A `Group` is everything under one (namespace, StatefulSet name): stores keyed by the opaque store
key the kubelet passes (the PVC uid, so a recreated PVC is a new, empty store), one kwbase
process per pod, and the KaiwuDB clusters those stores belong to. Normally that is one cluster
(`primary`); a second appears only when a real KaiwuDB would also split: a second
`start-single-node` store, or `kwbase init` sent to a node that never joined.

Names resolve the way they do inside a pod of the rendered StatefulSet: `localhost`, the pod's
own advertise address, `<pod>.<sts>[.<ns>[.svc[.cluster.local]]]` (headless Service),
`<sts>[...]` (headless: every pod, not-ready ones included) and `<sts>-public[...]` (client
Service: ready pods only). A pod's IP resolves too when the kubelet passes it at start.
Argument strings are taken literally: `$(POD_NAME)` must already be expanded by the kubelet, as
the real kubelet does.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.world.kwdb.model import MODE_SINGLE_NODE, LogicalCluster, NodeRecord
from tests.world.kwdb.render import format_go_time
from tests.world.kwdb.settings import KwdbSettings

ClusterKey = tuple[str, str]
"""(namespace, StatefulSet name): the key of one simulated KaiwuDB deployment."""

DEFAULT_PORT = 26257
DEFAULT_HTTP_PORT = 8080


@dataclass(frozen=True)
class StartResult:
    """What happened when a container's kwbase process started.

    ok: the process is running (it may still be waiting for `kwbase init` or to join).
    exit_code: None while running; the exit code when the process failed to start.
    stdout / stderr: what the process printed (start banner, warnings, or the error).
    node_id: the node id of the process's store, when it has one already.
    """

    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    node_id: int | None


# What kwbase prints when SIGTERM starts its graceful shutdown and when the drain ends and the
# server has stopped (kwbase/pkg/cli/start.go:950-952, 991-994).
DRAIN_BEGUN = "initiating graceful shutdown of server"
DRAIN_DONE = "server drained and shutdown completed"


@dataclass(frozen=True)
class ProcessExit:
    """A kwbase server process that exited as a side effect of an exec (e.g. `kwbase quit`)."""

    pod_name: str
    exit_code: int
    reason: str


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one exec'd command.

    duration_s: how long the real command would run before returning this result (0 for quick
        answers; the SQL connect timeout when a connection hangs; math.inf when the real command
        blocks until it is killed, e.g. `init` against a dead node or `decommission --wait=all`
        while replicas remain). The kubelet may honour it or ignore it.
    exited: server processes that exited because of this command (the kubelet turns each into a
        container exit).
    answers_at_end: the command prints nothing until it ends (`kwbase sql` running a long
        EXPORT or IMPORT): an exec that ends sooner (the kubelet's cap, the client's time-out)
        gets no output and no exit status, while the statement runs on in the server.
    conclude: for such a command, what it prints when it ends, given the simulated time then
        (the client dies with its container if the pod's server stopped meanwhile).
    """

    stdout: str
    stderr: str
    exit_code: int
    duration_s: float = 0.0
    exited: tuple[ProcessExit, ...] = ()
    answers_at_end: bool = False
    conclude: Callable[[float], ExecResult] | None = None


@dataclass(frozen=True)
class StartOptions:
    """The parts of a start command line the simulation uses."""

    mode: str
    insecure: bool
    certs_dir: str
    listen_port: int
    advertise_host: str
    advertise_port: int
    http_port: int
    join: tuple[tuple[str, int], ...]
    locality: str
    store_path: str
    # --upgrade-complete (cli/cliflags/flags.go:1243-1246): clear this node's Upgrading flag
    # once started.
    upgrade_complete: bool = False

    @property
    def address(self) -> str:
        return f"{self.advertise_host}:{self.advertise_port}"


def split_host_port(value: str, default_port: str) -> tuple[str, str]:
    """kwbase/pkg/util/netutil.SplitHostPort: `host`, `host:port`, `:port`, `[v6]:port`."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(f"address {value}: missing ']' in address")
        host, rest = value[1:end], value[end + 1 :]
        if rest.startswith(":"):
            return host, rest[1:] or default_port
        if rest:
            raise ValueError(f"address {value}: unexpected characters after ']'")
        return host, default_port
    if value.count(":") > 1:
        raise ValueError(f"address {value}: too many colons in address")
    host, _, port = value.partition(":")
    return host, port or default_port


_ORDINAL = re.compile(r"-(\d+)$")


def _ordinal(pod_name: str) -> tuple[int, str]:
    """StatefulSet order; names without an ordinal sort last."""
    m = _ORDINAL.search(pod_name)
    return (int(m.group(1)) if m else 1 << 30, pod_name)


@dataclass
class Store:
    """One volume. The start mode and node id are written into it the first time it runs."""

    key: str
    mode: str | None = None
    cluster: LogicalCluster | None = None
    node_id: int | None = None
    # The external-I/O directory (<store>/extern): relative path -> contents (see data.py).
    files: dict[str, bytes] = field(default_factory=dict)
    # Paths outside the external-I/O directory an `rm -rf` reached (data.file_command): on a
    # real node those are the store's own files. A test asserts this stays empty.
    removed_outside: list[str] = field(default_factory=list)


@dataclass
class Proc:
    """The kwbase server process of one pod (the container's main process)."""

    pod_name: str
    store_key: str
    argv: tuple[str, ...]
    opts: StartOptions
    build: str
    started_at: float
    pod_ip: str = ""
    running: bool = True
    host_alive: bool = True
    # "init": waiting for `kwbase init`; "join": cannot reach any live node in --join yet.
    waiting: str | None = None
    log: list[str] = field(default_factory=list)
    # SIGTERM received and the drain begun (world.py begin_drain): /health?ready=1 fails from
    # here on, as kwbase's drainClients sets the gRPC mode to draining first
    # (kwbase/pkg/server/drain.go:229-235).
    draining_since: float | None = None


@dataclass(frozen=True)
class ConnectError:
    """Why a client could not reach a server: refused, timeout or nohost."""

    kind: str
    address: str


class Group:
    """All stores, processes and clusters under one (namespace, StatefulSet)."""

    def __init__(self, key: ClusterKey, settings: KwdbSettings) -> None:
        self.key = key
        self.settings = settings
        self.stores: dict[str, Store] = {}
        self.procs: dict[str, Proc] = {}
        self.clusters: list[LogicalCluster] = []
        self.primary: LogicalCluster | None = None
        self.clock = -math.inf

    # ----- time -------------------------------------------------------------------------------
    def advance(self, now: float) -> float:
        """Bring every cluster to `now` (or to the group clock if `now` is earlier)."""
        now = max(now, self.clock)
        self.clock = now
        for c in self.clusters:
            c.advance(now)
        self.try_joins(now)
        return now

    # ----- nodes and processes ---------------------------------------------------------------
    def store_of(self, proc: Proc) -> Store | None:
        return self.stores.get(proc.store_key)

    def node_of(self, proc: Proc) -> tuple[LogicalCluster, NodeRecord] | None:
        store = self.store_of(proc)
        if store is None or store.cluster is None or store.node_id is None:
            return None
        return store.cluster, store.cluster.nodes[store.node_id]

    def proc_of_node(self, node: NodeRecord) -> Proc | None:
        proc = self.procs.get(node.pod_name)
        if proc is not None and proc.store_key == node.store_key:
            return proc
        return None

    def sync_heartbeat(self, proc: Proc, now: float) -> None:
        """Tell the proc's cluster whether its node heartbeats (process up, host up)."""
        found = self.node_of(proc)
        if found is not None:
            cluster, node = found
            on = proc.running and proc.host_alive and proc.waiting is None
            cluster.set_heartbeating(node.node_id, on, now)

    def sorted_procs(self) -> list[Proc]:
        return sorted(self.procs.values(), key=lambda p: _ordinal(p.pod_name))

    def is_ready(self, proc: Proc) -> bool:
        """`/health?ready=1`: initialised, live and not draining; an UPGRADING mark does not
        matter (server/admin.go:1492-1526)."""
        if not (proc.running and proc.host_alive and proc.waiting is None):
            return False
        if proc.draining_since is not None:
            return False
        found = self.node_of(proc)
        return found is not None and found[1].heartbeating and not found[1].draining

    def new_cluster(self, mode: str, now: float) -> LogicalCluster:
        ns, name = self.key
        cluster_id = str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"kwdb-sim/{ns}/{name}/{len(self.clusters)}")
        )
        cluster = LogicalCluster(self.settings, cluster_id, mode, now)
        self.clusters.append(cluster)
        if self.primary is None:
            self.primary = cluster
        return cluster

    def assign_node(self, proc: Proc, cluster: LogicalCluster, now: float, status: str) -> None:
        """Give the proc's empty store a new node id in `cluster` and start heartbeating."""
        store = self.stores[proc.store_key]
        node_id = cluster.allocate_node_id()
        opts = proc.opts
        cluster.add_node(
            NodeRecord(
                node_id=node_id,
                store_key=store.key,
                pod_name=proc.pod_name,
                address=opts.address,
                sql_address=opts.address,
                build=proc.build,
                locality=opts.locality or f"region=NODE{node_id}",
                start_mode=opts.mode,
                # node.go:418: startedAt is taken once the node id is known, after a wait for
                # init or join, not when the process was launched.
                started_at=now,
                last_heartbeat=now,
                heartbeating=False,
            )
        )
        store.cluster = cluster
        store.node_id = node_id
        proc.waiting = None
        cluster.set_heartbeating(node_id, proc.running and proc.host_alive, now)
        proc.log.append(self.banner(proc, cluster, node_id, status, now))

    def bootstrap(self, proc: Proc, now: float) -> LogicalCluster:
        """`kwbase init` (or start-single-node's self-init) on a node without a cluster."""
        cluster = self.new_cluster(proc.opts.mode, now)
        self.assign_node(proc, cluster, now, "initialized new cluster")
        first = self.stores[proc.store_key].node_id
        assert first is not None
        cluster.bootstrap_ranges(first)
        self.try_joins(now)
        return cluster

    def try_joins(self, now: float) -> None:
        """Processes with empty stores join the primary cluster once --join reaches a live node."""
        primary = self.primary
        if primary is None or not primary.nodes:
            return
        changed = True
        while changed:
            changed = False
            for proc in self.sorted_procs():
                if proc.waiting is None or not proc.running or not proc.host_alive:
                    continue
                if proc.opts.mode == MODE_SINGLE_NODE or proc.opts.mode != primary.mode:
                    continue
                if self._join_reaches(proc, primary):
                    self.assign_node(
                        proc, primary, now, "initialized new node, joined pre-existing cluster"
                    )
                    changed = True

    def _join_reaches(self, proc: Proc, cluster: LogicalCluster) -> bool:
        for host, port in proc.opts.join:
            for peer in self.lookup(host, proc) or []:
                found = self.node_of(peer)
                if (
                    found is not None
                    and found[0] is cluster
                    and found[1].heartbeating
                    and peer.opts.listen_port == port
                ):
                    return True
        return False

    # ----- names --------------------------------------------------------------------------------
    def lookup(self, host: str, origin: Proc | None) -> list[Proc] | None:
        """Processes a host name reaches from inside `origin`'s pod (None: no such host)."""
        h = host.lower().rstrip(".")
        if origin is not None and h in ("", "localhost", "127.0.0.1", "::1"):
            return [origin]
        ns, name = self.key
        suffixes = ("", f".{ns}", f".{ns}.svc", f".{ns}.svc.cluster.local")
        if h in {f"{name}-public{s}" for s in suffixes}:
            return [p for p in self.sorted_procs() if self.is_ready(p)]
        if h in {f"{name}{s}" for s in suffixes}:
            return self.sorted_procs()
        for p in self.sorted_procs():
            names = {p.pod_name, p.opts.advertise_host.lower()}
            if p.pod_ip:
                names.add(p.pod_ip)
            names.update(f"{p.pod_name}.{name}{s}" for s in suffixes)
            if h in names:
                return [p]
        return None

    def connect(self, origin: Proc, host: str, port: int) -> Proc | ConnectError:
        """Open a TCP connection to host:port from inside `origin`'s pod."""
        address = f"{host or 'localhost'}:{port}"
        procs = self.lookup(host, origin)
        if procs is None:
            return ConnectError("nohost", address)
        timed_out = False
        for p in procs:
            if p.running and p.host_alive and p.opts.listen_port == port:
                return p
            timed_out = timed_out or not p.host_alive
        return ConnectError("timeout" if timed_out else "refused", address)

    # ----- log text -----------------------------------------------------------------------------
    def banner(
        self, proc: Proc, cluster: LogicalCluster, node_id: int, status: str, now: float
    ) -> str:
        """The start summary kwbase/pkg/cli/start.go prints once the node is up (abridged)."""
        opts = proc.opts
        scheme = "http" if opts.insecure else "https"
        sslmode = "disable" if opts.insecure else "verify-full"
        flags = "--insecure" if opts.insecure else f"--certs-dir={opts.certs_dir}"
        rows = [
            ("build:", f"KaiwuDB {proc.build}"),
            ("webui:", f"{scheme}://{opts.advertise_host}:{opts.http_port}"),
            ("sql:", f"postgresql://root@{opts.address}?sslmode={sslmode}"),
            ("RPC client flags:", f"{proc.argv[0]} <client cmd> --host={opts.address} {flags}"),
            ("store[0]:", f"path={opts.store_path}"),
            ("start mode:", opts.mode),
            ("status:", status),
            ("clusterID:", cluster.cluster_id),
            ("nodeID:", str(node_id)),
        ]
        width = max(len(k) for k, _ in rows) + 2
        lines = [f"KWDB node starting at {format_go_time(now, self.settings.epoch_unix_s)}"]
        lines += [k.ljust(width) + v for k, v in rows]
        return "\n".join(lines) + "\n"
