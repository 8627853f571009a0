"""Stories about the replica's own decisions (reconciler.runtime.process), without an API server:
what a reconcile's outcome does to the queue and the metrics (its workers,
reconciler.runtime.worker), when a cluster is left to the
shard handing it over, what /healthz and /readyz say, and how the API client is set up. The
runtime's parts are small stand-ins (caches that answer from sets, a controller that returns or
raises what a story says); the work queue is the real one. How the replica talks to the API
server (watches, leader election, writes refused when not leading): the runtime world stories,
tests/world_stories/runtime/.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client

from reconciler.keys import ClusterKey
from reconciler.kube.cache import Echoes
from reconciler.kube.client import ApiError, Kube
from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.kube.leader import GuardedKube, NotLeaderError, NotOwnerError
from reconciler.metrics import Metrics
from reconciler.runtime import process
from reconciler.runtime.http import HealthServer
from reconciler.runtime.process import (
    CONNECTION_POOL_SIZE,
    Runtime,
    _Term,
    api_client_for,
    default_controller,
)
from reconciler.settings import Settings
from tests.support.runtime import fetch, sample
from tests.support.threads import holding_up_exit, threads_started

ORDERS = ClusterKey("shop", "orders")


class Informer:
    def __init__(self, held: set[ClusterKey]) -> None:
        self.held = held

    def has(self, namespace: str, name: str) -> bool:
        return ClusterKey(namespace, name) in self.held


class Caches:
    """The watch caches as the runtime asks them: which clusters this shard owns and holds,
    which informers are synced or dead."""

    def __init__(self, owned: set[ClusterKey] | None = None, held: set[ClusterKey] | None = None,
                 unsynced: list[str] | None = None, dead: list[str] | None = None) -> None:
        self._owned = owned if owned is not None else {ORDERS}
        self._unsynced = unsynced or []
        self._dead = dead or []
        self.synced_event = threading.Event()  # set: the initial lists are done
        self.keys = [ORDERS]  # the KaiwuClusters cached
        self.rechecks = 0  # looks for kinds not served before
        self.informers = {KAIWU_CLUSTER: Informer(held if held is not None else self._owned)}

    def wait_synced(self, timeout_s: float) -> bool:
        return self.synced_event.wait(timeout_s)

    def cluster_keys(self) -> list[ClusterKey]:
        return list(self.keys)

    def recheck_unserved(self) -> None:
        self.rechecks += 1

    def owns(self, key: ClusterKey) -> bool:
        return key in self._owned

    def synced(self) -> bool:
        return not self._unsynced

    def unsynced(self) -> list[str]:
        return self._unsynced

    def dead(self) -> list[str]:
        return self._dead


class Controller:
    """Returns `result` or raises `error`; records the keys it reconciled."""

    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.result, self.error = result, error
        self.calls: list[ClusterKey] = []

    def reconcile(self, key: ClusterKey) -> Any:
        self.calls.append(key)
        if self.error is not None:
            raise self.error
        return self.result


class Result:
    def __init__(self, requeue_after_s: float | None) -> None:
        self.requeue_after_s = requeue_after_s


def runtime(controller: Controller, caches: Caches | None = None, **settings: Any) -> Runtime:
    values: dict[str, Any] = {"leader_election": False, "error_backoff_base_s": 30.0, **settings}
    replica = Runtime(Settings(**values))
    replica.controller = controller
    replica.caches = caches or Caches()  # type: ignore[assignment]
    return replica


def taken(replica: Runtime) -> ClusterKey | None:
    """The next key a worker would take now."""
    key = replica.queue.get(timeout_s=0.01)
    if key is not None:
        replica.queue.done(key)
    return key


def test_a_reconcile_that_asks_to_come_back_is_queued_again_after_that_delay() -> None:
    replica = runtime(Controller(Result(requeue_after_s=0.05)))
    replica.worker().process(ORDERS)
    assert replica.metrics.value("kaiwu_reconcile_total", {"result": "success"}) == 1
    assert replica.metrics.value("kaiwu_reconcile_duration_seconds_count") == 1
    assert 0 <= replica.metrics.value("kaiwu_reconcile_duration_seconds_sum") < 5
    assert replica.queue.depth == 1, "due in 0.05 s"
    assert replica.queue.get(timeout_s=10) == ORDERS
    quiet = runtime(Controller(Result(requeue_after_s=None)))
    quiet.worker().process(ORDERS)
    assert quiet.queue.depth == 0, "only a watch event brings it back"
    bare = runtime(Controller(None))  # a controller that returns nothing at all
    bare.worker().process(ORDERS)
    assert bare.queue.depth == 0
    assert bare.metrics.value("kaiwu_reconcile_total", {"result": "success"}) == 1


def test_a_failing_reconcile_is_counted_and_retried_after_a_growing_back_off() -> None:
    replica = runtime(Controller(error=RuntimeError("boom")))
    replica.worker().process(ORDERS)
    replica.worker().process(ORDERS)
    assert replica.metrics.value("kaiwu_reconcile_total", {"result": "error"}) == 2
    assert replica.metrics.value("kaiwu_errors_total", {"stage": "reconcile"}) == 2
    assert replica.queue.failures(ORDERS) == 2
    assert replica.queue.depth == 1 and taken(replica) is None, "not before its back-off"
    # A success starts the back-off from the base again.
    replica.controller = Controller(Result(None))
    replica.worker().process(ORDERS)
    assert replica.queue.failures(ORDERS) == 0


def test_a_reconcile_stopped_by_lost_leadership_or_a_moved_cluster_is_not_retried_here() -> None:
    for error in (NotLeaderError("lease lost"), NotOwnerError("moved to shard b")):
        replica = runtime(Controller(error=error))
        replica.worker().process(ORDERS)
        assert replica.queue.depth == 0 and replica.queue.failures(ORDERS) == 0
        assert replica.metrics.value("kaiwu_reconcile_total", {"result": "error"}) == 0
        assert replica.metrics.value("kaiwu_reconcile_duration_seconds_count") == 1


def test_a_cluster_still_being_handed_over_from_another_shard_is_left_alone() -> None:
    controller = Controller(Result(None))
    arriving = runtime(controller, Caches(owned=set(), held={ORDERS}))
    arriving.queue.add(ORDERS)
    arriving.worker().process(arriving.queue.get(timeout_s=1) or ORDERS)
    assert controller.calls == []
    arriving.queue.add(ORDERS)  # the handover's add_after
    assert taken(arriving) == ORDERS, "it was let go, so it can come back"
    # Not in this shard's caches at all (deleted meanwhile): reconciled, which forgets it.
    gone = runtime(controller, Caches(owned=set(), held=set()))
    gone.queue.add(ORDERS)
    gone.worker().process(gone.queue.get(timeout_s=1) or ORDERS)
    assert controller.calls == [ORDERS]
    gone.queue.add(ORDERS)
    assert taken(gone) == ORDERS, "done with it, so it can come back"


def test_a_worker_reconciles_what_is_queued_until_its_term_ends() -> None:
    controller = Controller(Result(None))
    replica = runtime(controller)
    term = _Term()
    worker = threading.Thread(target=replica.worker().run, args=(term.stop,))
    worker.start()
    threading.Event().wait(0.3)  # longer than one wait for work: it keeps waiting
    assert worker.is_alive()
    replica.queue.add(ORDERS)
    for _ in range(200):
        if controller.calls:
            break
        threading.Event().wait(0.01)
    term.stop.set()
    worker.join(5)
    assert controller.calls == [ORDERS] and not worker.is_alive()


def test_a_cluster_a_worker_takes_after_its_term_ended_is_left_for_the_next_term() -> None:
    controller = Controller(Result(None))
    replica = runtime(controller)
    term = _Term()
    worker = threading.Thread(target=replica.worker().run, args=(term.stop,))
    worker.start()
    threading.Event().wait(0.05)  # waiting for work
    term.stop.set()
    replica.queue.add(ORDERS)
    worker.join(5)
    assert controller.calls == [] and not worker.is_alive()
    assert taken(replica) == ORDERS, "still queued, and taken by nobody"


class Elector:
    def __init__(self, leader: bool, holder: str = "", alive: bool = True) -> None:
        self.leader, self.holder, self.alive = leader, holder, alive

    def is_leader(self) -> bool:
        return self.leader


class Thread:
    def __init__(self, alive: bool) -> None:
        self.alive = alive

    def is_alive(self) -> bool:
        return self.alive


def test_healthz_names_every_part_that_stopped() -> None:
    replica = runtime(Controller(), Caches(dead=["Pod"]))
    assert replica.healthy() == (False, ["watch of Pod stopped"])
    replica.caches = Caches()  # type: ignore[assignment]
    assert replica.healthy() == (True, [])
    replica.elector = Elector(leader=True, alive=False)  # type: ignore[assignment]
    replica._resync = Thread(alive=False)  # type: ignore[assignment]

    class Manager:
        alive = False
    replica.webhook_manager = Manager()  # type: ignore[assignment]
    term = replica._term = _Term()
    term.workers = [Thread(alive=True), Thread(alive=False)]  # type: ignore[list-item]
    assert replica.healthy() == (False, ["leader election stopped", "resync stopped",
                                         "webhook certificate loop stopped",
                                         "a worker stopped"])
    term.stop.set()  # the term is ending: its workers may stop
    assert "a worker stopped" not in replica.healthy()[1]
    replica._stopping.set()
    assert replica.healthy() == (True, ["stopping"])


def test_readyz_says_what_the_replica_waits_for_and_whether_it_leads() -> None:
    replica = runtime(Controller(), Caches(unsynced=["KaiwuCluster", "Pod"]))
    assert replica.ready() == (False, ["caches: waiting for KaiwuCluster, Pod",
                                       "leader: yes (leader election off)",
                                       "queue: 0 waiting, 0 in progress"])
    replica.caches = Caches()  # type: ignore[assignment]
    replica.queue.add(ORDERS)
    replica.elector = Elector(leader=False, holder="replica-b")  # type: ignore[assignment]
    assert replica.ready() == (True, ["caches: synced",
                                      "leader: no, standby (lease held by replica-b)",
                                      "queue: 1 waiting, 0 in progress"])
    replica.elector = Elector(leader=False)  # type: ignore[assignment]
    assert replica.ready()[1][1] == "leader: no, standby (lease held by nobody)"
    replica.elector = Elector(leader=True)  # type: ignore[assignment]
    assert replica.ready()[1][1] == f"leader: yes ({replica.settings.identity})"
    replica._stopping.set()
    assert replica.ready()[0] is False, "a replica shutting down takes no more work"


def test_a_replica_with_the_webhook_is_ready_once_it_serves_a_certificate() -> None:
    replica = runtime(Controller())

    class Server:
        port = 9443
        serving: tuple[bytes, bytes] | None = None
        not_after = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)

    class Manager:
        problem = ""
    replica.webhook, replica.webhook_manager = Server(), Manager()  # type: ignore[assignment]
    ok, lines = replica.ready()
    assert not ok and lines[-1] == "webhook: waiting for its certificate"
    Server.serving = (b"cert", b"key")
    Manager.problem = "webhook certificate: HTTP 403 Forbidden: no"
    ok, lines = replica.ready()
    assert ok
    assert lines[-2:] == ["webhook: serving on port 9443 (certificate valid until "
                          "2031-05-04T03:02:01Z)", "webhook certificate: HTTP 403 Forbidden: no"]


def test_the_directory_sources_lines_are_in_readyz() -> None:
    replica = runtime(Controller())

    class Source:
        def status(self) -> list[str]:
            return ["source dir /git/repo: 2 clusters, 0 broken files"]
    term = replica._term = _Term()
    term.source = Source()  # type: ignore[assignment]
    assert replica.ready()[1][-1] == "source dir /git/repo: 2 clusters, 0 broken files"
    assert replica.source is term.source


def test_without_leader_election_a_replica_writes_while_its_term_runs() -> None:
    replica = runtime(Controller())
    assert not replica.may_write() and not replica.is_leader()
    replica._term = _Term()
    assert replica.may_write() and replica.is_leader()
    replica.elector = Elector(leader=False)  # type: ignore[assignment]
    assert not replica.may_write() and not replica.is_leader()
    assert replica.http_port == 0 and replica.webhook_port == 0, "not started"


def test_the_api_client_has_a_pool_for_every_watch_and_names_its_shard() -> None:
    base = client.ApiClient(client.Configuration())
    api = api_client_for(Settings(shard="b"), base)
    assert api.configuration.connection_pool_maxsize == CONNECTION_POOL_SIZE == 48
    assert api.user_agent == "kaiwu-reconciler (shard b)"
    assert base.configuration.connection_pool_maxsize != 48, "the caller's client is left"
    assert api_client_for(Settings(), base).user_agent == "kaiwu-reconciler (shard -)"


def test_without_a_client_given_the_replica_uses_the_kubeconfigs_context(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": name, "cluster": {"server": f"https://{name}.example:6443"}}
                     for name in ("a", "b")],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "u"}}
                     for name in ("a", "b")]}))
    chosen = api_client_for(Settings(kubeconfig=str(kubeconfig), context="b"))
    assert chosen.configuration.host == "https://b.example:6443"
    current = api_client_for(Settings(kubeconfig=str(kubeconfig)))
    assert current.configuration.host == "https://a.example:6443"


def test_the_real_controller_is_made_from_the_replicas_parts() -> None:
    from reconciler.controller.controller import Controller as RealController
    kube = Kube(client.ApiClient(client.Configuration()), "kaiwu-reconciler")
    metrics, settings, view = Metrics(), Settings(identity="replica-z"), Caches()
    made = default_controller(kube, view, settings, metrics)  # type: ignore[arg-type]
    assert isinstance(made, RealController)
    ctx = made.ctx
    assert (ctx.kube, ctx.settings, ctx.metrics) == (kube, settings, metrics)
    assert ctx.view is cast(Any, view)


def eventually(condition: Any, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_term_starts_its_workers_only_once_the_caches_are_synced_and_queues_every_cluster(
        ) -> None:
    controller = Controller(Result(None))
    caches = Caches()
    caches.keys = [ORDERS, ClusterKey("shop", "payments")]
    replica = runtime(controller, caches, workers=3, shutdown_grace_s=1.0)
    replica._start_term()
    assert replica.is_leader() and replica.may_write()
    time.sleep(0.3)
    assert controller.calls == [] and replica.queue.depth == 0, "half-filled caches: wait"
    caches.synced_event.set()
    eventually(lambda: len(controller.calls) == 2, "every cluster reconciled")
    term = replica._term
    assert term is not None and term.starter is not None
    term.starter.join(5)
    assert len(term.workers) == 3
    assert sorted(w.name for w in term.workers) == ["worker-0", "worker-1", "worker-2"]
    replica._start_term()
    assert replica._term is term, "one term at a time"
    replica._end_term()
    assert replica._term is None and not replica.is_leader()
    assert not any(worker.is_alive() for worker in term.workers)
    replica._end_term()  # nothing to end: no harm
    replica._term = _Term()  # a term whose starter never ran
    replica._end_term()
    assert replica._term is None


def test_a_terms_workers_never_hold_up_exit_whoever_starts_them() -> None:
    caches = Caches()
    caches.synced_event.set()
    replica = runtime(Controller(Result(None)), caches, workers=2, shutdown_grace_s=1.0)
    term = replica._term = _Term()
    with threads_started() as threads:
        replica._begin(term)  # here from the main thread, which is no daemon
    try:
        assert sorted(thread.name for thread in threads) == ["worker-0", "worker-1"]
        assert holding_up_exit(threads) == []
    finally:
        replica._end_term()


def test_a_term_ended_before_the_caches_synced_starts_nothing() -> None:
    controller = Controller(Result(None))
    caches = Caches()
    replica = runtime(controller, caches, shutdown_grace_s=30.0)
    replica._start_term()
    term = replica._term
    assert term is not None
    started = time.monotonic()
    replica._end_term()
    # The starter looks for the end every 0.2 s: it stops long before the 30 s grace period
    # that _end_term would otherwise wait out.
    assert time.monotonic() - started < 3.0
    assert term.starter is not None and not term.starter.is_alive()
    caches.synced_event.set()
    time.sleep(0.3)
    assert term.workers == [] and controller.calls == []


class StuckCaches(Caches):
    """Caches whose wait for the first lists takes `seconds`, whatever the timeout."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def wait_synced(self, timeout_s: float) -> bool:
        time.sleep(self.seconds)
        return False


