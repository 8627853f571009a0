"""A read-only HTTP view of backups being restored, for KaiwuDB's IMPORT to read.

Called by reconciler/kaiwudb/backup/restore.py. KWDB's IMPORT reads `nodelocal://` or `http(s)://`,
never `s3://` (kaiwudb-facts.md), and `IMPORT DATABASE CSV DATA ("http://.../<db>")` lists a
directory from the `<a href>` links of its index page (kwbase/pkg/storage/cloud/
http_storage.go `ListFiles`). So while a restore runs, the leading reconciler serves that
backup's files straight from its target (S3 or the mounted claim) under a random token, answering
exactly what KWDB's HTTP storage client asks (kwbase/pkg/storage/cloud/http_storage.go):
- a directory's listing at its path *without* a trailing slash (ListFiles GETs the base, whose
  path `req` builds with Go's path.Join, which drops the slash: :332-355, :406-410), or with one;
  an index page of `<a href>` links, a subdirectory's ending in `/`. Links are the names
  themselves, HTML-escaped and not percent-encoded: the client takes the href's text as a path
  element (html.Parse decodes the entities) and percent-encodes it itself when it builds the URL;
- `HEAD /<token>/<file>` for its size (Size, :365-379; IMPORT sizes every data file first,
  importer/import_csv.go:96-103, and falls back to reading bytes 0-0 when that fails);
- `GET` of a file, whole or a byte range (`Range: bytes=a-b` or `bytes=a-`: Seek and resumed
  reads, :226-245, :286-303), answered 206 with Content-Range, `Accept-Ranges: bytes` always.
Nothing else is served; a token is withdrawn when its restore ends. Connections are bounded as
every listener of the reconciler is (reconciler.listeners, LIMITS). The server starts on first
use (Settings.restore_http_address) and KaiwuDB pods reach it
at Settings.restore_advertise_host (the reconciler pod's IP, from the downward API).

It speaks only TLS: the token and the backup's rows never cross the pod network in the clear,
and KWDB reads from this server, not from whoever answers at its address. The certificate
(the advertised host as its SAN) is issued by a CA this process makes on first use; its key
never leaves memory, so a CA left trusted after the process ended can sign nothing. KWDB trusts
a server's certificate when it is signed by a system CA or by one of the PEM certificates of
the cluster setting `cloudstorage.http.custom_ca` (storage/cloud/http_storage.go:76-87,
makeHTTPClient: SystemCertPool plus AppendCertsFromPEM; the setting: external_storage.go:367),
read each time an IMPORT opens its storage. `custom_ca_with` is how the restore step puts this
CA into that setting and takes it (and any earlier process's) out again: certificates are told
apart by RESTORE_CA_NAME, their subject's common name.
"""

from __future__ import annotations

import html
import logging
import secrets
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote, urlsplit

from cryptography import x509
from cryptography.x509.oid import NameOID

from reconciler.kaiwudb.backup.targets import Target, TargetError
from reconciler.kaiwudb.certs.authority import new_ca
from reconciler.kaiwudb.certs.keys import CertKey, CertSettings
from reconciler.kaiwudb.certs.leaves import issue_server
from reconciler.listeners import BoundedHandler, Limits, TLSServer, tls_context

log = logging.getLogger(__name__)

# KWDB's IMPORT reads a file or a listing per request, a few at a time per node; a file
# server that KWDB cannot reach within 5 s is of no use to it anyway.
LIMITS = Limits(max_connections=64, request_deadline_s=5.0, max_body_bytes=0,
                io_timeout_s=60.0)

# The common name of every CA a restore file server makes: how `custom_ca_with` tells them
# from certificates a user put into cloudstorage.http.custom_ca.
RESTORE_CA_NAME = "kaiwu-operator restore file server"
# The CA and its certificate live as long as the process (the key only in memory); they are
# made anew when less than RENEW_BEFORE of a year is left.
CREDENTIALS = CertSettings(ca_validity=timedelta(days=365), leaf_validity=timedelta(days=365))
RENEW_BEFORE = timedelta(days=30)
_BEGIN, _END = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
# The most of cloudstorage.http.custom_ca the restore reads into certificates: a few CAs are a
# few KiB; anything far larger is no trust store (and anyone with admin rights may write it).
CUSTOM_CA_MAX_CHARS = 256 * 1024


