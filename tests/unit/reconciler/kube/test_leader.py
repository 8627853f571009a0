"""Stories of leader election's rules (reconciler.kube.leader), on a fake clock: who may take the
Lease and when, what a renewal and a take-over write, when a leader must stop writing, and how it
hands the Lease over on shutdown.

`LeaseStore` keeps the one Lease the way the elector reads and writes it (get, create, merge
patch), with the API server's optimistic concurrency: a write carrying an old resourceVersion,
or a create of a Lease that exists, is a 409. The real API server's answers to these requests
are in tests/world_stories/ (two reconcilers competing for one Lease).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.kube.client import ApiError, Kube
from reconciler.kube.kinds import LEASE, Kind
from reconciler.kube.leader import (
    Attempt,
    GuardedKube,
    LeaderElector,
    NotLeaderError,
    NotOwnerError,
)
from reconciler.metrics import NAMESPACE, Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from tests.support.client_pool import Pool, api_client, sts

START = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """Monotonic seconds and the wall clock, moved together by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return START + timedelta(seconds=self.now - 100.0)


class LeaseStore:
    """One Lease, with resourceVersions; `down` makes every request fail, `errors` the next
    writes answer with these HTTP statuses, one each."""

    def __init__(self) -> None:
        self.lease: Obj | None = None
        self.version = 0
        self.down = False
        self.errors: list[int | Exception] = []
        self.gets = 0
        self.writes = 0
        self.meanwhile: Callable[[], None] | None = None  # another replica's write, next

    def _request(self) -> None:
        if self.down:
            raise ConnectionRefusedError("connection refused")

    def _write(self) -> None:
        self._request()
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        self.writes += 1
        if self.errors:
            error = self.errors.pop(0)
            raise error if isinstance(error, Exception) else ApiError(error, "Error", "refused")

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        assert (kind, namespace, name) == (LEASE, "kaiwu-system", "kaiwu-reconciler")
        self._request()
        self.gets += 1
        return copy.deepcopy(self.lease)

    def create(self, obj: Obj) -> Obj:
        self._write()
        if self.lease is not None:
            raise ApiError(409, "AlreadyExists", "leases already exists")
        self.version += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    def patch(self, kind: Kind, namespace: str, name: str, patch: Obj) -> Obj:
        assert (kind, namespace, name) == (LEASE, "kaiwu-system", "kaiwu-reconciler")
        self._write()
        assert self.lease is not None
        if patch["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        self.version += 1
        self.lease["spec"].update(patch["spec"])
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    def held_by(self, holder: str, renew: str = "2025-12-31T23:59:59.000000Z",
                duration: int = 15, transitions: int = 4) -> None:
        """Another replica's Lease, as it wrote it."""
        self.version += 1
        self.lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": "kaiwu-reconciler", "namespace": "kaiwu-system",
                                   "resourceVersion": str(self.version)},
                      "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                               "acquireTime": "2025-12-31T00:00:00.000000Z",
                               "renewTime": renew, "leaseTransitions": transitions}}

    @property
    def spec(self) -> dict[str, Any]:
        assert self.lease is not None
        return dict(self.lease["spec"])


class Candidate:
    """One replica's elector over the store, with what its callbacks saw."""

    def __init__(self, store: LeaseStore, clock: Clock, identity: str = "replica-a",
                 **settings: Any) -> None:
        self.events: list[str] = []
        self.metrics = Metrics()
        self.fail_start = False
        self.settings = Settings(**{"identity": identity, "lease_namespace": "kaiwu-system",
                                    "lease_duration_s": 15.0, "renew_deadline_s": 10.0,
                                    "retry_period_s": 2.0, **settings})
        self.elector = LeaderElector(store, self.settings,  # type: ignore[arg-type]
                                     on_started_leading=self._started,
                                     on_stopped_leading=lambda: self.events.append("stopped"),
                                     metrics=self.metrics, clock=clock, wall=clock.wall)

    def _started(self) -> None:
        self.events.append("started")
        if self.fail_start:
            raise RuntimeError("workers could not start")

    def gauge(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(f"{NAMESPACE}_{name}") or 0.0


def test_the_first_replica_creates_the_lease_and_leads() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock, lease_duration_s=14.2, renew_deadline_s=10.0)
    assert a.elector.step() is Attempt.HELD
    assert store.lease == {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kaiwu-reconciler", "namespace": "kaiwu-system",
                     "resourceVersion": "1"},
        "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15,
                 "acquireTime": "2026-01-01T00:00:00.000000Z",
                 "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 0}}
    assert a.elector.is_leader() and a.elector.holder == "replica-a"
    assert a.events == ["started"] and a.elector.became_leader_at == 100.0
    assert a.gauge("leader") == 1 and a.gauge("leader_transitions_total") == 1


