"""Stories about the simulated KaiwuDB's data (tests/world/kwdb/data.py): EXPORT writes files on a
node's external-I/O directory with KWDB's result columns and notices, the file commands read
them, IMPORT brings them back into an empty cluster and reports reject rows.

Pure Python, no Kubernetes: the Operator of tests/support/kwdb_operator.py plays kubelet and admin
adapter.
"""

from __future__ import annotations

import csv
import io

from tests.support.kwdb_operator import KEY, Operator
from tests.world.kwdb import ExecResult

EXTERN = "/kaiwudb/deploy/data/extern"


def sql(op: Operator, t: float, stmt: str, via: int = 0) -> ExecResult:
    return op.kwbase(via, t, "sql", "--format=csv", "-e", stmt)


def table(result: ExecResult) -> list[dict[str, str]]:
    assert result.exit_code == 0, result.stderr
    return list(csv.DictReader(io.StringIO(result.stdout)))


def loaded(op: Operator) -> float:
    t = op.healthy_cluster(3)
    op.world.load(KEY, t, database="shop", table="orders", columns=[("id", "INT8"),
                  ("item", "STRING")], rows=[("1", "tea"), ("2", "rice")])
    op.world.load(KEY, t, database="sensors", table="temps", columns=[("ts", "TIMESTAMPTZ"),
                  ("v", "FLOAT8")], rows=[("2026-01-01 00:00:00", "20.5")], time_series=True)
    op.world.set_user(KEY, t, "app")
    op.world.set_setting(KEY, t, "sql.defaults.idle_timeout", "10m")
    return t


def test_relational_export_writes_meta_and_data_with_kwdb_result_columns() -> None:
    op = Operator()
    t = loaded(op)
    dbs = table(sql(op, t, "SHOW DATABASES"))
    assert {d["database_name"]: d["engine_type"] for d in dbs}["sensors"] == "TIME SERIES"
    out = table(sql(op, t, 'EXPORT INTO CSV "nodelocal://1/b1/shop" FROM DATABASE shop'))
    assert list(out[0]) == ["filename", "rows", "node_id", "file_num"]
    assert [(r["filename"], r["rows"]) for r in out] == [("meta.sql", "1"), ("TABLE orders", "2")]
    files = op.world.extern_files(KEY, "kw-0")
    assert sorted(files) == ["b1/shop/meta.sql", "b1/shop/public/orders/meta.sql",
                             "b1/shop/public/orders/n1.0.csv"]
    listed = op.world.exec(KEY, "kw-0", ["find", f"{EXTERN}/b1", "-type", "f"], t)
    assert listed.stdout.splitlines() == [f"{EXTERN}/{p}" for p in sorted(files)]
    csv_path = f"{EXTERN}/b1/shop/public/orders/n1.0.csv"
    assert op.world.exec(KEY, "kw-0", ["cat", csv_path], t).stdout == "1,tea\n2,rice\n"
    sums = op.world.exec(KEY, "kw-0", ["sha256sum", csv_path], t).stdout
    assert sums.endswith(f"  {csv_path}\n") and len(sums.split()[0]) == 64
    assert op.world.exec(KEY, "kw-0", ["rm", "-rf", f"{EXTERN}/b1"], t).exit_code == 0
    assert op.world.extern_files(KEY, "kw-0") == {}


def test_as_of_system_time_sees_the_table_as_it_was() -> None:
    op = Operator()
    t = loaded(op)
    ts = table(sql(op, t, "SELECT cluster_logical_timestamp()"))[0]["cluster_logical_timestamp"]
    op.world.load(KEY, t + 5, database="shop", table="orders",
                  columns=[("id", "INT8"), ("item", "STRING")], rows=[("3", "salt")])
    out = table(sql(op, t + 6, f'EXPORT INTO CSV "nodelocal://1/b/o" FROM SELECT * FROM '
                               f"shop.public.orders AS OF SYSTEM TIME '{ts}'"))
    assert out[0]["rows"] == "2"
    assert op.world.extern_files(KEY, "kw-0")["b/o/n1.0.csv"] == b"1,tea\n2,rice\n"


