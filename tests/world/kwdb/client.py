"""Connections of the simulated `kwbase` client: reaching `--host`, and the errors on the way.

Used by tests/world/kwdb/commands.py and tests/world/kwdb/sql.py. The client reaches `--host`
(default localhost:26257) or `--url` from inside the exec'd pod, resolved by `Group.connect`.
Failures are decorated as kwbase/pkg/cli/error.go MaybeDecorateGRPCError does (KWDB/KWDB):
"cannot dial server. Is the server running? ..." for refused connections, the
insecure/secure mismatch hints, "cannot load certificates" when neither --insecure nor
--certs-dir is given. SQL connections to a node still waiting for `kwbase init` hang until the
connect timeout (kwbase/pkg/cli/sql_util.go `connect_timeout`, 15 s); gRPC calls to it fail with
`node waiting for init; <method> not available` (server/grpc_server.go). Certificate files are
not checked. Go prints resolved IP addresses in dial errors; the simulation prints the host name
as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from tests.world.kwdb.flags import Invocation
from tests.world.kwdb.model import LogicalCluster, NodeRecord
from tests.world.kwdb.render import RENDERED_FORMATS
from tests.world.kwdb.state import (
    DEFAULT_PORT,
    ConnectError,
    Group,
    Proc,
    split_host_port,
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
    def connect_timeout_s(self) -> float:
        return self.group.settings.connect_timeout_s


class Fail(Exception):
    """A handler's failure: becomes `ERROR: ...` on stderr and exit code 1."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        sqlstate: str | None = None,
        stderr_before: str = "",
        stdout_before: str = "",
        duration_s: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.stdout_before = stdout_before
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
        raise Fail(str(e)) from e
    return host, int(port) if port.isdigit() else DEFAULT_PORT, None


def connect(env: Env, inv: Invocation, *, grpc: bool, wrap: str = "") -> Proc:
    """Reach the server the flags name, or raise the decorated error the CLI prints."""
    host, port, url_insecure = _target_address(inv)
    insecure = inv.flag_true("insecure") if url_insecure is None else url_insecure
    if not insecure and not inv.get("certs-dir") and not inv.get("url"):
        raise Fail(_NO_CERTS)
    target = env.group.connect(env.origin, host, port)
    if isinstance(target, ConnectError):
        dial = _dial_text(target)
        timeout = env.connect_timeout_s if target.kind == "timeout" else 0.0
        if not grpc:
            raise Fail(_DIAL_FAILED + dial, duration_s=timeout)
        err = f'{wrap}{_GRPC_HEARTBEAT}Error while dialing {dial}""'
        if target.kind == "refused":
            raise Fail(_DIAL_FAILED + err)
        raise Fail(err, duration_s=timeout)
    if target.opts.insecure and not insecure:
        if grpc:
            inner = (
                f"{wrap}{_GRPC_HEARTBEAT}authentication handshake failed: tls: first record "
                'does not look like a TLS handshake"'
            )
        else:
            inner = "pq: SSL is not enabled on the server"
        raise Fail(
            "cannot establish secure connection to insecure server.\nMaybe use --insecure?\n\n"
            + inner
        )
    if not target.opts.insecure and insecure:
        if grpc:
            raise Fail(
                "server closed the connection.\nIs this a KwDB node?\n"
                + _INSECURE_EXTRA
                + f"\n{wrap}initial connection heartbeat failed: rpc error: code = Unavailable "
                "desc = transport is closing"
            )
        raise Fail(
            "SSL authentication error while connecting.\n"
            + _INSECURE_EXTRA
            + "\npq: node is running secure mode, SSL connection required"
        )
    return target


def sql_session(env: Env, inv: Invocation) -> tuple[Proc, LogicalCluster]:
    """A SQL connection: hangs until the connect timeout on a node waiting for init."""
    target = connect(env, inv, grpc=False)
    found = env.group.node_of(target)
    if target.waiting is not None or found is None:
        host, port, _ = _target_address(inv)
        raise Fail(
            _DIAL_FAILED + f"read tcp {host or 'localhost'}:{port}: i/o timeout",
            duration_s=env.connect_timeout_s,
        )
    if found[1].draining:
        raise Fail("server is not accepting clients", sqlstate="57P01")
    return target, found[0]


def rpc_node(env: Env, inv: Invocation, method: str) -> tuple[Proc, LogicalCluster, NodeRecord]:
    """A gRPC admin/status connection to an initialised node."""
    target = connect(env, inv, grpc=True, wrap="Failed to connect to the node: ")
    found = env.group.node_of(target)
    if target.waiting is not None or found is None:
        raise Fail(
            "rpc error: code = Unavailable desc = node waiting for init; "
            f"/kwbase.server.serverpb.{method} not available"
        )
    return target, found[0], found[1]


def output_format(inv: Invocation) -> str:
    fmt = inv.get("format", "tsv")  # exec has no terminal: kwbase defaults to tsv
    if fmt not in RENDERED_FORMATS:
        raise Fail(f"kwdb-sim: --format={fmt} is not modelled by the simulated KaiwuDB")
    return fmt


def bool_text(value: bool) -> str:
    return "true" if value else "false"
