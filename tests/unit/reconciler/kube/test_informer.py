"""Stories of one watch cache's list+watch loop (reconciler.kube.informer.Informer) and of how the
caches turn events into clusters to reconcile (Caches._on_event): where a watch resumes, what a
relist after 410 Gone delivers, how an unreachable API server is retried, a kind the server does
not serve, and which events cost a reconcile, which are echoes and which are nothing.

The informer runs over the fast tier's fake API (tests/support/informing.py: what happens on the
server between two watches is each story's `meanwhile`; back-off waits are recorded, not slept).
The same caches against the real apiserver: tests/world_stories/runtime/test_caches.py.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.cache import Caches, Echoes
from reconciler.kube.client import ApiError
from reconciler.kube.echo import OwnWrites
from reconciler.kube.kinds import Kind, slim
from reconciler.kube.store import cluster_of
from reconciler.metrics import NAMESPACE, Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer.builders import INSTANCE_LABEL, MANAGED_SELECTOR
from tests.support.caches import listed
from tests.support.fake_api import FakeApi, FakeWatch
from tests.support.informing import Informed, Step, pod, removed, together


def made(*pods: Obj) -> Step:
    """A step: the pods are created."""
    return lambda api: [api.create(obj) for obj in pods]


def labelled(name: str, **labels: str) -> Step:
    """A step: someone adds labels to the pod (a MODIFIED event)."""
    return lambda api: api.edit(k.POD, "shop", name,
                                lambda obj: obj["metadata"]["labels"].update(labels))


def version_of(api: FakeApi, name: str) -> str:
    found = api.get(k.POD, "shop", name)
    assert found is not None
    return str(found["metadata"]["resourceVersion"])


def test_a_watch_resumes_from_the_last_version_seen_bookmarks_included() -> None:
    run = Informed([pod("orders-0")], meanwhile=[
        # A pod of ours, then one elsewhere: the watch's bookmark carries the latter's version.
        made(pod("orders-1"), pod("other-0", namespace="elsewhere")),
        # Two changes, and the server ends this watch early: no bookmark, the last event says.
        together(labelled("orders-1", tier="a"), removed("orders-0"), FakeApi.end_early)])
    listed = int(version_of(run.api, "orders-0"))
    run.run()
    assert run.api.listed == [(k.POD, "shop", MANAGED_SELECTOR)]
    assert run.api.watched == [(str(listed), "shop", MANAGED_SELECTOR, 240),
                               (str(listed + 2), "shop", MANAGED_SELECTOR, 240),
                               (str(listed + 4), "shop", MANAGED_SELECTOR, 240)]
    assert run.delivered == [("ADDED", "orders-0", None), ("ADDED", "orders-1", None),
                             ("MODIFIED", "orders-1", str(listed + 1)),
                             ("DELETED", "orders-0", str(listed))]
    informer = run.informer
    assert informer.synced and informer.served and len(informer) == 1
    assert informer.get("shop", "orders-1") == slim(run.api.get(k.POD, "shop", "orders-1") or {})
    assert informer.peek("shop", "orders-0") is None and not informer.has("shop", "orders-0")
    assert run.restarts("expired") == 2 and informer.relists == informer.reconnects == 0
    assert run.metrics.registry.get_sample_value(
        f"{NAMESPACE}_cache_objects", {"kind": "Pod"}) == 1


def test_a_watched_pod_is_indexed_and_copies_are_the_callers() -> None:
    run = Informed(meanwhile=[made(pod("orders-2"))])
    run.run()
    stored = run.informer.get("shop", "orders-2")
    assert stored is not None and (stored["apiVersion"], stored["kind"]) == ("v1", "Pod")
    stored["spec"]["nodeName"] = "changed"
    assert run.informer.list("shop")[0]["spec"]["nodeName"] == "node-1"
    assert run.informer.clusters_on_node("node-1") == [ClusterKey("shop", "orders")]


def test_history_gone_relists_and_delivers_only_what_changed_meanwhile() -> None:
    run = Informed([pod("a"), pod("b"), pod("c")], meanwhile=[
        # Something changes elsewhere and the watch cache's window moves past the list.
        together(made(pod("x-0", namespace="elsewhere")), FakeApi.compact),
        # a is relabelled, c goes, d comes, and the window moves on again.
        together(labelled("a", tier="a"), removed("c"), made(pod("d")), FakeApi.compact)])
    listed = int(version_of(run.api, "c"))
    run.run()
    assert run.delivered == [("ADDED", "a", None), ("ADDED", "b", None), ("ADDED", "c", None),
                             ("MODIFIED", "a", str(listed - 2)), ("ADDED", "d", None),
                             ("DELETED", "c", str(listed))]
    assert [watched[0] for watched in run.api.watched] == [
        str(listed), str(listed + 1), str(listed + 4)], "each from the last list's version"
    assert run.informer.relists == 2 and run.restarts("gone") == 2
    assert run.waits.waited == [], "a relist is at once, no back-off"
    assert sorted(p["metadata"]["name"] for p in run.informer.list()) == ["a", "b", "d"]


def fails(error: Exception) -> Step:
    """A step: the watch about to be made fails with `error`."""
    return lambda api: api.fail("watch", error)


def test_an_unreachable_server_is_retried_with_doubling_waits_reset_by_a_good_watch(
        caplog: pytest.LogCaptureFixture) -> None:
    refused = ConnectionRefusedError("connection refused")
    run = Informed(meanwhile=[fails(ApiError(500, "InternalError", "etcd")), fails(refused),
                              fails(refused), fails(refused), made(pod("a")), fails(refused)])
    run.api.fail("list_objects", refused)
    assert run.informer.last_error == "", "nothing failed yet"
    with caplog.at_level(logging.WARNING, logger="reconciler.kube.informer"):
        run.run()
    assert run.waits.waited == [0.5, 1.0, 2.0, 3.0, 3.0, 0.5]
    told = [r for r in caplog.records if r.getMessage() == "watch failed, retrying"]
    assert [getattr(r, "retry_in_s", None) for r in told] == run.waits.waited
    assert run.informer.reconnects == 6 and run.restarts("disconnected") == 6
    assert run.informer.last_error == "ConnectionRefusedError: connection refused"
    assert run.delivered == [("ADDED", "a", None)]


def test_a_kind_the_server_does_not_serve_is_synced_and_empty_and_not_watched(
        caplog: pytest.LogCaptureFixture) -> None:
    run = Informed(kind=k.SERVICE_MONITOR)
    run.api.unserved.add(k.SERVICE_MONITOR.kind)  # its CRD is not installed
    run.informer._store.put(("shop", "old"), pod("old"))  # served before, CRD removed
    run.run()
    assert run.informer.served is False and run.informer.synced
    assert len(run.informer) == 0 and run.api.watched == []


def test_a_forbidden_list_is_retried_not_taken_for_an_unserved_kind() -> None:
    run = Informed()
    run.api.fail("list_objects", ApiError(403, "Forbidden", "pods is forbidden"))
    run.run()
    assert run.informer.served is True and run.waits.waited == [0.5]


def test_nothing_is_delivered_or_counted_once_the_informer_is_stopped() -> None:
    run = Informed(meanwhile=[made(pod("a"), pod("b"))])

    def stop_after_first(kind: str, obj: Obj, before: Obj | None) -> None:
        run.delivered.append((kind, obj["metadata"]["name"], None))
        run.informer.stop()

    run.informer.on_event = stop_after_first
    run.run()
    assert run.delivered == [("ADDED", "a", None)]
    assert run.restarts("expired") == 0
    assert run.informer.peek("shop", "b") is None


def test_a_watch_started_after_stop_is_closed_at_once() -> None:
    run = Informed(meanwhile=[made(pod("a"))])
    run.informer.resource_version = str(run.api.revision)
    stream: list[FakeWatch] = []
    watch = run.api.watch

    def watch_then_stop(*args: Any, **kwargs: Any) -> Any:
        answer = watch(*args, **kwargs)
        stream.append(answer)
        run.informer._stop.set()
        return answer

    run.api.watch = watch_then_stop  # type: ignore[method-assign]
    run.informer._watch()
    assert stream[0].closed and run.delivered == []
    run.informer._current_watch = stream[0]  # type: ignore[assignment]
    stream[0].closed = False
    run.informer.stop()
    assert stream[0].closed


def test_a_failing_event_handler_is_logged_and_the_cache_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    run = Informed(meanwhile=[made(pod("a"), pod("b"))])

    def failing(kind: str, obj: Obj, before: Obj | None) -> None:
        raise RuntimeError("handler bug")

    run.informer.on_event = failing
    with caplog.at_level(logging.ERROR, logger="reconciler.kube.informer"):
        run.run()
    assert len(run.informer) == 2
    assert caplog.messages.count("event handler failed") == 2
    assert {getattr(r, "kind", None) for r in caplog.records} == {run.informer.name}


# ---- events -> clusters ----------------------------------------------------------------------

ORDERS = ClusterKey("shop", "orders")


class Routed:
    """Caches over nothing, with the keys queued as work and as echoes."""

    def __init__(self, *, echoes: bool = True, managed: tuple[Kind, ...] = k.CACHED_KINDS,
                 **settings: Any) -> None:
        self.keys: list[ClusterKey] = []
        self.echoes: list[ClusterKey] = []
        self.writes = OwnWrites()
        self.caches = Caches(None, Settings(leader_election=False, **settings),  # type: ignore[arg-type]
                             Metrics(), self.keys.append, managed_kinds=managed,
                             echoes=Echoes(self.writes, self.echoes.append) if echoes
                             else None)
        clusters = self.caches.informers[k.KAIWU_CLUSTER]
        clusters._synced.set()
        clusters._store.put(("shop", "orders"), kwc())
        listed(self.caches)

    def event(self, kind: str, obj: Obj, old: Obj | None = None) -> tuple[list[Any], list[Any]]:
        self.keys.clear()
        self.echoes.clear()
        self.caches._on_event(kind, obj, old)
        return list(self.keys), list(self.echoes)


def kwc(generation: int = 1, **meta: Any) -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": "orders", "namespace": "shop", "generation": generation,
                         "uid": "u-1", "labels": {}, **meta},
            "status": {"observedGeneration": 1}}


def sts(generation: int = 1, version: str = "5", **meta: Any) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": version,
                         "generation": generation, "labels": {INSTANCE_LABEL: "orders"},
                         "annotations": {}, **meta}}


def test_a_spec_change_costs_a_reconcile_and_a_status_report_on_it_is_an_echo() -> None:
    routed = Routed()
    assert routed.event("MODIFIED", sts(2), sts(1)) == ([ORDERS], [])
    assert routed.event("MODIFIED", sts(2, "6"), sts(2)) == ([], [ORDERS]), "status report"
    assert routed.event("ADDED", sts(1)) == ([ORDERS], [])
    assert routed.event("MODIFIED", sts(2, labels={INSTANCE_LABEL: "orders", "x": "1"}),
                        sts(2)) == ([ORDERS], [])
    assert routed.event("MODIFIED", sts(2, annotations={"a": "1"}), sts(2)) == ([ORDERS], [])
    assert routed.event("MODIFIED", sts(2, deletionTimestamp="2026-01-01T00:00:00Z"),
                        sts(2)) == ([ORDERS], [])
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "orders", "namespace": "shop",
                            "labels": {INSTANCE_LABEL: "orders"}}}
    assert routed.event("MODIFIED", service, service) == ([ORDERS], []), "no generation"



def test_the_token_controller_listing_its_secret_in_a_service_account_is_an_echo() -> None:
    # Kubernetes before 1.24 makes a token Secret for each new ServiceAccount and lists it in
    # the account's `secrets`: a ServiceAccount we make again would otherwise cost two tokens.
    routed = Routed()
    def account(version: str, labels: dict[str, str] | None = None, **fields: Any) -> Obj:
        return {"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": version,
                             "labels": {INSTANCE_LABEL: "orders", **(labels or {})}},
                **fields}
    made = account("5")
    listed = account("6", secrets=[{"name": "orders-token-x1"}])
    assert routed.event("MODIFIED", listed, made) == ([], [ORDERS])
    changed = account("7", secrets=[{"name": "orders-token-x1"}],
                      automountServiceAccountToken=True)
    assert routed.event("MODIFIED", changed, listed) == ([ORDERS], []), "a change of its own"
    labelled = account("8", {"x": "1"}, secrets=[{"name": "orders-token-x1"}])
    assert routed.event("MODIFIED", labelled, listed) == ([ORDERS], [])


def test_a_deleted_object_always_costs_a_reconcile_whatever_its_body() -> None:
    # A DELETED event carries the object as the cache held it: the same body as before, which
    # reads as "nothing but bookkeeping changed" for a StatefulSet or a ServiceAccount.
    routed = Routed()
    assert routed.event("DELETED", sts(2, "9"), sts(2, "9")) == ([ORDERS], [])
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": "5",
                            "labels": {INSTANCE_LABEL: "orders"}}}
    assert routed.event("DELETED", account, account) == ([ORDERS], [])

def test_the_echo_of_our_own_write_is_an_echo() -> None:
    routed = Routed()
    routed.writes.record(sts(3, "77"))
    assert routed.event("MODIFIED", sts(3, "77"), sts(2)) == ([], [ORDERS])
    assert routed.event("MODIFIED", sts(4, "78"), sts(3, "77")) == ([ORDERS], [])


def test_without_an_echo_handler_every_event_costs_a_reconcile() -> None:
    routed = Routed(echoes=False)
    assert routed.event("MODIFIED", sts(2, "6"), sts(2)) == ([ORDERS], [])


def test_kaiwucluster_events_that_change_nothing_the_controller_reads_are_nothing() -> None:
    routed = Routed()
    assert routed.event("MODIFIED", kwc(1, resourceVersion="9"), kwc(1)) == ([], [])
    assert routed.event("MODIFIED", kwc(2), kwc(1)) == ([ORDERS], [])
    for changed in ({"labels": {"team": "x"}}, {"annotations": {"a": "b"}},
                    {"deletionTimestamp": "2026-01-01T00:00:00Z"}, {"finalizers": ["f"]},
                    {"uid": "u-2"}):
        assert routed.event("MODIFIED", kwc(1, **changed), kwc(1)) == ([ORDERS], []), changed
    assert routed.event("ADDED", kwc(1)) == ([ORDERS], [])
    assert routed.event("DELETED", kwc(1), kwc(1)) == ([ORDERS], [])
    assert routed.event("ADDED", {"kind": "KaiwuCluster", "metadata": {"name": "x"}}) == ([], [])


def backup(cluster: str | None, generation: int = 1) -> Obj:
    spec = {"cluster": {"name": cluster}} if cluster else {}
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackup",
            "metadata": {"name": "nightly", "namespace": "shop", "generation": generation},
            "spec": spec}


def test_a_backup_or_schedule_counts_for_the_cluster_it_names() -> None:
    routed = Routed()
    assert routed.event("ADDED", backup("orders")) == ([ORDERS], [])
    assert routed.event("MODIFIED", backup("orders", 2), backup("orders")) == ([ORDERS], [])
    assert routed.event("MODIFIED", backup("orders"), backup("orders")) == ([], [])
    assert routed.event("ADDED", backup(None)) == ([], [])
    assert cluster_of(backup(None)) is None, "a backup that names no cluster belongs to none"
    assert routed.event("ADDED", backup("payments")) == ([], []), "not a cluster of ours"
    schedule = backup("orders") | {"kind": "KaiwuBackupSchedule"}
    assert routed.event("MODIFIED", schedule, backup("orders")) == ([], [])
    assert cluster_of(schedule) == ORDERS


def test_an_object_is_the_clusters_by_its_instance_label_or_its_owner() -> None:
    owned = {"kind": "Secret", "metadata": {"name": "orders-ca", "namespace": "shop",
                                            "ownerReferences": [
                                                {"kind": "StatefulSet", "name": "x"},
                                                {"kind": "KaiwuCluster", "name": "orders"}]}}
    assert cluster_of(owned) == ORDERS
    assert cluster_of({"kind": "Secret", "metadata": {"name": "s", "namespace": "shop"}}) is None
    assert cluster_of({"kind": "Node", "metadata": {"name": "node-1"}}) is None
    routed = Routed()
    assert routed.event("ADDED", owned) == ([ORDERS], [])


def node(ready: str = "True", heartbeat: str = "t0", **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
            "spec": spec, "status": {"conditions": [
                {"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]}}


def test_a_node_heartbeat_is_nothing_but_a_node_going_bad_queues_its_clusters() -> None:
    routed = Routed()
    pods = routed.caches.informers[k.POD]
    pods._store.put(("shop", "orders-0"), pod("orders-0"))
    pods._store.put(("shop", "other-0"), pod("other-0", cluster="payments"))
    assert routed.event("MODIFIED", node(heartbeat="t1"), node()) == ([], [])
    assert routed.event("MODIFIED", node("Unknown"), node()) == ([ORDERS], []), \
        "payments is not in this shard's cache"
    assert routed.event("MODIFIED", node(unschedulable=True), node()) == ([ORDERS], [])
    assert routed.event("ADDED", node()) == ([ORDERS], [])
    assert Routed(managed=()).event("MODIFIED", node("False"), node()) == ([], [])


def test_reading_a_kind_that_is_not_cached_is_a_mistake() -> None:
    caches = Routed(managed=()).caches
    for read in (caches.get, caches.peek):
        with pytest.raises(KeyError, match="Pod"):
            read(k.POD, "shop", "orders-0")
    with pytest.raises(KeyError, match=r"Pod \(v1\) is not cached"):
        caches.list(k.POD, "shop")
    assert caches.served(k.POD) is None


def test_the_caches_answer_for_their_informers() -> None:
    routed = Routed(managed=(k.POD,), watch_namespace="shop")
    caches = routed.caches
    assert set(caches.informers) == {k.KAIWU_CLUSTER, k.KAIWU_BACKUP,
                                     k.KAIWU_BACKUP_SCHEDULE, k.POD, k.NODE}
    # Only the cached clusters' objects (reconciler.kube.selection).
    assert caches.informers[k.POD].label_selector == \
        f"{MANAGED_SELECTOR},{INSTANCE_LABEL} in (orders)"
    assert caches.informers[k.POD].namespace == "shop"
    assert caches.informers[k.NODE].namespace == "", "Nodes are not namespaced"
    assert caches.informers[k.KAIWU_BACKUP].label_selector == ""
    assert caches.cluster_keys() == [ORDERS]
    assert caches.get(k.KAIWU_CLUSTER, "shop", "orders") == kwc()
    assert caches.peek(k.KAIWU_CLUSTER, "shop", "orders") == kwc()
    assert caches.list(k.KAIWU_CLUSTER, "shop") == [kwc()]
    assert not caches.synced()
    assert sorted(caches.unsynced()) == ["KaiwuBackup.kaiwu.inspur.com/v1",
                                         "KaiwuBackupSchedule.kaiwu.inspur.com/v1",
                                         "Node.v1", "Pod.v1"]
    for informer in caches.informers.values():
        informer._synced.set()
    assert caches.synced() and caches.unsynced() == [] and caches.wait_synced(0.1)
    assert caches.dead() == [], "not started: nothing is dead"
    caches.informers[k.POD].served = True
    assert caches.served(k.POD) is True


def test_nodes_are_cached_by_name_alone() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}
    run = Informed([node], kind=k.NODE, label_selector="")
    run.run()
    stored = slim(run.api.get(k.NODE, None, "node-1") or {})
    assert run.informer.namespace == "" and run.api.listed == [(k.NODE, None, None)]
    assert run.informer.get("", "node-1") == stored
    assert run.informer.get("shop", "node-1") == stored, "a namespace means nothing for Nodes"
    assert run.informer.has("shop", "node-1")


def test_waiting_for_a_cache_that_never_syncs_gives_up() -> None:
    run = Informed()
    assert run.informer.wait_synced(0.01) is False
    run.informer._synced.set()
    assert run.informer.wait_synced(0.01) is True


class Quiet(FakeApi):
    """The fake API with nothing in it, for informers on their own threads: a real watch with
    nothing to tell holds until its time-out, the fake's ends at once, so each watch here waits
    2 ms first (the threads would spin otherwise)."""

    def watch(self, *args: Any, **kwargs: Any) -> FakeWatch:
        threading.Event().wait(0.002)
        return super().watch(*args, **kwargs)


def test_started_caches_sync_and_none_is_dead_while_watching_or_once_stopped() -> None:
    caches = Caches(Quiet(), Settings(leader_election=False), Metrics(),  # type: ignore[arg-type]
                    lambda key: None, managed_kinds=(k.POD,))
    caches.start()
    try:
        assert caches.wait_synced(5) and caches.synced()
        assert all(informer.alive for informer in caches.informers.values())
        assert caches.dead() == []
    finally:
        caches.stop()
    for informer in caches.informers.values():
        assert informer._thread is not None
        informer._thread.join(5)
    assert caches.dead() == [], "stopped on purpose"


def test_a_cluster_handed_over_to_the_unnamed_shard_is_logged_with_the_delay(
        caplog: pytest.LogCaptureFixture) -> None:
    handed: list[tuple[ClusterKey, float]] = []
    now = [50.0]
    caches = Caches(None, Settings(leader_election=False, shard_handover_s=4.0),  # type: ignore[arg-type]
                    Metrics(), lambda key: None,
                    on_handover=lambda key, delay: handed.append((key, delay)),
                    clock=lambda: now[0])
    clusters = caches.informers[k.KAIWU_CLUSTER]
    clusters._synced.set()
    clusters._store.put(("shop", "orders"), kwc())
    listed(caches)
    with caplog.at_level(logging.INFO, logger="reconciler.kube.cache"):
        caches._on_event("ADDED", kwc(), None)
    assert handed == [(ORDERS, 4.0)]
    now[0] = 53.9
    assert not caches.owns(ORDERS), "the shard it left may still be at work"
    now[0] = 54.0
    assert caches.owns(ORDERS), "ours from the end of the delay on"
    now[0] = 0.0
    assert caches.owns(ORDERS), "and for good"
    (record,) = [r for r in caplog.records if r.getMessage() == "cluster handed over to this shard"]
    assert (getattr(record, "cluster", ""), getattr(record, "shard", ""),
            getattr(record, "first_reconcile_in_s", 0)) == (str(ORDERS), "(unnamed)", 4.0)


def test_an_informer_runs_in_a_named_thread_that_never_holds_up_exit() -> None:
    run = Informed()
    run.waits.set()  # stopped: the thread ends at once
    run.informer.start()
    thread = run.informer._thread
    assert thread is not None and thread.name == f"informer-{run.informer.name}" and thread.daemon
    thread.join(5)
