"""Kubernetes API access for the reconciler: plain-dict objects over the `kubernetes` client.

Every other reconciler module reaches the API server through `Kube`: reads (get, list, watch),
server-side apply under the reconciler's one field manager, deletes with preconditions, status
updates and exec. Objects stay plain dicts (as the renderer builds them) instead of generated
models, so any kind, including our own KaiwuCluster, takes the same path and nothing is lost to a
model that does not know a field. Connection comes from the `kubernetes` package's own config
loaders (in-cluster service account, or a kubeconfig file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from reconciler.kube import podexec
from reconciler.kube.echo import OwnWrites
from reconciler.kube.kinds import Kind, kind_of
from reconciler.metrics import Metrics
from reconciler.model import Obj

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Objects per page of a list (client-go's informers read 500): a list of thousands of Pods is never
# one response held whole in memory.
LIST_PAGE_SIZE = 250


class ApiError(Exception):
    """A failed API call: HTTP status, the server's reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @classmethod
    def of(cls, error: ApiException) -> ApiError:
        reason, message = str(error.reason or ""), str(error.body or "")
        try:
            body = json.loads(error.body or "{}")
            reason, message = body.get("reason", reason), body.get("message", message)
        except (TypeError, ValueError):
            pass
        return cls(int(error.status or 0), str(reason), str(message))

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