def test_a_term_ends_within_the_grace_period_even_while_its_starter_is_stuck() -> None:
    replica = runtime(Controller(Result(None)), StuckCaches(10.0), shutdown_grace_s=0.1)
    replica._start_term()
    started = time.monotonic()
    replica._end_term()
    assert time.monotonic() - started < 3.0, "the 0.1 s grace period, not the 10 s stuck wait"


class SlowController(Controller):
    def __init__(self, seconds: float) -> None:
        super().__init__(Result(None))
        self.seconds = seconds
        self.finished = 0

    def reconcile(self, key: ClusterKey) -> Any:
        self.calls.append(key)
        time.sleep(self.seconds)
        self.finished += 1
        return None


def test_a_term_ends_by_waiting_for_reconciles_in_progress_up_to_the_grace_period() -> None:
    # A reconcile of 4 s: a 20 s grace period waits for it (and no longer), a 0.1 s one does not.
    for grace, finished, bound in ((20.0, 1, 12.0), (0.1, 0, 3.0)):
        controller = SlowController(4.0)
        caches = Caches()
        caches.synced_event.set()
        replica = runtime(controller, caches, workers=1, shutdown_grace_s=grace)
        replica._start_term()
        eventually(lambda c=controller: c.calls, "a reconcile started")
        started = time.monotonic()
        replica._end_term()
        assert controller.finished == finished, grace
        assert time.monotonic() - started < bound, grace
        # Let the abandoned reconcile end before the next story.
        eventually(lambda c=controller: c.finished == 1, "the reconcile ended", timeout_s=10)


