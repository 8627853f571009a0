"""The simulated kubelet serves exec over SPDY/3.1 as a real one does (tests/world/exec_server.py).

Fast stories drive one `KubeletServer` with a stand-in backend through a small SPDY client
written here (`SpdyClient`, made of tests/world/spdy.py's `Framer`): protocol negotiation and
refusals, output and exit status for every protocol version, the kubelet's closing frames, pings
and stdin, a command whose container vanished, a node that loses power; and the websocket path
on the same port. World stories reach the kubelet through the real API server: the SPDY upgrade
as kubectl 1.20 sends it, the Python client's websocket exec (which a 1.36 API server turns into
SPDY, KAIWU_TESTWORLD_KUBE=1.36), and `kubectl exec` when kubectl is installed.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
import websocket
from kubernetes import client as k8s

from reconciler.kube.client import Kube
from tests.support.pods import kubectl_exec, running_pods, start_cluster
from tests.support.waiting import eventually
from tests.world import exec_server, spdy
from tests.world.controlplane import ControlPlane
from tests.world.exec_server import (
    CommandResult,
    ExecRefused,
    KubeletServer,
    ServerLoop,
    ServingCert,
)
from tests.world.faults import Faults
from tests.world.simworld import SimWorld

NODE = "node-a"
ADDRESS = "127.0.0.1"
# What kubectl 1.20 offers (client-go remotecommand.NewSPDYExecutor), and what a 1.36 API server
# offers when it translates a websocket exec (NewSPDYExecutorForTransports puts v5 first).
KUBECTL_120 = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
TRANSLATOR_136 = ("v5.channel.k8s.io", *KUBECTL_120)


# ---- a SPDY client, as client-go's remotecommand over spdystream behaves ------------------------


@dataclass
class Answer:
    """What one exec request got: the HTTP answer, and on an upgrade every frame until the end."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    frames: list[spdy.Frame] = field(default_factory=list)
    streams: dict[str, int] = field(default_factory=dict)  # stream type -> id
    closed: bool = False  # the server ended the connection (GOAWAY or end of file)

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def data(self, kind: str) -> bytes:
        stream_id = self.streams[kind]
        return b"".join(f.data for f in self.frames
                        if isinstance(f, spdy.Data) and f.stream_id == stream_id)

    def exit_status(self) -> dict[str, Any]:
        return dict(json.loads(self.data("error")))


class SpdyClient:
    """One upgraded connection from the client's side: client-go's SPDY executor opens its
    streams one by one, waiting for each reply (apimachinery httpstream/spdy connection.go
    CreateStream), then reads until the server hangs up."""

    def __init__(self, sock: ssl.SSLSocket, leftover: bytes) -> None:
        self.sock = sock
        self.framer = spdy.Framer()
        self.buffer = bytearray(leftover)
        self.frames: list[spdy.Frame] = []
        self.next_id = 1
        self.eof = False

    @staticmethod
    def connect(host: str, port: int, path: str, protocols: Sequence[str], *,
                context: ssl.SSLContext, extra: Sequence[tuple[str, str]] = (),
                upgrade: str = "SPDY/3.1") -> tuple[Answer, SpdyClient | None]:
        sock = context.wrap_socket(socket.create_connection((host, port), timeout=15),
                                   server_hostname=host)
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Length: 0",
                 *(f"{k}: {v}" for k, v in extra)]
        if upgrade:
            lines += ["Connection: Upgrade", f"Upgrade: {upgrade}"]
        lines += [f"X-Stream-Protocol-Version: {p}" for p in protocols]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed before an answer: {received!r}"
            received += chunk
        head, _, rest = received.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = [(k.strip(), v.strip()) for k, _, v in (h.partition(":") for h in header_lines)]
        answer = Answer(int(status_line.split(" ")[1]), headers)
        if answer.status == 101:
            return answer, SpdyClient(sock, rest)
        length = int(answer.header("Content-Length")[0])
        while len(rest) < length:
            rest += sock.recv(65536)
        answer.body = rest
        sock.close()
        return answer, None

    def send(self, frame: spdy.Frame) -> None:
        self.sock.sendall(self.framer.encode(frame))

    def receive(self) -> spdy.Frame | None:
        """The next frame from the server (also kept in `frames`); None at end of file."""
        while (frame := self.framer.decode(self.buffer)) is None:
            chunk = self.sock.recv(65536)
            if not chunk:
                self.eof = True
                return None
            self.buffer += chunk
        self.frames.append(frame)
        return frame

    def open(self, kind: str) -> int:
        """Create a stream of this type and wait for its SYN_REPLY."""
        stream_id, self.next_id = self.next_id, self.next_id + 2
        self.send(spdy.SynStream(stream_id, {"streamtype": [kind]}))
        while True:
            frame = self.receive()
            assert frame is not None, f"connection closed before the reply to {kind}"
            if isinstance(frame, spdy.SynReply) and frame.stream_id == stream_id:
                return stream_id

    def read_to_end(self) -> None:
        """Every frame until the server hangs up or goes away; then the client closes, as
        client-go's executor closes its connection once the exec has ended."""
        while (frame := self.receive()) is not None:
            if isinstance(frame, spdy.GoAway):
                self.eof = True
                break
        self.sock.close()


