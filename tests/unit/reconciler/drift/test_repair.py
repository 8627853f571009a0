"""Stories of the reconciler's writes to the objects it manages (reconciler.drift.repair):
each write goes to the object judged, with the guard that keeps it from hitting another, and is
counted by verb and kind in writes_total by the client it writes through
(reconciler.kube.writes.CountedKube, as the runtime gives it).

`Writes` below stands in for reconciler.kube.client.Kube: it records each call's arguments and
answers with what it was given; what the API server does with such requests is in the stories of
tests/world_stories/drift/.
"""

from __future__ import annotations

import copy
from typing import Any

from reconciler.drift.repair import Repairer, live_pointer
from reconciler.kube.kinds import STATEFUL_SET, Kind
from reconciler.kube.writes import CountedKube
from reconciler.metrics import NAMESPACE, Metrics
from reconciler.model import Obj


class Writes:
    """Kube's write methods, recorded: (method, arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        self.calls.append(("apply", (obj,), {"dry_run": dry_run}))
        return copy.deepcopy(obj)

    def create(self, obj: Obj) -> Obj:
        self.calls.append(("create", (obj,), {}))
        return copy.deepcopy(obj)

    def replace_status(self, obj: Obj) -> Obj:
        self.calls.append(("replace_status", (obj,), {}))
        return copy.deepcopy(obj)

    def json_patch(self, kind: Kind, namespace: str | None, name: str,
                   operations: list[Obj]) -> Obj:
        self.calls.append(("json_patch", (kind, namespace, name, operations), {}))
        return {"kind": kind.kind, "metadata": {"name": name, "namespace": namespace}}

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None, propagation: str | None = None) -> bool:
        self.calls.append(("delete", (kind, namespace, name),
                           {"uid": uid, "propagation": propagation}))
        return True


def orders(**extra_env: str) -> Obj:
    env = [{"name": "POD_NAME"}, *({"name": k, "value": v} for k, v in extra_env.items())]
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "uid-7"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "kwbase", "image": "kwdb/kwdb:3.2.1", "env": env}]}}}}


def written(metrics: Metrics, verb: str, kind: str) -> float:
    return metrics.registry.get_sample_value(
        f"{NAMESPACE}_writes_total", {"verb": verb, "kind": kind}) or 0.0


def repairer() -> tuple[Repairer, Writes, Metrics]:
    writes, metrics = Writes(), Metrics()
    return Repairer(CountedKube(writes, metrics)), writes, metrics  # type: ignore[arg-type]


def test_an_env_var_someone_added_is_removed_from_that_statefulset_with_a_guarded_patch() -> None:
    repair, writes, metrics = repairer()
    live = orders(DEBUG="1")
    stored = repair.remove_fields(live, ["/spec/template/spec/containers/kwbase/env/DEBUG"])
    assert stored == {"kind": "StatefulSet", "metadata": {"name": "orders", "namespace": "shop"}}
    path = "/spec/template/spec/containers/0/env/1"
    assert writes.calls == [("json_patch", (STATEFUL_SET, "shop", "orders", [
        {"op": "test", "path": path, "value": {"name": "DEBUG", "value": "1"}},
        {"op": "remove", "path": path}]), {})]
    assert written(metrics, "patch", "StatefulSet") == 1


def test_nothing_is_written_when_the_added_field_is_already_gone() -> None:
    repair, writes, metrics = repairer()
    assert repair.remove_fields(orders(), ["/spec/template/spec/containers/kwbase/env/X"]) is None
    assert writes.calls == []
    assert written(metrics, "patch", "StatefulSet") == 0


def test_a_delete_names_the_uid_judged_and_the_propagation_asked_for() -> None:
    repair, writes, metrics = repairer()
    assert repair.delete(STATEFUL_SET, orders(), propagation="Orphan")
    assert writes.calls == [("delete", (STATEFUL_SET, "shop", "orders"),
                             {"uid": "uid-7", "propagation": "Orphan"})]
    assert written(metrics, "delete", "StatefulSet") == 1


def test_applies_dry_runs_creates_and_status_writes_are_counted_apart() -> None:
    repair, writes, metrics = repairer()
    sts = orders()
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "orders", "namespace": "shop"}}
    assert repair.apply(sts) == sts
    assert repair.dry_run(sts) == sts
    assert repair.dry_run(service) == service
    assert repair.create(service) == service
    assert repair.replace_status(sts) == sts
    assert writes.calls == [("apply", (sts,), {"dry_run": False}),
                            ("apply", (sts,), {"dry_run": True}),
                            ("apply", (service,), {"dry_run": True}),
                            ("create", (service,), {}),
                            ("replace_status", (sts,), {})]
    assert [written(metrics, verb, kind) for verb, kind in (
        ("apply", "StatefulSet"), ("dry_run", "StatefulSet"), ("dry_run", "Service"),
        ("create", "Service"), ("status", "StatefulSet"), ("apply", "Service"))] == [
        1, 1, 1, 1, 1, 0]


def test_a_list_the_schema_does_not_describe_is_walked_by_position() -> None:
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
               "metadata": {"name": "orders"},
               "spec": {"endpoints": [{"port": "http"}, {"port": "metrics", "interval": "9s"}]}}
    place = live_pointer(monitor, "/spec/endpoints/1/interval")
    assert place is not None and (place.pointer, place.value) == ("/spec/endpoints/1/interval",
                                                                  "9s")
    assert live_pointer(monitor, "/spec/endpoints/2") is None
    assert live_pointer(monitor, "/spec/endpoints/1/interval/deeper") is None
