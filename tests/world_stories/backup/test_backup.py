"""Stories of backups: a cluster with relational and time-series data is backed up on a
schedule to S3 (moto's server as the stand-in) and to a shared volume, retention prunes old
backups; a node lost in the middle of a backup gives a failed backup with a reason and a later
successful one; a new cluster restored from a backup has the same databases, rows, users and
settings, a cluster that holds data refuses to be restored into, and a damaged backup fails a
restore before anything is imported.

The reconciler runs as in production against the test world (real apiserver, simulated kubelets
and KaiwuDB); its volume-target directory is a temporary directory standing in for the
ReadWriteMany claim mounted into its pod. Timings are printed (pytest -s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from reconciler.kaiwudb.backup.restore_plan import RESTORE_ANNOTATION
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.backup import (
    BUCKET,
    S3,
    backup,
    backups,
    credentials_secret,
    load_shop,
    phase,
    s3,  # noqa: F401  (a fixture)
    schedule,
)
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import NAME, bring_up, report, small_cluster
from tests.world.faults import Faults
from tests.world.simworld import SimWorld

CLAIM = "shared-dumps"


def test_scheduled_backups_reach_s3_and_a_volume_and_retention_prunes(
        sim_world: SimWorld, s3: S3, reconciler_factory: Callable[..., Reconciler],  # noqa: F811
        kube: k8s.ApiClient, namespace: str, tmp_path: Path) -> None:
    (tmp_path / CLAIM).mkdir()
    factory = lambda: reconciler_factory(  # noqa: E731
        backup_volumes_dir=str(tmp_path), backup_poll_s=0.2)
    reconciler, _, took = bring_up(factory, kube, namespace, small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    load_shop(sim_world, namespace)
    credentials_secret(kube, namespace)
    user = Kube(kube, "kubectl")
    started = time.monotonic()
    user.create(schedule(namespace, "every-8s", "*/8 * * * * *", s3.target(), keep=2))
    user.create(schedule(namespace, "daily", "0 0 3 * * *", {"volume": {"claimName": CLAIM}},
                         immediate=True))

    # Three S3 backups completed one after another; retention keeps the newest two.
    def pruned() -> list[str] | None:
        found = backups(kube, namespace)
        done = sorted(n for n, b in found.items() if n.startswith("every-8s")
                      and phase(b) == "completed")
        made = reconciler.metrics.value("kaiwu_backups_total", {"result": "completed"})
        return done if made >= 4 and len(done) == 2 else None
    wait_for("three S3 backups and one pruned", pruned, 90, 0.5)
    report("schedules -> 3 S3 backups, 1 pruned, 1 volume backup", time.monotonic() - started)

    # The user suspends the 8 s schedule, so that what follows reads a world that holds
    # still: a slot that came due meanwhile runs to its end, and retention prunes once more.
    user.patch(kk.KAIWU_BACKUP_SCHEDULE, namespace, "every-8s", {"spec": {"suspend": True}})

    def settled() -> tuple[dict[str, Obj], list[str]] | None:
        found = backups(kube, namespace)
        mine = {n: b for n, b in found.items() if n.startswith("every-8s")}
        if any(phase(b) != "completed" for b in mine.values()) or len(mine) != 2:
            return None
        in_bucket = {key.split("/")[3] for key in s3.keys(f"nightly/{namespace}/{NAME}/")}
        return (found, sorted(mine)) if in_bucket == set(mine) else None
    found, kept = wait_for("the suspended schedule's backups to settle", settled, 60, 0.5)

    volume = [b for n, b in found.items() if n.startswith("daily")]
    assert [phase(b) for b in volume] == ["completed"], "the immediate volume backup"
    status = volume[0]["status"]
    assert status["location"].startswith(f"volume://{CLAIM}/{namespace}/{NAME}/daily-")
    assert {d["name"]: (d["engine"], d["rows"]) for d in status["databases"]} == {
        "shop": ("RELATIONAL", 4), "sensors": ("TIME SERIES", 2)}
    base = tmp_path / CLAIM / namespace / NAME / volume[0]["metadata"]["name"]
    manifest = json.loads((base / "manifest.json").read_text())
    assert manifest["files"] == status["files"] and status["sizeBytes"] > 0
    assert (base / "d1/public/orders/n1.0.csv").read_text() == "1,tea\n2,rice\n3,salt\n" or \
        any((base / "d1/public/orders").glob("n*.0.csv"))
    assert (base / "users/users.sql").read_text() == "CREATE USER app;\n"
    assert "idle_timeout" in (base / "settings/clustersetting.sql").read_text()

    # The bucket holds exactly the two kept S3 backups (settled() compared them), each with
    # its manifest.
    for name in kept:
        b = found[name]["status"]
        assert f"nightly/{namespace}/{NAME}/{name}/manifest.json" in s3.keys(prefix="nightly/")
        assert b["consistentTo"] and b["startedAt"] <= b["completedAt"]
    # Nothing is left on the nodes' disks.
    for ordinal in range(3):
        left = sim_world.kwdb.extern_files((namespace, NAME), f"{NAME}-{ordinal}")
        assert left == {}, left
    last = reconciler.metrics.value("kaiwu_backup_last_success_timestamp_seconds",
                                    {"namespace": namespace, "cluster": NAME})
    assert time.time() - 60 < last <= time.time() + 1



def test_a_backup_queued_behind_another_starts_as_soon_as_that_one_ends(
        sim_world: SimWorld, s3: S3, reconciler_factory: Callable[..., Reconciler],  # noqa: F811
        kube: k8s.ApiClient, namespace: str) -> None:
    """Two backups asked for at once: one runs, the other waits, and starts within moments of
    the first's end, not at the periodic resync. (Here other passes of the cluster may come
    too; that the backup step asks for the next pass itself, with no event at all, is pinned
    by the fast story test_backup_run.py::
    test_a_queued_backup_starts_when_the_one_before_it_ends_without_any_event.)"""
    factory = lambda: reconciler_factory(backup_poll_s=0.2)  # noqa: E731
    reconciler, _, took = bring_up(factory, kube, namespace, small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    load_shop(sim_world, namespace)
    credentials_secret(kube, namespace)
    # At rest, so that nothing else asks for passes (a fresh cluster's health reads do for
    # 20 s): the queued backup has only the backup step's own request to start it.
    wait_for("the reconciler to be at rest", reconciler.at_rest, 60, 0.2)
    user = Kube(kube, "kubectl")
    user.create(backup(namespace, "first", s3.target("queued")))
    user.create(backup(namespace, "second", s3.target("queued")))

    def both_completed() -> dict[str, Obj] | None:
        found = backups(kube, namespace)
        return found if all(phase(found.get(n)) == "completed" for n in found) \
            and len(found) == 2 else None

    done = wait_for("both backups to complete", both_completed, 60, 0.2)
    # Which runs first is the reconciler's choice: the one that started first.
    ran_first, queued = sorted(done.values(), key=lambda b: (b["status"]["startedAt"],
                                                            b["status"]["completedAt"]))
    gap = (datetime.fromisoformat(queued["status"]["startedAt"])
           - datetime.fromisoformat(ran_first["status"]["completedAt"])).total_seconds()
    report("first backup completed -> the queued one started", gap)
    assert 0 <= gap <= 3, (ran_first["status"], queued["status"])


def test_a_scheduled_backup_is_made_at_its_time_though_no_event_comes_when_it_is_due(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str, tmp_path: Path) -> None:
    """No watch event comes when a slot is due (the cluster is at rest; only the schedule's
    creation and each backup's own writes make events): the backup step asks for a pass at the
    schedule's next time itself (level-triggered), so each backup is made at its slot, not at
    the next periodic resync (five minutes)."""
    (tmp_path / CLAIM).mkdir()
    factory = lambda: reconciler_factory(  # noqa: E731
        backup_volumes_dir=str(tmp_path), backup_poll_s=0.2)
    reconciler, _, _ = bring_up(factory, kube, namespace, small_cluster(namespace))
    load_shop(sim_world, namespace)
    wait_for("the reconciler to be at rest", reconciler.at_rest, 60, 0.2)
    Kube(kube, "kubectl").create(schedule(namespace, "every-7s", "*/7 * * * * *",
                                          {"volume": {"claimName": CLAIM}}))

    def two_made() -> list[Obj] | None:
        made = [b for n, b in backups(kube, namespace).items() if n.startswith("every-7s")]
        return made if len(made) >= 2 else None
    made = wait_for("two scheduled backups", two_made, 40, 0.2)
    for b in made:
        slot = datetime.fromisoformat(b["metadata"]["annotations"][kk.SLOT_ANNOTATION])
        created = datetime.fromisoformat(b["metadata"]["creationTimestamp"])
        late = (created - slot).total_seconds()
        report(f"slot {slot.time()} -> {b['metadata']['name']} made", late)
        # creationTimestamp has whole seconds: made within the slot's second or the next four,
        # long before the next slot (7 s) or the periodic resync (five minutes).
        assert -1 <= late <= 4, (slot, created)


def test_a_node_lost_mid_backup_fails_it_with_a_reason_and_the_next_one_succeeds(
        sim_world: SimWorld, faults: Faults, s3: S3,  # noqa: F811
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    factory = lambda: reconciler_factory(backup_poll_s=1.5)  # noqa: E731
    reconciler, _, took = bring_up(factory, kube, namespace, small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    load_shop(sim_world, namespace)
    credentials_secret(kube, namespace)
    user = Kube(kube, "kubectl")
    user.create(backup(namespace, "first", s3.target("adhoc")))
    running = wait_for("the backup to run", lambda: (
        b if phase(b := backups(kube, namespace).get("first")) == "running" else None), 30, 0.1)
    pod = running["status"]["pod"]
    node = (Kube(kube, "test").get(kk.POD, namespace, pod) or {})["spec"]["nodeName"]
    started = time.monotonic()
    faults.lose_node(node)
    failed = wait_for("the backup to fail", lambda: (
        b if phase(b := backups(kube, namespace).get("first")) == "failed" else None), 60, 0.2)
    report("node lost -> backup failed", time.monotonic() - started)
    assert failed["status"]["reason"] == "NodeLost", failed["status"]
    assert pod in failed["status"]["message"]
    keys = s3.keys(f"adhoc/{namespace}/{NAME}/first/")
    assert f"adhoc/{namespace}/{NAME}/first/manifest.json" not in keys
    assert f"adhoc/{namespace}/{NAME}/first/failed.json" in keys

    # The node comes back and its KaiwuDB restarts (it was powered off). A backup asked for
    # before the restarted pod is Ready may plan on it and fail NodeLost too, honestly; the
    # user asks once the cluster is whole again, and that one completes.
    faults.restore_node(node)
    wait_for("the restarted pod to be Ready", lambda: restarted_and_ready(
        Kube(kube, "test").get(kk.POD, namespace, pod)), 60, 0.2)
    started = time.monotonic()
    user.create(backup(namespace, "second", s3.target("adhoc")))
    done = wait_for("the second backup to complete", lambda: (
        b if phase(b := backups(kube, namespace).get("second")) == "completed" else None),
        90, 0.2)
    report("node back -> second backup completed", time.monotonic() - started)
    assert {d["name"] for d in done["status"]["databases"]} == {"shop", "sensors"}
    assert reconciler.metrics.value("kaiwu_backups_total", {"result": "failed"}) == 1


def restarted_and_ready(pod: Obj | None) -> bool:
    """The pod's containers restarted since it was created (after a power-off) and it is Ready."""
    status = (pod or {}).get("status") or {}
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or ())
    return restarts > 0 and condition(pod, "Ready").get("status") == "True"


