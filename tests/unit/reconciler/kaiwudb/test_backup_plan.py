"""Backup decisions, the pure modules of reconciler/kaiwudb/backup/ (names, database, catalog,
plan, export, schedule, start, restore_plan): what a backup exports, when an export or
a transfer counts as failed, when a schedule is due, what retention deletes, when a backup may
start, and the restore order. No cluster: each story feeds the decision what the world showed.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from reconciler.kaiwudb.backup import catalog as bcat
from reconciler.kaiwudb.backup import database as bdb
from reconciler.kaiwudb.backup import export as bx
from reconciler.kaiwudb.backup import names as bn
from reconciler.kaiwudb.backup import plan as bp
from reconciler.kaiwudb.backup import restore_plan as rp
from reconciler.kaiwudb.backup import schedule as bsched
from reconciler.kaiwudb.backup import start as bstart
from reconciler.kaiwudb.kwbase.sql import quote_ident, quote_literal, statement_problem
from renderer.cron import cron_problem

PLAN = bp.Plan("nightly", "u1", "dev-0", 1, "1767225600000000000.0000000000", (
    bdb.DatabasePlan("shop", bdb.RELATIONAL, (("public", "customers"), ("public", "orders"))),
    bdb.DatabasePlan("sensors", bdb.TIME_SERIES, (("public", "temps"),))))


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_relational_tables_are_read_at_the_one_timestamp_and_the_schema_separately() -> None:
    items = {i.id: i for i in PLAN.items()}
    assert list(items) == ["settings", "users", "d0.schema", "d0.t0", "d0.t1", "d1"]
    for j, table in enumerate(("customers", "orders")):
        stmt = items[f"d0.t{j}"].statement
        assert stmt == (f'EXPORT INTO CSV "nodelocal://1/kaiwu-backup-u1/d0.t{j}" FROM '
                        f'SELECT * FROM "shop"."public"."{table}" AS OF SYSTEM TIME '
                        "'1767225600000000000.0000000000'")
        assert items[f"d0.t{j}"].target_dir == f"d0/public/{table}"
    assert items["d0.schema"].statement.endswith('FROM DATABASE "shop" WITH meta_only')
    assert "AS OF" not in items["d1"].statement, "time-series tables have no history"
    assert bp.Plan.from_json(PLAN.to_json()) == PLAN
    assert bp.hlc_time(PLAN.consistent_to) == datetime(2026, 1, 1, tzinfo=UTC)


def test_names_from_kaiwudb_are_quoted_identifiers_and_never_paths_of_ours() -> None:
    """A table named to end the statement and grant admin stays one quoted identifier; node
    directories and item ids are indexes whatever the names are."""
    hostile = "t; GRANT admin TO mallory; --"
    plan = bp.Plan("b", "u1", "dev-0", 1, "1.0", (
        bdb.DatabasePlan("Shop", bdb.RELATIONAL, (("public", hostile), ("public", 'say "hi"'),
                                                ("public", "select"))),))
    assert plan.problem() == ""
    statements = [i.statement for i in plan.items()]
    assert statements[3].endswith(
        'FROM "Shop"."public"."t; GRANT admin TO mallory; --" AS OF SYSTEM TIME \'1.0\'')
    assert '"say ""hi"""' in statements[4]
    assert '"public"."select"' in statements[5], "a reserved word is kept as a name"
    assert [i.node_dir for i in plan.items()] == ["settings", "users", "d0.schema", "d0.t0",
                                                  "d0.t1", "d0.t2"]
    assert quote_ident('a"b') == '"a""b"'
    assert quote_literal("it's") == "'it''s'"


@pytest.mark.parametrize(("what", "name", "wanted"), [
    ("table", "t --/-", "path of several components"),
    ("table", "t --/../../../../data", "path of several components"),
    ("table", "..", "path of several components"),
    ("table", "line\nbreak", "control character"),
    ("database", "my db", "would not read back"),
    ("database", 'My"DB', "would not read back"),
    ("database", "", "empty name"),
])
def test_a_name_kwdbs_export_would_turn_into_a_path_refuses_the_backup(
        what: str, name: str, wanted: str) -> None:
    assert wanted in bn.name_problem(what, name)
    tables = (name,) if what == "table" else ("t",)
    db = name if what == "database" else "shop"
    refs = tuple(("public", t) for t in tables)
    plan = bp.Plan("b", "u1", "dev-0", 1, "1.0", (bdb.DatabasePlan(db, bdb.RELATIONAL, refs),))
    assert wanted in plan.problem()


