"""Views and sequences a backup carries itself (reconciler/kaiwudb/backup/objects.py): read
from KWDB's own CREATE text (ShowCreateView, ShowCreateSequence), made again from numbers and
from a definition that cannot be two statements, and checked again when read back from a
target, which is not the reconciler's to trust."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from reconciler.kaiwudb.backup import database as bdb
from reconciler.kaiwudb.backup import plan as bp
from reconciler.kaiwudb.backup import restore_plan as rp
from reconciler.kaiwudb.backup.objects import (
    SequenceDef,
    View,
    read_sequence,
    read_view,
    sequence_value,
)

MAX = 2**63 - 1


def test_a_view_is_read_under_its_name_bare_or_quoted_as_kwdb_prints_it() -> None:
    bare = read_view("public", "cheap", 60, "CREATE VIEW cheap (id) AS SELECT id FROM "
                     "shop.public.orders")
    assert bare == View(60, "public", "cheap", "(id) AS SELECT id FROM shop.public.orders")
    assert isinstance(bare, View)
    assert bare.statement("shop") == ('CREATE VIEW "shop"."public"."cheap" (id) AS SELECT id '
                                      "FROM shop.public.orders")
    quoted = read_view("Reports", 'Daily "x"', 61, 'CREATE VIEW "Daily ""x""" (n) AS SELECT 1')
    assert isinstance(quoted, View)
    assert quoted.statement("shop") == 'CREATE VIEW "shop"."Reports"."Daily ""x""" (n) AS SELECT 1'
    unicode = read_view("public", "视图", 62, "CREATE VIEW 视图 (n) AS SELECT 'O''Brien', "
                        "e'it\\'s'")
    assert isinstance(unicode, View), unicode


@pytest.mark.parametrize(("statement", "why"), [
    ("CREATE VIEW other (id) AS SELECT 1", "does not start with CREATE VIEW and its name"),
    ("CREATE TEMP VIEW cheap (id) AS SELECT 1", "does not start with CREATE VIEW"),
    ("CREATE VIEW cheap (id) AS SELECT 1; DROP DATABASE shop", "holds a ';'"),
    ("CREATE VIEW cheap (id) AS SELECT ';' AS x", "holds a ';'"),
    ("CREATE VIEW cheap (id) AS SELECT id FROM [53 AS t]", "by its descriptor id"),
    ("CREATE VIEW cheap (id) AS SELECT id FROM [53(1, 2) AS t]", "by its descriptor id"),
    ("CREATE MATERIALIZED VIEW cheap (id) AS SELECT 1", "runs its query as root"),
    ("CREATE VIEW cheap (id) AS SELECT e'it\\'s", "one statement"),
    ("CREATE VIEW cheap (id) AS SELECT $$'$$", "one statement"),
    ("CREATE VIEW cheap (id) AS SELECT 1 -- the rest", "one statement"),
    ("CREATE VIEW cheap (id) AS SELECT kwdb_internal.force_log_fatal('x')",
     "kwdb_internal or crdb_internal function"),
    ("CREATE VIEW cheap AS SELECT 1", 'is not "(<columns>) AS <query>"'),
])
def test_a_view_the_restore_could_not_run_as_it_was_is_refused_saying_why(
        statement: str, why: str) -> None:
    found = read_view("public", "cheap", 60, statement)
    assert isinstance(found, str) and why in found and 'view "public"."cheap"' in found


def test_a_sequence_is_rebuilt_from_its_numbers_never_from_its_text() -> None:
    found = read_sequence("public", "ids", "CREATE SEQUENCE ids MINVALUE 1 MAXVALUE "
                          f"{MAX} INCREMENT 1 START 1")
    assert found == SequenceDef("public", "ids", 1, MAX, 1, 1, False, 1)
    assert isinstance(found, SequenceDef)
    assert found.create_statement("shop") == (
        f'CREATE SEQUENCE "shop"."public"."ids" MINVALUE 1 MAXVALUE {MAX} INCREMENT 1 START 1')
    virtual = read_sequence("s", "v", f"CREATE SEQUENCE v MINVALUE 1 MAXVALUE {MAX} "
                            "INCREMENT 1 START 1 VIRTUAL")
    assert isinstance(virtual, SequenceDef) and virtual.virtual and virtual.value is None
    assert virtual.setval_statement("shop") is None
    for text in ("CREATE SEQUENCE ids MINVALUE 1 MAXVALUE 9 INCREMENT 1 START 1; DROP TABLE x",
                 "CREATE SEQUENCE ids MINVALUE 1 MAXVALUE 9 INCREMENT 0 START 1",
                 "CREATE SEQUENCE ids MINVALUE 5 MAXVALUE 9 INCREMENT 1 START 1",
                 "CREATE SEQUENCE ids MINVALUE 1 MAXVALUE 99999999999999999999 INCREMENT 1 "
                 "START 1",
                 "CREATE SEQUENCE ids START 1"):
        assert isinstance(read_sequence("public", "ids", text), str), text


