"""Stories of the requests the reconciler's API client sends and how it reads their answers
(reconciler.kube.client): the URL, query, headers, body and timeout of each call, paging, the
watch stream's framing, and how failures are told apart (not found, conflict, gone, refused
credentials, no answer at all).

The client is the `kubernetes` package's real ApiClient (host, bearer token, user agent); only
its connection pool is replaced by `Pool`, which records each request and hands back the bytes
a test gives it. Nothing here judges a request the way the API server would: whether the server
accepts them is what the world stories (tests/world_stories/) check against a real apiserver.
Exec (a websocket to the kubelet through the apiserver) is tested there only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from reconciler.kube import podexec
from reconciler.kube.client import (
    APPLY_PATCH,
    JSON_PATCH,
    LIST_PAGE_SIZE,
    MERGE_PATCH,
    ApiError,
    ConnectionSetupError,
    Kube,
    Watch,
    check_reachable,
    count_requests,
    load_api_client,
    send,
)
from reconciler.kube.echo import OwnWrites
from reconciler.kube.kinds import LEASE, POD, STATEFUL_SET
from reconciler.kube.podexec import ExecNotRun, exit_status
from reconciler.metrics import Metrics
from reconciler.model import Obj
from tests.support.client_pool import HOST, Answer, Pool, api_client, sts


def kube(**options: Any) -> tuple[Kube, Pool]:
    api, pool = api_client()
    return Kube(api, "kaiwu-reconciler", timeout=7.0, **options), pool




def status(code: int, reason: str, message: str) -> Answer:
    return Answer(code, {"kind": "Status", "reason": reason, "message": message}, reason="Error")


# ---- one request ------------------------------------------------------------------------------

def test_a_request_carries_the_host_token_user_agent_query_and_json_body() -> None:
    api, pool = api_client()
    answer = send(api, "POST", "/api/v1/namespaces/shop/events",
                  query=[("fieldManager", "kaiwu reconciler"), ("limit", 3)],
                  headers={"Content-Type": "application/json"}, body={"a": [1]}, timeout=4.0)
    assert answer is not None and answer.status == 200
    sent = pool.last
    assert sent.method == "POST"
    assert sent.url == f"{HOST}/api/v1/namespaces/shop/events?fieldManager=kaiwu+reconciler&limit=3"
    assert sent.headers["authorization"] == "Bearer t0k"
    assert sent.headers["User-Agent"].startswith("OpenAPI-Generator/")
    assert sent.headers["Content-Type"] == "application/json"
    assert json.loads(sent.body) == {"a": [1]}
    assert (sent.timeout.total, sent.extra) == (4.0, {})


def test_text_bodies_go_as_they_are_and_timeouts_may_split_connect_and_read() -> None:
    api, pool = api_client()
    send(api, "PATCH", "/x", body="kind: Lease\n", timeout=(3.0, 330.0), retries=False)
    sent = pool.last
    assert sent.url == f"{HOST}/x" and sent.body == "kind: Lease\n"
    assert (sent.timeout.connect_timeout, sent.timeout.read_timeout) == (3.0, 330.0)
    assert sent.extra == {"retries": False}
    send(api, "GET", "/y", body=b"raw")
    assert pool.last.body == b"raw" and pool.last.timeout is None
    assert "Content-Type" not in pool.last.headers


def test_a_request_without_a_token_sends_no_authorization() -> None:
    api, pool = api_client()
    api.configuration.api_key = {}
    send(api, "GET", "/version")
    assert "authorization" not in pool.last.headers


def test_a_tls_failure_is_an_answer_with_no_status() -> None:
    api, pool = api_client()
    pool.answers.append(urllib3.exceptions.SSLError("certificate verify failed"))
    with pytest.raises(ApiException) as raised:
        send(api, "GET", "/version")
    assert raised.value.status == 0
    assert raised.value.reason == "SSLError\ncertificate verify failed"


# ---- what each call sends --------------------------------------------------------------------

def test_apply_is_a_forced_server_side_apply_under_our_field_manager() -> None:
    k, pool = kube()
    k.apply(sts())
    sent = pool.last
    assert (sent.method, sent.path) == ("PATCH",
                                        "/apis/apps/v1/namespaces/shop/statefulsets/orders")
    assert sent.query == [("fieldManager", "kaiwu-reconciler"), ("force", "true")]
    assert sent.headers["Content-Type"] == APPLY_PATCH
    assert sent.headers["Accept"] == "application/json"
    assert json.loads(sent.body) == sts()
    assert sent.timeout.total == 7.0
    k.apply(sts(), dry_run=True, force=False)
    assert pool.last.query == [("fieldManager", "kaiwu-reconciler"), ("force", "false"),
                               ("dryRun", "All")]


def test_creates_replaces_patches_and_status_writes_go_where_they_belong() -> None:
    k, pool = kube()
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "kaiwu-reconciler", "namespace": "kaiwu-system"}}
    k.create(lease)
    k.replace(sts("5"))
    k.patch(STATEFUL_SET, "shop", "orders", {"spec": {"replicas": 3}}, subresource="scale")
    k.patch(LEASE, "kaiwu-system", "kaiwu-reconciler", {"spec": {}})
    k.json_patch(STATEFUL_SET, "shop", "orders", [{"op": "remove", "path": "/spec/x"}])
    k.replace_status(sts("6"))
    sts_path = "/apis/apps/v1/namespaces/shop/statefulsets/orders"
    assert [(s.method, s.path, s.headers["Content-Type"]) for s in pool.sent] == [
        ("POST", "/apis/coordination.k8s.io/v1/namespaces/kaiwu-system/leases",
         "application/json"),
        ("PUT", sts_path, "application/json"),
        ("PATCH", sts_path + "/scale", MERGE_PATCH),
        ("PATCH", "/apis/coordination.k8s.io/v1/namespaces/kaiwu-system/leases/kaiwu-reconciler",
         MERGE_PATCH),
        ("PATCH", sts_path, JSON_PATCH),
        ("PUT", sts_path + "/status", "application/json")]
    assert all(s.query == [("fieldManager", "kaiwu-reconciler")] for s in pool.sent)
    assert [json.loads(s.body) for s in pool.sent] == [
        lease, sts("5"), {"spec": {"replicas": 3}}, {"spec": {}},
        [{"op": "remove", "path": "/spec/x"}], sts("6")]


def test_a_delete_carries_its_preconditions_and_a_missing_object_is_no_error() -> None:
    k, pool = kube()
    assert k.delete(POD, "shop", "orders-0", uid="u-1", grace_period_seconds=0,
                    propagation="Background")
    sent = pool.last
    assert (sent.method, sent.path) == ("DELETE", "/api/v1/namespaces/shop/pods/orders-0")
    assert json.loads(sent.body) == {"kind": "DeleteOptions", "apiVersion": "v1",
                                     "preconditions": {"uid": "u-1"},
                                     "gracePeriodSeconds": 0,
                                     "propagationPolicy": "Background"}
    k.delete(POD, "shop", "orders-0")
    assert json.loads(pool.last.body) == {"kind": "DeleteOptions", "apiVersion": "v1"}
    pool.answers.append(status(404, "NotFound", 'pods "orders-0" not found'))
    assert k.delete(POD, "shop", "orders-0") is False
    pool.answers.append(status(409, "Conflict", "Precondition failed: UID in precondition"))
    with pytest.raises(ApiError) as raised:
        k.delete(POD, "shop", "orders-0", uid="u-0")
    assert raised.value.conflict


def test_a_get_of_a_missing_object_is_none_and_other_failures_say_why() -> None:
    k, pool = kube()
    pool.answers.append(Answer(200, sts("9")))
    assert k.get(STATEFUL_SET, "shop", "orders") == sts("9")
    assert pool.last.method == "GET" and pool.last.body is None
    assert pool.last.path == "/apis/apps/v1/namespaces/shop/statefulsets/orders"
    pool.answers.append(status(404, "NotFound", "not found"))
    assert k.get(STATEFUL_SET, "shop", "orders") is None
    failing = status(403, "Forbidden", 'statefulsets.apps "orders" is forbidden')
    pool.answers.append(failing)
    with pytest.raises(ApiError) as raised:
        k.get(STATEFUL_SET, "shop", "orders")
    error = raised.value
    assert (error.status, error.reason, error.forbidden) == (403, "Forbidden", True)
    assert error.message == 'statefulsets.apps "orders" is forbidden'
    assert str(error) == 'HTTP 403 Forbidden: statefulsets.apps "orders" is forbidden'
    assert failing.released, "a failed answer gives its connection back"


def test_an_answer_that_is_not_a_status_keeps_the_http_reason_and_text() -> None:
    k, pool = kube()
    pool.answers.append(Answer(502, b"<html>bad gateway</html>", reason="Bad Gateway"))
    with pytest.raises(ApiError) as raised:
        k.server_version()
    assert (raised.value.status, raised.value.reason) == (502, "Bad Gateway")
    assert raised.value.message == "<html>bad gateway</html>"
    assert not (raised.value.not_found or raised.value.conflict or raised.value.gone)
    error = ApiError.of(ApiException(status=None, reason=None))
    assert (error.status, error.reason, error.message) == (0, "", "")
    assert ApiError(410, "Expired", "too old").gone and ApiError(404, "", "").not_found


def test_requests_wait_thirty_seconds_unless_told_otherwise() -> None:
    api, pool = api_client()
    Kube(api, "kaiwu-reconciler").server_version()
    assert pool.last.timeout.total == 30.0


def test_the_server_version_and_an_empty_answer() -> None:
    k, pool = kube()
    pool.answers.append(Answer(200, {"gitVersion": "v1.20.2", "major": "1"}))
    assert k.server_version() == "v1.20.2"
    assert (pool.last.method, pool.last.path) == ("GET", "/version")
    pool.answers.append(Answer(200, b""))
    assert k.server_version() == ""


def test_a_list_is_read_page_by_page_from_one_snapshot() -> None:
    k, pool = kube()
    pool.answers += [
        Answer(200, {"metadata": {"continue": "page-2", "resourceVersion": "70"},
                     "items": [{"metadata": {"name": "orders-0"}}]}),
        Answer(200, {"metadata": {"continue": "page-3"},
                     "items": [{"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "orders-1"}}]}),
        Answer(200, {"metadata": {"resourceVersion": "71"}, "items": None}),
    ]
    kept: list[str] = []

    def keep(pod: Obj) -> Obj:
        kept.append(pod["metadata"]["name"])
        return {"name": pod["metadata"]["name"], "kind": pod["kind"]}

    items, version = k.list_objects(POD, "shop", "app=kaiwudb", keep=keep)
    assert items == [{"name": "orders-0", "kind": "Pod"}, {"name": "orders-1", "kind": "Pod"}]
    assert kept == ["orders-0", "orders-1"] and version == "71"
    assert [s.path for s in pool.sent] == ["/api/v1/namespaces/shop/pods"] * 3
    selector = [("limit", str(LIST_PAGE_SIZE)), ("labelSelector", "app=kaiwudb")]
    assert [s.query for s in pool.sent] == [selector, [*selector, ("continue", "page-2")],
                                            [*selector, ("continue", "page-3")]]


def test_a_list_fills_in_the_kind_of_each_item() -> None:
    k, pool = kube()
    pool.answers.append(Answer(200, {"metadata": {"resourceVersion": "8"},
                                     "items": [{"metadata": {"name": "n1"}}]}))
    items, version = k.list_objects(POD)
    assert items == [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n1"}}]
    assert version == "8"
    assert pool.last.path == "/api/v1/pods" and pool.last.query == [("limit", "250")]
    pool.answers.append(Answer(200, {"items": []}))
    assert k.list_objects(POD) == ([], "")


# ---- our own writes, remembered for their echo ------------------------------------------------

def test_each_write_answer_is_remembered_for_its_echo_but_reads_and_dry_runs_are_not() -> None:
    writes = OwnWrites()
    k, pool = kube(own_writes=writes)
    pool.answers += [Answer(200, sts("11")), Answer(200, sts("12")), Answer(200, sts("13")),
                     Answer(200, sts("14"))]
    k.apply(sts())
    k.apply(sts(), dry_run=True)
    k.get(STATEFUL_SET, "shop", "orders")
    k.replace_status(sts("13"))
    assert len(writes) == 2
    assert writes.is_echo(sts("11")) and writes.is_echo(sts("14"))
    assert not writes.is_echo(sts("12")) and not writes.is_echo(sts("13"))


def test_an_event_of_an_object_during_our_write_to_it_or_its_status_is_ours() -> None:
    writes = OwnWrites()
    k, _ = kube(own_writes=writes)
    seen: list[bool] = []

    class Meanwhile(Pool):
        def request(self, *args: Any, **kwargs: Any) -> Answer:
            seen.append(writes.is_echo(sts("99")))  # the watch delivers during the request
            return super().request(*args, **kwargs)

    meanwhile = Meanwhile()
    k.api.rest_client.pool_manager = meanwhile  # type: ignore[assignment]
    k.replace_status(sts("5"))
    k.patch(STATEFUL_SET, "shop", "orders", {}, subresource="scale")
    k.apply(sts(), dry_run=True)
    k.get(STATEFUL_SET, "shop", "orders")
    meanwhile.answers.append(status(500, "InternalError", "etcd timeout"))
    with pytest.raises(ApiError):
        k.apply(sts())
    assert seen == [True, True, False, False, True]
    assert not writes.is_echo(sts("100")), "a failed write is over too"


# ---- watch -----------------------------------------------------------------------------------

def watch_line(kind: str, obj: Obj) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_a_watch_asks_for_bookmarks_from_a_version_and_waits_longer_than_the_server() -> None:
    k, pool = kube()
    k.watch(POD, "70", "shop", "app=kaiwudb", timeout_seconds=120)
    sent = pool.last
    assert sent.path == "/api/v1/namespaces/shop/pods"
    assert sent.query == [("watch", "true"), ("resourceVersion", "70"),
                          ("allowWatchBookmarks", "true"), ("timeoutSeconds", "120"),
                          ("labelSelector", "app=kaiwudb")]
    assert (sent.timeout.connect_timeout, sent.timeout.read_timeout) == (7.0, 150)
    k.watch(POD, "71")
    assert pool.last.path == "/api/v1/pods"
    assert [name for name, _ in pool.last.query] == [
        "watch", "resourceVersion", "allowWatchBookmarks", "timeoutSeconds"]
    assert ("timeoutSeconds", "300") in pool.last.query


def test_watch_events_are_read_line_by_line_across_chunks() -> None:
    added = watch_line("ADDED", {"metadata": {"name": "orders-0"}})
    modified = watch_line("MODIFIED", {"metadata": {"name": "orders-0", "uid": "ü"}})
    raw = Answer(chunks=(added[:10], added[10:] + b"\n  \n" + modified[:-1], b"\n",
                         b'{"type": "DELETED"'))
    events = list(Watch(raw))
    assert events == [("ADDED", {"metadata": {"name": "orders-0"}}),
                      ("MODIFIED", {"metadata": {"name": "orders-0", "uid": "ü"}})]
    assert raw.released


def test_a_watch_too_old_to_resume_says_gone() -> None:
    raw = Answer(chunks=(watch_line("ERROR", {"code": 410, "reason": "Expired",
                                              "message": "too old resource version"}),))
    with pytest.raises(ApiError) as raised:
        list(Watch(raw))
    assert raised.value.gone and raised.value.reason == "Expired"
    assert raised.value.message == "too old resource version"
    assert raw.released
    with pytest.raises(ApiError) as raised:
        list(Watch(Answer(chunks=(watch_line("ERROR", {}),))))
    assert (raised.value.status, raised.value.reason, raised.value.message) == (500, "", "")


def test_a_closed_watch_ends_quietly_and_an_open_one_reports_a_broken_stream() -> None:
    class Broken(Answer):
        def stream(self, amt: int, decode_content: bool) -> Any:
            assert (amt, decode_content) == (65536, True)
            yield watch_line("ADDED", {"n": 1}) + watch_line("ADDED", {"n": 2})
            raise urllib3.exceptions.ProtocolError("connection reset")

    watch = Watch(Broken())
    seen = []
    for event in watch:
        seen.append(event)
        watch.close()  # another thread stops the informer
    assert seen == [("ADDED", {"n": 1})]
    assert watch._raw.shut
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(Watch(Broken()))


@pytest.mark.parametrize("error", [ValueError("already released"), RuntimeError("in pool"),
                                   OSError(9, "Bad file descriptor")])
def test_closing_a_watch_whose_stream_is_already_over_is_quiet(error: Exception) -> None:
    # An informer stopped just as the server ended its watch: the reading thread may have
    # closed the socket between urllib3's check and its shutdown. Stopping must not raise.
    class Over(Answer):
        def shutdown(self) -> None:
            self.shut = True
            raise error

    watch = Watch(Over(chunks=(watch_line("ADDED", {"n": 1}),)))
    watch.close()
    assert watch._raw.shut
    assert list(watch) == []


# ---- counting, reaching the server, configuration --------------------------------------------

def test_every_request_is_counted_by_code_method_and_host() -> None:
    # Counted at the connection pool, which the Kube adapter's requests and the generated
    # client's both go through: an answer by its status, no answer as "<error>".
    api, pool = api_client()
    metrics = Metrics()
    count_requests(api, metrics)
    k = Kube(api, "kaiwu-reconciler")
    pool.answers = [Answer(201, {"kind": "Pod"}), Answer(409, {"reason": "AlreadyExists"}),
                    urllib3.exceptions.NewConnectionError(None, "refused"),  # type: ignore[arg-type]
                    urllib3.exceptions.ProtocolError("reset")]
    k.create({"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "p", "namespace": "shop"}})
    for _ in range(3):
        with pytest.raises((ApiError, urllib3.exceptions.HTTPError)):
            k.get(POD, "shop", "p")
    assert [sent.method for sent in pool.sent] == ["POST", "GET", "GET", "GET"], \
        "each request itself is passed on as it was"

    def count(code: str, method: str) -> float:
        return metrics.registry.get_sample_value(
            "rest_client_requests_total",
            {"code": code, "method": method, "host": "10.0.0.1:6443"}) or 0.0

    assert [count("201", "POST"), count("409", "GET"), count("<error>", "GET")] == [1, 1, 2]


def test_a_reachable_server_is_asked_once_for_its_version() -> None:
    api, pool = api_client()
    answer = Answer(200, {"gitVersion": "v1.20.2"})
    pool.answers.append(answer)
    check_reachable(api, 2.5)
    assert [(s.method, s.path, s.extra, s.timeout.total) for s in pool.sent] == [
        ("GET", "/version", {"retries": False}, 2.5)]
    assert answer.released


@pytest.mark.parametrize(("answer", "says"), [
    (Answer(401, reason="Unauthorized"), f"the API server at {HOST} refused the credentials "
     "(HTTP 401); check the kubeconfig's user or the service account"),
    (Answer(403, reason="Forbidden"), "refused the credentials (HTTP 403)"),
    (Answer(404, reason="Not Found"), f"the API server at {HOST} answered HTTP 404 Not Found "
     f"(is {HOST} a Kubernetes API server?)"),
    (Answer(199, reason="Odd"), "answered HTTP 199 Odd"),
    (urllib3.exceptions.MaxRetryError(None, "/version",  # type: ignore[arg-type]
                                      reason=ConnectionRefusedError("Connection  refused")),
     f"cannot reach the API server at {HOST}: Connection refused (check that it is running "
     "and that --kubeconfig and --context name the right cluster)"),
    (OSError("Network is unreachable"), "cannot reach the API server at "
     f"{HOST}: Network is unreachable"),
])
def test_a_server_that_cannot_be_used_is_one_line_at_start(answer: Any, says: str) -> None:
    api, pool = api_client()
    pool.answers.append(answer)
    with pytest.raises(ConnectionSetupError) as raised:
        check_reachable(api, 1.0)
    assert says in str(raised.value)
    assert raised.value.invalid is False


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://10.9.8.7:6443", insecure-skip-tls-verify: true}
- name: other
  cluster: {server: "https://10.9.8.8:6443", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: s3cret}
contexts:
- name: test
  context: {cluster: test, user: admin}
- name: other
  context: {cluster: other, user: admin}
current-context: test
"""


