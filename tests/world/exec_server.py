"""The simulated kubelet's HTTPS endpoint: exec over websockets, container logs, healthz.

The real kube-apiserver reaches a kubelet at the node's InternalIP and the port in
`status.daemonEndpoints.kubeletEndpoint`, and for `pods/exec` passes the client's websocket
upgrade straight through to `/exec/{namespace}/{pod}/{container}?command=...&output=1&error=1`
(the apiserver renames stdin/stdout/stderr to input/output/error). This module answers that the
way the 1.20 kubelet's streaming server does (k8s.io/apiserver/pkg/util/wsstream and
pkg/kubelet/cri/streaming/remotecommand):

- subprotocol: the first one the client offers that the server knows, in the client's order
  (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, `channel.k8s.io`, `base64.channel.k8s.io`,
  or none at all); v5 is unknown to 1.20 so clients fall back to v4.
- every message starts with its channel byte (0 stdin, 1 stdout, 2 stderr, 3 error/status); the
  base64 variants send the channel as an ASCII digit and the payload base64-encoded.
- right after the handshake an empty message goes to the lowest requested output channel.
- v4 ends with a metav1.Status as JSON on channel 3: Success, or Failure with reason
  NonZeroExitCode and a cause {reason: ExitCode, message: "<code>"}; older protocols write only
  the error text on failure.

SPDY (what kubectl 1.20 uses) is not served. Each simulated node owns one `KubeletServer` on its
own loopback address; all servers share one asyncio loop in a background thread (`ServerLoop`).
Created and driven by tests/world/kubelet.py.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import logging
import ssl
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

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


def _select_subprotocol(
    _connection: ServerConnection, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    # Go's wsstream handshake walks the client's list in order and takes the first it knows; a
    # client offering nothing gets the plain binary channel protocol.
    for proto in offered:
        if proto in KNOWN_PROTOCOLS:
            return proto
    if offered:
        from websockets.exceptions import NegotiationError

        raise NegotiationError(
            f"requested protocol(s) are not supported: {list(offered)}; "
            f"supports {list(KNOWN_PROTOCOLS)}"
        )
    return None


def _flag(query: dict[str, list[str]], *names: str) -> bool:
    return any(query.get(name, [""])[0] in ("1", "true") for name in names)


def _status_json(result: CommandResult, argv: Sequence[str]) -> bytes:
    if result.exit_code == 0:
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
    else:
        status = {
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
    return json.dumps(status, separators=(",", ":")).encode()


def _internal_error_json(message: str) -> bytes:
    text = f"error executing command in container: {message}"
    status = {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {text}",
        "reason": "InternalError",
        "details": {"causes": [{"message": text}]},
        "code": 500,
    }
    return json.dumps(status, separators=(",", ":")).encode()


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
        self._server: Server | None = None

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

    async def _start(self) -> Server:
        return await serve(
            self._handle,
            self.address,
            self.port,
            ssl=self._cert.ssl_context(),
            subprotocols=[Subprotocol(p) for p in KNOWN_PROTOCOLS],
            select_subprotocol=_select_subprotocol,
            process_request=self._process_request,
            compression=None,
            server_header="sim-kubelet",
        )

    @staticmethod
    async def _stop(server: Server) -> None:
        server.close(close_connections=True)
        await server.wait_closed()

    async def _in_thread(self, func: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)

    @staticmethod
    def _text(status: int, text: str) -> Response:
        body = text.encode()
        headers = Headers(
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ]
        )
        return Response(status, HTTPStatus(status).phrase, headers, body)

    async def _process_request(
        self, _connection: ServerConnection, request: Request
    ) -> Response | None:
        url = urlsplit(request.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            return self._text(200, "ok")
        if len(parts) == 4 and parts[0] == "containerLogs":
            try:
                text = await self._in_thread(
                    self._backend.container_log, self.node_name, *parts[1:]
                )
            except ExecRefused as err:
                return self._text(err.status, err.message)
            return self._text(200, _log_window(str(text), parse_qs(url.query)))
        if len(parts) == 4 and parts[0] == "exec":
            upgrade = request.headers.get("Upgrade", "")
            if upgrade.lower() != "websocket":
                return self._text(
                    400,
                    f"simulated kubelet serves exec over websocket only, not {upgrade or 'plain'}",
                )
            try:
                await self._in_thread(self._backend.check_exec, self.node_name, *parts[1:])
            except ExecRefused as err:
                return self._text(err.status, err.message)
            return None
        return self._text(404, "404 page not found\n")

    async def _handle(self, connection: ServerConnection) -> None:
        request = connection.request
        assert request is not None  # set once the handshake succeeded
        url = urlsplit(request.path)
        _, namespace, pod, container = (unquote(p) for p in url.path.strip("/").split("/"))
        query = parse_qs(url.query, keep_blank_values=True)
        argv = query.get("command", [])
        want_out = _flag(query, "output", "stdout")
        want_err = _flag(query, "error", "stderr")
        protocol = connection.subprotocol or ""
        use_base64 = "base64" in protocol

        async def send(channel: int, data: bytes) -> None:
            if use_base64:
                await connection.send(str(channel) + base64.b64encode(data).decode())
            else:
                await connection.send(bytes([channel]) + data)

        # Tell the client the streams are open, as the kubelet does, on the lowest output channel.
        await send(
            STDOUT_CHANNEL if want_out else STDERR_CHANNEL if want_err else ERROR_CHANNEL, b""
        )
        try:
            result: CommandResult = await self._in_thread(
                self._backend.run_exec, self.node_name, namespace, pod, container, argv
            )
        except ExecRefused as err:
            await send(ERROR_CHANNEL, _internal_error_json(err.message))
            await connection.close()
            return
        if result.delay_s > 0:
            await asyncio.sleep(result.delay_s)
        if result.conclude is not None:
            result = await self._in_thread(result.conclude)
        if result.no_status or result.exit_code < 0:
            await connection.close()
            return
        if want_out and result.stdout:
            await send(STDOUT_CHANNEL, result.stdout)
        if want_err and result.stderr:
            await send(STDERR_CHANNEL, result.stderr)
        if protocol.startswith("v4."):
            await send(ERROR_CHANNEL, _status_json(result, argv))
        elif result.exit_code != 0:
            status = json.loads(_status_json(result, argv))
            await send(ERROR_CHANNEL, str(status["message"]).encode())
        await connection.close()
