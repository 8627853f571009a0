"""Helpers for the reconciler runtime's stories (tests/world_stories/runtime/, and
tests/unit/reconciler/runtime/ for what needs no test world).

`RecordingController` stands in for the real Controller so the runtime's own behaviour (which
clusters get reconciled, how often, by which replica) can be seen exactly: it reads the cluster
from the cache view as the real one does and records what it saw. `runtime_settings` gives
settings for a runtime against the test world: its kubeconfig, the test's namespace, short
lease and back-off times, an HTTP port chosen by the OS.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from reconciler.keys import ClusterKey
from reconciler.kube.cache import CacheView
from reconciler.kube.client import Kube
from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.metrics import Metrics
from reconciler.runtime.process import Runtime
from reconciler.settings import Settings
from tests.world.controlplane import ControlPlane

GROUP, VERSION, PLURAL = "kaiwu.inspur.com", "v1", "kaiwuclusters"


@dataclass(frozen=True)
class Seen:
    """One reconcile as the stand-in controller saw it."""

    key: ClusterKey
    at: float  # time.monotonic()
    annotations: dict[str, str]
    spec: dict[str, Any] | None  # None: the cluster was not in the cache


@dataclass(frozen=True)
class Done:
    """What the stand-in returns: the Controller's result shape."""

    requeue_after_s: float | None = None


class RecordingController:
    """Stand-in for reconciler.controller.controller.Controller: records every reconcile."""

    def __init__(self, kube: Kube, view: CacheView, settings: Settings,
                 metrics: Metrics) -> None:
        self.kube = kube
        self.view = view
        self.settings = settings
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    def reconcile(self, key: ClusterKey) -> Done:
        live = self.view.get(KAIWU_CLUSTER, key.namespace, key.name)
        meta = (live or {}).get("metadata") or {}
        with self._lock:
            self.seen.append(Seen(key, time.monotonic(), dict(meta.get("annotations") or {}),
                                  live.get("spec") if live else None))
        return Done()

    def calls(self, name: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if name is None or s.key.name == name]


def runtime_settings(control_plane: ControlPlane, namespace: str, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "kubeconfig": str(control_plane.kubeconfig_path),
        "watch_namespace": namespace,
        "lease_namespace": namespace,
        # The test's namespace plays the reconciler's own: directory mode writes there.
        "source_namespaces": namespace,
        "http_address": "127.0.0.1:0",
        "lease_duration_s": 3.0, "renew_deadline_s": 2.0, "retry_period_s": 0.5,
        "reconnect_backoff_base_s": 0.2, "reconnect_backoff_max_s": 1.0,
        # Abandoned watches of stopped runtimes end by themselves soon after a test.
        "watch_timeout_s": 30,
        "shutdown_grace_s": 5.0,
        "log_format": "text",
    }
    values.update(changes)
    return Settings(**values)


def controller_of(runtime: Runtime) -> RecordingController:
    controller = runtime.controller
    assert isinstance(controller, RecordingController)
    return controller


@contextmanager
def running(settings: Settings) -> Iterator[Runtime]:
    """A started runtime with the stand-in controller, stopped at the end of the block."""
    runtime = Runtime(settings, controller_factory=RecordingController)
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()



def create_cluster(kube: k8s.ApiClient, namespace: str, name: str,
                   spec: dict[str, Any] | None = None) -> dict[str, Any]:
    created = k8s.CustomObjectsApi(kube).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "KaiwuCluster",
         "metadata": {"name": name}, "spec": spec or {}})
    assert isinstance(created, dict)
    return created


def annotate_cluster(kube: k8s.ApiClient, namespace: str, name: str, key: str,
                     value: str) -> None:
    """kubectl annotate --overwrite, as a user would."""
    k8s.CustomObjectsApi(kube).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"annotations": {key: value}}})


def get_cluster(kube: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found = k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name)
    except k8s.ApiException as error:
        if error.status == 404:
            return None
        raise
    assert isinstance(found, dict)
    return found


def lease_holder(kube: k8s.ApiClient, namespace: str, name: str = "kaiwu-reconciler") -> str:
    try:
        lease = k8s.CoordinationV1Api(kube).read_namespaced_lease(name, namespace)
    except k8s.ApiException as error:
        if error.status == 404:
            return ""
        raise
    return str(lease.spec.holder_identity or "") if lease.spec else ""


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def sample(metrics_text: str, name: str) -> float:
    """The value of one sample line (name including labels) of a /metrics page."""
    for line in metrics_text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")