def test_a_kubeconfig_names_the_server_and_a_context_chooses_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    assert load_api_client(str(path)).configuration.host == "https://10.9.8.7:6443"
    assert load_api_client(str(path), "other").configuration.host == "https://10.9.8.8:6443"


def test_a_missing_or_broken_kubeconfig_is_a_mistake_to_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "nope"
    with pytest.raises(ConnectionSetupError) as raised:
        load_api_client(str(missing))
    assert str(raised.value) == (f"kubeconfig {missing} does not exist (pass an existing file "
                                 "to --kubeconfig)")
    assert raised.value.invalid
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(ConnectionSetupError) as raised:
        load_api_client()
    assert str(raised.value).startswith(f"no kubeconfig: {missing} does not exist and this is "
                                        "not a pod with a service account")
    assert raised.value.invalid
    broken = tmp_path / "broken"
    broken.write_text(KUBECONFIG.replace("current-context: test", "current-context: gone"))
    with pytest.raises(ConnectionSetupError) as raised:
        load_api_client(str(broken))
    assert str(raised.value).startswith(f"kubeconfig {broken} is not usable: ")
    assert str(raised.value).endswith("(check the file, or choose a context with --context)")
    assert "gone" in str(raised.value) and raised.value.invalid


def test_an_exec_status_says_the_exit_code_or_that_the_command_never_ran() -> None:
    """kubelet's remotecommand v4 status: Success is 0, NonZeroExitCode carries the code. A
    1.29+ API server's stream translator answers a kubelet it cannot reach with a Failure of
    its own after the upgrade (once an HTTP error): the command never ran, which is no exit
    code and no time-out."""
    assert exit_status('{"metadata":{},"status":"Success"}') == 0
    assert exit_status(json.dumps({
        "status": "Failure", "reason": "NonZeroExitCode", "message": "command terminated with "
        "non-zero exit code: error executing command [false], exit code 3",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}})) == 3
    assert exit_status("") is None, "the stream was cut: no status at all"
    unreachable = {
        "status": "Failure", "reason": "InternalError",
        "message": 'error sending request: Post "https://10.0.0.7:10250/exec/db/dev-2/kwbase?'
                   'command=kwbase": dial tcp 10.0.0.7:10250: connect: connection refused',
        "details": {"causes": [{"message": "error sending request: Post ..."}]}}
    with pytest.raises(ExecNotRun, match="connection refused"):
        exit_status(json.dumps(unreachable))
    with pytest.raises(ExecNotRun, match="container not found"):
        exit_status("container not found (\"kwbase\")")
    # A Failure that may come after the command started is no verdict: as a cut stream.
    assert exit_status(json.dumps({
        "status": "Failure", "reason": "InternalError",
        "message": "error executing command in container: stream lost"})) is None


