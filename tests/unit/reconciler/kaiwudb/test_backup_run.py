"""A backup running to its end in the fast tier (reconciler/kaiwudb/backup/step.py against the
simulated KaiwuDB and a volume target in a temporary directory; tests/support/backup_world.py).

Stories: a person asks for a backup of a cluster with relational and time-series data; pass by
pass the step plans it on one node at one timestamp, exports each item, checks and moves its
files to the claim and writes the manifest last, and the KaiwuBackup says what it holds; the
node's disk is left clean. A backup of named databases holds only those; a database that does
not exist fails it. A failed export, a file corrupted on the way, a node lost midway or a target
that lost the plan each fail the backup with a reason a person can act on, once.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from reconciler.kaiwudb.backup import names as bn
from reconciler.kaiwudb.backup import plan as bp
from reconciler.kaiwudb.backup import restore_plan as rp
from reconciler.kaiwudb.backup.export import EXTERN_DIR
from reconciler.kaiwudb.backup.file_server import BackupFileServer
from reconciler.kaiwudb.backup.restore import Restore
from reconciler.kaiwudb.backup.status import NOT_CARRIED, running_backup
from reconciler.kaiwudb.backup.step import FAILED_FILE
from reconciler.kaiwudb.backup.targets import VolumeTarget
from reconciler.kaiwudb.kwbase.admin import KwbaseSettings
from reconciler.kube import kinds as k
from reconciler.model import Obj
from tests.support.backup_world import (
    CLAIM,
    NS,
    Site,
    a_restarted_site,
    a_site,
    load_shop,
    manifest,
    stamp,
)


def test_a_backup_exports_every_item_then_writes_the_manifest_last(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("first")
    started_at = site.now

    passes = site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "first")
    assert status["phase"] == "completed", status
    assert sorted(status) == sorted([
        "phase", "reason", "message", "startedAt", "completedAt", "consistentTo",
        "consistentToTime", "pod", "nodeId", "location", "files", "sizeBytes", "databases"])
    assert status["reason"] is None
    assert status["location"] == f"volume://{CLAIM}/{NS}/dev/first"
    assert status["startedAt"] == stamp(started_at)
    assert status["completedAt"] == stamp(started_at + len(passes) - 1)
    assert {d["name"]: (d["engine"], d["tables"], d["rows"]) for d in status["databases"]} == {
        "shop": ("RELATIONAL", 2, 4), "sensors": ("TIME SERIES", 1, 2)}
    base = site.files("dev", "first")
    written = sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())
    assert written == sorted([
        "plan.json", "manifest.json", "items/settings.json", "items/users.json",
        "items/d1.schema.json", "items/d1.t0.json", "items/d1.t1.json",
        "items/d0.json", "settings/clustersetting.sql", "users/users.sql",
        "d1/meta.sql", "d1/public/customers/meta.sql", "d1/public/orders/meta.sql",
        "d1/public/customers/n1.0.csv", "d1/public/orders/n1.0.csv", "d0/meta.sql",
        "d0/temps/n1.0.csv"]), written
    assert (base / "d1/public/orders/n1.0.csv").read_text() == "1,tea\n2,rice\n3,salt\n"
    assert (base / "users/users.sql").read_text() == "CREATE USER app;\n"
    found = manifest(site, "dev", "first")
    data_files = [p for p in written if not p.endswith(".json")]
    assert found["files"] == status["files"] == len(data_files)
    assert found["sizeBytes"] == status["sizeBytes"] == sum(
        (base / p).stat().st_size for p in data_files)
    assert found["consistentTo"] == status["consistentTo"]
    # The one timestamp every relational table is read at: when the backup started.
    assert found["consistentToTime"] == status["consistentToTime"] == stamp(started_at)
    assert bp.hlc_time(status["consistentTo"]).timestamp() == pytest.approx(
        bp.hlc_time(found["plan"]["consistent_to"]).timestamp())
    assert found["plan"]["pod"] == status["pod"] == "dev-0"
    assert found["plan"]["node_id"] == status["nodeId"] == 1
    # Nothing is left in the node's external-I/O directory.
    assert site.kwdb.extern_files((NS, "dev"), "dev-0") == {}
    # One event when it started and one when it completed, saying what and where.
    events = [e for p in passes for e in p.events]
    assert [e[:2] for e in events] == [("Normal", "BackupStarted"), ("Normal", "BackupCompleted")]
    assert events[0][2] == ("KaiwuBackup/first: exporting 6 item(s) from pod dev-0 (node 1), "
                            f"relational tables as of {status['consistentTo']}")
    assert events[1][2] == (f"KaiwuBackup/first: {status['files']} file(s), "
                            f"{status['sizeBytes']} bytes in volume://{CLAIM}/{NS}/dev/first, "
                            f"relational tables consistent to {status['consistentToTime']}")
    assert site.backups.metrics.value("kaiwu_backups_total", {"result": "completed"}) == 1
    assert site.backups.metrics.value("kaiwu_lifecycle_actions_total",
                                      {"action": "backup-start"}) == 1
    assert site.backups.metrics.value("kaiwu_backup_last_success_timestamp_seconds", {
        "namespace": NS, "cluster": "dev"}) == datetime.fromisoformat(
            status["completedAt"].replace("Z", "+00:00")).timestamp()
    assert found["plan"]["backup"] == "first"


def test_a_setting_kwdb_cannot_write_back_is_left_out_and_named_and_the_rest_restores(
        tmp_path: Path) -> None:
    """KWDB writes a setting whose value needed an escape (a CA's newlines, Chinese text) as
    `'e'...'` (sql/export.go:576-582), which IMPORT CLUSTER SETTING refuses, failing the
    restore's first step. The backup keeps every other line, says which it left out, and a
    restore from it brings back the rest."""
    site = a_site(tmp_path, statements_wait_s=2.0)  # the restore reads its files over TLS
    site.start_cluster("dev")
    load_shop(site)
    key = (NS, "dev")
    site.kwdb.set_setting(key, site.now, "cloudstorage.http.custom_ca",
                          "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    site.kwdb.set_setting(key, site.now, "cluster.organization", "开物")
    site.backup("first")

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "first")
    assert status["phase"] == "completed", status
    assert status["message"].endswith(
        "; left out, as KWDB writes them in a form it cannot read back (set them again after a "
        "restore): cluster setting cloudstorage.http.custom_ca, cluster setting "
        "cluster.organization")
    settings = (site.files("dev", "first") / "settings/clustersetting.sql").read_text()
    assert settings == "SET CLUSTER SETTING sql.defaults.idle_timeout = '10m';\n"
    assert manifest(site, "dev", "first")["leftOut"] == [
        "cluster setting cloudstorage.http.custom_ca", "cluster setting cluster.organization"]

    server = BackupFileServer("127.0.0.1:0", "127.0.0.1", poll_s=0.01)
    restore = Restore(site.backups.ctx, site.backups, server)
    try:
        site.start_cluster("fresh", restore_from="first")
        for _ in range(8):
            restore.run(site.a_pass("fresh"))
            site.at(site.now + 1)
    finally:
        server.stop()
    restored = site.kwdb.contents((NS, "fresh"), site.now)
    assert restored["settings"] == {"sql.defaults.idle_timeout": "10m"}
    assert restored["databases"] == site.kwdb.contents(key, site.now)["databases"]


def test_a_backup_of_named_databases_holds_only_those(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("only-shop", databases=["shop"])

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "only-shop")
    assert status["phase"] == "completed"
    assert [d["name"] for d in status["databases"]] == ["shop"]
    assert sorted(manifest(site, "dev", "only-shop")["items"]) == [
        "d0.schema", "d0.t0", "d0.t1", "settings", "users"]
    assert not (site.files("dev", "only-shop") / "d1").exists()


def test_a_database_that_does_not_exist_fails_the_backup_before_anything_is_written(
        tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("typo", databases=["shop", "crm"])

    passes = site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "typo")
    assert (status["phase"], status["reason"]) == ("failed", "DatabaseNotFound")
    assert status["message"] == "spec.databases: crm do(es) not exist in the cluster"
    assert not site.files("dev", "typo").exists()
    assert [e[1:] for p in passes for e in p.events] == [
        ("BackupFailed", "KaiwuBackup/typo: DatabaseNotFound: spec.databases: crm do(es) not "
                         "exist in the cluster")]


def test_an_export_that_reports_a_notice_fails_the_backup_once_and_cleans_the_node(
        tmp_path: Path) -> None:
    """A time-series database export that fails a table says so only in a notice and
    result = fail (kaiwudb-facts.md): the backup fails all the same."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.kwdb.fail_export((NS, "dev"), site.now, "temps")
    site.backup("noticed")

    passes = site.run_backup()
    for _ in range(3):  # later passes leave a failed backup alone
        site.backups.run(site.a_pass("dev"))

    status = site.status(k.KAIWU_BACKUP, "noticed")
    assert (status["phase"], status["reason"]) == ("failed", "ExportFailed")
    assert status["message"] == ('database "sensors": EXPORT reported: export table '
                                 "sensors.temps failed: simulated storage error")
    assert status["completedAt"] >= status["startedAt"]
    recorded = json.loads((site.files("dev", "noticed") / FAILED_FILE).read_text())
    assert recorded == {"reason": "ExportFailed", "message": status["message"]}
    assert not (site.files("dev", "noticed") / bp.MANIFEST_FILE).exists()
    assert site.kwdb.extern_files((NS, "dev"), "dev-0") == {}
    failed = [e for p in passes for e in p.events if e[1] == "BackupFailed"]
    assert failed == [("Warning", "BackupFailed",
                       f"KaiwuBackup/noticed: ExportFailed: {status['message']}")]
    assert site.backups.metrics.value("kaiwu_backups_total", {"result": "failed"}) == 1
    assert running_backup(site.api, NS, "dev") is None


def test_a_node_lost_midway_fails_the_backup_with_the_node_and_pod(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("interrupted")
    site.backups.run(site.a_pass("dev"))  # planned: exports from dev-0 (node 1)
    site.backups.run(site.a_pass("dev"))  # the first item
    assert running_backup(site.api, NS, "dev") == "interrupted"
    assert site.status(k.KAIWU_BACKUP, "interrupted")["message"] == \
        "exporting from pod dev-0: 1/6 items"

    nodes = site.nodes("dev")
    nodes[0] = {**nodes[0], "state": "not-live"}
    with caplog.at_level(logging.INFO, logger="reconciler.kaiwudb.backup.export"):
        site.kwdb.stop_process((NS, "dev"), "dev-0", site.now)  # gone with its files
        site.backups.run(site.a_pass("dev", nodes=nodes))
    assert [r.getMessage().split(": rm -rf")[0] for r in caplog.records] == [
        "backup interrupted: could not clean the node"]

    status = site.status(k.KAIWU_BACKUP, "interrupted")
    assert (status["phase"], status["reason"]) == ("failed", "NodeLost")
    assert status["message"] == ("KaiwuDB node 1 (pod dev-0) that holds the export files is "
                                 "not available (not-live, pod dev-0; pod Ready)")


def test_an_export_pod_no_longer_ready_fails_the_backup(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("unready")
    site.backups.run(site.a_pass("dev"))
    site.api.objects[("Pod", NS, "dev-0")]["status"]["conditions"] = [
        {"type": "Ready", "status": "False"}]

    site.backups.run(site.a_pass("dev"))

    assert site.status(k.KAIWU_BACKUP, "unready")["message"] == (
        "KaiwuDB node 1 (pod dev-0) that holds the export files is not available (live, pod "
        "dev-0; pod not Ready)")


def test_an_export_pod_that_stopped_answering_is_a_lost_node(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("stopped")
    site.backups.run(site.a_pass("dev"))
    nodes = site.nodes("dev")
    site.kwdb.stop_process((NS, "dev"), "dev-0", site.now)

    site.backups.run(site.a_pass("dev", nodes=nodes))  # the cache still shows it Ready

    status = site.status(k.KAIWU_BACKUP, "stopped")
    assert (status["phase"], status["reason"]) == ("failed", "NodeLost")
    assert status["message"].startswith("settings: pod dev-0 (node 1) cannot be reached: ")


def test_a_target_that_lost_the_plan_fails_the_backup(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("wiped")
    site.backups.run(site.a_pass("dev"))
    (site.files("dev", "wiped") / bp.PLAN_FILE).unlink()

    site.backups.run(site.a_pass("dev"))

    status = site.status(k.KAIWU_BACKUP, "wiped")
    assert (status["phase"], status["reason"]) == ("failed", "PlanMissing")
    assert status["message"] == (f"volume://{CLAIM}/{NS}/dev/wiped/plan.json is gone: the "
                                 "target lost the backup's files")


def test_a_file_changed_on_its_way_out_fails_the_backup(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    real_exec = site.runner.exec

    def corrupting(namespace: str, pod: str, container: str, command: list[str],
                   timeout: float = 60.0) -> tuple[str, str, int]:
        out, err, code = real_exec(namespace, pod, container, command, timeout)
        if command[0] == "cat" and command[1].endswith(".csv"):
            out = out.replace("tea", "tee")
        return out, err, code
    site.runner.exec = corrupting  # type: ignore[method-assign]
    site.backup("garbled", databases=["shop"])

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "garbled")
    assert (status["phase"], status["reason"]) == ("failed", "ChecksumMismatch")
    assert status["message"].startswith("d0/public/orders/n1.0.csv: checksum ")
    assert not (site.files("dev", "garbled") / "d0/public/orders/n1.0.csv").exists()


def test_a_restarted_reconciler_carries_on_with_the_same_node_and_timestamp(
        tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("resumed")
    for _ in range(3):  # planned, then two items exported
        site.backups.run(site.a_pass("dev"))
        site.at(site.now + 1)
    planned = json.loads((site.files("dev", "resumed") / bp.PLAN_FILE).read_text())

    restarted = a_restarted_site(site)
    restarted.at(site.now)
    passes = restarted.run_backup()

    status = restarted.status(k.KAIWU_BACKUP, "resumed")
    assert status["phase"] == "completed"
    assert status["consistentTo"] == planned["consistent_to"]
    assert status["pod"] == planned["pod"]
    assert sum(1 for p in passes for e in p.events if e[1] == "BackupStarted") == 0
    assert len(passes) == 5, "the other four items, then the manifest"


def test_a_busy_cluster_keeps_the_backup_pending_and_says_why(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    site.backup("later")
    pod = site.api.objects[("Pod", NS, "dev-2")]
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    p = site.a_pass("dev")
    site.backups.run(p)

    assert site.status(k.KAIWU_BACKUP, "later") == {
        "phase": "pending", "message": "waiting: pods are not Ready: dev-2"}
    assert p.requeue and min(p.requeue) == pytest.approx(1.0)
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    site.backups.run(site.a_pass("dev"))
    assert site.status(k.KAIWU_BACKUP, "later")["phase"] == "running"


def test_the_export_pod_is_the_lowest_ready_pod_with_a_live_node(tmp_path: Path) -> None:
    site = a_site(tmp_path, remove_node_files=False)
    site.start_cluster("dev", replicas=3)
    load_shop(site)
    site.backup("elsewhere", databases=["shop"])
    nodes = site.nodes("dev")
    nodes[0] = {**nodes[0], "state": "not-live"}
    nodes[1] = {**nodes[1], "state": "not-live"}
    # An eleventh pod, Ready with a live node: ordinals count, not names (dev-10 < dev-2).
    site.api.add({**site.api.objects[("Pod", NS, "dev-2")],
                  "metadata": {**site.api.objects[("Pod", NS, "dev-2")]["metadata"],
                               "name": "dev-10", "uid": "uid-dev-10"}})
    nodes.append({"nodeId": 11, "address": "dev-10.dev.shop.svc.cluster.local:26257",
                  "state": "live", "pod": "dev-10"})

    site.backups.run(site.a_pass("dev", nodes=nodes))
    site.backups.run(site.a_pass("dev", nodes=nodes))

    status = site.status(k.KAIWU_BACKUP, "elsewhere")
    assert (status["pod"], status["nodeId"]) == ("dev-2", 3)
    # Kept on the node when asked to (settings.remove_node_files off).
    assert sorted(site.kwdb.extern_files((NS, "dev"), "dev-2")) == [
        "kaiwu-backup-uid-elsewhere/settings/clustersetting.sql"]
    assert EXTERN_DIR.endswith("/extern")


def test_a_table_export_that_errors_fails_the_backup_with_the_error(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.kwdb.fail_export((NS, "dev"), site.now, "orders")
    site.backup("broken", databases=["shop"])

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "broken")
    assert (status["phase"], status["reason"]) == ("failed", "ExportFailed")
    assert status["message"].startswith('table "shop"."public"."orders": /kaiwudb/bin/kwbase sql '
                                        "--format=csv -e "
                                        'EXPORT INTO CSV "nodelocal://1/kaiwu-backup-uid-broken/')
    assert "ERROR: export table shop.public.orders failed: simulated storage error" in \
        status["message"]
    assert site.kwdb.extern_files((NS, "dev"), "dev-0") == {}


def test_a_lost_status_write_is_recovered_from_the_target(tmp_path: Path) -> None:
    """The target, not status, is the memory: plan.json means started, manifest.json means
    completed, failed.json means failed, whatever status says."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("first", databases=["shop"])
    site.run_backup()
    done = site.status(k.KAIWU_BACKUP, "first")
    site.api.objects[("KaiwuBackup", NS, "first")]["status"] = {"phase": "running"}

    fresh = a_restarted_site(site)  # a new process: nothing in memory
    p = fresh.a_pass("dev")
    fresh.backups.run(p)
    again = fresh.status(k.KAIWU_BACKUP, "first")
    assert again["phase"] == "completed"
    assert again["message"] == (f"{done['files']} file(s) verified in {done['location']}; "
                                f"{NOT_CARRIED}")
    assert "passwords" in again["message"]
    assert (again["files"], again["sizeBytes"], again["databases"]) == (
        done["files"], done["sizeBytes"], done["databases"])
    assert [e[1] for e in p.events] == ["BackupCompleted"]

    # Started: plan.json written, the status write lost.
    site.backup("second", databases=["shop"])
    site.backups.run(site.a_pass("dev"))
    site.api.objects[("KaiwuBackup", NS, "second")]["status"] = {}
    p = fresh.a_pass("dev")
    fresh.backups.run(p)
    assert fresh.status(k.KAIWU_BACKUP, "second")["phase"] == "running"
    assert [e[1] for e in p.events] == [], "not started twice"
    planned = json.loads((site.files("dev", "second") / bp.PLAN_FILE).read_text())
    assert fresh.status(k.KAIWU_BACKUP, "second")["consistentTo"] == planned["consistent_to"]

    # Failed: failed.json written, the status write lost.
    (site.files("dev", "second") / FAILED_FILE).write_text(json.dumps(
        {"reason": "NodeLost", "message": "node 1 went away"}))
    p = fresh.a_pass("dev")
    fresh.backups.run(p)
    status = fresh.status(k.KAIWU_BACKUP, "second")
    assert (status["phase"], status["reason"], status["message"]) == (
        "failed", "NodeLost", "node 1 went away")
    assert p.events == [("Warning", "BackupFailed", "KaiwuBackup/second: NodeLost: node 1 "
                                                     "went away")]


def test_a_file_lost_from_the_target_before_the_manifest_fails_the_backup(
        tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("leaky", databases=["shop"])
    for _ in range(6):  # planned and every item exported: the manifest is next
        site.backups.run(site.a_pass("dev"))
    assert site.status(k.KAIWU_BACKUP, "leaky")["message"].endswith("5/5 items")
    (site.files("dev", "leaky") / "d0/public/orders/n1.0.csv").unlink()

    site.backups.run(site.a_pass("dev"))

    status = site.status(k.KAIWU_BACKUP, "leaky")
    assert (status["phase"], status["reason"], status["message"]) == (
        "failed", "TargetIncomplete",
        'table "shop"."public"."orders": missing or changed in the target: '
        "d0/public/orders/n1.0.csv")
    assert not (site.files("dev", "leaky") / bp.MANIFEST_FILE).exists()


def test_a_claim_that_refuses_the_plan_fails_the_backup_and_the_pass_goes_on(
        tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("blocked")
    site.files("dev", "blocked").parent.mkdir(parents=True)
    site.files("dev", "blocked").write_text("a file where the backup's directory belongs")

    p = site.a_pass("dev")
    site.backups.run(p)

    status = site.status(k.KAIWU_BACKUP, "blocked")
    assert (status["phase"], status["reason"]) == ("failed", "TargetFailed")
    assert status["message"].startswith(f"volume://{CLAIM}/{NS}/dev/blocked/plan.json: ")
    assert p.events == [("Warning", "BackupFailed",
                         f"KaiwuBackup/blocked: TargetFailed: {status['message']}")]


def a_schedule(site: Site, name: str, cron: str, *, keep: int = 7, immediate: bool = False,
               claim: str = CLAIM) -> Obj:
    return site.api.add({
        "apiVersion": k.KAIWU_BACKUP_SCHEDULE.api_version, "kind": k.KAIWU_BACKUP_SCHEDULE.kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"cluster": {"name": "dev"}, "schedule": cron, "immediate": immediate,
                 "retention": {"keep": keep},
                 "template": {"target": {"volume": {"claimName": claim}},
                              "databases": ["shop"]}}})


def test_a_schedule_backs_up_at_once_then_daily_and_keeps_the_newest(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    a_schedule(site, "nightly", "0 0 3 * * *", keep=1, immediate=True)

    passes = site.run_backup()
    first = "nightly-20260101000000"
    made = site.api.get(k.KAIWU_BACKUP, NS, first) or {}
    assert (made["apiVersion"], made["kind"]) == ("kaiwu.inspur.com/v1", "KaiwuBackup")
    assert made["metadata"]["labels"] == {"kaiwu.inspur.com/schedule": "nightly"}
    assert made["metadata"]["annotations"] == {
        "kaiwu.inspur.com/schedule-slot": "2026-01-01T00:00:00Z"}
    assert made["spec"] == {"cluster": {"name": "dev"}, "databases": ["shop"],
                            "target": {"volume": {"claimName": CLAIM}}}
    assert site.status(k.KAIWU_BACKUP, first)["phase"] == "completed"
    assert passes[0].events == [("Normal", "BackupScheduled",
                                 f"KaiwuBackup/{first}: made by schedule nightly")]
    site.backups.run(site.a_pass("dev"))
    assert site.status(k.KAIWU_BACKUP_SCHEDULE, "nightly") == {
        "lastScheduleTime": "2026-01-01T00:00:00Z",
        "nextScheduleTime": "2026-01-01T03:00:00Z", "lastSuccessfulBackup": first}

    site.at(3 * 3600 + 1.0)
    site.run_backup()
    site.backups.run(site.a_pass("dev"))  # retention, now that the second one completed
    second = "nightly-20260101030000"
    assert site.status(k.KAIWU_BACKUP, second)["phase"] == "completed"
    assert site.api.get(k.KAIWU_BACKUP, NS, first) is None
    assert not site.files("dev", first).exists() and site.files("dev", second).exists()
    assert site.status(k.KAIWU_BACKUP_SCHEDULE, "nightly")["lastSuccessfulBackup"] == second


def test_files_retention_cannot_reach_keep_their_backup_and_say_why(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    a_schedule(site, "nightly", "0 0 3 * * *", keep=1)
    for name, day in (("old", "2025-12-01"), ("new", "2025-12-02")):
        obj = site.backup(name, target={"volume": {"claimName": "unmounted"}})
        obj["metadata"].update(creationTimestamp=f"{day}T03:00:00Z",
                               labels={"kaiwu.inspur.com/schedule": "nightly"})
        obj["status"] = {"phase": "completed", "completedAt": f"{day}T03:05:00Z"}

    p = site.a_pass("dev")
    site.backups.run(p)

    assert site.api.get(k.KAIWU_BACKUP, NS, "old") is not None
    assert [e for e in p.events if e[1] == "BackupRetentionFailed"] == [(
        "Warning", "BackupRetentionFailed",
        "KaiwuBackup/old: files not deleted: spec.target.volume.claimName 'unmounted': not "
        f"mounted in the reconciler at {tmp_path}/unmounted; install with `kaiwu install "
        "--backup-volume-claim unmounted` (a ReadWriteMany claim in the reconciler's "
        "namespace)")]
    # The newest completed backup's time is what the metric says.
    assert site.backups.metrics.value("kaiwu_backup_last_success_timestamp_seconds",
                                      {"namespace": NS, "cluster": "dev"}) == \
        datetime(2025, 12, 2, 3, 5, tzinfo=UTC).timestamp()


def test_every_failed_backup_is_announced_once(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("one", databases=["crm"])
    site.backup("two", databases=["hr"])

    events = [e for p in site.run_backup() for e in p.events]
    site.backups.run(site.a_pass("dev"))

    assert [e[2] for e in events] == [
        "KaiwuBackup/one: DatabaseNotFound: spec.databases: crm do(es) not exist in the cluster",
        "KaiwuBackup/two: DatabaseNotFound: spec.databases: hr do(es) not exist in the cluster"]
    assert site.backups.metrics.value("kaiwu_backups_total", {"result": "failed"}) == 2


def test_a_cluster_being_restored_is_not_backed_up_yet(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("fresh", restore_from="elsewhere")
    site.backup("early", cluster="fresh")

    for _ in range(2):
        site.backups.run(site.a_pass("fresh"))

    assert site.status(k.KAIWU_BACKUP, "early") == {
        "phase": "pending", "message": "waiting: the cluster is being restored from a backup"}
    assert [w for w in site.api.writes if w[2] == "early"] == [
        ("patch/status", "KaiwuBackup", "early")], "the same message is written once"

    site.api.objects[("KaiwuCluster", NS, "fresh")]["metadata"]["annotations"] = {
        rp.RESTORE_ANNOTATION: json.dumps({"backup": "elsewhere", "done": [],
                                           "completedAt": "2026-01-01T00:01:00Z"})}
    site.backups.run(site.a_pass("fresh"))
    assert site.status(k.KAIWU_BACKUP, "early")["phase"] == "running"


def test_a_backups_files_sit_under_the_cluster_it_was_taken_of(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    fresh = site.start_cluster("fresh", replicas=3, restore_from="first")
    taken = site.backup("first", cluster="dev")

    assert site.backups.target(fresh, taken).location == f"volume://{CLAIM}/{NS}/dev/first"


def test_an_s3_backup_keeps_one_client_per_endpoint_and_credentials(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    made: list[tuple[object, ...]] = []

    def factory(*args: object, **kwargs: object) -> object:
        made.append((*args, *sorted(kwargs.items())))
        return boto3.client(*args, **kwargs)
    site.backups._s3_make = factory
    site.start_cluster("dev")
    load_shop(site)
    site.api.add({"apiVersion": "v1", "kind": "Secret",
                  "metadata": {"name": "creds", "namespace": NS, "labels": {
                      "kaiwu.inspur.com/backup-credentials": "true"}},
                  "data": {"AWS_ACCESS_KEY_ID": base64.b64encode(b"id").decode(),
                           "AWS_SECRET_ACCESS_KEY": base64.b64encode(b"key").decode()}})
    s3 = {"s3": {"bucket": "backups", "prefix": "nightly", "credentialsSecret":
                 {"name": "creds"}}}
    site.backup("to-s3", databases=["shop"], target=s3)

    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="backups")
        passes = site.run_backup()
        keys = {o["Key"] for o in boto3.client("s3", region_name="us-east-1").list_objects_v2(
            Bucket="backups")["Contents"]}

    status = site.status(k.KAIWU_BACKUP, "to-s3")
    assert status["phase"] == "completed"
    assert status["location"] == f"s3://backups/nightly/{NS}/dev/to-s3"
    assert f"nightly/{NS}/dev/to-s3/d0/public/orders/n1.0.csv" in keys
    assert len(passes) > 2 and len(made) == 1
    assert made[0][0] == "s3" and ("aws_access_key_id", "id") in made[0]


def test_a_claim_that_fills_up_midway_fails_the_backup_which_keeps_its_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("full", databases=["shop"])
    started_at = site.now
    site.backups.run(site.a_pass("dev"))  # planned
    site.at(site.now + 5)
    site.backups.run(site.a_pass("dev"))  # settings exported

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    site.at(site.now + 5)
    p = site.a_pass("dev")
    site.backups.run(p)

    status = site.status(k.KAIWU_BACKUP, "full")
    assert (status["phase"], status["reason"], status["message"]) == (
        "failed", "TargetFailed",
        f"volume://{CLAIM}/{NS}/dev/full/users/users.sql: No space left on device")
    assert (status["startedAt"], status["completedAt"]) == (stamp(started_at), stamp(site.now))
    assert p.events == [("Warning", "BackupFailed",
                         f"KaiwuBackup/full: TargetFailed: {status['message']}")]


def test_a_file_the_target_did_not_keep_fails_the_backup_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upload the target answered without keeping the file (a misbehaving S3-compatible
    store, say) is caught right after the item, not at the manifest."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("leaky", databases=["shop"])
    put = VolumeTarget.put

    def drops_csv(self: VolumeTarget, key: str, data: bytes) -> None:
        if not key.endswith(".csv"):
            put(self, key, data)
    monkeypatch.setattr(VolumeTarget, "put", drops_csv)

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "leaky")
    assert (status["phase"], status["reason"], status["message"]) == (
        "failed", "TargetIncomplete",
        'table "shop"."public"."customers": not in the target after upload: '
        "d0/public/customers/n1.0.csv")


def test_an_item_marker_that_cannot_be_read_back_fails_the_backup(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("forgetful", databases=["shop"])
    for _ in range(6):  # planned and every item exported: the manifest is next
        site.backups.run(site.a_pass("dev"))
    get = VolumeTarget.get

    def markers_gone(self: VolumeTarget, key: str) -> bytes | None:
        return None if key == f"{bp.ITEMS_DIR}/users.json" else get(self, key)
    monkeypatch.setattr(VolumeTarget, "get", markers_gone)

    site.backups.run(site.a_pass("dev"))

    status = site.status(k.KAIWU_BACKUP, "forgetful")
    assert (status["phase"], status["reason"], status["message"]) == (
        "failed", "TargetIncomplete", "users: its marker is gone")


def test_no_ready_pod_with_a_live_node_fails_the_backup_saying_so(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    site.backup("first")
    nodes = [{**n, "state": "not-live"} for n in site.nodes("dev")]

    site.backups.run(site.a_pass("dev", nodes=nodes))

    status = site.status(k.KAIWU_BACKUP, "first")
    assert (status["phase"], status["reason"], status["message"]) == (
        "failed", "NoNode", "no Ready pod with a live KaiwuDB node to export from")


def test_every_completed_backup_is_announced_and_counted_once(tmp_path: Path) -> None:
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("one", databases=["shop"])
    site.backup("two", databases=["shop"])

    events = [e for p in site.run_backup() for e in p.events]
    site.backups.run(site.a_pass("dev"))

    assert [(e[1], e[2].split(":")[0]) for e in events if e[1] == "BackupCompleted"] == [
        ("BackupCompleted", "KaiwuBackup/one"), ("BackupCompleted", "KaiwuBackup/two")]
    assert site.backups.metrics.value("kaiwu_backups_total", {"result": "completed"}) == 2


# ---- names from the database are data ----------------------------------------------------------

GRANTING = "t; GRANT admin TO mallory; --"


def test_a_table_named_to_grant_admin_is_backed_up_as_a_table_and_grants_nothing(
        tmp_path: Path) -> None:
    """A SQL user with CREATE (not admin) names a table so that, pasted into a statement, it
    would end the EXPORT and grant him admin. The backup quotes it as KWDB quotes identifiers:
    one statement, the table exported under its exact name, mallory no admin."""
    site = a_site(tmp_path)
    dev = site.start_cluster("dev")
    key = (NS, "dev")
    site.kwdb.set_user(key, site.now, "mallory")
    for name in (GRANTING, "Mixed Case", 'say "hi"', "select"):
        site.kwdb.load(key, site.now, database="shop", table=name,
                       columns=[("id", "INT8")], rows=[("1",)])
    site.backup("first")

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "first")
    assert status["phase"] == "completed", status.get("message")
    users = site.kwdb.contents(key, site.now)["users"]
    assert users == {"mallory": ""}
    shown = site.admin(dev).sql("dev-0", "SHOW USERS")
    assert {r["username"]: r["member_of"] for r in shown.rows}["mallory"] == "{}"
    base = site.files("dev", "first")
    for name in (GRANTING, "Mixed Case", 'say "hi"', "select"):
        assert (base / "d0/public" / name / "n1.0.csv").read_text() == "1\n", name


@pytest.mark.parametrize("second", ["t --/../../../../data", "../../../../data"])
def test_tables_named_as_paths_never_make_the_backup_remove_anything_outside_its_run(
        tmp_path: Path, second: str) -> None:
    """Tables `t --/-` then `t --/../../../../data` once made the backup `rm -rf` the store
    (its node directories were built from the names). Now node directories are indexes, every
    removal is checked to lie inside the run directory, and a name KWDB's own EXPORT would turn
    into a path refuses the backup before anything is exported, naming it."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    key = (NS, "dev")
    for name in ("t --/-", second):
        site.kwdb.load(key, site.now, database="shop", table=name,
                       columns=[("id", "INT8")], rows=[("1",)])
    site.kwdb.load(key, site.now, database="shop", table="orders",
                   columns=[("id", "INT8")], rows=[("1",)])
    removed: list[str] = []
    run = site.runner.exec

    def recording(namespace: str, pod: str, container: str, command: list[str],
                  timeout: float = 60.0) -> tuple[str, str, int]:
        if command[:2] == ["rm", "-rf"]:
            removed.append(command[2])
        return run(namespace, pod, container, command, timeout)
    site.runner.exec = recording  # type: ignore[method-assign]
    site.backup("first")

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "first")
    assert (status["phase"], status["reason"]) == ("failed", "NotExportable")
    assert status["message"].startswith('table "')
    assert "path of several components" in status["message"]
    assert site.kwdb.removed_outside_extern(key) == []
    uid = (site.api.get(k.KAIWU_BACKUP, NS, "first") or {})["metadata"]["uid"]
    run_dir = f"{EXTERN_DIR}/kaiwu-backup-{uid}"
    assert all(bn.inside(EXTERN_DIR, path) and path.startswith(run_dir) for path in removed)
    assert "shop" in str(site.kwdb.contents(key, site.now)["databases"])


def test_a_plan_in_the_target_that_points_elsewhere_fails_the_backup(tmp_path: Path) -> None:
    """plan.json is read back from the target, which others can write: a plan with another
    backup's uid or a timestamp that is not one is refused, nothing exported."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("first")
    site.backups.run(site.a_pass("dev"))  # plans and writes plan.json
    plan_file = site.files("dev", "first") / bp.PLAN_FILE
    plan = json.loads(plan_file.read_text())
    plan["consistent_to"] = "0'; DROP DATABASE shop; --"
    plan_file.write_text(json.dumps(plan))

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "first")
    assert (status["phase"], status["reason"]) == ("failed", "PlanUnreadable")
    assert "not a decimal timestamp" in status["message"]
    assert "shop" in str(site.kwdb.contents((NS, "dev"), site.now)["databases"])


def test_a_cluster_holding_an_empty_database_is_backed_up_and_restores_it(
        tmp_path: Path) -> None:
    """EXPORT of a relational database without tables sets no result columns (KWDB writes its
    meta.sql, then exports each table; none sets columns): the CLI prints only the tag. That is
    a success, and the empty database comes back."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.kwdb.create_database((NS, "dev"), site.now, "staging")
    site.backup("first")

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "first")
    assert status["phase"] == "completed", status.get("message")
    assert {d["name"]: d["tables"] for d in status["databases"]}["staging"] == 0
    staging = next(d for d in manifest(site, "dev", "first")["databases"]
                   if d["name"] == "staging")
    assert (site.files("dev", "first") / staging["dir"] / "meta.sql").read_text() == \
        "CREATE DATABASE staging;\n"


@pytest.mark.parametrize(("what", "shown"), [
    ("a table whose default calls nextval", 'table "sales"."tickets": a column default calls '
     "nextval()"),
    ("a view whose query holds a ';'", 'view "sales"."big_orders": its definition holds a'),
    ("a view that names a table by its id", 'view "sales"."big_orders": it names a table by '
     "its descriptor id")])
def test_what_a_restore_could_not_make_again_refuses_the_backup_naming_it(
        tmp_path: Path, what: str, shown: str) -> None:
    """Views and sequences are carried from their definitions; what could not be made again
    as it was refuses the backup before anything is exported, naming it: a table whose
    default calls nextval() (IMPORT makes it before any sequence of its database exists,
    create_table.go:2299, import_stmt.go:1103), a view whose text could be two statements, a
    view naming a table by descriptor id (another table in another cluster)."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    key = (NS, "dev")
    if what.startswith("a table"):
        site.kwdb.load(key, site.now, database="shop", schema="sales", table="tickets",
                       columns=[("id", "INT8 DEFAULT nextval('sales.ids':::STRING)")],
                       rows=[("1",)])
    else:
        query = ("SELECT id FROM shop.public.orders WHERE item = 'a;b'" if "';'" in what
                 else "SELECT id FROM [53 AS o]")
        site.kwdb.create_object(key, site.now, database="shop", schema="sales",
                                name="big_orders", kind="view", definition=f"(id) AS {query}")
    site.backup("first")

    site.run_backup()

    status = site.status(k.KAIWU_BACKUP, "first")
    assert (status["phase"], status["reason"]) == ("failed", "NotExportable")
    assert shown in status["message"]
    assert "spec.databases" in status["message"]
    assert not (site.files("dev", "first") / "d1").exists(), "nothing exported"
    site.backup("sensors-only", databases=["sensors"])
    site.run_backup()
    assert site.status(k.KAIWU_BACKUP, "sensors-only")["phase"] == "completed"


# ---- exports that outlive their exec (issue 24 item 5) ----------------------------------------

SLOW = KwbaseSettings(long_timeout_s=60.0)
"""The adapter gives up on an EXPORT after 60 simulated seconds; the orders table below takes
300 (3 rows at 0.01 rows/s)."""


def exports_sent(site: Site, table: str) -> int:
    """How many times the EXPORT of shop.public.<table> was sent to KaiwuDB."""
    statements = [command[command.index("-e") + 1] for _, command in site.runner.calls
                  if "-e" in command]
    return sum(1 for text in statements
               if text.startswith("EXPORT") and f'"shop"."public"."{table}"' in text)


def slow_orders_backup(site: Site, name: str) -> None:
    site.start_cluster("dev")
    load_shop(site)
    site.backup(name, databases=["shop"])
    for _ in range(5):  # planned; settings, users, the schema and customers exported
        site.backups.run(site.a_pass("dev"))
        site.at(site.now + 1)
    assert site.status(k.KAIWU_BACKUP, name)["message"].endswith("4/5 items")
    site.kwdb.set_bulk_rate((NS, "dev"), site.now, 0.01)


def test_an_export_that_outlives_its_exec_is_waited_for_and_its_files_counted(
        tmp_path: Path) -> None:
    site = a_site(tmp_path, kwbase=SLOW)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("patient", databases=["shop"])
    site.kwdb.set_bulk_rate((NS, "dev"), site.now, 0.01)
    for _ in range(4):  # planned; settings, users and the schema: no data rows, no wait
        site.backups.run(site.a_pass("dev"))
        site.at(site.now + 1)
    site.backups.run(site.a_pass("dev"))  # customers: 1 row, 100 s: longer than the exec
    status = site.status(k.KAIWU_BACKUP, "patient")
    assert status["phase"] == "running"
    assert status["message"] == ('exporting from pod dev-0: 3/5 items; exporting table '
                                 '"shop"."public"."customers" (running 0 s)'), status
    site.at(site.now + 61)  # the exec gave up; the statement runs on in KaiwuDB
    site.backups.run(site.a_pass("dev"))
    status = site.status(k.KAIWU_BACKUP, "patient")
    assert status["phase"] == "running", status
    assert "customers\" (KWDB job " in status["message"] and "running since" in status["message"]

    for _ in range(12):
        site.at(site.now + 60)
        site.backups.run(site.a_pass("dev"))
    status = site.status(k.KAIWU_BACKUP, "patient")
    assert status["phase"] == "completed", status
    assert {d["name"]: d["rows"] for d in status["databases"]} == {"shop": 4}
    assert exports_sent(site, "customers") == exports_sent(site, "orders") == 1
    exports = [j for j in site.kwdb.jobs((NS, "dev"), site.now) if j.job_type == "EXPORT"]
    assert {j.status for j in exports} == {"succeeded"}
    assert (site.files("dev", "patient") / "d0/public/orders/n1.0.csv").read_text() == \
        "1,tea\n2,rice\n3,salt\n"


def test_a_reconciler_restarted_during_an_export_waits_for_kwdbs_job_and_never_exports_twice(
        tmp_path: Path) -> None:
    site = a_site(tmp_path)
    slow_orders_backup(site, "survivor")
    site.backups.run(site.a_pass("dev"))  # orders (300 s) starts: its client waits
    assert site.backups.statements.running() != []

    restarted = a_restarted_site(site)  # nothing in memory: KWDB's job row is all there is
    restarted.at(site.now + 5)
    restarted.backups.run(restarted.a_pass("dev"))
    status = restarted.status(k.KAIWU_BACKUP, "survivor")
    assert status["phase"] == "running" and "KWDB job " in status["message"], status

    for _ in range(8):
        restarted.at(restarted.now + 60)
        restarted.backups.run(restarted.a_pass("dev"))
    status = restarted.status(k.KAIWU_BACKUP, "survivor")
    assert status["phase"] == "completed", status
    assert exports_sent(site, "orders") == 1
    assert {d["name"]: d["rows"] for d in status["databases"]} == {"shop": 4}


def test_an_export_whose_node_restarted_is_exported_again_and_kwdbs_orphan_row_stays(
        tmp_path: Path) -> None:
    site = a_site(tmp_path, kwbase=SLOW)
    slow_orders_backup(site, "again")
    site.backups.run(site.a_pass("dev"))  # orders starts; the exec gives up after 60 s
    site.at(site.now + 70)
    site.kwdb.stop_process((NS, "dev"), "dev-0", site.now)  # the session dies with the node
    site.at(site.now + 1)
    site.start_pod("dev", 0)
    site.at(site.now + 10)
    site.kwdb.set_bulk_rate((NS, "dev"), site.now, 1000.0)

    for _ in range(3):  # exported again, its files moved, the manifest
        site.backups.run(site.a_pass("dev"))
        site.at(site.now + 1)

    status = site.status(k.KAIWU_BACKUP, "again")
    assert status["phase"] == "completed", status
    assert exports_sent(site, "orders") == 2
    rows = [j for j in site.kwdb.jobs((NS, "dev"), site.now) if j.job_type == "EXPORT"
            and "/d0.t1" in j.statement]
    assert [j.status for j in rows] == ["running", "succeeded"], \
        "KWDB never ends the first row: its gateway's session died with it"


def test_a_queued_backup_starts_when_the_one_before_it_ends_without_any_event(
        tmp_path: Path) -> None:
    """Level-triggered: the step asks for its next pass while any backup of the cluster is not
    over, so a backup queued behind a running one starts at the pass after that one ends, not
    at the next periodic resync (up to five minutes later), whatever watch events arrive."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("first")
    site.backup("second")
    passes = 0
    while passes < 40:
        p = site.a_pass("dev")
        site.backups.run(p)
        passes += 1
        if not p.requeue:
            break  # nothing asked for another pass: only an event or the resync would come
        site.at(site.now + min(p.requeue))
    assert site.status(k.KAIWU_BACKUP, "first")["phase"] == "completed"
    second = site.status(k.KAIWU_BACKUP, "second")
    assert second["phase"] == "completed", second
    assert not p.requeue, "at rest once every backup is over"


def test_a_user_kwdb_cannot_export_refuses_the_backup_naming_it(tmp_path: Path) -> None:
    """KWDB allows `ops-team.eu` as a user name (create_role.go:242), but its EXPORT USERS
    writes names unquoted and IMPORT USERS parses the whole file first: a backup holding it
    could never be restored, so it is refused before anything is exported."""
    site = a_site(tmp_path)
    site.start_cluster("dev")
    load_shop(site)
    site.kwdb.set_user((NS, "dev"), site.now, "ops-team.eu")
    site.backup("first")
    site.run_backup()
    status = site.status(k.KAIWU_BACKUP, "first")
    assert (status["phase"], status["reason"]) == ("failed", "NotExportable")
    assert 'users "ops-team.eu": KWDB\'s EXPORT USERS writes user names unquoted' in \
        status["message"]
