"""Stories about the replica's own decisions (reconciler.runtime.process), without an API server:
what a reconcile's outcome does to the queue and the metrics, when a cluster is left to the
shard handing it over, what /healthz and /readyz say, and how the API client is set up. The
runtime's parts are small stand-ins (caches that answer from sets, a controller that returns or
raises what a story says); the work queue is the real one. How the replica talks to the API
server (watches, leader election, writes refused when not leading): the runtime world stories,
tests/world_stories/runtime/.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from reconciler.keys import ClusterKey
from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.kube.leader import NotLeaderError, NotOwnerError
from reconciler.runtime.process import CONNECTION_POOL_SIZE, Runtime, _Term, api_client_for
from reconciler.settings import Settings

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
    replica._process(ORDERS)
    assert replica.metrics.value("kaiwu_reconcile_total", {"result": "success"}) == 1
    assert replica.metrics.value("kaiwu_reconcile_duration_seconds_count") == 1
    assert replica.queue.depth == 1, "due in 0.05 s"
    assert replica.queue.get(timeout_s=2) == ORDERS
    quiet = runtime(Controller(Result(requeue_after_s=None)))
    quiet._process(ORDERS)
    assert quiet.queue.depth == 0, "only a watch event brings it back"


def test_a_failing_reconcile_is_counted_and_retried_after_a_growing_back_off() -> None:
    replica = runtime(Controller(error=RuntimeError("boom")))
    replica._process(ORDERS)
    replica._process(ORDERS)
    assert replica.metrics.value("kaiwu_reconcile_total", {"result": "error"}) == 2
    assert replica.metrics.value("kaiwu_errors_total", {"stage": "reconcile"}) == 2
    assert replica.queue.failures(ORDERS) == 2
    assert replica.queue.depth == 1 and taken(replica) is None, "not before its back-off"
    # A success starts the back-off from the base again.
    replica.controller = Controller(Result(None))
    replica._process(ORDERS)
    assert replica.queue.failures(ORDERS) == 0


def test_a_reconcile_stopped_by_lost_leadership_or_a_moved_cluster_is_not_retried_here() -> None:
    for error in (NotLeaderError("lease lost"), NotOwnerError("moved to shard b")):
        replica = runtime(Controller(error=error))
        replica._process(ORDERS)
        assert replica.queue.depth == 0 and replica.queue.failures(ORDERS) == 0
        assert replica.metrics.value("kaiwu_reconcile_total", {"result": "error"}) == 0
        assert replica.metrics.value("kaiwu_reconcile_duration_seconds_count") == 1


def test_a_cluster_still_being_handed_over_from_another_shard_is_left_alone() -> None:
    controller = Controller(Result(None))
    arriving = runtime(controller, Caches(owned=set(), held={ORDERS}))
    arriving._process(ORDERS)
    assert controller.calls == []
    # Not in this shard's caches at all (deleted meanwhile): reconciled, which forgets it.
    gone = runtime(controller, Caches(owned=set(), held=set()))
    gone._process(ORDERS)
    assert controller.calls == [ORDERS]


def test_a_worker_reconciles_what_is_queued_until_its_term_ends() -> None:
    controller = Controller(Result(None))
    replica = runtime(controller)
    term = _Term()
    worker = threading.Thread(target=replica._work, args=(term,))
    worker.start()
    replica.queue.add(ORDERS)
    for _ in range(200):
        if controller.calls:
            break
        threading.Event().wait(0.01)
    term.stop.set()
    worker.join(5)
    assert controller.calls == [ORDERS] and not worker.is_alive()


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
    assert term is not None and len(term.workers) == 3
    assert sorted(w.name for w in term.workers) == ["worker-0", "worker-1", "worker-2"]
    replica._start_term()
    assert replica._term is term, "one term at a time"
    replica._end_term()
    assert replica._term is None and not replica.is_leader()
    assert not any(worker.is_alive() for worker in term.workers)
    replica._end_term()  # nothing to end: no harm


def test_a_term_ended_before_the_caches_synced_starts_nothing() -> None:
    controller = Controller(Result(None))
    caches = Caches()
    replica = runtime(controller, caches)
    replica._start_term()
    term = replica._term
    assert term is not None
    replica._end_term()
    caches.synced_event.set()
    time.sleep(0.3)
    assert term.workers == [] and controller.calls == []


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
    for grace, finished in ((2.0, 1), (0.1, 0)):
        controller = SlowController(0.5)
        caches = Caches()
        caches.synced_event.set()
        replica = runtime(controller, caches, workers=1, shutdown_grace_s=grace)
        replica._start_term()
        eventually(lambda c=controller: c.calls, "a reconcile started")
        started = time.monotonic()
        replica._end_term()
        assert controller.finished == finished, grace
        assert time.monotonic() - started < grace + 0.4
        time.sleep(0.6)  # let the abandoned reconcile end before the next story


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
        resync.join(2)
    assert not resync.is_alive()
