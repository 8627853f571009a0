"""A client of the admission webhook's HTTPS server (reconciler.runtime.webhook), as the API
server is one: the serving certificate the leader's first step makes (`certificate`, under
`POLICY`), a KaiwuCluster's AdmissionReview (`review`) POSTed over TLS (`post`). Used by the
webhook's stories (tests/unit/reconciler/runtime/test_webhook.py) and bench/listeners.py.
"""

from __future__ import annotations

import http.client
import json
import ssl
from datetime import datetime, timedelta
from typing import Any

from reconciler.runtime.webhook import PATH
from reconciler.runtime.webhook_certs import ServingPolicy, next_step, read_state

POLICY = ServingPolicy(common_name="kaiwu-reconciler-webhook", hosts=("127.0.0.1",),
                       ca_validity=timedelta(days=30), cert_validity=timedelta(days=10),
                       overlap=timedelta(minutes=5))


def certificate(now: datetime) -> tuple[bytes, bytes, bytes]:
    """(ca.crt, tls.crt, tls.key) as the leader's first step makes them."""
    step = next_step(read_state(None), b"", now, POLICY)
    assert step is not None
    state = step[0]
    assert state.ca is not None and state.leaf is not None
    return state.ca.cert_pem, state.leaf.cert_pem, state.leaf.key_pem


def post(port: int, ca_pem: bytes, body: dict[str, Any]) -> tuple[int, dict[str, Any], bytes]:
    """(status, answer, the certificate the server presented)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST", PATH, json.dumps(body),
                           {"Content-Type": "application/json"})
        assert isinstance(connection.sock, ssl.SSLSocket)
        peer = connection.sock.getpeercert(binary_form=True)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read()), peer or b""
    finally:
        connection.close()


def review(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "operation": "CREATE", "namespace": "db", "name": "orders",
        "object": {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                   "metadata": {"name": "orders", "namespace": "db"},
                   "spec": {"replicas": replicas}}}}
