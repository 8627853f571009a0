"""A stand-in for the `kubernetes` client's connection pool, under a real ApiClient and Kube: every
request the client sends is recorded (`Pool.sent`) and answered from a queue (`Pool.answers`,
else 200 {}). Used by the client and leader-election stories (tests/unit/reconciler/kube/
test_client.py, test_leader.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from reconciler.model import Obj

HOST = "https://10.0.0.1:6443"


class Answer:
    """A urllib3 response as the client reads it."""

    def __init__(self, status: int = 200, body: Any = None, reason: str = "OK",
                 chunks: tuple[bytes, ...] = ()) -> None:
        self.status, self.reason = status, reason
        self.data = body if isinstance(body, bytes) else (
            json.dumps(body).encode() if body is not None else b"")
        self.chunks = chunks
        self.released = False
        self.shut = False

    def release_conn(self) -> None:
        self.released = True

    def stream(self, amt: int, decode_content: bool) -> Any:
        yield from self.chunks

    def shutdown(self) -> None:
        self.shut = True


@dataclass(frozen=True)
class Sent:
    method: str
    url: str
    body: Any
    headers: dict[str, str]
    timeout: Any
    extra: dict[str, Any]

    @property
    def path(self) -> str:
        return self.url.removeprefix(HOST).partition("?")[0]

    @property
    def query(self) -> list[tuple[str, str]]:
        from urllib.parse import parse_qsl
        return parse_qsl(self.url.partition("?")[2])


class Pool:
    """The connection pool: records requests, answers with the queued answers (else 200 {})."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.answers: list[Answer | Exception] = []

    def request(self, method: str, url: str, *, body: Any, headers: dict[str, str],
                preload_content: bool, timeout: Any, **extra: Any) -> Answer:
        assert preload_content is False
        self.sent.append(Sent(method, url, body, headers, timeout, extra))
        answer = self.answers.pop(0) if self.answers else Answer(200, {})
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def last(self) -> Sent:
        return self.sent[-1]


def api_client() -> tuple[k8s.ApiClient, Pool]:
    configuration = k8s.Configuration()
    configuration.host = HOST
    configuration.api_key = {"authorization": "Bearer t0k"}
    api = k8s.ApiClient(configuration)
    pool = Pool()
    api.rest_client.pool_manager = pool  # type: ignore[assignment]
    return api, pool


def sts(version: str = "") -> Obj:
    meta: Obj = {"name": "orders", "namespace": "shop"}
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": {}}