def spdy_exec(host: str, port: int, path: str, *, context: ssl.SSLContext,
              protocols: Sequence[str] = KUBECTL_120,
              streams: Sequence[str] = ("error", "stdout", "stderr"),
              stdin: bytes | None = None, extra: Sequence[tuple[str, str]] = ()) -> Answer:
    """An exec as client-go's v2-v4 streamers run it: streams in the order error, stdin,
    stdout, stderr; stdin sent whole and closed; then everything until the server hangs up."""
    answer, conn = SpdyClient.connect(host, port, path, protocols, context=context, extra=extra)
    if conn is None:
        return answer
    answer.streams = {kind: conn.open(kind) for kind in streams}
    if stdin is not None:
        conn.send(spdy.Data(answer.streams["stdin"], stdin, spdy.FLAG_FIN))
    conn.read_to_end()
    answer.frames, answer.closed = conn.frames, conn.eof
    return answer


def exec_path(argv: Sequence[str], pod: str = "pod-a", **flags: str) -> str:
    query = urlencode([("command", a) for a in argv] + list(flags.items()))
    return f"/exec/default/{pod}/main?{query}"


# ---- a kubelet with a stand-in container runtime ------------------------------------------------


class Backend:
    """Pod `pod-a` has a running container `main`; `vanish` finds it gone mid-run."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    def check_exec(self, node: str, namespace: str, pod: str, container: str) -> None:
        if pod != "pod-a":
            raise ExecRefused(404, "pod does not exist")

    def run_exec(self, node: str, namespace: str, pod: str, container: str,
                 argv: Sequence[str]) -> CommandResult:
        self.ran.append(list(argv))
        match list(argv):
            case ["hostname"]:
                return CommandResult(b"pod-a\n", b"", 0)
            case ["big"]:
                return CommandResult(b"x" * 100_000, b"", 0)
            case ["fail", code]:
                return CommandResult(b"partial\n", b"it failed\n", int(code))
            case ["sleep", seconds]:
                return CommandResult(b"", b"", 0, delay_s=float(seconds))
            case ["vanish"]:
                raise ExecRefused(500, 'container not found ("main")')
        return CommandResult(b"", f"{argv[0]}: not found\n".encode(), 127)

    def container_log(self, node: str, namespace: str, pod: str, container: str) -> str:
        return "line 1\nline 2\n"


@dataclass
class Kubelet:
    server: KubeletServer
    backend: Backend
    context: ssl.SSLContext
    ca: Path

    def exec(self, argv: Sequence[str], **kwargs: Any) -> Answer:
        flags = kwargs.pop("flags", {"output": "1", "error": "1"})
        return spdy_exec(ADDRESS, self.server.port, exec_path(argv, **flags), context=self.context,
                         **kwargs)


@pytest.fixture(scope="module")
def kubelet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubelet]:
    loop = ServerLoop()
    cert = ServingCert.create(tmp_path_factory.mktemp("kubelet-cert"), NODE, ADDRESS)
    backend = Backend()
    server = KubeletServer(loop, NODE, ADDRESS, cert, backend)
    server.start()
    context = ssl.create_default_context(cafile=str(cert.cert_path))
    try:
        yield Kubelet(server, backend, context, cert.cert_path)
    finally:
        server.stop()
        loop.close()


def end_frames(answer: Answer) -> list[spdy.Frame]:
    """The frames after the last data frame: how the kubelet ends the exec."""
    last_data = max(i for i, f in enumerate(answer.frames) if isinstance(f, spdy.Data))
    return answer.frames[last_data + 1:]


# ---- the framing --------------------------------------------------------------------------------


def test_the_framing_is_spdystreams_with_one_compression_context_per_direction() -> None:
    # spdy/dictionary.go: 1423 bytes; zlib names it by its Adler-32 in the stream header.
    assert len(spdy.DICTIONARY) == 1423 and zlib.adler32(spdy.DICTIONARY) == 0xE3C6A7C2
    sender, receiver = spdy.Framer(), spdy.Framer()
    frames: list[spdy.Frame] = [
        spdy.SynStream(1, {"streamtype": ["error"]}, spdy.FLAG_FIN, priority=3),
        spdy.SynStream(3, {"streamtype": ["stdout"], "multi": ["a", "b"]}),
        spdy.SynReply(3, {}),
        spdy.HeadersFrame(3, {"x": [""]}),
        spdy.Data(3, b"hello", spdy.FLAG_FIN),
        spdy.RstStream(3, spdy.CANCEL),
        spdy.Settings(((0, 4, 1000),)),
        spdy.Ping(1),
        spdy.WindowUpdate(3, 65536),
        spdy.GoAway(3),
    ]
    wire = bytearray(b"".join(sender.encode(f) for f in frames))
    # Control frames carry version 3 and the control bit; data frames do not.
    assert wire[:4] == b"\x80\x03\x00\x01"
    decoded = []
    while (frame := receiver.decode(wire)) is not None:
        decoded.append(frame)
    assert decoded == frames and not wire
    # The second block is compressed against the first: a fresh decompressor cannot read it.
    first, second = (spdy.Framer().encode(spdy.SynReply(1, {"streamtype": ["stdout"]})),
                     sender.encode(spdy.SynReply(1, {"streamtype": ["stdout"]})))
    assert len(second) < len(first)
    with pytest.raises(spdy.SpdyError):
        spdy.Framer().decode(bytearray(second))
    # A partial frame waits for the rest; header names must be lowercase (read.go:193-196).
    whole = spdy.Framer().encode(spdy.SynReply(1, {"x": ["1"]}))
    assert spdy.Framer().decode(bytearray(whole[:-1])) is None
    deflate = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zdict=spdy.DICTIONARY)
    block = deflate.compress(struct.pack(">II", 1, 1) + b"X" + struct.pack(">I", 1) + b"1")
    block += deflate.flush(zlib.Z_SYNC_FLUSH)
    upper = struct.pack(">HHII", 0x8003, spdy.SYN_REPLY, 4 + len(block), 1) + block
    with pytest.raises(spdy.SpdyError, match="lowercased"):
        spdy.Framer().decode(bytearray(upper))


# ---- negotiation and refusals -------------------------------------------------------------------


def test_the_protocol_is_the_clients_first_that_the_kubelet_knows(kubelet: Kubelet) -> None:
    answer = kubelet.exec(["hostname"], protocols=TRANSLATOR_136)
    assert answer.status == 101
    assert answer.header("Upgrade") == ["SPDY/3.1"] and answer.header("Connection") == ["Upgrade"]
    assert answer.header("X-Stream-Protocol-Version") == ["v4.channel.k8s.io"]
    # Values may come comma-separated in one header; the client's order decides.
    answer = kubelet.exec(["hostname"], protocols=["v3.channel.k8s.io, v4.channel.k8s.io"])
    assert answer.header("X-Stream-Protocol-Version") == ["v3.channel.k8s.io"]


def test_what_the_kubelet_refuses_before_upgrading(kubelet: Kubelet) -> None:
    nothing_shared = kubelet.exec(["hostname"], protocols=["v5.channel.k8s.io"])
    assert nothing_shared.status == 403
    assert nothing_shared.header("X-Accepted-Stream-Protocol-Versions") == list(KUBECTL_120)
    assert nothing_shared.body.decode().startswith(
        "unable to upgrade: unable to negotiate protocol: client supports [v5.channel.k8s.io], "
        "server accepts [v4.channel.k8s.io v3.channel.k8s.io v2.channel.k8s.io channel.k8s.io]")
    none_offered = kubelet.exec(["hostname"], protocols=[])
    assert (none_offered.status, none_offered.body) == (
        400, b"unable to upgrade: X-Stream-Protocol-Version is required\n")
    answer, _ = SpdyClient.connect(ADDRESS, kubelet.server.port, exec_path(["hostname"],
                                   output="1"), KUBECTL_120, context=kubelet.context, upgrade="")
    assert answer.status == 400
    assert answer.body.startswith(b"unable to upgrade: missing upgrade headers in request")
    # The kubelet reads input/output/error as "1" only, before anything else.
    no_streams = kubelet.exec(["hostname"], flags={"stdout": "true"})
    assert (no_streams.status, no_streams.body) == (
        400, b"you must specify at least 1 of stdin, stdout, stderr")
    no_pod = kubelet.exec(["hostname"], flags={"output": "1", "pod": "pod-b"})
    assert (no_pod.status, no_pod.body) == (404, b"pod does not exist")


# ---- output, status and the end of the connection -----------------------------------------------


def test_v4_success_output_status_and_the_kubelets_closing_frames(kubelet: Kubelet) -> None:
    answer = kubelet.exec(["hostname"])
    assert answer.data("stdout") == b"pod-a\n" and answer.data("stderr") == b""
    assert answer.exit_status() == {"metadata": {}, "status": "Success"}
    # Each stream was answered with an empty SYN_REPLY; at the end every stream is reset, in
    # the order opened, then GOAWAY names the last stream (the server then reads on until
    # the client has closed: spdy.ServerSession.close).
    replies = [f for f in answer.frames if isinstance(f, spdy.SynReply)]
    assert replies == [spdy.SynReply(i, {}) for i in (1, 3, 5)]
    assert end_frames(answer) == [spdy.RstStream(1, spdy.CANCEL), spdy.RstStream(3, spdy.CANCEL),
                                  spdy.RstStream(5, spdy.CANCEL), spdy.GoAway(5)]
    assert answer.closed


def test_v4_failure_carries_the_exit_code(kubelet: Kubelet) -> None:
    answer = kubelet.exec(["fail", "3"])
    assert answer.data("stdout") == b"partial\n" and answer.data("stderr") == b"it failed\n"
    status = answer.exit_status()
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"] == {"causes": [{"reason": "ExitCode", "message": "3"}]}
    assert "exit code 3" in status["message"]
    missing = kubelet.exec(["psql"])
    assert missing.exit_status()["details"]["causes"][0]["message"] == "127"
    # Large output goes out in 32 KiB data frames, whole.
    big = kubelet.exec(["big"], flags={"output": "1"}, streams=("error", "stdout"))
    assert big.data("stdout") == b"x" * 100_000
    assert max(len(f.data) for f in big.frames if isinstance(f, spdy.Data)) == 32 * 1024


@pytest.mark.parametrize("protocol", ["v3.channel.k8s.io", "v2.channel.k8s.io"])
def test_older_protocols_send_only_a_failures_text(kubelet: Kubelet, protocol: str) -> None:
    ok = kubelet.exec(["hostname"], protocols=[protocol])
    assert ok.header("X-Stream-Protocol-Version") == [protocol]
    assert ok.data("stdout") == b"pod-a\n" and ok.data("error") == b""
    failed = kubelet.exec(["fail", "2"], protocols=[protocol])
    assert failed.data("error").decode() == (
        "command terminated with non-zero exit code: error executing command [fail 2], "
        "exit code 2")


def test_v1_resets_the_error_stream_once_the_streams_are_in(kubelet: Kubelet) -> None:
    answer = kubelet.exec(["fail", "2"], protocols=["channel.k8s.io"],
                          flags={"input": "1", "output": "1"}, streams=("error", "stdin", "stdout"),
                          stdin=b"ignored")
    error, stdin = answer.streams["error"], answer.streams["stdin"]
    assert answer.frames[3:5] == [spdy.RstStream(error, spdy.CANCEL),
                                  spdy.Data(stdin, b"", spdy.FLAG_FIN)]
    assert answer.data("stdout") == b"partial\n"


def test_an_exec_runs_once_the_expected_streams_are_open(kubelet: Kubelet) -> None:
    # input=1: the kubelet waits for a stdin stream too; what comes on it is dropped.
    answer = kubelet.exec(["hostname"], flags={"input": "1", "output": "1"},
                          streams=("error", "stdin", "stdout"), stdin=b"some input\n")
    assert answer.data("stdout") == b"pod-a\n"
    assert answer.exit_status()["status"] == "Success"
    # Only stdout asked for: stderr is not written, even when the command has some.
    quiet = kubelet.exec(["fail", "1"], flags={"output": "1"}, streams=("error", "stdout"))
    assert quiet.data("stdout") == b"partial\n"
    assert all(f.stream_id in quiet.streams.values()
               for f in quiet.frames if isinstance(f, spdy.Data))


def test_missing_streams_hold_the_exec_back(kubelet: Kubelet,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exec_server, "STREAM_CREATION_TIMEOUT_S", 0.3)
    before = len(kubelet.backend.ran)
    answer, conn = SpdyClient.connect(ADDRESS, kubelet.server.port,
                                      exec_path(["hostname"], output="1", error="1"),
                                      KUBECTL_120, context=kubelet.context)
    assert conn is not None and answer.status == 101
    conn.open("error")
    conn.open("stdout")
    # Past the creation timeout the kubelet gives up on the exec, says nothing and leaves the
    # connection to the client; a late stream gets no reply.
    time.sleep(0.6)
    conn.send(spdy.SynStream(5, {"streamtype": ["stderr"]}))
    conn.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        conn.receive()
    conn.sock.close()
    assert len(kubelet.backend.ran) == before


def test_pings_are_echoed_and_flow_control_is_ignored(kubelet: Kubelet) -> None:
    _, conn = SpdyClient.connect(ADDRESS, kubelet.server.port,
                                 exec_path(["sleep", "0.5"], output="1"), KUBECTL_120,
                                 context=kubelet.context)
    assert conn is not None
    error = conn.open("error")
    # A stream id lower than one already seen is refused (validateStreamId).
    conn.send(spdy.SynStream(1, {"streamtype": ["stdout"]}))
    assert conn.receive() == spdy.RstStream(1, spdy.PROTOCOL_ERROR)
    conn.open("stdout")
    conn.send(spdy.Settings(((0, 7, 65536),)))
    conn.send(spdy.WindowUpdate(error, 1 << 20))
    conn.send(spdy.Ping(1))
    assert conn.receive() == spdy.Ping(1)
    conn.read_to_end()
    assert spdy.GoAway(3) in conn.frames


def test_a_container_that_vanishes_mid_exec_is_an_internal_error(kubelet: Kubelet) -> None:
    answer = kubelet.exec(["vanish"])
    status = answer.exit_status()
    assert status["reason"] == "InternalError" and status["code"] == 500
    assert status["message"] == ('Internal error occurred: error executing command in container: '
                                 'container not found ("main")')


def test_a_node_that_loses_power_drops_its_exec_connections(tmp_path: Path) -> None:
    loop = ServerLoop()
    cert = ServingCert.create(tmp_path, NODE, ADDRESS)
    server = KubeletServer(loop, NODE, ADDRESS, cert, Backend())
    context = ssl.create_default_context(cafile=str(cert.cert_path))
    try:
        port = server.start()
        _, conn = SpdyClient.connect(ADDRESS, port, exec_path(["sleep", "5"], output="1"),
                                     KUBECTL_120, context=context)
        assert conn is not None
        conn.open("error")
        conn.open("stdout")
        stopper = threading.Timer(0.2, server.stop)
        stopper.start()
        started = time.monotonic()
        conn.read_to_end()
        stopper.join()
        assert time.monotonic() - started < 3
        assert not any(isinstance(f, spdy.GoAway | spdy.RstStream) for f in conn.frames)
        assert server.start() == port, "the node comes back on its port"
        again = spdy_exec(ADDRESS, port, exec_path(["hostname"], output="1"), context=context,
                          streams=("error", "stdout"))
        assert again.data("stdout") == b"pod-a\n"
    finally:
        server.stop()
        loop.close()


# ---- the websocket path on the same port --------------------------------------------------------


def ws_frames(kubelet: Kubelet, argv: Sequence[str], protocol: str) -> list[tuple[int, bytes]]:
    ws = websocket.create_connection(
        f"wss://{ADDRESS}:{kubelet.server.port}{exec_path(argv, output='1', error='1')}",
        subprotocols=[protocol], sslopt={"ca_certs": str(kubelet.ca)})
    assert ws.getsubprotocol() == protocol
    frames = []
    while True:
        opcode, data = ws.recv_data()
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            break
        frames.append((int(chr(data[0])), base64.b64decode(data[1:])) if "base64" in protocol
                      else (data[0], data[1:]))
    ws.close()
    return frames


def test_websocket_exec_is_served_beside_spdy(kubelet: Kubelet) -> None:
    frames = ws_frames(kubelet, ["fail", "4"], "v4.channel.k8s.io")
    assert frames[:3] == [(1, b""), (1, b"partial\n"), (2, b"it failed\n")]
    status = json.loads(frames[3][1])
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "4"}]
    assert ws_frames(kubelet, ["hostname"], "base64.channel.k8s.io") == [(1, b""),
                                                                        (1, b"pod-a\n")]
    with pytest.raises(websocket.WebSocketBadStatusException):
        ws_frames(kubelet, ["hostname"], "v5.channel.k8s.io")


def test_logs_and_health_are_plain_http(kubelet: Kubelet) -> None:
    def get(path: str) -> tuple[int, bytes]:
        with socket.create_connection((ADDRESS, kubelet.server.port)) as raw, \
                kubelet.context.wrap_socket(raw, server_hostname=ADDRESS) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), body

    assert get("/healthz") == (200, b"ok")
    assert get("/containerLogs/default/pod-a/main?tailLines=1") == (200, b"line 2\n")
    assert get("/nowhere") == (404, b"404 page not found\n")


# ---- through the real API server ----------------------------------------------------------------


@pytest.fixture
def pod(sim_world: SimWorld, kube: k8s.ApiClient, namespace: str) -> str:
    """One running KaiwuDB pod (not initialised: exec needs only a running container)."""
    start_cluster(kube, namespace, replicas=1)
    eventually(lambda: running_pods(k8s.CoreV1Api(kube), namespace, 1), 60, "a running pod")
    return "kdb-0"


def api_exec(control_plane: ControlPlane, namespace: str, pod: str, argv: Sequence[str],
             **kwargs: Any) -> Answer:
    url = urlsplit(control_plane.server)
    assert url.hostname is not None and url.port is not None
    query = urlencode([("command", a) for a in argv]
                      + [("container", "kwbase"), ("stdout", "true"), ("stderr", "true")])
    context = ssl.create_default_context(cafile=str(control_plane.ca_path))
    return spdy_exec(url.hostname, url.port,
                     f"/api/v1/namespaces/{namespace}/pods/{pod}/exec?{query}", context=context,
                     extra=[("Authorization", f"Bearer {control_plane.admin_token}")], **kwargs)


def test_spdy_exec_through_the_api_server_as_kubectl_sends_it(
    control_plane: ControlPlane, namespace: str, pod: str
) -> None:
    answer = api_exec(control_plane, namespace, pod, ["hostname"])
    assert answer.status == 101, answer.body
    assert answer.header("X-Stream-Protocol-Version") == ["v4.channel.k8s.io"]
    assert answer.data("stdout") == b"kdb-0\n"
    assert answer.exit_status() == {"metadata": {}, "status": "Success"}
    failing = api_exec(control_plane, namespace, pod, ["false"])
    assert failing.exit_status()["details"]["causes"] == [{"reason": "ExitCode", "message": "1"}]
    missing = api_exec(control_plane, namespace, pod, ["psql"])
    assert b'exec: "psql": executable file not found' in missing.data("stdout")
    assert missing.exit_status()["details"]["causes"][0]["message"] == "126"


def test_the_python_clients_websocket_exec_reaches_the_kubelet(
    kube: k8s.ApiClient, namespace: str, pod: str
) -> None:
    # It offers v5 and v4: the 1.20 API server passes the websocket on (the kubelet takes v4);
    # a 1.36 API server turns it into SPDY towards the kubelet.
    core = k8s.CoreV1Api(kube)
    assert kubectl_exec(core, namespace, pod, ["hostname"]).stdout == "kdb-0\n"
    failing = kubectl_exec(core, namespace, pod, ["false"])
    assert failing.exit_code == 1


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_exec(control_plane: ControlPlane, namespace: str, pod: str) -> None:
    # A current kubectl tries websocket v5 first and falls back to SPDY where the API server
    # passes the upgrade to a kubelet that does not know v5 (1.20).
    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(control_plane.kubeconfig_path), "-n", namespace,
             "exec", *args], input=stdin, capture_output=True, text=True, timeout=60,
            check=False)

    done = kubectl("-v=6", pod, "-c", "kwbase", "--", "hostname")
    assert (done.returncode, done.stdout) == (0, "kdb-0\n"), done.stderr
    if control_plane.kube_version == "1.20":
        # client-go's round tripper logs each request at -v=6: the SPDY upgrade is a POST.
        assert re.search(r"POST \S+/pods/kdb-0/exec\S* 101 Switching Protocols", done.stderr)
    piped = kubectl("-i", pod, "-c", "kwbase", "--", "echo", "hi", stdin="ignored\n")
    assert (piped.returncode, piped.stdout) == (0, "hi\n"), piped.stderr
    failed = kubectl(pod, "-c", "kwbase", "--", "false")
    assert failed.returncode == 1
    assert "command terminated with exit code 1" in failed.stderr


def test_an_exec_cut_by_its_node_losing_power_never_reads_as_a_success(
    sim_world: SimWorld, faults: Faults, kube: k8s.ApiClient, namespace: str, pod: str
) -> None:
    """The reconciler's exec of a command that blocks (`kwbase init` at an address that never
    answers retries for ever), while the pod's node loses power: no exit status, -1, never 0,
    and no exception. (Offered websocket v5, a 1.36 API server translated the exec to SPDY and
    reported the cut stream as Success: exit 0. Kube.exec offers only v4 since.)"""
    spec = k8s.CoreV1Api(kube).read_namespaced_pod(pod, namespace).spec
    assert spec is not None
    node = str(spec.node_name)
    timer = threading.Timer(1.5, faults.lose_node, args=(node,))
    timer.start()
    try:
        started = time.monotonic()
        stdout, stderr, code = Kube(kube, "test").exec(
            namespace, pod, "kwbase",
            ["kwbase", "init", "--insecure", "--host=192.0.2.1:26257"], timeout=20)
        took = time.monotonic() - started
    finally:
        timer.join()
        faults.restore_node(node)
    assert code == -1, (code, stdout, stderr)
    assert took < 15, "the cut stream ends the call, not its time-out"
