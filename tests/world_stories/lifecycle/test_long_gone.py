"""Story: a KaiwuDB node that ran once and is long gone no longer holds the cluster back.

KWDB forgets a node's descriptor two hours after the node last gossiped it (hourly while it runs:
kwbase/pkg/gossip/gossip.go:133-140), and `kwbase node status` then prints NULL for its address
(cli/node.go:165-179). No pod can be paired with such a node id, so neither store replacement nor
stray removal would ever retire it; as a node that is not live it would keep the cluster
un-Ready and hold every scale-in, rollout and failover for ever. The reconciler decommissions it
once KaiwuDB shows it not live, not available, without an address and with a liveness record an
hour old (`long_gone_after_s`). Here the hours are tuned down to seconds on both sides: the
simulated KaiwuDB's descriptor interval and TTL, and the reconciler's setting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import (
    NAME,
    bring_up,
    lifecycle_count,
    report,
    small_cluster,
    status,
)
from tests.world.pod_runtime import rendered_argv
from tests.world.simworld import SimWorld

DESCRIPTOR_INTERVAL_S = 2.0
DESCRIPTOR_TTL_S = 4.0
LONG_GONE_AFTER_S = 3.0


def test_a_node_kaiwudb_forgot_the_address_of_is_decommissioned_and_the_cluster_is_ready(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    key = (namespace, NAME)
    reconciler, _, took = bring_up(
        # A steady cluster is looked at on each resync and probed every node_probe_every_s
        # (5 and 300 minutes by default): shortened so the node no pod runs shows in seconds.
        lambda: reconciler_factory(long_gone_after_s=LONG_GONE_AFTER_S, node_probe_every_s=1.0,
                                   resync_period_s=1.0),
        kube, namespace,
        small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    sim_world.kwdb.tune(key, sim_world.clock.now(),
                        node_descriptor_interval_s=DESCRIPTOR_INTERVAL_S,
                        node_descriptor_ttl_s=DESCRIPTOR_TTL_S)

    # A node no pod of the StatefulSet runs (someone started one by hand, long ago) joins,
    # then stops for good.
    sts = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert sts is not None
    command = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    argv = rendered_argv(command, "ghost")
    started = sim_world.kwdb.start_process(key, "ghost", "claim-ghost", argv,
                                           sim_world.clock.now(), image="kwdb/kwdb:3.2.1")
    assert started.ok, started.stderr
    ghost = wait_for("the hand-started node to join", lambda: next(
        (n for n in sim_world.kwdb.nodes(key, sim_world.clock.now())
         if n.pod_name == "ghost" and n.is_live), None), 20, 0.1)
    sim_world.kwdb.stop_process(key, "ghost", sim_world.clock.now(), graceful=False)
    stopped = time.monotonic()
    wait_for("the cluster to list the stopped node as not live", lambda: any(
        e["nodeId"] == ghost.node_id and e["state"] == "not-live"
        for e in status(reconciler).get("nodes") or ()), 30, 0.1)
    assert condition(reconciler.cluster(NAME), "Ready").get("status") != "True"

    def ready_again() -> bool:
        return condition(reconciler.cluster(NAME), "Ready").get("status") == "True"
    wait_for("the long-gone node to be decommissioned and the cluster Ready",
             ready_again, DESCRIPTOR_TTL_S + LONG_GONE_AFTER_S + 30, 0.1)
    report("node stopped -> decommissioned, cluster Ready", time.monotonic() - stopped)

    assert lifecycle_count(reconciler, "decommission-long-gone-node") == 1
    actions = [a["action"] for a in status(reconciler).get("lastActions") or ()]
    assert "LongGoneNodeDecommissioned" in actions
    views = {n.node_id: n for n in sim_world.kwdb.nodes(key, sim_world.clock.now())}
    assert views[ghost.node_id].decommissioning and not views[ghost.node_id].is_live
    assert sum(v.is_live and not v.decommissioning for v in views.values()) == 3
    assert ghost.node_id not in {e["nodeId"] for e in status(reconciler).get("nodes") or ()}
