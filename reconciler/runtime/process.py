"""The reconciler process: watch caches -> work queue -> workers calling Controller.reconcile.

`reconciler.cli` builds a `Runtime` from the settings and runs it until SIGTERM; tests start
several in one process. Every replica runs the caches (so a standby is warm), the HTTP endpoints,
the admission webhook when it is on (reconciler.runtime.webhook: every replica answers; the
leader keeps its certificate and registration) and the leader election; only while this
replica leads does it run the workers, the periodic resync and, in directory mode, the
`DirectorySource`. A leadership term starts by waiting for the caches to sync and queueing every
cluster; it ends (lost lease, or shutdown) by stopping the
directory source and waiting up to `shutdown_grace_s` for reconciles in progress, and only then
is the Lease released. All writes go through a `GuardedKube` that refuses them the moment this
replica may no longer be leader, wrapped in the `CountedKube` (reconciler.kube.writes) that
counts each in writes_total{verb,kind}: the controller's, the Events', the source directory's
and the webhook's own (its Secret and registration). The Lease's writes are not counted.

With `Settings.shard`, the process is one shard of several: its caches hold only its clusters,
a worker skips a cluster still being handed over to it, and `GuardedKube` refuses a write for a
cluster that left the shard during the pass (`owns_current`: the key this worker thread is
reconciling, still in the cache). The work queue's limits come from the settings
(`reconciler.kube.ratelimit.Limits.of`).

The Controller is made by a factory `(kube, view, settings, metrics) -> Reconciler`; the default
is `reconciler.controller.controller.Controller`. Each worker (reconciler.runtime.worker) feeds
each reconcile's outcome to the metrics and the queue.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes import client

from reconciler.keys import ClusterKey
from reconciler.kube.cache import Caches, CacheView, Echoes
from reconciler.kube.client import Kube, count_requests, load_api_client
from reconciler.kube.echo import OwnWrites
from reconciler.kube.events import EventRecorder
from reconciler.kube.leader import GuardedKube, LeaderElector
from reconciler.kube.ratelimit import Limits
from reconciler.kube.workqueue import WorkQueue
from reconciler.kube.writes import CountedKube
from reconciler.metrics import Metrics
from reconciler.runtime.http import HealthServer
from reconciler.runtime.source_dir import DirectorySource
from reconciler.runtime.webhook import WebhookManager, WebhookServer, decider
from reconciler.runtime.worker import Reconciler, Worker
from reconciler.settings import Settings

log = logging.getLogger(__name__)

# Connections per API client: one long-lived watch per informer (about a dozen) plus the
# workers' requests; the client's default (5 per CPU) would make urllib3 drop and reopen them.
CONNECTION_POOL_SIZE = 48
USER_AGENT = "kaiwu-reconciler"


ControllerFactory = Callable[[Kube, CacheView, Settings, Metrics], Reconciler]


def default_controller(kube: Kube, view: CacheView, settings: Settings,
                       metrics: Metrics) -> Reconciler:
    """The real Controller (imported here so the runtime's own tests need not load it)."""
    from reconciler.controller.controller import Controller

    controller: Reconciler = Controller(kube, view, settings, metrics)
    return controller


def api_client_for(settings: Settings,
                   base: client.ApiClient | None = None) -> client.ApiClient:
    """An API client from the kubeconfig (or in-cluster), with a pool large enough for every
    watch at once."""
    api = base if base is not None else load_api_client(settings.kubeconfig, settings.context)
    configuration = copy.deepcopy(api.configuration)
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    result = client.ApiClient(configuration)
    # Audit logs tell the shards apart by it (they share the ServiceAccount).
    result.user_agent = f"{USER_AGENT} (shard {settings.shard or '-'})"
    return result


@dataclass
class _Term:
    """One spell of leadership: its workers and directory source, and how to end it."""

    stop: threading.Event = field(default_factory=threading.Event)
    starter: threading.Thread | None = None  # waits for the caches, then starts the rest
    workers: list[threading.Thread] = field(default_factory=list)
    source: DirectorySource | None = None


class Runtime:
    """One reconciler replica. `start()`, then `stop()` (or `run(stop_event)`)."""

    def __init__(self, settings: Settings, *,
                 controller_factory: ControllerFactory = default_controller,
                 api_client: client.ApiClient | None = None,
                 metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.controller_factory = controller_factory
        self._base_api = api_client
        self.metrics = metrics or Metrics()
        self.queue: WorkQueue[ClusterKey] = WorkQueue(
            limits=Limits.of(settings),
            backoff_base_s=settings.error_backoff_base_s,
            backoff_max_s=settings.error_backoff_max_s, metrics=self.metrics)
        self.metrics.queue_depth.set_function(lambda: self.queue.depth)
        self.elector: LeaderElector | None = None
        self.http: HealthServer | None = None
        self.webhook: WebhookServer | None = None
        self.webhook_manager: WebhookManager | None = None
        self._term: _Term | None = None
        self._term_lock = threading.Lock()
        self._stopping = threading.Event()
        self._resync: threading.Thread | None = None
        self._started = False
        self._current = threading.local()  # .key: the cluster this worker thread reconciles

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        settings = self.settings
        self.api = api_client_for(settings, self._base_api)
        count_requests(self.api, self.metrics)
        own_writes = OwnWrites()
        self.kube = CountedKube(GuardedKube(
            self.api, settings.field_manager, settings.api_timeout_s, may_write=self.may_write,
            own_writes=own_writes, owns_current=self._owns_current), self.metrics)
        self.caches = Caches(self.kube, settings, self.metrics, on_key=self.queue.add,
                             echoes=Echoes(own_writes, self._on_echo),
                             on_handover=self.queue.add_after)
        self.controller = self.controller_factory(self.kube, self.caches, settings,
                                                  self.metrics)
        self.events = EventRecorder(self.kube, self.metrics, instance=settings.identity)
        host, port = settings.http_host_port
        self.http = HealthServer(host, port, self.metrics, healthy=self.healthy,
                                 ready=self.ready)
        self.http.start()
        if settings.webhook:
            host, port = settings.webhook_host_port
            self.webhook = WebhookServer(host, port, self.metrics,
                                         decider(self.caches, self.kube, settings))
            self.webhook.start()
            self.webhook_manager = WebhookManager(self.kube, settings, self.webhook,
                                                  self.is_leader)
            self.webhook_manager.start()
        self.caches.start()
        self._started = True
        if settings.leader_election:
            # Lease calls get a short timeout so a hung request cannot outlast the deadline.
            lease_kube = Kube(self.api, settings.field_manager,
                              timeout=max(1.0, min(settings.api_timeout_s,
                                                   settings.renew_deadline_s / 2)))
            self.elector = LeaderElector(lease_kube, settings,
                                         on_started_leading=self._start_term,
                                         on_stopped_leading=self._end_term,
                                         metrics=self.metrics)
            self.elector.start()
        else:
            self.metrics.leader.set(1)
            self._start_term()
        # Published once running: /healthz (already served) takes an unstarted thread for a
        # stopped one.
        resync = threading.Thread(target=self._resync_loop, name="resync", daemon=True)
        resync.start()
        self._resync = resync
        log.info("reconciler started", extra={
            "identity": settings.identity, "http_port": self.http_port,
            "namespace": settings.watch_namespace or "(all)", "source": settings.source,
            "leader_election": settings.leader_election})

    def stop(self) -> None:
        """Stop workers (reconciles in progress may finish), release the Lease, stop the rest."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        started = time.monotonic()
        if self.elector is not None:
            self.elector.stop(release=True)
        else:
            self._end_term()
            self.metrics.leader.set(0)
        if self._started:
            self.caches.stop()
        self.queue.shutdown()
        if self.webhook_manager is not None:
            self.webhook_manager.stop()
        if self.webhook is not None:
            self.webhook.stop()
        if self.http is not None:
            self.http.stop()
        log.info("reconciler stopped", extra={
            "identity": self.settings.identity,
            "shutdown_s": round(time.monotonic() - started, 3)})

    def run(self, stop: threading.Event) -> int:
        """Start, wait for `stop` (set by the signal handler), stop. Returns the exit code."""
        self.start()
        stop.wait()
        self.stop()
        return 0

    def _on_echo(self, key: ClusterKey) -> None:
        self.queue.add(key, echo=True)

    def _owns_current(self) -> bool:
        """Whether the cluster this thread reconciles (if any) is still this shard's."""
        key: ClusterKey | None = getattr(self._current, "key", None)
        return key is None or self.caches.owns(key)

    # ---- state ------------------------------------------------------------------------------

    def may_write(self) -> bool:
        if self.elector is not None:
            return self.elector.is_leader()
        return self._term is not None

    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector is not None else self._term is not None

    @property
    def http_port(self) -> int:
        return self.http.port if self.http is not None else 0

    @property
    def webhook_port(self) -> int:
        return self.webhook.port if self.webhook is not None else 0

    @property
    def source(self) -> DirectorySource | None:
        term = self._term
        return term.source if term is not None else None

    def healthy(self) -> tuple[bool, list[str]]:
        """Liveness: every thread that must run is running."""
        if self._stopping.is_set():
            return True, ["stopping"]
        problems = [f"watch of {name} stopped" for name in self.caches.dead()]
        if self.elector is not None and not self.elector.alive:
            problems.append("leader election stopped")
        if self._resync is not None and not self._resync.is_alive():
            problems.append("resync stopped")
        if self.webhook_manager is not None and not self.webhook_manager.alive:
            problems.append("webhook certificate loop stopped")
        term = self._term
        if term is not None and not term.stop.is_set() and \
                any(not worker.is_alive() for worker in term.workers):
            problems.append("a worker stopped")
        return not problems, problems

    def ready(self) -> tuple[bool, list[str]]:
        """Readiness: caches synced; says whether this replica leads, and source problems."""
        lines: list[str] = []
        synced = self.caches.synced()
        lines.append("caches: synced" if synced else
                     f"caches: waiting for {', '.join(self.caches.unsynced())}")
        if self.elector is None:
            lines.append("leader: yes (leader election off)")
        elif self.elector.is_leader():
            lines.append(f"leader: yes ({self.settings.identity})")
        else:
            lines.append(f"leader: no, standby (lease held by {self.elector.holder or 'nobody'})")
        lines.append(f"queue: {self.queue.depth} waiting, {self.queue.processing()} in progress")
        source = self.source
        if source is not None:
            lines.extend(source.status())
        serving = True
        if self.webhook is not None and self.webhook_manager is not None:
            # Not ready before it has a certificate: the Service sends reviews to ready pods.
            serving = self.webhook.serving is not None
            lines.append(f"webhook: serving on port {self.webhook.port} (certificate valid "
                         f"until {self.webhook.not_after:%Y-%m-%dT%H:%M:%SZ})" if serving
                         else "webhook: waiting for its certificate")
            if self.webhook_manager.problem:
                lines.append(self.webhook_manager.problem)
        return synced and serving and not self._stopping.is_set(), lines

    # ---- leadership terms -------------------------------------------------------------------

    def _start_term(self) -> None:
        with self._term_lock:
            if self._term is not None or self._stopping.is_set():
                return
            term = self._term = _Term()
        term.starter = threading.Thread(target=self._begin, args=(term,), name="term-start",
                                        daemon=True)
        term.starter.start()
        if self.webhook_manager is not None:
            self.webhook_manager.wake()  # a new leader registers at once

    def _begin(self, term: _Term) -> None:
        # A leader acting on half-filled caches would take missing objects for deleted ones.
        while not self.caches.wait_synced(0.2):
            if term.stop.is_set():
                return
        if term.stop.is_set():
            return
        for key in self.caches.cluster_keys():
            self.queue.add(key)
        directory = self.settings.source_dir
        if directory is not None:
            term.source = DirectorySource(directory, self.kube, self.caches, self.settings,
                                          self.metrics, self.events)
            term.source.start()
        queued = self.queue.depth  # read before the workers start taking from the queue
        workers = [threading.Thread(target=self.worker().run, args=(term.stop,),
                                    name=f"worker-{i}", daemon=True)
                   for i in range(self.settings.workers)]
        for worker in workers:
            worker.start()
        term.workers = workers  # once running, as the resync thread (start)
        log.info("workers started", extra={"workers": self.settings.workers,
                                           "clusters": queued})

    def _end_term(self) -> None:
        with self._term_lock:
            term, self._term = self._term, None
        if term is None:
            return
        term.stop.set()
        deadline = time.monotonic() + self.settings.shutdown_grace_s
        if term.starter is not None and term.starter is not threading.current_thread():
            term.starter.join(max(deadline - time.monotonic(), 0))
        if term.source is not None:
            term.source.stop()  # the starter may have started it meanwhile
        for worker in term.workers:
            if worker is not threading.current_thread():
                worker.join(max(deadline - time.monotonic(), 0))
        self.metrics.forget_clusters()  # the next leader reports them
        busy = [worker.name for worker in term.workers if worker.is_alive()]
        if busy:
            log.warning("reconciles still running after the grace period; their writes are "
                        "refused from now on", extra={"threads": busy})
        log.info("workers stopped")

    def worker(self) -> Worker:
        """A worker reconciling with this replica's controller, caches, queue and metrics."""
        return Worker(self.controller, self.caches, self.queue, self.metrics, self._current)

    # ---- safety net -------------------------------------------------------------------------

    def _resync_loop(self) -> None:
        while not self._stopping.wait(self.settings.resync_period_s):
            self.caches.recheck_unserved()
            term = self._term
            if term is None or term.stop.is_set():
                continue
            keys = self.caches.cluster_keys()
            for key in keys:
                self.queue.add(key)
            if term.source is not None:
                term.source.request_scan(force=True)
            log.info("periodic resync", extra={"clusters": len(keys)})