def test_a_stopping_replica_starts_no_new_term() -> None:
    replica = runtime(Controller(Result(None)))
    replica._stopping.set()
    replica._start_term()
    assert replica._term is None


def test_the_periodic_resync_queues_every_cluster_and_looks_for_new_kinds() -> None:
    caches = Caches()
    caches.keys = [ORDERS]
    replica = runtime(Controller(Result(None)), caches, resync_period_s=0.05)

    scans: list[bool] = []

    class Source:
        def request_scan(self, force: bool = False) -> None:
            scans.append(force)
    resync = threading.Thread(target=replica._resync_loop)
    resync.start()
    try:
        eventually(lambda: caches.rechecks >= 2, "unserved kinds looked at again")
        assert replica.queue.depth == 0, "a standby queues nothing"
        term = replica._term = _Term()
        term.source = Source()  # type: ignore[assignment]
        eventually(lambda: replica.queue.depth == 1 and scans, "the leader resyncs")
        assert scans[0] is True, "a forced scan re-applies every file"
    finally:
        replica._stopping.set()
        resync.join(5)
    assert not resync.is_alive()


# ---- a replica started and stopped --------------------------------------------------------
# `Runtime.start` builds the parts that talk to the API server; here the watch caches, the
# leader election and the webhook's certificate loop are stand-ins that record what the replica
# gave them (and let a story pull the callbacks it handed over), so what the replica wires
# together can be checked without an API server. The HTTP and webhook servers are real, on
# 127.0.0.1 ports the OS picks.