def test_failed_exports_say_so_only_in_a_notice_or_a_fail_result() -> None:
    op = Operator()
    t = loaded(op)
    op.world.fail_export(KEY, t, "orders")
    op.world.fail_export(KEY, t, "temps")
    rel = sql(op, t, 'EXPORT INTO CSV "nodelocal://1/b/shop" FROM DATABASE shop')
    assert rel.exit_code == 0 and "NOTICE: export table shop.public.orders failed" in rel.stderr
    assert [r["filename"] for r in table(rel)] == ["meta.sql"]
    ts = sql(op, t, 'EXPORT INTO CSV "nodelocal://1/b/sensors" FROM DATABASE sensors')
    assert table(ts) == [{"result": "fail"}] and "NOTICE:" in ts.stderr
    s3 = sql(op, t, 'EXPORT INTO CSV "s3://bucket/x" FROM DATABASE shop')
    assert s3.exit_code == 1 and "s3 does not support additional writing" in s3.stderr


def test_import_in_the_documented_order_restores_an_empty_cluster() -> None:
    source = Operator()
    t = loaded(source)
    for stmt in ['EXPORT CLUSTER SETTING TO SQL "nodelocal://1/b/settings"',
                 'EXPORT USERS TO SQL "nodelocal://1/b/users"',
                 'EXPORT INTO CSV "nodelocal://1/b/shop" FROM DATABASE shop',
                 'EXPORT INTO CSV "nodelocal://1/b/sensors" FROM DATABASE sensors']:
        table(sql(source, t, stmt))
    files = source.world.extern_files(KEY, "kw-0")
    target = Operator()
    t2 = target.healthy_cluster(3)
    # Stage the files as `kwbase nodelocal upload` would (the test plays that part).
    group = target.world._groups[KEY]
    store = group.stores[target.pvc["kw-0"]]
    store.files.update(files)
    settings = table(sql(target, t2, 'IMPORT CLUSTER SETTING SQL DATA '
                                     '("nodelocal://1/b/settings/clustersetting.sql")'))
    assert list(settings[0]) == ["prompt_information"]
    users = table(sql(target, t2, 'IMPORT USERS SQL DATA ("nodelocal://1/b/users/users.sql")'))
    assert list(users[0]) == ["job_id", "status", "fraction_completed", "rows", "abandon_rows",
                              "reject_rows", "note"]
    for db in ("shop", "sensors"):
        got = table(sql(target, t2, f'IMPORT DATABASE CSV DATA ("nodelocal://1/b/{db}")'))
        assert (got[0]["status"], got[0]["reject_rows"]) == ("succeeded", "0")
    before, after = source.world.contents(KEY, t), target.world.contents(KEY, t2)
    assert after == before
    again = sql(target, t2, 'IMPORT DATABASE CSV DATA ("nodelocal://1/b/shop")')
    assert again.exit_code == 1 and 'database "shop" already exists' in again.stderr


def test_a_row_that_does_not_fit_is_rejected_and_the_job_still_succeeds() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    group = op.world._groups[KEY]
    group.stores[op.pvc["kw-0"]].files.update({
        "x/meta.sql": b"CREATE DATABASE x;\n",
        "x/public/t/meta.sql": b"CREATE TABLE t (a INT8, b STRING);\n",
        "x/public/t/n1.0.csv": b"1,one\n2,two,extra\n",
    })
    got = table(sql(op, t, 'IMPORT DATABASE CSV DATA ("nodelocal://1/x")'))
    assert (got[0]["status"], got[0]["rows"], got[0]["reject_rows"]) == ("succeeded", "1", "1")
    assert got[0]["note"] == "There is a REJECT FILE, please read and resolve it"
    assert "x/public/t/reject.txt" in op.world.extern_files(KEY, "kw-0")


def test_enterprise_backup_is_refused_as_in_the_open_source_build() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    out = sql(op, t, "BACKUP TO 'nodelocal://1/x'")
    assert "The BACKUP can only be used in the enterprise version" in out.stderr


