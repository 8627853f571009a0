"""High availability: two replicas, one Lease, only the leader's workers reconcile.

Stories: a second replica starts next to a running one and waits as a warm standby (its caches
synced, its workers idle); when the leader shuts down it hands over at once instead of letting
the Lease expire; when someone else takes the Lease from a leader, the leader stops writing
immediately. A stand-in controller records which replica reconciled what.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.kube.leader import NotLeaderError
from reconciler.runtime.process import Runtime
from tests.support.runtime import (
    RecordingController,
    annotate_cluster,
    controller_of,
    create_cluster,
    lease_holder,
    runtime_settings,
)
from tests.support.waiting import eventually
from tests.world.controlplane import ControlPlane


def test_two_replicas_at_once_only_the_leaders_workers_run(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    first = Runtime(runtime_settings(control_plane, namespace, identity="replica-a"),
                    controller_factory=RecordingController)
    second = Runtime(runtime_settings(control_plane, namespace, identity="replica-b"),
                     controller_factory=RecordingController)
    first.start()
    try:
        eventually(first.is_leader, 10, "the first replica to lead")
        second.start()
        eventually(lambda: second.ready()[0], 20, "the second replica's caches to sync")

        create_cluster(kube, namespace, "one")
        create_cluster(kube, namespace, "two")
        annotate_cluster(kube, namespace, "one", "example.com/touched", "yes")
        eventually(lambda: controller_of(first).calls("two"), 10, "the leader to reconcile")
        eventually(lambda: any(s.annotations.get("example.com/touched")
                               for s in controller_of(first).calls("one")), 10,
                   "the leader to see the edit")
        # The standby saw the same events in its caches...
        assert second.caches.get(KAIWU_CLUSTER, namespace, "two") is not None
        # ...and did nothing with them.
        time.sleep(1.0)
        assert controller_of(second).calls() == []
        assert not second.is_leader()
        assert lease_holder(kube, namespace) == "replica-a"
        assert first.metrics.value("kaiwu_leader") == 1
        assert second.metrics.value("kaiwu_leader") == 0
        assert "leader: no, standby (lease held by replica-a)" in second.ready()[1]
    finally:
        second.stop()
        first.stop()


def test_a_leader_that_stops_hands_over_to_the_standby_at_once(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    # A long lease: without the hand-over the standby would wait 15 s for it to expire.
    timing = {"lease_duration_s": 15.0, "renew_deadline_s": 10.0, "retry_period_s": 0.5}
    leader = Runtime(runtime_settings(control_plane, namespace, identity="old-leader",
                                      **timing), controller_factory=RecordingController)
    standby = Runtime(runtime_settings(control_plane, namespace, identity="standby",
                                       **timing), controller_factory=RecordingController)
    leader.start()
    try:
        eventually(leader.is_leader, 10, "the first replica to lead")
        standby.start()
        eventually(lambda: standby.ready()[0], 20, "the standby's caches to sync")
        create_cluster(kube, namespace, "orders")
        eventually(lambda: controller_of(leader).calls("orders"), 10, "the leader's reconcile")

        stopping = time.monotonic()
        leader.stop()
        stopped_s = time.monotonic() - stopping
        eventually(standby.is_leader, 5, "the standby to take over", interval=0.02)
        assert standby.elector is not None and standby.elector.became_leader_at is not None
        handover_s = standby.elector.became_leader_at - stopping
        eventually(lambda: controller_of(standby).calls("orders"), 10,
                   "the new leader to reconcile every cluster")
        first_reconcile_s = controller_of(standby).calls("orders")[0].at - stopping
    finally:
        standby.stop()
        leader.stop()

    print(f"\nhand-over: standby leading {handover_s:.2f} s after the leader began to stop "
          f"(its stop took {stopped_s:.2f} s), first reconcile after "
          f"{first_reconcile_s:.2f} s (lease duration {timing['lease_duration_s']:.0f} s)")
    assert handover_s < timing["lease_duration_s"] / 3, "released, not expired"
    assert lease_holder(kube, namespace) == "", "the last replica released the lease too"


def test_a_leader_whose_lease_is_taken_stops_writing_at_once(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    settings = runtime_settings(control_plane, namespace, identity="deposed")
    runtime = Runtime(settings, controller_factory=RecordingController)
    runtime.start()
    try:
        eventually(runtime.is_leader, 10, "leadership")
        create_cluster(kube, namespace, "ledger")
        eventually(lambda: controller_of(runtime).calls("ledger"), 10, "a reconcile")

        # Another party takes the Lease over (as a replica on the far side of a partition
        # would once it expired).
        coordination = k8s.CoordinationV1Api(kube)
        lease = coordination.read_namespaced_lease(settings.lease_name, namespace)
        assert lease.spec is not None
        lease.spec.holder_identity = "usurper"
        coordination.replace_namespaced_lease(settings.lease_name, namespace, lease)
        taken = time.monotonic()

        eventually(lambda: not runtime.is_leader(), 5, "the leader to step down",
                   interval=0.02)
        stepped_down_s = time.monotonic() - taken
        with pytest.raises(NotLeaderError):
            runtime.kube.patch(KAIWU_CLUSTER, namespace, "ledger",
                               {"metadata": {"annotations": {"example.com/late": "write"}}})
        calls = len(controller_of(runtime).calls())
        annotate_cluster(kube, namespace, "ledger", "example.com/after", "deposed")
        time.sleep(1.0)
        assert len(controller_of(runtime).calls()) == calls, "no reconcile while deposed"

        # The usurper never renews: once its Lease expires, the old leader takes over again.
        eventually(runtime.is_leader, settings.lease_duration_s + 5, "leadership regained")
        eventually(lambda: any(s.annotations.get("example.com/after") == "deposed"
                               for s in controller_of(runtime).calls("ledger")), 10,
                   "the change made meanwhile to be reconciled")
    finally:
        runtime.stop()
    print(f"\nlease taken -> stopped leading after {stepped_down_s:.2f} s "
          f"(retry period {settings.retry_period_s} s)")
    assert stepped_down_s <= settings.retry_period_s + 1.0