def restored_copy(user: Kube, reconciler: Reconciler, namespace: str, what: str
                  ) -> dict[str, Any]:
    """A new single-node cluster "copy" restored from KaiwuBackup "source": Ready only once
    every import succeeded; its restore record (the time it took printed)."""
    copy = small_cluster(namespace, startMode="single-node", replicas=1,
                         bootstrap={"fromBackup": {"name": "source"}})
    copy["metadata"]["name"] = "copy"
    started = time.monotonic()
    user.apply(copy)
    ready = wait_for("the restored cluster to be Ready", lambda: (
        c if condition(c := reconciler.cluster("copy"), "Ready").get("status") == "True"
        else None), 120, 0.1)
    report(f"apply restored cluster -> Ready {what}", time.monotonic() - started)
    record: dict[str, Any] = json.loads(ready["metadata"]["annotations"][RESTORE_ANNOTATION])
    return record


def test_a_new_cluster_restored_from_a_backup_has_the_same_data_and_a_full_one_is_refused(
        sim_world: SimWorld, s3: S3, reconciler_factory: Callable[..., Reconciler],  # noqa: F811
        kube: k8s.ApiClient, namespace: str) -> None:
    factory = lambda: reconciler_factory(  # noqa: E731
        backup_poll_s=0.2, restore_http_address="127.0.0.1:0",
        restore_advertise_host="127.0.0.1")
    reconciler, _, took = bring_up(factory, kube, namespace, small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    load_shop(sim_world, namespace)
    credentials_secret(kube, namespace)
    user = Kube(kube, "kubectl")
    user.create(backup(namespace, "source", s3.target("adhoc")))
    wait_for("the backup to complete", lambda: phase(backups(kube, namespace).get("source"))
             == "completed", 60, 0.2)
    before = sim_world.kwdb.contents((namespace, NAME), sim_world.clock.now())

    # A cluster that holds data refuses to be restored into, and nothing is imported.
    patch = Kube(kube, "kubectl-patch")
    patch.patch(kk.KAIWU_CLUSTER, namespace, NAME,
                {"spec": {"bootstrap": {"fromBackup": {"name": "source"}}}})
    refused = wait_for("the restore to be refused", lambda: (
        c if condition(c := reconciler.cluster(NAME), "Stalled").get("reason")
        == "RestoreRefused" else None), 30, 0.2)
    assert "databases sensors, shop; users app" in condition(refused, "Stalled")["message"]
    assert RESTORE_ANNOTATION not in (refused["metadata"].get("annotations") or {})
    assert sim_world.kwdb.contents((namespace, NAME), sim_world.clock.now()) == before
    patch.patch(kk.KAIWU_CLUSTER, namespace, NAME, {"spec": {"bootstrap": None}})

    # A new single-node cluster restored from it: Ready only once every import succeeded.
    record = restored_copy(user, reconciler, namespace, "with its data")
    assert record["done"] == ["settings", "users", "database sensors", "database shop",
                              "grants shop"]
    assert record["completedAt"]
    after = sim_world.kwdb.contents((namespace, "copy"), sim_world.clock.now())
    # Settings included: the file server's CA, trusted for the imports, is no longer. The
    # user's privileges came back with the data.
    assert after == before and "('database', 'app', 'SELECT')" in str(after["grants"])

    # The object store loses a row of one file: a restore from it fails before importing.
    key = f"adhoc/{namespace}/{NAME}/source/d1/public/orders/n1.0.csv"
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"1,tea\n2,rice\n")
    broken = small_cluster(namespace, startMode="single-node", replicas=1,
                           bootstrap={"fromBackup": {"name": "source"}})
    broken["metadata"]["name"] = "broken"
    user.apply(broken)
    failed = wait_for("the damaged restore to fail", lambda: (
        c if condition(c := reconciler.cluster("broken"), "Stalled").get("reason")
        == "RestoreFailed" else None), 90, 0.2)
    assert "not intact" in condition(failed, "Stalled")["message"]
    assert "d1/public/orders/n1.0.csv" in condition(failed, "Stalled")["message"]
    assert condition(failed, "Ready").get("status") != "True"
    assert sim_world.kwdb.contents((namespace, "broken"), sim_world.clock.now())[
        "databases"] == {}, "nothing imported"


