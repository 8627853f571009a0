"""`KwdbWorld`: the simulated KaiwuDB the simulated kubelet drives and execs into.

Called by tests/world/kubelet.py (container start/stop, node loss, lost volumes, probes, exec)
and by tests that want to look inside. Pure Python, no Kubernetes calls, no real sleeps: every
call takes the simulated time `now` (seconds, e.g. tests/world/simclock.py SimClock.now()) and
the model catches up to it first. Thread-safe (one lock), since the kubelet serves exec from its
own event loop.

Start lines are checked the way `kwbase start*` checks them (kwbase/pkg/cli/start.go, flags.go,
base/addr_validation.go in KWDB/KWDB):
- flag errors (unknown flag, missing value): usage, then `ERROR: unknown flag: --x`, exit 1;
- `start-single-node` with --join: `cannot use --join with 'kaiwudb start-single-node', use
  'kaiwudb start' or 'kaiwudb start-single-replica' instead.` (start.go errCannotUseJoin);
- `start`/`start-single-replica` without --brpc-addr, or with a host and no port: `failed to
  start server: --brpc-addr's port not specified` (cli/flags.go:897 joins host and port,
  base/addr_validation.go:103-111 refuses an empty port). `--brpc-addr=:27257` is accepted: an
  empty host takes the listen host (addr_validation.go:112-122);
- thread/task/buffer pool sizes and restful port/timeout out of range (start.go messages);
- `--cache` / `--max-sql-memory` fractions outside 1% - 99% (cli/flags_util.go, see flags.py);
- secure mode without --certs-dir: `cannot load certificates. ...` (error.go decoration);
- a store started with another mode than the one written into it, and a new store joining a
  cluster of another mode: V3.2.1 fails its start-mode check with a message that begins
  `check start mode failed!` (per the issue that reported it; the full text could not be read
  here, so the rest is modelled): match on "start mode", not on the exact text.
A store whose node was decommissioned starts again as V3.2.1 does (no "permanently removed"
check, which only CockroachDB 20.2 and later have): live, and still decommissioning.
- secure mode with a node key the group or others may read (the kubelet's mounted files and
  the container's environment, see `_key_file_problem`).
Certificates' contents, ports in use, memory and disk are not checked.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tests.world.kwdb import bulk
from tests.world.kwdb.client import Env
from tests.world.kwdb.commands import run_client_command
from tests.world.kwdb.data import (
    EXTERN,
    FILE_COMMANDS,
    RELATIONAL,
    TIME_SERIES,
    Database,
    SequenceOptions,
    Session,
    SqlData,
    Table,
    file_command,
    shown_privileges,
    statement,
)
from tests.world.kwdb.flags import CliError, Invocation, parse, parse_go_bool
from tests.world.kwdb.model import (
    MODE_SINGLE_NODE,
    START_MODES,
    Job,
    LogicalCluster,
)
from tests.world.kwdb.render import cli_error
from tests.world.kwdb.settings import KwdbSettings
from tests.world.kwdb.state import (
    DEFAULT_HTTP_PORT,
    DEFAULT_PORT,
    DRAIN_BEGUN,
    DRAIN_DONE,
    ClusterKey,
    ExecResult,
    Group,
    Proc,
    StartOptions,
    StartResult,
    Store,
    split_host_port,
)

_SHELLS = ("sh", "bash", "ash", "dash", "zsh", "busybox", "env")
SKIP_KEY_CHECK = "KWBASE_SKIP_KEY_PERMISSION_CHECK"
MAX_KEY_PERMISSIONS = 0o700  # security/certificate_loader.go:101-102


def _skip_key_check_panic(env: Mapping[str, str]) -> str:
    """The panic of a process whose KWBASE_SKIP_KEY_PERMISSION_CHECK is no Go bool: the
    security package reads it when it is loaded (certificate_loader.go:42-51), and
    util/envutil/env.go:183-192 panics on a value strconv.ParseBool refuses (exit 2)."""
    value = env.get(SKIP_KEY_CHECK)
    if value is None or parse_go_bool(value) is not None:
        return ""
    return (f"panic: error parsing {SKIP_KEY_CHECK}: strconv.ParseBool: parsing "
            f"{json.dumps(value)}: invalid syntax\n")


def _go_file_mode(mode: int) -> str:
    """A regular file's permissions as Go's os.FileMode.String writes them (-rwxr-x---)."""
    return "-" + "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))


def _key_file_problem(certs_dir: str, env: Mapping[str, str], files: Mapping[str, int]) -> str:
    """Why a secure start fails on its node key ("" when it does not): the certificate loader
    refuses a key file whose permissions go beyond 0700, unless KWBASE_SKIP_KEY_PERMISSION_CHECK
    is true (security/certificate_loader.go:42-51, 169-172, 360-385); NewServer loads the
    node certificate first and fails the start with it (server/server.go:405-411;
    security/certificate_manager.go:592-597; cli/start.go:679-681). Only a key the kubelet
    mounted is checked (a key it did not list is not known here)."""
    if parse_go_bool(env.get(SKIP_KEY_CHECK, "")) is True:
        return ""
    path = certs_dir.rstrip("/") + "/node.key"
    mode = files.get(path)
    if mode is None or not mode & 0o777 & ~MAX_KEY_PERMISSIONS:
        return ""
    return (f"failed to start server: problem with node certificate: key file {path} has "
            f"permissions {_go_file_mode(mode)}, exceeds {_go_file_mode(MAX_KEY_PERMISSIONS)}")
_NO_CERTS_START = (
    "cannot load certificates.\nCheck your certificate settings, set --certs-dir, or use "
    "--insecure for insecure clusters.\n\nfailed to start server: problem using security "
    "settings: no certificates found; does certs dir exist?"
)


@dataclass(frozen=True)
class NodeView:
    """A read-only look at one KaiwuDB node id, for tests and the world's own reports."""

    node_id: int
    pod_name: str
    store_key: str
    start_mode: str
    build: str
    liveness: str
    is_live: bool
    decommissioning: bool
    draining: bool
    replicas: int


