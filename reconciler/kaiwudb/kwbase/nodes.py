"""KaiwuDB's nodes as `kwbase node status`, `node decommission | recommission` and the liveness
table show them: the rows (NodeStatus, DecommissionStatus) and their parsers.

Column names follow kwbase/pkg/cli/node.go (see kaiwudb-facts.md "Cluster operations"). Read by
KwbaseAdmin (reconciler.kaiwudb.kwbase.admin); the rows are used by the lifecycle, failover,
scale-in and upgrade code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reconciler.kaiwudb.kwbase.answers import (
    _bool,
    _csv_rows,
    _int,
    _opt_bool,
    _opt_int,
    _ParseError,
    _time,
)


@dataclass(frozen=True)
class NodeStatus:
    """One row of `kwbase node status`. Optional groups are None unless their flag was given:
    --ranges (replica and range counts), --stats (byte counts; --all gives both and the rest),
    --decommission (gossiped_replicas, is_decommissioning, is_draining). A count the node does
    not report (NULL) is None too. gossiped_replicas is a gossip estimate (expires to 0 two
    minutes after a node stops gossiping): never evidence that a node is empty."""

    id: int
    address: str
    sql_address: str
    build: str
    started_at: datetime | None
    updated_at: datetime | None
    locality: str
    start_mode: str
    is_available: bool
    is_live: bool
    replicas_leaders: int | None = None
    replicas_leaseholders: int | None = None
    ranges: int | None = None
    ranges_unavailable: int | None = None
    ranges_underreplicated: int | None = None
    live_bytes: int | None = None
    key_bytes: int | None = None
    value_bytes: int | None = None
    intent_bytes: int | None = None
    system_bytes: int | None = None
    gossiped_replicas: int | None = None
    is_decommissioning: bool | None = None
    is_draining: bool | None = None

    @property
    def address_known(self) -> bool:
        """KaiwuDB still holds the node's descriptor. It forgets it two hours after the node
        last gossiped it (kwbase/pkg/gossip/gossip.go:133-140: gossiped hourly while the node
        runs, NodeDescriptorTTL 2 h), and `node status` then prints NULL for the address
        (cli/node.go:165-179 LEFT JOINs descriptors to liveness records)."""
        return self.address not in ("", "NULL")

    @property
    def pod_name(self) -> str | None:
        """The pod behind this node id, from its advertised address
        (<pod>.<headless>.<ns>.svc...:26257); None for an address that is not such a name, or
        none at all (address_known). Node ids belong to stores, so a node id's pod can change
        when a store moves."""
        if not self.address_known:
            return None
        host = self.address.rsplit(":", 1)[0]
        if not host or host.startswith("[") or host.replace(".", "").isdigit():
            return None
        return host.split(".", 1)[0]

    def long_gone(self, now: float, after_s: float = 3600.0) -> bool:
        """A node that has not run for an hour at least, by every sign KaiwuDB gives: its
        descriptor is forgotten (address_known; a running node gossips it hourly with a 2 h
        TTL, gossip.go:133-140, so it stopped an hour ago at least), it is neither live nor
        available (its liveness record expired: cli/node.go:174-178), and its liveness record
        was last gossiped `after_s` ago at least (updated_at; KWDB's interval is 1 h). A
        gateway restarted moments ago may not know a live node's descriptor yet, but the
        liveness record still shows that node available: such a node is never long gone."""
        return (not self.address_known and not self.is_live and not self.is_available
                and not self.is_decommissioning and self.updated_at is not None
                and now - self.updated_at.timestamp() >= after_s)

    @property
    def healthy(self) -> bool:
        """Available and live: what KaiwuDB calls a healthy node."""
        return self.is_available and self.is_live


@dataclass(frozen=True)
class DecommissionStatus:
    """One row of `node decommission` / `node recommission` output."""

    id: int
    is_live: bool
    replicas: int
    is_decommissioning: bool
    is_draining: bool

    @property
    def drained_of_replicas(self) -> bool:
        """Decommissioning and holding no replicas: the node can be stopped for good."""
        return self.is_decommissioning and self.replicas == 0


UPGRADING_NODES_QUERY = (
    "SELECT node_id FROM kwdb_internal.gossip_liveness WHERE upgrading ORDER BY node_id")
"""kwdb_internal.gossip_liveness (sql/kwdb_internal.go:2995-3064) has the liveness record's
`upgrading` flag, which `node status` shows only folded into is_available (cli/node.go:174)."""


def parse_upgrading_nodes(text: str) -> frozenset[int]:
    """UPGRADING_NODES_QUERY's CSV: header `node_id`, one id per row."""
    try:
        rows = _csv_rows(text)
        if rows and set(rows[0]) != {"node_id"}:
            raise _ParseError(f"expected the column node_id, got {', '.join(rows[0])}")
        return frozenset(_int(row["node_id"], "node_id") for row in rows)
    except _ParseError as err:
        raise ValueError(f"unreadable upgrading nodes: {err}") from None


_BASE_COLUMNS = ("id", "address", "sql_address", "build", "started_at", "updated_at",
                 "locality", "start_mode", "is_available", "is_live")


def parse_node_status(text: str) -> tuple[NodeStatus, ...]:
    """Rows of `kwbase node status --format=csv [--ranges] [--decommission] [--all]`.
    Raises ValueError when a required column is missing or a value does not parse."""
    try:
        rows = _csv_rows(text)
        if rows:
            missing = [c for c in _BASE_COLUMNS if c not in rows[0]]
            if missing:
                raise _ParseError(f"missing columns {', '.join(missing)}")
        return tuple(
            NodeStatus(
                id=_int(row["id"], "id"),
                address=row["address"],
                sql_address=row["sql_address"],
                build=row["build"],
                started_at=_time(row["started_at"]),
                updated_at=_time(row["updated_at"]),
                locality=row["locality"],
                start_mode=row["start_mode"],
                is_available=_bool(row["is_available"], "is_available"),
                is_live=_bool(row["is_live"], "is_live"),
                replicas_leaders=_opt_int(row, "replicas_leaders"),
                replicas_leaseholders=_opt_int(row, "replicas_leaseholders"),
                ranges=_opt_int(row, "ranges"),
                ranges_unavailable=_opt_int(row, "ranges_unavailable"),
                ranges_underreplicated=_opt_int(row, "ranges_underreplicated"),
                live_bytes=_opt_int(row, "live_bytes"),
                key_bytes=_opt_int(row, "key_bytes"),
                value_bytes=_opt_int(row, "value_bytes"),
                intent_bytes=_opt_int(row, "intent_bytes"),
                system_bytes=_opt_int(row, "system_bytes"),
                gossiped_replicas=_opt_int(row, "gossiped_replicas"),
                is_decommissioning=_opt_bool(row, "is_decommissioning"),
                is_draining=_opt_bool(row, "is_draining"),
            )
            for row in rows)
    except _ParseError as err:
        raise ValueError(f"unreadable node status output: {err}") from None


def parse_decommission(text: str) -> tuple[DecommissionStatus, ...]:
    """Rows of `kwbase node decommission|recommission --format=csv` (the table before the
    `No more data reported on target nodes` note)."""
    try:
        return tuple(
            DecommissionStatus(
                id=_int(row["id"], "id"),
                is_live=_bool(row["is_live"], "is_live"),
                replicas=_int(row["replicas"], "replicas"),
                is_decommissioning=_bool(row["is_decommissioning"], "is_decommissioning"),
                is_draining=_bool(row["is_draining"], "is_draining"),
            )
            for row in _csv_rows(text))
    except (_ParseError, KeyError) as err:
        raise ValueError(f"unreadable decommission output: {err}") from None