def test_names_kwdb_carries_are_accepted() -> None:
    for what, name in [("table", "t; GRANT admin TO mallory; --"), ("table", "my  table"),
                       ("database", "shop_2"), ("database", "Sales Q1"), ("table", "Ä")]:
        assert bn.name_problem(what, name) == "", name


def test_a_plan_read_back_is_checked_as_hostile_data() -> None:
    raw = json.loads(PLAN.to_json())
    assert "layout 1" in bp.Plan.from_json(json.dumps({**raw, "layout": None}).encode()).problem()
    evil = {**raw, "consistent_to": "0'; DROP DATABASE shop; --"}
    assert "not a decimal timestamp" in bp.Plan.from_json(json.dumps(evil).encode()).problem()
    evil = {**raw, "uid": "../../../data"}
    assert "not a Kubernetes uid" in bp.Plan.from_json(json.dumps(evil).encode()).problem()
    with pytest.raises(ValueError, match="not a backup plan"):
        bp.Plan.from_json(b'{"databases": 3}')


def test_only_paths_strictly_inside_the_run_directory_are_inside() -> None:
    run = "/kaiwudb/deploy/kaiwudb-container/extern/kaiwu-backup-u1"
    assert bn.inside(run, f"{run}/d0.t1")
    assert not bn.inside(run, run)
    assert not bn.inside(run, f"{run}/d0.t --/../../../../data")
    assert not bn.inside(run, f"{run}-other/x")
    assert not bn.safe_relative("public/../../x")
    assert not bn.safe_relative("/etc/passwd")
    assert bn.safe_relative("public/my  table/n1.0.csv")


def test_system_databases_are_skipped_and_a_missing_wanted_one_is_named() -> None:
    shown = [("defaultdb", bdb.RELATIONAL), ("postgres", bdb.RELATIONAL), ("shop", bdb.RELATIONAL),
             ("system", bdb.RELATIONAL), ("sensors", bdb.TIME_SERIES)]
    assert bdb.choose_databases(shown, []) == (
        [("sensors", bdb.TIME_SERIES), ("shop", bdb.RELATIONAL)], [])
    assert bdb.choose_databases(shown, ["shop", "crm"]) == ([("shop", bdb.RELATIONAL)], ["crm"])


EXPORT = ["filename", "rows", "node_id", "file_num"]


def item(kind: str) -> bp.Item:
    return next(i for i in PLAN.items() if i.kind == kind)


def test_a_notice_or_a_fail_result_is_a_failed_export_never_a_silent_success() -> None:
    table = item("table")
    ok_rows = [{"filename": "TABLE orders", "rows": "3", "node_id": "1", "file_num": "1"}]
    assert bx.export_problem(table, EXPORT, ok_rows, [], ["n1.0.csv"]) == ""
    noticed = bx.export_problem(table, EXPORT, ok_rows, ["export table x failed: disk full"],
                                ["n1.0.csv"])
    assert "disk full" in noticed
    ts = item("ts-database")
    assert bx.export_problem(ts, ["result"], [{"result": "succeed"}], [],
                             ["meta.sql", "temps/n1.0.csv"]) == ""
    assert "result=fail" in bx.export_problem(ts, ["result"], [{"result": "fail"}], [],
                                              ["meta.sql"])
    short = bx.export_problem(table, EXPORT, [{**ok_rows[0], "file_num": "2"}], [],
                              ["n1.0.csv"])
    assert short == ('table "shop"."public"."customers": EXPORT announced 2 data file(s), 1 '
                     "found on the node")
    assert "meta.sql missing" in bx.export_problem(item("schema"), EXPORT, [], [], [])
    assert "users.sql missing" in bx.export_problem(
        next(i for i in PLAN.items() if i.id == "users"), EXPORT, [], [], [])


def test_a_file_is_verified_by_checksum_and_by_its_size_in_the_target() -> None:
    data = b"1,tea\n"
    digest = hashlib.sha256(data).hexdigest()
    assert bx.transfer_problem("orders/n1.0.csv", digest, data) == ""
    assert "differs" in bx.transfer_problem("orders/n1.0.csv", digest, b"1,te")
    expected = {"a.csv": (digest, 6), "b.csv": (digest, 6)}
    assert bx.missing_in_target(expected, {"a.csv": 6, "b.csv": 6}) == []
    assert bx.missing_in_target(expected, {"a.csv": 6, "b.csv": 5}) == ["b.csv"]
    assert bx.missing_in_target(expected, {"a.csv": 6}) == ["b.csv"]


