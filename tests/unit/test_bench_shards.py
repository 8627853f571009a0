"""The shards benchmark's own API server (bench/shards.py): the label selectors the shards send
match as the API server matches them, and a relabelled cluster leaves one shard's watch and
enters the other's as kube-apiserver's watch cache delivers it. The benchmark's figures rest on
both: a wrong selector would give a shard the wrong clusters, a wrong watch would time a move
that never happens."""

from __future__ import annotations

from bench.shards import FleetApi, label_shards, shard_name
from reconciler.kube import kinds as k
from reconciler.model import Obj
from reconciler.settings import SHARD_LABEL, Settings
from tests.support.selectors import selector_matches


def cluster(name: str, **labels: str) -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": name, "namespace": "team-00", "labels": dict(labels)},
            "spec": {"replicas": 3}}


def test_each_shard_selects_its_own_clusters_and_the_unnamed_shard_the_unlabelled() -> None:
    unnamed, a = Settings().shard_selector, Settings(shard="a").shard_selector
    assert selector_matches(unnamed, {}) and selector_matches(unnamed, None)
    assert not selector_matches(unnamed, {SHARD_LABEL: "a"})
    assert not selector_matches(unnamed, {SHARD_LABEL: ""})  # an empty value is a label
    assert selector_matches(a, {SHARD_LABEL: "a"})
    assert not selector_matches(a, {SHARD_LABEL: "b"}) and not selector_matches(a, {})
    managed = "app.kubernetes.io/managed-by=kaiwu-operator"
    assert selector_matches(f"{managed},{unnamed}", {"app.kubernetes.io/managed-by":
                                                     "kaiwu-operator"})
    assert not selector_matches(f"{managed},{a}", {SHARD_LABEL: "a"})
    assert selector_matches("tier!=db", {"tier": "web"}) and not selector_matches(
        "tier!=db", {"tier": "db"})
    assert selector_matches("tier", {"tier": ""}) and not selector_matches("tier", {})
    assert selector_matches(None, {}) and selector_matches("", {"x": "y"})


def test_the_fleet_is_dealt_round_robin_with_the_first_share_unlabelled() -> None:
    assert [shard_name(i, 3) for i in range(6)] == ["", "s1", "s2", "", "s1", "s2"]
    objects = {("KaiwuCluster", "team-00", f"fleet-{i:04d}"): cluster(f"fleet-{i:04d}")
               for i in range(4)}
    label_shards(objects, 2)
    assert [(obj["metadata"]["labels"] or {}).get(SHARD_LABEL)
            for obj in objects.values()] == [None, "s1", None, "s1"]


def test_a_relabelled_cluster_leaves_the_old_shards_watch_and_enters_the_new_ones() -> None:
    api = FleetApi({("KaiwuCluster", "team-00", "orders"): cluster("orders",
                                                                    **{SHARD_LABEL: "a"})})
    since = api.revision
    old, new = Settings(shard="a").shard_selector, Settings(shard="b").shard_selector

    api.edit(k.KAIWU_CLUSTER, "team-00", "orders",
             lambda obj: obj["metadata"]["labels"].update({SHARD_LABEL: "b"}))

    (left,) = api.changes_since(k.KAIWU_CLUSTER, since, None, old)
    (arrived,) = api.changes_since(k.KAIWU_CLUSTER, since, None, new)
    assert left[0] == "DELETED" and arrived[0] == "ADDED"
    # The DELETED event carries what the old shard last saw, at the change's resourceVersion.
    assert left[1]["metadata"]["labels"][SHARD_LABEL] == "a"
    assert left[1]["metadata"]["resourceVersion"] == str(api.revision)
    assert arrived[1]["metadata"]["labels"][SHARD_LABEL] == "b"
    assert api.changes_since(k.KAIWU_CLUSTER, since, None, Settings().shard_selector) == []

    api.edit(k.KAIWU_CLUSTER, "team-00", "orders",
             lambda obj: obj["spec"].update(replicas=5))
    assert [kind for kind, _ in api.changes_since(k.KAIWU_CLUSTER, since, None, new)] == [
        "ADDED", "MODIFIED"]
    assert len(api.changes_since(k.KAIWU_CLUSTER, since, None, old)) == 1  # gone is gone
