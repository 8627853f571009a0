"""Stories of the reconciler's listeners under abuse, on real sockets (reconciler.listeners).

Someone who can reach the reconciler's pod opens many connections and sends their requests a
byte at a time, or never; or sends a huge body. The API server, the kubelet's probes and
Prometheus must still be answered at once, and no client holds a thread past the deadline.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from reconciler.listeners import BoundedHandler, BoundedServer, Limits


class Echo(BoundedHandler):
    """GET answers "ok"; POST answers the length of the body it read."""

    def do_GET(self) -> None:
        gate = getattr(self.server, "gate", None)
        if gate is not None and self.path == "/slow":
            gate.wait(10)
        self._answer(b"ok")

    def do_POST(self) -> None:
        body = self.read_body()
        if body is not None:
            self._answer(str(len(body)).encode())

    def _answer(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(limits: Limits) -> Iterator[tuple[BoundedServer, list[str]]]:
    dropped: list[str] = []
    server = BoundedServer(("127.0.0.1", 0), Echo, limits, dropped.append, name="test")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server, dropped
    finally:
        server.shutdown()
        server.server_close()


def get(port: int, path: str = "/", timeout: float = 5.0) -> tuple[float, bytes]:
    """How long a plain GET took, and the answer's bytes."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        client.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    return time.monotonic() - started, answer


def read_all(client: socket.socket) -> bytes:
    answer = b""
    while chunk := client.recv(65536):
        answer += chunk
    return answer


def slow_clients(port: int, count: int) -> list[socket.socket]:
    """`count` connections that start a request and never finish it."""
    clients = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n")
        clients.append(client)
    return clients


def wait_until(check: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.01)
    raise AssertionError("not within the time allowed")


def test_a_flood_of_slow_clients_never_starves_a_client_that_asks_at_once() -> None:
    with serving(Limits(max_connections=8, request_deadline_s=30.0)) as (server, dropped):
        flood = slow_clients(server.server_address[1], 40)
        try:
            # Each connection past the eighth closes the one reading longest.
            wait_until(lambda: dropped.count("evicted") == 32)
            took, answer = get(server.server_address[1])
            assert answer.endswith(b"\r\n\r\nok")
            assert took < 3.0, "answered at once, not after the flood's 30 s deadline"
            assert dropped.count("evicted") == 33, "one more slow reader made room"
            assert sum(server.connections().values()) <= 8
        finally:
            for client in flood:
                client.close()


def test_a_client_trickling_its_request_is_dropped_at_the_whole_request_deadline() -> None:
    with serving(Limits(request_deadline_s=0.5)) as (server, dropped):
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.server_address[1]),
                                      timeout=5) as client:
            closed_at = None
            # About 10 s of trickle: cut at the 0.5 s deadline, long before it would end.
            for byte in b"GET / HTTP/1.0\r\nX-Slow: " + b"a" * 200:
                try:
                    client.sendall(bytes([byte]))
                    time.sleep(0.05)  # every byte well within any per-read time-out
                    if client.recv(1, socket.MSG_DONTWAIT) == b"":
                        closed_at = time.monotonic()
                        break
                except BlockingIOError:
                    continue
                except OSError:
                    closed_at = time.monotonic()
                    break
        assert closed_at is not None, "the trickle was cut off"
        assert 0.4 < closed_at - started < 3.0, "at the deadline, not when the trickle ends"
        wait_until(lambda: dropped == ["deadline"])


def test_a_body_past_the_cap_is_refused_before_it_is_sent() -> None:
    with serving(Limits(max_body_bytes=1000)) as (server, dropped):
        with socket.create_connection(("127.0.0.1", server.server_address[1]),
                                      timeout=5) as client:
            client.sendall(b"POST / HTTP/1.0\r\nContent-Length: 1000000000\r\n\r\n")
            answer = read_all(client)
        assert answer.startswith(b"HTTP/1.0 413")
        assert dropped == ["too_large"]
        with socket.create_connection(("127.0.0.1", server.server_address[1]),
                                      timeout=5) as client:
            client.sendall(b"POST / HTTP/1.0\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000)
            assert read_all(client).endswith(b"\r\n\r\n1000")


def test_a_body_without_a_length_is_refused() -> None:
    with serving(Limits()) as (server, dropped):
        with socket.create_connection(("127.0.0.1", server.server_address[1]),
                                      timeout=5) as client:
            client.sendall(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n")
            assert read_all(client).startswith(b"HTTP/1.0 411")
        assert dropped == ["no_length"]


def test_when_every_connection_is_being_answered_a_new_one_is_refused_until_one_ends() -> None:
    with serving(Limits(max_connections=3)) as (server, dropped):
        gate = threading.Event()
        server.gate = gate  # type: ignore[attr-defined]
        port = server.server_address[1]
        busy = [threading.Thread(target=get, args=(port, "/slow"), daemon=True)
                for _ in range(3)]
        for thread in busy:
            thread.start()
        wait_until(lambda: server.connections()["answering"] == 3)
        try:
            refused = get(port)[1]
        except ConnectionResetError:  # closed before the answer could be read
            refused = b"HTTP/1.0 503"
        assert refused.startswith(b"HTTP/1.0 503"), "not queued"
        # Counted by the accepting thread, which may finish after the client saw the answer.
        wait_until(lambda: dropped == ["busy"])
        gate.set()
        for thread in busy:
            thread.join(5)
        assert get(port)[1].endswith(b"ok")


def test_the_reaper_stops_with_its_server() -> None:
    before = set(threading.enumerate())
    with serving(Limits()):
        reapers = [t for t in threading.enumerate() if t not in before and t.name == "test-reaper"]
        assert len(reapers) == 1
    reapers[0].join(5)
    assert not reapers[0].is_alive()