# ---- exec: what its stream says, read as the kubelet sent it --------------------------------


class FakeExecStream:
    """The client's WSClient as Kube.exec uses it: frames in `pending` arrive with the next read
    of an empty channel (as its reads take in whatever came meanwhile), the closing one too."""

    def __init__(self, at_end: dict[int, str], pending: dict[int, str] | None = None, *,
                 open_after_run: bool = False, cut: bool = False) -> None:
        self.channels = dict(at_end)
        self.pending = dict(pending or {})
        self.open = open_after_run
        self.cut = cut

    def run_forever(self, timeout: float) -> None:
        if self.cut:
            import websocket
            raise websocket.WebSocketConnectionClosedException("remote host lost")

    def is_open(self) -> bool:
        return self.open

    def read_channel(self, channel: int, timeout: float = 0) -> str:
        if self.cut and channel not in self.channels:
            raise OSError("the socket is closed")
        if channel not in self.channels and self.pending:
            self.channels.update(self.pending)  # the rest, the status, the closing frame
            self.pending = {}
            self.open = False
        return self.channels.pop(channel, "")

    def close(self) -> None:
        self.open = False


def exec_with(monkeypatch: pytest.MonkeyPatch, fake: FakeExecStream) -> tuple[
        tuple[str, str, int], dict[str, Any]]:
    asked: dict[str, Any] = {}

    def stream(_call: Any, *args: Any, **kwargs: Any) -> FakeExecStream:
        asked.update(kwargs)
        return fake
    monkeypatch.setattr(podexec, "stream", stream)
    kube = Kube(k8s.ApiClient(k8s.Configuration()), "test")
    return kube.exec("db", "kdb-0", "kwbase", ["kwbase", "init"], timeout=1), asked


