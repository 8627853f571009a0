"""The simulated kubelet's HTTPS endpoint: exec over websockets and SPDY, container logs, healthz.

The real kube-apiserver reaches a kubelet at the node's InternalIP and the port in
`status.daemonEndpoints.kubeletEndpoint`. For `pods/exec` it asks for
`/exec/{namespace}/{pod}/{container}?command=...&output=1&error=1` (it renames the client's
stdin/stdout/stderr to input/output/error: pkg/registry/core/pod/strategy.go:403-420,
pkg/apis/core/types.go:5119-5127). The 1.20 API server passes the client's upgrade through as
it came: websocket from the Python client, SPDY/3.1 from kubectl 1.20. A 1.36 API server by
default turns a websocket exec that offers v5.channel.k8s.io (the Python client and kubectl
1.30 and later do) into SPDY towards the kubelet (feature gate
TranslateStreamCloseWebsocketRequests, k8s.io/apiserver/pkg/util/proxy/streamtranslator.go),
and passes SPDY and older websocket requests through. This module answers both as the 1.20
kubelet's streaming server does (file:line below are in Kubernetes 1.20.2,
pkg/kubelet/cri/streaming/remotecommand unless named otherwise):

- options first (httpstream.go:50-72, read by pkg/kubelet/server/server.go:784-805 before
  anything else): `input`, `output`, `error` and `tty` count only as "1"; a request asking for
  none of the first three gets 400; with a TTY there is no stderr.
- websocket, when the request says `Upgrade: websocket` (createStreams, httpstream.go:105-123;
  websocket.go:73-132): the subprotocol is the first one the client offers that the server knows,
  in the client's order (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, `channel.k8s.io`,
  `base64.channel.k8s.io`, or none at all); v5 is unknown to 1.20 so clients fall back to v4.
  Every message starts with its channel byte (0 stdin, 1 stdout, 2 stderr, 3 error/status); the
  base64 variants send the channel as an ASCII digit and the payload base64-encoded. Right after
  the handshake an empty message goes to the lowest requested output channel.
- SPDY/3.1 otherwise (createHTTPStreamStreams, httpstream.go:125-190): the protocol is the first
  of the client's `X-Stream-Protocol-Version` values the server supports (`v4.channel.k8s.io`,
  `v3.channel.k8s.io`, `v2.channel.k8s.io`, `channel.k8s.io`; httpstream.Handshake); none
  offered: 400; none in common: 403 listing the supported ones; then `101 Switching Protocols`
  with `Connection: Upgrade`, `Upgrade: SPDY/3.1` and the chosen version. The kubelet waits up to
  30 s for the client's streams, told apart by their `streamtype` header: `error` always,
  `stdin`/`stdout`/`stderr` as the options ask, `resize` with a TTY on v3 and v4; the command's
  output goes out as data frames on its streams; at the end every stream is reset and GOAWAY
  ends the connection. The framing is tests/world/spdy.py (moby/spdystream's).
- the end, over either (exec.go:44-79): v4 writes a metav1.Status as JSON on the error
  channel or stream: Success, or Failure with reason NonZeroExitCode and a cause
  {reason: ExitCode, message: "<code>"}; older protocols write only the error text on failure
  (v1WriteStatusFunc, httpstream.go:426-446).

v5.channel.k8s.io is served over neither: 1.20 knows no v5, and the kubelet's SPDY handler has no
case for it in 1.20 nor in the current source (staging/src/k8s.io/kubelet/pkg/cri/streaming/
remotecommand/httpstream.go; kubernetes PR 136174, which would have added one, was closed), so
a 1.36 API server's translator, which offers v5 first, settles on v4 here. Not modelled: stdin
(its stream or channel is accepted and what comes on it dropped), TTYs and resizing, attach,
port-forward.

Websocket and SPDY share a port, so one HTTP/1.1 front per node reads each request's head and
routes it, as the kubelet's Go server does; the websocket side is the websockets package's
sans-I/O protocol, the SPDY side tests/world/spdy.py, and everything but the framing is shared
(`KubeletServer._run`). Each simulated node owns one `KubeletServer` on its own loopback
address; all servers share one asyncio loop in a background thread (`ServerLoop`). Created and
driven by tests/world/kubelet.py.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import datetime
import ipaddress
import json
import logging
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.datastructures import Headers
from websockets.exceptions import NegotiationError
from websockets.frames import CloseCode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from tests.world import spdy

log = logging.getLogger(__name__)

STDOUT_CHANNEL = 1
STDERR_CHANNEL = 2
ERROR_CHANNEL = 3

# Order matters only for logging; selection follows the client's order, as Go's handshake does.
KNOWN_PROTOCOLS: tuple[str, ...] = (
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
)
# remotecommandconsts.SupportedStreamingProtocols (apimachinery/pkg/util/remotecommand/
# constants.go:53), in the server's order; the client's order decides.
SPDY_PROTOCOLS: tuple[str, ...] = (
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
)
# DefaultStreamCreationTimeout (constants.go:26): how long the kubelet waits for SPDY streams.
STREAM_CREATION_TIMEOUT_S = 30.0
# How long a request's head, and a websocket's closing handshake, may take.
HEAD_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 10.0
SERVER_HEADER = "sim-kubelet"

T = TypeVar("T")


@dataclass(frozen=True)
class CommandResult:
    """What a command run in a container produced, and how long to wait before answering (the
    real command's run time, which the simulation computes at once)."""

    stdout: bytes
    stderr: bytes
    exit_code: int
    delay_s: float = 0.0
    # The command answers only when it ends (see tests/world/kwdb/state.py ExecResult).
    answers_at_end: bool = False
    # The stream closes with no exit status: the command was still running when the kubelet
    # stopped waiting for it (the client sees what a time-out shows, no status).
    no_status: bool = False
    # For a command that answers at its end: its answer then (called after the delay).
    conclude: Callable[[], CommandResult] | None = None


class ExecRefused(Exception):
    """The kubelet refuses the request before any upgrade (no such pod, container not running)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ExecBackend(Protocol):
    """What a node's server asks its kubelet. Called from a worker thread, never the loop."""

    def check_exec(self, node: str, namespace: str, pod: str, container: str) -> None:
        """Raise ExecRefused when the container cannot take an exec right now."""

    def run_exec(
        self, node: str, namespace: str, pod: str, container: str, argv: Sequence[str]
    ) -> CommandResult:
        """Run argv in the container; may raise ExecRefused if it vanished meanwhile."""

    def container_log(self, node: str, namespace: str, pod: str, container: str) -> str:
        """The container's log text; raise ExecRefused if there is none."""


@dataclass(frozen=True)
class ServingCert:
    """A self-signed serving certificate and key on disk, as a kubelet without TLS bootstrap has."""

    cert_path: Path
    key_path: Path

    @staticmethod
    def create(directory: Path, node_name: str, address: str) -> ServingCert:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_name}@sim-kubelet")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(node_name), x509.IPAddress(ipaddress.ip_address(address))]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_path = directory / f"{node_name}.crt"
        key_path = directory / f"{node_name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_path.chmod(0o600)
        return ServingCert(cert_path=cert_path, key_path=key_path)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        # The apiserver's upgrade dialer speaks HTTP/1.1; never negotiate h2.
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx


class ServerLoop:
    """One asyncio loop in a daemon thread, shared by all simulated nodes' servers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="sim-kubelet-servers", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        """Run a coroutine on the loop and wait for its result from another thread."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()


@dataclass(frozen=True)
class ExecOptions:
    """Which streams the request asks for (remotecommand.Options, httpstream.go:40-72)."""

    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @staticmethod
    def parse(query: dict[str, list[str]]) -> ExecOptions | None:
        """NewOptions: only "1" counts; None when none of stdin, stdout, stderr is asked for."""

        def flag(name: str) -> bool:
            return query.get(name, [""])[0] == "1"

        tty = flag("tty")
        opts = ExecOptions(flag("input"), flag("output"), flag("error") and not tty, tty)
        return opts if opts.stdin or opts.stdout or opts.stderr else None


def _exit_status(result: CommandResult, argv: Sequence[str]) -> dict[str, Any]:
    # exec.go:53-78: Success, or NonZeroExitCode with the code as a cause.
    if result.exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            # containerd's wording, which the 1.20 kubelet wraps.
            "command terminated with non-zero exit code: error executing command "
            f"[{' '.join(argv)}], exit code {result.exit_code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(result.exit_code)}]},
    }


def _internal_error(message: str) -> dict[str, Any]:
    # exec.go:69-72: apierrors.NewInternalError of the runtime's error.
    text = f"error executing command in container: {message}"
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {text}",
        "reason": "InternalError",
        "details": {"causes": [{"message": text}]},
        "code": 500,
    }