class ConnectionSetupError(Exception):
    """No way to reach the API server: no usable kubeconfig, or a server that does not answer.
    The message names the cause and the fix on one line; `invalid` is True for a configuration
    the user must fix (the CLI's exit 2), False for a server that did not answer (exit 1)."""

    def __init__(self, message: str, *, invalid: bool) -> None:
        super().__init__(message)
        self.invalid = invalid


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In-cluster config when running in a pod and no kubeconfig is named; else the kubeconfig.
    Raises ConnectionSetupError (invalid) when neither is usable."""
    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call,unused-ignore]
            return client.ApiClient()
        except config.ConfigException:
            pass
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if not any(Path(path).expanduser().is_file() for path in where.split(os.pathsep)):
        # The client's own message here is "Invalid kube-config file. No configuration found.",
        # which names neither the file it looked for nor the way out.
        if kubeconfig is not None:
            raise ConnectionSetupError(f"kubeconfig {kubeconfig} does not exist (pass an "
                                       "existing file to --kubeconfig)", invalid=True)
        raise ConnectionSetupError(
            f"no kubeconfig: {where} does not exist and this is not a pod with a service "
            "account (pass --kubeconfig FILE, or set KAIWU_KUBECONFIG or KUBECONFIG)",
            invalid=True)
    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call,unused-ignore]
            config_file=kubeconfig, context=context, client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError, TypeError, AttributeError,
            yaml.YAMLError) as error:
        detail = " ".join(str(error).split()) or type(error).__name__
        raise ConnectionSetupError(
            f"kubeconfig {where} is not usable: {detail} (check the file, or choose a context "
            "with --context)", invalid=True) from error
    return client.ApiClient(configuration)


def check_reachable(api: client.ApiClient, timeout_s: float) -> None:
    """Ask the server for its version once, so that a wrong address or a server that is down is
    reported at start, in one line, instead of as watch retries that never end."""
    host = api.configuration.host
    try:
        # One try: the pool's own retries would log a warning per attempt before the one line.
        answer = send(api, "GET", "/version", timeout=timeout_s, retries=False)
        if not 200 <= int(answer.status) < 300:
            raise ApiException(status=answer.status, reason=answer.reason)
        answer.release_conn()
    except ApiException as error:
        if error.status in (401, 403):
            raise ConnectionSetupError(
                f"the API server at {host} refused the credentials (HTTP {error.status}); check "
                "the kubeconfig's user or the service account", invalid=False) from error
        raise ConnectionSetupError(
            f"the API server at {host} answered HTTP {error.status} {error.reason} (is {host} "
            "a Kubernetes API server?)", invalid=False) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        detail = " ".join(str(reason).split())
        raise ConnectionSetupError(
            f"cannot reach the API server at {host}: {detail} (check that it is running and "
            "that --kubeconfig and --context name the right cluster)", invalid=False) from error


class Watch:
    """The events (type, object) of one watch request, until the server ends it.

    An ERROR event with a 410 status raises ApiError(410): the caller must relist. `close()` may
    be called from any thread (an informer being stopped): the blocked read returns at once and
    the iteration ends quietly, instead of the thread lingering until the server's timeout."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._closed = False

    def close(self) -> None:
        self._closed = True
        # urllib3 raises when the answer is already over (closed, or its connection back in the
        # pool): a watch the server ended, e.g. across an API server restart. Nothing blocks then.
        # OSError: the reading thread closed the socket between urllib3's check and its
        # shutdown (EBADF), the same race seen from the other side.
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            self._raw.shutdown()

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        buffer = b""
        try:
            for chunk in self._raw.stream(amt=65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if self._closed:
                        return
                    if line.strip():
                        yield _watch_event(json.loads(line))
        except Exception:
            if not self._closed:
                raise
        finally:
            self._raw.release_conn()


def _watch_event(event: Obj) -> tuple[str, Obj]:
    obj: Obj = event.get("object", {})
    if event.get("type") == "ERROR":
        raise ApiError(int(obj.get("code", 500)), obj.get("reason", ""), obj.get("message", ""))
    return str(event["type"]), obj


def count_requests(api: client.ApiClient, metrics: Metrics) -> None:
    """Count every request `api` sends in rest_client_requests_total{code,method,host}, as
    controller-runtime counts client-go's. Called by the runtime on the API client it shares
    between the caches, the workers and the leader election. `code` is the HTTP status, or
    "<error>" when no answer came (client-go's value); `host` is the API server's host:port, so
    every label takes a handful of values. Counted at the connection pool, which `send` and the
    generated client both go through. Exec's websocket connections are not counted."""
    pool: Any = api.rest_client.pool_manager
    request = pool.request

    def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        code = "<error>"
        try:
            response = request(method, url, *args, **kwargs)
            code = str(getattr(response, "status", "<error>"))
            return response
        finally:
            metrics.rest_client_requests.labels(
                code=code, method=method.upper(), host=urlsplit(url).netloc).inc()

    pool.request = counted


def send(api: client.ApiClient, method: str, path: str, *,
         query: list[tuple[str, Any]] | None = None, headers: dict[str, str] | None = None,
         body: Any = None, timeout: float | tuple[float, float] | None = None,
         retries: bool | None = None) -> Any:
    """One request through the ApiClient's connection pool, with its host, credentials (TLS in
    the pool, the bearer token refreshed by its configuration) and default headers (the user
    agent); returns the raw urllib3 response, not yet read, whatever its status.

    Written against the pool rather than the generated `call_api`, whose signature and body
    handling changed between client releases (36: `call_api(path, method, ...)`, a string body
    JSON-encoded again; 37: `param_serialize` then `call_api`). A dict or list body is sent as
    JSON, a string or bytes as they are (an apply-patch YAML/JSON document). `retries`: None
    keeps the pool's setting, False makes one attempt."""
    configuration = api.configuration
    url = configuration.host + path + (f"?{urlencode(query)}" if query else "")
    all_headers = {**api.default_headers, **(headers or {})}
    for auth in configuration.auth_settings().values():
        if auth.get("in") == "header" and auth.get("value"):
            all_headers[auth["key"]] = auth["value"]
    data = body if body is None or isinstance(body, (str, bytes)) else json.dumps(body)
    limit = (urllib3.Timeout(connect=timeout[0], read=timeout[1]) if isinstance(timeout, tuple)
             else urllib3.Timeout(total=timeout) if timeout else None)
    try:
        extra: dict[str, Any] = {} if retries is None else {"retries": retries}
        return api.rest_client.pool_manager.request(method, url, body=data, headers=all_headers,
                                                    preload_content=False, timeout=limit,
                                                    **extra)
    except urllib3.exceptions.SSLError as error:
        # As the generated client says it: status 0 (no answer), the TLS failure as the reason.
        raise ApiException(status=0, reason=f"{type(error).__name__}\n{error}") from error


class Kube:
    """Plain-dict API calls. Thread-safe: the `kubernetes` ApiClient pools connections, and
    exec never touches it (see `exec`)."""

    WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})

    def __init__(self, api: client.ApiClient, field_manager: str, timeout: float = 30.0,
                 own_writes: OwnWrites | None = None) -> None:
        self.api = api
        self.field_manager = field_manager
        self.timeout = timeout
        self.own_writes = own_writes  # where each write's resulting resourceVersion goes

    def _request(self, method: str, path: str, *, body: Any = None,
                 query: list[tuple[str, Any]] | None = None,
                 content_type: str = "application/json",
                 timeout: float | tuple[float, float] | None = None) -> Any:
        """Send one request; returns the raw urllib3 response (not yet read) of a 2xx answer."""
        try:
            raw = send(self.api, method, path, query=query,
                       headers={"Accept": "application/json", "Content-Type": content_type},
                       body=body, timeout=timeout or self.timeout)
        except ApiException as error:
            raise ApiError.of(error) from error
        if not 200 <= int(raw.status) < 300:
            text = raw.data.decode("utf-8", "replace")
            raw.release_conn()
            raise ApiError.of(ApiException(status=raw.status, reason=raw.reason, body=text))
        return raw

    def _call(self, method: str, path: str, *, body: Any = None,
              query: list[tuple[str, Any]] | None = None,
              content_type: str = "application/json") -> Obj:
        own = self.own_writes if method in self.WRITES \
            and ("dryRun", "All") not in (query or []) else None
        target = path.removesuffix("/status").removesuffix("/scale")
        if own is not None:
            own.begin(target)
        try:
            raw = self._request(method, path, body=body, query=query,
                                content_type=content_type)
            try:
                data = raw.data
            finally:
                raw.release_conn()
            result: Obj = json.loads(data) if data else {}
            if own is not None:
                own.record(result)
        finally:
            if own is not None:
                own.end(target)
        return result

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        try:
            return self._call("GET", kind.path(namespace, name))
        except ApiError as error:
            if error.not_found:
                return None
            raise

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        """Items (apiVersion and kind filled in, as watch events carry them) and the list's
        resourceVersion, to start a watch from. Read in pages of LIST_PAGE_SIZE or the kind's
        own `list_page` (one
        consistent snapshot: the server's continue token); `keep` is applied to each item as
        its page arrives, so a cache that keeps only part of each object never holds a whole
        list of whole objects at once."""
        query: list[tuple[str, Any]] = [("limit", kind.list_page or LIST_PAGE_SIZE)]
        if label_selector:
            query.append(("labelSelector", label_selector))
        items: list[Obj] = []
        while True:
            result = self._call("GET", kind.path(namespace), query=query)
            for item in result.get("items") or ():
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
                items.append(keep(item) if keep is not None else item)
            metadata = result.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion", ""))
            query = [*(pair for pair in query if pair[0] != "continue"), ("continue", token)]
            del result

    def watch(self, kind: Kind, resource_version: str, namespace: str | None = None,
              label_selector: str | None = None, timeout_seconds: int = 300) -> Watch:
        """Start a watch from `resource_version`; iterate the result for its events."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"), ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"), ("timeoutSeconds", timeout_seconds)]
        if label_selector:
            query.append(("labelSelector", label_selector))
        return Watch(self._request("GET", kind.path(namespace), query=query,
                                   timeout=(self.timeout, timeout_seconds + 30)))

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        """Server-side apply of a whole object under our field manager."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        query: list[tuple[str, Any]] = [("fieldManager", self.field_manager),
                                        ("force", "true" if force else "false")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self._call("PATCH", kind.path(meta.get("namespace"), meta["name"]),
                          body=json.dumps(obj), query=query, content_type=APPLY_PATCH)

    def replace(self, obj: Obj) -> Obj:
        """PUT a whole object: what is not in it is gone (a key of a Secret's data too), and its
        metadata.resourceVersion makes a concurrent change a 409 instead of a lost update."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        return self._call("PUT", kind.path(meta.get("namespace"), meta["name"]), body=obj,
                          query=[("fieldManager", self.field_manager)])

    def create(self, obj: Obj) -> Obj:
        kind = kind_of(obj)
        return self._call("POST", kind.path(obj["metadata"].get("namespace")), body=obj,
                          query=[("fieldManager", self.field_manager)])

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
              subresource: str = "") -> Obj:
        path = kind.path(namespace, name) + (f"/{subresource}" if subresource else "")
        return self._call("PATCH", path, body=patch, content_type=MERGE_PATCH,
                          query=[("fieldManager", self.field_manager)])

    def json_patch(self, kind: Kind, namespace: str | None, name: str,
                   operations: list[Obj]) -> Obj:
        """An RFC 6902 patch (a list of operations; `test` operations guard the others). The
        body must stay a list: the client turns any other body under this content type into a
        strategic merge patch."""
        return self._call("PATCH", kind.path(namespace, name), body=list(operations),
                          content_type=JSON_PATCH, query=[("fieldManager", self.field_manager)])

    def replace_status(self, obj: Obj) -> Obj:
        """PUT the status subresource (resourceVersion in obj guards against lost updates)."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        return self._call("PUT", kind.path(meta.get("namespace"), meta["name"]) + "/status",
                          body=obj, query=[("fieldManager", self.field_manager)])

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None,
               propagation: str | None = None) -> bool:
        """Delete; False when it was already gone. `uid` makes sure we delete the object we
        judged, not a successor with the same name."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if propagation:
            body["propagationPolicy"] = propagation
        try:
            self._call("DELETE", kind.path(namespace, name), body=body)
        except ApiError as error:
            if error.not_found:
                return False
            raise
        return True

    def server_version(self) -> str:
        info = self._call("GET", "/version")
        return str(info.get("gitVersion", ""))

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        """Run a command in a container (no shell); returns (stdout, stderr, exit code), the
        code -1 when no exit status came (reconciler.kube.podexec.run says why and how)."""
        return podexec.run(self.api.configuration, namespace, pod, container, command, timeout)


def context_namespace(given: str | None, kubeconfig: str | None, context: str | None) -> str:
    """The namespace a kubectl-like command works in: `given` (-n), else the kubeconfig
    context's, else the pod's own (in-cluster), else 'default' (kaiwu status, kaiwu backup)."""
    if given:
        return given
    try:
        from kubernetes import config
        listed = config.list_kube_config_contexts  # untyped in the client
        contexts, current = listed(config_file=kubeconfig)  # type: ignore[no-untyped-call,unused-ignore]
        if context:
            current = next((x for x in contexts if x["name"] == context), current)
        found = (current or {}).get("context", {}).get("namespace")
        if found:
            return str(found)
    except Exception:  # no kubeconfig (in a pod): the service account's namespace below
        pass
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


# The flags kubectl-like commands (kaiwu status, backup, restore) take that say where to
# connect: kubectl accepts them before the command too (`kubectl -n prod get ...`).
CONNECTION_FLAGS = ("-n", "--namespace", "--kubeconfig", "--context")


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """CONNECTION_FLAGS on a command's parser, as kubectl spells and defaults them."""
    parser.add_argument("-n", "--namespace", help="the namespace (default: the context's, else "
                        "'default')")
    parser.add_argument("--kubeconfig", default=os.environ.get("KAIWU_KUBECONFIG"),
                        help="kubeconfig file (default: KUBECONFIG, ~/.kube/config, or "
                        "in-cluster)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")


def connection_flags_last(argv: Sequence[str]) -> list[str]:
    """`argv` with the connection flags that come before the action word (kubectl's
    `-n prod get ...` habit) moved after it, values and all, so argparse's subcommand sees them."""
    head: list[str] = []
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        flag = rest[0]
        name = flag.split("=", 1)[0]
        if name in CONNECTION_FLAGS and ("=" in flag or len(rest) > 1):
            taken = 1 if "=" in flag else 2
        elif flag.startswith("-n") and len(flag) > 2:  # -nprod
            taken = 1
        else:
            break
        head += rest[:taken]
        rest = rest[taken:]
    return (rest[:1] + head + rest[1:]) if rest else head