def test_cluster_settings_are_shown_set_and_reset_and_a_value_with_a_newline_cannot_come_back(
        ) -> None:
    """SHOW/SET/RESET CLUSTER SETTING (sql/show_cluster_setting.go, set_cluster_setting.go);
    EXPORT CLUSTER SETTING writes a value that needs an escape as `'e'...'` (sql/export.go:
    576-582), which IMPORT CLUSTER SETTING refuses whole (importer/import_stmt.go:1535-1538)."""
    op = Operator()
    t = loaded(op)
    # One column named for the setting; Go's csv writer prints an empty value as an empty line.
    empty = "cloudstorage.http.custom_ca\n\n"
    assert sql(op, t, "SHOW CLUSTER SETTING cloudstorage.http.custom_ca").stdout == empty
    pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    assert sql(op, t, f"SET CLUSTER SETTING cloudstorage.http.custom_ca = '{pem}'").exit_code == 0
    assert table(sql(op, t, "SHOW CLUSTER SETTING cloudstorage.http.custom_ca")) == [
        {"cloudstorage.http.custom_ca": pem}]
    assert sql(op, t, "SHOW CLUSTER SETTING no.such.setting").exit_code == 1

    assert sql(op, t, 'EXPORT CLUSTER SETTING TO SQL "nodelocal://1/b/settings"').exit_code == 0
    written = op.world.extern_files(KEY, "kw-0")["b/settings/clustersetting.sql"].decode()
    assert ("SET CLUSTER SETTING cloudstorage.http.custom_ca = 'e'-----BEGIN CERTIFICATE-----"
            "\\nAAAA\\n-----END CERTIFICATE-----\\n';\n") in written
    assert "SET CLUSTER SETTING sql.defaults.idle_timeout = '10m';\n" in written

    assert sql(op, t, "RESET CLUSTER SETTING cloudstorage.http.custom_ca").exit_code == 0
    assert sql(op, t, "SHOW CLUSTER SETTING cloudstorage.http.custom_ca").stdout == empty
    back = sql(op, t, 'IMPORT CLUSTER SETTING SQL DATA ("nodelocal://1/b/settings/'
                      'clustersetting.sql")')
    assert back.exit_code == 1 and "syntax error" in back.stderr
    assert sql(op, t, "SHOW CLUSTER SETTING cloudstorage.http.custom_ca").stdout == empty, \
        "nothing of a file that does not parse is set"