def default_advertise_host() -> str:
    """This host's address by its name, else loopback (a reconciler run outside a pod)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class BackupFileServer:
    """Publishes targets under tokens; serves them over HTTP (see the module docstring)."""

    def __init__(self, address: str, advertise_host: str, poll_s: float = 0.5,
                 on_drop: Callable[[str], None] = lambda reason: None) -> None:
        """address: host:port to listen on (empty host: every interface; empty port: any free
        one). poll_s: how often the serving thread looks for stop(), so how long stop() waits.
        on_drop: told why each dropped connection was (reconciler.listeners)."""
        self._on_drop = on_drop
        host, _, port = address.rpartition(":")
        self._bind = (host or "0.0.0.0", int(port or 0))
        self.advertise_host = advertise_host
        self._published: dict[str, Target] = {}
        self._keys: dict[str, str] = {}  # token -> the key it was published under
        self._lock = threading.Lock()
        self._server: TLSServer | None = None
        self._poll_s = poll_s
        self._ca: CertKey | None = None
        self._context: ssl.SSLContext | None = None

    def publish(self, key: str, target: Target) -> str:
        """Serve `target`; returns its base URL. The same key keeps its token."""
        self._start()
        self.ca_pem()  # a certificate, before anyone is told where to connect
        with self._lock:
            token = next((t for t, k in self._keys.items() if k == key), None)
            if token is None:
                token = secrets.token_urlsafe(16)
                self._keys[token] = key
            self._published[token] = target
        assert self._server is not None
        return f"https://{self.advertise_host}:{self._server.server_address[1]}/{token}"

    def ca_pem(self, now: datetime | None = None) -> str:
        """The PEM certificate of the CA that issued the server's certificate: what KWDB must
        trust to read from it (the restore step puts it into cloudstorage.http.custom_ca).
        Made on first use; made anew, with a new server certificate, once it nears its end."""
        now = now or datetime.now(UTC)
        with self._lock:
            if self._ca is None or self._ca.cert.not_valid_after_utc - now < RENEW_BEFORE:
                # Only for the host it serves at: while KWDB trusts it, it signs for nothing
                # else KWDB may reach over https (Go's crypto/x509 enforces name constraints).
                ca = new_ca(RESTORE_CA_NAME, now, CREDENTIALS,
                            permitted_hosts=(self.advertise_host,))
                leaf = issue_server(ca, RESTORE_CA_NAME, [self.advertise_host], now, CREDENTIALS)
                self._context = tls_context(leaf.cert_pem, leaf.key_pem)
                self._ca = ca
            return self._ca.cert_pem.decode()

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

            class Handler(BoundedHandler):
                def do_GET(self) -> None:
                    owner._answer(self, body=True)

                def do_HEAD(self) -> None:
                    owner._answer(self, body=False)

                def log_message(self, fmt: str, *args: object) -> None:
                    log.debug("restore server: " + fmt, *args)

            self._server = TLSServer(self._bind, Handler, LIMITS, lambda: owner._context,
                                     self._on_drop, name="restore-files")
            threading.Thread(target=self._server.serve_forever, args=(self._poll_s,),
                             name="restore-files", daemon=True).start()

    def _answer(self, request: BoundedHandler, *, body: bool) -> None:
        path = unquote(urlsplit(request.path).path).lstrip("/")
        token, _, rel = path.partition("/")
        with self._lock:
            target = self._published.get(token)
        # Only relative paths inside the backup: no `..`, no empty segment (`//etc/passwd`
        # would join to an absolute path outside the target's directory).
        parts = rel.split("/")
        if target is None or ".." in parts or "." in parts or "" in parts[:-1]:
            request.send_error(404)
            return
        try:
            data = None if rel == "" or rel.endswith("/") else target.get(rel)
            if data is None:
                directory = rel if rel == "" or rel.endswith("/") else rel + "/"
                listing = target.list(directory)  # a target lists dir/ as dir
                if directory and not listing:
                    request.send_error(404)
                    return
                self._send(request, 200, self._index(listing, directory).encode(),
                           "text/html; charset=utf-8", body=body)
                return
        except TargetError as err:
            log.warning("restore server: %s", err)
            request.send_error(502)
            return
        wanted = byte_range(request.headers.get("Range"), len(data))
        if wanted is None:
            self._send(request, 200, data, "application/octet-stream", body=body)
        elif wanted == (0, -1):
            request.send_response(416)
            request.send_header("Content-Range", f"bytes */{len(data)}")
            request.send_header("Content-Length", "0")
            request.end_headers()
        else:
            start, end = wanted
            self._send(request, 206, data[start:end + 1], "application/octet-stream",
                       body=body, extra={"Content-Range": f"bytes {start}-{end}/{len(data)}"})

    @staticmethod
    def _send(request: BoundedHandler, code: int, payload: bytes, kind: str, *,
              body: bool, extra: dict[str, str] | None = None) -> None:
        request.send_response(code)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(payload)))
        request.send_header("Accept-Ranges", "bytes")
        for key, value in (extra or {}).items():
            request.send_header(key, value)
        request.end_headers()
        if body:
            request.wfile.write(payload)

    @staticmethod
    def _index(listing: Mapping[str, int], rel: str) -> str:
        """The index page of directory `rel`: its files and subdirectories (`listing`: every
        key under it, as the target lists them)."""
        entries = set()
        for key in listing:
            rest = key[len(rel):]
            head, sep, _ = rest.partition("/")
            entries.add(head + ("/" if sep else ""))
        links = "".join(f'<a href="{html.escape(e, quote=True)}">{html.escape(e)}</a>\n'
                        for e in sorted(entries))
        return f"<html><body><pre>\n{links}</pre></body></html>\n"


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive (first, last) byte of a `Range: bytes=a-b` or `bytes=a-` header, clamped
    to the file; None to send the whole file (no header, or one this server does not read:
    several ranges, suffix ranges; and an empty file: KWDB reads a file whose size is 0 as the
    range 0-0, kwbase/pkg/sql/importer/import_csv.go:96-101 and storage/cloud/http_storage.go:
    286-303, and takes a 200, :437-443, where a 416 would fail the import of an empty table);
    (0, -1) when the range starts past the end (416)."""
    if not header or not header.startswith("bytes=") or "," in header or size == 0:
        return None
    first, sep, last = header[len("bytes="):].strip().partition("-")
    if not sep or not first.isdigit() or (last and not last.isdigit()):
        return None
    start = int(first)
    if start >= size:
        return (0, -1)
    end = min(int(last), size - 1) if last else size - 1
    return None if end < start else (start, end)


