"""The reconciler's keys (reconciler.keys): a cluster as the work queue knows it, and an object
as status.inventory lists it, written out and read back."""

from __future__ import annotations

import pytest

from reconciler.keys import ClusterKey, ObjectRef


def test_a_cluster_key_prints_as_namespace_slash_name_and_sorts_by_namespace_first() -> None:
    assert str(ClusterKey("db", "orders")) == "db/orders"
    keys = [ClusterKey("shop", "alpha"), ClusterKey("db", "orders"), ClusterKey("db", "billing")]
    assert sorted(keys) == [ClusterKey("db", "billing"), ClusterKey("db", "orders"),
                            ClusterKey("shop", "alpha")]
    assert len({ClusterKey("db", "orders"), ClusterKey("db", "orders")}) == 1


def test_an_inventory_entry_is_read_back_even_when_the_api_version_has_a_group() -> None:
    ref = ObjectRef("apps/v1", "StatefulSet", "db", "orders")
    assert str(ref) == "apps/v1/StatefulSet/db/orders"
    assert ref.short == "StatefulSet/orders"
    assert ObjectRef.parse(str(ref)) == ref
    assert ObjectRef.parse("v1/Service/db/orders-public") == ObjectRef(
        "v1", "Service", "db", "orders-public")
    assert ObjectRef.parse("monitoring.coreos.com/v1/ServiceMonitor/db/orders") == ObjectRef(
        "monitoring.coreos.com/v1", "ServiceMonitor", "db", "orders")


@pytest.mark.parametrize("text", ["Service/db/orders", "v1/Service//orders", "",
                                  "v1/Service/db/"])
def test_an_entry_someone_mangled_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        ObjectRef.parse(text)
    assert str(refused.value) == f"{text!r} is not apiVersion/Kind/namespace/name"


def test_the_ref_of_an_object_comes_from_its_apiversion_kind_and_metadata() -> None:
    obj = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"namespace": "db", "name": "orders"}}
    assert ObjectRef.of(obj) == ObjectRef("policy/v1", "PodDisruptionBudget", "db", "orders")
    # A cluster-scoped object has no namespace; a bare object has empty parts, not an error.
    assert ObjectRef.of({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": "db", "namespace": None}}) == ObjectRef(
        "v1", "Namespace", "", "db")
    assert ObjectRef.of({"metadata": None}) == ObjectRef("", "", "", "")
    assert sorted([ObjectRef("v1", "Service", "db", "b"), ObjectRef("apps/v1", "X", "z", "a"),
                   ObjectRef("v1", "Service", "db", "a")])[0] == ObjectRef("apps/v1", "X", "z",
                                                                          "a")