def test_schemas_views_sequences_users_grants_comments_and_keys_come_back_the_rest_named(
        sim_world: SimWorld, s3: S3, reconciler_factory: Callable[..., Reconciler],  # noqa: F811
        kube: k8s.ApiClient, namespace: str) -> None:
    """A shop with a second schema ("Catalog"), a user with privileges on a database, a
    schema and a table, comments, and foreign keys: one onto a table of "Catalog" whose name public
    has too (KWDB's own foreign key text would point at public's), one with MATCH FULL and
    actions, one onto another database; a database "reports" holding no table but a view
    that reads shop's tables and a used sequence in a schema of its own, with grants on both
    (KWDB's EXPORT carries neither: the backup reads their definitions and the sequence's
    value). A database with a table whose default calls nextval(), which no restore could
    import, refuses the backup that names it, touching nothing; the backup of the other
    databases completes and names what a restore cannot bring back; a new cluster restored
    from it holds every table, row, view, sequence and its value, user, grant, comment and
    foreign key, the one onto another database aside."""
    factory = lambda: reconciler_factory(  # noqa: E731
        backup_poll_s=0.2, restore_http_address="127.0.0.1:0",
        restore_advertise_host="127.0.0.1")
    reconciler, _, _ = bring_up(factory, kube, namespace, small_cluster(namespace))
    load_shop(sim_world, namespace)
    key, now = (namespace, NAME), sim_world.clock.now()
    kwdb = sim_world.kwdb
    kwdb.load(key, now, database="shop", schema="Catalog", table="items",
              keys={"primary": ["sku", "size"]},
              columns=[("sku", "STRING"), ("size", "STRING")], rows=[("tea", "S"), ("tea", "L")])
    kwdb.load(key, now, database="shop", table="items", keys={"primary": ["sku"]},
              columns=[("sku", "STRING")], rows=[("salt",)])
    kwdb.load(key, now, database="crm", table="people", keys={"primary": ["id"]},
              columns=[("id", "INT8")], rows=[("7",)])
    kwdb.load(key, now, database="shop", table="lines", keys={"primary": ["id"]},
              indexes={"by_item": ["sku", "size"], "by_buyer": ["buyer"]},
              columns=[("id", "INT8"), ("sku", "STRING"), ("size", "STRING"),
                       ("buyer", "INT8")],
              rows=[("1", "tea", "S", "7"), ("2", "tea", "L", "7")])
    kwdb.execute(key, now, 'ALTER TABLE shop.public.lines ADD CONSTRAINT "Item" FOREIGN KEY '
                 '(sku, size) REFERENCES shop."Catalog".items (sku, size) MATCH FULL '
                 "ON DELETE CASCADE ON UPDATE CASCADE")
    kwdb.execute(key, now, "ALTER TABLE shop.public.lines ADD CONSTRAINT buyer FOREIGN KEY "
                 "(buyer) REFERENCES crm.public.people (id)")
    kwdb.execute(key, now, "COMMENT ON TABLE shop.\"Catalog\".items IS '货品 (what we sell)'")
    kwdb.execute(key, now, "COMMENT ON COLUMN shop.public.lines.buyer IS 'who; it''s a crm id'")
    kwdb.set_user(key, now, "clerk")
    kwdb.grant(key, now, 'GRANT CREATE ON SCHEMA "Catalog" TO clerk', database="shop")
    kwdb.grant(key, now, "GRANT SELECT, INSERT ON TABLE shop.public.lines TO clerk")
    kwdb.create_object(key, now, database="reports", name="daily", kind="view",
                       definition='(sku, n) AS SELECT sku, count(*) FROM shop."Catalog".items '
                                  "GROUP BY sku")
    kwdb.create_object(key, now, database="reports", name="report_ids", kind="sequence",
                       schema="archive", value=41)
    kwdb.grant(key, now, "GRANT SELECT ON TABLE reports.public.daily TO clerk")
    kwdb.grant(key, now, "GRANT UPDATE ON TABLE reports.archive.report_ids TO clerk")
    kwdb.load(key, now, database="ledger", table="entries",
              columns=[("id", "INT8 DEFAULT nextval('ledger.public.entry_ids':::STRING)")],
              rows=[("1",)])
    credentials_secret(kube, namespace)
    user = Kube(kube, "kubectl")

    user.create(backup(namespace, "everything", s3.target("adhoc")))
    refused = wait_for("the backup of every database to be refused", lambda: (
        b if phase(b := backups(kube, namespace).get("everything")) == "failed" else None),
        60, 0.2)
    message = refused["status"]["message"]
    assert refused["status"]["reason"] == "NotExportable", refused["status"]
    assert 'table "public"."entries": a column default calls nextval()' in message
    assert "Leave the database out of spec.databases" in message

    chosen = backup(namespace, "source", s3.target("adhoc"))
    chosen["spec"]["databases"] = ["crm", "reports", "sensors", "shop"]
    user.create(chosen)
    done = wait_for("the backup to complete", lambda: (
        b if phase(b := backups(kube, namespace).get("source")) == "completed" else None),
        60, 0.2)
    message = done["status"]["message"]
    assert "passwords" in message and "comments on time-series" in message
    assert 'foreign key "buyer" of "public"."lines" in database "shop", onto "crm"."public".' \
        '"people" in another database' in message
    assert "privileges" not in message and "foreign keys:" not in message
    before = kwdb.contents(key, sim_world.clock.now())

    record = restored_copy(user, reconciler, namespace,
                           "with views, sequences, keys, comments and grants")
    assert record["done"] == ["settings", "users", "database crm", "database reports",
                              "sequences reports", "database sensors", "database shop",
                              "foreign keys shop", "comments shop", "views", "grants reports",
                              "grants shop"]
    after = kwdb.contents((namespace, "copy"), sim_world.clock.now())
    was: dict[str, Any] = {**before}
    now_there: dict[str, Any] = {**after}
    assert now_there["databases"] == {n: db for n, db in was["databases"].items()
                                      if n != "ledger"}
    assert now_there["databases"]["reports"][1]["archive.report_ids"][2] == 41
    assert now_there["grants"]["reports"] == was["grants"]["reports"]
    assert ("view public.daily", "clerk", "SELECT") in now_there["grants"]["reports"]
    assert (after["users"], after["settings"]) == (before["users"], before["settings"])
    assert now_there["grants"]["shop"] == was["grants"]["shop"]
    assert ("schema Catalog", "clerk", "CREATE") in now_there["grants"]["shop"]
    keys = now_there["foreign_keys"]["shop"]
    assert [k[2] for k in keys] == ["Item"], "the key onto crm is left out"
    assert keys == [k for k in was["foreign_keys"]["shop"] if k[2] == "Item"]
    assert keys[0][3].ref == ("shop", "Catalog", "items")
    assert now_there["comments"]["shop"] == was["comments"]["shop"]
    assert len(now_there["comments"]["shop"]) == 2