class StartedCaches(Caches):
    """Stands in for reconciler.kube.cache.Caches, with its signature."""

    def __init__(self, kube: Any, settings: Settings, metrics: Any, on_key: Any,
                 managed_kinds: Any = None, echoes: Echoes | None = None,
                 on_handover: Any = None) -> None:
        super().__init__()
        self.kube, self.settings, self.metrics = kube, settings, metrics
        self.on_key, self.echoes, self.on_handover = on_key, echoes, on_handover
        self.synced_event.set()
        self.running: bool | None = None  # None: never started

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False


class StartedElector:
    """Stands in for reconciler.kube.leader.LeaderElector: leads when a story says so."""

    def __init__(self, kube: Any, settings: Settings, *, on_started_leading: Any,
                 on_stopped_leading: Any, metrics: Any = None) -> None:
        self.kube, self.settings, self.metrics = kube, settings, metrics
        self.on_started_leading, self.on_stopped_leading = on_started_leading, on_stopped_leading
        self.leading = False
        self.started = False
        self.released: bool | None = None  # how stop() was asked to leave the Lease
        self.alive, self.holder = True, ""

    def start(self) -> None:
        self.started = True

    def lead(self) -> None:
        self.leading = True
        self.on_started_leading()

    def is_leader(self) -> bool:
        return self.leading

    def stop(self, release: bool = False) -> None:
        self.released = release
        if self.leading:
            self.leading = False
            self.on_stopped_leading()


class StartedManager:
    """Stands in for reconciler.runtime.webhook.WebhookManager."""

    def __init__(self, kube: Any, settings: Settings, server: Any, is_leader: Any) -> None:
        self.kube, self.settings, self.server, self.is_leader = kube, settings, server, is_leader
        self.running: bool | None = None
        self.woken = 0
        self.alive, self.problem = True, ""

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def wake(self) -> None:
        self.woken += 1


class StartedSource:
    """Stands in for reconciler.runtime.source_dir.DirectorySource."""

    def __init__(self, path: Any, kube: Any, caches: Any, settings: Settings, metrics: Any,
                 events: Any) -> None:
        self.given = (path, kube, caches, settings, metrics, events)
        self.running: bool | None = None

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def status(self) -> list[str]:
        return []