SUCCESS = json.dumps({"metadata": {}, "status": "Success"})


def test_exec_offers_only_v4_and_reads_the_kubelets_status(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answer, asked = exec_with(monkeypatch, FakeExecStream({1: "ok\n", 3: SUCCESS}))
    assert answer == ("ok\n", "", 0)
    # v5 would have a 1.30+ API server translate the exec to SPDY, whose cut streams read as
    # Success: offered v4 alone, the status is the kubelet's own.
    assert asked["_headers"] == {"sec-websocket-protocol": "v4.channel.k8s.io"}


def test_an_exec_open_at_its_time_out_has_no_status_though_a_later_read_brings_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeExecStream({1: "part-1 "}, {1: "part-2\n", 3: SUCCESS}, open_after_run=True)
    assert exec_with(monkeypatch, fake)[0][2] == -1


def test_a_cut_stream_is_no_status_and_no_exception_unless_its_status_had_come(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert exec_with(monkeypatch, FakeExecStream({1: "part-1 "}, cut=True))[0] == (
        "part-1 ", "", -1)
    # The status is the kubelet's last frame: a cut after it cut nothing.
    assert exec_with(monkeypatch, FakeExecStream({1: "all\n", 3: SUCCESS}, cut=True))[0] == (
        "all\n", "", 0)
