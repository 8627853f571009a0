"""Settings of the simulated KaiwuDB: one frozen object with documented defaults.

Read by every module of tests/world/kwdb; built by tests (and by the test world facade) when they
want shorter timeouts or faster healing than the real defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KwdbSettings:
    """Knobs of the simulation. Defaults follow the real KaiwuDB where one exists.

    range_count: ranges a freshly initialised cluster holds. A new CockroachDB v20.1 cluster (which
        kwbase forks) bootstraps about 35-40 system ranges; 40 keeps the arithmetic simple.
    replication_factor: replicas per range for `kwbase start` clusters (KaiwuDB multi-replica
        mode: 3). `start-single-replica` and `start-single-node` always use 1.
    liveness_ttl_s: how long a node stays live after its last liveness heartbeat. KWDB V3.2.1
        derives it from raft: 3 (defaultRangeLeaseRaftElectionTimeoutMultiplier) x 25 election
        ticks (defaultRaftElectionTimeoutTicks, KWDB's own raise of CockroachDB's 15) x 200 ms
        (defaultRaftTickInterval) = 15 s (kwbase/pkg/base/config.go:72-76, 134-135, 660-693;
        NodeLivenessDurations). CockroachDB v20.1's 9 s was the simulator's value until
        3 December 2026: a real dead node stays live 6 s longer.
    time_until_store_dead_s: `server.time_until_store_dead`; KaiwuDB raises CockroachDB's 5 min
        to 30 min. Only after this does the cluster replace replicas of a non-live node.
    suspect_after_restart_s: a node that came back after being non-live is "suspect" for this long
        and receives no new replicas (the allocator's suspect window, 1 min in KaiwuDB's facts).
    snapshot_rate_per_s: replica moves (up-replication, repair, decommission drain, rebalance)
        the whole cluster completes per simulated second. Real throughput depends on data size;
        system ranges of a fresh cluster move in well under a second each.
    recovery_snapshot_rate_per_s: raft snapshots (a follower whose log was truncated past it
        catching up) the whole cluster completes per simulated second. KWDB rate-limits them
        apart from replica moves (kv.snapshot_recovery.max_rate, 16 MiB/s like
        kv.snapshot_rebalance.max_rate: kv/kvserver/store_snapshot.go:1247-1266), and a store
        applies one snapshot at a time (its snapshotApplySem, store_snapshot.go:895-916).
    follower_inactive_s: how long a follower can be gone before its ranges' leaders may
        truncate their raft logs past it, so that it needs a raft snapshot when it is back: a
        follower not heard from for MaxQuotaReplicaLivenessDuration (10 s,
        kv/kvserver/replica_proposal_quota.go:44) is no longer "recently active", and its log
        position is then protected only while the log is not too large
        (raft_log_queue.go:442-478). The simulator assumes every range takes writes enough to
        outgrow it (the harsh case): each replica of a node gone this long comes back behind.
    rebalance: whether replicas are moved onto new, emptier nodes once the cluster is healthy
        (CockroachDB rebalances by replica count; a move happens while max - min > 1).
    connect_timeout_s: the CLI's SQL connect timeout (`KWBASE_CONNECT_TIMEOUT`, default 15 s in
        kwbase/pkg/cli/sql_util.go); reported as the duration of commands that time out.
    default_build: build tag reported in `node status` when the caller does not pass the image.
        KaiwuDB tags its builds with an upper-case V (`kwbase version` prints e.g.
        `KaiwuDB Version:  V2.0.3.2_RC3-...`); image tag 3.2.1 becomes V3.2.1.
    epoch_unix_s: wall-clock instant (UNIX seconds, UTC) that simulated time 0 stands for; used
        only to print timestamps (started_at, updated_at). Default 2026-01-01T00:00:00Z.
    gossip_stores_interval_s: how often a running node gossips its store descriptor, whose range
        count is what `node status --decommission` shows as gossiped_replicas
        (kwdb_internal.gossip_nodes `ranges`). KWDB gossip.StoresInterval: 60 s.
    store_gossip_ttl_s: how long a gossiped store descriptor stays visible after the node last
        gossiped it; then gossiped_replicas reads 0 (gossip.StoreTTL = 2 x StoresInterval).
    gossip_capacity_delta_fraction: a running store also gossips at once after this fraction of
        its last gossiped range count (at least 1) in replica additions or removals
        (kvserver defaultGossipWhenCapacityDeltaExceedsFraction, 0.01). So a live node's
        gossiped count is close to the truth; a dead or cut-off node's is frozen, then 0.

    metrics_sample_interval_s: how often a running node computes its periodic store metrics and
        writes its status record (base.DefaultMetricsSampleInterval, 10 s: server/config.go:76,
        server/node.go:525, 2144 of server.go); model.py says how the two tickers are modelled.

    node_descriptor_interval_s, node_descriptor_ttl_s: a running node gossips its descriptor
        (address, build, locality, start mode, started_at) when it starts and every interval;
        others forget it ttl after it was last gossiped (kwbase/pkg/gossip/gossip.go:133-140:
        NodeDescriptorInterval 1 h, NodeDescriptorTTL 2 h). `node status` LEFT JOINs the
        descriptors to the liveness records (kwbase/pkg/cli/node.go:165-179), so a node down
        for an hour or two prints NULL for those columns and is_live false.

    drain_s: how long kwbase takes from SIGTERM to exit when it drains (KaiwuDB seconds; the
        simulated kubelet compares it with the pod's terminationGracePeriodSeconds on its own
        time scale). KWDB has no fixed figure: on SIGTERM cli/start.go:884-925 runs
        server.Drain until nothing remains, then stops: drainClients sleeps
        server.shutdown.drain_wait (0 s by default), waits for SQL sessions up to
        server.shutdown.query_wait (10 s, only while sessions are open), then drainNode marks
        the liveness record draining and moves the range leases away, each round bounded by
        server.shutdown.lease_transfer_wait (5 s) (server/drain.go:60-71, 211-258;
        kv/kvserver/store.go:180, 1040-1110). A small cluster with idle clients drains in about
        2 s; tests `tune` it longer for a slow drain.

    A store whose node was decommissioned starts again when its process does: KWDB V3.2.1 has no
    "permanently removed" check (CockroachDB added one in 20.2); the node rejoins live and still
    decommissioning.
    """

    range_count: int = 40
    replication_factor: int = 3
    liveness_ttl_s: float = 15.0
    time_until_store_dead_s: float = 30 * 60.0
    suspect_after_restart_s: float = 60.0
    snapshot_rate_per_s: float = 8.0
    recovery_snapshot_rate_per_s: float = 8.0
    follower_inactive_s: float = 10.0
    rebalance: bool = True
    connect_timeout_s: float = 15.0
    default_build: str = "V3.2.1"
    epoch_unix_s: float = 1_767_225_600.0
    gossip_stores_interval_s: float = 60.0
    store_gossip_ttl_s: float = 120.0
    gossip_capacity_delta_fraction: float = 0.01
    metrics_sample_interval_s: float = 10.0
    node_descriptor_interval_s: float = 3600.0
    node_descriptor_ttl_s: float = 7200.0
    drain_s: float = 2.0

    def __post_init__(self) -> None:
        if self.range_count < 1:
            raise ValueError("range_count must be at least 1")
        if self.replication_factor < 1:
            raise ValueError("replication_factor must be at least 1")
        if self.snapshot_rate_per_s <= 0 or self.recovery_snapshot_rate_per_s <= 0:
            raise ValueError("snapshot_rate_per_s and recovery_snapshot_rate_per_s must be "
                             "positive")
        if self.follower_inactive_s < 0:
            raise ValueError("follower_inactive_s must not be negative")
        if self.liveness_ttl_s <= 0 or self.time_until_store_dead_s <= self.liveness_ttl_s:
            raise ValueError("need 0 < liveness_ttl_s < time_until_store_dead_s")
        if not 0 < self.node_descriptor_interval_s < self.node_descriptor_ttl_s:
            raise ValueError("need 0 < node_descriptor_interval_s < node_descriptor_ttl_s")
        if self.drain_s < 0:
            raise ValueError("drain_s must not be negative")
        if self.metrics_sample_interval_s <= 0:
            raise ValueError("metrics_sample_interval_s must be positive")
        if not 0 < self.gossip_stores_interval_s < self.store_gossip_ttl_s:
            raise ValueError("need 0 < gossip_stores_interval_s < store_gossip_ttl_s")
