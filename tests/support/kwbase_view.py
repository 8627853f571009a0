"""What `kwbase node status` shows of a simulated KaiwuDB's nodes, for the fast tier's fake
kwbase adapters (tests/unit/reconciler/kaiwudb/): without `--decommission` (or `--all`) kwbase
hides a decommissioned node that is not live and prints no `is_decommissioning` column, which
the parser reads as False (reconciler.kaiwudb.kwbase.nodes.parse_node_status). A fake that showed
everything either way would let code that forgets the flag pass its tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from reconciler.kaiwudb.kwbase.nodes import NodeStatus


def node_status_shows(nodes: Iterable[NodeStatus], *, decommission: bool) -> tuple[NodeStatus, ...]:
    """The rows `kwbase node status [--decommission]` prints for these nodes."""
    if decommission:
        return tuple(nodes)
    return tuple(dataclasses.replace(node, is_decommissioning=False) for node in nodes
                 if node.is_live or not node.is_decommissioning)