@dataclass
class Made:
    """What the stand-ins were given, and the deciders the replica asked for."""

    factory_calls: list[tuple[Any, ...]] = field(default_factory=list)
    deciders: list[tuple[Any, ...]] = field(default_factory=list)
    controller: Controller = field(default_factory=lambda: Controller(Result(None)))

    def factory(self, *args: Any) -> Controller:
        self.factory_calls.append(args)
        return self.controller

    def decider(self, *args: Any) -> Any:
        self.deciders.append(args)
        return self.decide

    def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"response": {"allowed": True}}


BASE_HOST = "https://10.9.8.7:6443"


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Made:
    made = Made()
    monkeypatch.setattr(process, "Caches", StartedCaches)
    monkeypatch.setattr(process, "LeaderElector", StartedElector)
    monkeypatch.setattr(process, "WebhookManager", StartedManager)
    monkeypatch.setattr(process, "decider", made.decider)
    monkeypatch.setattr(process, "DirectorySource", StartedSource)
    return made


def started(made: Made, host: str = BASE_HOST, **settings: Any) -> Runtime:
    replica = unstarted(made, host, **settings)
    replica.start()
    return replica


def unstarted(made: Made, host: str = BASE_HOST, **settings: Any) -> Runtime:
    values: dict[str, Any] = {"http_address": "127.0.0.1:0", "webhook_address": "127.0.0.1:0",
                              "identity": "replica-a", "shutdown_grace_s": 2.0, **settings}
    configuration = client.Configuration()
    configuration.host = host
    replica = Runtime(Settings(**values), controller_factory=made.factory,
                      api_client=client.ApiClient(configuration))
    return replica


def caches_of(replica: Runtime) -> StartedCaches:
    assert isinstance(replica.caches, StartedCaches)
    return replica.caches


def elector_of(replica: Runtime) -> StartedElector:
    assert isinstance(replica.elector, StartedElector)
    return replica.elector


def self_signed() -> tuple[bytes, bytes]:
    """A certificate and key (EC: quick to make)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_a_started_replica_shares_one_api_client_and_one_guarded_kube_among_its_parts(
        made: Made) -> None:
    replica = started(made, field_manager="kaiwu-test", api_timeout_s=12.0, webhook=True)
    try:
        assert replica.api.configuration.host == BASE_HOST, "the client it was given"
        kube = replica.kube
        assert (kube.api, kube.field_manager, kube.timeout) == (replica.api, "kaiwu-test", 12.0)
        caches = caches_of(replica)
        assert caches.kube is kube and caches.settings is replica.settings
        assert caches.metrics is replica.metrics
        assert caches.echoes is not None and caches.echoes.own_writes is kube.own_writes, \
            "the caches know the echoes of the writes this kube made"
        assert made.factory_calls == [(kube, caches, replica.settings, replica.metrics)]
        assert replica.controller is made.controller
        assert replica.events.kube is kube and replica.events.metrics is replica.metrics
        assert replica.events.instance == "replica-a", "Events name the replica"
        assert made.deciders == [(caches, kube, replica.settings)]
        assert replica.webhook is not None and replica.webhook.decide == made.decide
        manager = replica.webhook_manager
        assert isinstance(manager, StartedManager)
        assert (manager.kube, manager.settings, manager.server) == (
            kube, replica.settings, replica.webhook)
        assert manager.running and caches.running
        cert, key = self_signed()
        replica.webhook.load(cert, key)
        assert replica.metrics.value("kaiwu_webhook_certificate_expiry_seconds") == \
            replica.webhook.not_after.timestamp(), "the webhook reports to the replica's metrics"
    finally:
        replica.stop()


def test_every_request_of_the_replica_is_counted(made: Made) -> None:
    # Something on 127.0.0.1 that answers: a health server stands in for the API server.
    server = HealthServer("127.0.0.1", 0, Metrics(), healthy=lambda: (True, []),
                          ready=lambda: (True, []))
    server.start()
    replica = started(made, host=f"http://127.0.0.1:{server.port}")
    try:
        answer = replica.api.rest_client.pool_manager.request(
            "GET", f"http://127.0.0.1:{server.port}/healthz")
        assert answer.status == 200
        assert replica.metrics.value("rest_client_requests_total", {
            "code": "200", "method": "GET", "host": f"127.0.0.1:{server.port}"}) == 1
    finally:
        replica.stop()
        server.stop()


@contextmanager
def api_server() -> Iterator[str]:
    """Something on 127.0.0.1 that answers every write (501: no such method)."""
    server = HealthServer("127.0.0.1", 0, Metrics(), healthy=lambda: (True, []),
                          ready=lambda: (True, []))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def reaches_the_api(write: Callable[[], Any]) -> bool:
    """Whether a write got past the replica's guard (to the API server, which refuses it)."""
    with suppress(ApiError):
        write()
    return True


def test_a_standby_writes_nothing_and_a_leader_nothing_for_a_cluster_that_left_its_shard(
        made: Made) -> None:
    with api_server() as host:
        replica = started(made, host=host)
        delete = partial(replica.kube.delete, KAIWU_CLUSTER, "shop", "orders")
        try:
            elector = elector_of(replica)
            with pytest.raises(NotLeaderError):
                delete()
            elector.leading = True
            assert reaches_the_api(delete), "a leader writes from any thread outside a reconcile"
            elsewhere: list[bool] = []
            other = threading.Thread(target=lambda: elsewhere.append(reaches_the_api(delete)))
            other.start()
            other.join(5)
            assert elsewhere == [True]
            replica._current.key = ORDERS  # a worker reconciling one of this shard's clusters
            assert reaches_the_api(delete)
            caches_of(replica)._owned = set()  # ... which then left the shard
            with pytest.raises(NotOwnerError):
                delete()
        finally:
            replica._current.key = None
            replica.stop()


