"""The fast tier's fake API (tests/support/fake_api.py) answers as kube-apiserver 1.20 does: every
case of tests/support/fake_api_cases.py, which tests/world/selftest/test_fake_api_agrees.py runs
on the real server too, and the fake's own parts no real server needs checking for (its watch,
its view of what the caches keep, a test's edit as another writer).
"""

from __future__ import annotations

import pytest

from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from tests.support.fake_api import FakeApi, FakeView, ManagedBy
from tests.support.fake_api_cases import CASES, Case, config_map, statefulset

NS = "db"


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_the_fake_api_answers_as_the_api_server(case: Case) -> None:
    api = FakeApi()
    case(api, ManagedBy(api, "someone-else"), NS)


def test_a_watch_from_a_listed_version_shows_the_changes_after_it() -> None:
    api = FakeApi()
    api.create(config_map(NS, "before"))
    _, listed = api.list_objects(k.CONFIG_MAP, NS)
    api.create(config_map(NS, "after"))
    api.delete(k.CONFIG_MAP, NS, "before")
    events = [(type_, obj["metadata"]["name"]) for type_, obj in
              api.watch(k.CONFIG_MAP, listed, NS)]
    assert events == [("ADDED", "after"), ("DELETED", "before")]


def test_a_list_selects_by_label_and_namespace() -> None:
    api = FakeApi()
    for name, namespace, app in (("a", NS, "x"), ("b", NS, "y"), ("c", "elsewhere", "x")):
        obj = config_map(namespace, name)
        obj["metadata"]["labels"] = {"app": app}
        api.create(obj)
    items, _ = api.list_objects(k.CONFIG_MAP, NS, "app=x")
    assert [item["metadata"]["name"] for item in items] == ["a"]


def test_the_view_keeps_what_the_caches_keep_and_hands_out_copies() -> None:
    api = FakeApi()
    api.apply(statefulset(NS))
    view = FakeView(api)
    seen = view.get(k.STATEFUL_SET, NS, "db")
    assert seen is not None
    seen["spec"]["replicas"] = 9
    again = view.get(k.STATEFUL_SET, NS, "db")
    assert again is not None and again["spec"]["replicas"] == 1
    assert [obj["metadata"]["name"] for obj in view.list(k.STATEFUL_SET, NS)] == ["db"]


def test_an_edit_by_someone_else_is_a_write_with_its_own_manager() -> None:
    api = FakeApi()
    applied = api.apply(config_map(NS, colour="blue"))
    edited = api.edit(k.CONFIG_MAP, NS, "settings",
                      lambda obj: obj["data"].update(colour="red"), manager="kubectl-edit")
    assert int(edited["metadata"]["resourceVersion"]) > \
        int(applied["metadata"]["resourceVersion"])
    owners = {entry["manager"]: entry["fieldsV1"] for entry in
              edited["metadata"]["managedFields"]}
    assert owners["kubectl-edit"] == {"f:data": {"f:colour": {}}}
    assert "kaiwu-reconciler" not in owners, "the only field it owned was taken"
    with pytest.raises(ApiError) as caught:
        api.apply(config_map(NS, colour="blue"), force=False)
    assert caught.value.conflict