class _Channels(abc.ABC):
    """Where a command's output and status go: the only part the websocket and SPDY paths do
    not share."""

    def __init__(self, v4: bool) -> None:
        self.v4 = v4

    @abc.abstractmethod
    async def write(self, channel: int, data: bytes) -> None:
        """Send data on a channel (STDOUT_CHANNEL, STDERR_CHANNEL or ERROR_CHANNEL)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """End the connection as the kubelet does once the command is over."""

    async def status(self, status: dict[str, Any]) -> None:
        # v4WriteStatusFunc and v1WriteStatusFunc (httpstream.go:426-446), chosen by protocol
        # for SPDY and for websockets alike (websocket.go:124-129).
        if self.v4:
            await self.write(ERROR_CHANNEL, json.dumps(status, separators=(",", ":")).encode())
        elif status["status"] != "Success":
            await self.write(ERROR_CHANNEL, str(status["message"]).encode())


class _WebSocketChannels(_Channels):
    def __init__(self, protocol: ServerProtocol, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        subprotocol = protocol.subprotocol or ""
        super().__init__(v4=subprotocol.startswith("v4."))
        self._protocol = protocol
        self._writer = writer
        self._base64 = "base64" in subprotocol
        # Frames from the client: the protocol answers pings and the closing handshake itself;
        # stdin and resize messages are dropped.
        self._pump = asyncio.create_task(self._read(reader))

    async def write(self, channel: int, data: bytes) -> None:
        if self._protocol.state is not State.OPEN:
            return
        if self._base64:
            self._protocol.send_text(f"{channel}{base64.b64encode(data).decode()}".encode())
        else:
            self._protocol.send_binary(bytes([channel]) + data)
        await self._flush()

    async def close(self) -> None:
        # wsstream's Conn.Close sends a normal closure; wait for the client's answer.
        if self._protocol.state is State.OPEN:
            self._protocol.send_close(CloseCode.NORMAL_CLOSURE)
            await self._flush()
        await asyncio.wait({self._pump}, timeout=CLOSE_TIMEOUT_S)
        self._pump.cancel()

    async def _flush(self) -> None:
        for data in self._protocol.data_to_send():
            if data:  # an empty item asks for end of file, which TLS cannot half-do
                self._writer.write(data)
        await self._writer.drain()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while self._protocol.state is not State.CLOSED:
                data = await reader.read(64 * 1024)
                if data:
                    self._protocol.receive_data(data)
                else:
                    self._protocol.receive_eof()
                self._protocol.events_received()
                await self._flush()
                if not data:
                    return
        except OSError as err:
            log.debug("websocket connection lost: %r", err)


# The SPDY stream (its `streamtype`) that carries each channel.
_STREAM_TYPES = {STDOUT_CHANNEL: "stdout", STDERR_CHANNEL: "stderr", ERROR_CHANNEL: "error"}


class _SpdyChannels(_Channels):
    def __init__(self, session: spdy.ServerSession, protocol: str, streams: dict[str, int]):
        super().__init__(v4=protocol == "v4.channel.k8s.io")
        self._session = session
        self._streams = streams

    async def write(self, channel: int, data: bytes) -> None:
        stream_id = self._streams.get(_STREAM_TYPES[channel])
        if stream_id is not None:
            await self._session.write(stream_id, data)

    async def close(self) -> None:
        await self._session.close()


def _select_subprotocol(
    _protocol: ServerProtocol, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    # Go's wsstream handshake walks the client's list in order and takes the first it knows; a
    # client offering nothing gets the plain binary channel protocol.
    for proto in offered:
        if proto in KNOWN_PROTOCOLS:
            return proto
    if offered:
        raise NegotiationError(
            f"requested protocol(s) are not supported: {list(offered)}; "
            f"supports {list(KNOWN_PROTOCOLS)}"
        )
    return None


def _comma_values(values: Iterable[str]) -> list[str]:
    # commaSeparatedHeaderValues (apimachinery/pkg/util/httpstream/httpstream.go:117-127).
    return [p.strip() for value in values for p in value.split(",") if p.strip()]


def _go_header(headers: Headers) -> str:
    # fmt's %#v of an http.Header, as the upgrader's refusal prints it: canonical keys, sorted,
    # Host apart (Go keeps it in Request.Host).
    keys = sorted({"-".join(w.capitalize() for w in k.split("-")) for k in headers} - {"Host"})
    return "http.Header{" + ", ".join(
        f"{json.dumps(k)}:[]string{{{', '.join(json.dumps(v) for v in headers.get_all(k))}}}"
        for k in keys) + "}"


def _http_response(status: int, headers: Sequence[tuple[str, str]] = (),
                   body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", *(f"{k}: {v}" for k, v in headers),
             f"Date: {formatdate(usegmt=True)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _text(status: int, text: str, extra: Sequence[tuple[str, str]] = ()) -> bytes:
    body = text.encode()
    return _http_response(status, [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
        ("Server", SERVER_HEADER),
        *extra,
    ], body)


@dataclass(frozen=True)
class _Request:
    method: str
    path: list[str]  # the path's segments, unquoted
    query: dict[str, list[str]]
    headers: Headers
    head: bytes  # as received, for the websocket protocol to parse again

    @staticmethod
    def parse(head: bytes) -> _Request | None:
        lines = head.decode("latin-1").split("\r\n")
        request_line = lines[0].split(" ")
        if len(request_line) != 3:
            return None
        headers = Headers()
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                headers[name.strip()] = value.strip()
        url = urlsplit(request_line[1])
        return _Request(
            method=request_line[0],
            path=[unquote(p) for p in url.path.strip("/").split("/")],
            query=parse_qs(url.query, keep_blank_values=True),
            headers=headers,
            head=head,
        )

    def first(self, name: str) -> str:
        values = self.headers.get_all(name)
        return values[0] if values else ""

    def is_websocket(self) -> bool:
        # wsstream.IsWebSocketRequest: Upgrade: websocket on an upgrade request.
        return (self.first("Upgrade").lower() == "websocket"
                and any("upgrade" in v.lower() for v in self.headers.get_all("Connection")))


def _log_window(text: str, query: dict[str, list[str]]) -> str:
    """The part of a log `kubectl logs --tail/--limit-bytes` asks for (follow is not streamed)."""
    tail = query.get("tailLines", [""])[0]
    if tail.isdigit():
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(tail):]) if int(tail) else ""
    limit = query.get("limitBytes", [""])[0]
    if limit.isdigit():
        text = text.encode()[: int(limit)].decode(errors="ignore")
    return text


class KubeletServer:
    """The HTTPS server of one simulated node. start/stop from any thread via the ServerLoop."""

    def __init__(
        self,
        loop: ServerLoop,
        node_name: str,
        address: str,
        cert: ServingCert,
        backend: ExecBackend,
    ) -> None:
        self.node_name = node_name
        self.address = address
        self.port = 0
        self._loop = loop
        self._cert = cert
        self._backend = backend
        self._server: asyncio.Server | None = None
        # Every connection's task and writer, so that stop() can drop them all.
        self._connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> int:
        """Listen (again) on the node's address; keeps the first port it got. Returns the port."""
        if self._server is None:
            self._server = self._loop.call(self._start())
            self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def stop(self) -> None:
        """Stop listening and drop open connections: the node looks powered off."""
        server, self._server = self._server, None
        if server is not None:
            self._loop.call(self._stop(server))

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(
            self._connection, self.address, self.port, ssl=self._cert.ssl_context())

    async def _stop(self, server: asyncio.Server) -> None:
        server.close()
        for task, writer in list(self._connections.items()):
            writer.transport.abort()
            task.cancel()
        if self._connections:
            await asyncio.wait(set(self._connections))
        await server.wait_closed()

    async def _in_thread(self, func: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        """One request per connection: every answer says `Connection: close`, and an upgraded
        connection ends with its exec."""
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            request = _Request.parse(head)
            if request is None:
                writer.write(_text(400, "malformed request\n"))
            else:
                await self._route(request, reader, writer)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError, ssl.SSLError) as err:
            log.debug("%s: connection ended: %r", self.node_name, err)
        except asyncio.CancelledError:
            # stop() dropped the connection. Ending quietly: Python 3.11's start_server logs
            # a cancelled handler task as an error (its done callback asks task.exception()).
            log.debug("%s: connection dropped", self.node_name)
        finally:
            del self._connections[task]
            writer.close()

    async def _route(self, request: _Request, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        parts = request.path
        if parts == ["healthz"]:
            writer.write(_text(200, "ok"))
            return
        if len(parts) == 4 and parts[0] == "containerLogs":
            try:
                text = await self._in_thread(
                    self._backend.container_log, self.node_name, *parts[1:])
            except ExecRefused as err:
                writer.write(_text(err.status, err.message))
                return
            writer.write(_text(200, _log_window(text, request.query)))
            return
        if len(parts) == 4 and parts[0] == "exec":
            await self._exec_request(request, reader, writer)
            return
        writer.write(_text(404, "404 page not found\n"))

    async def _exec_request(self, request: _Request, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        # pkg/kubelet/server/server.go:784-805 getExec: options, then the pod and container.
        opts = ExecOptions.parse(request.query)
        if opts is None:
            writer.write(_text(400, "you must specify at least 1 of stdin, stdout, stderr"))
            return
        _, namespace, pod, container = request.path
        try:
            await self._in_thread(self._backend.check_exec, self.node_name, namespace, pod,
                                  container)
        except ExecRefused as err:
            writer.write(_text(err.status, err.message))
            return
        target = (namespace, pod, container)
        argv = request.query.get("command", [])
        if request.is_websocket():
            channels: _Channels | None = await self._websocket(request, reader, writer, opts)
        else:
            channels = await self._spdy(request, reader, writer, opts)
        if channels is not None:
            await self._run(channels, target, argv, opts)

    async def _websocket(self, request: _Request, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter, opts: ExecOptions) -> _Channels | None:
        """The websocket handshake; the channels once open, after the kubelet's empty hello."""
        protocol = ServerProtocol(subprotocols=[Subprotocol(p) for p in KNOWN_PROTOCOLS],
                                  select_subprotocol=_select_subprotocol)
        protocol.receive_data(request.head)
        events = protocol.events_received()
        if events and isinstance(events[0], Request):
            response = protocol.accept(events[0])
            response.headers["Server"] = SERVER_HEADER
            protocol.send_response(response)
        for data in protocol.data_to_send():
            writer.write(data)
        if protocol.state is not State.OPEN:
            return None
        channels = _WebSocketChannels(protocol, reader, writer)
        # websocket.go:104-113: tell the client the streams are open.
        await channels.write(
            STDOUT_CHANNEL if opts.stdout else STDERR_CHANNEL if opts.stderr else ERROR_CHANNEL,
            b"")
        return channels

    async def _spdy(self, request: _Request, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter, opts: ExecOptions) -> _Channels | None:
        """The SPDY upgrade and the client's streams (createHTTPStreamStreams,
        httpstream.go:125-190); None when there is no exec to run."""
        # httpstream.Handshake (apimachinery/pkg/util/httpstream/httpstream.go:135-156).
        offered = _comma_values(request.headers.get_all("X-Stream-Protocol-Version"))
        if not offered:
            writer.write(_text(400, "unable to upgrade: X-Stream-Protocol-Version is required\n"))
            return None
        chosen = next((p for p in offered if p in SPDY_PROTOCOLS), "")
        if not chosen:
            message = ("unable to upgrade: unable to negotiate protocol: client supports "
                       f"[{' '.join(offered)}], server accepts [{' '.join(SPDY_PROTOCOLS)}]\n")
            # Handshake answers 403 and its caller then writes the error again into the body
            # (httpstream.go:151 here, remotecommand/httpstream.go:126-129).
            writer.write(_text(403, message * 2, [
                ("X-Content-Type-Options", "nosniff"),
                *(("X-Accepted-Stream-Protocol-Versions", p) for p in SPDY_PROTOCOLS)]))
            return None
        # spdy.responseUpgrader.UpgradeResponse (httpstream/spdy/upgrade.go:86-117).
        if ("upgrade" not in request.first("Connection").lower()
                or "spdy/3.1" not in request.first("Upgrade").lower()):
            writer.write(_text(400, "unable to upgrade: missing upgrade headers in request: "
                                    f"{_go_header(request.headers)}\n"))
            return None
        writer.write(_http_response(101, [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"),
                                          ("X-Stream-Protocol-Version", chosen)]))
        log.debug("%s: exec in %s over SPDY %s", self.node_name, "/".join(request.path[1:]),
                  chosen)
        session = spdy.ServerSession(reader, writer)
        streams = await self._spdy_streams(session, chosen, opts)
        if streams is None:
            # The kubelet gives up on the exec but leaves the connection to the client (its
            # idle timeout is 4 h): nothing more is said on it.
            await session.wait_closed()
            return None
        if chosen == "channel.k8s.io":
            # v1ProtocolHandler (httpstream.go:357-407): the error stream is reset as the wait
            # ends (so a failure's text never reaches the client) and stdin is closed.
            await session.reset(streams.get("error", 0))
            await session.finish(streams.get("stdin", 0))
        return _SpdyChannels(session, chosen, streams)

    @staticmethod
    async def _spdy_streams(session: spdy.ServerSession, protocol: str,
                            opts: ExecOptions) -> dict[str, int] | None:
        """waitForStreams (httpstream.go:207-251 and its v1-v3 twins): the stream of each type
        once as many as expected have been answered; None if they never come."""
        resizing = protocol in ("v4.channel.k8s.io", "v3.channel.k8s.io")
        known = {"error", "stdin", "stdout", "stderr"} | ({"resize"} if resizing else set())
        expected = 1 + opts.stdin + opts.stdout + opts.stderr + (opts.tty and resizing)
        streams: dict[str, int] = {}

        async def gather() -> bool:
            received = 0
            while received < expected:
                stream = await session.next_stream()
                if stream is None:
                    return False
                kind = stream.headers.get("streamtype", [""])[0]
                if kind in known:
                    streams[kind] = stream.stream_id
                    received += 1
                else:
                    log.warning("exec over SPDY: unexpected stream type %r", kind)
            return True

        try:
            complete = await asyncio.wait_for(gather(), STREAM_CREATION_TIMEOUT_S)
        except TimeoutError:
            log.warning("exec over SPDY: timed out waiting for client to create streams")
            complete = False
        session.accepting = False
        return streams if complete else None

    async def _run(self, channels: _Channels, target: tuple[str, str, str],
                   argv: Sequence[str], opts: ExecOptions) -> None:
        """ServeExec (exec.go:44-79) once the streams are up, for either transport."""
        try:
            result = await self._in_thread(self._backend.run_exec, self.node_name, *target, argv)
        except ExecRefused as err:
            await channels.status(_internal_error(err.message))
            await channels.close()
            return
        if result.delay_s > 0:
            await asyncio.sleep(result.delay_s)
        if result.conclude is not None:
            result = await self._in_thread(result.conclude)
        if result.no_status or result.exit_code < 0:
            await channels.close()
            return
        if opts.stdout and result.stdout:
            await channels.write(STDOUT_CHANNEL, result.stdout)
        if opts.stderr and result.stderr:
            await channels.write(STDERR_CHANNEL, result.stderr)
        await channels.status(_exit_status(result, argv))
        await channels.close()
