"""Shards: each reconciler owns the KaiwuClusters its label selector matches, acts only on
those, stops at once when one moves away (without deleting anything), and takes one that moved
in only after a handover delay.

The watch caches are driven by hand here: events go straight to the handler, and the
KaiwuCluster informer's store is filled as its watch would fill it. No API server.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from reconciler.controller.controller import Controller
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.cache import Caches
from reconciler.kube.leader import GuardedKube, NotOwnerError
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import SHARD_LABEL, Settings, SettingsError
from tests.support.caches import listed
from tests.support.controller_world import NOW, NS, cluster
from tests.support.fake_api import FakeApi, FakeView

ORDERS = ClusterKey("shop", "orders")


def kwc(name: str, shard: str | None, reconciled: bool = False) -> Obj:
    labels = {SHARD_LABEL: shard} if shard is not None else {}
    obj: Obj = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                "metadata": {"name": name, "namespace": "shop", "labels": labels,
                             "resourceVersion": "1", "generation": 1}, "spec": {}}
    if reconciled:
        obj["status"] = {"observedGeneration": 1}
    return obj


def statefulset(cluster_name: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": cluster_name, "namespace": "shop", "resourceVersion": "5",
                         "generation": 1,
                         "labels": {"app.kubernetes.io/instance": cluster_name}}}


class Shard:
    """One shard's caches, with what they queued."""

    def __init__(self, shard: str, handover_s: float = 0.05) -> None:
        self.queued: list[ClusterKey] = []
        self.handed_over: list[tuple[ClusterKey, float]] = []
        settings = Settings(shard=shard, shard_handover_s=handover_s, leader_election=False)
        self.caches = Caches(None, settings, Metrics(), on_key=self.queued.append,  # type: ignore[arg-type]
                             on_handover=lambda key, delay: self.handed_over.append(
                                 (key, delay)))
        self.clusters = self.caches.informers[k.KAIWU_CLUSTER]
        self.clusters._synced.set()  # the initial list is done

    def watch_says(self, kind: str, obj: Obj, old: Obj | None = None) -> None:
        """A KaiwuCluster event as this shard's selector-filtered watch delivers it."""
        key = ("shop", obj["metadata"]["name"])
        if kind == "DELETED":
            self.clusters._store.pop(key)
        else:
            self.clusters._store.put(key, copy.deepcopy(obj))
        self.caches._on_event(kind, obj, old)
        listed(self.caches)  # the watches of its objects follow (reconciler.kube.selection)

    def owned_event(self, obj: Obj) -> None:
        self.caches._on_event("MODIFIED", obj, obj)


def test_a_shard_watches_only_its_label_and_the_unnamed_shard_the_unlabelled() -> None:
    assert Settings(shard="a").shard_selector == f"{SHARD_LABEL}=a"
    assert Settings().shard_selector == f"!{SHARD_LABEL}"
    assert Shard("a").clusters.label_selector == f"{SHARD_LABEL}=a"
    assert Settings(shard="a").owns_labels({SHARD_LABEL: "a"})
    assert not Settings(shard="a").owns_labels({SHARD_LABEL: "b"})
    assert not Settings(shard="a").owns_labels({})
    assert Settings().owns_labels({"team": "x"})
    assert not Settings().owns_labels({SHARD_LABEL: "a"})
    assert Settings(shard="a").effective_lease_name() == "kaiwu-reconciler-a"
    assert Settings().effective_lease_name() == "kaiwu-reconciler"


@pytest.mark.parametrize(("changes", "complaint"), [
    ({"shard": "a b"}, "--shard: 'a b' is not a label value"),
    ({"shard": "a", "source": "dir:/git"}, "--shard: directory mode"),
])
def test_a_shard_name_that_cannot_be_a_label_value_is_refused(
        changes: dict[str, Any], complaint: str) -> None:
    with pytest.raises(SettingsError, match=complaint):
        Settings(**changes)


def test_events_of_objects_of_another_shards_cluster_queue_nothing() -> None:
    shard = Shard("a")
    shard.watch_says("ADDED", kwc("orders", "a"))
    shard.queued.clear()

    shard.owned_event(statefulset("orders"))
    shard.owned_event(statefulset("payments"))  # shard b's cluster: not in our cache

    assert shard.queued == [ORDERS]
    assert shard.caches.owns(ORDERS)
    assert not shard.caches.owns(ClusterKey("shop", "payments"))