@pytest.mark.parametrize(("numbers", "value", "setval"), [
    ((1, 100, 1, 1), 41, 41),  # used: goes on after 41
    ((1, 100, 1, 1), 0, None),  # never used: stores START - INCREMENT, below MINVALUE
    ((1, 100, 1, 1), 101, 100),  # used up: nextval stored one beyond MAXVALUE
    ((1, 5, -1, 5), 6, None),  # descending, never used
    ((1, 5, -1, 5), 0, 1),  # descending, used up
    ((1, 5, -1, 5), 3, 3),
])
def test_a_sequence_value_is_set_only_where_setval_takes_it(
        numbers: tuple[int, int, int, int], value: int, setval: int | None) -> None:
    """setval refuses a value beyond the bounds (sequence.go:176-181); a new sequence holds
    START - INCREMENT already, and a used-up one stays used up at its bound."""
    sequence = SequenceDef("public", "ids", *numbers, value=value)
    made = sequence.setval_statement("shop")
    assert made == (None if setval is None else
                    f"""SELECT setval('"shop"."public"."ids"', {setval}, true)""")


def test_a_sequence_value_must_read_as_one_64_bit_integer() -> None:
    sequence = SequenceDef("public", "ids", 1, MAX, 1, 1, value=0)
    assert sequence_value(sequence, [{"last_value": "41"}]) == 41
    for rows in ([], [{"last_value": "4.1"}], [{"last_value": "NULL"}],
                 [{"last_value": "1"}, {"last_value": "2"}], [{"last_value": str(2**63)}]):
        assert isinstance(sequence_value(sequence, rows), str), rows


def plan_with(views: tuple[View, ...] = (), sequences: tuple[SequenceDef, ...] = ()) -> bp.Plan:
    db = bdb.DatabasePlan("shop", bdb.RELATIONAL, (("public", "orders"),), views=views,
                         sequences=sequences)
    return bp.Plan("first", "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "dev-0", 1,
                   "1767225600000000000.0000000000", (db,))


def test_a_view_reading_a_database_the_backup_does_not_hold_refuses_it() -> None:
    """KWDB names every table a view reads in full (optbuilder/create_view.go:53): one that
    reads a database outside the backup could not be made again, and `system` is never
    backed up."""
    for query, refused in (("SELECT id FROM shop.public.orders", ""),
                           ("SELECT username FROM system.public.users", "system"),
                           ('SELECT id FROM "Other".public.t', "Other"),
                           ("SELECT 'crm.public.people' FROM shop.public.orders", "")):
        plan = plan_with((View(60, "public", "v", f"(x) AS {query}"),))
        problem = plan.problem()
        assert (f'reads database "{refused}"' in problem) if refused else problem == "", query


def test_views_and_sequences_travel_in_the_plan_and_are_checked_again_when_read_back() -> None:
    view = View(60, "public", "cheap", "(id) AS SELECT id FROM shop.public.orders")
    sequence = SequenceDef("public", "ids", 1, MAX, 1, 1, value=41)
    plan = plan_with((view,), (sequence,))
    assert plan.problem() == ""
    assert bp.Plan.from_json(plan.to_json()) == plan

    raw = json.loads(plan.to_json())
    raw["databases"][0]["views"][0]["definition"] = "(id) AS SELECT 1; DROP DATABASE shop"
    assert "holds a ';'" in bp.Plan.from_json(json.dumps(raw).encode()).problem()
    raw = json.loads(plan.to_json())
    raw["databases"][0]["sequences"][0]["increment"] = "1; DROP DATABASE shop"
    assert "not 64-bit integers" in bp.Plan.from_json(json.dumps(raw).encode()).problem()
    raw = json.loads(plan.to_json())
    raw["databases"][0]["sequences"][0]["value"] = True
    assert "does not fit" in bp.Plan.from_json(json.dumps(raw).encode()).problem()
    raw = json.loads(plan.to_json())
    raw["databases"][0]["views"][0]["order"] = "60"
    with pytest.raises(ValueError, match="not a backup plan"):
        bp.Plan.from_json(json.dumps(raw).encode())


def test_a_plan_written_before_views_were_carried_reads_as_holding_none() -> None:
    raw = json.loads(plan_with().to_json())
    for db in raw["databases"]:
        del db["views"], db["sequences"]
    assert bp.Plan.from_json(json.dumps(raw).encode()) == plan_with()


def test_the_restore_makes_sequences_after_their_database_and_views_after_every_database(
        ) -> None:
    view = View(60, "public", "cheap", "(id) AS SELECT 1")
    sequence = SequenceDef("public", "ids", 1, MAX, 1, 1, value=41)
    plan = plan_with((view,), (sequence,))
    crm = bdb.DatabasePlan("crm", bdb.RELATIONAL, (("public", "people"),))
    manifest = {"databases": [{"name": "crm", "dir": "d0"}, {"name": "shop", "dir": "d1"}],
                "plan": {**asdict(plan), "databases": [asdict(crm), asdict(plan.databases[0])]}}

    steps = [step for step, _ in rp.restore_statements(manifest, "https://x")]

    assert steps == ["settings", "users", "database crm", "database shop", "sequences shop",
                     "views"]
