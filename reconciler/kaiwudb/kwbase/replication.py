"""Whether KaiwuDB's ranges are healthy, and since when that is known: the range metrics of
`node status --ranges`, raft snapshots in flight, status record times (ReplicationHealth,
stale_records) and the ranges that lost their quorum (ranges_without_quorum).

The precondition of scale-in, upgrades and failover; read by KwbaseAdmin.replication_health and
ranges_without_quorum (reconciler.kaiwudb.kwbase.admin).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconciler.kaiwudb.kwbase.answers import _csv_rows, _int, _opt_int, _ParseError, _time
from reconciler.kaiwudb.kwbase.nodes import NodeStatus


@dataclass(frozen=True)
class ReplicationHealth:
    """Summed range health; None means no store reported the metric yet (not known healthy).
    `catching_up` counts the replicas live stores wait to send or are applying raft snapshots
    for (`snapshots_in_flight`). `stale` says why the sums may predate the last disruption (""
    when they cannot): then they are not evidence of health, whatever they say
    (`stale_records`)."""

    unavailable: int | None
    underreplicated: int | None
    catching_up: int | None
    stale: str = ""

    @property
    def healthy(self) -> bool:
        return (self.unavailable == 0 and self.underreplicated == 0 and self.catching_up == 0
                and not self.stale)

    def describe(self) -> str:
        if self.unavailable is None or self.underreplicated is None:
            return "replication health unknown (no store has reported range metrics yet)"
        if self.catching_up is None:
            return ("replication health unknown (a live store has not reported its raft "
                    "snapshot gauges)")
        if self.stale:
            return f"replication health not known yet: {self.stale}"
        if self.healthy:
            return "all ranges available and fully replicated"
        if self.unavailable or self.underreplicated:
            return (f"{self.unavailable} unavailable and {self.underreplicated} "
                    "under-replicated ranges")
        return (f"{self.catching_up} replicas are waiting for or applying a raft snapshot "
                "(catching up after their node was away; until then they cannot acknowledge "
                "writes, whatever the range metrics say)")


def replication_health_of(statuses: Sequence[NodeStatus],
                          snapshots: Mapping[int, int | None]) -> ReplicationHealth:
    """Replication health as KaiwuDB documents it (the precondition of scale-in and upgrades):
    the sums of the `ranges_unavailable` and `ranges_underreplicated` store metrics of the rows
    of `node status --ranges`. Those are each store's persisted status, a dead node's stale one
    included (better to wait than to act on missing data), but KaiwuDB lists no node that is
    decommissioned and no longer live: its last status, frozen when it died, would count the
    ranges that were under-replicated then for ever (kwdb_internal.kv_store_status keeps it,
    which is why that table is not summed for them).

    Those two metrics count a replica as up to date whenever its node is live
    (calcRangeCounter, kv/kvserver/replica_metrics.go:170-201), so they call a range healthy
    while a replica of it still waits for the raft snapshot it needs after its node was away.
    `snapshots` (node id to `snapshots_in_flight`) adds that, summed over the live nodes."""
    if not statuses or any(s.ranges_unavailable is None or s.ranges_underreplicated is None
                           for s in statuses):
        return ReplicationHealth(None, None, None)
    live = [snapshots.get(s.id) for s in statuses if s.is_live]
    catching_up = None if any(n is None for n in live) else sum(n or 0 for n in live)
    return ReplicationHealth(sum(s.ranges_unavailable or 0 for s in statuses),
                             sum(s.ranges_underreplicated or 0 for s in statuses), catching_up)


LIVENESS_TTL_S = 15.0
"""How long a node's liveness record outlives its last heartbeat (base/config.go:134)."""


METRICS_SAMPLE_S = 10.0
"""How often a KWDB node computes its periodic store metrics (ranges.unavailable,
ranges.underreplicated) and, on a second ticker, writes them into its status record:
base.DefaultMetricsSampleInterval (server/config.go:76; server/node.go:525, 763-846). A record
carries metrics computed up to one interval before it was written, and a new process's gauges
are 0 until its first computation."""


@dataclass(frozen=True)
class StatusTimes:
    """When a node's status record (kwdb_internal.kv_node_status) was written, and when the
    process that wrote it started."""

    started_at: datetime
    updated_at: datetime


