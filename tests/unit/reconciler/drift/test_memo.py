"""Stories of the remembered drift verdicts (reconciler.drift.memo): a resync where nothing
changed compares nothing again, and yet every verdict is the one a fresh comparison gives.

The objects are the benchmark fleet's (bench/fleet.py: rendered clusters as a 1.20 API server
returns them) and hand-edited copies of them, so the stories cover every kind the renderer emits.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from bench.fleet import LiveCluster, drifted_copy, live_fleet
from reconciler.drift import compare as compare_module
from reconciler.drift.compare import DriftReport, compare
from reconciler.drift.ignore import IgnoreRule
from reconciler.drift.memo import ComparisonMemo
from reconciler.drift.projection import DriftSettings
from reconciler.keys import ClusterKey

Obj = dict[str, Any]
SETTINGS = DriftSettings(mask_key=b"memo-test")
OWNER = ClusterKey("team-00", "fleet-0000")


@pytest.fixture(scope="module")
def fleet() -> list[LiveCluster]:
    return live_fleet(3)  # one of each example: every kind the renderer emits


def edits(live: Obj) -> list[Callable[[Obj], None]]:
    """Hand edits a user or another tool makes, each to a copy of `live`."""
    found: list[Callable[[Obj], None]] = [
        lambda o: o["metadata"]["labels"].update({"app.kubernetes.io/name": "x"}),
        lambda o: o["metadata"]["labels"].pop("app.kubernetes.io/component", None),
        lambda o: o["metadata"].update(labels={"only": "this"}),
    ]
    if live["kind"] == "StatefulSet":
        container = ("spec", "template", "spec", "containers")
        found += [
            lambda o: _at(o, container)[0].update(image="kwdb/kwdb:9.9.9"),
            lambda o: _at(o, container)[0]["ports"][0].update(containerPort=1),
            lambda o: _at(o, container)[0].update(stdin=True),
            lambda o: o["spec"].update(replicas=17),
            lambda o: _at(o, container)[0]["env"].reverse(),
        ]
    if live["kind"] == "Service":
        found.append(lambda o: o["spec"]["ports"].append({"name": "x", "port": 1}))
    return found


def _at(obj: Obj, path: tuple[str, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def variants(fleet: list[LiveCluster]) -> list[tuple[Obj, Obj]]:
    """(desired, live) pairs: every rendered object in sync, then each with each edit (a new
    resourceVersion, as the API server gives every change)."""
    pairs = []
    version = 10**6
    for cluster in fleet:
        for desired, live in zip(cluster.desired, cluster.live, strict=True):
            pairs.append((desired, live))
            version += 1
            pairs.append((desired, drifted_copy(live, version)))
            for edit in edits(live):
                edited = copy.deepcopy(live)
                edit(edited)
                version += 1
                edited["metadata"]["resourceVersion"] = str(version)
                pairs.append((desired, edited))
    return pairs


def test_every_rendered_object_of_the_fleet_is_in_sync_with_its_live_copy(
        fleet: list[LiveCluster]) -> None:
    reports = [compare(d, live, settings=SETTINGS) for c in fleet
               for d, live in zip(c.desired, c.live, strict=True)]
    assert {r.kind for r in reports} == {"StatefulSet", "Service", "ServiceAccount",
                                         "PodDisruptionBudget", "NetworkPolicy",
                                         "ServiceMonitor"}
    assert [r for r in reports if r.drifted] == []


def test_remembered_verdicts_are_the_verdicts_of_a_fresh_comparison(
        fleet: list[LiveCluster]) -> None:
    memo = ComparisonMemo()
    pairs = variants(fleet)
    first = [memo.compare(OWNER, d, live, settings=SETTINGS) for d, live in pairs]
    again = [memo.compare(OWNER, d, live, settings=SETTINGS) for d, live in pairs]
    fresh = [compare(d, live, settings=SETTINGS) for d, live in pairs]
    assert sum(r.drifted for r in fresh) > len(pairs) // 2
    assert first == fresh
    assert again == fresh


def test_deepdiff_on_the_pruned_projections_reports_what_it_reports_on_the_whole(
        fleet: list[LiveCluster], monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = variants(fleet)
    pruned = [compare(d, live, settings=SETTINGS) for d, live in pairs]
    monkeypatch.setattr(compare_module, "differing", lambda desired, live: (desired, live))
    whole = [compare(d, live, settings=SETTINGS) for d, live in pairs]
    assert sum(len(r.changes) for r in whole) > len(pairs) // 2
    assert pruned == whole


class Counting:
    """compare, counting the comparisons actually made."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, desired: Obj, live: Obj | None, **kwargs: Any) -> DriftReport:
        self.calls += 1
        return compare(desired, live, **kwargs)


