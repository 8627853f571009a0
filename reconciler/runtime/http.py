"""The reconciler's HTTP endpoints: /metrics (Prometheus), /healthz (liveness), /readyz.

Started by `reconciler.runtime.process` on `Settings.http_address`; the Deployment's probes and the
Prometheus scraper call it. The runtime supplies the two checks, each returning (ok, detail
lines): /healthz fails only when the process is wedged (a thread that must run has died), so the
kubelet restarts it; /readyz fails until the watch caches are synced, and lists what the replica
is doing (leader or standby, directory-source problems) in its body.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reconciler.listeners import BoundedHandler, BoundedServer, Limits
from reconciler.metrics import Metrics

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, list[str]]]
# Probes and a scraper or two: few connections, no body.
LIMITS = Limits(max_connections=32, request_deadline_s=5.0, max_body_bytes=0)


class HealthServer:
    """A small threaded HTTP server; `port` is the bound port (useful with port 0)."""

    def __init__(self, host: str, port: int, metrics: Metrics, *, healthy: Check,
                 ready: Check) -> None:
        self.metrics = metrics
        self.healthy = healthy
        self.ready = ready
        server = self

        class Handler(BoundedHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, server.metrics.exposition(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    self._check(server.healthy)
                elif path == "/readyz":
                    self._check(server.ready)
                else:
                    self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

            def _check(self, check: Check) -> None:
                try:
                    ok, lines = check()
                except Exception as error:  # a failing check is an unhealthy answer
                    ok, lines = False, [f"check failed: {error}"]
                body = "\n".join(["ok" if ok else "failed", *lines]) + "\n"
                self._send(200 if ok else 503, body.encode())

            def _send(self, code: int, body: bytes,
                      content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                # Probes hit these every few seconds: not worth an info line each.
                log.debug("http %s", format % args)

        self._httpd = BoundedServer(
            (host, port), Handler, LIMITS, name="metrics",
            on_drop=lambda reason: metrics.http_connections_dropped_total.labels(
                listener="metrics", reason=reason).inc())
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # A short poll interval makes stop() quick (shutdown waits for the next poll).
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.1,),
                                        name="http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