def custom_ca_with(current: str, ours: str | None) -> str:
    """The value of cloudstorage.http.custom_ca that trusts `ours` (a restore file server's
    CA; None: none of them) and keeps every other certificate of `current`, the setting's
    value now (anyone with admin rights may have written it: read as hostile text). Every
    certificate named RESTORE_CA_NAME goes (an earlier process's CA can serve nothing: its key
    is gone); `current` itself when nothing changes, so a value the reconciler does not need
    to touch is never rewritten."""
    if len(current) > CUSTOM_CA_MAX_CHARS:
        raise ValueError(f"cloudstorage.http.custom_ca holds {len(current)} characters, more "
                         f"than {CUSTOM_CA_MAX_CHARS} (a few certificates); RESET CLUSTER "
                         "SETTING cloudstorage.http.custom_ca and set only your CAs")
    if "\\" in current:
        # No PEM holds a backslash; kwbase prints a value holding a control character Go-quoted
        # (cli/sql_util.go:936-963), newlines as `\n`: rewriting that would write the quoting.
        raise ValueError("cloudstorage.http.custom_ca holds a character kwbase prints escaped, "
                         "so it cannot be read back as it is set; RESET CLUSTER SETTING "
                         "cloudstorage.http.custom_ca and set only your CAs")
    blocks = pem_certificates(current)
    ours_by_name = [_restore_ca_name(block) for block in blocks]  # each parsed once
    others = [block for block, named in zip(blocks, ours_by_name, strict=True) if not named]
    restore_cas = [block for block, named in zip(blocks, ours_by_name, strict=True) if named]
    wanted = [ours.strip()] if ours is not None else []
    if restore_cas == wanted:
        return current
    return "".join(block + "\n" for block in [*others, *wanted])


def pem_certificates(text: str) -> list[str]:
    """Every `-----BEGIN CERTIFICATE-----` ... `-----END CERTIFICATE-----` block of `text`, in
    one pass (a pattern with a lazy `.*?` takes quadratic time on BEGIN lines without an END)."""
    blocks, at = [], 0
    while (start := text.find(_BEGIN, at)) >= 0:
        end = text.find(_END, start + len(_BEGIN))
        if end < 0:
            break
        nested = text.rfind(_BEGIN, start + len(_BEGIN), end)
        start = nested if nested >= 0 else start  # a BEGIN without its END is no block
        blocks.append(text[start:end + len(_END)].strip())
        at = end + len(_END)
    return blocks


def _restore_ca_name(block: str) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(block.encode())
    except ValueError:
        return False
    return any(a.value == RESTORE_CA_NAME
               for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME))