def test_a_reconcile_writes_only_while_its_cluster_is_this_shards(made: Made) -> None:
    with api_server() as host:
        replica = started(made, host=host)
        elector_of(replica).leading = True
        writes: list[bool | str] = []

        class Writing(Controller):
            def reconcile(self, key: ClusterKey) -> Any:
                try:
                    writes.append(reaches_the_api(
                        partial(replica.kube.delete, KAIWU_CLUSTER, key.namespace, key.name)))
                except NotOwnerError:
                    writes.append("refused")
                return None
        replica.controller = Writing()
        try:
            replica.worker().process(ORDERS)
            caches_of(replica)._owned.clear()  # it left the shard, and the cache
            replica.worker().process(ORDERS)
            assert writes == [True, "refused"]
            caches_of(replica)._owned.add(ORDERS)
            assert reaches_the_api(partial(replica.kube.delete, KAIWU_CLUSTER, "shop", "x")), \
                "after a reconcile the worker holds no cluster"
        finally:
            replica.stop()


def test_what_the_caches_see_reaches_the_queue(made: Made) -> None:
    replica = started(made, free_echoes=True, cluster_burst=1, cluster_rate_per_s=0.001)
    try:
        caches = caches_of(replica)
        payments = ClusterKey("shop", "payments")
        # A delay no pause of a loaded machine outlasts between these two lines.
        caches.on_handover(payments, 3.0)
        assert replica.queue.depth == 1 and taken(replica) is None, "not before its delay"
        assert replica.queue.get(timeout_s=10) == payments
        replica.queue.done(payments)
        caches.on_key(ORDERS)
        assert taken(replica) == ORDERS
        # Its one token is spent: a watch event now waits, the echo of our own write does not.
        caches.on_key(ORDERS)
        assert taken(replica) is None
        echoed = started(made, free_echoes=True, cluster_burst=1, cluster_rate_per_s=0.001)
        try:
            echoed.queue.add(ORDERS)
            assert taken(echoed) == ORDERS
            echoes = caches_of(echoed).echoes
            assert echoes is not None
            echoes.on_echo(ORDERS)
            assert taken(echoed) == ORDERS, "an echo spends no token"
        finally:
            echoed.stop()
    finally:
        replica.stop()


def test_the_queue_reports_to_the_replicas_metrics() -> None:
    replica = runtime(Controller())
    replica.queue.add(ORDERS)
    assert replica.metrics.value("workqueue_adds_total", {"name": "kaiwucluster"}) == 1
    assert replica.metrics.value("kaiwu_queue_depth") == 1


def test_the_queue_lets_a_cluster_through_as_often_as_the_settings_say(
        caplog: pytest.LogCaptureFixture) -> None:
    strict = runtime(Controller(), cluster_burst=1, cluster_rate_per_s=0.001)
    strict.queue.add(ORDERS)
    assert taken(strict) == ORDERS
    strict.queue.add(ORDERS)
    assert taken(strict) is None, "one token, refilled after 1000 s"
    free = runtime(Controller(), cluster_burst=5, cluster_rate_per_s=0.001)
    for _ in range(3):
        free.queue.add(ORDERS)
        assert taken(free) == ORDERS
    capped = runtime(Controller(error=RuntimeError("boom")), error_backoff_base_s=0.01,
                     error_backoff_max_s=0.01, cluster_burst=100)
    capped.queue.add(ORDERS)
    # The back-off each failure chose, as logged (not timed: a loaded machine stretches waits).
    with caplog.at_level(logging.ERROR, logger="reconciler.runtime.process"):
        for _ in range(6):
            assert capped.queue.get(timeout_s=10) == ORDERS
            capped.worker().process(ORDERS)
    retries = [getattr(r, "retry_in_s", None) for r in caplog.records
               if r.getMessage() == "reconcile failed"]
    # Uncapped, the fifth and sixth would wait 0.01 * 2**4 = 0.16 s and 0.32 s.
    assert retries == [0.01] * 6, "capped at error_backoff_max_s"


def test_the_probes_and_prometheus_reach_the_replica(made: Made) -> None:
    replica = started(made, leader_election=False)
    try:
        port = replica.http_port
        assert port > 0
        assert fetch(port, "/healthz") == (200, "ok\n")
        code, body = fetch(port, "/readyz")
        assert (code, body.splitlines()[:3]) == (200, [
            "ok", "caches: synced", "leader: yes (leader election off)"])
        code, page = fetch(port, "/metrics")
        assert sample(page, "kaiwu_leader") == 1, "the replica's own metrics"
    finally:
        replica.stop()
    with pytest.raises(OSError):
        fetch(port, "/healthz")


def test_without_leader_election_a_replica_leads_from_the_start_until_it_stops(
        made: Made) -> None:
    replica = started(made, leader_election=False, workers=1)
    try:
        assert replica.elector is None and replica.is_leader()
        assert replica.metrics.value("kaiwu_leader") == 1
        eventually(lambda: made.controller.calls == [ORDERS], "the workers ran")
    finally:
        replica.stop()
    assert not replica.is_leader() and replica.metrics.value("kaiwu_leader") == 0
    assert caches_of(replica).running is False