def test_a_reconciler_restarted_mid_backup_carries_on_with_the_same_node_and_timestamp(
        sim_world: SimWorld, s3: S3, reconciler_factory: Callable[..., Reconciler],  # noqa: F811
        kube: k8s.ApiClient, namespace: str) -> None:
    first, _, took = bring_up(lambda: reconciler_factory(backup_poll_s=1.0), kube, namespace,
                              small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    load_shop(sim_world, namespace)
    credentials_secret(kube, namespace)
    Kube(kube, "kubectl").create(backup(namespace, "nightly", s3.target("adhoc")))
    midway = wait_for("two items exported", lambda: (
        b if "2/6 items" in ((b := backups(kube, namespace).get("nightly") or {}).get(
            "status") or {}).get("message", "") else None), 30, 0.05)
    first.stop()  # the leader dies between two passes
    base = f"adhoc/{namespace}/{NAME}/nightly/"
    assert base + "manifest.json" not in s3.keys(base), "never complete while half-written"

    started = time.monotonic()
    second = reconciler_factory(backup_poll_s=0.2)
    done = wait_for("the backup to complete under the new reconciler", lambda: (
        b if phase(b := backups(kube, namespace).get("nightly")) == "completed" else None),
        60, 0.2)
    report("restart -> backup completed", time.monotonic() - started)
    for field in ("consistentTo", "pod", "nodeId", "startedAt"):
        assert done["status"][field] == midway["status"][field], field
    assert {d["name"]: d["rows"] for d in done["status"]["databases"]} == {
        "shop": 4, "sensors": 2}
    assert second.metrics.value("kaiwu_backups_total", {"result": "completed"}) == 1
    assert sim_world.kwdb.extern_files((namespace, NAME), done["status"]["pod"]) == {}


def test_a_scale_in_asked_for_during_a_backup_waits_for_it(
        sim_world: SimWorld, s3: S3, reconciler_factory: Callable[..., Reconciler],  # noqa: F811
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, _, took = bring_up(lambda: reconciler_factory(backup_poll_s=1.5), kube,
                                   namespace, small_cluster(namespace, replicas=4))
    report("apply -> Ready (4 nodes)", took)
    load_shop(sim_world, namespace)
    credentials_secret(kube, namespace)
    Kube(kube, "kubectl").create(backup(namespace, "before-scale-in", s3.target("adhoc")))
    wait_for("the backup to run", lambda: phase(backups(kube, namespace).get(
        "before-scale-in")) == "running", 30, 0.1)
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME,
                                      {"spec": {"replicas": 3}})
    waiting = wait_for("the scale-in to wait", lambda: (
        c if condition(c := reconciler.cluster(NAME), "Ready").get("reason")
        == "BackupRunning" else None), 20, 0.1)
    assert "before-scale-in" in condition(waiting, "Ready")["message"]
    sts = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME) or {}
    assert sts["spec"]["replicas"] == 4, "no pod removed under a running backup"
    assert not (waiting.get("status") or {}).get("operation")
    wait_for("the backup to complete", lambda: phase(backups(kube, namespace).get(
        "before-scale-in")) == "completed", 60, 0.2)
    started = wait_for("the scale-in to start after it", lambda: (
        o if (o := ((reconciler.cluster(NAME) or {}).get("status") or {}).get("operation"))
        else None), 30, 0.1)
    assert started["targetReplicas"] == 3



