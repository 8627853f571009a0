"""Simulated KaiwuDB for the test world: answers `kwbase` inside simulated pods.

The simulated kubelet (tests/world/kubelet.py) calls `KwdbWorld` when a kwbase container starts
or stops, when a host or volume is lost, for the `/health` probes and for every exec; tests call
it to look inside. One `KwdbWorld` holds every deployment, keyed by (namespace, StatefulSet).

Modules: settings (KwdbSettings), model (liveness, ranges, healing), state (stores, processes,
name lookup, result types), flags (the kwbase command tree and flag parsing), client
(connections and their errors), commands (init, node *, quit, version), sql (`kwbase sql -e`),
render (output formats and error text), world (the facade).

What is modelled and what is not is written at the top of each module; in short: node ids,
start modes, init, liveness, draining, decommissioning, replicas and their healing over
simulated time, and the CLI's real formats and messages for the commands the operator uses.
Not modelled: SQL beyond the health and jobs queries, certificates' contents, data sizes,
time-series engine specifics.
"""

from tests.world.kwdb.commands import NO_MORE_DATA
from tests.world.kwdb.model import (
    MODE_MULTI,
    MODE_SINGLE_NODE,
    MODE_SINGLE_REPLICA,
    START_MODES,
)
from tests.world.kwdb.settings import KwdbSettings
from tests.world.kwdb.sql import (
    REPLICATION_HEALTH_QUERY,
    RUNNING_JOB_TYPES_QUERY,
    RUNNING_JOBS_QUERY,
)
from tests.world.kwdb.state import (
    DRAIN_BEGUN,
    DRAIN_DONE,
    ClusterKey,
    ExecResult,
    ProcessExit,
    StartResult,
)
from tests.world.kwdb.world import KwdbWorld, NodeView, ReplicationView

__all__ = [
    "DRAIN_BEGUN",
    "DRAIN_DONE",
    "MODE_MULTI",
    "MODE_SINGLE_NODE",
    "MODE_SINGLE_REPLICA",
    "NO_MORE_DATA",
    "REPLICATION_HEALTH_QUERY",
    "RUNNING_JOBS_QUERY",
    "RUNNING_JOB_TYPES_QUERY",
    "START_MODES",
    "ClusterKey",
    "ExecResult",
    "KwdbSettings",
    "KwdbWorld",
    "NodeView",
    "ProcessExit",
    "ReplicationView",
    "StartResult",
]