def test_the_elected_replica_leads_when_the_election_says_so_and_releases_the_lease_at_stop(
        made: Made) -> None:
    replica = started(made, api_timeout_s=30.0, renew_deadline_s=10.0, field_manager="kaiwu-t",
                      webhook=True)
    elector = elector_of(replica)
    manager = replica.webhook_manager
    assert isinstance(manager, StartedManager)
    try:
        assert elector.started and elector.settings is replica.settings
        assert elector.metrics is replica.metrics
        lease_kube = elector.kube
        assert lease_kube.api is replica.api and lease_kube.field_manager == "kaiwu-t"
        assert lease_kube.timeout == 5.0, "half the renew deadline: a hung call cannot outlast it"
        assert not isinstance(lease_kube, GuardedKube), "the Lease is written to gain leadership"
        assert not replica.is_leader() and not manager.is_leader() and replica._term is None
        elector.lead()
        assert replica.is_leader() and manager.is_leader()
        assert replica._term is not None and manager.woken == 1, "a new leader registers at once"
        elector.on_stopped_leading()
        assert replica._term is None
        elector.lead()
    finally:
        replica.stop()
    assert elector.released is True and replica._term is None, "the lease handed on at once"
    assert manager.running is False
    assert caches_of(replica).running is False
    assert replica.metrics.value("kaiwu_leader") == 0, "the election's own gauge, left alone"


def test_in_directory_mode_the_leader_applies_the_directory_while_it_leads(made: Made) -> None:
    replica = started(made, source="dir:/git/repo")
    try:
        elector_of(replica).lead()
        eventually(lambda: replica.source is not None, "the term started its source")
        source = replica.source
        assert isinstance(source, StartedSource) and source.running
        assert source.given == (Path("/git/repo"), replica.kube, replica.caches,
                                replica.settings, replica.metrics, replica.events)
        elector_of(replica).on_stopped_leading()
        assert source.running is False, "a standby applies nothing"
    finally:
        replica.stop()


def test_the_lease_calls_time_out_within_the_renew_deadline_and_never_below_a_second(
        made: Made) -> None:
    for api_timeout, renew, expected in ((3.0, 10.0, 3.0), (30.0, 1.0, 1.0)):
        replica = started(made, api_timeout_s=api_timeout, renew_deadline_s=renew,
                          retry_period_s=0.5)
        try:
            assert elector_of(replica).kube.timeout == expected
        finally:
            replica.stop()


def test_a_replica_runs_one_resync_thread_and_none_of_its_threads_holds_up_exit(
        made: Made) -> None:
    with threads_started() as threads:
        replica = started(made, leader_election=False, webhook=True, workers=2)
        term = replica._term
        assert term is not None and term.starter is not None
        assert term.starter.name == "term-start" and term.starter.daemon
        term.starter.join(5)  # it waits for the caches, starts the workers and ends
    try:
        names = sorted(thread.name for thread in threads if thread.is_alive())
        # Each listener has a reaper for requests past their deadline (reconciler.listeners).
        assert names == ["http", "metrics-reaper", "resync", "webhook", "webhook-reaper",
                         "worker-0", "worker-1"]
        assert holding_up_exit(threads) == []
    finally:
        replica.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_resync_loop_that_crashes_makes_the_replica_unhealthy(made: Made) -> None:
    class Crashing(StartedCaches):
        def recheck_unserved(self) -> None:
            raise RuntimeError("boom")
    process.Caches = Crashing  # type: ignore[attr-defined,assignment]  # (the fixture puts it back)
    replica = started(made, resync_period_s=0.01)
    try:
        eventually(lambda: "resync stopped" in replica.healthy()[1], "the replica noticed")
        assert fetch(replica.http_port, "/healthz") == (503, "failed\nresync stopped\n")
    finally:
        replica.stop()


def test_a_replica_that_never_started_stops_cleanly() -> None:
    replica = Runtime(Settings())
    replica.stop()
    assert not replica.is_leader()


def test_stopping_twice_stops_once(made: Made, caplog: pytest.LogCaptureFixture) -> None:
    replica = started(made)
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.process"):
        replica.stop()
        replica.stop()
    assert [r.getMessage() for r in caplog.records].count("reconciler stopped") == 1


def test_run_starts_the_replica_and_stops_it_when_told(made: Made) -> None:
    replica = Runtime(Settings(http_address="127.0.0.1:0", leader_election=False),
                      controller_factory=made.factory,
                      api_client=client.ApiClient(client.Configuration()))
    stop = threading.Event()
    codes: list[int] = []
    running = threading.Thread(target=lambda: codes.append(replica.run(stop)), daemon=True)
    running.start()
    eventually(lambda: replica.http_port > 0, "started")
    assert fetch(replica.http_port, "/healthz")[0] == 200
    stop.set()
    running.join(5)
    assert codes == [0] and not replica.is_leader()


# ---- what the replica logs -------------------------------------------------------------------

def logged(caplog: pytest.LogCaptureFixture, message: str) -> logging.LogRecord:
    found = [r for r in caplog.records if r.getMessage() == message]
    assert len(found) == 1, f"{message!r} in {caplog.messages}"
    return found[0]


def fields(record: logging.LogRecord, *names: str) -> dict[str, Any]:
    return {name: getattr(record, name, "(missing)") for name in names}