def pod_on(node: str, cluster_name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{cluster_name}-0", "namespace": "shop",
                         "resourceVersion": "3",
                         "labels": {"app.kubernetes.io/instance": cluster_name,
                                    "app.kubernetes.io/name": "kaiwudb"}},
            "spec": {"nodeName": node}}


def test_a_node_event_queues_each_of_our_clusters_on_it_past_another_shards() -> None:
    shard = Shard("a")
    shard.watch_says("ADDED", kwc("orders", "a"))
    pods = shard.caches.informers[k.POD]
    for name in ("billing", "orders"):  # billing is shard b's, and sorts first
        pods._store.put(("shop", f"{name}-0"), pod_on("n1", name))
    shard.queued.clear()
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "resourceVersion": "9"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    shard.caches._on_event("ADDED", node, None)
    assert shard.queued == [ORDERS]


def test_a_cluster_that_moves_away_is_dropped_at_once_and_nothing_is_deleted() -> None:
    old, new = Shard("a"), Shard("b")
    old.watch_says("ADDED", kwc("orders", "a"))
    assert old.caches.owns(ORDERS)

    # Relabelled to b: a's watch no longer matches it (DELETED), b's now does (ADDED).
    old.watch_says("DELETED", kwc("orders", "b", reconciled=True))
    new.watch_says("ADDED", kwc("orders", "b", reconciled=True))

    assert not old.caches.owns(ORDERS), "the old shard stops at this event"
    assert old.queued[-1] == ORDERS, "and looks once more: the Controller finds it gone"
    old.queued.clear()
    old.owned_event(statefulset("orders"))
    assert old.queued == [], "its objects' events are no business of the old shard's"

    # What that last look does: the Controller forgets the cluster, writes and deletes nothing.
    obj = cluster()
    objects = {("KaiwuCluster", NS, obj["metadata"]["name"]): obj}
    kube = FakeApi(objects, clock=lambda: NOW)
    view = FakeView(kube)
    controller = Controller(kube, view, Settings(watch_namespace=NS),  # type: ignore[arg-type]
                            Metrics())
    controller.reconcile(ClusterKey(NS, obj["metadata"]["name"]))
    assert kube.writes, "the cluster's objects were created while it was ours"
    made = dict(objects)
    kube.writes.clear()
    del objects[("KaiwuCluster", NS, obj["metadata"]["name"])]  # gone from our watch
    # ... not from the API server, which still serves it (to shard b): no ClusterDeleted Event.
    kube.get = lambda kind, namespace, name: obj  # type: ignore[method-assign]
    controller.reconcile(ClusterKey(NS, obj["metadata"]["name"]))
    assert kube.writes == []
    assert {key for key in made if key[0] != "KaiwuCluster"} <= set(objects), "nothing pruned"


def test_a_cluster_that_moves_in_is_ours_only_after_the_handover_delay() -> None:
    new = Shard("b", handover_s=0.1)
    new.watch_says("ADDED", kwc("orders", "b", reconciled=True))

    assert new.handed_over == [(ORDERS, 0.1)], "queued for after the delay, not at once"
    assert new.queued == []
    assert not new.caches.owns(ORDERS)
    new.owned_event(statefulset("orders"))
    assert new.queued == [], "its objects' events wait for the handover too"

    time.sleep(0.15)
    assert new.caches.owns(ORDERS)
    new.owned_event(statefulset("orders"))
    assert new.queued == [ORDERS]


def test_a_new_cluster_is_reconciled_at_once_and_so_is_every_cluster_at_start() -> None:
    shard = Shard("b")
    shard.watch_says("ADDED", kwc("fresh", "b"))  # never reconciled by anyone
    assert shard.queued == [ClusterKey("shop", "fresh")] and shard.handed_over == []

    starting = Shard("b")
    starting.clusters._synced.clear()  # the initial list: ours, whoever reconciled before
    starting.watch_says("ADDED", kwc("orders", "b", reconciled=True))
    assert starting.queued == [ORDERS] and starting.handed_over == []


def test_a_write_for_a_cluster_that_left_the_shard_is_refused() -> None:
    owned = {"now": True}
    kube = GuardedKube(None, "kaiwu-reconciler", 1.0, may_write=lambda: True,
                       owns_current=lambda: owned["now"])
    kube._check("PATCH /apis/apps/v1/namespaces/shop/statefulsets/orders")
    owned["now"] = False
    with pytest.raises(NotOwnerError, match="left this shard"):
        kube._check("PATCH /apis/apps/v1/namespaces/shop/statefulsets/orders")
