"""Stories of the write count (reconciler.kube.writes): every write the reconciler sends is
counted once in writes_total{verb,kind}, by the client wrapper every writer goes through, so no
step counts by hand and none can forget to."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError, Kube
from reconciler.kube.leader import NotLeaderError
from reconciler.kube.writes import CountedKube
from reconciler.metrics import Metrics
from reconciler.model import Obj
from tests.support.controller_world import NAME, NOW, NS, cluster, controller_over
from tests.support.fake_api import FakeApi, counted

# FakeApi.writes' verbs as writes_total names them.
VERBS = {"apply": "apply", "create": "create", "replace": "update", "patch": "patch",
         "json_patch": "patch", "status": "status", "delete": "delete"}


def written(metrics: Metrics) -> Counter[tuple[str, str]]:
    """writes_total's samples, (verb, kind) -> count."""
    found: Counter[tuple[str, str]] = Counter()
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "kaiwu_writes_total" and sample.value:
                found[(sample.labels["verb"], sample.labels["kind"])] += int(sample.value)
    return found


def config_map(name: str = "flags") -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS}, "data": {"a": "1"}}


def test_no_call_of_the_client_is_left_to_kube_itself() -> None:
    # A Kube method the wrapper does not pass on would run Kube's own code on the wrapper,
    # which holds no connection; a new write method would go uncounted.
    public = {name for name, value in vars(Kube).items()
              if callable(value) and not name.startswith("_")}
    assert public - set(vars(CountedKube)) == set()


def test_each_write_is_counted_by_its_verb_and_kind() -> None:
    metrics = Metrics()
    kube = counted(FakeApi(clock=lambda: NOW), metrics)
    kube.apply(config_map(), dry_run=True)
    kube.apply(config_map())
    kube.create(config_map("other"))
    stored = kube.get(k.CONFIG_MAP, NS, "other")
    assert stored is not None
    kube.replace({**stored, "data": {"b": "2"}})
    kube.patch(k.CONFIG_MAP, NS, "other", {"data": {"c": "3"}})
    kube.json_patch(k.CONFIG_MAP, NS, "other", [{"op": "remove", "path": "/data/c"}])
    kube.create(cluster())
    kube.patch(k.KAIWU_CLUSTER, NS, NAME, {"status": {"phase": "x"}}, subresource="status")
    live = kube.get(k.KAIWU_CLUSTER, NS, NAME)
    assert live is not None
    kube.replace_status({**live, "status": {"phase": "y"}})
    assert kube.delete(k.CONFIG_MAP, NS, "other")
    assert not kube.delete(k.CONFIG_MAP, NS, "other"), "already gone"
    kube.list_objects(k.CONFIG_MAP, NS)
    assert written(metrics) == {
        ("dry_run", "ConfigMap"): 1, ("apply", "ConfigMap"): 1, ("create", "ConfigMap"): 1,
        ("update", "ConfigMap"): 1, ("patch", "ConfigMap"): 2, ("create", "KaiwuCluster"): 1,
        ("status", "KaiwuCluster"): 2, ("delete", "ConfigMap"): 2}


def test_a_write_the_server_refuses_is_counted_and_one_never_sent_is_not() -> None:
    metrics = Metrics()
    api = FakeApi(clock=lambda: NOW)
    kube = counted(api, metrics)
    kube.create(config_map())
    with pytest.raises(ApiError):
        kube.create(config_map())  # 409: it exists
    assert written(metrics) == {("create", "ConfigMap"): 2}

    class NotLeading(FakeApi):
        def create(self, obj: Obj) -> Obj:
            raise NotLeaderError("POST refused: this replica is not the leader")

    with pytest.raises(NotLeaderError):
        counted(NotLeading.sharing(api), metrics).create(config_map("third"))
    assert written(metrics) == {("create", "ConfigMap"): 2}


def test_passes_count_every_write_that_reached_the_api_once() -> None:
    api = FakeApi({("KaiwuCluster", NS, NAME): cluster()}, clock=lambda: NOW)
    controller = controller_over(api)
    for _ in range(3):
        controller.reconcile(ClusterKey(NS, NAME))
    api.edit(k.STATEFUL_SET, NS, NAME, lambda sts: sts["spec"].update(replicas=9))
    controller.reconcile(ClusterKey(NS, NAME))
    reached: Counter[tuple[str, str]] = Counter(
        (VERBS[verb], kind) for verb, kind, _ in api.writes)
    counts: Any = written(controller.ctx.metrics)
    dry_runs = sum(n for (verb, _), n in counts.items() if verb == "dry_run")
    assert {key: n for key, n in counts.items() if key[0] != "dry_run"} == reached
    assert dry_runs == api.dry_runs
    assert reached[("apply", "StatefulSet")] == 2, "made, then its drift repaired"
