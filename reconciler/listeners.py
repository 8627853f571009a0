"""Bounded HTTP listeners: every port the reconciler opens serves through `BoundedServer`.

Used by the metrics and health endpoints (reconciler.runtime.http), the admission webhook
(reconciler.runtime.webhook) and the restore file server (reconciler.kaiwudb.backup.file_server).
Python's ThreadingHTTPServer gives every connection a thread for as long as the client likes;
here each listener has `Limits` (documented defaults below) and says why it drops a client:

- **Connections at once** (`max_connections`). When all are taken, the connection that has
  been *reading its request* longest is closed to make room for the new one: a flood of slow
  clients never starves a client that sends its request at once (the API server calling the
  webhook, Prometheus scraping). Only when every connection is past its request and being
  answered is the new one refused: `503 Service Unavailable` and closed at once (a TLS
  listener just closes), counted.
- **A whole-request deadline** (`request_deadline_s`): the TLS handshake, request line, headers
  and body must all arrive within it, however slowly the bytes trickle in (a per-read time-out
  alone is reset by every byte). A reaper thread closes connections past it.
- **A body cap** (`max_body_bytes`): a larger Content-Length is answered 413 before one byte of
  the body is read; a body without Content-Length is refused (411).
- **A per-read/write time-out** (`io_timeout_s`) while the answer is written: a client that
  stops reading a large answer frees its thread.
- One request per connection (HTTP/1.0 semantics, the http.server default): no idle keep-alive.

`TLSServer` is a BoundedServer that shakes hands in each connection's own thread (a slow
handshake blocks nobody else), with the certificate of the moment (`tls_context`, swapped by
its owner): the webhook and the restore file server serve through it.

Every drop calls `on_drop(reason)`; the callers count it in
`kaiwu_http_connections_dropped_total{listener, reason}` (reason: evicted, deadline, busy,
too_large, no_length). `reconciler/listeners.py` is a leaf: it imports nothing of the reconciler.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

READING = "reading"
ANSWERING = "answering"


@dataclass(frozen=True)
class Limits:
    """What one listener allows a client (see the module docstring)."""

    # Connections served at once: threads are cheap, but not free (and memory is bounded).
    max_connections: int = 64
    # The whole request, TLS handshake included, from the accept: the API server and
    # Prometheus send theirs in milliseconds.
    request_deadline_s: float = 5.0
    # A request body (only the webhook takes one: an AdmissionReview is well under 1 MiB).
    max_body_bytes: int = 1 << 20
    # Each read or write of the socket while the answer is written.
    io_timeout_s: float = 30.0


@dataclass
class _Connection:
    fd: int  # the socket's descriptor: a TLS wrapper detaches the accepted socket, keeps it
    since: float
    state: str = READING
    dropped: str = ""


class BoundedServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that keeps to its `Limits` (see the module docstring)."""

    daemon_threads = True
    # The kernel's accept queue (socketserver's default is 5: a burst of connections past it
    # waits for SYN retries, seconds, before the cap and the eviction can even see them).
    request_queue_size = 128
    # Sent to a connection refused for want of room, before it is closed (a TLS listener sends
    # nothing: its client has not even shaken hands).
    refusal = (b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\n"
               b"Content-Length: 0\r\nConnection: close\r\n\r\n")

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 limits: Limits, on_drop: Callable[[str], None] = lambda reason: None,
                 *, name: str = "http") -> None:
        self.limits = limits
        self.on_drop = on_drop
        self.name = name
        self._connections: dict[int, _Connection] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        super().__init__(address, handler)
        threading.Thread(target=self._reap, name=f"{name}-reaper", daemon=True).start()

    # ---- the connection table -----------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            # A dropped connection's thread may not have ended yet: it no longer counts.
            held = [c for c in self._connections.values() if not c.dropped]
            if len(held) >= self.limits.max_connections:
                reading = [c for c in held if c.state == READING]
                if not reading:
                    self._drop_new(request)
                    return
                self._drop(min(reading, key=lambda c: c.since), "evicted")
            self._connections[id(request)] = _Connection(request.fileno(), time.monotonic())
        request.settimeout(self.limits.io_timeout_s)
        super().process_request(request, client_address)

    def forget(self, request: Any) -> None:
        """The connection is over: called before its socket is closed (a wrapper that closes
        the socket itself calls it first, so a reused descriptor is never dropped)."""
        with self._lock:
            self._connections.pop(id(request), None)

    def shutdown_request(self, request: Any) -> None:
        self.forget(request)
        super().shutdown_request(request)

    def answering(self, sock: Any) -> None:
        """The request on `sock` (the accepted socket or its TLS wrapper) was read in full:
        its deadline no longer applies."""
        fd = sock.fileno()
        with self._lock:
            for found in self._connections.values():
                if found.fd == fd:
                    found.state = ANSWERING

    def connections(self) -> dict[str, int]:
        """How many connections read their request and how many are being answered."""
        with self._lock:
            states = [c.state for c in self._connections.values() if not c.dropped]
        return {READING: states.count(READING), ANSWERING: states.count(ANSWERING)}

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed: one we dropped, or a client gone, is no news."""
        log.debug("%s: connection from %s ended: %s", self.name, client_address,
                  sys.exc_info()[1])

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def _drop(self, connection: _Connection, reason: str) -> None:
        """Close a connection's socket under its thread (its read returns); the thread ends
        and removes it. Called with the lock held."""
        if connection.dropped:
            return
        connection.dropped = reason
        # Through the descriptor: the accepted socket object may be detached (TLS) by now.
        try:
            handle = socket.socket(fileno=connection.fd)
        except OSError:
            self.on_drop(reason)
            return
        try:
            handle.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already gone
        finally:
            handle.detach()  # the connection's own thread closes it
        self.on_drop(reason)

    def _drop_new(self, request: Any) -> None:
        with contextlib.suppress(OSError):
            if self.refusal:
                request.settimeout(0.1)
                request.sendall(self.refusal)
            request.close()
        self.on_drop("busy")

    def _reap(self) -> None:
        tick = min(0.5, self.limits.request_deadline_s / 4)
        while not self._closed.wait(tick):
            late = time.monotonic() - self.limits.request_deadline_s
            with self._lock:
                for connection in list(self._connections.values()):
                    if connection.state == READING and connection.since < late:
                        self._drop(connection, "deadline")


class BoundedHandler(BaseHTTPRequestHandler):
    """A request handler for a BoundedServer: a request without a body is answered as soon as
    its headers are read; `read_body` reads one within the body cap."""

    server: BoundedServer

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        length = (self.headers.get("Content-Length") or "").strip()
        if length in ("", "0") and not self.headers.get("Transfer-Encoding"):
            self.server.answering(self.request)
        return True

    def read_body(self) -> bytes | None:
        """The request's body; None once a refusal was sent (413 past the cap, 411 without a
        Content-Length, 400 for one that is not a number)."""
        raw = self.headers.get("Content-Length")
        if raw is None:
            self.server.on_drop("no_length")
            self.send_error(411, "a Content-Length is required")
            return None
        try:
            length = int(raw)
        except ValueError:
            self.send_error(400, "Content-Length is not a number")
            return None
        if length < 0 or length > self.server.limits.max_body_bytes:
            self.server.on_drop("too_large")
            self.send_error(413, f"at most {self.server.limits.max_body_bytes} bytes")
            return None
        body = self.rfile.read(length)
        self.server.answering(self.request)
        return body


def tls_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A server context for a PEM certificate (chain) and key, loaded from memory files (the
    key never touches a disk)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    fds = [os.memfd_create("tls-cert"), os.memfd_create("tls-key")]
    try:
        for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
            with os.fdopen(fd, "wb", closefd=False) as fh:
                fh.write(data)
        context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)
    return context


class TLSServer(BoundedServer):
    """A BoundedServer speaking TLS with `context()` of the moment (None: no certificate yet,
    every client is closed at once)."""

    refusal = b""  # no plain-text answer to a client expecting a TLS handshake

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 limits: Limits, context: Callable[[], ssl.SSLContext | None],
                 on_drop: Callable[[str], None] = lambda reason: None,
                 *, name: str = "https") -> None:
        self.context = context
        self.handler = handler
        super().__init__(address, handler, limits, on_drop, name=name)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client gone, or dropped by us
            super().handle_error(request, client_address)
            return
        log.warning("%s: request from %s failed", self.name, client_address, exc_info=True)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs in the request's own thread: a slow handshake blocks nobody else.
        context = self.context()
        if context is None:
            return
        try:
            tls = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            # The failed wrapper has closed the descriptor already: forget it before another
            # connection is given the same number.
            self.forget(request)
            log.debug("%s: TLS handshake failed: %s", self.name, error)
            return
        try:
            self.handler(tls, client_address, self)
        finally:
            self.forget(request)  # before its descriptor is closed and reused
            tls.close()