def test_a_schedule_is_due_once_per_slot_and_only_for_the_latest_slot() -> None:
    daily = "0 0 3 * * *"
    created = at("2026-01-01T12:00:00")
    assert bsched.due_slot(daily, created, at("2026-01-01T20:00:00"), False, []) is None, \
        "the 03:00 slot of the creation day is before the schedule existed"
    slot = bsched.due_slot(daily, created, at("2026-01-02T03:00:05"), False, [])
    assert slot == at("2026-01-02T03:00:00")
    assert bsched.due_slot(daily, created, at("2026-01-02T09:00:00"), False, [slot]) is None
    # Away for three days: only the latest slot is taken.
    assert bsched.due_slot(daily, created, at("2026-01-05T04:00:00"), False, [slot]) == \
        at("2026-01-05T03:00:00")
    assert bsched.due_slot(daily, created, at("2026-01-01T12:00:01"), True, []) == created
    assert bsched.slot_name("nightly", slot) == "nightly-20260102030000"
    assert bsched.due_slot("*/15 * * * *", created, at("2026-01-01T12:31:00"), False, []) == \
        at("2026-01-01T12:30:00"), "five fields: minute first"


@pytest.mark.parametrize(("expr", "wanted"), [
    ("0 0 3 * *  * *", "expected 6 fields"), ("61 * * * * *", "spec.schedule"),
    ("every day", "expected 6 fields")])
def test_a_bad_cron_is_named_with_its_field(expr: str, wanted: str) -> None:
    assert wanted in cron_problem(expr)
    assert cron_problem("0 0 3 * * *") == ""


def view(name: str, phase: str, day: int) -> bsched.BackupView:
    return bsched.BackupView(name, phase, at(f"2026-01-{day:02d}T03:00:00"))


def test_retention_keeps_the_newest_and_never_deletes_the_only_successful_backup() -> None:
    now = at("2026-01-10T04:00:00")
    backups = [view(f"b{d}", "completed", d) for d in range(1, 6)] + [
        view("f6", "failed", 6), view("f7", "failed", 7), view("r8", "running", 8)]
    assert bsched.retention_victims(backups, 2, None, now) == ["b1", "b2", "b3"]
    assert bsched.retention_victims(backups, 3, 6 * 86400, now) == ["b1", "b2", "b3", "b4"], \
        "b4 is kept by count but 6 days and an hour old"
    assert bsched.retention_victims(backups, 1, None, now) == ["b1", "b2", "b3", "b4", "f6"]
    only = [view("old", "completed", 1), view("f2", "failed", 2), view("f3", "failed", 3)]
    assert bsched.retention_victims(only, 5, 3600, now) == [], "the only successful backup stays"
    assert bsched.retention_victims(only, 1, 3600, now) == ["f2"]
    assert bsched.age_seconds("30d") == 30 * 86400
    with pytest.raises(ValueError, match="maxAge"):
        bsched.age_seconds("1w")


HEALTHY = bstart.ClusterState(initialized=True, scale_in=False, rolling=False, not_ready=(),
                          failing=())


@pytest.mark.parametrize(("change", "reason"), [
    ({}, ""),
    ({"initialized": False}, "the cluster is not initialised"),
    ({"scale_in": True}, "a scale-in is in progress"),
    ({"rolling": True}, "a rolling update is in progress"),
    ({"failing": ("dev-1", "dev-2")}, "failover is looking after dev-1, dev-2"),
    ({"not_ready": ("dev-1",)}, "pods are not Ready: dev-1"),
    ({"restoring": True}, "the cluster is being restored from a backup"),
])
def test_a_backup_starts_only_on_a_quiet_cluster(change: dict[str, object], reason: str) -> None:
    state = bstart.ClusterState(**{**HEALTHY.__dict__, **change})
    assert bstart.start_blocker(state) == reason


def test_restore_imports_settings_then_users_then_each_database() -> None:
    steps = rp.restore_statements({"databases": [{"name": "shop", "dir": "d0"},
                                                 {"name": "sensors", "dir": "d1"}]},
                                  "nodelocal://1/r")
    assert [s for s, _ in steps] == ["settings", "users", "database shop", "database sensors"]
    assert steps[0][1] == 'IMPORT CLUSTER SETTING SQL DATA ("nodelocal://1/r/settings/' \
        'clustersetting.sql")'
    assert steps[2][1] == 'IMPORT DATABASE CSV DATA ("nodelocal://1/r/d0")'
    old_layout = rp.restore_statements({"databases": [{"name": "shop"}]}, "http://x")
    assert old_layout[2][1] == 'IMPORT DATABASE CSV DATA ("http://x/shop")'


