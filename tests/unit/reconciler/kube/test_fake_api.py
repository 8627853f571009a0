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


def watched(api: FakeApi, version: str, labels: str | None = None) -> list[tuple[str, str]]:
    """(type, name or resourceVersion) of a watch's events, from `version` until it ends."""
    return [(type_, obj["metadata"].get("name") or obj["metadata"]["resourceVersion"])
            for type_, obj in api.watch(k.CONFIG_MAP, version, NS, labels)]


def test_a_watch_from_a_listed_version_shows_the_changes_after_it_then_a_bookmark() -> None:
    api = FakeApi()
    api.create(config_map(NS, "before"))
    _, listed = api.list_objects(k.CONFIG_MAP, NS)
    api.create(config_map(NS, "after"))
    api.delete(k.CONFIG_MAP, NS, "before")
    api.create(config_map("elsewhere", "unwatched"))
    assert watched(api, listed) == [("ADDED", "after"), ("DELETED", "before"),
                                    ("BOOKMARK", str(api.revision))], \
        "the bookmark carries the kind's last change, in any namespace"
    assert watched(api, str(api.revision)) == [], "nothing newer: no bookmark either"
    assert [type_ for type_, _ in api.watch(k.SECRET, listed)] == [], \
        "a kind with no change since the cache started has no bookmark"
    assert [type_ for type_, _ in api.watch(k.CONFIG_MAP, listed, timeout_seconds=2)] == [
        "ADDED", "DELETED", "ADDED"], "no bookmark for a watch of 2 s or less"
    assert watched(api, "0") == [("ADDED", "after"), ("BOOKMARK", str(api.revision))], \
        "from version 0: what is there now"
    api.end_early()
    assert watched(api, listed) == [("ADDED", "after"), ("DELETED", "before")], \
        "a watch the server ends before its deadline has no bookmark"
    assert watched(api, listed)[-1] == ("BOOKMARK", str(api.revision)), "the next one has"


def test_a_deleted_objects_event_carries_the_revision_of_its_deletion() -> None:
    api = FakeApi()
    made = api.create(config_map(NS, "gone"))
    _, listed = api.list_objects(k.CONFIG_MAP, NS)
    api.delete(k.CONFIG_MAP, NS, "gone")
    (type_, obj), _ = api.watch(k.CONFIG_MAP, listed, NS)
    assert type_ == "DELETED" and obj["metadata"]["resourceVersion"] == str(api.revision) \
        != made["metadata"]["resourceVersion"]
    assert obj["data"] == made["data"], "the object as it was"


def test_a_change_into_or_out_of_a_watchs_selection_is_an_add_or_a_delete() -> None:
    api = FakeApi()
    api.create(config_map(NS, "a"))
    _, listed = api.list_objects(k.CONFIG_MAP, NS)
    api.edit(k.CONFIG_MAP, NS, "a", lambda obj: obj["metadata"].update(labels={"app": "x"}))
    relabelled = api.revision
    api.edit(k.CONFIG_MAP, NS, "a", lambda obj: obj["data"].update(colour="red"))
    api.edit(k.CONFIG_MAP, NS, "a", lambda obj: obj["metadata"].update(labels={"app": "y"}))
    assert watched(api, listed, "app=x") == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a"), ("BOOKMARK", str(api.revision))]
    assert watched(api, str(relabelled), "app=y") == [
        ("ADDED", "a"), ("BOOKMARK", str(api.revision))]


def test_a_watch_from_before_the_history_held_is_gone() -> None:
    api = FakeApi()
    api.create(config_map(NS, "a"))
    _, listed = api.list_objects(k.CONFIG_MAP, NS)
    api.create(config_map(NS, "b"))
    api.compact()
    with pytest.raises(ApiError) as caught:
        api.watch(k.CONFIG_MAP, listed, NS)
    assert caught.value.gone and caught.value.message == \
        f"too old resource version: {listed} ({api.revision})"
    assert watched(api, str(api.revision)) == [], "from the newest version: nothing missed"
    api.create(config_map(NS, "c"))
    assert watched(api, str(api.revision - 1)) == [("ADDED", "c"),
                                                   ("BOOKMARK", str(api.revision))]


def test_calls_fail_as_told_and_an_unserved_kind_is_not_found() -> None:
    api = FakeApi()
    api.fail("watch", ConnectionRefusedError("connection refused"),
             ApiError(500, "InternalError", "etcd"))
    with pytest.raises(ConnectionRefusedError):
        api.watch(k.CONFIG_MAP, "1")
    with pytest.raises(ApiError, match="etcd"):
        api.watch(k.CONFIG_MAP, "1")
    assert list(api.watch(k.CONFIG_MAP, str(api.revision))) == [], "then answered again"
    api.unserved.add(k.SERVICE_MONITOR.kind)
    for call in (lambda: api.list_objects(k.SERVICE_MONITOR),
                 lambda: api.watch(k.SERVICE_MONITOR, "1")):
        with pytest.raises(ApiError) as caught:
            call()
        assert caught.value.not_found
    with pytest.raises(ValueError, match="'get' is not a call that can fail here"):
        api.fail("get", ConnectionRefusedError())


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