def test_a_replica_logs_its_start_and_stop_with_what_an_operator_looks_for(
        made: Made, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.process"):
        replica = started(made, watch_namespace="shop", source="dir:/git/repo",
                          leader_election=False)
        port = replica.http_port
        replica.stop()
        everywhere = started(made)
        everywhere.stop()
    first, second = [r for r in caplog.records if r.getMessage() == "reconciler started"]
    assert first.levelno == logging.INFO
    assert fields(first, "identity", "http_port", "namespace", "source", "leader_election") == {
        "identity": "replica-a", "http_port": port, "namespace": "shop", "source": "dir:/git/repo",
        "leader_election": False}
    assert fields(second, "namespace", "source", "leader_election") == {
        "namespace": "(all)", "source": "cluster", "leader_election": True}
    stopped = next(r for r in caplog.records if r.getMessage() == "reconciler stopped")
    assert stopped.levelno == logging.INFO
    assert getattr(stopped, "identity", None) == "replica-a"
    took = getattr(stopped, "shutdown_s", None)
    assert isinstance(took, float) and 0 <= took < 5 and took == round(took, 3)


def test_a_term_logs_its_workers_starting_and_stopping_and_those_it_left_running(
        caplog: pytest.LogCaptureFixture) -> None:
    controller = SlowController(0.4)
    caches = Caches()
    caches.keys = [ORDERS, ClusterKey("shop", "payments")]
    caches.synced_event.set()
    replica = runtime(controller, caches, workers=1, shutdown_grace_s=0.05)
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.process"):
        replica._start_term()
        eventually(lambda: controller.calls, "a reconcile started")
        replica._end_term()
    started_ = logged(caplog, "workers started")
    assert fields(started_, "workers", "clusters") == {"workers": 1, "clusters": 2}
    left = logged(caplog, "reconciles still running after the grace period; their writes "
                          "are refused from now on")
    assert left.levelno == logging.WARNING
    assert fields(left, "threads") == {"threads": ["worker-0"]}
    assert logged(caplog, "workers stopped").levelno == logging.INFO
    eventually(lambda: controller.finished == 1, "the abandoned reconcile ended")


def test_each_reconcile_is_logged_with_its_cluster_and_how_it_ended(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="reconciler.runtime.process"):
        runtime(Controller(Result(None))).worker().process(ORDERS)
        runtime(Controller(error=NotOwnerError("moved to shard b"))).worker().process(ORDERS)
        runtime(Controller(error=NotLeaderError("lease lost"))).worker().process(ORDERS)
        runtime(Controller(error=RuntimeError("x" * 600))).worker().process(ORDERS)
    done = [r for r in caplog.records if r.getMessage() == "reconciled"]
    assert len(done) == 4 and all(r.levelno == logging.DEBUG for r in done)
    assert {getattr(r, "cluster", None) for r in done} == {"shop/orders"}
    durations = [getattr(r, "duration_s", None) for r in done]
    assert all(isinstance(d, float) and 0 <= d < 5 and d == round(d, 4) for d in durations), \
        f"seconds to a tenth of a millisecond: {durations}"
    moved = logged(caplog, "reconcile stopped: the cluster moved to another shard")
    assert fields(moved, "cluster", "error") == {"cluster": "shop/orders",
                                                 "error": "moved to shard b"}
    lost = logged(caplog, "reconcile stopped: no longer leader")
    assert fields(lost, "cluster", "error") == {"cluster": "shop/orders", "error": "lease lost"}
    assert moved.levelno == lost.levelno == logging.INFO
    failed = logged(caplog, "reconcile failed")
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert fields(failed, "cluster", "error", "retry_in_s") == {
        "cluster": "shop/orders", "error": "x" * 500, "retry_in_s": 30.0}


def test_the_periodic_resync_is_logged_with_how_many_clusters_it_queued(
        caplog: pytest.LogCaptureFixture) -> None:
    caches = Caches()
    caches.keys = [ORDERS, ClusterKey("shop", "payments")]
    replica = runtime(Controller(Result(None)), caches, resync_period_s=0.02)
    replica._term = _Term()
    resync = threading.Thread(target=replica._resync_loop, daemon=True)
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.process"):
        resync.start()
        try:
            eventually(lambda: "periodic resync" in caplog.messages, "resynced")
        finally:
            replica._stopping.set()
            resync.join(5)
    record = next(r for r in caplog.records if r.getMessage() == "periodic resync")
    assert fields(record, "clusters") == {"clusters": 2}
    assert sorted(map(str, drain(replica))) == ["shop/orders", "shop/payments"]


def drain(replica: Runtime) -> list[ClusterKey]:
    keys = []
    while (key := taken(replica)) is not None:
        keys.append(key)
    return keys


def test_a_liveness_probe_while_the_replica_starts_its_threads_sees_none_stopped(
        made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    # The probe can come at any moment: here, just before each of the resync and worker
    # threads starts (the HTTP server already answers by then).
    answers: list[tuple[str, tuple[bool, list[str]]]] = []
    replica = unstarted(made, leader_election=False, workers=2)
    start = threading.Thread.start

    def probed(thread: threading.Thread) -> None:
        if thread.name == "resync" or thread.name.startswith("worker-"):
            answers.append((thread.name, replica.healthy()))
        start(thread)
    monkeypatch.setattr(threading.Thread, "start", probed)
    replica.start()
    try:
        eventually(lambda: len(answers) == 3, "every thread started")
        assert sorted(answers) == [("resync", (True, [])), ("worker-0", (True, [])),
                                   ("worker-1", (True, []))]
    finally:
        replica.stop()
