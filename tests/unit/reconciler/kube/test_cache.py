"""Stories of the watch caches (reconciler.kube.cache) on the fast tier's fake API
(tests/support/fake_api.py): what they keep of each object, and their indexes by cluster and by
node, kept right through adds, updates, deletes and relists. The objects are the benchmark
fleet's (bench/fleet.py), shaped as an API server returns them, and the backup stories'
KaiwuBackups and schedules (test_backup_step.py), made as large as a tenant may. The same
caches against the real apiserver: tests/world_stories/runtime/test_caches.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.fleet import LiveCluster, live_fleet
from reconciler.kaiwudb import crashloop, loss, pods, rollout
from reconciler.kaiwudb.backup.status import phase_of, running_backup
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube import store
from reconciler.kube.cache import Caches, _cluster_changed, _node_projection
from reconciler.kube.client import ApiError
from reconciler.kube.informer import Informer
from reconciler.kube.kinds import Kind, slim
from reconciler.kube.store import INTERNED_MAX, ValuePool, cluster_of, store_key
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from renderer import schema
from renderer.builders import INSTANCE_LABEL
from tests.support.backup_step import (
    NAME,
    NS,
    World,
    a_pass,
    at,
    backup,
    schedule,
    step,
)
from tests.support.caches import listed
from tests.support.fake_api import FakeApi


@pytest.fixture(scope="module")
def fleet() -> list[LiveCluster]:
    return live_fleet(12, nodes=4)


def pod_informer(api: FakeApi, fleet: list[LiveCluster]) -> Informer:
    for pod in (pod for cluster in fleet for pod in cluster.pods):
        api.put(pod)
    informer = Informer(api, k.POD, Settings(leader_election=False))  # type: ignore[arg-type]
    informer._list()
    return informer


def gone(api: FakeApi, obj: Obj) -> None:
    """The pod is deleted, its kubelet confirming at once."""
    api.delete(k.POD, obj["metadata"]["namespace"], obj["metadata"]["name"],
               grace_period_seconds=0)


def scanned(informer: Informer, namespace: str, instance: str) -> list[str]:
    """The cluster's pods found the slow way: every cached object looked at."""
    return sorted(str(pod["metadata"]["name"]) for pod in informer.list()
                  if pod["metadata"]["namespace"] == namespace
                  and pod["metadata"]["labels"].get(INSTANCE_LABEL) == instance)


def on_node_scanned(informer: Informer, node: str) -> list[ClusterKey]:
    return sorted({key for pod in informer.list() if pod["spec"].get("nodeName") == node
                   if (key := cluster_of(pod)) is not None})


def check_indexes(informer: Informer, fleet: list[LiveCluster]) -> None:
    for cluster in fleet:
        md = cluster.cluster["metadata"]
        found = sorted(str(pod["metadata"]["name"]) for pod in informer.list(
            md["namespace"], {INSTANCE_LABEL: md["name"],
                              "app.kubernetes.io/name": "kaiwudb"}))
        assert found == scanned(informer, md["namespace"], md["name"])
    for node in ("node-0", "node-1", "node-2", "node-3", "node-9"):
        assert informer.clusters_on_node(node) == on_node_scanned(informer, node)


