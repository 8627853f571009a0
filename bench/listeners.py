"""Benchmark: the admission webhook under a flood of slow clients (issue 25, item 4).

Run: `.venv/bin/python bench/listeners.py [--reviews 200] [--flood 500] [--no-append]`.
Side by side in one run, the reconciler's webhook server (TLS, reconciler.listeners.Limits as
shipped: 64 connections, a 5 s whole-request deadline, an accept queue of 128), the same server
without bounds, and it as it was before (no bounds and socketserver's accept queue of 5: every
connection keeps a thread for as long as it likes):
- quiet: `--reviews` AdmissionReviews posted one after another;
- flooded: the same while `--flood` connections that never shake hands are held open (a new one
  opened for each that is dropped).
Prints review latency (median, p99, max, in ms), the connections the server held at the end of
each flood (each a thread), and the connections it dropped (by reason); appends the table to
bench/RESULTS.md. The API server's default webhook time-out is 10 s.
"""

from __future__ import annotations

import argparse
import datetime
import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import report  # noqa: E402
from reconciler.listeners import BoundedServer, Limits  # noqa: E402
from reconciler.metrics import Metrics  # noqa: E402
from reconciler.runtime import webhook  # noqa: E402
from tests.support.webhook_client import certificate, post, review  # noqa: E402

UNBOUNDED = Limits(max_connections=10**6, request_deadline_s=10.0**6,
                   max_body_bytes=webhook.LIMITS.max_body_bytes, io_timeout_s=10.0**6)


@contextmanager
def server(limits: Limits, backlog: int = 128
           ) -> Iterator[tuple[webhook.WebhookServer, bytes, Metrics]]:
    shipped, queue = webhook.LIMITS, BoundedServer.request_queue_size
    webhook.LIMITS = limits  # read when the server is made
    BoundedServer.request_queue_size = backlog
    try:
        metrics = Metrics()
        made = webhook.WebhookServer("127.0.0.1", 0, metrics,
                                     lambda body: {"response": {"allowed": True}})
    finally:
        webhook.LIMITS, BoundedServer.request_queue_size = shipped, queue
    ca, cert, key = certificate(datetime.datetime.now(datetime.UTC))
    made.load(cert, key)
    made.start()
    try:
        yield made, ca, metrics
    finally:
        made.stop()


@contextmanager
def flood(port: int, size: int) -> Iterator[None]:
    """`size` silent connections held open; one reopened whenever the server drops one."""
    stop = threading.Event()
    held: list[socket.socket] = []

    def keep() -> None:
        while not stop.is_set():
            for client in list(held):
                try:
                    client.setblocking(False)
                    if client.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    held.remove(client)
                    client.close()
            while len(held) < size and not stop.is_set():
                try:
                    held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                except OSError:
                    break
            stop.wait(0.05)

    thread = threading.Thread(target=keep, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(held) < size and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for client in held:
            client.close()


def latencies(port: int, ca: bytes, count: int) -> list[float]:
    found = []
    for _ in range(count):
        started = time.monotonic()
        try:
            status = post(port, ca, review(3))[0]
        except OSError:
            status = 0
        found.append((time.monotonic() - started) if status == 200 else float("inf"))
    return found


def row(name: str, took: list[float], held: int | str, dropped: str) -> str:
    done = sorted(took)
    ms = [t * 1000 for t in done]
    failed = sum(1 for t in done if t == float("inf"))
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (f"| {name} | {statistics.median(ms):.1f} | {p99:.1f} | {max(ms):.1f} | {failed} | "
            f"{held} | {dropped} |")


def dropped_of(metrics: Metrics) -> str:
    found = []
    for reason in ("evicted", "deadline", "busy", "too_large", "no_length"):
        value = metrics.value("kaiwu_http_connections_dropped_total",
                              {"listener": "webhook", "reason": reason})
        if value:
            found.append(f"{reason} {int(value)}")
    return ", ".join(found) or "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=200)
    parser.add_argument("--flood", type=int, default=500)
    parser.add_argument("--no-append", action="store_true", help="do not touch RESULTS.md")
    args = parser.parse_args()
    rows = []
    variants = (("bounded (as shipped)", webhook.LIMITS, 128),
                ("unbounded, accept queue 128", UNBOUNDED, 128),
                ("before (unbounded, accept queue 5)", UNBOUNDED, 5))
    for name, limits, backlog in variants:
        with server(limits, backlog) as (made, ca, metrics):
            rows.append(row(f"{name}, quiet", latencies(made.port, ca, args.reviews), "-", "-"))
            with flood(made.port, args.flood):
                took = latencies(made.port, ca, args.reviews)
                http: Any = made._httpd
                held = sum(http.connections().values())
            rows.append(row(f"{name}, {args.flood} slow clients", took, held,
                            dropped_of(metrics)))
    report("Webhook under a slow-client flood (`bench/listeners.py`)",
           f"{args.reviews} reviews per row, one at a time, TLS, on 127.0.0.1.",
           ("server", "median ms", "p99 ms", "max ms", "failed", "connections held",
            "dropped"), rows, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
