"""Story: a user upgrades KaiwuDB by changing spec.version; the pods roll one at a time.

The StatefulSet's partition keeps every pod on the old image until the reconciler lets the next
one go: the highest ordinal first, each only once the pods already moved are Ready on the new
revision, every KaiwuDB node is live and no range is under-replicated. The user sees the cluster
Upgrading, then Ready on the new version with the same KaiwuDB node ids (stores survive the
restart), and at no moment were two nodes down. Each pod moves as KWDB upgrades a node
(kaiwudb_install/utils/kaiwudb_upgrade.sh): its node is marked UPGRADING (`kwbase node upgrade`)
before the pod goes, and the new pod starts with --upgrade-complete, which clears the mark; the
simulated KaiwuDB refuses a second mark while one stands, so one node at most is ever marked.
Timings are printed (pytest -s).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from renderer.schema import apply_defaults
from renderer.spec import Cluster
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import (
    NAME,
    bring_up,
    lifecycle_count,
    live_nodes,
    report,
    small_cluster,
)
from tests.world.simworld import SimWorld


def pods(kube: k8s.ApiClient, namespace: str) -> list[Obj]:
    items, _ = Kube(kube, "test").list_objects(kk.POD, namespace,
                                               f"app.kubernetes.io/instance={NAME}")
    return items


def image(pod: Obj) -> str:
    return str(pod["spec"]["containers"][0]["image"])


def ready(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ())


def test_a_version_change_rolls_one_pod_at_a_time_gated_on_kaiwudb_health(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes on 3.2.1)", took)
    nodes = live_nodes(obj)

    started = time.monotonic()
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"version": "3.2.2"}})
    fewest_ready = 3
    order: list[str] = []
    marked: set[int] = set()
    most_marked = 0

    def upgraded() -> Obj | None:
        nonlocal fewest_ready, most_marked
        now_marked = {n.node_id for n in sim_world.kwdb.nodes((namespace, NAME),
                                                              sim_world.clock.now())
                      if n.liveness == "UPGRADING"}
        marked.update(now_marked)
        most_marked = max(most_marked, len(now_marked))
        current = pods(kube, namespace)
        fewest_ready = min(fewest_ready, sum(ready(pod) for pod in current))
        for pod in current:
            name = pod["metadata"]["name"]
            if image(pod).endswith(":3.2.2") and name not in order:
                order.append(name)
        found = reconciler.cluster(NAME)
        done = len(current) == 3 and all(
            image(pod).endswith(":3.2.2") and ready(pod) for pod in current)
        flags = Kube(kube, "test").get(kk.CONFIG_MAP, namespace, f"{NAME}-start-flags")
        return found if done and condition(found, "Ready").get("status") == "True" and (
            found or {}).get("status", {}).get("version") == "3.2.2" and not now_marked and (
            (flags or {}).get("data") or {}).get("upgrade-complete") == "false" else None
    obj = wait_for("every pod Ready on 3.2.2, no node UPGRADING and the cluster Ready",
                   upgraded, 150, 0.1)  # each move waits for metrics 20 s past the last
    report("version 3.2.1 -> 3.2.2: rolled and Ready", time.monotonic() - started)

    assert order == [f"{NAME}-2", f"{NAME}-1", f"{NAME}-0"], "highest ordinal first"
    assert fewest_ready >= 2, "never two pods down at once"
    assert live_nodes(obj) == nodes, "stores survive the restart: the same node ids"
    assert lifecycle_count(reconciler, "upgrade-step") == 3
    assert lifecycle_count(reconciler, "node-upgrade") == 3, "KWDB's node upgrade, each node"
    assert marked == set(nodes.values()), "every node was marked, one after another"
    assert most_marked <= 1, "never two nodes UPGRADING"
    sts = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert sts is not None
    assert sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 3, \
        "the gate is closed again for the next change"


def test_each_restarted_node_catches_up_on_raft_snapshots_before_the_next_pod_goes(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    """KWDB's range metrics call every range fully replicated as soon as a restarted node is
    live again (calcRangeCounter reads liveness only), but each of its replicas whose raft log
    was truncated while it was away needs a raft snapshot before it can acknowledge a write
    (kv/kvserver/raft_log_queue.go:442-478). Restarting the next node before they are applied
    leaves ranges with one replica of three able to acknowledge writes. Here every absence
    truncates the logs and snapshots are slow (big ranges, 40 s a node): the upgrade waits on
    KWDB's raft snapshot gauges, and no range ever loses its quorum."""
    reconciler, _, _ = bring_up(reconciler_factory, kube, namespace, small_cluster(namespace))
    key = (namespace, NAME)
    sim_world.kwdb.tune(key, sim_world.clock.now(), follower_inactive_s=0.0,
                        recovery_snapshot_rate_per_s=1.0)

    started = time.monotonic()
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"version": "3.2.2"}})
    most_unavailable = 0
    said: set[str] = set()

    def upgraded() -> Obj | None:
        nonlocal most_unavailable
        truth = sim_world.kwdb.replication(key, sim_world.clock.now())
        most_unavailable = max(most_unavailable, truth.unavailable)
        found = reconciler.cluster(NAME)
        said.update(str(c.get("message") or "")
                    for c in ((found or {}).get("status") or {}).get("conditions") or ())
        current = pods(kube, namespace)
        done = len(current) == 3 and all(
            image(pod).endswith(":3.2.2") and ready(pod) for pod in current)
        return found if done and condition(found, "Ready").get("status") == "True" and (
            found or {}).get("status", {}).get("version") == "3.2.2" else None
    wait_for("every pod Ready on 3.2.2 and the cluster Ready", upgraded, 300, 0.1)
    report("version 3.2.1 -> 3.2.2 with slow raft catch-up", time.monotonic() - started)

    assert most_unavailable == 0, "a range lost its quorum: a pod went before the last caught up"
    assert any("raft snapshot" in message for message in said), \
        "the status said what the upgrade waited for"