def test_a_table_export_longer_than_its_exec_and_a_reconciler_restart_is_exported_once(
        sim_world: SimWorld, s3: S3, reconciler_factory: Callable[..., Reconciler],  # noqa: F811
        kube: k8s.ApiClient, namespace: str) -> None:
    """Real EXPORTs run for minutes to hours. Here the orders table's takes about 8 s while the
    reconciler holds an exec open for 2 s: the statement runs on in KaiwuDB, the reconciler
    follows it through KWDB's job row, and a new reconciler, started while it runs, waits for
    the same job instead of exporting again, then proves the files whole by a count."""
    def factory() -> Reconciler:
        return reconciler_factory(backup_poll_s=0.2, backup_running_poll_s=0.5,
                                  long_statement_timeout_s=2.0)

    first, _, took = bring_up(factory, kube, namespace, small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    load_shop(sim_world, namespace)
    key = (namespace, NAME)
    sim_world.kwdb.load(key, sim_world.clock.now(), database="shop", table="orders",
                        columns=[("id", "INT8"), ("item", "STRING")],
                        rows=[(str(i), "flour") for i in range(10, 40)])
    # The 33 orders in about 8 real seconds, whatever the world clock's speed; the other
    # tables (1 and 2 rows) take well under the 2 s exec.
    sim_world.kwdb.set_bulk_rate(key, sim_world.clock.now(), 33 / (8 * sim_world.clock.speed))
    credentials_secret(kube, namespace)
    started = time.monotonic()
    Kube(kube, "kubectl").create(backup(namespace, "long", s3.target("adhoc")))

    def orders_rows() -> list[str]:
        return [j.status for j in sim_world.kwdb.jobs(key, sim_world.clock.now())
                if j.job_type == "EXPORT" and "/d1.t1" in j.statement]

    followed = wait_for("the orders EXPORT followed through its job row", lambda: (
        b if "(KWDB job " in ((b := backups(kube, namespace).get("long") or {}).get(
            "status") or {}).get("message", "") else None), 60, 0.1)
    assert "exporting table" in followed["status"]["message"]
    first.stop()
    assert orders_rows() == ["running"], "the statement runs on without the reconciler"

    second = factory()
    done = wait_for("the backup to complete under the new reconciler", lambda: (
        b if phase(b := backups(kube, namespace).get("long")) == "completed" else None),
        90, 0.2)
    report("long export across a restart -> completed", time.monotonic() - started)
    assert orders_rows() == ["succeeded"], "exported once, never twice"
    assert {d["name"]: d["rows"] for d in done["status"]["databases"]} == {
        "shop": 34, "sensors": 2}
    assert second.metrics.value("kaiwu_backups_total", {"result": "completed"}) == 1
    base = f"adhoc/{namespace}/{NAME}/long/"
    assert base + "d1/public/orders/n1.0.csv" in s3.keys(base)
