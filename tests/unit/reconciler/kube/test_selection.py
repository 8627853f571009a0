"""Stories of what a reconciler watches (reconciler.kube.selection): only its own clusters'
objects are listed and kept, a new cluster is acted on once its objects are in the caches, and a
cluster that leaves stays selected a while. The caches run for real here, their informers on
threads, over the fake API; the same against the real apiserver, with shards:
tests/world_stories/runtime/test_shards.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.cache import Caches
from reconciler.kube.informer import Informer
from reconciler.kube.kinds import Kind
from reconciler.kube.selection import GRACE_S, NOTHING, Selection, selector_for
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import SHARD_LABEL, Settings
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from tests.support.fake_api import FakeApi, FakeWatch
from tests.support.selectors import selector_matches

SHOP = "shop"


class BlockingWatch(FakeWatch):
    """A watch with nothing to say waits, as a real one does until its time-out, unless it is
    closed or news comes (then it ends, and the informer's next watch carries the news): an
    informer that did not close its watch for a new selector would wait here."""

    def __init__(self) -> None:
        super().__init__([])
        self.ended = threading.Event()

    def close(self) -> None:
        super().close()
        self.ended.set()

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        self.ended.wait(10.0)
        yield from ()


class WaitingApi(FakeApi):
    """The fake API with a lock, and watches that wait for news as a real one does (instead of
    ending at once, which would spin the informers)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.selectors: list[tuple[str, str | None]] = []  # (kind, selector) of every list
        self.waiting: list[BlockingWatch] = []

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, **kwargs: Any) -> Any:
        with self.lock:
            self.selectors.append((kind.kind, label_selector))
            return super().list_objects(kind, namespace, label_selector, **kwargs)

    def watch(self, *args: Any, **kwargs: Any) -> FakeWatch:
        with self.lock:
            found = super().watch(*args, **kwargs)
        if found.events:
            return found
        with self.lock:
            self.waiting.append(BlockingWatch())
            return self.waiting[-1]

    def create(self, obj: Obj) -> Obj:
        with self.lock:
            made = super().create(obj)
            for watch in self.waiting:
                watch.ended.set()
            self.waiting.clear()
            return made


def kwc(name: str, shard: str | None = None) -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": name, "namespace": SHOP,
                         "labels": {SHARD_LABEL: shard} if shard else {}},
            "spec": {}}