SHOP = bdb.DatabasePlan("shop", bdb.RELATIONAL, (("public", "orders"), ("Sales", 'q1"; --')))


def test_grants_are_read_for_what_the_backup_carries_and_nothing_else() -> None:
    schema_rows = [  # every schema but a user-defined one shows the database's privileges
        {"table_schema": s, "grantee": "auditor", "privilege_type": "SELECT"}
        for s in ("information_schema", "kwdb_internal", "pg_catalog", "public")] + [
        {"table_schema": "Sales", "grantee": "app", "privilege_type": "CREATE"},
        {"table_schema": "empty", "grantee": "app", "privilege_type": "CREATE"}]
    table_rows = [
        {"table_schema": "public", "table_name": "orders", "grantee": "ops-team.eu",
         "privilege_type": "INSERT"},
        {"table_schema": "Sales", "table_name": 'q1"; --', "grantee": "public",
         "privilege_type": "SELECT"},
        {"table_schema": "pg_catalog", "table_name": "pg_class", "grantee": "public",
         "privilege_type": "SELECT"},  # a virtual table
        {"table_schema": "public", "table_name": "v", "grantee": "app",
         "privilege_type": "SELECT"}]  # a view: not carried (refused before, or gone)
    grants, problem = bcat.read_grants(SHOP, schema_rows, table_rows)
    assert problem == ""
    assert grants == (
        bdb.Grant("database", "", "", "auditor", "SELECT"),
        bdb.Grant("schema", "Sales", "", "app", "CREATE"),
        bdb.Grant("table", "Sales", 'q1"; --', "public", "SELECT"),
        bdb.Grant("table", "public", "orders", "ops-team.eu", "INSERT"))


def test_grants_are_replayed_quoted_one_statement_per_object_and_grantee() -> None:
    db = bdb.DatabasePlan(SHOP.name, SHOP.engine, SHOP.tables, (
        bdb.Grant("database", "", "", "auditor", "SELECT"),
        bdb.Grant("schema", "Sales", "", "app", "CREATE"),
        bdb.Grant("table", "Sales", 'q1"; --', "public", "SELECT"),
        bdb.Grant("table", "public", "orders", "ops-team.eu", "UPDATE"),
        bdb.Grant("table", "public", "orders", "ops-team.eu", "INSERT")))
    statements = bcat.grant_statements(db)
    assert statements == [
        ("", 'GRANT SELECT ON DATABASE "shop" TO "auditor"'),
        ("shop", 'GRANT CREATE ON SCHEMA "Sales" TO "app"'),
        ("", 'GRANT SELECT ON TABLE "shop"."Sales"."q1""; --" TO "public"'),
        ("", 'GRANT INSERT, UPDATE ON TABLE "shop"."public"."orders" TO "ops-team.eu"')]
    assert all(statement_problem(text) == "" for _, text in statements)
    many = bdb.DatabasePlan("shop", bdb.RELATIONAL, tuple(("public", f"t{i}") for i in range(50)),
                           tuple(bdb.Grant("table", "public", f"t{i}", "app", "SELECT")
                                 for i in range(50)))
    assert bcat.grant_statements(many) == [("", "GRANT SELECT ON TABLE " + ", ".join(
        f'"shop"."public"."t{i}"' for i in sorted(range(50), key=str)) + ' TO "app"')]
    plan = bp.Plan("b", "u1", "dev-0", 1, "1.0", (db,))
    assert bp.Plan.from_json(plan.to_json()) == plan
    steps = rp.restore_statements({"databases": [{"name": "shop", "dir": "d0"}],
                                   "plan": json.loads(plan.to_json())}, "http://x")
    assert [s for s, _ in steps] == ["settings", "users", "database shop", "grants shop"]


@pytest.mark.parametrize(("grant", "wanted"), [
    (bdb.Grant("database", "", "", "app", "SELECT; DROP"), "not one KWDB knows"),
    (bdb.Grant("database", "", "", "app\nx", "SELECT"), "not a user name"),
    (bdb.Grant("database", "", "", "", "SELECT"), "not a user name"),
    (bdb.Grant("table", "public", "elsewhere", "app", "SELECT"), "not one of the backup's"),
    (bdb.Grant("schema", "public", "", "app", "CREATE"), "not one of the backup's"),
    (bdb.Grant("view", "public", "orders", "app", "SELECT"), "not one of database"),
])
def test_a_grant_read_back_from_a_target_is_replayed_only_when_it_is_one_of_the_backups(
        grant: bdb.Grant, wanted: str) -> None:
    raw = json.loads(bp.Plan("b", "u1", "dev-0", 1, "1.0", (
        bdb.DatabasePlan(SHOP.name, SHOP.engine, SHOP.tables, (grant,)),)).to_json())
    assert wanted in bp.Plan.from_json(json.dumps(raw).encode()).problem()