def test_the_indexes_find_what_a_scan_finds_through_adds_updates_deletes_and_relists(
        fleet: list[LiveCluster]) -> None:
    api = FakeApi()
    informer = pod_informer(api, fleet)
    assert len(informer) == sum(len(cluster.pods) for cluster in fleet)
    check_indexes(informer, fleet)
    assert informer.clusters_on_node("node-0"), "the fleet has pods on node-0"

    # A pod made again on another node (as its StatefulSet does once the old one is gone), one
    # relabelled into another cluster, one added, one deleted.
    moved = copy.deepcopy(fleet[0].pods[0])
    moved["spec"]["nodeName"] = "node-9"
    gone(api, moved)
    api.create(moved)
    relabelled = fleet[1].pods[0]["metadata"]
    api.edit(k.POD, relabelled["namespace"], relabelled["name"],
             lambda obj: obj["metadata"]["labels"].update(
                 {INSTANCE_LABEL: fleet[2].cluster["metadata"]["name"]}))
    added = copy.deepcopy(fleet[3].pods[0])
    added["metadata"]["name"] = "extra-0"
    api.create(added)
    deleted = fleet[4].pods[0]
    gone(api, deleted)
    informer._watch()
    check_indexes(informer, fleet)
    assert informer.clusters_on_node("node-9") == [cluster_of(moved)]
    assert informer.peek(deleted["metadata"]["namespace"], deleted["metadata"]["name"]) is None

    # The relabelled pod goes: no cluster's index keeps it, the one it left included.
    gone(api, fleet[1].pods[0])
    informer._watch()
    check_indexes(informer, fleet)

    # A relist after 410 Gone: the store and its indexes are the list's, nothing left over of
    # what went while the cache was not watching.
    for pod in [moved, *(pod for cluster in fleet[6:] for pod in cluster.pods)]:
        gone(api, pod)
    api.compact()
    with pytest.raises(ApiError) as expired:
        informer._watch()
    assert expired.value.gone
    informer._list()
    listed, _ = api.list_objects(k.POD)
    assert sorted(store_key(pod) for pod in informer.list()) == sorted(map(store_key, listed))
    assert len(informer) == sum(len(cluster.pods) for cluster in fleet[:6]) - 3 + 1, \
        "three gone (moved, deleted, relabelled), one added (extra-0)"
    check_indexes(informer, fleet)
    assert informer.clusters_on_node("node-9") == []