def stale_records(statuses: Sequence[NodeStatus], times: dict[int, StatusTimes],
                  sample_s: float = METRICS_SAMPLE_S) -> str:
    """Why the range metrics of `statuses` may not show the last start of a live node yet, or "".

    The newest process start among the live nodes is the last disruption those metrics must
    reflect (a restart, a failover's new node, a scale-out). Each live node's record must have
    been written two sampling intervals after it: then its metrics were computed one interval
    after it at least. Both times are KWDB's own clocks, which KWDB keeps within 500 ms
    (--max-offset). A dead node's record is old by nature and still counted in the sums; it is
    not waited for (it will never be rewritten)."""
    live = [s for s in statuses if s.is_live]
    # A record older than the node's current process (its started_at, the same value KWDB
    # gossips with the descriptor) was written by the process before: SQL serves before a new
    # process writes its first record (server/server.go:2118-2144).
    missing = [s.id for s in live if s.id not in times or (
        s.started_at is not None and times[s.id].started_at < s.started_at)]
    if missing:
        return ("no status record yet from the running process of KaiwuDB node "
                + ", ".join(map(str, missing))
                + f" (written at start, then every {sample_s:g} s)")
    if not live:
        return ""
    newest = max(live, key=lambda s: times[s.id].started_at)
    started = times[newest.id].started_at
    behind = sorted(s.id for s in live
                    if (times[s.id].updated_at - started).total_seconds() < 2 * sample_s)
    if behind:
        return (f"node {newest.id} started at {started:%H:%M:%S} and the store metrics of node "
                + ", ".join(map(str, behind)) + f" were written less than {2 * sample_s:g} s "
                f"after that; KWDB computes and writes them every {sample_s:g} s "
                "(server/node.go:763-846)")
    # A node that stopped counting as live is a disruption too: the metrics count its replicas
    # up to date until its liveness expired (replica_metrics.go:170-201), at most one record
    # interval after its last record plus the liveness TTL (base/config.go:134). Until every
    # live record was written two intervals after that, a range that lost its quorum with it
    # may still read as available.
    gone = [s for s in statuses if not s.is_live and s.id in times]
    if not gone:
        return ""
    lost = max(gone, key=lambda s: times[s.id].updated_at)
    expired = times[lost.id].updated_at + timedelta(seconds=sample_s + LIVENESS_TTL_S)
    behind = sorted(s.id for s in live
                    if (times[s.id].updated_at - expired).total_seconds() < 2 * sample_s)
    if not behind:
        return ""
    return (f"node {lost.id} stopped counting as live by {expired:%H:%M:%S} at the latest and "
            "the store metrics of node " + ", ".join(map(str, behind)) + " were written less "
            f"than {2 * sample_s:g} s after that")


STATUS_TIMES_QUERY = (
    "SELECT node_id, started_at, updated_at FROM kwdb_internal.kv_node_status ORDER BY node_id")
"""kwdb_internal.kv_node_status (sql/kwdb_internal.go:3406-3430; admin only, the reconciler is
root): each node's persisted status record, UpdatedAt when it was written and StartedAt when its
process started (server/status/recorder.go:451-452)."""


SNAPSHOTS_QUERY = (
    "SELECT node_id, "
    "sum((metrics->>'queue.raftsnapshot.pending')::DECIMAL)::INT AS snapshots_queued, "
    "sum((metrics->>'replicas.reserved')::DECIMAL)::INT AS snapshots_applying "
    "FROM kwdb_internal.kv_store_status GROUP BY node_id ORDER BY node_id")
"""Each node's raft snapshots in flight, from its stores' persisted status records
(kwdb_internal.kv_store_status, sql/kwdb_internal.go:3515-3620: a `metrics` JSON column;
admin only). `queue.raftsnapshot.pending` (kv/kvserver/metrics.go:724-728) counts the ranges a
leader queued because a follower needs a snapshot (raft_snapshot_queue.go:79-98; queued at once,
replica_raft.go:2003-2006), less the one being sent; `replicas.reserved` (metrics.go:48-52)
counts the snapshots a store is receiving and applying (store_snapshot.go:935-939). Both are
kept current, not sampled, and written with every record (every 10 s)."""


