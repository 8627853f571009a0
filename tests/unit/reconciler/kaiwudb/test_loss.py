"""Stories about what the cluster shows of lost Kubernetes nodes (reconciler.kaiwudb.loss): which
node is lost and since when, which pods are down, and which node a claim's volume is pinned to.
Pure reads of small fakes (those of test_failover.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.kaiwudb.loss import (
    NodeLoss,
    disrupted,
    node_loss,
    parse_time,
    pod_node,
    ready_condition,
    volume_node,
)
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.model import Obj
from tests.support.failover_world import (
    NOW,
    FakeView,
    World,
    claim,
    healthy_world,
    node,
    pod,
    stamp,
)
from tests.support.fake_api import FakeApi


def test_a_node_is_lost_when_not_ready_and_since_its_condition_changed() -> None:
    world = healthy_world()
    view = FakeView(world)
    assert node_loss(view, "n0") is None
    world.put(k.NODE, node("n1", "Unknown", NOW - 90))
    assert node_loss(view, "n1") == NodeLoss("n1", "Unknown", NOW - 90)
    world.put(k.NODE, node("n2", "False", NOW - 30))
    assert node_loss(view, "n2") == NodeLoss("n2", "False", NOW - 30)
    assert node_loss(view, "n9") == NodeLoss("n9", "Missing", None)
    silent = node("n3")
    silent["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"}]
    world.put(k.NODE, silent)
    assert node_loss(view, "n3") == NodeLoss("n3", "Unknown", None)
    undated = node("n3", "False")
    del undated["status"]["conditions"][0]["lastTransitionTime"]
    world.put(k.NODE, undated)
    assert node_loss(view, "n3") == NodeLoss("n3", "False", None)


def test_times_are_read_as_rfc3339_and_anything_else_is_unknown() -> None:
    assert parse_time(stamp(NOW)) == NOW
    assert parse_time("") is None and parse_time("yesterday") is None


def test_a_pods_ready_condition_and_node_are_read_from_it() -> None:
    assert ready_condition(pod(0, "n0", since=NOW - 5)) == (True, NOW - 5)
    assert ready_condition(pod(0, "n0", ready=False, since=NOW - 5)) == (False, NOW - 5)
    undated = pod(0, "n0")
    del undated["status"]["conditions"][0]["lastTransitionTime"]
    assert ready_condition(undated) == (True, None)
    assert ready_condition(None) == (False, None)
    assert pod_node(pod(0, "n0")) == "n0" and pod_node(pod(0)) == "" and pod_node(None) == ""


def test_pods_are_down_when_missing_terminating_unscheduled_on_a_lost_node_or_not_ready() -> None:
    world = healthy_world()
    view = FakeView(world)
    pods = {f"dev-{i}": pod(i, f"n{i}") for i in range(3)}
    names = ["dev-0", "dev-1", "dev-2", "dev-3"]
    assert disrupted(view, pods, names) == ["dev-3"]
    assert disrupted(view, {**pods, "dev-1": pod(1, "n1", ready=False)}, names) == \
        ["dev-1", "dev-3"]
    pods["dev-0"]["metadata"]["deletionTimestamp"] = stamp(NOW)
    pods["dev-1"] = pod(1)
    world.put(k.NODE, node("n2", "Unknown"))
    assert disrupted(view, pods, names) == names
    assert disrupted(view, pods, ["dev-0"]) == ["dev-0"]


class PVKube(FakeApi):
    """The world's API, with a PersistentVolume read that may be forbidden."""

    def __init__(self, world: World, status: int = 0) -> None:
        self.__dict__.update(world.kube.__dict__)  # the same store (FakeApi.sharing)
        self.status = status
        self.reads: list[str] = []

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        self.reads.append(name)
        if self.status:
            raise ApiError(self.status, "Forbidden" if self.status == 403 else "Error", name)
        return super().get(kind, namespace, name)


def volume(name: str, **match: Any) -> Obj:
    term: dict[str, Any] = {}
    if "hosts" in match:
        term["matchExpressions"] = [{"key": match.get("key", "kubernetes.io/hostname"),
                                     "operator": match.get("operator", "In"),
                                     "values": match["hosts"]}]
    if "names" in match:
        term["matchFields"] = [{"key": "metadata.name", "operator": "In",
                                "values": match["names"]}]
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}}}


def local_claim() -> Obj:
    made = claim(0, "")
    del made["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    return made


def test_a_claims_node_is_the_schedulers_choice_without_reading_the_volume() -> None:
    kube = PVKube(World())
    assert volume_node(kube, claim(0, "n4")) == "n4"  # type: ignore[arg-type]
    assert kube.reads == []
    assert volume_node(kube, None) == ""  # type: ignore[arg-type]


@pytest.mark.parametrize(("match", "expected"), [
    ({"hosts": ["n5"]}, "n5"),
    ({"names": ["n6"]}, "n6"),
    ({"hosts": ["n5", "n6"]}, ""),  # not one node
    ({"hosts": ["n5"], "key": "topology.kubernetes.io/zone"}, ""),
    ({"hosts": ["n5"], "operator": "NotIn"}, ""),
])
def test_a_pre_made_local_volume_names_its_node_in_its_affinity(match: dict[str, Any],
                                                               expected: str) -> None:
    world = World()
    world.put(k.PV, volume("pv-0", **match))
    kube = PVKube(world)
    assert volume_node(kube, local_claim()) == expected  # type: ignore[arg-type]
    assert kube.reads == ["pv-0"]


def test_an_unbound_claim_has_no_node_and_a_forbidden_volume_read_is_no_answer() -> None:
    unbound = local_claim()
    del unbound["spec"]["volumeName"]
    kube = PVKube(World())
    assert volume_node(kube, unbound) == "" and kube.reads == []  # type: ignore[arg-type]
    assert volume_node(PVKube(World(), 403), local_claim()) == ""  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        volume_node(PVKube(World(), 500), local_claim())  # type: ignore[arg-type]