def test_an_unchanged_pair_is_compared_once_and_any_change_to_what_it_depends_on_compares_again(
        fleet: list[LiveCluster]) -> None:
    desired, live = fleet[0].desired[0], fleet[0].live[0]
    assert desired["kind"] == live["kind"]
    counting = Counting()
    memo = ComparisonMemo(counting)
    rule = IgnoreRule(("spec", "replicas"))
    dry_run = copy.deepcopy(desired)
    base: dict[str, Any] = {"desired": desired, "live": live, "ignore_rules": (),
                            "dry_run": None, "settings": SETTINGS}

    def judge(**changes: Any) -> None:
        args = {**base, **changes}
        memo.compare(OWNER, args.pop("desired"), args.pop("live"), **args)

    judge()
    judge()
    assert counting.calls == 1, "an unchanged pair is not compared again"

    newer = copy.deepcopy(live)  # edited: a new version with a label added by hand
    newer["metadata"]["resourceVersion"] = "999999"
    newer["metadata"].setdefault("labels", {})["edited-by"] = "hand"
    recreated = copy.deepcopy(live)
    recreated["metadata"]["uid"] = "another-uid"
    changed_spec = copy.deepcopy(desired)
    changed_spec["metadata"]["labels"]["fleet-index"] = "changed"
    for change in ({"live": newer}, {"live": recreated}, {"desired": changed_spec},
                   {"ignore_rules": (rule,)},
                   {"settings": DriftSettings(mask_key=b"another key")},
                   {"settings": DriftSettings(mask_key=b"memo-test", builtin_ignores=False)}):
        before = counting.calls
        judge(**change)
        assert counting.calls == before + 1, f"{sorted(change)} changed: compared again"
        judge()  # and back: the entry now holds the other inputs
        assert counting.calls == before + 2

    # With a dry run, the verdict is remembered beside the offline one, keyed by the dry run too.
    before = counting.calls
    judge(dry_run=dry_run)
    judge(dry_run=dry_run)
    judge()
    assert counting.calls == before + 1
    other_dry_run = copy.deepcopy(dry_run)
    other_dry_run["metadata"]["labels"]["defaulted-by"] = "a webhook"
    judge(dry_run=other_dry_run)
    assert counting.calls == before + 2

    unversioned = copy.deepcopy(live)
    del unversioned["metadata"]["resourceVersion"]
    before = counting.calls
    judge(live=unversioned)
    judge(live=unversioned)
    assert counting.calls == before + 2, "an object without a resourceVersion is always compared"


def test_entries_go_with_the_objects_and_clusters_that_go(fleet: list[LiveCluster]) -> None:
    memo = ComparisonMemo()
    other = ClusterKey("team-01", "fleet-0001")
    for owner, cluster in ((OWNER, fleet[0]), (other, fleet[1])):
        for desired, live in zip(cluster.desired, cluster.live, strict=True):
            memo.compare(owner, desired, live, settings=SETTINGS)
    assert len(memo) == len(fleet[0].desired) + len(fleet[1].desired)

    kept = fleet[0].desired[0]
    memo.retain(OWNER, [(kept["kind"], kept["metadata"]["namespace"], kept["metadata"]["name"])])
    assert len(memo) == 1 + len(fleet[1].desired)
    memo.forget(other)
    assert len(memo) == 1


class Recording:
    """compare, recording what each comparison was given."""

    def __init__(self) -> None:
        self.given: list[dict[str, Any]] = []

    def __call__(self, desired: Obj, live: Obj | None, **kwargs: Any) -> DriftReport:
        self.given.append({"live": live, **kwargs})
        return compare(desired, live, **kwargs)


def config_map(**metadata: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "shop", **metadata},
            "data": {"mode": "fast"}}


