"""Watch caches and the work queue against a real API server: storms, restarts, lost history.

Stories: a user (or a script gone wild) edits one cluster fifty times in a row and the reconciler
reconciles it a handful of times, the last time with the final state, while the quiet cluster
next to it is left alone; the API server restarts and the reconciler carries on, seeing what
changed after; a watch whose history the server no longer has (410 Gone) relists and misses
nothing. A stand-in controller records what each reconcile saw.
"""

from __future__ import annotations

import itertools
import math
import time

from kubernetes import client as k8s

from reconciler.keys import ClusterKey
from reconciler.kube.cache import Caches
from reconciler.kube.client import Kube
from reconciler.kube.informer import Informer
from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.metrics import Metrics
from reconciler.runtime.process import api_client_for
from tests.support.runtime import (
    annotate_cluster,
    controller_of,
    create_cluster,
    running,
    runtime_settings,
)
from tests.support.waiting import eventually
from tests.world.controlplane import ControlPlane


def test_an_event_storm_costs_a_bounded_number_of_reconciles_per_cluster(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    settings = runtime_settings(control_plane, namespace)  # the default token buckets
    with running(settings) as runtime:
        controller = controller_of(runtime)
        create_cluster(kube, namespace, "stormy")
        create_cluster(kube, namespace, "calm")
        eventually(lambda: controller.calls("stormy") and controller.calls("calm"), 20,
                   "the first reconcile of both clusters")
        time.sleep(settings.cluster_burst / settings.cluster_rate_per_s)  # quiet: bucket full
        before = len(controller.calls("stormy"))

        started = time.monotonic()
        for edit in range(50):
            annotate_cluster(kube, namespace, "stormy", "example.com/edit", str(edit))
        storm_s = time.monotonic() - started

        last = eventually(
            lambda: next((s for s in reversed(controller.calls("stormy"))
                          if s.annotations.get("example.com/edit") == "49"), None),
            15, "a reconcile that sees the last edit")
        # Quiet for longer than a token takes: nothing more is coming.
        time.sleep(2 / settings.cluster_rate_per_s)
        during = len(controller.calls("stormy")) - before

    print(f"\n50 edits in {storm_s:.2f} s -> {during} reconciles of the edited cluster; "
          f"last edit seen {last.at - started - storm_s:+.2f} s after the storm ended")
    # The bucket's burst at once, one per token earned during the storm, and the one that
    # serves the events that waited for the last token.
    bound = settings.cluster_burst + math.ceil(storm_s * settings.cluster_rate_per_s) + 1
    assert 1 <= during <= bound, f"{during} reconciles for 50 edits in {storm_s:.2f} s"
    assert len(controller.calls("calm")) == 1, "the untouched cluster is not reconciled again"


def test_after_an_apiserver_restart_the_reconciler_sees_what_changed_after_it(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    settings = runtime_settings(control_plane, namespace)
    with running(settings) as runtime:
        controller = controller_of(runtime)
        create_cluster(kube, namespace, "before")
        eventually(lambda: controller.calls("before"), 20, "the first reconcile")

        down = time.monotonic()
        control_plane.restart_apiserver()
        restarted_s = time.monotonic() - down
        annotate_cluster(kube, namespace, "before", "example.com/after-restart", "yes")
        create_cluster(kube, namespace, "after")

        eventually(lambda: any(s.annotations.get("example.com/after-restart") == "yes"
                               for s in controller.calls("before")), 30,
                   "a reconcile seeing the edit made after the restart")
        eventually(lambda: controller.calls("after"), 30,
                   "a reconcile of the cluster created after the restart")
        recovered_s = time.monotonic() - down
        eventually(runtime.is_leader, 10, "leadership held again after the outage")
        # The outage outlasted the renew deadline: the leader stepped down, then led again.
        transitions = runtime.metrics.value("kaiwu_leader_transitions_total")
        restarts = {reason: runtime.metrics.value(
            "kaiwu_watch_restarts_total", {"kind": "KaiwuCluster", "reason": reason})
            for reason in ("gone", "disconnected", "expired")}

    print(f"\napiserver down and up in {restarted_s:.1f} s; changes after it reconciled "
          f"{recovered_s:.1f} s after the restart began; KaiwuCluster watch restarts "
          f"{restarts}")
    assert sum(restarts.values()) >= 1, "the watch noticed the server going away"
    if restarted_s > settings.renew_deadline_s:
        assert transitions >= 2, "stepped down when it could not renew, led again after"


def test_a_watch_whose_history_is_gone_relists_and_misses_nothing(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    settings = runtime_settings(control_plane, namespace)
    queued: list[ClusterKey] = []
    caches = Caches(Kube(api_client_for(settings), settings.field_manager), settings, Metrics(),
                    on_key=queued.append)
    caches.start()
    try:
        assert caches.wait_synced(20), f"caches not synced: {caches.unsynced()}"
        create_cluster(kube, namespace, "kept")
        create_cluster(kube, namespace, "dropped")
        eventually(lambda: caches.get(KAIWU_CLUSTER, namespace, "dropped"), 10, "the clusters")
        informer = caches.informers[KAIWU_CLUSTER]
        version_before = informer.resource_version

        # Any write moves the store's revision past the last KaiwuCluster event we saw; a
        # restarted API server's watch cache starts at the current revision, so resuming
        # from ours is answered with 410 Gone.
        k8s.CoreV1Api(kube).create_namespaced_config_map(namespace, k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(name="moves-the-revision")))
        control_plane.restart_apiserver()
        restarted = time.monotonic()
        queued.clear()
        annotate_cluster(kube, namespace, "kept", "example.com/while-relisting", "seen")
        k8s.CustomObjectsApi(kube).delete_namespaced_custom_object(
            "kaiwu.inspur.com", "v1", namespace, "kaiwuclusters", "dropped")

        eventually(lambda: ((caches.get(KAIWU_CLUSTER, namespace, "kept") or {})
                            .get("metadata", {}).get("annotations", {})
                            .get("example.com/while-relisting")), 30,
                   "the cache to see the edit made after the history was lost")
        recovered_s = time.monotonic() - restarted
        assert informer.relists >= 1, "the informer relisted after 410 Gone"
        assert informer.resource_version != version_before
        eventually(lambda: caches.get(KAIWU_CLUSTER, namespace, "dropped") is None, 5,
                   "the deletion to be seen too")
        eventually(lambda: {ClusterKey(namespace, "kept"), ClusterKey(namespace, "dropped")}
                   <= set(queued), 5, "both changes to be queued for reconcile")
    finally:
        caches.stop()
    print(f"\n410 Gone -> relisted {informer.relists}x, edit seen {recovered_s:.2f} s after "
          f"the restart")


def test_the_periodic_resync_reconciles_every_cluster_without_any_event(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    settings = runtime_settings(control_plane, namespace, resync_period_s=1.0,
                                cluster_burst=100)
    with running(settings) as runtime:
        controller = controller_of(runtime)
        create_cluster(kube, namespace, "quiet")
        eventually(lambda: len(controller.calls("quiet")) >= 3, 10,
                   "reconciles of an unchanged cluster by the resync")
        times = [s.at for s in controller.calls("quiet")]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap > 0.5 for gap in gaps[1:]), f"one per resync period, not a loop: {gaps}"


def test_a_stopped_informer_lets_go_of_its_watch_at_once(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    # A runtime that loses leadership or shuts down stops its caches; a watch blocked in a read
    # must not keep a thread (and a connection to the API server) until the server's timeout.
    settings = runtime_settings(control_plane, namespace, watch_timeout_s=300)
    informer = Informer(Kube(api_client_for(settings), "test"), KAIWU_CLUSTER, settings,
                        namespace=namespace)
    informer.start()
    assert informer.wait_synced(10)
    time.sleep(0.5)  # the watch request is now blocked waiting for events
    started = time.monotonic()
    informer.stop()
    eventually(lambda: not informer.alive or None, 5, "the informer's thread to end")
    print(f"informer thread ended {time.monotonic() - started:.2f} s after stop")
