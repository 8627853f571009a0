"""A small JSON REST client and list/watch reflector for the simulated kubelet and provisioner.

The simulated kubelet (tests/world/kubelet.py) and storage provisioner (tests/world/storage.py)
talk to the real kube-apiserver the way real node agents do: plain JSON over HTTPS with a bearer
token, list-then-watch with resource versions, merge patches on status subresources. They work on
raw dicts rather than the `kubernetes` client's generated models, because those models are built
for a newer API than the 1.20 control plane serves and the agents need exact control over which
fields a patch touches.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class KubeAccess:
    """Where the API server is and how to authenticate: what a kubelet's kubeconfig holds."""

    server: str
    ca_path: str
    token: str


class ApiError(Exception):
    """A non-2xx answer from the API server, with its metav1.Status body when it sent one."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        self.status = status
        self.body = body
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        self.reason: str = parsed.get("reason", "") if isinstance(parsed, dict) else ""
        message = parsed.get("message", body) if isinstance(parsed, dict) else body
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {message}")


class KubeRest:
    """Thread-safe JSON calls to one API server (urllib3 pools are shared across threads)."""

    def __init__(self, access: KubeAccess, *, pool_size: int = 16, timeout_s: float = 15.0) -> None:
        self.access = access
        self.timeout_s = timeout_s
        self._http = urllib3.PoolManager(
            num_pools=4,
            maxsize=pool_size,
            cert_reqs="CERT_REQUIRED",
            ca_certs=access.ca_path,
        )

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self.access.token}",
            "Accept": "application/json",
            "User-Agent": "kaiwu-test-world/sim-kubelet",
        }
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _url(self, path: str, query: Mapping[str, str | int] | None) -> str:
        url = self.access.server.rstrip("/") + path
        if query:
            url += "?" + urlencode({k: str(v) for k, v in query.items()})
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JsonObj:
        """One call; returns the decoded JSON answer or raises ApiError."""
        data = None if body is None else json.dumps(body).encode()
        resp = self._http.request(
            method,
            self._url(path, query),
            body=data,
            headers=self._headers(content_type if data is not None else None),
            timeout=self.timeout_s,
            retries=False,
        )
        text = resp.data.decode("utf-8", errors="replace")
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, method, path, text)
        if not text:
            return {}
        decoded = json.loads(text)
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    def get(self, path: str, query: Mapping[str, str | int] | None = None) -> JsonObj:
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> JsonObj | None:
        try:
            return self.get(path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def create(self, path: str, body: JsonObj) -> JsonObj:
        return self.request("POST", path, body=body)

    def put(self, path: str, body: JsonObj) -> JsonObj:
        return self.request("PUT", path, body=body)

    def patch(self, path: str, body: JsonObj, *, content_type: str = MERGE_PATCH) -> JsonObj:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: JsonObj | None = None) -> JsonObj:
        return self.request("DELETE", path, body=body)

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_s: int,
        query: Mapping[str, str | int] | None = None,
        on_open: Callable[[urllib3.BaseHTTPResponse], None] | None = None,
    ) -> Iterator[tuple[str, JsonObj]]:
        """Yield (type, object) watch events until the server ends the watch (timeout_s)."""
        params: dict[str, str | int] = dict(query or {})
        params.update(
            watch="true",
            resourceVersion=resource_version,
            timeoutSeconds=timeout_s,
            allowWatchBookmarks="true",
        )
        resp = self._http.request(
            "GET",
            self._url(path, params),
            headers=self._headers(None),
            preload_content=False,
            # The read timeout bounds a silent connection; the server closes at timeout_s.
            timeout=urllib3.Timeout(connect=5.0, read=timeout_s + 10.0),
            retries=False,
        )
        try:
            if on_open is not None:
                on_open(resp)
            if resp.status != 200:
                raise ApiError(resp.status, "WATCH", path, resp.read().decode(errors="replace"))
            buffer = b""
            for chunk in resp.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    yield str(event["type"]), event["object"]
        finally:
            resp.release_conn()


Handler = Callable[[str, JsonObj], None]


class Reflector:
    """List-then-watch one collection in a thread, calling `handler(type, obj)` for each change.

    After every (re)list the handler sees ADDED/MODIFIED for every object present and DELETED
    for objects that vanished while the watch was down, so callers can keep a simple cache.
    """

    def __init__(
        self,
        rest: KubeRest,
        path: str,
        handler: Handler,
        *,
        name: str,
        query: Mapping[str, str | int] | None = None,
        watch_timeout_s: int = 60,
    ) -> None:
        self._rest = rest
        self._path = path
        self._handler = handler
        self._query = dict(query or {})
        self._watch_timeout_s = watch_timeout_s
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._known: dict[str, JsonObj] = {}
        self._resp: urllib3.BaseHTTPResponse | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            # Unblock a read parked on an idle watch connection.
            with contextlib.suppress(Exception):
                resp.shutdown()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _emit(self, kind: str, obj: JsonObj) -> None:
        try:
            self._handler(kind, obj)
        except Exception:
            log.exception("reflector %s: handler failed on %s", self._path, kind)

    def _relist(self) -> str:
        listed = self._rest.get(self._path, self._query)
        seen: dict[str, JsonObj] = {}
        for item in listed.get("items", []):
            uid = item["metadata"]["uid"]
            seen[uid] = item
            self._emit("MODIFIED" if uid in self._known else "ADDED", item)
        for uid, old in self._known.items():
            if uid not in seen:
                self._emit("DELETED", old)
        self._known = seen
        self._synced.set()
        return str(listed["metadata"]["resourceVersion"])

    def _set_resp(self, resp: urllib3.BaseHTTPResponse) -> None:
        self._resp = resp

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                rv = self._relist()
                backoff = 0.2
                while not self._stop.is_set():
                    for kind, obj in self._rest.watch(
                        self._path,
                        rv,
                        timeout_s=self._watch_timeout_s,
                        query=self._query,
                        on_open=self._set_resp,
                    ):
                        if kind == "ERROR":
                            # Typically 410 Gone: our resource version is too old; relist.
                            raise ApiError(int(obj.get("code", 500)), "WATCH", self._path, "")
                        rv = str(obj["metadata"]["resourceVersion"])
                        if kind == "BOOKMARK":
                            continue
                        uid = obj["metadata"]["uid"]
                        if kind == "DELETED":
                            self._known.pop(uid, None)
                        else:
                            self._known[uid] = obj
                        self._emit(kind, obj)
                        if self._stop.is_set():
                            break
                    self._resp = None
            except Exception as err:
                if self._stop.is_set():
                    break
                log.debug("reflector %s: %s; relisting", self._path, err)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)


def wait_for(
    predicate: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.1
) -> bool:
    """Poll `predicate` until true or timeout; returns its last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