def test_a_manifest_cannot_point_a_restore_elsewhere() -> None:
    for db in ({"name": "shop", "dir": "../../etc"}, {"name": 'x") WITH x; --'},
               {"name": "shop", "dir": "shop"}):
        with pytest.raises(ValueError, match="does not read"):
            rp.restore_statements({"databases": [db]}, "http://x")


def test_reject_rows_fail_an_import_although_kwdb_says_succeeded() -> None:
    ok = {"job_id": "1", "status": "succeeded", "rows": "3", "reject_rows": "0", "note": "None"}
    assert rp.import_problem("database shop", [ok], []) == ""
    rejected = rp.import_problem("database shop", [{**ok, "reject_rows": "2", "note":
                                                    "There is a REJECT FILE"}], [])
    assert rejected == ("database shop: 2 row(s) rejected (There is a REJECT FILE): the "
                        "restored data would be incomplete")
    assert "ended failed" in rp.import_problem("users", [{**ok, "status": "failed"}], [])
    assert "IMPORT reported" in rp.import_problem("users", [ok], ["something"])


def test_a_damaged_backup_is_found_before_anything_is_restored() -> None:
    data = b"1,tea\n"
    item = bx.ItemResult("shop.orders", 1, {"shop/public/orders/n1.0.csv":
                                            (hashlib.sha256(data).hexdigest(), len(data))})
    manifest = {"items": {"shop.orders": json.loads(item.to_json())}}
    files = {"shop/public/orders/n1.0.csv": data}
    listing = {k: len(v) for k, v in files.items()}
    assert rp.backup_problem(manifest, listing, files.get) == ""
    assert "missing or of another size" in rp.backup_problem(manifest, {}, files.get)
    altered = {"shop/public/orders/n1.0.csv": b"1,pie\n"}
    assert "differs" in rp.backup_problem(manifest, listing, altered.get)
    assert "lists no files" in rp.backup_problem({}, listing, files.get)


def test_a_time_series_export_that_answers_in_another_shape_is_a_failure() -> None:
    ts = item("ts-database")
    assert bx.export_problem(ts, EXPORT, [{"filename": "meta.sql", "rows": "0"}], [],
                             ["meta.sql"]) == \
        'database "sensors": time-series EXPORT answered result=?'
    assert bx.export_problem(ts, ["result"], [], [], ["meta.sql"]) == \
        'database "sensors": time-series EXPORT answered result=?'
    assert bx.export_problem(ts, ["result"], [{"result": "succeed"}], [], ["temps/n1.0.csv"]) \
        == 'database "sensors": meta.sql missing after the export'


def test_slot_names_and_times_are_utc_whatever_the_reconcilers_time_zone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        slot = at("2026-01-02T03:00:00")
        assert bsched.slot_name("nightly", slot) == "nightly-20260102030000"
        assert bsched.next_slot("0 0 3 * * *", slot) == at("2026-01-03T03:00:00")
        assert bsched.latest_slot("0 0 3 * * *", at("2026-01-03T02:59:59")) == slot
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_restore_is_pending_until_its_record_says_completed() -> None:
    started = {rp.RESTORE_ANNOTATION: json.dumps({"backup": "first", "done": ["settings"]})}
    finished = {rp.RESTORE_ANNOTATION: json.dumps({"backup": "first", "done": ["settings"],
                                                   "completedAt": "2026-01-01T00:00:00Z"})}
    assert rp.restore_pending({}, "first")
    assert rp.restore_pending(started, "first")
    assert not rp.restore_pending(finished, "first")
    assert not rp.restore_pending({}, None), "no fromBackup: nothing to restore"
    assert rp.restore_record({rp.RESTORE_ANNOTATION: "not json"}) is None
    assert rp.restore_record({rp.RESTORE_ANNOTATION: "[1]"}) is None


@pytest.mark.parametrize("manifest", [
    {"databases": [{"name": "shop", "dir": "d0"}], "plan": ["not", "a", "plan"]},
    {"databases": ["d0"]},
    {"databases": "d0"},
])
def test_a_manifest_of_the_wrong_shape_is_a_value_error_never_a_crash(
        manifest: dict[str, object]) -> None:
    try:
        steps = rp.restore_statements(manifest, "http://x")
    except ValueError:
        return
    assert [s for s, _ in steps] == ["settings", "users", "database shop"], "no grants step"