def test_a_renewal_moves_only_the_renew_time() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    clock.now += 2.5
    assert a.elector.step() is Attempt.HELD
    assert store.spec["renewTime"] == "2026-01-01T00:00:02.500000Z"
    assert store.spec["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    assert store.spec["leaseTransitions"] == 0
    assert a.events == ["started"], "leading once, not again at each renewal"
    assert a.gauge("leader_transitions_total") == 1


def test_a_standby_waits_a_whole_lease_duration_after_it_last_saw_the_lease_change() -> None:
    store, clock = LeaseStore(), Clock()
    store.held_by("replica-b")
    a = Candidate(store, clock)
    assert a.elector.step() is Attempt.OTHER  # t=100
    assert not a.elector.is_leader() and a.elector.holder == "replica-b"
    clock.now += 10
    store.held_by("replica-b", renew="2026-01-01T00:00:10.000000Z")  # b renews at 110
    clock.now += 4
    assert a.elector.step() is Attempt.OTHER  # a sees the renewal at 114
    writes = store.writes
    clock.now += 14  # 28 s after a first saw the Lease, 14 after it saw it change
    assert a.elector.step() is Attempt.OTHER
    assert store.writes == writes, "a standby never writes a Lease that is still valid"
    clock.now += 1  # a whole duration since a saw it change (though only 19 s since b's)
    assert a.elector.step() is Attempt.HELD
    assert store.spec["holderIdentity"] == "replica-a"


def test_a_lease_nobody_renewed_for_its_duration_is_taken_over() -> None:
    store, clock = LeaseStore(), Clock()
    store.held_by("replica-b", duration=20, transitions=4)
    a = Candidate(store, clock)
    assert a.elector.holder == "", "nobody seen before the first read"
    a.elector.step()
    clock.now += 19  # past our duration (15), not b's own
    assert a.elector.step() is Attempt.OTHER
    clock.now += 1
    assert a.elector.step() is Attempt.HELD
    assert store.spec == {"holderIdentity": "replica-a", "leaseDurationSeconds": 15,
                          "acquireTime": "2026-01-01T00:00:20.000000Z",
                          "renewTime": "2026-01-01T00:00:20.000000Z", "leaseTransitions": 5}
    assert a.events == ["started"]


@pytest.mark.parametrize("change", [{"holder": "replica-c"}, {"duration": 20},
                                    {"transitions": 5}])
def test_any_change_to_the_lease_counts_as_a_sign_of_life(change: dict[str, Any]) -> None:
    store, clock = LeaseStore(), Clock()
    renew = "2025-12-31T23:59:59.000000Z"
    store.held_by("replica-b", renew=renew)
    a = Candidate(store, clock)
    a.elector.step()  # t=100
    clock.now += 10
    store.held_by(**{"holder": "replica-b", "renew": renew, **change})
    assert a.elector.step() is Attempt.OTHER  # seen changed at 110
    clock.now += 10
    assert a.elector.step() is Attempt.OTHER, "20 s since a first saw it, 10 since it changed"


def test_a_released_lease_is_taken_at_once() -> None:
    store, clock = LeaseStore(), Clock()
    store.held_by("", duration=1, transitions=2)
    a = Candidate(store, clock)
    assert a.elector.step() is Attempt.HELD
    assert store.spec["holderIdentity"] == "replica-a" and store.spec["leaseTransitions"] == 3


def test_a_lease_without_a_duration_counts_for_ours() -> None:
    store, clock = LeaseStore(), Clock()
    store.held_by("replica-b", duration=0)
    a = Candidate(store, clock)
    a.elector.step()
    clock.now += 14.9
    assert a.elector.step() is Attempt.OTHER
    clock.now += 0.1
    assert a.elector.step() is Attempt.HELD


def test_a_take_over_loses_to_a_renewal_made_after_it_read_the_lease() -> None:
    store, clock = LeaseStore(), Clock()
    store.held_by("replica-b")
    a = Candidate(store, clock)
    a.elector.step()
    clock.now += 15
    # b renews between a's read (of an expired Lease) and a's write.
    store.meanwhile = lambda: store.held_by("replica-b", renew="2026-01-01T00:00:15.000000Z")
    assert a.elector.step() is Attempt.FAILED
    assert not a.elector.is_leader() and store.spec["holderIdentity"] == "replica-b"
    assert a.events == []


def test_a_create_that_loses_the_race_is_retried_not_an_error() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    store.errors = [409]
    assert a.elector.step() is Attempt.FAILED
    assert not a.elector.is_leader()
    store.errors = [500]
    assert a.elector.step() is Attempt.FAILED  # logged and retried
    assert a.elector.step() is Attempt.HELD


def test_a_leader_that_sees_another_holder_stops_at_once() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    store.held_by("replica-b", renew="2026-01-01T00:00:01.000000Z")
    clock.now += 2
    assert a.elector.step() is Attempt.OTHER
    assert not a.elector.is_leader() and a.events == ["started", "stopped"]
    assert a.gauge("leader") == 0


def test_a_leader_that_cannot_renew_stops_writing_at_the_renew_deadline() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    store.down = True
    clock.now += 9.9
    assert a.elector.step() is Attempt.FAILED
    assert a.elector.is_leader() and a.events == ["started"]
    clock.now += 0.1
    # Even before the renewing thread gets to decide, writes stop.
    assert not a.elector.is_leader()
    assert a.elector.step() is Attempt.FAILED
    assert a.events == ["started", "stopped"]


def test_a_leader_renews_with_one_write_and_reads_the_lease_only_when_that_fails() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    gets, writes = store.gets, store.writes
    for _ in range(3):
        clock.now += 2
        assert a.elector.step() is Attempt.HELD
    assert (store.gets - gets, store.writes - writes) == (0, 3), "one request per renewal"
    # The write as last written fails (here a conflict: someone touched the Lease, say an
    # administrator's label): the leader reads the Lease and renews it in the same round.
    store.lease["metadata"]["resourceVersion"] = "99"  # type: ignore[index]
    clock.now += 2
    assert a.elector.step() is Attempt.HELD
    assert store.spec["renewTime"] == "2026-01-01T00:00:08.000000Z"
    assert a.events == ["started"]


def test_a_renewal_that_times_out_fails_its_round_and_the_next_reads_the_lease() -> None:
    """One round never spends more than two requests' time-outs: a fast-path write that times
    out is not followed by a read and a second write in the same round."""
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    gets, writes = store.gets, store.writes
    store.errors = [TimeoutError("read timed out")]
    clock.now += 2
    assert a.elector.step() is Attempt.FAILED
    assert (store.gets - gets, store.writes - writes) == (0, 1), "one request only"
    assert a.elector.is_leader(), "within the renew deadline"
    clock.now += 2
    assert a.elector.step() is Attempt.HELD
    assert store.gets - gets == 1, "the next round reads the Lease first"


def test_a_conflict_renewing_is_no_reason_to_stop_before_the_deadline() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    clock.now += 2
    store.errors = [409, 409]  # the write as last written, then the one after reading
    assert a.elector.step() is Attempt.FAILED
    assert a.elector.is_leader()
    clock.now += 2
    assert a.elector.step() is Attempt.HELD


def test_shutting_down_stops_the_workers_then_releases_the_lease() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    clock.now += 3
    a.elector.stop()
    assert a.events == ["started", "stopped"]
    assert store.spec["holderIdentity"] == "" and store.spec["leaseDurationSeconds"] == 1
    assert store.spec["renewTime"] == store.spec["acquireTime"] == "2026-01-01T00:00:03.000000Z"
    b = Candidate(store, clock, "replica-b")
    assert b.elector.step() is Attempt.HELD, "a standby takes it at its next retry"


def test_a_standby_shutting_down_leaves_the_lease_alone() -> None:
    store, clock = LeaseStore(), Clock()
    store.held_by("replica-b")
    a = Candidate(store, clock)
    a.elector.step()
    writes = store.writes
    a.elector.stop()
    assert store.writes == writes and store.spec["holderIdentity"] == "replica-b"
    assert a.events == []


def test_a_lease_taken_meanwhile_is_not_released(caplog: pytest.LogCaptureFixture) -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    store.held_by("replica-b")
    a.elector.stop()
    assert store.spec["holderIdentity"] == "replica-b"


def test_a_release_that_conflicts_is_tried_again_and_a_failing_one_is_left_to_expire(
        caplog: pytest.LogCaptureFixture) -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    store.errors = [409]
    a.elector.stop()
    assert store.spec["holderIdentity"] == ""

    b = Candidate(store, clock, "replica-b")
    b.elector.step()
    store.errors = [500]
    with caplog.at_level(logging.WARNING, logger="reconciler.kube.leader"):
        b.elector.stop()
    assert store.spec["holderIdentity"] == "replica-b"
    assert "releasing the lease failed" in caplog.text

    c = Candidate(store, clock, "replica-c")
    c.elector.step()
    clock.now += 15
    assert c.elector.step() is Attempt.HELD
    store.down = True
    with caplog.at_level(logging.WARNING, logger="reconciler.kube.leader"):
        c.elector.stop()  # a connection error: logged, not raised
    assert store.spec["holderIdentity"] == "replica-c"
    warned = [r for r in caplog.records
              if r.getMessage() == "releasing the lease failed; it expires by itself"]
    assert [getattr(r, "error", "") for r in warned] == [
        "HTTP 500 Error: refused", "connection refused"]


def test_stopping_without_release_keeps_the_lease_until_it_expires() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.step()
    a.elector.stop(release=False)
    assert a.events == ["started", "stopped"] and store.spec["holderIdentity"] == "replica-a"


def test_a_replica_whose_workers_fail_to_start_gives_the_lease_up() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.fail_start = True
    a.elector.step()
    assert a.events == ["started", "stopped"] and not a.elector.is_leader()
    assert store.spec["holderIdentity"] == ""


def test_a_stopped_elector_does_not_start_leading() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)
    a.elector.stop()
    assert a.elector.step() is Attempt.HELD
    assert a.events == [] and not a.elector.is_leader()


