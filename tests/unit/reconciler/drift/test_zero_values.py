"""Stories about rendered false and zero values (automountServiceAccountToken: false,
runAsNonRoot, replicas: 0...) that someone removes from the live object by hand.

The server keeps such pointer fields (reconciler.drift.schema.ZERO_IS_A_VALUE), so a live object
without one is not what we rendered: drift, reported at the field. Elsewhere the server drops
zero values on output, and a rendered zero absent live is no drift. Each story removes exactly
the field, so the drift comes only from that rule (comparing 0 with 3 would be drift without
it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.drift.compare import compare
from reconciler.drift.projection import DriftSettings
from reconciler.drift.schema import (
    NO_DEFAULT,
    ZERO_IS_A_VALUE,
    Derived,
    TypeSpec,
    _atomic,
    _keyed,
    child_type,
    image_pull_policy_default,
    root_type,
)
from renderer.loader import parse_text
from renderer.render import build_objects, read_clusters
from renderer.settings import RenderSettings

ROOT = Path(__file__).resolve().parents[4]
SETTINGS = DriftSettings(mask_key=b"test-key")


def rendered(name: str) -> list[dict[str, Any]]:
    path = ROOT / "clusters" / name
    source = read_clusters(parse_text(path.read_text(), str(path)))[0]
    return build_objects(source.cluster, RenderSettings())


def zero_fields(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of every rendered false, 0 or "" under a key the server keeps."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ZERO_IS_A_VALUE and (value is False or value == 0 or value == "") \
                    and not isinstance(value, dict | list):
                yield (*path, key)
            yield from zero_fields(value, (*path, key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from zero_fields(item, (*path, index))


def without(obj: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    live = copy.deepcopy(obj)
    holder: Any = live
    for step in path[:-1]:
        holder = holder[step]
    del holder[path[-1]]
    return live


CASES = [(name, obj["kind"], path) for name in ("dev.yaml", "production.yaml")
         for obj in rendered(name) for path in zero_fields(obj)]


def test_the_examples_render_false_values_the_server_keeps() -> None:
    kinds = {(kind, path[-1]) for _, kind, path in CASES}
    assert ("ServiceAccount", "automountServiceAccountToken") in kinds
    assert ("StatefulSet", "automountServiceAccountToken") in kinds


@pytest.mark.parametrize(("example", "kind", "path"), CASES,
                         ids=[f"{n}:{k}:{'.'.join(map(str, p))}" for n, k, p in CASES])
def test_a_rendered_false_or_zero_removed_by_hand_is_drift(example: str, kind: str,
                                                           path: tuple[Any, ...]) -> None:
    desired = next(obj for obj in rendered(example) if obj["kind"] == kind)
    assert not compare(desired, copy.deepcopy(desired), settings=SETTINGS).drifted
    report = compare(desired, without(desired, path), settings=SETTINGS)
    assert report.drifted
    assert [change.kind for change in report.changes] == ["removed"]
    assert report.changes[0].pointer.endswith("/" + str(path[-1]))


def test_a_rendered_false_the_server_drops_is_not_drift_when_absent() -> None:
    desired = next(obj for obj in rendered("dev.yaml") if obj["kind"] == "StatefulSet")
    container = desired["spec"]["template"]["spec"]["containers"][0]
    container["stdin"] = False  # omitempty: the server never shows it
    live = copy.deepcopy(desired)
    del live["spec"]["template"]["spec"]["containers"][0]["stdin"]
    assert not compare(desired, live, settings=SETTINGS).drifted


# ---- the defaults and list keys the schema knows (reconciler.drift.schema) -------------------

def spec_type(kind: str) -> TypeSpec:
    spec, _ = child_type(root_type(kind), "spec")
    assert spec is not None
    return spec


def derived(kind: str, field: str, holder: dict[str, Any]) -> Any:
    default = spec_type(kind).defaults[field]
    assert isinstance(default, Derived)
    return default.compute(holder)


@pytest.mark.parametrize(("image", "policy"), [
    ("kwdb/kwdb", "Always"), ("kwdb/kwdb:latest", "Always"), ("kwdb/kwdb:3.2.1", "IfNotPresent"),
    ("registry.local:5000/kwdb/kwdb", "Always"), ("registry.local:5000/kwdb:3.2", "IfNotPresent"),
    ("kwdb/kwdb@sha256:0123", "IfNotPresent"), ("kwdb/kwdb:latest@sha256:0123", "Always"),
])
def test_the_pull_policy_the_server_fills_in_follows_the_image_tag(image: str,
                                                                   policy: str) -> None:
    assert image_pull_policy_default({"image": image}) == policy
    assert image_pull_policy_default({}) is NO_DEFAULT


def test_service_and_network_policy_defaults_depend_on_the_object() -> None:
    for kind, policy in (("NodePort", "Cluster"), ("LoadBalancer", "Cluster"),
                         ("ClusterIP", NO_DEFAULT)):
        assert derived("Service", "externalTrafficPolicy", {"type": kind}) == policy
    assert derived("Service", "allocateLoadBalancerNodePorts", {"type": "LoadBalancer"}) is True
    assert derived("Service", "allocateLoadBalancerNodePorts", {"type": "NodePort"}) \
        is NO_DEFAULT
    assert derived("NetworkPolicy", "policyTypes", {"ingress": [{}]}) == ["Ingress"]
    assert derived("NetworkPolicy", "policyTypes", {"egress": [{}]}) == ["Ingress", "Egress"]
    assert repr(NO_DEFAULT) == "NO_DEFAULT"


def test_list_items_are_named_by_their_keys_with_server_defaults_filled_in() -> None:
    ports = _keyed("ContainerPort", "containerPort", "protocol", protocol="TCP")
    assert (ports.semantics, ports.item_type, ports.ordered) == ("keyed", "ContainerPort", False)
    assert ports.key_text({"containerPort": 26257}) == "26257/TCP"
    assert _keyed().item_type == "" and _keyed("", "name", ordered=True).ordered
    tolerations = _keyed("", "key", "operator", "value", "effect", operator="Equal")
    assert tolerations.key_text({"key": "dedicated", "effect": "NoSchedule"}) == \
        "dedicated/Equal//NoSchedule"
    claims = _keyed("PersistentVolumeClaim", "metadata.name")
    assert claims.key_text({"metadata": {"name": "data"}}) == "data"
    assert claims.key_text({"name": "data"}) is None
    args = _atomic("x")
    assert (args.semantics, args.item_type, args.key_fields) == ("atomic", "x", ())
    assert _atomic().item_type == ""


def test_a_kind_the_schema_does_not_know_still_has_typed_metadata() -> None:
    monitor = root_type("ServiceMonitor")
    assert monitor is root_type("Object") and "metadata" in monitor.fields
