"""The state of one simulated KaiwuDB cluster: node liveness, ranges, replicas, healing over time.

Owned by tests/world/kwdb/world.py (one `LogicalCluster` per initialised KaiwuDB cluster) and read
by tests/world/kwdb/commands.py to answer `kwbase node status`, `node decommission` and the SQL
health queries.

What it models (after CockroachDB v20.1, which kwbase forks):
- liveness: a node heartbeats while its process runs on a live host; it stays live for
  `liveness_ttl_s` after the last heartbeat. Its liveness status (kvserver LivenessStatus) is LIVE,
  UNAVAILABLE (not live yet, or draining), DECOMMISSIONING, or DEAD / DECOMMISSIONED once
  `server.time_until_store_dead` (`store_dead_s`) has passed after the liveness record expired.
- upgrading (`kwbase node upgrade`, cli/node.go:548-636): the record's Upgrading flag makes the
  status UPGRADING until the node is dead (kv/kvserver/store_pool.go:151-156), whether it runs or
  not; the flag survives restarts (a heartbeat copies the record,
  kv/kvserver/node_liveness.go:725-737) and is cleared only by a start with
  `--upgrade-complete` (cli/start.go:711-715, server/server.go:2855-2874). An UPGRADING node
  is not available (cli/node.go:174) and its
  store is neither live nor dead to the allocator (store_pool.go:244, 561-562, 742): no replica
  is moved onto it and none off it. `node upgrade` sets the cluster's store-dead time to 3 h,
  the completing start resets it to the default (server/server.go:2845-2846, 2864-2865).
- availability (`node status`'s is_available): a live node's liveness record is current only
  while the liveness range (range 1 here) has a quorum of live replicas to take heartbeats;
  without one, running nodes print is_live true and is_available false. A single-replica
  cluster's liveness range has its one replica on the bootstrap node: with that node down, no
  node is available (the whole cluster is unavailable).
- ranges: `range_count` ranges, each with an ordered replica list and a leaseholder. A fresh
  cluster puts every range on the bootstrap node, then up-replicates to the replication factor.
- the replicate queue, one move at a time at `snapshot_rate_per_s`, in priority order: replace a
  replica on a DEAD node, add a missing replica, move a replica off a decommissioning node, then
  (optionally) rebalance by replica count; off in single-replica mode, as KWDB's is
  (replicate_queue.go:248-250), so every range stays on the bootstrap node. A move needs a
  quorum of live replicas and a target that is live, not decommissioning, not draining, not
  suspect and not already a replica. Replicas on a non-live node that is not dead yet are left
  alone (real: the cluster waits for `server.time_until_store_dead` before repairing).
- metrics (kvserver calcRangeCounter): each range is counted by its first live replica;
  `ranges.unavailable` when live replicas are not a quorum, `ranges.underreplicated` when live
  replicas are fewer than needed. So under-replicated ranges show as soon as a node stops being
  live, and heal only after it is declared dead. A range with no live replica is counted by no
  one (also real).
- persisted node status, sampled (`metrics_sample_interval_s`, base.DefaultMetricsSampleInterval
  10 s, server/config.go:76): a running node computes its periodic store metrics (leaders,
  leaseholders, ranges.unavailable, ranges.underreplicated: store.go:2387-2479, 2511-2520) on
  one 10 s ticker (server/node.go:525, 763-795) and writes its status record on another, once
  at start and then every 10 s (node.go:821-846; UpdatedAt, status/recorder.go:451). A new
  process's computed gauges are 0 until its first tick; its replica count is kept as replicas
  come and go (store.go:1520). Here both tickers start with the process and, at the same
  instant, the write comes first: a record carries metrics computed up to 10 s before it was
  written, and a restarted node's first two records claim no unavailable and no
  under-replicated range. `kwdb_internal.kv_store_status` and `node status --ranges` read the
  records; a node that stopped keeps its last one for ever (summing the table over all nodes
  includes stale rows of dead nodes); `kv_node_status` has each record's started_at and
  updated_at (sql/kwdb_internal.go:3406-3430).
- gossiped store descriptors (gossip/gossip.go StoresInterval and StoreTTL, kvserver/store.go):
  a running node gossips its replica count when it starts, every `gossip_stores_interval_s`, and
  at once after `gossip_capacity_delta_fraction` of its count (at least 1) in replica changes.
  Others see the last gossiped count until `store_gossip_ttl_s` after it was gossiped; then
  nothing, which `node status --decommission` shows as gossiped_replicas 0. So a node that dies
  or is cut off mid-decommission shows 0 two minutes later while range descriptors still list
  replicas on it: only the meta scan of `node decommission` (replica_count) is authoritative.

- raft catch-up: a node back after `follower_inactive_s` (10 s) or more finds every range it
  holds a replica of with a raft log truncated past it (assumed: every range took writes enough,
  raft_log_queue.go:442-478), so each such replica waits for a raft snapshot. The leader queues
  it at once (replica_raft.go:2003-2006; raft_snapshot_queue.go:79-98) and sends snapshots
  first among the moves here, at `recovery_snapshot_rate_per_s`. Until its snapshot is applied a
  replica cannot acknowledge writes or take a lease: a range whose caught-up live replicas are
  not a quorum is truly unavailable. KWDB's range metrics still count it live, available and
  fully replicated (calcRangeCounter reads only liveness, replica_metrics.go:170-201); the
  store gauges `queue.raftsnapshot.pending` (leader, ranges queued) and `replicas.reserved`
  (receiver, a snapshot being applied) show it, current at every record write.

Leases move only when their holder stops being live or drains (to the first live, non-draining
replica not waiting for a snapshot); there is no lease rebalancing.

Not modelled: data sizes, raft logs (only "needs a snapshot" or not), zone configs other than
the replication factor, localities in placement, lease preferences, time-series (kwdbts2)
replication, clock offsets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tests.world.kwdb.data import SqlData
from tests.world.kwdb.settings import KwdbSettings

if TYPE_CHECKING:
    from tests.world.kwdb.bulk import Running

MODE_MULTI = "start"
MODE_SINGLE_REPLICA = "start-single-replica"
MODE_SINGLE_NODE = "start-single-node"
START_MODES = (MODE_MULTI, MODE_SINGLE_REPLICA, MODE_SINGLE_NODE)

LIVE = "LIVE"
UNAVAILABLE = "UNAVAILABLE"
DECOMMISSIONING = "DECOMMISSIONING"
DEAD = "DEAD"
DECOMMISSIONED = "DECOMMISSIONED"
UPGRADING = "UPGRADING"
# server/server.go:2845-2846: `node upgrade` sets server.time_until_store_dead = '3h'.
UPGRADE_STORE_DEAD_S = 3 * 3600.0


@dataclass(frozen=True)
class StoreMetrics:
    """The store metrics node status and kv_store_status read (sums over a node's stores)."""

    replicas: int = 0
    leaders: int = 0
    leaseholders: int = 0
    unavailable: int = 0
    underreplicated: int = 0
    # Live gauges, read when the record is written: ranges this store leads that wait in its
    # raft snapshot queue (queue.raftsnapshot.pending), and snapshots it is receiving
    # (replicas.reserved).
    snapshots_queued: int = 0
    snapshots_applying: int = 0


@dataclass
class NodeRecord:
    """A node id's liveness record plus its gossiped descriptor. Ids belong to stores."""

    node_id: int
    store_key: str
    pod_name: str
    address: str
    sql_address: str
    build: str
    locality: str
    start_mode: str
    started_at: float
    last_heartbeat: float
    heartbeating: bool
    # When the node last became live after having been non-live (for the suspect window);
    # -inf when it has never been away.
    back_since: float = -math.inf
    decommissioning: bool = False
    decommissioning_since: float | None = None
    draining: bool = False
    upgrading: bool = False
    # The status record (what kv_store_status shows): its metrics, when it was written and the
    # start of the process that wrote it; and the gauges that process last computed.
    status: StoreMetrics = field(default_factory=StoreMetrics)
    status_written_at: float | None = None
    status_started_at: float = 0.0
    computed: StoreMetrics = field(default_factory=StoreMetrics)
    ticks_done: int = 0  # sampling ticks of the running process handled so far
    # The store descriptor last gossiped: its replica count, when, and how many replica changes
    # until the store gossips again without waiting for the interval.
    gossiped_ranges: int = 0
    gossiped_at: float = -math.inf
    gossip_countdown: int = 1


@dataclass
class Job:
    """One row of kwdb_internal.jobs (kwbase/pkg/sql/kwdb_internal.go:479-505). `job_type` is
    jobspb.Type's name with spaces (kwbase/pkg/jobs/jobspb/wrap.go:222-228, the names in
    jobs.proto:672-697), e.g. "TS TXN", "IMPORT", "SCHEMA CHANGE"."""

    job_id: int
    job_type: str
    description: str
    status: str  # running, succeeded, failed, ...
    created: float
    statement: str = ""
    finished: float | None = None
    error: str = ""


TS_TXN_JOB = "TS TXN"
"""The job every server start makes sure exists and that never ends: `InitTsTxnJob`
(kwbase/pkg/server/server.go:2299) creates it unless a running one exists
(kwbase/pkg/sql/kwdb_descriptor.go:390-420), and its resumer loops once a minute until its
context ends (kwbase/pkg/sql/handle_ts_txn.go:36-56). So `SHOW JOBS` of every KaiwuDB 3.2.1
cluster lists one job `running`, always."""


@dataclass
class RangeState:
    """One range: replica node ids in descriptor order, the leaseholder's node id, and the
    replicas (node ids) whose raft log the leader truncated past while they were gone: they
    need a raft snapshot before they can acknowledge a write again."""

    range_id: int
    replicas: list[int]
    leaseholder: int
    behind: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class _Move:
    """A replica move (remove may be None: an added replica), or, with catch_up, a raft
    snapshot that brings the replica on `add` up to date without changing the descriptor."""

    range_id: int
    remove: int | None
    add: int
    catch_up: bool = False


class LogicalCluster:
    """One initialised KaiwuDB cluster: its nodes (by id), ranges and replicate queue."""

    def __init__(
        self, settings: KwdbSettings, cluster_id: str, mode: str, created_at: float
    ) -> None:
        self.settings = settings
        self.cluster_id = cluster_id
        self.mode = mode
        self.replication_factor = settings.replication_factor if mode == MODE_MULTI else 1
        # The cluster setting server.time_until_store_dead: `node upgrade` raises it to 3 h and
        # a start with --upgrade-complete resets it to its default (a custom value is lost).
        self.store_dead_s = settings.time_until_store_dead_s
        self.nodes: dict[int, NodeRecord] = {}
        self.ranges: list[RangeState] = []
        self.next_node_id = 1
        self.clock = created_at
        self._budget = 0.0
        self.jobs: list[Job] = [
            Job(100000000000000001, TS_TXN_JOB, "handle ts txn record", "running", created_at)
        ]
        self.data = SqlData()
        # EXPORT and IMPORT statements not ended yet (tests/world/kwdb/bulk.py).
        self.running_statements: list[Running] = []

    # ----- jobs --------------------------------------------------------------------------
    def set_running_jobs(self, job_type: str, count: int, t: float) -> None:
        """Exactly `count` jobs of `job_type` running besides the others (tests start and end
        them); the perpetual TS TXN job cannot be ended this way, as in KWDB (NonCancelable)."""
        if job_type == TS_TXN_JOB:
            raise ValueError("the TS TXN job never ends (kwbase/pkg/sql/handle_ts_txn.go:36-56)")
        others = [j for j in self.jobs if not (j.job_type == job_type and j.status == "running")]
        first = max((j.job_id for j in self.jobs), default=100000000000000000) + 1
        self.jobs = others + [
            Job(first + i, job_type, f"simulated {job_type.lower()} job {i + 1}", "running", t)
            for i in range(count)
        ]

    def running_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.status == "running"]

    def add_job(self, job_type: str, description: str, statement: str, t: float) -> Job:
        """A new job row, running (ids from the cluster's counter, never reused)."""
        job_id = max((j.job_id for j in self.jobs), default=100000000000000000) + 1
        job = Job(job_id, job_type, description, "running", t, statement)
        self.jobs.append(job)
        return job

    # ----- nodes -------------------------------------------------------------------------
    def add_node(self, record_for_id: NodeRecord) -> NodeRecord:
        """Register a node; the caller built the record with `allocate_node_id()`."""
        self.nodes[record_for_id.node_id] = record_for_id
        return record_for_id

    def allocate_node_id(self) -> int:
        """Node ids come from a cluster-wide counter and are never reused."""
        node_id = self.next_node_id
        self.next_node_id += 1
        return node_id

    def bootstrap_ranges(self, first_node: int) -> None:
        """A new cluster's ranges all start with one replica on the bootstrap node."""
        self.ranges = [
            RangeState(range_id=i, replicas=[first_node], leaseholder=first_node)
            for i in range(1, self.settings.range_count + 1)
        ]
        if self.nodes[first_node].heartbeating:
            self._gossip(self.nodes[first_node], self.clock)

    def is_live(self, node: NodeRecord, t: float) -> bool:
        return node.heartbeating or t < node.last_heartbeat + self.settings.liveness_ttl_s

    def is_available(self, node: NodeRecord, t: float) -> bool:
        """`node status`'s is_available: the node's liveness record is current
        (kwbase/pkg/cli/node.go: expiration > now and not upgrading). A heartbeat renews the
        record only through the liveness range (here: range 1), which needs a quorum of live
        replicas: without one, the nodes still running stay is_live (gossip) and turn
        is_available false (kwbase/pkg/cmd/roachtest/cli.go: "false true"). An upgrading node
        is never available (cli/node.go:174 `AND not upgrading`)."""
        if node.upgrading or not self.is_live(node, t):
            return False
        liveness = self.ranges[0] if self.ranges else None
        # A single-replica cluster keeps its one copy of every range, the liveness range
        # included, on the bootstrap node for good (its replicate queue is off: see
        # _next_move): with that node down no heartbeat is recorded, and every node turns
        # unavailable.
        if liveness is None:
            return True
        return self._has_quorum(liveness, t)

    def liveness_status(self, node: NodeRecord, t: float) -> str:
        """kvserver LivenessStatus (kv/kvserver/store_pool.go:148-176) as of simulated time t:
        the Upgrading flag comes first, then dead, decommissioning, draining, live."""
        expiration = node.last_heartbeat + self.settings.liveness_ttl_s
        dead = not node.heartbeating and t >= expiration + self.store_dead_s
        if node.upgrading:
            return DEAD if dead else UPGRADING
        if dead:
            return DECOMMISSIONED if node.decommissioning else DEAD
        if node.decommissioning:
            return DECOMMISSIONING
        if node.draining:
            return UNAVAILABLE
        return LIVE if self.is_live(node, t) else UNAVAILABLE

    def _is_dead(self, node: NodeRecord, t: float) -> bool:
        return self.liveness_status(node, t) in (DEAD, DECOMMISSIONED)

    def _is_suspect(self, node: NodeRecord, t: float) -> bool:
        return node.heartbeating and t < node.back_since + self.settings.suspect_after_restart_s

    def set_heartbeating(self, node_id: int, on: bool, t: float) -> None:
        """The node's process started (on) or stopped / lost its host (off) at time t."""
        self.advance(t)
        node = self.nodes[node_id]
        if on == node.heartbeating:
            if on and node.started_at != node.status_started_at:
                self._process_started(node, t)  # restarted with no stop seen in between
            return
        if on:
            if not self.is_live(node, t):
                node.back_since = t
            if t - node.last_heartbeat >= self.settings.follower_inactive_s:
                self._fell_behind(node.node_id, t)
            node.heartbeating = True
            node.draining = False  # a restart takes a new liveness epoch, clearing draining
            node.last_heartbeat = t
            self._gossip(node, t)  # a store gossips its descriptor as soon as it starts
            if node.started_at != node.status_started_at or node.status_written_at is None:
                self._process_started(node, t)
            else:  # the same process, cut off meanwhile: it wrote nothing; next tick on time
                node.ticks_done = self._ticks_by(node, t)
        else:
            # The last status record the node wrote is what kv_store_status keeps showing.
            node.heartbeating = False
            node.last_heartbeat = t
        self._fix_leases(t)

    def _fell_behind(self, node_id: int, t: float) -> None:
        """The node comes back after `follower_inactive_s` or more: every range it holds a
        replica of that went on without it has truncated its raft log past it
        (settings.KwdbSettings.follower_inactive_s), so the leader will send a raft snapshot
        (kv/kvserver/replica_raft.go:2003-2006 queues it in the raft snapshot queue). A range
        goes on only with a quorum of up-to-date replicas elsewhere: one that has none (the
        whole cluster was down, or most of the range) committed nothing, so truncated nothing
        past anyone (only committed entries are truncated, raft_log_queue.go:442-478). Taken
        at the return: a quorum now is taken to have made progress while the node was away."""
        for r in self.ranges:
            if node_id in r.replicas and len(r.replicas) > 1 and len(
                    [n for n in self._voting_replicas(r, t) if n != node_id]
            ) >= len(r.replicas) // 2 + 1:
                r.behind.add(node_id)

    def _process_started(self, node: NodeRecord, t: float) -> None:
        """A new kwbase process: gauges at 0 but the replica count, and its first status
        record written at once (node.go:823-827)."""
        node.computed = StoreMetrics(replicas=self.replica_count(node.node_id))
        node.status_started_at = node.started_at
        node.ticks_done = self._ticks_by(node, t)
        self._write_status(node, t)

    def _write_status(self, node: NodeRecord, t: float) -> None:
        """The record: the gauges last computed, with the replica count and the snapshot
        gauges as they are at the write (those are kept current, not sampled: queue.go:1244,
        1261, 1297; store_snapshot.go:935-939)."""
        c = node.computed
        queued, applying = self._snapshot_gauges(node.node_id, t)
        node.status = StoreMetrics(self.replica_count(node.node_id), c.leaders, c.leaseholders,
                                   c.unavailable, c.underreplicated, queued, applying)
        node.status_written_at = t

    def _snapshot_gauges(self, node_id: int, t: float) -> tuple[int, int]:
        """(queue.raftsnapshot.pending, replicas.reserved) of a node's store at t: the ranges
        it leads that wait for a raft snapshot to a follower, less the one being sent (a
        baseQueue counts only its priority queue, queue.go:1244), and whether it is receiving
        that one."""
        sending = self._next_catch_up(t)
        queued = sum(1 for r in self.ranges
                     if r.leaseholder == node_id and self._waiting_followers(r, t)
                     and (sending is None or sending.range_id != r.range_id))
        applying = int(sending is not None and sending.add == node_id)
        return queued, applying

    def _ticks_by(self, node: NodeRecord, t: float) -> int:
        """How many of the process's ticks (started_at + k x 10 s, k >= 1) come by time t."""
        return max(0, math.floor((t - node.started_at) / self.settings.metrics_sample_interval_s))

    def _next_sample(self, node: NodeRecord) -> float:
        """The running node's next tick after the last one handled."""
        return node.started_at + (node.ticks_done + 1) * self.settings.metrics_sample_interval_s

    def _sample_due(self, t: float) -> None:
        """Every tick up to t of every running node: write its record, then compute its gauges.
        A node that does not heartbeat (stopped, or cut off from the cluster) writes nothing."""
        for node in self.nodes.values():
            if not node.heartbeating or node.status_written_at is None:
                continue
            while (tick := self._next_sample(node)) <= t:
                self._write_status(node, tick)
                node.computed = self.current_metrics(node, tick)
                node.ticks_done += 1

    def set_flags(
        self,
        node_id: int,
        t: float,
        *,
        decommissioning: bool | None = None,
        draining: bool | None = None,
        upgrading: bool | None = None,
    ) -> None:
        """Change the liveness record's decommissioning / draining / upgrading flags at time t."""
        self.advance(t)
        node = self.nodes[node_id]
        if upgrading is not None:
            node.upgrading = upgrading
        if decommissioning is not None:
            if decommissioning and not node.decommissioning:
                node.decommissioning_since = t
            if not decommissioning:
                node.decommissioning_since = None
            node.decommissioning = decommissioning
        if draining is not None:
            node.draining = draining
        self._fix_leases(t)

    def last_heartbeat(self, node: NodeRecord, t: float) -> float:
        return t if node.heartbeating else node.last_heartbeat

    def descriptor_known(self, node: NodeRecord, t: float) -> bool:
        """Whether gossip still holds the node's descriptor at t: gossiped at its start and
        every node_descriptor_interval_s while it runs, forgotten node_descriptor_ttl_s after
        the last time (settings.KwdbSettings)."""
        if node.heartbeating:
            return True
        interval = self.settings.node_descriptor_interval_s
        ran = max(node.last_heartbeat - node.started_at, 0.0)
        last_gossip = node.started_at + math.floor(ran / interval) * interval
        return t < last_gossip + self.settings.node_descriptor_ttl_s

    # ----- gossip -------------------------------------------------------------------------------
    def _gossip(self, node: NodeRecord, t: float) -> None:
        count = self.replica_count(node.node_id)
        node.gossiped_ranges, node.gossiped_at = count, t
        fraction = self.settings.gossip_capacity_delta_fraction
        node.gossip_countdown = max(math.ceil(count * fraction), 1)

    def _gossip_due(self, t: float) -> None:
        """Periodic store gossip of every running node whose interval has passed."""
        interval = self.settings.gossip_stores_interval_s
        for node in self.nodes.values():
            if node.heartbeating and t >= node.gossiped_at + interval:
                self._gossip(node, t)

    def _capacity_changed(self, node_id: int, t: float) -> None:
        node = self.nodes[node_id]
        if not node.heartbeating:
            return  # a stopped or cut-off store gossips nothing
        node.gossip_countdown -= 1
        if node.gossip_countdown <= 0:
            self._gossip(node, t)

    def gossiped_replicas(self, node: NodeRecord, t: float) -> int:
        """What others see of the node's gossiped range count: 0 once it has expired."""
        if t >= node.gossiped_at + self.settings.store_gossip_ttl_s:
            return 0
        return node.gossiped_ranges

    # ----- ranges and metrics ---------------------------------------------------------------
    def replica_count(self, node_id: int) -> int:
        """Replicas range descriptors list on the node: what a meta scan counts."""
        return sum(1 for r in self.ranges if node_id in r.replicas)

    def _live_replicas(self, r: RangeState, t: float) -> list[int]:
        """Replicas on live nodes: what KWDB's metrics count as live (calcRangeCounter,
        kv/kvserver/replica_metrics.go:170-201 reads only the liveness map)."""
        return [n for n in r.replicas if self.is_live(self.nodes[n], t)]

    def _voting_replicas(self, r: RangeState, t: float) -> list[int]:
        """Replicas that can acknowledge a write: on a running node that reaches the cluster
        (a stopped node stays live in its liveness record for up to the TTL, but answers
        nothing) and not waiting for a raft snapshot. This, not `_live_replicas`, is what a
        quorum needs; KWDB's range metrics do not see the difference (calcBehindCount,
        replica_metrics.go:217-233, is only a log-entry count)."""
        return [n for n in r.replicas if self.nodes[n].heartbeating and n not in r.behind]

    def _has_quorum(self, r: RangeState, t: float) -> bool:
        return len(self._voting_replicas(r, t)) >= len(r.replicas) // 2 + 1

    def _waiting_followers(self, r: RangeState, t: float) -> list[int]:
        """Replicas of r waiting for a raft snapshot that can get one now: on a running node,
        with a leader to send it. A leader needs an up-to-date replica on a running node and
        the votes of a majority of running replicas; replicas waiting for a snapshot vote too
        (raft's vote check compares logs only), and sending a snapshot needs no quorum."""
        running = [n for n in r.replicas if self.nodes[n].heartbeating]
        can_lead = (len(running) >= len(r.replicas) // 2 + 1
                    and any(n not in r.behind for n in running))
        if not r.behind or not can_lead:
            return []
        return [n for n in running if n in r.behind]

    def _next_catch_up(self, t: float) -> _Move | None:
        """The raft snapshot sent next: the raft snapshot queue goes first among the moves
        here, at its own rate (settings.recovery_snapshot_rate_per_s)."""
        for r in self.ranges:
            waiting = self._waiting_followers(r, t)
            if waiting:
                return _Move(r.range_id, None, waiting[0], catch_up=True)
        return None

    def metrics(self, node: NodeRecord, t: float) -> StoreMetrics:
        """The node's status record as kv_store_status shows it: the last one it wrote."""
        self.advance(t)
        return node.status

    def current_metrics(self, node: NodeRecord, t: float) -> StoreMetrics:
        """What the node's store computes now (records lag behind it): by liveness alone, as
        KWDB's calcRangeCounter does, so a range whose live replicas wait for snapshots is
        counted available and fully replicated."""
        replicas = leases = unavailable = underreplicated = 0
        for r in self.ranges:
            live = self._live_replicas(r, t)
            if node.node_id in r.replicas:
                replicas += 1
            if r.leaseholder == node.node_id:
                leases += 1
            if live and live[0] == node.node_id:
                if len(live) < len(r.replicas) // 2 + 1:
                    unavailable += 1
                if len(live) < self.replication_factor:
                    underreplicated += 1
        # The snapshot gauges are read when a record is written (_write_status), not here.
        return StoreMetrics(replicas, leases, leases, unavailable, underreplicated)

    def health(self, t: float) -> tuple[int, int]:
        """(unavailable, under-replicated) ranges as the cluster really is, not as reported: a
        replica waiting for a raft snapshot cannot acknowledge a write."""
        unavailable = underreplicated = 0
        for r in self.ranges:
            live = len(self._voting_replicas(r, t))
            unavailable += live < len(r.replicas) // 2 + 1
            underreplicated += live < self.replication_factor
        return unavailable, underreplicated

    def _fix_leases(self, t: float) -> None:
        for r in self.ranges:
            holder = self.nodes.get(r.leaseholder)
            if (
                r.leaseholder in r.replicas
                and holder is not None
                and self.is_live(holder, t)
                and not holder.draining
                and r.leaseholder not in r.behind  # back with a new epoch: its leases lapsed
            ):
                continue
            # A replica waiting for a snapshot cannot win the raft election a lease needs.
            for n in r.replicas:
                candidate = self.nodes[n]
                if self.is_live(candidate, t) and not candidate.draining and n not in r.behind:
                    r.leaseholder = n
                    break

    # ----- the replicate queue ----------------------------------------------------------------
    def _targets(self, t: float) -> list[NodeRecord]:
        return [
            n
            for n in self.nodes.values()
            if n.heartbeating
            and not n.decommissioning
            and not n.draining
            and not n.upgrading  # store status unknown: not a target (store_pool.go:244, 742)
            and not self._is_suspect(n, t)
        ]

    def _pick_target(self, r: RangeState, t: float, counts: dict[int, int]) -> int | None:
        options = [n.node_id for n in self._targets(t) if n.node_id not in r.replicas]
        if not options:
            return None
        return min(options, key=lambda n: (counts.get(n, 0), n))

    def _counts(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for r in self.ranges:
            for n in r.replicas:
                counts[n] = counts.get(n, 0) + 1
        return counts

    def _next_move(self, t: float) -> _Move | None:
        catch_up = self._next_catch_up(t)
        if catch_up is not None:
            return catch_up
        if self.mode == MODE_SINGLE_REPLICA:
            # start-single-replica is KWDB's "mpp" mode: the replicate queue never queues a
            # range (kwbase/pkg/kv/kvserver/replicate_queue.go:248-250, `if api.MppMode`), so
            # every range, system ranges included, stays on the bootstrap node.
            return None
        counts = self._counts()
        healthy_ranges = [r for r in self.ranges if self._has_quorum(r, t)]
        # 1. replace replicas on dead nodes.
        for r in healthy_ranges:
            dead = [n for n in r.replicas if self._is_dead(self.nodes[n], t)]
            if dead:
                target = self._pick_target(r, t, counts)
                if target is not None:
                    return _Move(r.range_id, dead[0], target)
        # 2. add missing replicas.
        for r in healthy_ranges:
            if len(r.replicas) < self.replication_factor:
                target = self._pick_target(r, t, counts)
                if target is not None:
                    return _Move(r.range_id, None, target)
        # 3. drain decommissioning nodes.
        for r in healthy_ranges:
            leaving = [n for n in r.replicas if self.nodes[n].decommissioning]
            if leaving:
                target = self._pick_target(r, t, counts)
                if target is not None:
                    return _Move(r.range_id, leaving[0], target)
        # 4. rebalance by replica count among nodes that can take replicas.
        if not self.settings.rebalance:
            return None
        pool = sorted(n.node_id for n in self._targets(t))
        if len(pool) < 2:
            return None
        src = max(pool, key=lambda n: (counts.get(n, 0), -n))
        dst = min(pool, key=lambda n: (counts.get(n, 0), n))
        if counts.get(src, 0) - counts.get(dst, 0) <= 1:
            return None
        for r in healthy_ranges:
            if (
                src in r.replicas
                and dst not in r.replicas
                and len(self._live_replicas(r, t)) == len(r.replicas)
            ):
                return _Move(r.range_id, src, dst)
        return None

    def _apply(self, move: _Move, t: float) -> None:
        r = self.ranges[move.range_id - 1]
        if move.catch_up:
            r.behind.discard(move.add)
            self._fix_leases(t)
            return
        if move.remove is not None:
            r.behind.discard(move.remove)
            r.replicas.remove(move.remove)
            self._capacity_changed(move.remove, t)
        r.replicas.append(move.add)
        self._capacity_changed(move.add, t)
        self._fix_leases(t)

    def _boundaries(self) -> Iterator[float]:
        ttl = self.settings.liveness_ttl_s
        for n in self.nodes.values():
            if n.heartbeating:
                yield n.back_since + self.settings.suspect_after_restart_s
                yield n.gossiped_at + self.settings.gossip_stores_interval_s
                if n.status_written_at is not None:
                    yield self._next_sample(n)
            else:
                yield n.last_heartbeat + ttl
                yield n.last_heartbeat + ttl + self.store_dead_s

    def advance(self, now: float) -> None:
        """Run the replicate queue from the cluster's clock up to `now` (never backwards)."""
        while self.clock < now:
            self._gossip_due(self.clock)
            self._sample_due(self.clock)
            boundary = min([b for b in self._boundaries() if b > self.clock] + [now])
            self._fix_leases(self.clock)
            move = self._next_move(self.clock)
            if move is None:
                self._budget = 0.0
                self.clock = boundary
                continue
            rate = (self.settings.recovery_snapshot_rate_per_s if move.catch_up
                    else self.settings.snapshot_rate_per_s)
            wait = (1.0 - self._budget) / rate
            if self.clock + wait <= boundary:
                self.clock += wait
                self._budget = 0.0
                self._apply(move, self.clock)
            else:
                self._budget += (boundary - self.clock) * rate
                self.clock = boundary
        self._gossip_due(self.clock)
        self._sample_due(self.clock)
        self._fix_leases(max(self.clock, now))