def test_a_deposed_leader_cannot_write_through_its_guarded_kube() -> None:
    leading = {"now": False}
    kube = GuardedKube(None, "kaiwu-reconciler", 1.0, may_write=lambda: leading["now"])
    for method in ("POST", "PUT", "patch", "DELETE"):
        with pytest.raises(NotLeaderError, match="not the leader"):
            kube._request(method, "/api/v1/namespaces/shop/services/orders")
    with pytest.raises(NotLeaderError, match="exec refused"):
        kube.exec("shop", "orders-0", "kwbase", ["kwbase", "init"])


def stopped_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "reason", "") for r in caplog.records if r.getMessage() == "stopped leading"]


def test_each_stop_of_leadership_is_logged_with_its_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="reconciler.kube.leader"):
        taken = LeaseStore()
        a = Candidate(taken, clock)
        a.elector.step()
        taken.held_by("replica-b", renew="2026-01-01T00:00:01.000000Z")
        a.elector.step()

        cut_off = LeaseStore()
        b = Candidate(cut_off, clock, "replica-b")
        b.elector.step()
        cut_off.down = True
        clock.now += 10
        b.elector.step()

        c = Candidate(LeaseStore(), clock, "replica-c")
        c.fail_start = True
        c.elector.step()

        d = Candidate(LeaseStore(), clock, "replica-d")
        d.elector.step()
        d.elector.stop()
    assert stopped_reasons(caplog) == [
        "lease taken by replica-b", "could not renew the lease within the renew deadline",
        "start failed", "shutting down"]
    records = [r for r in caplog.records if r.getMessage() == "stopped leading"]
    assert [(getattr(r, "lease", ""), getattr(r, "identity", "")) for r in records] == [
        ("kaiwu-system/kaiwu-reconciler", f"replica-{x}") for x in "abcd"]
    failed = [r for r in caplog.records if r.getMessage() == "lease request failed"]
    assert [(getattr(r, "lease", ""), getattr(r, "error", "")) for r in failed] == [
        ("kaiwu-system/kaiwu-reconciler", "connection refused")]
    became = [r for r in caplog.records if r.getMessage() == "became leader"]
    assert [(getattr(r, "lease", ""), getattr(r, "identity", "")) for r in became] == [
        ("kaiwu-system/kaiwu-reconciler", f"replica-{x}") for x in "abcd"]
    released = [r for r in caplog.records if r.getMessage() == "released the lease"]
    assert [getattr(r, "identity", "") for r in released] == ["replica-c", "replica-d"]


