"""Stories of the check that keeps peeked objects unchanged (reconciler.kube.readcheck): the
caches hand their own objects to `peek` and `peek_list` readers, without a copy, and a reader
that changes one is caught, by name; `get` and `list` readers get copies they may change.

The whole fast tier runs with the check on (tests/conftest.py): every test of a controller step
over the real caches or a fake of them is also a test that its readers change nothing they
peeked.
"""

from __future__ import annotations

import pytest

from reconciler.kube import kinds as k
from reconciler.kube import readcheck
from reconciler.kube.informer import Informer
from reconciler.kube.readcheck import ReadCheck
from reconciler.model import Obj
from tests.support.fake_api import FakeApi, FakeView
from tests.support.informing import Informed, pod, removed


def own_pod(name: str) -> Obj:
    """A pod whose maps equal no other test's: the caches share equal maps across caches
    (store.ValuePool), so a change made here on purpose must not reach another test's cache."""
    made = pod(name, cluster="readcheck", node="node-readcheck")
    made["status"] = {"phase": "Readcheck"}  # (the cache keeps a Pod's phase, not its message)
    return made


def informer_with(*pods: str) -> Informer:
    informed = Informed([own_pod(name) for name in pods])
    informed.run()
    return informed.informer


def test_a_reader_that_changes_a_peeked_pod_is_named_and_a_copy_may_be_changed_freely() -> None:
    informer = informer_with("orders-0", "orders-1")
    peeked = informer.peek("shop", "orders-0")
    listed = informer.peek_list("shop")
    assert peeked is not None and peeked is informer.peek("shop", "orders-0"), \
        "peek hands out the cached object itself: no copy"
    assert any(obj is peeked for obj in listed), "so does peek_list"
    copied = informer.get("shop", "orders-1")
    assert copied is not None
    copied["status"]["phase"] = "Failed"  # a copy: the caller's own
    for obj in informer.list("shop"):
        obj["metadata"]["labels"]["extra"] = "mine"
    assert informer._check is not None and informer._check.changed() == []

    peeked["status"]["phase"] = "Failed"  # a reader changing the cache's own
    found = informer._check.changed()
    # Both pods: their equal status maps are one map in the cache (store.ValuePool), which is why
    # a change to a peeked object is a change to others too.
    assert len(found) == 2 and "Pod.v1 ('shop', 'orders-0')" in found[0] \
        and "('shop', 'orders-1')" in found[1], found
    assert informer._check.changed() == [], "each change is told once"


def test_a_change_is_caught_when_the_changed_object_leaves_the_cache_too() -> None:
    informed = Informed([own_pod("orders-0")], meanwhile=[removed("orders-0")])
    informer = informed.informer
    check = informer._check
    assert check is not None

    def change_then_delete(kind: str, obj: Obj, before: Obj | None) -> None:
        if kind == "ADDED":
            obj["status"]["phase"] = "Changed"  # an event handler is a reader as well
        informed.on_event(kind, obj, before)

    informer.on_event = change_then_delete
    informed.run()
    assert informer.peek("shop", "orders-0") is None
    assert len(check.changed()) == 1


def test_the_fakes_of_the_caches_catch_the_same_change() -> None:
    api = FakeApi()
    api.put(own_pod("orders-0"))
    view = FakeView(api)
    claimed = view.peek_list(k.POD, "shop")
    assert claimed and view.peek(k.POD, "shop", "orders-0") == claimed[0]
    claimed[0]["metadata"]["labels"]["extra"] = "mine"
    found = [finding for check in readcheck.CHECKS for finding in check.changed()]
    assert len(found) == 1 and "Pod shop/orders-0" in found[0], found


def test_the_check_is_on_in_tests_and_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert readcheck.enabled(), "tests/conftest.py turns it on for every tier"
    monkeypatch.delenv(readcheck.ENV)
    assert Informed().informer._check is None, "production pays nothing for it"
    check = ReadCheck("x")
    check.keep("a", {"n": 1})
    check.drop("a")
    assert check.changed() == []