def test_a_plan_written_before_privileges_or_foreign_keys_were_carried_says_it_lacks_them(
        ) -> None:
    from reconciler.kaiwudb.backup.status import unread

    raw = json.loads(PLAN.to_json())
    assert raw["privileges"] is True and raw["foreign_keys"] is True
    assert unread({"plan": raw}) == ""
    del raw["foreign_keys"]  # as the reconciler before this one wrote it
    assert unread({"plan": raw}) == ("; nor foreign keys: this backup began before the "
                                     "reconciler carried them")
    del raw["privileges"]  # as an earlier one wrote it
    older = bp.Plan.from_json(json.dumps(raw).encode())
    assert older.privileges is False and older.foreign_keys is False and older.problem() == ""
    assert "nor privileges on databases, schemas and tables nor foreign keys" in unread(
        {"plan": raw})


ORDERS_FK = bdb.ForeignKey("public", "orders", "Item of", ("sku", "size"), "Sales", 'q1"; --',
                          ("sku", "size"), "FULL", "SET NULL", "NO ACTION")


def test_foreign_keys_are_read_with_their_referenced_tables_schema_and_columns_in_order(
        ) -> None:
    """backward_dependencies gives the referenced table by descriptor id, so its schema and
    database; key_column_usage the referencing columns and the referenced index's, in
    order. A key onto another database is left out, said in words."""
    fk_rows = [
        {"schema_name": "public", "table_name": "orders", "constraint_name": "Item of",
         "referenced_database": "shop", "referenced_schema": "Sales",
         "referenced_table": 'q1"; --', "unique_constraint_name": "primary",
         "match_option": "FULL", "update_rule": "SET NULL", "delete_rule": "NO ACTION",
         "convalidated": "true"},
        {"schema_name": "public", "table_name": "orders", "constraint_name": "fk_person",
         "referenced_database": "crm", "referenced_schema": "public",
         "referenced_table": "people", "unique_constraint_name": "primary",
         "match_option": "NONE", "update_rule": "NO ACTION", "delete_rule": "CASCADE",
         "convalidated": "true"}]
    column_rows = [
        {"table_schema": "Sales", "table_name": 'q1"; --', "constraint_name": "primary",
         "column_name": c} for c in ("sku", "size")] + [
        {"table_schema": "public", "table_name": "orders", "constraint_name": "Item of",
         "column_name": c} for c in ("sku", "size")] + [
        {"table_schema": "public", "table_name": "orders", "constraint_name": "fk_person",
         "column_name": "customer"}]
    keys, left_out, problem = bcat.read_foreign_keys(SHOP, fk_rows, column_rows)
    assert (keys, problem) == ((ORDERS_FK,), "")
    assert left_out == ('foreign key "fk_person" of "public"."orders" in database "shop", '
                        'onto "crm"."public"."people" in another database',)


def test_a_foreign_key_is_added_again_with_every_name_quoted_and_both_tables_in_full(
        ) -> None:
    db = replace(SHOP, foreign_keys=(ORDERS_FK,))
    statement = bcat.foreign_key_statement(db, ORDERS_FK)
    assert statement == (
        'ALTER TABLE "shop"."public"."orders" ADD CONSTRAINT "Item of" FOREIGN KEY ("sku", '
        '"size") REFERENCES "shop"."Sales"."q1""; --" ("sku", "size") MATCH FULL ON UPDATE '
        "SET NULL")
    assert statement_problem(statement) == ""
    cascade = replace(ORDERS_FK, match="NONE", on_update="NO ACTION", on_delete="CASCADE")
    assert bcat.foreign_key_statement(db, cascade).endswith('("sku", "size") ON DELETE CASCADE')
    plan = bp.Plan("b", "u1", "dev-0", 1, "1.0", (db,))
    assert bp.Plan.from_json(plan.to_json()) == plan
    steps = rp.restore_statements({"databases": [{"name": "shop", "dir": "d0"}],
                                   "plan": json.loads(plan.to_json())}, "http://x")
    assert [s for s, _ in steps] == ["settings", "users", "database shop", "foreign keys shop"]