def test_a_failing_stop_callback_is_logged_and_leadership_ends_all_the_same(
        caplog: pytest.LogCaptureFixture) -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock)

    def failing() -> None:
        raise RuntimeError("workers hung")

    a.elector.on_stopped_leading = failing
    a.elector.step()
    with caplog.at_level(logging.ERROR, logger="reconciler.kube.leader"):
        a.elector.stop()
    assert "stopping to lead failed" in caplog.messages
    assert not a.elector.is_leader() and store.spec["holderIdentity"] == ""


def test_a_started_elector_campaigns_every_retry_period_until_stopped() -> None:
    store = LeaseStore()
    store.down = True  # the first tries fail
    leading = threading.Event()
    settings = Settings(identity="replica-a", lease_namespace="kaiwu-system",
                        lease_duration_s=1.0, renew_deadline_s=0.5, retry_period_s=0.01)
    elector = LeaderElector(store, settings,  # type: ignore[arg-type]
                            on_started_leading=leading.set, on_stopped_leading=lambda: None)
    elector.start()
    assert elector._thread is not None
    assert elector._thread.name == "leader-election" and elector._thread.daemon, \
        "named in thread dumps, and no reason to keep a stopping process alive"
    try:
        time.sleep(0.05)
        assert elector.alive and not elector.is_leader()
        store.down = False
        assert leading.wait(5), "it tried again"
        assert elector.is_leader()
    finally:
        elector.stop()
    assert not elector.alive and not elector.is_leader()
    assert store.spec["holderIdentity"] == ""


