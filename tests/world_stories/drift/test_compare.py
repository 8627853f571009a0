"""Stories of drift detection against the test world's real apiserver: rendered objects applied
there are in sync until someone edits them, and so are objects a client-side apply created.
(The same detection on objects written out by hand: tests/unit/reconciler/drift/test_compare.py.)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from reconciler.drift.compare import DriftReport, compare, format_report
from reconciler.drift.projection import DriftSettings
from reconciler.kube.client import Kube
from reconciler.kube.kinds import SERVICE, STATEFUL_SET, Kind
from tests.support import world_kube

Obj = dict[str, Any]
SETTINGS = DriftSettings(mask_key=b"test-key")


def check(desired: Obj, live: Obj | None, **kwargs: Any) -> DriftReport:
    return compare(desired, live, settings=SETTINGS, **kwargs)


CLUSTERS = Path(__file__).resolve().parents[3] / "clusters"


def _render(file_name: str) -> list[Obj]:
    """The renderer's objects for an example cluster, for the test world's Kubernetes."""
    from renderer.render import build_objects, load_clusters
    from renderer.settings import RenderSettings

    settings = RenderSettings(kube_version=world_kube.VERSION)
    objects = [
        obj
        for source in load_clusters(CLUSTERS / file_name)
        for obj in build_objects(source.cluster, settings)
    ]
    # The test world has no Prometheus operator, hence no ServiceMonitor kind.
    return [obj for obj in objects if obj["kind"] != "ServiceMonitor"]


def _render_production() -> list[Obj]:
    return _render("production.yaml")


def _render_every_example() -> list[Obj]:
    return [obj for path in sorted(CLUSTERS.glob("*.yaml")) for obj in _render(path.name)]


def _in_namespace(objects: list[Obj], namespace: str) -> list[Obj]:
    moved = copy.deepcopy(objects)
    for obj in moved:
        obj["metadata"]["namespace"] = namespace
    return moved


def _read(api: Kube, kind: Kind, namespace: str, name: str) -> Obj:
    live = api.get(kind, namespace, name)
    assert live is not None, f"{kind.kind} {namespace}/{name} is missing"
    return live


def test_rendered_objects_applied_to_a_real_apiserver_are_in_sync_until_someone_edits_them(
    kube: k8s.ApiClient, namespace: str
) -> None:
    ours = Kube(kube, "kaiwu-reconciler")
    objects = _in_namespace(_render_every_example(), namespace)
    desired = {obj["kind"] + "/" + obj["metadata"]["name"]: obj for obj in objects}
    for obj in objects:
        report = check(obj, ours.apply(obj))
        assert not report.drifted, format_report(report)

    # Harmless neighbours: a label, an annotation, a rollout restart, a Service annotation.
    apps = k8s.AppsV1Api(kube)
    restart = {"kubectl.kubernetes.io/restartedAt": "2021-03-05T08:00:00Z"}
    neighbours: Obj = {
        "metadata": {"labels": {"cost-center": "42"}, "annotations": {"note": "hi"}},
        "spec": {"template": {"metadata": {"annotations": restart}}},
    }
    Kube(kube, "kubectl-rollout").patch(STATEFUL_SET, namespace, "orders", neighbours)
    note: Obj = {"metadata": {"annotations": {"x": "y"}}}
    Kube(kube, "kubectl-annotate").patch(SERVICE, namespace, "orders-public", note)
    sts = desired["StatefulSet/orders"]
    report = check(sts, _read(ours, STATEFUL_SET, namespace, "orders"))
    assert not report.drifted, format_report(report)
    report = check(
        desired["Service/orders-public"], _read(ours, SERVICE, namespace, "orders-public")
    )
    assert not report.drifted, format_report(report)

    # kubectl set env: a strategic merge patch that adds one variable.
    debug = {"name": "KWBASE_DEBUG", "value": "1"}
    set_env = {"spec": {"template": {"spec": {"containers": [{"name": "kwbase", "env": [debug]}]}}}}
    apps.patch_namespaced_stateful_set(
        "orders",
        namespace,
        set_env,
        field_manager="kubectl-set",
        _content_type="application/strategic-merge-patch+json",
    )
    live = _read(ours, STATEFUL_SET, namespace, "orders")
    dry_run = ours.apply(sts, dry_run=True)
    for report in (check(sts, live), check(sts, live, dry_run=dry_run)):
        assert [(c.kind, c.pointer, c.managers) for c in report.changes] == [
            ("added", "/spec/template/spec/containers/kwbase/env/KWBASE_DEBUG", ("kubectl-set",))
        ], format_report(report)


def test_objects_created_by_a_client_side_apply_on_a_real_apiserver_are_in_sync(
    kube: k8s.ApiClient, namespace: str
) -> None:
    creator = Kube(kube, "kubectl-client-side-apply")
    for obj in _in_namespace(_render_every_example(), namespace):
        report = check(obj, creator.create(obj))
        assert not report.drifted, format_report(report)
    # The client Service is a LoadBalancer: the server allocated node ports and a cluster IP,
    # and the creating Update owns them.
    service = _read(creator, SERVICE, namespace, "orders-public")
    assert service["spec"]["clusterIP"]
    assert all(port["nodePort"] for port in service["spec"]["ports"])