@pytest.mark.parametrize(("fk", "wanted"), [
    (replace(ORDERS_FK, ref_table="elsewhere"), "joins tables that are not the backup's"),
    (replace(ORDERS_FK, ref_columns=("sku",)), "columns that do not pair up"),
    (replace(ORDERS_FK, columns=()), "columns that do not pair up"),
    (replace(ORDERS_FK, name=""), "has no name"),
    (replace(ORDERS_FK, match="PARTIAL"), "not what KWDB shows"),
    (replace(ORDERS_FK, on_delete="DROP TABLE x"), "not what KWDB shows"),
])
def test_a_foreign_key_read_back_from_a_target_is_added_only_when_it_is_one_of_the_backups(
        fk: bdb.ForeignKey, wanted: str) -> None:
    raw = json.loads(bp.Plan("b", "u1", "dev-0", 1, "1.0", (
        replace(SHOP, foreign_keys=(fk,)),)).to_json())
    assert wanted in bp.Plan.from_json(json.dumps(raw).encode()).problem()
    raw["databases"][0]["foreign_keys"][0]["columns"] = "sku"
    with pytest.raises(ValueError, match="not a backup plan"):
        bp.Plan.from_json(json.dumps(raw).encode())


def test_a_key_onto_a_hidden_rowid_is_left_out_and_named_not_refused() -> None:
    """A key onto a table without a primary key of its own references its hidden rowid,
    which key_column_usage leaves out (sqlbase/table.go:741-752) and EXPORT does not write:
    the key cannot come back, the rest of the backup can."""
    fk_rows = [{"schema_name": "public", "table_name": "orders", "constraint_name": "fk_log",
                "referenced_database": "shop", "referenced_schema": "public",
                "referenced_table": "log", "unique_constraint_name": "primary",
                "match_option": "NONE", "update_rule": "NO ACTION", "delete_rule": "NO ACTION",
                "convalidated": "true"}]
    column_rows = [{"table_schema": "public", "table_name": "orders",
                    "constraint_name": "fk_log", "column_name": "log_id"}]
    db = replace(SHOP, tables=(*SHOP.tables, ("public", "log")))
    keys, left_out, problem = bcat.read_foreign_keys(db, fk_rows, column_rows)
    assert (keys, problem) == ((), "")
    assert left_out == ('foreign key "fk_log" of "public"."orders" in database "shop", onto '
                        '"shop"."public"."log"\'s hidden rowid (a table without a primary key '
                        "of its own: its rowid is not exported)",)


def test_only_keys_that_held_before_and_after_the_timestamp_are_carried() -> None:
    """The keys are read before the backup's timestamp is taken and again after: a key
    dropped or added meanwhile may not fit the rows exported as of it."""
    dropped = replace(ORDERS_FK, name="old")
    added = replace(ORDERS_FK, name="new")
    kept, changed = bcat.unsettled_foreign_keys([ORDERS_FK, dropped], [added, ORDERS_FK])
    assert kept == (ORDERS_FK,)
    assert changed == ('foreign key "new" of "public"."orders", changed while the backup '
                       "started", 'foreign key "old" of "public"."orders", changed while the '
                       "backup started")
    checking = replace(ORDERS_FK, validated=False)
    assert bcat.unsettled_foreign_keys([checking], [ORDERS_FK]) == ((checking,), ()), \
        "checked meanwhile: it held throughout, and goes as first read (NOT VALID)"


def test_the_foreign_keys_step_adds_what_is_missing_and_waits_for_what_kwdb_still_checks(
        ) -> None:
    """ADD CONSTRAINT runs a schema change that checks every row (sql/backfill.go:419-490):
    until pg_constraint says the key is validated, the step waits. A key the backup had NOT
    VALID is added NOT VALID and done once it is there."""
    unchecked = replace(ORDERS_FK, name="loose", validated=False)
    other = replace(ORDERS_FK, name="other")
    db = replace(SHOP, foreign_keys=(ORDERS_FK, unchecked, other))

    def row(name: str, validated: bool) -> dict[str, str]:
        return {"schema_name": "public", "table_name": "orders", "constraint_name": name,
                "convalidated": "true" if validated else "false"}

    assert bcat.foreign_keys_to_add(db, []) == ([ORDERS_FK, unchecked, other], [])
    assert bcat.foreign_keys_to_add(db, [row("Item of", False), row("loose", False)]) == (
        [other], [ORDERS_FK])
    assert bcat.foreign_keys_to_add(db, [row("Item of", True), row("loose", False),
                                       row("other", True)]) == ([], [])
    assert bcat.foreign_key_statement(db, unchecked).endswith(
        '("sku", "size") MATCH FULL ON UPDATE SET NULL NOT VALID')