def parse_status_times(text: str) -> dict[int, StatusTimes]:
    """STATUS_TIMES_QUERY's CSV: header `node_id,started_at,updated_at`, one row per record."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"node_id", "started_at", "updated_at"}:
            raise _ParseError("expected columns node_id, started_at, updated_at, got "
                              + ", ".join(rows[0]))
        found: dict[int, StatusTimes] = {}
        for row in rows:
            started, updated = _time(row["started_at"]), _time(row["updated_at"])
            if started is None or updated is None:
                raise _ParseError("a status record without its times")
            found[_int(row["node_id"], "node_id")] = StatusTimes(started, updated)
        return found
    except _ParseError as err:
        raise ValueError(f"unreadable status record times: {err}") from None


RANGE_REPLICA_SETS_QUERY = (
    "SELECT array_to_string(replicas, ',') AS stores, count(*) AS ranges "
    "FROM kwdb_internal.ranges_no_leases GROUP BY stores ORDER BY stores")
"""How many ranges have each set of voting replicas, from the range descriptors (a meta scan:
kwdb_internal.ranges_no_leases, sql/kwdb_internal.go:2227-2330, admin only, the reconciler is
root; `replicas` is the voters' store ids, sorted). Unlike the range metrics, which count a
range by its first live replica and so count a range with none by no one
(kv/kvserver/replica_metrics.go:170-201), the descriptors list every range. Grouped by replica
set, the answer stays a few rows however many ranges there are."""


STORE_NODES_QUERY = (
    "SELECT node_id, store_id FROM kwdb_internal.kv_store_status ORDER BY store_id")
"""The node of each store that ever wrote a status record (kwdb_internal.kv_store_status,
sql/kwdb_internal.go:3515-3620): store ids are not node ids (KWDB allocates them apart)."""


def parse_replica_sets(text: str) -> dict[tuple[int, ...], int]:
    """RANGE_REPLICA_SETS_QUERY's CSV: header `stores,ranges`; stores is a comma-separated list
    of store ids (empty for a range without voters, which no quorum can serve)."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"stores", "ranges"}:
            raise _ParseError(f"expected columns stores, ranges, got {', '.join(rows[0])}")
        found: dict[tuple[int, ...], int] = {}
        for row in rows:
            stores = tuple(_int(part, "stores") for part in row["stores"].split(",")
                           if part.strip()) if row["stores"] not in ("", "NULL") else ()
            count = _int(row["ranges"], "ranges")
            if count < 0 or any(store <= 0 for store in stores):
                raise _ParseError("a negative count or store id")
            found[stores] = found.get(stores, 0) + count
        return found
    except _ParseError as err:
        raise ValueError(f"unreadable range replica sets: {err}") from None


def parse_store_nodes(text: str) -> dict[int, int]:
    """STORE_NODES_QUERY's CSV: header `node_id,store_id`, one row per store."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"node_id", "store_id"}:
            raise _ParseError(f"expected columns node_id, store_id, got {', '.join(rows[0])}")
        return {_int(row["store_id"], "store_id"): _int(row["node_id"], "node_id")
                for row in rows}
    except _ParseError as err:
        raise ValueError(f"unreadable store nodes: {err}") from None


def ranges_without_quorum(replica_sets: Mapping[tuple[int, ...], int],
                          store_nodes: Mapping[int, int], live: Collection[int]) -> int:
    """The ranges whose voting replicas on live nodes are not a majority of their voters: no
    write or lease is possible, and their last copies may be on the nodes that are not live.
    A store whose node is unknown counts as not live (better to wait than to give up a copy)."""
    return sum(count for stores, count in replica_sets.items()
               if 2 * sum(store_nodes.get(store) in live for store in stores) <= len(stores))


def parse_snapshots(text: str) -> dict[int, int | None]:
    """SNAPSHOTS_QUERY's CSV: header `node_id,snapshots_queued,snapshots_applying`, one row per
    node; a node's count is None when a gauge is missing (NULL: not known to be 0)."""
    try:
        rows = _csv_rows(text)
        wanted = {"node_id", "snapshots_queued", "snapshots_applying"}
        if rows and set(rows[0]) != wanted:
            raise _ParseError(f"expected columns {', '.join(sorted(wanted))}, got "
                              + ", ".join(rows[0]))
        found: dict[int, int | None] = {}
        for row in rows:
            queued = _opt_int(row, "snapshots_queued")
            applying = _opt_int(row, "snapshots_applying")
            if (queued or 0) < 0 or (applying or 0) < 0:
                raise _ParseError("a negative snapshot count")
            found[_int(row["node_id"], "node_id")] = (
                None if queued is None or applying is None else queued + applying)
        return found
    except _ParseError as err:
        raise ValueError(f"unreadable raft snapshot gauges: {err}") from None