def pod(cluster: str, ordinal: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{cluster}-{ordinal}", "namespace": SHOP,
                         "labels": {INSTANCE_LABEL: cluster, MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": {"nodeName": "node-1"}}


def eventually(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.01)


@pytest.fixture
def api() -> WaitingApi:
    api = WaitingApi()
    for name, shard in (("orders", "a"), ("payments", "b")):
        api.create(kwc(name, shard))
        for ordinal in range(3):
            api.create(pod(name, ordinal))
    return api


@pytest.fixture
def shard_a(api: WaitingApi) -> Iterator[tuple[Caches, list[ClusterKey]]]:
    queued: list[ClusterKey] = []
    caches = Caches(api, Settings(shard="a", leader_election=False),  # type: ignore[arg-type]
                    Metrics(), queued.append, managed_kinds=(k.POD,))
    caches.start()
    yield caches, queued
    caches.stop()


def pods_cached(caches: Caches) -> list[str]:
    return sorted(str(p["metadata"]["name"]) for p in caches.peek_list(k.POD, ""))


def test_a_shard_lists_and_keeps_only_its_own_clusters_objects(
        api: WaitingApi, shard_a: tuple[Caches, list[ClusterKey]]) -> None:
    caches, queued = shard_a
    assert caches.wait_synced(10)
    eventually(lambda: caches.owns(ClusterKey(SHOP, "orders")))
    assert pods_cached(caches) == ["orders-0", "orders-1", "orders-2"]
    assert not caches.owns(ClusterKey(SHOP, "payments")), "shard b's"
    pod_lists = [selector for kind, selector in api.selectors if kind == "Pod"]
    assert pod_lists == [f"{MANAGED_BY_LABEL}={MANAGED_BY},{INSTANCE_LABEL} in (orders)"], \
        "the pods were listed once, for the shard's clusters only: never the whole fleet's"
    assert set(queued) == {ClusterKey(SHOP, "orders")}, "queued once its objects were listed"


def test_a_new_cluster_is_acted_on_only_once_its_objects_are_in_the_caches(
        api: WaitingApi, shard_a: tuple[Caches, list[ClusterKey]]) -> None:
    caches, queued = shard_a
    eventually(lambda: caches.owns(ClusterKey(SHOP, "orders")))
    queued.clear()
    api.create(pod("fresh", 0))  # its StatefulSet's pod, made before the watch selects it
    api.create(kwc("fresh", "a"))
    eventually(lambda: caches.informers[k.KAIWU_CLUSTER].has(SHOP, "fresh"))
    fresh = ClusterKey(SHOP, "fresh")
    # The moment it is ours to act on, its pod is already cached: never an empty view of it.
    eventually(lambda: caches.owns(fresh))
    assert "fresh-0" in pods_cached(caches), "acted on before its objects were listed"
    assert set(queued) == {fresh}, "queued when its objects were listed (and by their events)"
    api.create(pod("fresh", 1))
    eventually(lambda: "fresh-1" in pods_cached(caches))  # and the watch follows it since


class Listing:
    """An informer as the selection sees it: asked to reselect, listing when told."""

    def __init__(self, served: bool | None = True) -> None:
        self.label_selector = NOTHING
        self.listed_selector: str | None = None
        self.served = served
        self.asked: list[str] = []

    def reselect(self, selector: str) -> None:
        if selector != self.label_selector:
            self.label_selector = selector
            self.asked.append(selector)

    def lists(self) -> None:
        self.listed_selector = self.label_selector


def listed_once(names: set[str], now: list[float]) -> tuple[Selection, Listing]:
    """A selection over one informer that has listed `names` (as they are now) once."""
    pods = Listing()
    selection = Selection([pods], lambda: set(names), lambda added: None,  # type: ignore[list-item]
                          clock=lambda: now[0])
    selection.step()
    pods.lists()
    selection.step()
    return selection, pods


def test_a_name_counts_as_listed_only_when_every_informer_has_listed_under_it() -> None:
    names = {"orders"}
    told: list[frozenset[str]] = []
    pods, secrets = Listing(), Listing()
    selection = Selection([pods, secrets], lambda: set(names),  # type: ignore[list-item]
                          told.append, clock=lambda: 0.0)
    assert selection.step() is not None, "a relist in progress is looked at again soon"
    assert pods.asked == secrets.asked == [selector_for({"orders"})]
    pods.lists()
    selection.step()
    assert selection.listed == frozenset() and told == [], "the Secrets are not in yet"
    secrets.lists()
    assert selection.step() is None, "nothing to wait for"
    assert selection.listed == {"orders"} and told == [frozenset({"orders"})]


def test_a_kind_the_server_does_not_serve_holds_nothing_back() -> None:
    told: list[frozenset[str]] = []
    served, unserved = Listing(), Listing(served=False)
    selection = Selection([served, unserved], lambda: {"orders"},  # type: ignore[list-item]
                          told.append, clock=lambda: 0.0)
    selection.step()
    served.lists()
    selection.step()
    assert told == [frozenset({"orders"})]


def test_a_cluster_that_leaves_stays_selected_for_the_grace_and_coming_back_costs_nothing(
        ) -> None:
    names = {"orders", "payments"}
    now = [100.0]
    selection, pods = listed_once(names, now)
    names.discard("payments")  # deleted, or moved to another shard
    assert selection.step() == GRACE_S, "due again when the grace ends"
    assert pods.label_selector == selector_for({"orders", "payments"}), \
        "kept: the pass that tells of its deletion reads what it kept"
    now[0] += GRACE_S / 2
    names.add("payments")  # back (moved back, or made again)
    assert selection.step() is None and len(pods.asked) == 1, "no relist"
    names.discard("payments")
    selection.step()
    now[0] += GRACE_S
    selection.step()
    assert pods.label_selector == selector_for({"orders"}), "dropped once the grace is over"
    pods.lists()
    selection.step()
    assert selection.listed == {"orders"}


def test_the_selector_names_each_cluster_once_and_no_cluster_selects_nothing() -> None:
    assert selector_for(["b", "a", "b"]) == \
        f"{MANAGED_BY_LABEL}={MANAGED_BY},{INSTANCE_LABEL} in (a,b)"
    assert selector_for([]) == NOTHING
    ours = {MANAGED_BY_LABEL: MANAGED_BY, INSTANCE_LABEL: "a"}
    assert selector_matches(selector_for(["a"]), ours)
    assert not selector_matches(selector_for(["b"]), ours)
    assert not selector_matches(NOTHING, ours) and not selector_matches(NOTHING, {})


def test_a_running_informer_reselected_lists_again_under_the_new_selector_at_once(
        api: WaitingApi) -> None:
    informer = Informer(api, k.POD, Settings(leader_election=False,  # type: ignore[arg-type]
                                             reconnect_backoff_base_s=30.0),
                        label_selector=selector_for({"orders"}))
    events: list[tuple[str, str]] = []
    informer.on_event = lambda kind, obj, old: events.append((kind, obj["metadata"]["name"]))
    informer.start()
    try:
        assert informer.wait_synced(10)
        informer.reselect(selector_for({"payments"}))
        # At once: its watch, waiting for news, is closed for the new list.
        eventually(lambda: ("DELETED", "orders-0") in events
                   and ("ADDED", "payments-0") in events, 5.0)
        assert informer.listed_selector == selector_for({"payments"})
        names = sorted(p["metadata"]["name"] for p in informer.peek_list())
        assert names == ["payments-0", "payments-1", "payments-2"]
        assert informer.reconnects == 0, "no back-off: a closed watch is no failure"
    finally:
        informer.stop()


def test_clusters_made_in_a_burst_are_acted_on_batch_by_batch_one_relist_at_a_time() -> None:
    names = {"c0"}
    told: list[frozenset[str]] = []
    pods = Listing()
    selection = Selection([pods], lambda: set(names), told.append,  # type: ignore[list-item]
                          clock=lambda: 0.0)
    selection.step()
    names.update({"c1", "c2"})  # while the first relist is in progress
    selection.step()
    assert pods.asked == [selector_for({"c0"})], "no second relist while one is in progress"
    pods.lists()
    assert selection.step() is not None
    assert told == [frozenset({"c0"})], "the first batch is acted on when its relist ends"
    assert pods.asked[-1] == selector_for({"c0", "c1", "c2"}), "then the rest, together"
    pods.lists()
    selection.step()
    assert told[-1] == frozenset({"c1", "c2"}) and selection.listed == {"c0", "c1", "c2"}


def test_a_name_no_label_can_carry_is_never_selected_and_holds_nothing_back(
        caplog: pytest.LogCaptureFixture) -> None:
    long_name = "a" * 70  # stored by the API server when the webhook was bypassed
    told: list[frozenset[str]] = []
    pods = Listing()
    selection = Selection([pods], lambda: {"orders", long_name},  # type: ignore[list-item]
                          told.append, clock=lambda: 0.0)
    selection.step()
    assert pods.label_selector == selector_for({"orders"}), "the API server would refuse it"
    pods.lists()
    selection.step()
    assert told == [frozenset({"orders"})]
    warned = [r for r in caplog.records if "not a label value" in r.getMessage()]
    assert [getattr(r, "cluster_name", "") for r in warned] == [long_name], \
        "said once, with the name and the fix"


def test_a_name_no_longer_wanted_stops_counting_as_listed_at_once() -> None:
    names = {"orders", "payments"}
    now = [0.0]
    selection, _ = listed_once(names, now)
    names.discard("payments")
    selection.step()
    now[0] += GRACE_S
    selection.step()  # the relist without it has only begun
    assert selection.listed == {"orders"}, "its objects are about to leave the caches"
