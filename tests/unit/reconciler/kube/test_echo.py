"""The echo of our own write: the watch event carrying the resourceVersion our write's answer
carried (or arriving while our write to that object is still in flight) is recognised as ours,
once; anyone else's change is not."""

from __future__ import annotations

from reconciler.kube.echo import OwnWrites
from reconciler.kube.kinds import STATEFUL_SET
from reconciler.model import Obj


def sts(version: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": version}}


def test_the_event_of_our_write_is_an_echo_once_and_a_later_change_is_not() -> None:
    writes = OwnWrites()
    writes.record(sts("41"))

    assert not writes.is_echo(sts("40")), "the change before ours"
    assert writes.is_echo(sts("41"))
    assert not writes.is_echo(sts("41")), "each version answers once"
    assert not writes.is_echo(sts("42")), "someone's change after ours"


def test_an_event_that_overtakes_our_writes_answer_is_an_echo_too() -> None:
    writes = OwnWrites()
    path = STATEFUL_SET.path("shop", "orders")
    writes.begin(path)
    assert writes.is_echo(sts("43")), "the watch delivered it before the answer was read"
    writes.end(path)
    assert not writes.is_echo(sts("44"))


def test_the_memory_is_bounded() -> None:
    writes = OwnWrites(remembered=3)
    for version in range(10):
        writes.record(sts(str(version)))
    assert len(writes) == 3
    assert not writes.is_echo(sts("0")) and writes.is_echo(sts("9"))


def test_while_two_of_our_writes_to_an_object_are_under_way_one_ending_leaves_the_other() -> None:
    writes = OwnWrites()
    path = STATEFUL_SET.path("shop", "orders")
    writes.begin(path)
    writes.begin(path)  # a status update while the apply is under way
    writes.end(path)
    assert writes.is_echo(sts("45")), "the other write is still under way"
    writes.end(path)
    assert not writes.is_echo(sts("46"))
    writes.begin(path)
    assert writes.is_echo(sts("47")), "a new write after both ended"


def test_an_answer_without_a_version_is_not_remembered() -> None:
    writes = OwnWrites()
    writes.record({"kind": "Status", "status": "Success", "metadata": {}})
    writes.record({"kind": "Status"})
    assert len(writes) == 0
    assert not writes.is_echo({"kind": "StatefulSet", "metadata": {"name": "orders"}})


def test_an_object_of_a_kind_we_do_not_write_is_never_our_echo() -> None:
    writes = OwnWrites()
    writes.begin(STATEFUL_SET.path("shop", "orders"))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "orders", "namespace": "shop", "resourceVersion": "3"}}
    assert not writes.is_echo(deployment)