def test_the_status_names_ten_left_out_keys_at_most() -> None:
    """Names come from the database and a status has a size: ten are named, the rest
    counted (plan.json lists them all)."""
    from reconciler.kaiwudb.backup.status import left_out_text

    many = [f"foreign key \"k{i}\" onto another database" for i in range(20_000)]
    text = left_out_text({"plan": {"databases": [{"left_out": many}]}})
    assert '"k9"' in text and '"k10"' not in text
    assert text.endswith("; and 19990 more (plan.json lists them)")
    assert len(text) < 1000


def test_comments_are_read_and_set_again_quoted_and_one_with_a_backslash_is_left_out() -> None:
    """system.comments by type (keys/constants.go:428-433): 1 a table's, 2 a column's, 3 an
    index's. The text is the database's: quoted as a literal, never code. kwbase's CLI
    prints a character it cannot show escaped, with a backslash: such a text is not surely
    the comment, so it is left out and named."""
    rows = [
        {"type": "1", "schema_name": "Sales", "table_name": 'q1"; --', "column_name": "NULL",
         "index_name": "NULL", "comment": "it's '; DROP DATABASE shop; --\n二行"},
        {"type": "2", "schema_name": "public", "table_name": "orders", "column_name": "id",
         "index_name": "NULL", "comment": "the order"},
        {"type": "3", "schema_name": "public", "table_name": "orders", "column_name": "NULL",
         "index_name": "primary", "comment": "by id"},
        {"type": "2", "schema_name": "public", "table_name": "orders", "column_name": "item",
         "index_name": "NULL", "comment": "C:\\temp"},
        {"type": "2", "schema_name": "public", "table_name": "orders",
         "column_name": "x\\u200by", "index_name": "NULL", "comment": "escaped name"},
        {"type": "3", "schema_name": "public", "table_name": "orders", "column_name": "NULL",
         "index_name": "by_item", "comment": "x" * (bcat.COMMENT_MAX_CHARS + 1)},
        {"type": "1", "schema_name": "public", "table_name": "made_meanwhile",
         "column_name": "NULL", "index_name": "NULL", "comment": "new"},
        {"type": "1", "schema_name": "public", "table_name": "orders", "column_name": "NULL",
         "index_name": "NULL", "comment": ""}]
    comments, left_out = bcat.read_comments(SHOP, [{"comment": "the shop"}], rows)
    assert comments == (
        bdb.Comment("column", "public", "orders", "id", "the order"),
        bdb.Comment("database", text="the shop"),
        bdb.Comment("index", "public", "orders", "primary", "by id"),
        bdb.Comment("table", "Sales", 'q1"; --', "", "it's '; DROP DATABASE shop; --\n二行"),
        bdb.Comment("table", "public", "orders", "", ""))
    assert left_out == (
        'the comment on column "public"."orders"."item" in database "shop" (it or its name '
        "holds a backslash)",
        'the comment on column "public"."orders"."x\\\\u200by" in database "shop" (it or its '
        "name holds a backslash)",
        f'the comment on index "public"."orders"."by_item" in database "shop" (longer than '
        f"{bcat.COMMENT_MAX_CHARS} characters)",
        'the comment on table "public"."made_meanwhile" in database "shop" (on a table made '
        "while the backup started)")
    db = replace(SHOP, comments=comments)
    statements = [bcat.comment_statement(db, c) for c in comments]
    assert statements == [
        'COMMENT ON COLUMN "shop"."public"."orders"."id" IS \'the order\'',
        "COMMENT ON DATABASE \"shop\" IS 'the shop'",
        'COMMENT ON INDEX "shop"."public"."orders"@"primary" IS \'by id\'',
        'COMMENT ON TABLE "shop"."Sales"."q1""; --" IS \'it\'\'s \'\'; DROP DATABASE shop; '
        "--\n二行'",
        "COMMENT ON TABLE \"shop\".\"public\".\"orders\" IS ''"]
    assert all(statement_problem(text) == "" for text in statements)
    plan = bp.Plan("b", "u1", "dev-0", 1, "1.0", (db,))
    assert bp.Plan.from_json(plan.to_json()) == plan and plan.problem() == ""
    steps = rp.restore_statements({"databases": [{"name": "shop", "dir": "d0"}],
                                   "plan": json.loads(plan.to_json())}, "http://x")
    assert [s for s, _ in steps] == ["settings", "users", "database shop", "comments shop"]
    stray = replace(db, comments=(bdb.Comment("table", "public", "elsewhere", "", "x"),))
    assert "not one of the backup's" in bp.Plan("b", "u1", "dev-0", 1, "1.0",
                                                (stray,)).problem()
