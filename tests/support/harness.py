"""The harness the reconciler stories share: a real `Controller` driven as the runtime drives it.

Each story runs a real `Controller` against the test world's real apiserver, the way the runtime
does: the runtime's watch `Caches` feed cluster keys to a small driver thread that calls
`Controller.reconcile(key)` and honours `Result.requeue_after_s`. The reconciler talks to the
apiserver as its own ServiceAccount (RBAC enforced), so the apiserver's audit log tells its
requests apart from what the test (playing the user, kubectl or a rival controller) does.
Writes are counted from that audit log: every create, update, patch and delete, dry runs
included.

`reconciler_factory` is a fixture: tests/world_stories/conftest.py registers it. The stories that
check the harness itself are in tests/world_stories/drift/test_harness.py.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from ruamel.yaml import YAML

from reconciler.controller.controller import Controller
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as kk
from reconciler.kube.cache import Caches
from reconciler.kube.client import Kube
from reconciler.kube.writes import CountedKube
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from tests.support.waiting import eventually
from tests.world.controlplane import WRITE_VERBS, ControlPlane, service_account_token

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
RECONCILER_SA = "kaiwu-reconciler"
NODE_READER = "kaiwu-test-node-reader"


def example(name: str, namespace: str) -> Obj:
    """An example cluster from clusters/, moved into the test's namespace."""
    obj: Obj = YAML(typ="safe").load((REPO / "clusters" / f"{name}.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    return obj


def parked(obj: Obj) -> Obj:
    """The cluster with a node selector no node matches: its pods stay Pending.

    Drift stories are about objects. Whether an earlier test of the session started the
    simulated kubelet (a session fixture) must not change them: a cluster coming to life (init,
    Ready, their Events) makes writes of its own that these stories do not count."""
    scheduling = obj["spec"].setdefault("scheduling", {})
    scheduling.setdefault("nodeSelector", {})["kaiwu.test/parked"] = "true"
    return obj


def now_stamp() -> str:
    """The audit log's timestamp format (microseconds, UTC), for 'since' filters."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0,
             interval_s: float = 0.1) -> Any:
    """`tests.support.waiting.eventually`, with the question first (as these stories read), and
    its interval. Most checks GET from the API server: polled every 0.02 s, a wait asks about 20
    times a second (lifecycle/test_scale.py's waits, which set 0.02 s themselves, were a third
    of its requests in the API server's audit log on 5 December 2026), CPU the world tier's
    workers share. A story that must catch a short-lived state, or measures how soon something
    happens, passes its own shorter interval."""
    return eventually(check, timeout_s, what, interval_s)


def condition(obj: Obj | None, type_: str) -> dict[str, Any]:
    for item in ((obj or {}).get("status") or {}).get("conditions") or ():
        if item.get("type") == type_:
            return dict(item)
    return {}


def reconciler_identity(plane: ControlPlane, admin: k8s.ApiClient, namespace: str) -> tuple[
        k8s.ApiClient, str]:
    """An API client acting as the reconciler's own ServiceAccount in `namespace`, allowed
    everything in that namespace, to watch Nodes and read PersistentVolumes (as
    `kaiwu install` grants); and its audit user name."""
    core = k8s.CoreV1Api(admin)
    rbac = k8s.RbacAuthorizationV1Api(admin)
    subject = k8s.RbacV1Subject(kind="ServiceAccount", name=RECONCILER_SA, namespace=namespace)

    def role(kind: str, name: str) -> k8s.V1RoleRef:
        return k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind=kind, name=name)

    def once(create: Callable[[], object]) -> None:
        """Create, or find it made by an earlier reconciler of the test (a restart story)."""
        try:
            create()
        except k8s.ApiException as error:
            if error.status != 409:
                raise

    once(lambda: core.create_namespaced_service_account(
        namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=RECONCILER_SA))))
    once(lambda: rbac.create_namespaced_role_binding(namespace, k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name=RECONCILER_SA), role_ref=role("ClusterRole",
                                                                      "cluster-admin"),
        subjects=[subject])))
    try:
        rbac.create_cluster_role(k8s.V1ClusterRole(
            metadata=k8s.V1ObjectMeta(name=NODE_READER), rules=[k8s.V1PolicyRule(
                api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"]),
                k8s.V1PolicyRule(api_groups=[""], resources=["persistentvolumes"],
                                 verbs=["get"])]))
    except k8s.ApiException as error:
        if error.status != 409:
            raise
    once(lambda: rbac.create_cluster_role_binding(k8s.V1ClusterRoleBinding(
        metadata=k8s.V1ObjectMeta(name=f"{NODE_READER}-{namespace}"),
        role_ref=role("ClusterRole", NODE_READER), subjects=[subject])))
    token = service_account_token(core, namespace, RECONCILER_SA)
    return plane.api_client(token=token), f"system:serviceaccount:{namespace}:{RECONCILER_SA}"


@dataclass(order=True)
class _Due:
    at: float
    key: ClusterKey = field(compare=False)


class Reconciler:
    """A Controller driven by watch events and a periodic resync (Settings.resync_period_s),
    as the runtime drives it, with one worker."""

    def __init__(self, plane: ControlPlane, admin: k8s.ApiClient, namespace: str,
                 **settings: Any) -> None:
        self.plane = plane
        self.namespace = namespace
        self.api, self.user = reconciler_identity(plane, admin, namespace)
        self.settings = Settings(watch_namespace=namespace, leader_election=False,
                                 identity=f"test-{namespace}", **settings)
        self.metrics = Metrics()
        # Writes counted as the runtime counts them (reconciler.runtime.process).
        self.kube = CountedKube(Kube(self.api, self.settings.field_manager), self.metrics)
        self.caches = Caches(self.kube, self.settings, self.metrics, self.enqueue)
        self.controller = Controller(self.kube, self.caches, self.settings, self.metrics)
        self._lock = threading.Condition()
        self._heap: list[_Due] = []
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=f"driver-{namespace}",
                                        daemon=True)
        self._resynced = time.monotonic()
        self.passes = 0
        self.errors: list[str] = []
        self._busy = False

    def start(self) -> Reconciler:
        self.caches.start()
        assert self.caches.wait_synced(30), f"caches not synced: {self.caches.unsynced()}"
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the worker and the caches; stopping again does nothing."""
        with self._lock:
            if self._stop:
                return
            self._stop = True
            self._lock.notify_all()
        self._thread.join(10)
        self.caches.stop()

    def enqueue(self, key: ClusterKey, delay_s: float = 0.0) -> None:
        with self._lock:
            heapq.heappush(self._heap, _Due(time.monotonic() + delay_s, key))
            self._lock.notify_all()

    def _next(self) -> ClusterKey | None:
        with self._lock:
            while not self._stop:
                now = time.monotonic()
                if now - self._resynced >= self.settings.resync_period_s:
                    # The runtime's safety net: every cluster again, events or not.
                    self._resynced = now
                    for key in self.caches.cluster_keys():
                        heapq.heappush(self._heap, _Due(now, key))
                if self._heap and self._heap[0].at <= now:
                    key = heapq.heappop(self._heap).key
                    # Events that queued the same key meanwhile are served by this one pass.
                    self._heap = [due for due in self._heap if due.key != key or due.at > now]
                    heapq.heapify(self._heap)
                    return key
                wait = self._resynced + self.settings.resync_period_s - now
                if self._heap:
                    wait = min(wait, self._heap[0].at - now)
                self._lock.wait(max(wait, 0.001))
            return None

    def at_rest(self, horizon_s: float = 60.0) -> bool:
        """No pass runs and none is asked for within `horizon_s` (a certificate's renewal may
        be asked for days ahead): until then only a watch event or the periodic resync would
        start one."""
        with self._lock:
            return not self._busy and (
                not self._heap or self._heap[0].at - time.monotonic() > horizon_s)

    def _run(self) -> None:
        while (key := self._next()) is not None:
            if not self.caches.owns(key) and self.caches.informers[kk.KAIWU_CLUSTER].has(
                    key.namespace, key.name):
                continue  # as the runtime's worker: its objects are not listed yet (the
                # selection queues it once they are: reconciler.kube.selection)
            with self._lock:
                self._busy = True
            try:
                result = self.controller.reconcile(key)
                if result.requeue_after_s is not None:
                    self.enqueue(key, result.requeue_after_s)
            except Exception as error:  # a pass failed: the runtime would retry; so do we
                log.exception("reconcile of %s failed", key)
                self.errors.append(f"{key}: {type(error).__name__}: {error}")
                self.enqueue(key, 1.0)
            finally:
                # Counted, and no longer busy, only once the next pass it asked for is queued.
                self.passes += 1
                with self._lock:
                    self._busy = False

    # ---- what the apiserver saw -------------------------------------------------------------

    def writes(self, since: str = "", resource: str | None = None,
               name: str | None = None) -> list[dict[str, Any]]:
        """The reconciler's write requests (dry runs included) from the audit log."""
        return [event for event in self.plane.audit_events(user=self.user, verbs=WRITE_VERBS)
                if event.get("requestReceivedTimestamp", "") >= since
                and (resource is None or (event.get("objectRef") or {}).get("resource")
                     == resource)
                and (name is None or (event.get("objectRef") or {}).get("name") == name)]

    def cluster(self, name: str) -> Obj | None:
        return Kube(self.plane.api_client(), "test").get(kk.KAIWU_CLUSTER, self.namespace, name)

    def settle(self, name: str, quiet_s: float = 2.0, timeout_s: float = 60.0) -> Obj:
        """Wait until the cluster's generation is observed and no write came for quiet_s."""
        def settled() -> Obj | None:
            obj = self.cluster(name)
            status = (obj or {}).get("status") or {}
            if obj is None or status.get("observedGeneration") != obj["metadata"]["generation"]:
                return None
            last = max((e["requestReceivedTimestamp"] for e in self.writes()), default="")
            quiet_since = datetime.fromtimestamp(time.time() - quiet_s, UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ")
            return obj if last < quiet_since else None
        found: Obj = wait_for(f"cluster {name} to settle", settled, timeout_s, 0.25)
        return found


@pytest.fixture
def reconciler_factory(control_plane: ControlPlane, kube: k8s.ApiClient,
                       namespace: str) -> Iterator[Callable[..., Reconciler]]:
    """Start a reconciler (its own ServiceAccount) for the test's namespace; stopped after."""
    started: list[Reconciler] = []

    def start(**settings: Any) -> Reconciler:
        reconciler = Reconciler(control_plane, kube, namespace, **settings).start()
        started.append(reconciler)
        return reconciler

    yield start
    for reconciler in started:
        reconciler.stop()
        assert not reconciler.errors, f"reconcile passes failed: {reconciler.errors}"
    try:
        k8s.RbacAuthorizationV1Api(kube).delete_cluster_role_binding(f"{NODE_READER}-{namespace}")
    except k8s.ApiException as error:
        if error.status != 404:
            raise


def brief(writes: list[dict[str, Any]]) -> list[str]:
    """Audit lines as `verb uri` (for assertion messages)."""
    return [f"{w['verb']} {w['requestURI']}" for w in writes]


def user(kube: k8s.ApiClient, manager: str) -> Kube:
    """The test playing a person or another tool, under that tool's field manager name."""
    return Kube(kube, manager)


def refused(plane: ControlPlane, who: str, namespace: str, scope: str) -> list[str]:
    """The requests of `who` RBAC refused (403), as `verb uri` lines from the audit log."""
    # A cluster-wide reconciler also sees earlier stories' clusters, whose namespaces may be
    # terminating (answered 403): judge requests about this namespace and cluster-wide ones.
    def ours(uri: str) -> bool:
        return scope == "namespaced" or "/namespaces/" not in uri \
            or f"/namespaces/{namespace}/" in uri
    return [f"{e.get('verb')} {e.get('requestURI')}" for e in plane.audit_events(user=who)
            if e.get("responseStatus", {}).get("code") == 403
            and ours(str(e.get("requestURI", "")))]