def test_what_the_memo_is_given_reaches_the_comparison_and_hits_and_misses_are_counted() -> None:
    recording = Recording()
    memo = ComparisonMemo(recording)
    desired = config_map()
    live = config_map(uid="u-1", resourceVersion="7")
    dry_run = config_map(labels={"defaulted": "yes"})
    rules = [IgnoreRule(("data", "mode"))]
    for _ in range(3):
        memo.compare(OWNER, desired, live, ignore_rules=rules, dry_run=dry_run,
                     settings=SETTINGS)
    assert (memo.hits, memo.misses) == (2, 1)
    assert recording.given == [{"live": live, "ignore_rules": tuple(rules), "dry_run": dry_run,
                                "settings": SETTINGS}]
    memo.compare(OWNER, desired, config_map(uid="u-1", resourceVersion="8", labels={"a": "b"}),
                 settings=SETTINGS)
    assert (memo.hits, memo.misses) == (2, 2)


def test_an_object_that_is_missing_or_lacks_a_uid_or_version_is_compared_every_time() -> None:
    recording = Recording()
    memo = ComparisonMemo(recording)
    dry_run = config_map()
    rules = (IgnoreRule(("data", "mode")),)
    for live in (None, config_map(resourceVersion="7"), config_map(uid="u-1")):
        for _ in range(2):
            report = memo.compare(OWNER, config_map(), live, dry_run=dry_run, settings=SETTINGS,
                                  ignore_rules=rules)
        assert report == compare(config_map(), live, dry_run=dry_run, settings=SETTINGS,
                                 ignore_rules=rules)
    assert [given["dry_run"] for given in recording.given] == [dry_run] * 6
    assert [given["ignore_rules"] for given in recording.given] == [rules] * 6
    assert all(given["settings"] is SETTINGS for given in recording.given)
    assert (memo.hits, memo.misses, len(memo)) == (0, 0, 0)


def test_forgetting_a_cluster_never_compared_is_no_error() -> None:
    memo = ComparisonMemo()
    memo.forget(OWNER)
    memo.retain(OWNER, [])
    assert len(memo) == 0
def test_a_status_update_is_a_new_version_but_no_new_comparison(
        fleet: list[LiveCluster]) -> None:
    sts = next(obj for obj in fleet[0].live if obj["kind"] == "StatefulSet")
    desired = next(obj for obj in fleet[0].desired if obj["kind"] == "StatefulSet")
    counting = Counting()
    memo = ComparisonMemo(counting)
    first = memo.compare(OWNER, desired, sts, settings=SETTINGS)

    # The StatefulSet controller reports new revisions: status, resourceVersion, the time and
    # status fields of its managedFields entry change; nothing the comparison reads does.
    reported = copy.deepcopy(sts)
    reported["metadata"]["resourceVersion"] = str(int(sts["metadata"]["resourceVersion"]) + 1)
    reported["status"] = {**sts.get("status", {}), "updateRevision": "dev-abc", "replicas": 2}
    controller = next(entry for entry in reported["metadata"]["managedFields"]
                      if entry["manager"] == "kube-controller-manager")
    controller.update(time="2026-11-30T09:00:00Z",
                      fieldsV1={"f:status": {"f:updateRevision": {}, "f:replicas": {}}})
    assert memo.compare(OWNER, desired, reported, settings=SETTINGS) is first
    assert counting.calls == 1 and len(memo) == 1
    assert compare(desired, reported, settings=SETTINGS) == first, "the same verdict, fresh"

    # A hand edit in the same kind of update is compared again.
    edited = copy.deepcopy(reported)
    edited["metadata"]["resourceVersion"] = str(int(reported["metadata"]["resourceVersion"]) + 1)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "kwdb/kwdb:0.0.1"
    edited["metadata"]["managedFields"].append({
        "manager": "kubectl-set", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2026-11-30T09:00:01Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
            'k:{"name":"kwbase"}': {"f:image": {}}}}}}}})
    report = memo.compare(OWNER, desired, edited, settings=SETTINGS)
    assert counting.calls == 2 and report.drifted and not first.drifted

    # Only who owns a field changes (kubectl takes the image over, same value): drift may
    # depend on owners, so that is compared again too.
    taken = copy.deepcopy(reported)
    taken["metadata"]["resourceVersion"] = str(int(reported["metadata"]["resourceVersion"]) + 2)
    taken["metadata"]["managedFields"].append({
        "manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2026-11-30T09:00:02Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:minReadySeconds": {}}}})
    memo.compare(OWNER, desired, taken, settings=SETTINGS)
    assert counting.calls == 3
