"""The backup step (reconciler/kaiwudb/backup/step.py) with fakes for the API and the caches: a
schedule makes one KaiwuBackup per slot, a suspended one none; retention deletes files before
objects and never the newest completed backup; one backup runs at a time; a backup waits as
pending, saying why, while the cluster is busy; an unusable target fails it with its reason.
No KaiwuDB is reached in these stories (the running ones are the world stories').
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.model import NodeEntry, Obj
from tests.support.backup_step import NAME, NS, World, a_pass, at, backup, schedule, stamp, step


def test_a_schedule_makes_one_backup_per_slot_and_a_suspended_one_none(tmp_path: Path) -> None:
    world = World()
    world.add(schedule("nightly", "0 0 3 * * *"))
    paused = schedule("paused", "0 0 3 * * *", suspend=True)
    paused["status"] = {"nextScheduleTime": stamp("2026-01-02T03:00:00")}  # before it was
    world.add(paused)
    steps = step(world, tmp_path)
    now = at("2026-01-02T03:00:01")
    p, cluster = a_pass(now, initialized=False)  # not initialised: the backup waits, but is made
    steps.schedules.schedule(p, cluster,
                             world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {}, [])
    steps.schedules.schedule(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "paused") or {}, [])
    assert ("create", "KaiwuBackup", "nightly-20260102030000") in world.writes
    assert not [w for w in world.writes if w[2].startswith("paused-")]
    # The step's merge patch of nulls removes the times (RFC 7386): none is left.
    assert (world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "paused") or {}).get("status") == {}, \
        "suspended, it has no next time"
    made = world.get(k.KAIWU_BACKUP, NS, "nightly-20260102030000") or {}
    assert made["spec"] == {"cluster": {"name": NAME},
                            "target": {"volume": {"claimName": "dumps"}}}
    again = len(world.writes)
    backups = world.list(k.KAIWU_BACKUP, NS)
    steps.schedules.schedule(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {},
                   backups)
    assert not [w for w in world.writes[again:] if w[0] == "create"], "one per slot"
    status = (world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {})["status"]
    assert status["lastScheduleTime"] == "2026-01-02T03:00:00Z"
    assert status["nextScheduleTime"] == "2026-01-03T03:00:00Z"


def test_a_backup_labelled_as_the_schedules_with_a_slot_that_is_no_time_stops_nothing(
        tmp_path: Path) -> None:
    """Anyone who may create KaiwuBackups may label one as a schedule's: its slot is read as
    none, and the schedule goes on."""
    world = World()
    world.add(schedule("nightly", "0 0 3 * * *"))
    for name, slot in (("not-a-time", "x"), ("far-future", "9999-12-31T23:59:59Z"),
                       ("past-the-end", "9999-12-31T23:59:59-23:59"),
                       ("before-year-one", "0001-01-01T00:00:00+23:59")):
        fake = backup(name, "", "2026-01-01T03:00:00")
        fake["metadata"]["annotations"][k.SLOT_ANNOTATION] = slot
        world.add(fake)
    steps = step(world, tmp_path)
    p, cluster = a_pass(at("2026-01-02T03:00:01"))

    steps.schedules.schedule(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {},
                   world.list(k.KAIWU_BACKUP, NS))

    assert ("create", "KaiwuBackup", "nightly-20260102030000") in world.writes
    status = (world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {})["status"]
    assert status["lastScheduleTime"] == "2026-01-02T03:00:00Z"


def test_a_backup_the_api_refuses_to_make_is_a_warning_and_the_pass_goes_on(
        tmp_path: Path) -> None:
    world = World()
    world.add(schedule("nightly", "0 0 3 * * *"))

    def full(obj: Obj) -> Obj:
        raise ApiError(403, "Forbidden", 'kaiwubackups.kaiwu.inspur.com "nightly-20260102030000" '
                       "is forbidden: exceeded quota: backups")
    world.create = full  # type: ignore[method-assign]
    steps = step(world, tmp_path)
    p, cluster = a_pass(at("2026-01-02T03:00:01"))

    steps.schedules.schedule(p, cluster,
                             world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {}, [])

    (warning,) = [e for e in p.events if e[1] == "BackupScheduleFailed"]
    assert warning[0] == "Warning" and warning[2].startswith(
        "KaiwuBackupSchedule/nightly: could not create KaiwuBackup/nightly-20260102030000: "
        "HTTP 403 Forbidden")
    assert "exceeded quota" in warning[2]


def test_retention_deletes_files_then_objects_and_keeps_the_newest_completed(
        tmp_path: Path) -> None:
    world = World()
    world.add(schedule("nightly", "0 0 3 * * *", keep=1))
    for name, phase, day in [("b1", "completed", 1), ("b2", "completed", 2),
                             ("f3", "failed", 3), ("f4", "failed", 4)]:
        world.add(backup(name, phase, f"2026-01-0{day}T03:00:00"))
        files = tmp_path / "dumps" / NS / NAME / name
        files.mkdir(parents=True)
        (files / "manifest.json").write_text("{}")
    steps = step(world, tmp_path)
    p, cluster = a_pass(at("2026-01-05T00:00:00"))
    steps.schedules.retain(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {},
                 world.list(k.KAIWU_BACKUP, NS))
    assert [w[2] for w in world.writes if w[0] == "delete"] == ["b1", "f3"]
    assert sorted(d.name for d in (tmp_path / "dumps" / NS / NAME).iterdir()) == ["b2", "f4"]


def test_one_backup_at_a_time_and_a_busy_cluster_keeps_it_pending(tmp_path: Path) -> None:
    world = World()
    world.add(backup("first", "", "2026-01-01T03:00:00", sched=""))
    world.add(backup("second", "", "2026-01-01T03:00:05", sched=""))
    steps = step(world, tmp_path)
    nodes = [NodeEntry(i + 1, f"dev-{i}:26257", "live", f"dev-{i}").to_status()
             for i in range(3)]
    p, _cluster = a_pass(at("2026-01-01T03:01:00"), nodes=nodes,
               operation={"replicas": 4, "targetReplicas": 3, "pod": "dev-3",
                          "startedAt": "2026-01-01T03:00:30Z", "phase": "Removing"})
    steps.run(p)
    first = (world.get(k.KAIWU_BACKUP, NS, "first") or {})["status"]
    assert first == {"phase": "pending", "message": "waiting: a scale-in is in progress"}
    assert (world.get(k.KAIWU_BACKUP, NS, "second") or {})["status"] == {"phase": ""}, \
        "the second waits its turn untouched"


def test_an_unusable_target_fails_the_backup_with_its_reason(tmp_path: Path) -> None:
    world = World()
    bad = backup("nowhere", "", "2026-01-01T03:00:00", sched="")
    bad["spec"]["target"] = {"volume": {"claimName": "not-mounted"}}
    world.add(bad)
    steps = step(world, tmp_path)
    p, _cluster = a_pass(at("2026-01-01T03:01:00"))
    steps.run(p)
    status = (world.get(k.KAIWU_BACKUP, NS, "nowhere") or {})["status"]
    assert (status["phase"], status["reason"]) == ("failed", "TargetUnusable")
    assert "kaiwu install --backup-volume-claim not-mounted" in status["message"]
    assert [e for e in p.events if e[1] == "BackupFailed"]


def test_a_schedule_says_when_it_comes_back_and_writes_its_status_only_when_it_changes(
        tmp_path: Path) -> None:
    world = World()
    nightly = schedule("nightly", "0 0 3 * * *")
    nightly["metadata"]["creationTimestamp"] = stamp("2026-01-02T00:00:00")
    world.add(nightly)
    steps = step(world, tmp_path)
    p, cluster = a_pass(at("2026-01-02T02:59:59.5"))
    steps.schedules.schedule(p, cluster,
                             world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {}, [])
    assert world.writes == [("status", "KaiwuBackupSchedule", "nightly")]
    assert min(p.requeue) == pytest.approx(0.5), "back at the slot, not a second later"

    p, cluster = a_pass(at("2026-01-02T02:59:59.6"))
    steps.schedules.schedule(p, cluster,
                             world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {}, [])
    assert world.writes == [("status", "KaiwuBackupSchedule", "nightly")], \
        "the same status is not written again"

    p, cluster = a_pass(at("2026-01-02T03:00:01"))
    steps.schedules.schedule(p, cluster,
                             world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {}, [])
    assert steps.metrics.value("kaiwu_writes_total", {"verb": "create",
                                                      "kind": "KaiwuBackup"}) == 1


def test_a_schedule_that_cannot_be_read_is_a_warning_and_makes_nothing(tmp_path: Path) -> None:
    world = World()
    world.add(schedule("bad", "every night"))
    steps = step(world, tmp_path)
    p, cluster = a_pass(at("2026-01-02T03:00:01"))

    steps.schedules.schedule(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "bad") or {}, [])

    assert p.events == [("Warning", "BackupScheduleInvalid",
                         "KaiwuBackupSchedule/bad: spec.schedule 'every night': expected 6 "
                         "fields (seconds first) or 5, got 2; e.g. '0 0 3 * * *' for 03:00 UTC "
                         "daily")]
    assert world.writes == []

    world.add(schedule("blank", ""))
    p, cluster = a_pass(at("2026-01-02T03:00:01"))
    steps.schedules.schedule(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "blank") or {}, [])
    assert p.events[0][2] == ("KaiwuBackupSchedule/blank: spec.schedule '': expected 6 fields "
                              "(seconds first) or 5, got 0; e.g. '0 0 3 * * *' for 03:00 UTC "
                              "daily")


def test_retention_keeps_seven_by_default_and_drops_what_is_older_than_max_age(
        tmp_path: Path) -> None:
    world = World()
    plain = schedule("nightly", "0 0 3 * * *")
    plain["spec"]["retention"] = {}
    world.add(plain)
    for day in range(1, 10):
        world.add(backup(f"b{day}", "completed", f"2026-01-0{day}T03:00:00"))
    steps = step(world, tmp_path)
    p, cluster = a_pass(at("2026-01-10T00:00:00"))

    steps.schedules.retain(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {},
                 world.list(k.KAIWU_BACKUP, NS))

    assert [w[2] for w in world.writes if w[0] == "delete"] == ["b1", "b2"]
    assert p.events[0] == ("Normal", "BackupDeleted", "KaiwuBackup/b1: removed by the "
                           "retention of schedule nightly (files and object)")
    assert steps.metrics.value("kaiwu_writes_total", {"verb": "delete",
                                                      "kind": "KaiwuBackup"}) == 2

    world.edit(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly", lambda obj: obj["spec"].update(
        retention={"keep": 7, "maxAge": "3d"}))
    p, cluster = a_pass(at("2026-01-10T00:00:00"))
    steps.schedules.retain(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {},
                 world.list(k.KAIWU_BACKUP, NS))
    assert [w[2] for w in world.writes if w[0] == "delete"] == [
        "b1", "b2", "b3", "b4", "b5", "b6"], "older than 3 days (b7 is 2 days 21 hours old)"


def test_a_rollout_under_way_keeps_a_backup_pending(tmp_path: Path) -> None:
    world = World()
    world.add(backup("first", "", "2026-01-01T03:00:00", sched=""))
    world.add({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": NAME, "namespace": NS},
               "spec": {"replicas": 3,
                        "updateStrategy": {"rollingUpdate": {"partition": 2}}},
               "status": {"updateRevision": "dev-2", "currentRevision": "dev-1"}})
    steps = step(world, tmp_path)
    p, _cluster = a_pass(at("2026-01-01T03:01:00"))

    steps.run(p)

    assert (world.get(k.KAIWU_BACKUP, NS, "first") or {})["status"] == {
        "phase": "pending", "message": "waiting: a rolling update is in progress"}


def test_an_s3_target_naming_no_secret_fails_without_asking_for_a_nameless_one(
        tmp_path: Path) -> None:
    asked: list[tuple[str, str]] = []

    class Recording(World):
        def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
            asked.append((kind.kind, name))
            return super().get(kind, namespace, name)

    world = Recording()
    bad = backup("nowhere", "", "2026-01-01T03:00:00", sched="")
    bad["spec"]["target"] = {"s3": {"bucket": "backups"}}
    world.add(bad)
    steps = step(world, tmp_path)
    p, _cluster = a_pass(at("2026-01-01T03:01:00"))

    steps.run(p)

    status = (world.get(k.KAIWU_BACKUP, NS, "nowhere") or {})["status"]
    assert (status["phase"], status["reason"]) == ("failed", "TargetUnusable")
    assert status["message"].startswith("spec.target.s3.credentialsSecret None: no such Secret")
    assert ("Secret", "") not in asked


def test_retention_goes_on_past_a_backup_whose_files_it_cannot_reach(tmp_path: Path) -> None:
    world = World()
    world.add(schedule("nightly", "0 0 3 * * *", keep=1))
    for name, day in (("b1", 1), ("b2", 2), ("b3", 3)):
        world.add(backup(name, "completed", f"2026-01-0{day}T03:00:00"))
    world.edit(k.KAIWU_BACKUP, NS, "b1", lambda obj: obj["spec"].update(
        target={"volume": {"claimName": "unmounted"}}))
    steps = step(world, tmp_path)
    p, cluster = a_pass(at("2026-01-05T00:00:00"))

    steps.schedules.retain(p, cluster, world.get(k.KAIWU_BACKUP_SCHEDULE, NS, "nightly") or {},
                 world.list(k.KAIWU_BACKUP, NS))

    assert [w[2] for w in world.writes if w[0] == "delete"] == ["b2"]
    assert [e[1] for e in p.events] == ["BackupRetentionFailed", "BackupDeleted"]


def test_a_pending_backup_says_why_it_waits_now(tmp_path: Path) -> None:
    world = World()
    world.add(backup("first", "", "2026-01-01T03:00:00", sched=""))
    steps = step(world, tmp_path)
    p, _cluster = a_pass(at("2026-01-01T03:01:00"), initialized=False)
    steps.run(p)
    assert (world.get(k.KAIWU_BACKUP, NS, "first") or {})["status"]["message"] == (
        "waiting: the cluster is not initialised")
    p, _cluster = a_pass(at("2026-01-01T03:01:01"), initialized=False)
    steps.run(p)
    assert len(world.writes) == 1, "the same reason is not written again"

    p, _cluster = a_pass(at("2026-01-01T03:02:00"), failures={"dev-1": {"since": "x"}})
    steps.run(p)
    assert (world.get(k.KAIWU_BACKUP, NS, "first") or {})["status"] == {
        "phase": "pending", "message": "waiting: failover is looking after dev-1"}
