"""A read-only HTTP view of backups being restored, for KaiwuDB's IMPORT to read.

Called by reconciler/kaiwudb/restore.py. KWDB's IMPORT reads `nodelocal://` or `http(s)://`,
never `s3://` (kaiwudb-facts.md), and `IMPORT DATABASE CSV DATA ("http://.../<db>")` lists a
directory from the `<a href>` links of its index page (kwbase/pkg/storage/cloud/
http_storage.go `ListFiles`). So while a restore runs, the leading reconciler serves that
backup's files straight from its target (S3 or the mounted claim) under a random token:
`GET /<token>/<path>` gives a file, `GET /<token>/<dir>/` an index page of its entries (a
subdirectory's link ends in `/`). Nothing else is served; a token is withdrawn when its restore
ends. The server starts on first use (Settings.restore_http_address) and KaiwuDB pods reach it
at Settings.restore_advertise_host (the reconciler pod's IP, from the downward API).
"""

from __future__ import annotations

import html
import logging
import secrets
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote, urlsplit

from reconciler.kaiwudb.backup_target import Target, TargetError

log = logging.getLogger(__name__)


def default_advertise_host() -> str:
    """This host's address by its name, else loopback (a reconciler run outside a pod)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class BackupFileServer:
    """Publishes targets under tokens; serves them over HTTP (see the module docstring)."""

    def __init__(self, address: str, advertise_host: str, poll_s: float = 0.5) -> None:
        """address: host:port to listen on (empty host: every interface; empty port: any free
        one). poll_s: how often the serving thread looks for stop(), so how long stop() waits."""
        host, _, port = address.rpartition(":")
        self._bind = (host or "0.0.0.0", int(port or 0))
        self.advertise_host = advertise_host
        self._published: dict[str, Target] = {}
        self._keys: dict[str, str] = {}  # token -> the key it was published under
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._poll_s = poll_s

    def publish(self, key: str, target: Target) -> str:
        """Serve `target`; returns its base URL. The same key keeps its token."""
        self._start()
        with self._lock:
            token = next((t for t, k in self._keys.items() if k == key), None)
            if token is None:
                token = secrets.token_urlsafe(16)
                self._keys[token] = key
            self._published[token] = target
        assert self._server is not None
        return f"http://{self.advertise_host}:{self._server.server_address[1]}/{token}"

    def withdraw(self, key: str) -> None:
        with self._lock:
            for token in [t for t, k in self._keys.items() if k == key]:
                self._keys.pop(token, None)
                self._published.pop(token, None)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            owner = self

            class Handler(BaseHTTPRequestHandler):
                def do_GET(self) -> None:
                    owner._answer(self)

                def log_message(self, fmt: str, *args: object) -> None:
                    log.debug("restore server: " + fmt, *args)

            self._server = ThreadingHTTPServer(self._bind, Handler)  # daemon request threads
            threading.Thread(target=self._server.serve_forever, args=(self._poll_s,),
                             name="restore-files", daemon=True).start()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = unquote(urlsplit(request.path).path).lstrip("/")
        token, _, rel = path.partition("/")
        with self._lock:
            target = self._published.get(token)
        # Only relative paths inside the backup: no `..`, no empty segment (`//etc/passwd`
        # would join to an absolute path outside the target's directory).
        parts = rel.split("/")
        if target is None or ".." in parts or "" in parts[:-1]:
            request.send_error(404)
            return
        try:
            if rel == "" or rel.endswith("/"):
                body = self._index(target, rel).encode()
                kind = "text/html; charset=utf-8"
            else:
                data = target.get(rel)
                if data is None:
                    request.send_error(404)
                    return
                body, kind = data, "application/octet-stream"
        except TargetError as err:
            log.warning("restore server: %s", err)
            request.send_error(502)
            return
        request.send_response(200)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    @staticmethod
    def _index(target: Target, rel: str) -> str:
        entries = set()
        for key in target.list(rel):  # a target lists dir/ as dir
            rest = key[len(rel):]
            head, sep, _ = rest.partition("/")
            entries.add(head + ("/" if sep else ""))
        links = "".join(f'<a href="{quote(e)}">{html.escape(e)}</a>\n' for e in sorted(entries))
        return f"<html><body><pre>\n{links}</pre></body></html>\n"
