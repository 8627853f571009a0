"""The operator as shipped, run by real kubelets (issue 30, items 2 and 3): the image `make
image` builds, loaded into two real nodes' containerd, and the bundle `kaiwu install` prints,
applied whole with Debian's kubectl. Both reconcilers start from the image with in-cluster
configuration and pass their startup, liveness and readiness probes as the kubelet judges them;
the API server reaches the admission webhook through its Service and refuses a bad spec with
the renderer's message; a KaiwuCluster (its KaiwuDB pods on simulated nodes) is brought to Ready
by the reconciler in its pod; when the leader's pod is deleted the other takes over; and when
the leader is killed mid-failover (SIGKILL by containerd, its pod force-deleted so it cannot
come back in place), the other replica takes the Lease once it runs out and finishes the
failover from what the cluster shows: one new store, one decommission (of the lost node id, by
the successor), the cluster Ready. (The certificate rotation through the API server is
test_webhook_rotation_on_node.py's, with lifetimes of seconds for the whole install.)

The test overlay (`tests.world.real_node.on_real_node`) changes only what this machine needs:
host network (the API server listens on 127.0.0.1), the real nodes' taint tolerated, the image
used as loaded, listeners on the pod's own address, and the API server's address for in-cluster
configuration (no kube-proxy turns the `kubernetes` Service's ClusterIP into it). The API
server dials the webhook Service's endpoints (`route_to_endpoints`), for the same reason.

Runs only in the node tier (`make test-node`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos import DecommissionLog, tap_decommissions
from tests.support.waiting import eventually
from tests.world.controlplane import WRITE_VERBS, ControlPlane, ControlPlaneSettings
from tests.world.kube_rest import ApiError, KubeAccess, KubeRest
from tests.world.kubelet import default_nodes
from tests.world.real_node import NODE_TIER, RealNode
from tests.world.real_operator import (
    NODES,
    PODS,
    RECONCILER_USER,
    install,
    kubectl,
    leader,
    real_nodes,
    wait_for_replicas,
)
from tests.world.real_operator import pod_ready as ready
from tests.world.simworld import SimWorld, WorldSettings

pytestmark = NODE_TIER
CLUSTERS = "/apis/kaiwu.inspur.com/v1/namespaces/kaiwu-dev/kaiwuclusters"
REPO = Path(__file__).resolve().parents[3]
NODE_LOST_TIMEOUT_S = 5.0  # the failover story's spec.failover.nodeLostTimeout


@dataclass
class World:
    """The control plane, its two real nodes (the image loaded) and the simulated world:
    four simulated nodes for KaiwuDB (three pods and a spare for a failover)."""

    plane: ControlPlane
    nodes: dict[str, RealNode]
    sim: SimWorld


@pytest.fixture(scope="module")
def world(image_archive: Path) -> Iterator[World]:
    settings = ControlPlaneSettings(crd_paths=(), real_nodes=tuple(n.name for n in NODES),
                                    route_to_endpoints=True)
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(ControlPlane(settings))
        sim = SimWorld(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token),
                       WorldSettings(nodes=default_nodes(4, prefix="sim-node")))
        stack.callback(sim.stop)  # each stops whatever the others' stops did
        sim.start()
        started = time.monotonic()
        nodes = stack.enter_context(real_nodes(plane, image_archive))
        print("\n[timing] " + ", ".join(f"{name} Ready after {node.ready_after_s:.1f} s"
                                        for name, node in nodes.items())
              + f"; both with the image imported: {time.monotonic() - started:.1f} s")
        kubectl(plane, "create", "namespace", "kaiwu-dev")  # where clusters/dev.yaml lives
        yield World(plane, nodes, sim)


@pytest.fixture(scope="module")
def plane(world: World) -> ControlPlane:
    return world.plane


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> KubeRest:
    """The bundle installed (`kaiwu install --kube-version 1.20`, the test overlay, `kubectl
    apply --server-side`) and both reconciler pods Ready on the real nodes."""
    install(plane)
    rest = KubeRest(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token))
    wait_for_replicas(rest, len(NODES), 180)
    return rest


def test_both_replicas_run_from_the_image_on_the_real_nodes_past_their_probes(
        api: KubeRest) -> None:
    pods = api.get(PODS)["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(n.name for n in NODES)
    assert {p["status"]["podIP"] for p in pods} == {n.address for n in NODES}
    for pod in pods:
        [status] = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, status
        assert status["containerID"].startswith("containerd://")


def test_the_api_server_reaches_the_webhook_through_its_service_and_a_bad_spec_is_refused(
        api: KubeRest) -> None:
    bad = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
           "metadata": {"name": "bad", "namespace": "kaiwu-dev"}, "spec": {"replicas": 2}}

    def refusal() -> str | None:
        try:
            api.create(CLUSTERS, bad)
        except ApiError as err:
            return str(err) if err.status == 422 else None
        api.delete(f"{CLUSTERS}/bad")  # admitted: the registration has no CA yet
        return None
    message = eventually(refusal, 60, "the webhook, through its Service, to refuse")
    assert 'admission webhook "kaiwuclusters.kaiwu.inspur.com" denied the request' in message
    assert "spec.replicas: multi-replica needs at least 3 nodes, got 2" in message


def test_a_cluster_is_brought_to_ready_by_the_reconciler_in_its_pod(
        plane: ControlPlane, api: KubeRest) -> None:
    kubectl(plane, "apply", "-f", str(REPO / "clusters" / "dev.yaml"))

    def ready_cluster() -> dict[str, Any] | None:
        found = api.get(f"{CLUSTERS}/dev")
        conditions = (found.get("status") or {}).get("conditions") or ()
        return found if any(c["type"] == "Ready" and c["status"] == "True"
                            for c in conditions) else None
    cluster = eventually(ready_cluster, 180, "the dev cluster Ready")
    kaiwudb = api.get("/api/v1/namespaces/kaiwu-dev/pods")["items"]
    hosts = [p["spec"]["nodeName"] for p in kaiwudb]
    assert len(set(hosts)) == 3 and all(h.startswith("sim-node-") for h in hosts), \
        "KaiwuDB on the simulated nodes, one pod each"
    assert cluster["status"]["initialized"] is True


def test_the_leaders_pod_deleted_the_other_takes_over(api: KubeRest) -> None:
    names = {p["metadata"]["name"] for p in api.get(PODS)["items"]}
    deleted = eventually(lambda: leader(api) in names and leader(api), 60, "one pod to lead")
    api.delete(f"{PODS}/{deleted}")
    (standby,) = names - {deleted}
    eventually(lambda: leader(api) == standby, 90, "the standby to take over the Lease")
    eventually(lambda: len([p for p in api.get(PODS)["items"]
                            if ready(p) and p["metadata"]["name"] != deleted]) == 2, 180,
               "a new pod Ready in the deleted one's place")


def test_the_leaders_pod_killed_mid_failover_the_other_finishes_it(
        world: World, api: KubeRest) -> None:
    """A simulated node under `dev` is lost; once the leader has force-deleted the pod there
    (its Event says so: the failover has begun), the leader's container is SIGKILLed by its
    real node's containerd, so it neither finishes its pass nor releases the Lease, and its pod
    is force-deleted so no kubelet restarts it in place. The other replica takes the Lease
    when it runs out and carries the failover on from what the cluster shows: one new store,
    the lost KaiwuDB node decommissioned once, the cluster Ready."""
    namespace, events = "kaiwu-dev", "/api/v1/namespaces/kaiwu-dev/events"
    kaiwudb_pods = f"/api/v1/namespaces/{namespace}/pods"
    api.patch(f"{CLUSTERS}/dev", {"spec": {"failover": {
        "nodeLostTimeout": f"{NODE_LOST_TIMEOUT_S:g}s", "replaceLostVolumes": True}}})
    key = (namespace, "dev")
    eventually(lambda: world.sim.kwdb.replication(key, world.sim.clock.now())
               .underreplicated == 0, 60, "three copies of every range")
    before = live_nodes(api.get(f"{CLUSTERS}/dev"))
    victim, others = "dev-1", ("dev-0", "dev-2")
    old = api.get(f"{kaiwudb_pods}/{victim}")
    lost_node = old["spec"]["nodeName"]
    uids = {name: api.get(f"{kaiwudb_pods}/{name}")["metadata"]["uid"] for name in others}
    replicas = {p["metadata"]["name"] for p in api.get(PODS)["items"]}

    decommissions = DecommissionLog()  # what the simulated KaiwuDB is told, when
    tap_decommissions(world.sim, decommissions)

    def started_failover() -> bool:
        return any(e["involvedObject"].get("name") == "dev" for e in api.get(
            events, {"fieldSelector": "reason=PodForceDeleted"})["items"])
    lost_at = time.monotonic()
    world.sim.faults.lose_node(lost_node)
    try:
        eventually(started_failover, NODE_LOST_TIMEOUT_S + 90, "the failover to begin",
                   interval=0.05)
        began = time.monotonic() - lost_at
        killed = leader(api)
        assert killed in replicas, (killed, replicas)
        pod = api.get(f"{PODS}/{killed}")
        [status] = pod["status"]["containerStatuses"]
        node = world.nodes[pod["spec"]["nodeName"]]
        killed_at = time.monotonic()
        killed_wall = time.time()
        node.ctr("tasks", "kill", "-s", "SIGKILL",
                 status["containerID"].removeprefix("containerd://"))
        api.delete(f"{PODS}/{killed}", {"gracePeriodSeconds": 0})

        successor = eventually(lambda: leader(api) not in ("", killed) and leader(api), 60,
                               "another replica to take the Lease")
        took_over = time.monotonic() - killed_at

        def finished() -> dict[str, Any] | None:
            found = api.get(f"{CLUSTERS}/dev")
            st = found.get("status") or {}
            fresh = live_nodes(found).get(victim) not in (None, before[victim])
            return found if fresh and "failures" not in st and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in st.get("conditions") or ()) else None
        cluster = eventually(finished, 180, "the cluster Ready with a new store for dev-1")
        print(f"\n[timing] node lost -> failover begun: {began:.1f} s; leader {killed} killed "
              f"-> {successor} leads: {took_over:.1f} s; killed -> Ready: "
              f"{time.monotonic() - killed_at:.1f} s")
    finally:
        world.sim.faults.heal()

    # The standby, or the Deployment's replacement for the killed pod if it starts and asks
    # first once the Lease has run out: either way another identity than the killed one.
    assert successor != killed and successor in {
        p["metadata"]["name"] for p in api.get(PODS)["items"]}, (successor, killed, replicas)
    assert api.get_or_none(f"{PODS}/{killed}") is None
    after = live_nodes(cluster)
    assert {n: after[n] for n in others} == {n: before[n] for n in others}
    new = api.get(f"{kaiwudb_pods}/{victim}")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["nodeName"] != lost_node
    assert {n: api.get(f"{kaiwudb_pods}/{n}")["metadata"]["uid"] for n in others} == uids
    # What both pods wrote (one ServiceAccount): one claim given up, every delete found its
    # object.
    writes = world.plane.audit_events(user=RECONCILER_USER, verbs=WRITE_VERBS)
    deletes = [w for w in writes if w["verb"] == "delete"
               and w["objectRef"].get("namespace") == namespace]
    assert all(w["responseStatus"]["code"] < 300 for w in deletes), [
        (w["requestURI"], w["responseStatus"]) for w in deletes]
    targets = [(w["objectRef"]["resource"], w["objectRef"]["name"]) for w in deletes]
    assert targets.count(("persistentvolumeclaims", f"data-{victim}")) == 1, targets
    assert set(targets) <= {("pods", victim), ("persistentvolumeclaims", f"data-{victim}")}
    # KaiwuDB's view: one `kwbase node decommission`, of the lost store's id (not live then),
    # sent by the successor after the kill; that id alone is decommissioned, and not live.
    [told] = decommissions.since(0)
    assert told.node_ids == (before[victim],) and not told.live[before[victim]], told
    assert told.at > killed_wall, "the successor decommissioned, after the kill"
    views = world.sim.kwdb.nodes(key, world.sim.clock.now())
    assert [v.node_id for v in views if v.decommissioning] == [before[victim]]
    assert not any(v.is_live for v in views if v.node_id == before[victim])


def live_nodes(cluster: dict[str, Any]) -> dict[str, int]:
    """pod -> KaiwuDB node id of every live node in the cluster's status."""
    return {e["pod"]: e["nodeId"] for e in (cluster.get("status") or {}).get("nodes") or ()
            if e.get("state") == "live"}