@dataclass(frozen=True)
class ReplicationView:
    """The true replication state of the primary cluster (not the possibly stale metrics)."""

    initialized: bool
    replication_factor: int
    ranges: int
    unavailable: int
    underreplicated: int


class _StartFailure(Exception):
    def __init__(self, message: str, usage: str = "", hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage
        self.hint = hint


def _binary_ok(argv: Sequence[str]) -> bool:
    return bool(argv) and (argv[0] == "kwbase" or argv[0].endswith("/kwbase"))


def _build_from_image(image: str | None, default: str) -> str:
    """`kwdb/kwdb:3.2.1` reports build V3.2.1, as KaiwuDB's own tags do."""
    if not image:
        return default
    last = image.rsplit("/", 1)[-1]
    tag = last.split("@", 1)[0].partition(":")[2]
    if not tag or tag == "latest":
        return default
    return f"V{tag}" if tag[0].isdigit() else tag


def _int_flag(inv: Invocation, name: str, label: str, low: int, high: int) -> None:
    if not inv.has(name):
        return
    raw = inv.get(name)
    if not re.fullmatch(r"[+-]?\d+", raw):
        raise _StartFailure(f'strconv.Atoi: parsing "{raw}": invalid syntax')
    if not low <= int(raw) <= high:
        raise _StartFailure(f"{label} {int(raw)} is invalid")


def _start_options(inv: Invocation, pod_name: str) -> StartOptions:
    """Validate a start line in the order kwbase does; return what the model needs."""
    mode = inv.command.path[0]
    if mode == MODE_SINGLE_NODE and inv.has("join"):
        raise _StartFailure(
            "cannot use --join with 'kaiwudb start-single-node', use 'kaiwudb start' or "
            "'kaiwudb start-single-replica' instead."
        )
    _int_flag(inv, "thread-pool-size", "thread pool size", 1, 1024)
    _int_flag(inv, "task-queue-size", "task queue size", 1, 1024)
    _int_flag(inv, "buffer-pool-size", "buffer pool size", 1, 16777216)
    _int_flag(inv, "restful-port", "restful port", 0, 65535)
    _int_flag(inv, "restful-timeout", "restful timeout", 1, 2**63 - 1)

    def addr(flag: str, default_port: str) -> tuple[str, str]:
        try:
            return split_host_port(inv.get(flag), default_port)
        except ValueError as e:
            raise _StartFailure(
                f'invalid argument "{inv.get(flag)}" for "--{flag}" flag: {e}',
                usage=inv.command.usage() + "\n",
            ) from e

    listen_host, listen_port = addr("listen-addr", inv.get("port", str(DEFAULT_PORT)))
    listen_host = listen_host or inv.get("host")
    adv_host, adv_port = addr("advertise-addr", "")
    adv_host = adv_host or inv.get("advertise-host") or listen_host or pod_name
    adv_port = adv_port or inv.get("advertise-port") or listen_port
    _, http_port = addr("http-addr", inv.get("http-port", str(DEFAULT_HTTP_PORT)))
    if mode != MODE_SINGLE_NODE:
        # The address flag keeps host and port apart and joins them (cli/flags.go:897); a
        # missing flag joins to ":" and a host alone to "<host>:", both refused the same way
        # (base/addr_validation.go:103-111).
        brpc_port = addr("brpc-addr", "")[1] if inv.has("brpc-addr") else ""
        if not brpc_port:
            raise _StartFailure("failed to start server: --brpc-addr's port not specified")
    insecure = inv.flag_true("insecure")
    if not insecure and not inv.get("certs-dir"):
        raise _StartFailure(_NO_CERTS_START)
    join: list[tuple[str, int]] = []
    for value in inv.all("join"):
        for entry in value.split(","):
            if entry.strip():
                host, port = split_host_port(entry.strip(), str(DEFAULT_PORT))
                join.append((host, int(port) if port.isdigit() else DEFAULT_PORT))
    store = inv.get("store", "kwbase-data")
    return StartOptions(
        mode=mode,
        insecure=insecure,
        certs_dir=inv.get("certs-dir"),
        listen_port=int(listen_port) if listen_port.isdigit() else DEFAULT_PORT,
        advertise_host=adv_host,
        advertise_port=int(adv_port) if adv_port.isdigit() else DEFAULT_PORT,
        http_port=int(http_port) if http_port.isdigit() else DEFAULT_HTTP_PORT,
        join=tuple(join),
        locality=inv.get("locality"),
        store_path=store.removeprefix("path=").split(",", 1)[0],
        upgrade_complete=inv.flag_true("upgrade-complete"),
    )


class KwdbWorld:
    """Every simulated KaiwuDB deployment, keyed by (namespace, StatefulSet name)."""

    def __init__(self, settings: KwdbSettings | None = None) -> None:
        self.settings = settings or KwdbSettings()
        self._groups: dict[ClusterKey, Group] = {}
        self._lock = threading.RLock()

    def _group(self, cluster: ClusterKey, now: float) -> tuple[Group, float]:
        group = self._groups.get(cluster)
        if group is None:
            group = self._groups[cluster] = Group(cluster, self.settings)
        now = group.advance(now)
        for logical in group.clusters:
            bulk.settle(group, logical, now)  # EXPORTs and IMPORTs that ended by now
        return group, now

    def _proc(self, cluster: ClusterKey, pod_name: str, now: float) -> tuple[Group, Proc | None]:
        group, _ = self._group(cluster, now)
        return group, group.procs.get(pod_name)

    # ----- process lifecycle (the kubelet) -------------------------------------------------------
    def start_process(
        self,
        cluster: ClusterKey,
        pod_name: str,
        store_key: str,
        argv: Sequence[str],
        now: float,
        *,
        image: str | None = None,
        pod_ip: str | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, int] | None = None,
    ) -> StartResult:
        """The pod's kwbase container starts with `argv` (command + args, already expanded).

        `store_key` names the volume (the PVC uid); `image` (e.g. kwdb/kwdb:3.2.1) sets the
        build tag `node status` reports; `pod_ip`, when given, makes `--host=<pod IP>` resolve;
        `env` is the container's environment and `files` its mounted secret files (path ->
        mode), for the key-file check (`_key_file_problem`; not checked when None).
        Returns ok=False with an exit code and stderr when the real process would exit at
        once; the kubelet turns that into a crash loop.
        """
        with self._lock:
            group, now = self._group(cluster, now)
            old = group.procs.get(pod_name)
            if old is not None and old.running:
                raise ValueError(f"{pod_name}: kwbase is already running; stop it first")
            if not _binary_ok(argv):
                shown = argv[0] if argv else "<empty>"
                return StartResult(
                    False,
                    127,
                    "",
                    f"kwdb-sim: the container command must run kwbase, not {shown!r}\n",
                    None,
                )
            try:
                inv = parse(argv[1:])
            except CliError as e:
                err = e.usage + cli_error(e.message, e.command)
                return StartResult(False, 1, "", err, None)
            if (
                inv.command.path[:1] not in [(m,) for m in START_MODES]
                or len(inv.command.path) != 1
            ):
                return StartResult(
                    False,
                    1,
                    "",
                    f"kwdb-sim: only kwbase start commands run as the container's main "
                    f"process, not {inv.command.name!r}\n",
                    None,
                )
            try:
                opts = _start_options(inv, pod_name)
                panic = _skip_key_check_panic(env or {})
                if panic:
                    return StartResult(False, 2, "", panic, None)
                if not opts.insecure and files is not None:
                    problem = _key_file_problem(str(opts.certs_dir), env or {}, files)
                    if problem:
                        raise _StartFailure(problem)
                started = self._start(group, pod_name, store_key, tuple(argv), opts, image, now)
                group.procs[pod_name].pod_ip = pod_ip or ""
                return started
            except _StartFailure as f:
                err = f.usage + cli_error(f.message, inv.command.name, hint=f.hint)
                return StartResult(False, 1, "", err, None)

    def _start(
        self,
        group: Group,
        pod_name: str,
        store_key: str,
        argv: tuple[str, ...],
        opts: StartOptions,
        image: str | None,
        now: float,
    ) -> StartResult:
        store = group.stores.get(store_key) or Store(store_key)
        if store.mode is not None and store.mode != opts.mode:
            raise _StartFailure(
                f"check start mode failed! the store at {opts.store_path} was initialized "
                f"with start mode {store.mode}; it cannot be started with start mode {opts.mode}"
            )
        proc = Proc(
            pod_name=pod_name,
            store_key=store_key,
            argv=argv,
            opts=opts,
            build=_build_from_image(image, self.settings.default_build),
            started_at=now,
        )
        primary = group.primary
        joining_other_mode = (
            store.node_id is None
            and opts.mode != MODE_SINGLE_NODE
            and primary is not None
            and primary.mode != opts.mode
            and any(group.lookup(h, proc) for h, _ in opts.join)
        )
        if joining_other_mode and primary is not None:
            raise _StartFailure(
                f"check start mode failed! cannot join a cluster started with start mode "
                f"{primary.mode} using start mode {opts.mode}"
            )
        group.stores[store_key] = store
        store.mode = store.mode or opts.mode
        group.procs[pod_name] = proc
        stderr = ""
        if opts.mode != MODE_SINGLE_NODE and not opts.join:
            stderr += (
                "running 'kwbase start' without --join is deprecated.\n"
                "Consider using 'kwbase start-single-node' or 'kwbase init' instead.\n"
            )
        found = group.node_of(proc)
        if found is not None:
            cluster, node = found
            node.pod_name, node.build, node.started_at = pod_name, proc.build, now
            node.address = node.sql_address = opts.address
            group.sync_heartbeat(proc, now)
            proc.log.append(
                group.banner(proc, cluster, node.node_id, "restarted pre-existing node", now)
            )
            if opts.upgrade_complete and node.upgrading:
                # cli/start.go:711-715, server/server.go:2855-2874: once the server has
                # started, an UPGRADING node clears its flag and server.time_until_store_dead
                # goes back to its default. A node that is not upgrading: nothing happens.
                cluster.set_flags(node.node_id, now, upgrading=False)
                cluster.store_dead_s = self.settings.time_until_store_dead_s
        elif opts.mode == MODE_SINGLE_NODE:
            group.bootstrap(proc, now)
        else:
            proc.waiting = "init" if primary is None else "join"
            stderr += (
                "initial startup completed.\n"
                "Node will now attempt to join a running cluster, or wait for `kwbase init`.\n"
                "Client connections will be accepted after this completes successfully.\n"
                "Check the log file(s) for progress.\n"
            )
            group.try_joins(now)
        stdout = "".join(proc.log)
        proc.log.insert(0, stderr)
        return StartResult(True, None, stdout, stderr, group.stores[store_key].node_id)

    def begin_drain(self, cluster: ClusterKey, pod_name: str, now: float) -> float:
        """The container gets SIGTERM: kwbase starts its graceful shutdown and prints
        `initiating graceful shutdown of server` (kwbase/pkg/cli/start.go:857-952), after which
        `/health?ready=1` fails (server/drain.go:229-235). Returns how long the drain takes in
        simulated seconds (KwdbSettings.drain_s), after which the caller ends it cleanly with
        stop_process(graceful=True); a SIGKILL before then is stop_process(graceful=False).
        A node still waiting for `kwbase init` or a join has not started its server: kwbase
        prints `too early to drain; used hard shutdown instead` and exits at once
        (start.go:886-897, 996-999): 0 is returned and the process is already stopped, without
        marking the node draining. 0 too when no process runs."""
        with self._lock:
            group, proc = self._proc(cluster, pod_name, now)
            if proc is None or not proc.running:
                return 0.0
            proc.log.append(f"received signal 'terminated'\n{DRAIN_BEGUN}\n")
            if proc.waiting is not None:
                proc.log.append("too early to drain; used hard shutdown instead\n")
                proc.running = False
                group.sync_heartbeat(proc, group.clock)
                return 0.0
            if proc.draining_since is None:
                proc.draining_since = group.clock
            return group.settings.drain_s

    def stop_process(
        self, cluster: ClusterKey, pod_name: str, now: float, *, graceful: bool = True
    ) -> None:
        """The container stops: after a complete drain (graceful: the liveness record says
        draining and the leases have moved away, server/drain.go:255-258, and the log ends
        `server drained and shutdown completed`, cli/start.go:991-994) or by SIGKILL / power
        off (not graceful: the node keeps its leases until its liveness expires, which is what
        `hardShutdownHint` in start.go:981 warns of). A drain begun with begin_drain and
        cut short by SIGKILL is the latter: the node is not marked draining."""
        with self._lock:
            group, proc = self._proc(cluster, pod_name, now)
            if proc is None or not proc.running:
                return
            found = group.node_of(proc)
            if graceful and found is not None and proc.waiting is None:
                found[0].set_flags(found[1].node_id, group.clock, draining=True)
                if proc.draining_since is not None:
                    proc.log.append(f"{DRAIN_DONE}\n")
            proc.running = False
            group.sync_heartbeat(proc, group.clock)

    def set_pod_host_alive(
        self, cluster: ClusterKey, pod_name: str, alive: bool, now: float
    ) -> None:
        """The pod's host (Kubernetes node) lost (False) or regained (True) its network."""
        with self._lock:
            group, proc = self._proc(cluster, pod_name, now)
            if proc is None:
                return
            proc.host_alive = alive
            group.sync_heartbeat(proc, group.clock)
            group.try_joins(group.clock)

    def delete_store(self, cluster: ClusterKey, store_key: str, now: float) -> None:
        """The volume is gone. Its node id stays in the cluster (dead) until decommissioned."""
        with self._lock:
            group, now = self._group(cluster, now)
            for proc in group.procs.values():
                if proc.store_key == store_key and proc.running:
                    proc.running = False
                    group.sync_heartbeat(proc, now)
            group.stores.pop(store_key, None)

    # ----- probes ---------------------------------------------------------------------------------
    def is_live(self, cluster: ClusterKey, pod_name: str, now: float) -> bool:
        """`GET /health`: the process serves HTTP (even before init)."""
        with self._lock:
            _, proc = self._proc(cluster, pod_name, now)
            return proc is not None and proc.running and proc.host_alive

    def is_ready(self, cluster: ClusterKey, pod_name: str, now: float) -> bool:
        """`GET /health?ready=1`: false before init, while draining, or when not live."""
        with self._lock:
            group, proc = self._proc(cluster, pod_name, now)
            return proc is not None and group.is_ready(proc)

    def http_get(self, cluster: ClusterKey, pod_name: str, now: float, port: int | None,
                 scheme: str, path: str) -> bool:
        """Whether an HTTP GET of `path` at `port` over `scheme` (HTTP or HTTPS), as a
        kubelet's probe sends it, counts as a success (2xx or 3xx, pkg/probe/http/http.go:129
        of Kubernetes 1.20).

        kwbase serves HTTP on --http-addr's port only (server/server.go:2600-2670): plain HTTP
        in an insecure cluster, and a TLS handshake with it fails. A secure node takes TLS on
        that port and plain HTTP too (cmux, server.go:2621-2658): /health is served in plain,
        every other path answers 307 to https://<same host><path>, which the kubelet follows,
        the host being the same (http.go:141-155), so the answer is the HTTPS one.

        Routes answered without a login (server.go:1773-1778, 2209-2220): `/health` and
        `/_admin/v1/health`, once the process serves HTTP; `?ready=` is parsed as a Go bool by
        the gateway, true asks for readiness too (is_ready), a value it cannot parse is a 400;
        `/_status/vars` (200). Any other path is a failure: KWDB V3.2.1 registers no UI handler
        at `/`, so Go's ServeMux answers 404, and the authenticated prefixes (/_admin/v1/,
        /_status/, /ts/, /debug/) answer 401 without a session cookie in a secure cluster (in
        an insecure one they are not modelled and count as failures too)."""
        with self._lock:
            _, proc = self._proc(cluster, pod_name, now)
            if proc is None or not (proc.running and proc.host_alive):
                return False
            if port != proc.opts.http_port or scheme not in ("HTTP", "HTTPS"):
                return False  # nothing listens there: connection refused
            if scheme == "HTTPS" and proc.opts.insecure:
                return False  # a TLS handshake with a plain HTTP server
            route, _, query = path.partition("?")
            if route == "/_status/vars":
                return True
            if route not in ("/health", "/_admin/v1/health"):
                return False  # 404 (or 401), after the 307 to https when plain on a secure node
            ready = "false"
            for pair in query.split("&") if query else ():
                name, _, value = pair.partition("=")
                if name == "ready":
                    ready = value
            parsed = parse_go_bool(ready)
            if parsed is None:
                return False
        return self.is_ready(cluster, pod_name, now) if parsed else True

    def tcp_open(self, cluster: ClusterKey, pod_name: str, now: float, port: int | None
                 ) -> bool:
        """Whether a TCP connection to `port` is accepted: the SQL/RPC port (--listen-addr)
        and the HTTP port (--http-addr) of a running process."""
        with self._lock:
            _, proc = self._proc(cluster, pod_name, now)
            return (proc is not None and proc.running and proc.host_alive
                    and port in (proc.opts.listen_port, proc.opts.http_port))

    def process_running(self, cluster: ClusterKey, pod_name: str) -> bool:
        """Whether the pod's kwbase server process is running (it may have quit)."""
        with self._lock:
            group = self._groups.get(cluster)
            proc = group.procs.get(pod_name) if group else None
            return proc is not None and proc.running

    def describe(self, cluster: ClusterKey, now: float) -> list[str]:
        """The simulator's truth about a cluster, one line per node id and per process: for a
        test that failed to say what KaiwuDB itself held (not what the reconciler saw)."""
        with self._lock:
            group = self._groups.get(cluster)
            if group is None:
                return [f"{cluster}: no KaiwuDB"]
            group.advance(now)
            lines = []
            for logical in group.clusters:
                for node in sorted(logical.nodes.values(), key=lambda n: n.node_id):
                    store = group.stores.get(node.store_key)
                    lines.append(
                        f"node {node.node_id} at {node.pod_name}: store {node.store_key[:8]}"
                        f"{'' if store is not None else ' (gone)'}, heartbeating "
                        f"{node.heartbeating}, live {logical.is_live(node, group.clock)}, "
                        f"decommissioning {node.decommissioning}")
            for proc in group.sorted_procs():
                found = group.node_of(proc)
                lines.append(
                    f"process {proc.pod_name}: store {proc.store_key[:8]}, node "
                    f"{found[1].node_id if found else None}, running {proc.running}, host alive "
                    f"{proc.host_alive}, waiting {proc.waiting}")
            return lines

    def logs(self, cluster: ClusterKey, pod_name: str) -> str:
        """What the pod's current (or last) kwbase process printed, for `kubectl logs`."""
        with self._lock:
            group = self._groups.get(cluster)
            proc = group.procs.get(pod_name) if group else None
            return "".join(proc.log) if proc else ""

    # ----- exec -----------------------------------------------------------------------------------
    def exec(
        self, cluster: ClusterKey, pod_name: str, argv: Sequence[str], now: float
    ) -> ExecResult:
        """Run a command in the pod's kwbase container (argv as the exec API passes it)."""
        with self._lock:
            group, proc = self._proc(cluster, pod_name, now)
            if proc is None or not proc.running:
                return ExecResult(
                    "", f"kwdb-sim: container kwbase of pod {pod_name} is not running\n", 126
                )
            if argv and argv[0].rsplit("/", 1)[-1] in FILE_COMMANDS:
                store = group.store_of(proc)
                out, err, code = file_command(
                    list(argv), f"{proc.opts.store_path}/{EXTERN}",
                    store.files if store is not None else None,
                    store.removed_outside if store is not None else None,
                )
                return ExecResult(out, err, code)
            if argv and argv[0].rsplit("/", 1)[-1] in _SHELLS:
                return ExecResult(
                    "",
                    f"kwdb-sim: refusing {argv[0]!r}: run kwbase directly with its arguments, "
                    "never through a shell\n",
                    126,
                )
            if not _binary_ok(argv):
                shown = argv[0] if argv else "<empty>"
                return ExecResult(
                    "",
                    f"kwdb-sim: only kwbase is simulated in this container, not {shown!r}\n",
                    127,
                )
            try:
                inv = parse(argv[1:])
            except CliError as e:
                err = e.usage + cli_error(e.message, e.command)
                return ExecResult("", err, 1)
            if inv.flag_true("help") or inv.command.path == ():
                return ExecResult(inv.command.usage(), "", 0)
            if not inv.command.modelled:
                return ExecResult(
                    "",
                    f"kwdb-sim: `kwbase {inv.command.name}` is not modelled by the simulated "
                    "KaiwuDB\n",
                    1,
                )
            if inv.command.path[0] in START_MODES:
                # A second server in the same container cannot bind the ports.
                return ExecResult(
                    "",
                    cli_error(
                        "kwbase server exited with error: consider changing the port via "
                        f"--listen-addr: listen tcp :{proc.opts.listen_port}: bind: address "
                        "already in use",
                        inv.command.name,
                    ),
                    1,
                )
            result = run_client_command(Env(group, proc, group.clock), inv)
            if not result.answers_at_end:
                return result
            started_at = proc.started_at

            def conclude(at: float) -> ExecResult:
                # A client exec'd in the pod talks to the pod's own server: if that server
                # stopped meanwhile, its container went, and the client with it (no status).
                with self._lock:
                    group_now, now_proc = self._proc(cluster, pod_name, at)
                    del group_now
                    if now_proc is None or not now_proc.running or \
                            now_proc.started_at != started_at:
                        return ExecResult("", "", -1)
                    return replace(result, duration_s=0.0, answers_at_end=False)

            return replace(result, conclude=conclude)

    # ----- inspection and test hooks ------------------------------------------------------------
    def _primary(self, cluster: ClusterKey, now: float) -> tuple[Group, LogicalCluster | None]:
        group, _ = self._group(cluster, now)
        return group, group.primary

    def nodes(self, cluster: ClusterKey, now: float) -> tuple[NodeView, ...]:
        """Every node id of the primary cluster, in id order."""
        with self._lock:
            group, primary = self._primary(cluster, now)
            if primary is None:
                return ()
            t = group.clock
            return tuple(
                NodeView(
                    node_id=n.node_id,
                    pod_name=n.pod_name,
                    store_key=n.store_key,
                    start_mode=n.start_mode,
                    build=n.build,
                    liveness=primary.liveness_status(n, t),
                    is_live=primary.is_live(n, t),
                    decommissioning=n.decommissioning,
                    draining=n.draining,
                    replicas=primary.replica_count(n.node_id),
                )
                for n in sorted(primary.nodes.values(), key=lambda n: n.node_id)
            )

    def replication(self, cluster: ClusterKey, now: float) -> ReplicationView:
        """The primary cluster's true replication health."""
        with self._lock:
            group, primary = self._primary(cluster, now)
            if primary is None:
                return ReplicationView(False, self.settings.replication_factor, 0, 0, 0)
            unavailable, under = primary.health(group.clock)
            return ReplicationView(
                True, primary.replication_factor, len(primary.ranges), unavailable, under
            )

    def tune(self, cluster: ClusterKey, now: float, **changes: float | int | bool | str) -> None:
        """Change KwdbSettings fields for one deployment only (e.g. a slow drain, a short gossip
        TTL), from now on: tests use it to make a real-time story out of minutes-long timers
        without a world of their own. Unknown field names raise TypeError."""
        with self._lock:
            group, now = self._group(cluster, now)
            group.settings = replace(group.settings, **changes)  # type: ignore[arg-type]
            for c in group.clusters:
                c.settings = group.settings

    def set_running_jobs(
        self, cluster: ClusterKey, count: int, now: float, job_type: str = "IMPORT"
    ) -> None:
        """Make SHOW JOBS list `count` running jobs of `job_type` besides the perpetual TS TXN
        job every cluster has (model.TS_TXN_JOB), to exercise the scale-in gate."""
        with self._lock:
            _, primary = self._primary(cluster, now)
            if primary is None:
                raise ValueError(f"{cluster}: no initialised cluster to run jobs in")
            primary.set_running_jobs(job_type, count, now)

    # ----- SQL data (tests/world/kwdb/data.py) ---------------------------------------------------
    def _data(self, cluster: ClusterKey, now: float) -> tuple[Group, SqlData]:
        group, primary = self._primary(cluster, now)
        if primary is None:
            raise ValueError(f"{cluster}: no initialised cluster to hold data")
        return group, primary.data

    def load(
        self,
        cluster: ClusterKey,
        now: float,
        *,
        database: str,
        table: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Sequence[str]],
        time_series: bool = False,
        schema: str = "public",
        keys: Mapping[str, Sequence[str]] | None = None,
        indexes: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Create the database and table when missing and write rows now (an application's
        INSERTs; SQL DDL/DML is not modelled). keys: the new table's primary key ("primary")
        and unique indexes, name -> columns (none: KWDB's hidden rowid); indexes: its other
        indexes."""
        with self._lock:
            group, data = self._data(cluster, now)
            engine = TIME_SERIES if time_series else RELATIONAL
            db = data.databases.setdefault(database, Database(database, engine))
            if db.engine != engine:
                raise ValueError(f"database {database} is {db.engine}, not {engine}")
            t = db.tables.get((schema, table)) or db.add_table(
                Table(table, tuple(columns), schema=schema,
                      keys={k: tuple(v) for k, v in (keys or {}).items()},
                      indexes={k: tuple(v) for k, v in (indexes or {}).items()}))
            t.rows.extend((group.clock, tuple(str(v) for v in row)) for row in rows)

    def create_database(self, cluster: ClusterKey, now: float, name: str,
                        time_series: bool = False) -> None:
        """CREATE [TS] DATABASE name: a database without tables."""
        with self._lock:
            engine = TIME_SERIES if time_series else RELATIONAL
            self._data(cluster, now)[1].databases.setdefault(name, Database(name, engine))

    def create_object(self, cluster: ClusterKey, now: float, *, database: str, name: str,
                      kind: str, schema: str = "public", definition: str = "(n) AS SELECT 1",
                      sequence: SequenceOptions | None = None,
                      value: int | None = None) -> None:
        """CREATE VIEW or CREATE SEQUENCE `name` in a relational database (kind: view or
        sequence). A view's `definition` is KWDB's text after its name, "(<columns>) AS
        <query>", its tables named in full as KWDB writes them; a sequence stores
        START - INCREMENT until used, or `value` (as nextval would have left it)."""
        if kind not in ("view", "sequence"):
            raise ValueError(f"kind {kind!r}: view or sequence")
        with self._lock:
            db = self._data(cluster, now)[1].databases.setdefault(
                database, Database(database, RELATIONAL))
            if kind == "view":
                db.add_table(Table(name, (), schema=schema, kind=kind, definition=definition))
                return
            sequence = sequence or SequenceOptions()
            stored = sequence.start - sequence.increment if value is None else value
            db.add_table(Table(name, (("value", "INT8"),), schema=schema, kind=kind,
                               sequence=sequence, value=stored))

    def grant(self, cluster: ClusterKey, now: float, text: str, database: str = "") -> None:
        """GRANT ... ON DATABASE | SCHEMA | TABLE ... TO ..., as a user types it (data.py
        `_grant`; a schema is named in `database`)."""
        if not text.lower().startswith("grant "):
            raise ValueError(f"not a GRANT: {text}")
        self.execute(cluster, now, text, database)

    def execute(self, cluster: ClusterKey, now: float, text: str, database: str = "") -> None:
        """A statement the simulated SQL knows (data.py), as a user types it, run in
        `database`: a GRANT, ALTER TABLE ... ADD CONSTRAINT ... FOREIGN KEY, COMMENT ON; its
        SqlError when KWDB would refuse it."""
        with self._lock:
            data = self._data(cluster, now)[1]
            session = Session(data, now, self.settings.epoch_unix_s, 0, lambda _: None, database)
            if statement(session, text) is None:
                raise ValueError(f"not a statement the simulator knows: {text}")

    def set_user(self, cluster: ClusterKey, now: float, name: str, options: str = "") -> None:
        """CREATE USER name [WITH options]."""
        with self._lock:
            self._data(cluster, now)[1].users[name] = options

    def set_setting(self, cluster: ClusterKey, now: float, name: str, value: str) -> None:
        """SET CLUSTER SETTING name = 'value'."""
        with self._lock:
            self._data(cluster, now)[1].settings[name] = value

    def set_bulk_rate(self, cluster: ClusterKey, now: float, rows_per_s: float) -> None:
        """EXPORT and IMPORT move `rows_per_s` rows a simulated second from now on (bulk.py)."""
        with self._lock:
            self._data(cluster, now)[1].bulk_rows_per_s = rows_per_s

    def add_finished_job(self, cluster: ClusterKey, now: float, job_type: str,
                         description: str, error: str) -> None:
        """A job row that ended at `now` (an earlier attempt's, for tests): failed with
        `error`, or succeeded when it is empty."""
        with self._lock:
            _, primary = self._primary(cluster, now)
            if primary is None:
                raise ValueError(f"{cluster}: no initialised cluster to hold jobs")
            job = primary.add_job(job_type, description, "", now)
            job.status, job.finished, job.error = ("failed" if error else "succeeded"), now, error

    def jobs(self, cluster: ClusterKey, now: float) -> list[Job]:
        """Every job row of the cluster (copies), oldest first."""
        with self._lock:
            _, primary = self._primary(cluster, now)
            return [replace(j) for j in (primary.jobs if primary is not None else ())]

    def set_export_chunk_rows(self, cluster: ClusterKey, now: float, rows: int) -> None:
        """EXPORT starts a new data file every `rows` rows (KWDB's chunk_rows)."""
        with self._lock:
            self._data(cluster, now)[1].export_chunk_rows = rows

    def fail_export(self, cluster: ClusterKey, now: float, table: str, on: bool = True) -> None:
        """Make EXPORT of `table` fail (relational: a NOTICE, no data file; time-series:
        result = fail and a NOTICE) until turned off."""
        with self._lock:
            faults = self._data(cluster, now)[1].export_faults
            faults.add(table) if on else faults.discard(table)

    def contents(self, cluster: ClusterKey, now: float) -> dict[str, object]:
        """What a person compares after a restore: databases with their engine and each
        table's rows (sorted), each view's definition, each sequence's options and value,
        users, cluster settings, grants, foreign keys, comments."""
        with self._lock:
            _, data = self._data(cluster, now)
            return {
                "databases": {
                    db.name: (db.engine, {
                        (t.name if t.schema == "public" else f"{t.schema}.{t.name}"):
                        sorted(t.rows_at(None)) if t.kind == "table"
                        else ("view", t.definition) if t.kind == "view"
                        else ("sequence", t.sequence, t.value)
                        for t in db.tables.values()})
                    for db in data.databases.values()
                },
                "users": dict(data.users),
                "settings": dict(data.settings),
                "grants": {db.name: _grants_of(db) for db in data.databases.values()},
                "foreign_keys": {db.name: sorted(
                    (t.schema, t.name, name, fk) for t in db.tables.values()
                    for name, fk in t.foreign_keys.items()) for db in data.databases.values()},
                "comments": {db.name: sorted(
                    [("database", "", db.comment)] * (db.comment is not None)
                    + [(f"table {t.schema}.{t.name}", "", t.comment) for t in db.tables.values()
                       if t.comment is not None]
                    + [(f"column {t.schema}.{t.name}", c, text) for t in db.tables.values()
                       for c, text in t.column_comments.items()]
                    + [(f"index {t.schema}.{t.name}", i, text) for t in db.tables.values()
                       for i, text in t.index_comments.items()])
                    for db in data.databases.values()},
            }

    def removed_outside_extern(self, cluster: ClusterKey) -> list[str]:
        """Every path outside a store's external-I/O directory an `rm -rf` reached, in any of
        the cluster's stores (a real node would have lost those files)."""
        with self._lock:
            group = self._groups.get(cluster)
            return [p for store in (group.stores.values() if group else ())
                    for p in store.removed_outside]

    def extern_files(self, cluster: ClusterKey, pod_name: str) -> dict[str, bytes]:
        """The files in the external-I/O directory of the store the pod runs on."""
        with self._lock:
            group = self._groups.get(cluster)
            proc = group.procs.get(pod_name) if group else None
            store = group.store_of(proc) if group and proc else None
            return dict(store.files) if store is not None else {}


def _grants_of(db: Database) -> list[tuple[str, str, str]]:
    """(object, grantee, privilege) of everything granted in `db` beyond root's and admin's."""
    held = [("database", db.grants)]
    held += [(f"schema {schema}", grants) for schema, grants in db.schema_grants.items()]
    held += [(f"{t.kind} {t.schema}.{t.name}", t.grants) for t in db.tables.values()]
    return sorted((what, user, priv) for what, grants in held
                  for user, priv in shown_privileges(grants) if user not in ("admin", "root"))