def test_a_node_event_queues_the_clusters_with_pods_there_without_copying_the_pod_cache(
        fleet: list[LiveCluster], monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    for obj in [*(pod for cluster in fleet for pod in cluster.pods),
                *(cluster.cluster for cluster in fleet)]:
        api.put(obj)
    queued: list[ClusterKey] = []
    caches = Caches(api, Settings(leader_election=False), Metrics(),  # type: ignore[arg-type]
                    queued.append)
    caches.informers[k.KAIWU_CLUSTER]._list()  # the clusters are this (unnamed) shard's
    listed(caches)  # the pods' watch now selects these clusters' pods (kube.selection)
    caches.informers[k.POD]._list()
    listed(caches)
    queued.clear()  # the lists' ADDED events

    def no_copies(*args: Any, **kwargs: Any) -> list[Obj]:
        raise AssertionError("a Node event must not list (copy) the Pod cache")
    monkeypatch.setattr(caches.informers[k.POD], "list", no_copies)
    node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
            "spec": {"taints": [{"key": "node.kubernetes.io/unreachable",
                                 "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    before = copy.deepcopy(node)
    before["spec"] = {}
    before["status"]["conditions"][0]["status"] = "True"
    caches._on_event("MODIFIED", node, before)

    expected = sorted({key for cluster in fleet for pod in cluster.pods
                       if pod["spec"]["nodeName"] == "node-1"
                       if (key := cluster_of(pod)) is not None})
    assert queued == expected
    assert 0 < len(expected) < len(fleet)


def crash_looping(pod: Obj) -> Obj:
    looping = copy.deepcopy(pod)
    status = looping["status"]["containerStatuses"][0]
    status.update(restartCount=4, ready=False, state={"waiting": {"reason": "CrashLoopBackOff"}},
                  lastState={"terminated": {"exitCode": 1, "message": "bad flag"}})
    looping["status"]["conditions"][1]["status"] = "False"
    return looping


def test_every_reader_of_pods_claims_secrets_and_nodes_answers_the_same_on_the_slim_copy(
        fleet: list[LiveCluster]) -> None:
    pods_ = [pod for cluster in fleet for pod in cluster.pods]
    terminating = copy.deepcopy(pods_[0])
    terminating["metadata"]["deletionTimestamp"] = "2026-11-30T09:00:00Z"
    pending = copy.deepcopy(pods_[1])
    pending["spec"].pop("nodeName")
    pending["status"] = {"phase": "Pending"}
    for pod in [*pods_, terminating, pending, crash_looping(pods_[2])]:
        kept = slim(pod)
        assert "managedFields" not in kept["metadata"]
        for reader in (pods.kwbase_running, pods.pod_ready, loss.pod_node, loss.ready_condition,
                       crashloop.crash_state, cluster_of):
            assert reader(kept) == reader(pod), reader.__name__
        assert rollout.running_versions({"p": kept}) == rollout.running_versions({"p": pod})
        assert kept["metadata"]["labels"] == pod["metadata"]["labels"]
        assert kept["metadata"]["uid"] == pod["metadata"]["uid"]

    class NoVolumes:
        def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
            raise AssertionError("a claim with a selected node needs no volume read")
    for claim in (claim for cluster in fleet for claim in cluster.claims):
        kept = slim(claim)
        assert loss.volume_node(NoVolumes(), kept) == loss.volume_node(  # type: ignore[arg-type]
            NoVolumes(), claim)  # type: ignore[arg-type]
        assert crashloop.crash_restarts(kept, "r") == crashloop.crash_restarts(claim, "r")
        assert kept["spec"] == claim["spec"] and kept["status"] == claim["status"]

    secrets = [secret for cluster in fleet for secret in cluster.secrets]
    assert secrets, "the fleet has TLS clusters"
    for secret in secrets:
        kept = slim(secret)
        assert {key: kept.get(key) for key in ("type", "data")} == \
            {key: secret.get(key) for key in ("type", "data")}
        assert "managedFields" not in kept["metadata"]

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"},
        "managedFields": [{"manager": "kubelet"}]},
        "spec": {"unschedulable": True, "taints": [{"key": "t", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False",
                                   "lastTransitionTime": "2026-11-30T09:00:00Z"}],
                   "images": [{"names": ["kwdb/kwdb:3.2.1"], "sizeBytes": 1}] * 50}}

    class OneNode:
        def __init__(self, obj: Obj) -> None:
            self.obj = obj

        def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
            return self.obj
    kept = slim(node)
    assert "images" not in kept["status"]
    assert _node_projection(kept) == _node_projection(node)
    assert loss.node_loss(OneNode(kept), "node-1") == loss.node_loss(  # type: ignore[arg-type]
        OneNode(node), "node-1")  # type: ignore[arg-type]


def test_the_kinds_the_reconciler_applies_are_kept_whole(fleet: list[LiveCluster]) -> None:
    """Drift attribution reads their managedFields (reconciler.drift.normalise)."""
    for live in fleet[0].live:
        assert slim(live) is live


def test_a_kaiwucluster_is_kept_but_for_its_managed_fields(fleet: list[LiveCluster]) -> None:
    cluster = fleet[0].cluster
    kept = slim(cluster)
    assert "managedFields" in cluster["metadata"] and "managedFields" not in kept["metadata"]
    without = {**cluster, "metadata": {key: value for key, value in cluster["metadata"].items()
                                       if key != "managedFields"}}
    assert kept == without


TENANT_NOTE = 200 * 1024  # what a tenant may add in annotations (the API allows 256 KiB)


def tenant_sized(obj: Obj, uid: str) -> Obj:
    """`obj` as anyone who may create it in a watched namespace may make it: 200 KiB of
    annotations, fifty labels, managedFields, owners and finalizers besides what the reconciler
    reads."""
    big = copy.deepcopy(obj)
    md = big["metadata"]
    md.update(uid=uid, resourceVersion="41", generation=1)
    md.setdefault("labels", {}).update({f"tenant.example/l{i}": "v" * 63 for i in range(50)})
    md.setdefault("annotations", {})["tenant.example/note"] = "x" * TENANT_NOTE
    md["managedFields"] = [{"manager": f"kubectl-{i}", "operation": "Update", "fieldsV1": {
        "f:metadata": {"f:annotations": {"f:tenant.example/note": {}}}}} for i in range(100)]
    md["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": f"c{i}",
                              "uid": f"u{i}"} for i in range(100)]
    md["finalizers"] = [f"tenant.example/f{i}" for i in range(100)]
    return big


def test_a_tenants_kaiwubackup_is_cached_as_the_little_its_readers_use_however_large_it_is(
        ) -> None:
    made = tenant_sized(backup("nightly-1", "completed", "2026-01-01T03:00:00"), "b-uid")
    api = FakeApi()
    stored = api.put(made)
    informer = Informer(api, k.KAIWU_BACKUP,  # type: ignore[arg-type]
                        Settings(leader_election=False))
    informer._list()
    cached = informer.peek(NS, "nightly-1")
    assert cached is not None
    assert len(as_json(stored)) > TENANT_NOTE and len(as_json(cached)) < 1024
    assert cached == {**stored, "metadata": {
        "name": "nightly-1", "namespace": NS, "uid": "b-uid",
        "resourceVersion": stored["metadata"]["resourceVersion"],
        "generation": 1, "creationTimestamp": "2026-01-01T03:00:00Z",
        "labels": {k.SCHEDULE_LABEL: "nightly"},
        "annotations": {k.SLOT_ANNOTATION: "2026-01-01T03:00:00Z"}}}, \
        "spec and status whole, metadata down to what is read"

    # The one annotation read, made huge, is dropped: as if absent (no slot), not kept.
    api.edit(k.KAIWU_BACKUP, NS, "nightly-1", lambda obj: obj["metadata"]["annotations"].update(
        {k.SLOT_ANNOTATION: "2026" * (TENANT_NOTE // 4)}))
    informer._watch()
    cached = informer.peek(NS, "nightly-1")
    assert cached is not None and cached["metadata"]["annotations"] == {}
    assert len(as_json(cached)) < 1024

    plan = tenant_sized(schedule("nightly", "0 0 3 * * *"), "s-uid")
    kept = slim(plan)
    assert kept == {**plan, "metadata": {
        "name": "nightly", "namespace": NS, "uid": "s-uid", "resourceVersion": "41",
        "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"}}, \
        "a schedule's labels and annotations are read by nobody"
    assert k.KAIWU_BACKUP.list_page == k.KAIWU_BACKUP_SCHEDULE.list_page == 25, \
        "a page of tenants' backups is held whole while it is read"


class SlimWorld(World):
    """The backup stories' API and caches, the caches keeping what `slim` keeps."""

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        found = super().get(kind, namespace, name)
        return slim(found) if found is not None else None

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        return [slim(obj) for obj in super().list(kind, namespace, labels)]


def test_every_reader_of_backups_and_schedules_answers_the_same_on_the_slim_copy(
        tmp_path: Path) -> None:
    """The backup step's pass (schedule slots, retention, its status writes, the last success,
    the pending backup's wait), the restore's look at its backup and the cache's event filter,
    each on tenant-sized objects, whole and as the cache keeps them."""
    def objects() -> list[Obj]:
        made = [schedule("nightly", "0 0 3 * * *", keep=1)]
        for name, phase, day in (("nightly-1", "completed", 1), ("nightly-2", "completed", 2),
                                 ("nightly-3", "failed", 3), ("adhoc", "", 3)):
            made.append(backup(name, phase, f"2026-01-0{day}T03:00:00",
                               sched="" if name == "adhoc" else "nightly"))
            if phase == "completed":
                made[-1]["status"]["completedAt"] = f"2026-01-0{day}T03:10:00Z"
        made[-1]["spec"]["databases"] = ["shop", "audit"]
        return [tenant_sized(obj, f"uid-{obj['metadata']['name']}") for obj in made]

    outcomes = []
    for world in (World(), SlimWorld()):
        root = tmp_path / type(world).__name__
        for obj in objects():
            world.add(obj)
            (root / "dumps" / NS / NAME / obj["metadata"]["name"]).mkdir(parents=True)
        steps = step(world, root)
        # Slot 3 is made already (only its annotation says so); a scale-in keeps adhoc waiting.
        p, cluster = a_pass(at("2026-01-03T03:00:01"), operation={
            "replicas": 4, "targetReplicas": 3, "pod": "dev-3",
            "startedAt": "2026-01-03T03:00:00Z", "phase": "Removing"})
        steps.run(p)
        statuses = {key: copy.deepcopy(obj.get("status")) for key, obj in world.objects.items()}
        world.edit(k.KAIWU_BACKUP, NS, "adhoc",
                   lambda obj: obj["status"].update(phase="running"), status=True)
        adhoc = world.get(k.KAIWU_BACKUP, NS, "adhoc") or {}
        outcomes.append((
            world.writes, p.events, p.requeue, statuses, steps.metrics.value(
                "kaiwu_backup_last_success_timestamp_seconds",
                {"namespace": NS, "cluster": NAME}),
            running_backup(world, NS, NAME),
            phase_of(adhoc), steps.target(cluster, adhoc).location, cluster_of(adhoc)))
    assert outcomes[0] == outcomes[1]
    writes, _, _, statuses, last_success, running = outcomes[0][:6]
    assert ("delete", "KaiwuBackup", "nightly-1") in writes, "retention ran"
    assert statuses[("KaiwuBackup", NS, "adhoc")] == {
        "phase": "pending", "message": "waiting: a scale-in is in progress"}
    assert last_success == at("2026-01-02T03:10:00") and running == "adhoc"
    assert not [w for w in writes if w[0] == "create"], "slot 3 was seen made"

    # The event filter: a change of what is read queues the cluster, a tenant's note does not.
    before = tenant_sized(backup("b", "", "2026-01-01T03:00:00"), "u")
    noted, bumped = copy.deepcopy(before), copy.deepcopy(before)
    noted["metadata"]["annotations"]["tenant.example/note"] = "y"
    bumped["metadata"]["generation"] = 2
    assert _cluster_changed(slim(bumped), slim(before)) and _cluster_changed(bumped, before)
    assert not _cluster_changed(slim(noted), slim(before))


def largest(node: Mapping[str, Any]) -> Any:
    """The largest value the schema `node` admits: every property present, every string and
    list as long as it may be (KeyError where one is unbounded)."""
    assert not node.get("x-kubernetes-preserve-unknown-fields")
    assert "additionalProperties" not in node
    if node["type"] == "object":
        return {name: largest(sub) for name, sub in node["properties"].items()}
    if node["type"] == "array":
        return [largest(node["items"])] * node["maxItems"]
    if node["type"] == "string":
        return "x" * node["maxLength"]
    return node.get("maximum", 2**63 - 1) if node["type"] == "integer" else True


@pytest.mark.parametrize("crd", schema.BACKUP_CRD_FILES, ids=lambda crd: crd.name)
def test_the_crds_bound_every_string_and_list_of_a_backups_spec_so_the_cache_may_keep_it(
        crd: Any) -> None:
    """The cache keeps a KaiwuBackup's and a schedule's spec whole (kinds.KEPT): the API server
    refuses any spec larger than about 20 KiB."""
    version = yaml.safe_load(crd.read_text())["spec"]["versions"][0]
    spec = largest(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    assert 16 * 1024 < len(json.dumps(spec)) < 21 * 1024


def applied_informer(api: FakeApi, kind: Kind, fleet: list[LiveCluster]) -> Informer:
    for live in (live for cluster in fleet for live in cluster.live if live["kind"] == kind.kind):
        api.put(live)
    informer = Informer(api, kind, Settings(leader_election=False))  # type: ignore[arg-type]
    informer._list()
    return informer


def as_json(obj: Obj) -> str:
    """The object as it would be written: key order, types (1, 1.0, true) and all."""
    return json.dumps(obj)


def test_what_the_clusters_repeat_is_cached_once_and_every_object_reads_as_the_api_sent_it(
        fleet: list[LiveCluster], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "POOL", ValuePool())  # not started afresh halfway by chance
    api = FakeApi()
    services = applied_informer(api, k.SERVICE, fleet)
    sets = applied_informer(api, k.STATEFUL_SET, fleet)
    for cluster in fleet:
        for live in cluster.live:
            if live["kind"] in ("Service", "StatefulSet"):
                md = live["metadata"]
                cached = (services if live["kind"] == "Service" else sets).peek(
                    md["namespace"], md["name"])
                sent = api.get(k.SERVICE if live["kind"] == "Service" else k.STATEFUL_SET,
                               md["namespace"], md["name"])
                assert cached is not None and sent is not None and as_json(cached) == as_json(sent)

    # Two clusters of one template, their headless Services (named as the cluster): the
    # fields our apply owns are listed once for both.
    first, second = (services.peek(c.cluster["metadata"]["namespace"],
                                   c.cluster["metadata"]["name"]) for c in fleet[0:4:3])
    assert first is not None and second is not None and first is not second
    owned = [entry["fieldsV1"]["f:spec"] for entry in (first["metadata"]["managedFields"][0],
                                                        second["metadata"]["managedFields"][0])]
    assert owned[0] == owned[1] and owned[0] is owned[1]
    assert first["metadata"]["uid"] != second["metadata"]["uid"]


def test_a_copy_from_the_cache_can_be_changed_without_touching_the_other_clusters(
        fleet: list[LiveCluster]) -> None:
    api = FakeApi()
    services = applied_informer(api, k.SERVICE, fleet)
    names = [(c.cluster["metadata"]["namespace"], c.cluster["metadata"]["name"])
             for c in fleet[0:4:3]]
    copied = services.get(*names[0])
    assert copied is not None
    copied["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:edited"] = {}
    copied["spec"]["ports"][0]["port"] = 1
    for namespace, name in names:
        cached = services.peek(namespace, name)
        assert cached is not None
        assert "f:edited" not in cached["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]
        assert cached["spec"]["ports"][0]["port"] != 1

    # An edit arrives by watch: that Service changes in the cache, the other does not.
    api.edit(k.SERVICE, *names[0], lambda obj: obj["spec"]["ports"][0].update(port=2))
    services._watch()
    assert services.peek(*names[0])["spec"]["ports"][0]["port"] == 2  # type: ignore[index]
    assert services.peek(*names[1])["spec"]["ports"][0]["port"] != 2  # type: ignore[index]


def test_values_equal_in_python_but_written_differently_are_not_shared() -> None:
    shared = ValuePool()
    long_text = "x" * (INTERNED_MAX + 1)
    stored = [shared.value(obj) for obj in (
        {"replicas": 1}, {"replicas": True}, {"replicas": 1.0}, {"replicas": 1},
        {"a": 1, "b": 2}, {"b": 2, "a": 1},
        {"ca.crt": long_text}, {"ca.crt": "".join(["x"] * (INTERNED_MAX + 1))})]
    assert [as_json(obj) for obj in stored] == [
        '{"replicas": 1}', '{"replicas": true}', '{"replicas": 1.0}', '{"replicas": 1}',
        '{"a": 1, "b": 2}', '{"b": 2, "a": 1}',
        f'{{"ca.crt": "{long_text}"}}', f'{{"ca.crt": "{long_text}"}}']
    assert stored[0] is stored[3]  # the same value and type: one map
    assert stored[4] is not stored[5]  # the order a reader sees is kept
    assert stored[6] is not stored[7]  # certificates are compared by identity, never by text


def test_the_table_of_shared_values_starts_afresh_when_full_and_keeps_what_it_shared() -> None:
    shared = ValuePool(capacity=4)
    first = shared.value({"labels": {"app": "kaiwudb"}})
    assert shared.value({"labels": {"app": "kaiwudb"}}) is first
    for index in range(10):
        shared.value({"index": index})
    assert len(shared) <= 4
    again = shared.value({"labels": {"app": "kaiwudb"}})
    assert again == first and first == {"labels": {"app": "kaiwudb"}}


def test_maps_and_lists_that_look_alike_to_the_table_keep_their_own_shares() -> None:
    # Values whose keys, types or items differ are remembered side by side: looking one up
    # never pushes out another, so each is shared again when it comes back.
    shared = ValuePool()
    for first_value, second_value in (({"a": 1}, {"b": 1}), ([1], [2]), ([1], [1.0]),
                                      (["x"], ["y"]), ([1, 2], [2, 1])):
        first = shared.value(first_value)
        second = shared.value(second_value)
        assert second is not first
        assert shared.value(copy.deepcopy(first_value)) is first, first_value
        assert shared.value(copy.deepcopy(second_value)) is second, second_value