def guarded(leading: bool, owned: bool = True) -> tuple[GuardedKube, Pool]:
    api, pool = api_client()
    return GuardedKube(api, "kaiwu-reconciler", 3.0, may_write=lambda: leading,
                       owns_current=lambda: owned), pool


def test_a_leader_writes_and_anyone_reads_or_dry_runs_through_the_guarded_kube() -> None:
    kube, pool = guarded(leading=False)
    kube.get(LEASE, "kaiwu-system", "kaiwu-reconciler")
    kube.apply(sts(), dry_run=True)
    with pytest.raises(NotLeaderError,
                       match=r"^PATCH /apis/apps/v1/namespaces/shop/statefulsets/orders "
                             r"refused: this replica is not the leader$"):
        kube.apply(sts())
    leader, leader_pool = guarded(leading=True)
    leader.apply(sts())
    assert [(s.method, s.timeout.total) for s in pool.sent + leader_pool.sent] == [
        ("GET", 3.0), ("PATCH", 3.0), ("PATCH", 3.0)]
    assert leader.field_manager == "kaiwu-reconciler"
    moved, _ = guarded(leading=True, owned=False)
    with pytest.raises(NotOwnerError, match=r"^DELETE .* refused: the cluster has left this shard"):
        moved.delete(LEASE, "kaiwu-system", "kaiwu-reconciler")


def test_a_leaders_exec_runs_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[Any, ...]] = []

    def exec_(self: Kube, *args: Any) -> tuple[str, str, int]:
        ran.append(args)
        return "ok", "", 0

    monkeypatch.setattr(Kube, "exec", exec_)
    kube, _ = guarded(leading=True)
    assert kube.exec("shop", "orders-0", "kwbase", ["kwbase", "init"], 12.0) == ("ok", "", 0)
    assert ran == [("shop", "orders-0", "kwbase", ["kwbase", "init"], 12.0)]


def test_a_lease_duration_under_a_second_is_written_as_one_second() -> None:
    store, clock = LeaseStore(), Clock()
    a = Candidate(store, clock, lease_duration_s=0.6, renew_deadline_s=0.5, retry_period_s=0.1)
    a.elector.step()
    assert store.spec["leaseDurationSeconds"] == 1, "whole seconds, at least one"
