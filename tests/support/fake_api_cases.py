"""What the fast tier's fake API (tests/support/fake_api.py) must answer as kube-apiserver does:
one table of cases, each a short story against an API with `Kube`'s calls.

tests/unit/reconciler/kube/test_fake_api.py runs every case on a `FakeApi`;
tests/world/selftest/test_fake_api_agrees.py runs the same cases on the test world's
kube-apiserver through `reconciler.kube.client.Kube`, so a behaviour the fake models and the
real server does not share fails there. A case gets `api` (under the reconciler's field
manager), `other` (the same API under the field manager "someone-else", as a person's kubectl
would be) and a namespace to work in.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.model import Obj

HOLD = "kaiwu.inspur.com/test-hold"


class Api(Protocol):
    """The calls of reconciler.kube.client.Kube the cases make."""

    field_manager: str

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None: ...
    def create(self, obj: Obj) -> Obj: ...
    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj: ...
    def replace(self, obj: Obj) -> Obj: ...
    def replace_status(self, obj: Obj) -> Obj: ...
    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
              subresource: str = "") -> Obj: ...
    def json_patch(self, kind: Kind, namespace: str | None, name: str,
                   operations: list[Obj]) -> Obj: ...
    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None,
               propagation: str | None = None) -> bool: ...


Case = Callable[[Api, Api, str], None]


def config_map(namespace: str, name: str = "settings", **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": dict(data)}


def statefulset(namespace: str, name: str = "db", replicas: int = 1,
                env: list[Obj] | None = None) -> Obj:
    container: Obj = {"name": "kwbase", "image": "kwdb/kwdb:3.2.1"}
    if env is not None:
        container["env"] = env
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [container]}}}}


def service(namespace: str, name: str = "front") -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}}


def pod(namespace: str, name: str = "worker", node: str = "node-a") -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "busybox"}]}}


def refused(call: Callable[[], Any], status: int, reason: str) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    assert (caught.value.status, caught.value.reason) == (status, reason), caught.value
    return caught.value


def version(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


# ---- the cases ---------------------------------------------------------------------------

def every_write_returns_a_new_resource_version(api: Api, other: Api, ns: str) -> None:
    created = api.create(config_map(ns, colour="blue"))
    patched = api.patch(k.CONFIG_MAP, ns, "settings", {"data": {"colour": "red"}})
    assert version(patched) > version(created)
    stored = api.get(k.CONFIG_MAP, ns, "settings")
    assert stored is not None and stored["metadata"]["resourceVersion"] == \
        patched["metadata"]["resourceVersion"]


def an_update_from_a_stale_read_is_a_conflict(api: Api, other: Api, ns: str) -> None:
    read = api.create(config_map(ns, colour="blue"))
    other.patch(k.CONFIG_MAP, ns, "settings", {"data": {"colour": "green"}})
    stale = copy.deepcopy(read)
    stale["data"]["colour"] = "red"
    error = refused(lambda: api.replace(stale), 409, "Conflict")
    assert "the object has been modified" in error.message
    stored = api.get(k.CONFIG_MAP, ns, "settings")
    assert stored is not None and stored["data"] == {"colour": "green"}


def a_merge_patch_naming_an_old_version_is_a_conflict(api: Api, other: Api, ns: str) -> None:
    read = api.create(config_map(ns, colour="blue"))
    other.patch(k.CONFIG_MAP, ns, "settings", {"data": {"colour": "green"}})
    refused(lambda: api.patch(k.CONFIG_MAP, ns, "settings", {
        "metadata": {"resourceVersion": read["metadata"]["resourceVersion"]},
        "data": {"colour": "red"}}), 409, "Conflict")


def a_put_without_a_resource_version_is_unconditional(api: Api, other: Api, ns: str) -> None:
    api.create(config_map(ns, colour="blue"))
    other.patch(k.CONFIG_MAP, ns, "settings", {"data": {"colour": "green"}})
    replaced = api.replace(config_map(ns, colour="red"))
    assert replaced["data"] == {"colour": "red"}


def creating_a_name_that_exists_is_already_exists(api: Api, other: Api, ns: str) -> None:
    api.create(config_map(ns))
    refused(lambda: api.create(config_map(ns)), 409, "AlreadyExists")


def a_missing_object_reads_as_none_and_cannot_be_patched(api: Api, other: Api, ns: str) -> None:
    assert api.get(k.CONFIG_MAP, ns, "nowhere") is None
    refused(lambda: api.patch(k.CONFIG_MAP, ns, "nowhere", {"data": {"a": "b"}}), 404,
            "NotFound")
    refused(lambda: api.replace(config_map(ns, "nowhere")), 404, "NotFound")
    assert api.delete(k.CONFIG_MAP, ns, "nowhere") is False


def a_null_in_a_merge_patch_removes_the_key(api: Api, other: Api, ns: str) -> None:
    obj = config_map(ns, keep="1", drop="2")
    obj["metadata"]["labels"] = {"a": "1", "b": "2"}
    api.create(obj)
    patched = api.patch(k.CONFIG_MAP, ns, "settings", {
        "metadata": {"labels": {"b": None, "c": "3"}}, "data": {"drop": None}})
    assert patched["data"] == {"keep": "1"}
    assert patched["metadata"]["labels"] == {"a": "1", "c": "3"}


def a_json_patch_whose_test_fails_changes_nothing(api: Api, other: Api, ns: str) -> None:
    created = api.create(config_map(ns, colour="blue"))
    refused(lambda: api.json_patch(k.CONFIG_MAP, ns, "settings", [
        {"op": "test", "path": "/data/colour", "value": "red"},
        {"op": "remove", "path": "/data/colour"}]), 422, "Invalid")
    patched = api.json_patch(k.CONFIG_MAP, ns, "settings", [
        {"op": "test", "path": "/data/colour", "value": "blue"},
        {"op": "remove", "path": "/data/colour"}])
    assert "colour" not in (patched.get("data") or {})
    assert version(patched) > version(created)


def a_finalizer_holds_a_deleted_object_until_it_is_removed(api: Api, other: Api,
                                                           ns: str) -> None:
    obj = config_map(ns)
    obj["metadata"]["finalizers"] = [HOLD]
    api.create(obj)
    assert api.delete(k.CONFIG_MAP, ns, "settings") is True
    held = api.get(k.CONFIG_MAP, ns, "settings")
    assert held is not None and held["metadata"].get("deletionTimestamp")
    assert held["metadata"]["finalizers"] == [HOLD]
    api.patch(k.CONFIG_MAP, ns, "settings", {"metadata": {"finalizers": None}})
    assert api.get(k.CONFIG_MAP, ns, "settings") is None


def a_delete_for_another_uid_is_a_conflict(api: Api, other: Api, ns: str) -> None:
    api.create(config_map(ns))
    refused(lambda: api.delete(k.CONFIG_MAP, ns, "settings", uid="not-this-one"), 409,
            "Conflict")
    stored = api.get(k.CONFIG_MAP, ns, "settings")
    assert stored is not None
    assert api.delete(k.CONFIG_MAP, ns, "settings", uid=stored["metadata"]["uid"]) is True
    assert api.get(k.CONFIG_MAP, ns, "settings") is None


def a_scheduled_pod_is_deleted_gracefully(api: Api, other: Api, ns: str) -> None:
    api.create(pod(ns))
    assert api.delete(k.POD, ns, "worker") is True
    terminating = api.get(k.POD, ns, "worker")
    assert terminating is not None, "the kubelet has its grace period to stop it"
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    assert api.delete(k.POD, ns, "worker", grace_period_seconds=0) is True
    assert api.get(k.POD, ns, "worker") is None


def a_write_to_the_object_keeps_its_status_and_a_status_write_only_its_status(
        api: Api, other: Api, ns: str) -> None:
    # A Service: no controller of the test world writes a ClusterIP Service's status.
    given = service(ns)
    given["status"] = {"loadBalancer": {"ingress": [{"ip": "10.9.9.9"}]}}
    created = api.create(given)
    assert not (created.get("status") or {}).get("loadBalancer"), \
        "status comes from /status only"
    with_status = copy.deepcopy(created)
    with_status["status"] = {"loadBalancer": {"ingress": [{"ip": "10.1.1.1"}]}}
    with_status["spec"]["selector"] = {"app": "elsewhere"}
    written = api.replace_status(with_status)
    assert written["status"]["loadBalancer"]["ingress"] == [{"ip": "10.1.1.1"}]
    assert written["spec"]["selector"] == {"app": "front"}, "a status write keeps the spec"
    changed = copy.deepcopy(written)
    changed["status"] = {"loadBalancer": {}}
    changed["metadata"]["labels"] = {"from": "object-write"}
    replaced = api.replace(changed)
    assert replaced["metadata"]["labels"] == {"from": "object-write"}
    assert replaced["status"]["loadBalancer"]["ingress"] == [{"ip": "10.1.1.1"}], \
        "a write to the object keeps its status"
    patched = api.patch(k.SERVICE, ns, "front", {"status": {"loadBalancer": None}},
                        subresource="status")
    assert not (patched.get("status") or {}).get("loadBalancer")


def a_status_write_to_a_custom_resource_changes_only_its_status(api: Api, other: Api,
                                                                 ns: str) -> None:
    created = api.create({"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                          "metadata": {"name": "shop", "namespace": ns},
                          "spec": {"replicas": 3}})
    sent = copy.deepcopy(created)
    sent["status"] = {"phase": "Running"}
    sent["metadata"]["labels"] = {"from": "status-write"}
    sent["spec"]["replicas"] = 5
    written = api.replace_status(sent)
    assert written["status"]["phase"] == "Running"
    assert "labels" not in written["metadata"] and written["spec"]["replicas"] == 3
    assert written["metadata"]["generation"] == created["metadata"]["generation"]


def a_spec_change_makes_a_new_generation_and_a_label_does_not(api: Api, other: Api,
                                                              ns: str) -> None:
    created = api.apply(statefulset(ns))
    assert created["metadata"]["generation"] == 1
    labelled = api.patch(k.STATEFUL_SET, ns, "db", {"metadata": {"labels": {"x": "1"}}})
    assert labelled["metadata"]["generation"] == 1
    scaled = api.patch(k.STATEFUL_SET, ns, "db", {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] == 2


def what_a_caller_does_to_an_answer_is_not_stored(api: Api, other: Api, ns: str) -> None:
    sent = config_map(ns, colour="blue")
    got = api.create(sent)
    sent["data"]["colour"] = "sent-changed"
    got["data"]["colour"] = "answer-changed"
    read = api.get(k.CONFIG_MAP, ns, "settings")
    assert read is not None and read["data"] == {"colour": "blue"}
    read["data"]["colour"] = "read-changed"
    again = api.get(k.CONFIG_MAP, ns, "settings")
    assert again is not None and again["data"] == {"colour": "blue"}


def an_apply_that_changes_nothing_keeps_the_resource_version(api: Api, other: Api,
                                                             ns: str) -> None:
    first = api.apply(config_map(ns, colour="blue"))
    again = api.apply(config_map(ns, colour="blue"))
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def a_dry_run_answers_the_result_and_stores_nothing(api: Api, other: Api, ns: str) -> None:
    api.apply(config_map(ns, colour="blue", size="s"))
    before = other.apply(config_map(ns, owner="other"))
    answer = api.apply(config_map(ns, colour="red"), dry_run=True)
    assert answer["data"] == {"colour": "red", "owner": "other"}, \
        "the merged object, not what was sent: size (ours, dropped) gone, owner kept"
    stored = api.get(k.CONFIG_MAP, ns, "settings")
    assert stored is not None and stored["data"] == {"colour": "blue", "size": "s",
                                                     "owner": "other"}
    assert version(stored) == version(before)


def an_apply_keeps_fields_other_managers_own_and_drops_its_own_left_out(
        api: Api, other: Api, ns: str) -> None:
    api.apply(config_map(ns, colour="blue", size="s"))
    other.apply(config_map(ns, owner="other"))
    applied = api.apply(config_map(ns, colour="blue"))
    assert applied["data"] == {"colour": "blue", "owner": "other"}
    managers = {entry["manager"] for entry in applied["metadata"]["managedFields"]}
    assert {"kaiwu-reconciler", "someone-else"} <= managers


def an_apply_over_another_managers_value_conflicts_unless_forced(api: Api, other: Api,
                                                                  ns: str) -> None:
    api.apply(config_map(ns, colour="blue"))
    error = refused(lambda: other.apply(config_map(ns, colour="red"), force=False), 409,
                    "Conflict")
    assert "kaiwu-reconciler" in error.message
    same = other.apply(config_map(ns, colour="blue"), force=False)
    assert same["data"] == {"colour": "blue"}, "the same value is shared, no conflict"
    taken = other.apply(config_map(ns, colour="red"), force=True)
    assert taken["data"] == {"colour": "red"}
    # Forced: the field is someone-else's now, so our next apply without it leaves it.
    mine = api.apply(config_map(ns, size="s"))
    assert mine["data"] == {"colour": "red", "size": "s"}


def an_apply_merges_list_items_by_name(api: Api, other: Api, ns: str) -> None:
    api.apply(statefulset(ns, env=[{"name": "OURS", "value": "1"}]))
    hand = statefulset(ns, env=[{"name": "DEBUG", "value": "1"}])
    del hand["spec"]["replicas"], hand["spec"]["serviceName"]
    hand["spec"]["template"]["spec"]["containers"][0].pop("image")
    other.apply(hand)
    applied = api.apply(statefulset(ns, replicas=2, env=[{"name": "OURS", "value": "2"}]))
    env = applied["spec"]["template"]["spec"]["containers"][0]["env"]
    assert sorted((item["name"], item["value"]) for item in env) == [("DEBUG", "1"),
                                                                    ("OURS", "2")]
    assert applied["spec"]["replicas"] == 2


CASES: tuple[Case, ...] = (
    every_write_returns_a_new_resource_version,
    an_update_from_a_stale_read_is_a_conflict,
    a_merge_patch_naming_an_old_version_is_a_conflict,
    a_put_without_a_resource_version_is_unconditional,
    creating_a_name_that_exists_is_already_exists,
    a_missing_object_reads_as_none_and_cannot_be_patched,
    a_null_in_a_merge_patch_removes_the_key,
    a_json_patch_whose_test_fails_changes_nothing,
    a_finalizer_holds_a_deleted_object_until_it_is_removed,
    a_delete_for_another_uid_is_a_conflict,
    a_scheduled_pod_is_deleted_gracefully,
    a_write_to_the_object_keeps_its_status_and_a_status_write_only_its_status,
    a_status_write_to_a_custom_resource_changes_only_its_status,
    a_spec_change_makes_a_new_generation_and_a_label_does_not,
    what_a_caller_does_to_an_answer_is_not_stored,
    an_apply_that_changes_nothing_keeps_the_resource_version,
    a_dry_run_answers_the_result_and_stores_nothing,
    an_apply_keeps_fields_other_managers_own_and_drops_its_own_left_out,
    an_apply_over_another_managers_value_conflicts_unless_forced,
    an_apply_merges_list_items_by_name,
)