def test_a_downgrade_is_refused_and_no_pod_moves(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, _, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace))
    report("apply -> Ready (3 nodes on 3.2.1)", took)
    uids = sorted(pod["metadata"]["uid"] for pod in pods(kube, namespace))

    started = time.monotonic()
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"version": "3.2.0"}})
    stalled = wait_for("the downgrade to be refused", lambda: (c := condition(
        reconciler.cluster(NAME), "Stalled")).get("status") == "True" and c, 30, 0.1)
    report("version 3.2.1 -> 3.2.0: refused", time.monotonic() - started)
    # Refused as the admission webhook refuses it, before any step acts (the rollout's own
    # check against the pods' versions is the second guard).
    assert stalled["reason"] == "InvalidSpec"
    assert "spec.version: the version cannot go back (3.2.1 -> 3.2.0): KaiwuDB cannot be " \
        "downgraded (keep 3.2.1 or later)" in stalled["message"]
    time.sleep(2.0)  # passes go by: still nothing moves
    current = pods(kube, namespace)
    assert sorted(pod["metadata"]["uid"] for pod in current) == uids
    assert all(image(pod).endswith(":3.2.1") and ready(pod) for pod in current)
    assert lifecycle_count(reconciler, "upgrade-step") == 0

    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"version": "3.2.1"}})
    wait_for("Ready and no longer Stalled", lambda: (
        found := reconciler.cluster(NAME)) and condition(found, "Ready").get(
        "status") == "True" and condition(found, "Stalled").get("status") == "False", 30, 0.1)
    assert sorted(pod["metadata"]["uid"] for pod in pods(kube, namespace)) == uids


def test_a_node_an_administrator_marked_upgrading_is_restarted_to_end_the_mark(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    """Someone runs KWDB's first upgrade move by hand (`kwbase node upgrade 2`) and stops
    there. KWDB now refuses every decommission (server/server.go:2764-2777): the scale-in the
    user asks for waits, saying why, instead of failing. The reconciler ends the mark as KWDB's
    own script does, by a start with --upgrade-complete: the pod restarts once, the mark is
    gone, and the scale-in goes on."""
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace, replicas=4))
    report("apply -> Ready (4 nodes)", took)
    node_of = live_nodes(obj)
    cluster = Cluster.from_object(apply_defaults(small_cluster(namespace, replicas=4)))
    admin = KwbaseAdmin.for_cluster(Kube(kube, "test"), cluster)
    marked_pod = f"{NAME}-1"
    admin.upgrade(f"{NAME}-0", node_of[marked_pod])
    uid = next(p["metadata"]["uid"] for p in pods(kube, namespace)
               if p["metadata"]["name"] == marked_pod)

    started = time.monotonic()
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"replicas": 3}})

    def marked() -> bool:
        return any(n.liveness == "UPGRADING" for n in sim_world.kwdb.nodes(
            (namespace, NAME), sim_world.clock.now()))

    waiting = wait_for("the cluster to say a node is UPGRADING", lambda: (
        c := condition(reconciler.cluster(NAME), "Ready")).get("message") and "UPGRADING" in
        c["message"] and c, 30, 0.1)
    assert marked(), "the mark stands until the pod has been Ready a while"
    report("the UPGRADING node named in Ready", time.monotonic() - started)
    assert waiting["status"] == "False"

    def scaled_in() -> Obj | None:
        found = reconciler.cluster(NAME)
        current = pods(kube, namespace)
        return found if len(current) == 3 and condition(found, "Ready").get(
            "status") == "True" and not marked() else None
    obj = wait_for("the mark gone and the scale-in done", scaled_in, 90, 0.2)
    report("mark ended by a restart, then 4 -> 3", time.monotonic() - started)
    restarted = next(p for p in pods(kube, namespace) if p["metadata"]["name"] == marked_pod)
    assert restarted["metadata"]["uid"] != uid, "the marked node's pod was restarted"
    assert lifecycle_count(reconciler, "upgrade-complete-restart") == 1
    assert live_nodes(obj)[marked_pod] == node_of[marked_pod], "its store survived"
    assert f"{NAME}-3" not in live_nodes(obj)
