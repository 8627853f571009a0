"""Stories about the controller's short memories (reconciler.controller.shared): dry runs asked
once per content, our own writes recognised while the watch cache catches up, which optional
kinds the API serves, drift announced once. Each memory on its own, over the fake API
(tests/support/fake_api.py), which counts what it is asked; the passes that use them:
test_drift_steps.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from reconciler import status as st
from reconciler.controller import shared
from reconciler.controller.shared import (
    ASK_AGAIN_S,
    DriftNotices,
    DryRuns,
    PendingActions,
    ServedKinds,
    WriteMarks,
)
from reconciler.drift.repair import Repairer
from reconciler.keys import ClusterKey, ObjectRef
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.client import Kube as KubeClient
from reconciler.kube.kinds import Kind
from reconciler.model import Obj, with_owner
from reconciler.settings import Settings
from tests.support.fake_api import FakeApi

ORDERS, SHOP = ClusterKey("db", "orders"), ClusterKey("db", "shop")


def service(port: int = 26257, **metadata: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "orders", "namespace": "db", "resourceVersion": "1",
                         **metadata},
            "spec": {"ports": [{"name": "sql", "port": port}]}}


class Server(FakeApi):
    """The fake API, answering dry runs with `refusal` when there is one; counts them
    (FakeApi.dry_runs)."""

    def __init__(self, refusal: ApiError | None = None) -> None:
        super().__init__()
        self.refusal = refusal

    @property
    def asked(self) -> int:
        return self.dry_runs

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        if dry_run and self.refusal is not None:
            self.dry_runs += 1
            raise self.refusal
        return super().apply(obj, dry_run=dry_run, force=force)


def spec_of(answer: Obj | ApiError) -> Any:
    assert isinstance(answer, dict), answer
    return answer["spec"]


def dry_runs(server: Server) -> DryRuns:
    return DryRuns(Repairer(cast(KubeClient, server)))


def test_an_unchanged_object_costs_one_dry_run_however_often_its_status_changes() -> None:
    server = Server()
    runs = dry_runs(server)
    desired, live = service(), service()
    assert spec_of(runs.run(desired, live)) == desired["spec"]
    busy = service(resourceVersion="2", managedFields=[{
        "manager": "kube-controller-manager", "time": "2027-01-15T08:00:00Z",
        "fieldsV1": {"f:status": {"f:loadBalancer": {}}}}])
    busy["status"] = {"loadBalancer": {}}
    assert spec_of(runs.run(desired, busy)) == desired["spec"]
    assert server.asked == 1
    # Someone else now owns a field of the content: that is new.
    owned = service(managedFields=[{"manager": "kubectl", "time": "2027-01-15T08:00:00Z",
                                    "fieldsV1": {"f:spec": {"f:ports": {}}}}])
    runs.run(desired, owned)
    assert server.asked == 2
    theirs = service(managedFields=[{"manager": "helm", "time": "2027-01-15T08:00:00Z",
                                     "fieldsV1": {"f:spec": {"f:ports": {}}}}])
    runs.run(desired, theirs)
    assert server.asked == 3, "another owner of the same field: asked again"
    runs.run(desired, service(port=1234))
    runs.run(service(port=1), service(port=1234))
    assert server.asked == 5
    cached = runs.cached(desired, service(port=1234))
    assert cached is not None and cached["spec"] == desired["spec"]
    assert runs.cached(desired, service(port=4321)) is None
    assert server.writes == [], "a dry run stores nothing"


@pytest.mark.parametrize("status", [400, 403, 409, 422])
def test_a_refused_dry_run_is_remembered_as_the_refusal(status: int) -> None:
    server = Server(ApiError(status, "Invalid", "no"))
    runs = dry_runs(server)
    first = runs.run(service(), service(port=1))
    assert isinstance(first, ApiError) and first.status == status
    assert runs.run(service(), service(port=1)) is first
    assert server.asked == 1
    assert runs.cached(service(), service(port=1)) is None, "no object to reuse"


def test_a_dry_run_the_server_failed_is_raised_and_asked_again() -> None:
    server = Server(ApiError(500, "InternalError", "etcd"))
    runs = dry_runs(server)
    for _ in range(2):
        with pytest.raises(ApiError):
            runs.run(service(), service(port=1))
    assert server.asked == 2


def test_remembered_dry_runs_are_bounded_and_the_least_used_goes_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared, "DRY_RUN_CACHE_SIZE", 2)
    server = Server()
    runs = dry_runs(server)
    runs.run(service(), service(port=1))
    runs.run(service(), service(port=2))
    runs.run(service(), service(port=1))  # used again: now the newest
    runs.run(service(), service(port=3))  # the oldest (port 2) goes
    assert server.asked == 3
    runs.run(service(), service(port=1))
    assert server.asked == 3
    runs.run(service(), service(port=2))
    assert server.asked == 4


def test_a_write_is_ours_on_its_way_while_the_cache_shows_what_it_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    marks = WriteMarks()
    before = service(resourceVersion="7")
    marks.wrote(ORDERS, "Service/orders", before)
    assert marks.stale(ORDERS, "Service/orders", before)
    assert not marks.stale(SHOP, "Service/orders", before), "another cluster's"
    assert not marks.stale(ORDERS, "Service/orders", service(resourceVersion="8"))
    # The cache showed our write once: the mark is gone, even if the old version came back.
    assert not marks.stale(ORDERS, "Service/orders", before)
    # A create replaced nothing: an absent object is our create on its way.
    marks.wrote(ORDERS, "Service/orders", None)
    assert marks.stale(ORDERS, "Service/orders", None)
    marks.forget(ORDERS)
    assert not marks.stale(ORDERS, "Service/orders", None)
    # For a few seconds only: the write may have failed on the way.
    marks.wrote(ORDERS, "Service/orders", before)
    marks.wrote(SHOP, "Service/orders", before)
    clock = time.monotonic() + shared.STALE_GRACE_S + 0.01
    monkeypatch.setattr(time, "monotonic", lambda: clock)
    assert not marks.stale(ORDERS, "Service/orders", before)
    monkeypatch.setattr(time, "monotonic", lambda: clock - 0.02)
    assert marks.stale(SHOP, "Service/orders", before)


def test_a_write_the_server_stored_as_a_no_op_is_not_waited_for() -> None:
    # No new resourceVersion, so no watch event will ever show it: waiting would re-run the
    # pass every STALE_RECHECK_S for the whole grace period.
    marks = WriteMarks()
    before = service(resourceVersion="7")
    marks.wrote(ORDERS, "Service/orders", before, after=service(resourceVersion="7"))
    assert not marks.stale(ORDERS, "Service/orders", before)
    marks.wrote(ORDERS, "Service/orders", before, after=service(resourceVersion="8"))
    assert marks.stale(ORDERS, "Service/orders", before)


def test_a_create_the_cache_does_not_show_yet_is_settled_by_one_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    api, marks = FakeApi(), WriteMarks()
    mark = "Service/orders"

    def in_flight() -> bool:
        return marks.in_flight(cast(KubeClient, api), ORDERS, mark, k.SERVICE, "db", "orders",
                               None)

    made = api.create(service())
    marks.wrote(ORDERS, mark, None, after=made)
    reads = api.get
    asked: list[str] = []

    def get(kind: Kind, namespace: str | None, name: str) -> Obj | None:
        asked.append(name)
        return reads(kind, namespace, name)
    monkeypatch.setattr(api, "get", get)
    assert in_flight(), "the server has it: on its way to the cache"
    assert in_flight() and asked == ["orders"], "not asked again within ASK_AGAIN_S"
    later = time.monotonic() + ASK_AGAIN_S
    monkeypatch.setattr(time, "monotonic", lambda: later)
    api.delete(k.SERVICE, "db", "orders")  # someone deleted it once the cache had shown it
    assert not in_flight(), "gone there too: missing now, made again at once"
    assert asked == ["orders", "orders"]
    assert not in_flight() and len(asked) == 2, "the mark is dropped"


class Kube(FakeApi):
    """The fake API serving only the kinds in `served` (a kind whose CRD is not installed is a
    404), or refusing every list with `error`; notes the kinds listed."""

    def __init__(self, served: set[str], error: ApiError | None = None) -> None:
        super().__init__()
        self.served, self.error = served, error
        self.lists: list[str] = []

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        self.lists.append(kind.kind)
        assert label_selector == "app.kubernetes.io/managed-by=kaiwu-operator"
        if self.error is not None:
            raise self.error
        if kind.kind not in self.served:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return super().list_objects(kind, namespace, label_selector, keep=keep)


class View:
    pass


class KnowingView:
    def served(self, kind: Kind) -> bool:
        return kind.kind == "ServiceMonitor"


def test_an_optional_kind_is_asked_about_once_per_resync_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(served={"ServiceMonitor"})
    kinds = ServedKinds(kube, View(), Settings(resync_period_s=60))  # type: ignore[arg-type]
    assert kinds.served(k.SERVICE, "db") and kube.lists == [], "always served: never asked"
    assert kinds.served(k.SERVICE_MONITOR, "db")
    assert kinds.served(k.SERVICE_MONITOR, "db")
    assert kube.lists == ["ServiceMonitor"]
    kube.served.clear()  # uninstalled
    assert not kinds.served(k.SERVICE_MONITOR, "other"), "another namespace: asked"
    assert kinds.served(k.SERVICE_MONITOR, "db"), "remembered until the next resync period"
    assert kube.lists == ["ServiceMonitor"] * 2
    later = time.monotonic() + 61
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert not kinds.served(k.SERVICE_MONITOR, "db")
    assert kube.lists == ["ServiceMonitor"] * 3


def test_what_is_served_is_asked_again_exactly_one_resync_period_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(served={"ServiceMonitor"})
    kinds = ServedKinds(kube, View(), Settings(resync_period_s=60))  # type: ignore[arg-type]
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    assert kinds.served(k.SERVICE_MONITOR, "db")
    clock[0] = 1059.5
    assert kinds.served(k.SERVICE_MONITOR, "db") and len(kube.lists) == 1
    clock[0] = 1060.0
    assert kinds.served(k.SERVICE_MONITOR, "db") and len(kube.lists) == 2


def test_a_kind_is_unserved_only_when_the_api_says_not_found() -> None:
    kinds = ServedKinds(cast(Any, Kube(set())), cast(Any, View()), Settings())
    assert not kinds.served(k.SERVICE_MONITOR, "db")
    refused = ServedKinds(cast(Any, Kube({"ServiceMonitor"}, ApiError(403, "Forbidden", "rbac"))),
                          cast(Any, View()), Settings())
    with pytest.raises(ApiError):
        refused.served(k.SERVICE_MONITOR, "db")


def test_caches_that_know_what_is_served_are_believed_without_a_request() -> None:
    kube = Kube(served=set())
    kinds = ServedKinds(kube, KnowingView(), Settings())  # type: ignore[arg-type]
    assert kinds.served(k.SERVICE_MONITOR, "db")
    assert not kinds.served(k.KAIWU_BACKUP, "db")
    assert kube.lists == []


def test_a_drift_is_announced_once_per_live_state_and_per_cluster() -> None:
    notices = DriftNotices()
    ref = ObjectRef("v1", "Service", "db", "orders")
    notices.note(ORDERS, ref, "sha256:a")
    assert notices.seen(ORDERS, ref, "sha256:a")
    assert not notices.seen(ORDERS, ref, "sha256:b")
    assert not notices.seen(SHOP, ref, "sha256:a")
    notices.note(SHOP, ref, "sha256:a")
    notices.clear(ORDERS, ref)
    assert not notices.seen(ORDERS, ref, "sha256:a")
    notices.note(ORDERS, ref, "sha256:a")
    notices.forget(ORDERS)
    assert not notices.seen(ORDERS, ref, "sha256:a")
    assert notices.seen(SHOP, ref, "sha256:a")


def test_actions_whose_report_waited_are_handed_to_the_next_pass_once() -> None:
    pending = PendingActions()
    action = st.Action("2027-01-15T08:00:00Z", "Pruned", "Service/old", "deleted")
    pending.keep(ORDERS, [action])
    assert pending.take(SHOP) == []
    assert pending.take(ORDERS) == [action]
    assert pending.take(ORDERS) == []
    pending.keep(ORDERS, [action])
    pending.forget(ORDERS)
    assert pending.take(ORDERS) == []


def test_an_owned_copy_names_its_cluster_as_controller_and_leaves_the_original() -> None:
    cluster = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
               "metadata": {"name": "orders", "namespace": "db", "uid": "u-1"}}
    obj = service()
    owned = with_owner(obj, cluster)
    assert owned["metadata"]["ownerReferences"] == [{
        "apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster", "name": "orders",
        "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]
    assert "ownerReferences" not in obj["metadata"]
    assert owned["spec"] == obj["spec"]