def test_a_setting_written_as_e_string_reads_back_as_e_when_it_is_the_last_line() -> None:
    """KWDB's scanner takes `--` outside quotes as a comment to the end of the line
    (sql/parser/scan.go): the last line `= 'e'-----BEGIN...';` parses as `= 'e'`. Characters
    past ASCII are escaped too (\\u for two UTF-8 bytes, \\U for more)."""
    op = Operator()
    t = op.healthy_cluster(3)
    op.world.set_setting(KEY, t, "cloudstorage.http.custom_ca",
                         "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert sql(op, t, 'EXPORT CLUSTER SETTING TO SQL "nodelocal://1/b/s"').exit_code == 0
    # The certificate's line is the file's only one: it imports as `e`.
    assert sql(op, t, "RESET CLUSTER SETTING cloudstorage.http.custom_ca").exit_code == 0
    back = sql(op, t, 'IMPORT CLUSTER SETTING SQL DATA ("nodelocal://1/b/s/clustersetting.sql")')
    assert back.exit_code == 0, back.stderr
    assert sql(op, t, "SHOW CLUSTER SETTING cloudstorage.http.custom_ca").stdout == \
        "cloudstorage.http.custom_ca\ne\n"

    op.world.set_setting(KEY, t, "cluster.organization", "开物")
    assert sql(op, t, 'EXPORT CLUSTER SETTING TO SQL "nodelocal://1/b/o"').exit_code == 0
    written = op.world.extern_files(KEY, "kw-0")["b/o/clustersetting.sql"].decode()
    assert "cluster.organization = 'e'\\U00005F00\\U00007269';" in written


def test_grants_are_held_as_kwdb_holds_them_and_read_from_information_schema() -> None:
    """GRANT (grant_revoke.go:113-170): a grantee must be a user or role, or `public`; what is
    granted adds to what is held, ALL shows alone (PrivilegeDescriptor.Show). A table or a
    user-defined schema made after a GRANT ON DATABASE holds a copy of the database's
    privileges (create_table.go:447, create_schema.go:112-113); information_schema shows the
    database's privileges on every schema but the user-defined ones (information_schema.go:
    1023-1066) and SELECT for `public` on virtual tables (virtual_schema.go:383)."""
    op = Operator()
    t = loaded(op)
    refused = sql(op, t, "GRANT SELECT ON DATABASE shop TO nobody")
    assert refused.exit_code == 1 and "user or role nobody does not exist" in refused.stderr
    assert sql(op, t, "GRANT SELECT ON DATABASE shop TO app").stdout == "GRANT\n"
    assert sql(op, t, "GRANT INSERT ON DATABASE shop TO app").exit_code == 0
    op.world.load(KEY, t, database="shop", schema="sales", table="q1", columns=[("id", "INT8")],
                  rows=[])
    assert sql(op, t, "GRANT ALL ON TABLE shop.public.orders TO app, public").exit_code == 0
    assert sql(op, t, "GRANT UPDATE ON TABLE shop.public.orders TO app").exit_code == 0
    on_schema = op.kwbase(0, t, "sql", "--format=csv", "--database=shop", "-e",
                          "GRANT DROP ON SCHEMA sales TO app")
    assert on_schema.exit_code == 0, on_schema.stderr
    schemas = table(sql(op, t, (
        "SELECT table_schema, grantee, privilege_type FROM shop.information_schema."
        "schema_privileges WHERE grantee NOT IN ('admin', 'root') ORDER BY table_schema, "
        "grantee, privilege_type")))
    assert [(r["table_schema"], r["privilege_type"]) for r in schemas] == [
        (s, p) for s in ("information_schema", "kwdb_internal", "pg_catalog", "public")
        for p in ("INSERT", "SELECT")] + [("sales", "DROP"), ("sales", "INSERT"),
                                          ("sales", "SELECT")]
    tables = table(sql(op, t, (
        "SELECT table_schema, table_name, grantee, privilege_type FROM shop.information_schema."
        "table_privileges WHERE grantee NOT IN ('admin', 'root') ORDER BY table_schema, "
        "table_name, grantee, privilege_type")))
    shown = [(r["table_schema"], r["table_name"], r["grantee"], r["privilege_type"])
             for r in tables]
    assert ("public", "orders", "app", "ALL") in shown
    assert ("public", "orders", "app", "UPDATE") not in shown, "ALL shows alone"
    assert ("public", "orders", "public", "ALL") in shown
    assert [x for x in shown if x[1] == "q1"] == [("sales", "q1", "app", "INSERT"),
                                                  ("sales", "q1", "app", "SELECT")]
    assert ("pg_catalog", "pg_class", "public", "SELECT") in shown


def test_import_users_parses_the_whole_file_first_and_an_unquoted_odd_name_fails_it() -> None:
    """EXPORT USERS writes `CREATE USER <name>` unquoted (export.go:634-690); IMPORT USERS
    parses every statement before running one (import_stmt.go:1573-1576): the odd name fails
    the file with a syntax error, before any user is looked at or created."""
    op = Operator()
    t = loaded(op)
    op.world.set_user(KEY, t, "ops-team.eu")
    assert sql(op, t, 'EXPORT USERS TO SQL "nodelocal://1/u"').exit_code == 0
    users = op.world.extern_files(KEY, "kw-0")["u/users.sql"].decode()
    assert "CREATE USER ops-team.eu;" in users
    failed = sql(op, t, 'IMPORT USERS SQL DATA ("nodelocal://1/u/users.sql")')
    assert failed.exit_code == 1 and 'at or near "-": syntax error' in failed.stderr


FOREIGN_KEYS = (
    "SELECT t.schema_name, t.name AS table_name, d.dependson_name AS constraint_name, "
    "r.database_name AS referenced_database, r.schema_name AS referenced_schema, "
    "r.name AS referenced_table, c.unique_constraint_name, c.match_option, c.update_rule, "
    "c.delete_rule, k.convalidated FROM shop.kwdb_internal.backward_dependencies AS d "
    "JOIN shop.kwdb_internal.tables AS t ON t.table_id = d.descriptor_id "
    "JOIN shop.kwdb_internal.tables AS r ON r.table_id = d.dependson_id "
    "JOIN shop.information_schema.referential_constraints AS c ON c.constraint_schema = "
    "t.schema_name AND c.table_name = t.name AND c.constraint_name = d.dependson_name "
    "JOIN shop.pg_catalog.pg_constraint AS k ON k.conrelid::INT8 = d.descriptor_id AND "
    "k.conname = d.dependson_name AND k.contype = 'f' "
    "WHERE d.dependson_type = 'fk' ORDER BY 1, 2, 3")


def test_a_foreign_key_is_added_as_resolvefk_checks_it_and_read_by_descriptor() -> None:
    """ADD CONSTRAINT ... FOREIGN KEY (create_table.go:1018-1218): a table with rows needs an
    index starting with the columns (an empty one gets <table>_auto_index_<name>), the
    referenced columns must be a unique index's in its order (sqlbase/table.go:843-869), the
    name new on the table, every row matched unless NOT VALID (check.go:280-337, values as
    %v prints them). The keys read back with the referenced table's own schema and whether
    they were checked (kwdb_internal.go:1924-1985, pg_catalog.go:925-1040), the columns from
    key_column_usage in order (information_schema.go:664-725)."""
    op = Operator()
    t = loaded(op)
    op.world.load(KEY, t, database="shop", schema="cat", table="items",
                  keys={"primary": ["sku", "size"]}, columns=[("sku", "STRING"),
                  ("size", "STRING")], rows=[("tea", "S")])
    op.world.load(KEY, t, database="shop", table="lines", keys={"primary": ["id"]},
                  columns=[("id", "INT8"), ("sku", "STRING"), ("size", "STRING")],
                  rows=[("1", "tea", "S"), ("2", "", "")])
    unindexed = sql(op, t, "ALTER TABLE shop.public.lines ADD CONSTRAINT k FOREIGN KEY "
                           "(sku, size) REFERENCES shop.cat.items (sku, size)")
    assert 'foreign key requires an existing index on columns ("sku", "size")' \
        in unindexed.stderr
    op.world.load(KEY, t, database="shop", table="empty_lines",
                  columns=[("sku", "STRING"), ("size", "STRING")], rows=[])
    reversed_order = sql(op, t, "ALTER TABLE shop.public.empty_lines ADD CONSTRAINT k FOREIGN "
                                "KEY (size, sku) REFERENCES shop.cat.items (size, sku)")
    assert "there is no unique constraint matching given keys for referenced table items" \
        in reversed_order.stderr
    auto = sql(op, t, "ALTER TABLE shop.public.empty_lines ADD CONSTRAINT k FOREIGN KEY "
                      "(sku, size) REFERENCES shop.cat.items (sku, size) ON DELETE CASCADE")
    assert (auto.exit_code, auto.stdout) == (0, "ALTER TABLE\n"), auto.stderr
    again = sql(op, t, "ALTER TABLE shop.public.empty_lines ADD CONSTRAINT k FOREIGN KEY "
                       "(sku, size) REFERENCES shop.cat.items (sku, size)")
    assert 'duplicate constraint name: "k"' in again.stderr
    op.world.load(KEY, t, database="shop", table="orders2", indexes={"by_item": ["sku", "size"]},
                  columns=[("sku", "STRING"), ("size", "STRING")], rows=[("salt", "S")])
    unmatched = sql(op, t, "ALTER TABLE shop.public.orders2 ADD CONSTRAINT k2 FOREIGN KEY (sku, "
                           "size) REFERENCES shop.cat.items (sku, size)")
    assert "foreign key violation: \"orders2\" row sku='salt', size='S' has no match in " \
        '"items"' in unmatched.stderr
    op.world.execute(KEY, t, "ALTER TABLE shop.public.orders2 ADD CONSTRAINT k2 FOREIGN KEY "
                             "(sku, size) REFERENCES shop.cat.items (sku, size) NOT VALID")
    assert [(r["table_name"], r["constraint_name"], r["referenced_schema"],
             r["referenced_table"], r["delete_rule"], r["convalidated"])
            for r in table(sql(op, t, FOREIGN_KEYS))] == [
        ("empty_lines", "k", "cat", "items", "CASCADE", "true"),
        ("orders2", "k2", "cat", "items", "NO ACTION", "false")]
    columns = table(sql(op, t, "SELECT table_schema, table_name, constraint_name, column_name "
                               "FROM shop.information_schema.key_column_usage ORDER BY "
                               "table_schema, table_name, constraint_name, ordinal_position"))
    assert [(r["table_name"], r["constraint_name"], r["column_name"]) for r in columns
            if r["table_name"] in ("items", "empty_lines")] == [
        ("items", "primary", "sku"), ("items", "primary", "size"), ("empty_lines", "k", "sku"),
        ("empty_lines", "k", "size")]


def test_comments_are_set_replaced_removed_and_read_from_system_comments() -> None:
    """COMMENT ON (parser/sql.y:2644-2686; a comment replaces the one there, NULL removes
    it), read back from system.comments by type (keys/constants.go:428-433) and named through
    kwdb_internal (kwdb_internal.go:233-300, 1710-1790)."""
    op = Operator()
    t = loaded(op)
    for statement in ("COMMENT ON DATABASE shop IS 'old'", "COMMENT ON DATABASE shop IS 'it''s'",
                      "COMMENT ON TABLE shop.public.orders IS 'x'",
                      "COMMENT ON COLUMN shop.public.orders.item IS 'what'",
                      "COMMENT ON INDEX shop.public.orders@primary IS 'pk'",
                      "COMMENT ON TABLE shop.public.orders IS NULL",
                      "COMMENT ON COLUMN shop.public.orders.id IS ''"):
        done = sql(op, t, statement)
        assert done.stdout == " ".join(statement.split()[:3]) + "\n", done.stderr
    missing = sql(op, t, "COMMENT ON COLUMN shop.public.orders.nope IS 'x'")
    assert 'column "nope" does not exist' in missing.stderr
    assert table(sql(op, t, "SELECT c.comment FROM system.comments AS c JOIN shop.pg_catalog."
                            "pg_database AS d ON c.object_id = d.oid::INT8 WHERE c.type = 0 AND "
                            "d.datname = 'shop'")) == [{"comment": "it's"}]
    rows = table(sql(op, t, (
        "SELECT c.type, t.schema_name, t.name AS table_name, col.column_name, idx.index_name, "
        "c.comment FROM system.comments AS c JOIN shop.kwdb_internal.tables AS t ON t.table_id "
        "= c.object_id LEFT JOIN shop.kwdb_internal.table_columns AS col ON c.type = 2 AND "
        "col.descriptor_id = c.object_id AND col.column_id = c.sub_id LEFT JOIN shop."
        "kwdb_internal.table_indexes AS idx ON c.type = 3 AND idx.descriptor_id = c.object_id "
        "AND idx.index_id = c.sub_id WHERE c.type IN (1, 2, 3) AND t.database_name = 'shop' "
        "AND t.state = 'PUBLIC' AND ((c.type = 1 AND c.sub_id = 0) OR (c.type = 2 AND "
        "col.column_name IS NOT NULL) OR (c.type = 3 AND idx.index_name IS NOT NULL)) "
        "ORDER BY 2, 3, 1, 4, 5")))
    assert [(r["type"], r["column_name"], r["index_name"], r["comment"]) for r in rows] == [
        ("2", "id", "NULL", ""), ("2", "item", "NULL", "what"), ("3", "NULL", "primary", "pk")]
