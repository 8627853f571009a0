"""What operators see of a reconciler that cannot reach the API server: alive, but not ready.

(The stories against the test world's apiserver: tests/world_stories/runtime/test_http.py.)
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from reconciler.settings import Settings
from tests.support.runtime import fetch, running
from tests.world.controlplane import free_port


def test_a_replica_that_cannot_reach_the_api_server_is_alive_but_not_ready(
        tmp_path: Path) -> None:
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {
            "server": f"https://127.0.0.1:{free_port()}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "gone", "user": {"token": "none"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}]}))
    settings = Settings(kubeconfig=str(unreachable), http_address="127.0.0.1:0",
                        lease_namespace="default", reconnect_backoff_max_s=1.0,
                        log_format="text")
    with running(settings) as runtime:
        time.sleep(1.0)
        assert fetch(runtime.http_port, "/healthz")[0] == 200
        code, body = fetch(runtime.http_port, "/readyz")
        assert code == 503
        assert "caches: waiting for KaiwuCluster" in body
        assert not runtime.is_leader()
        assert runtime.metrics.value("kaiwu_watch_restarts_total",
                                     {"kind": "KaiwuCluster", "reason": "disconnected"}) >= 1
