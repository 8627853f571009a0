"""The rules a schema cannot express, one story per rule of renderer/semantics/.

Each story starts from a spec the schema accepts (asserted, so the rule under test is the one that
speaks), breaks one rule the way a user would, and checks the complaint names the field and says
what to do. `check_transition` stories change a spec the way a pull request does.
"""

from __future__ import annotations

from typing import Any

import pytest

from renderer import schema, semantics
from renderer.render import check_object
from renderer.semantics import flags, names, tls
from tests.support import specs
from tests.support.cel_cases import GOOD_SPEC, with_spec
from tests.support.render import cluster, dotted


def violations(spec: dict[str, Any] | None = None, name: str = "orders",
               namespace: str | None = "shop") -> dict[str, tuple[str, str]]:
    """Semantic violations of a spec the schema accepts, by dotted path: (message, fix)."""
    obj = cluster(name, namespace, **(GOOD_SPEC if spec is None else spec))
    assert schema.validate(obj) == [], "the story must start from a schema-valid spec"
    found = semantics.check(schema.apply_defaults(obj))
    return {dotted(v.path): (v.message, v.fix) for v in found}


def test_a_sensible_cluster_breaks_no_rule() -> None:
    assert violations() == {}


# --- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Orders", "1orders", "orders_db", "orders-", "orders.db",
                                  "orders\n"])
def test_a_cluster_name_must_be_a_dns_label_starting_with_a_letter(name: str) -> None:
    found = violations(name=name)
    message, fix = found["metadata.name"]
    assert "is not a valid cluster name" in message
    assert "starting with a letter" in fix


def test_a_cluster_name_leaves_room_for_pod_volume_and_service_names() -> None:
    assert violations(name="a" * names.MAX_NAME_LENGTH) == {}
    message, _ = violations(name="a" * (names.MAX_NAME_LENGTH + 1))["metadata.name"]
    assert f"is {names.MAX_NAME_LENGTH + 1} characters long" in message


def test_a_cluster_needs_a_name() -> None:
    assert semantics.check_metadata({})[0].message == "the cluster has no name"


@pytest.mark.parametrize("namespace", ["Shop", "shop_1", "-shop", "shop\n"])
def test_the_namespace_must_be_a_dns_label(namespace: str) -> None:
    assert "is not a valid namespace" in violations(namespace=namespace)["metadata.namespace"][0]


def test_metadata_labels_must_be_a_mapping() -> None:
    found = semantics.check_metadata({"name": "orders", "labels": ["team=orders"]})
    assert [(dotted(v.path), v.message) for v in found] == [
        ("metadata.labels", "metadata.labels must be a mapping")]


# --- start mode and replicas -----------------------------------------------------------------

def test_a_multi_replica_cluster_needs_three_nodes() -> None:
    message, fix = violations(with_spec(replicas=2))["spec.replicas"]
    assert message == "multi-replica needs at least 3 nodes, got 2"
    assert "single-replica" in fix


def test_single_replica_mode_may_run_one_or_two_nodes() -> None:
    assert violations(with_spec(startMode="single-replica", replicas=2)) == {}
    assert violations(with_spec(startMode="single-replica", replicas=1)) == {}


def test_a_single_node_cluster_runs_exactly_one_node() -> None:
    message, _ = violations(with_spec(startMode="single-node", replicas=3))["spec.replicas"]
    assert message == "single-node runs exactly 1 node, got 3"
    assert violations(with_spec(startMode="single-node", replicas=1)) == {}


def test_a_multi_replica_budget_never_allows_two_nodes_down() -> None:
    found = violations(with_spec(podDisruptionBudget={"maxUnavailable": 2}))
    assert "loses quorum" in found["spec.podDisruptionBudget.maxUnavailable"][0]
    assert violations(with_spec(startMode="single-replica", replicas=2,
                                podDisruptionBudget={"maxUnavailable": 2})) == {}


# --- memory flags ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [".25", "25%", "0.3", "2Gi", "512Mi", "1%", ".011"])
def test_cache_is_a_fraction_or_a_size(value: str) -> None:
    assert violations(with_spec(cache=value)) == {}


@pytest.mark.parametrize(("value", "message"), [
    ("100%", "'100%' is 100% to kwbase, which refuses it (percentage 100% out of range 1% - 99%)"),
    ("150%", "percentage 150% out of range 1% - 99%"),
    ("0.0", "percentage 0% out of range 1% - 99%"),
    (".005", "'.005' is 0% to kwbase, which refuses it (percentage 0% out of range 1% - 99%)"),
    ("0.5%", "percentage 0% out of range 1% - 99%"),
    # kwbase parses a float32: .01 is 0.0099999998, truncated to 0%.
    (".01", "percentage 0% out of range 1% - 99%"),
    ("lots", "is neither a fraction nor a quantity"),
    (".25\n", "is neither a fraction nor a quantity"),
])
def test_a_cache_that_is_neither_a_fraction_nor_a_size_is_refused(value: str,
                                                                  message: str) -> None:
    assert message in violations(with_spec(cache=value))["spec.cache"][0]


def test_cache_and_sql_memory_leave_room_for_the_time_series_engine() -> None:
    message, fix = violations(with_spec(cache=".5", maxSQLMemory="40%"))["spec.maxSQLMemory"]
    assert message == "cache and maxSQLMemory add up to 90% of the memory limit"
    assert "80%" in fix
    assert violations(with_spec(cache=".4", maxSQLMemory="40%")) == {}


# --- resources and storage -------------------------------------------------------------------

def test_a_request_above_its_limit_is_refused_by_value() -> None:
    spec = with_spec(resources={"requests": {"cpu": "4500m"}, "limits": {"cpu": "4"}})
    message, _ = violations(spec)["spec.resources.requests.cpu"]
    assert message == "request 4500m is above the limit 4"
    # Equal by value in other spellings is fine.
    spec = with_spec(resources={"requests": {"memory": "1Gi"}, "limits": {"memory": "1024Mi"}})
    assert violations(spec) == {}


def test_a_resource_needs_a_resource_name() -> None:
    spec = with_spec(resources={"requests": {"cpu cores": "2"}})
    assert "is not a resource name" in violations(spec)["spec.resources.requests.cpu cores"][0]


@pytest.mark.parametrize(("resources", "path", "message"), [
    ({"requests": {"gpu": "1"}}, "spec.resources.requests.gpu", "'gpu' is not a resource name"),
    ({"limits": {"storage": "1Gi"}}, "spec.resources.limits.storage",
     "'storage' is not a resource name"),
    ({"requests": {"cpu": "-1"}}, "spec.resources.requests.cpu", "-1 is negative"),
    ({"requests": {"example.com/gpu": "1"}}, "spec.resources.requests.example.com/gpu",
     "example.com/gpu needs a limit equal to its request"),
    ({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "2"}},
     "spec.resources.requests.example.com/gpu",
     "example.com/gpu needs a limit equal to its request"),
    ({"limits": {"example.com/gpu": "500m"}}, "spec.resources.limits.example.com/gpu",
     "500m is not a whole number"),
])
def test_container_resources_follow_the_api_servers_rules(resources: dict[str, Any], path: str,
                                                          message: str) -> None:
    assert violations(with_spec(resources=resources))[path][0] == message


def test_devices_hugepages_and_ephemeral_storage_are_resources_too() -> None:
    assert violations(with_spec(resources={
        "requests": {"nvidia.com/gpu": 1, "hugepages-2Mi": "1Gi", "ephemeral-storage": "10Gi",
                     "cpu": "2", "memory": "8Gi"},
        "limits": {"nvidia.com/gpu": 1, "hugepages-2Mi": "1Gi", "memory": "8Gi"}})) == {}


def test_an_absurd_quantity_is_reported_not_crashed_on() -> None:
    spec = with_spec(resources={"limits": {"memory": "1e999999"}})
    assert "too large" in violations(spec)["spec.resources.limits.memory"][0]
    assert "too large" in violations(with_spec(storage={"size": "1e99"}))["spec.storage.size"][0]


@pytest.mark.parametrize("size", ["0", "-10Gi", "0Gi"])
def test_a_volume_must_have_a_positive_size(size: str) -> None:
    found = violations(with_spec(storage={"size": size}))
    assert found["spec.storage.size"][0] == "the volume size must be positive"


# --- extra kwbase flags ----------------------------------------------------------------------

@pytest.mark.parametrize("flag", specs.MANAGED_FLAGS)
def test_flags_the_operator_manages_cannot_be_passed_through(flag: str) -> None:
    message, fix = violations(with_spec(extraArgs=[f"{flag}=x"]))["spec.extraArgs[0]"]
    assert message == f"{flag} is managed by the operator"
    assert fix == flags.MANAGED_FLAGS[flag]


def test_a_join_list_smuggled_in_extra_args_is_refused() -> None:
    found = violations(with_spec(extraArgs=["--max-offset=500ms", "--join=evil:26257"]))
    assert list(found) == ["spec.extraArgs[1]"]
    assert found["spec.extraArgs[1]"][0] == "--join is managed by the operator"


@pytest.mark.parametrize("arg", ["max-offset=1s", "-vv", "--Max=1", "start", "--max offset"])
def test_extra_args_are_flags_one_per_item(arg: str) -> None:
    assert "is not a kwbase flag" in violations(with_spec(extraArgs=[arg]))["spec.extraArgs[0]"][0]


def test_a_flag_with_a_line_break_is_refused() -> None:
    found = violations(with_spec(extraArgs=["--locality=region=a\n--join=x"]))
    assert "contains a line break or NUL" in found["spec.extraArgs[0]"][0]


def test_a_flag_given_twice_is_refused() -> None:
    found = violations(with_spec(extraArgs=["--max-offset=1s", "--max-offset=2s"]))
    assert found["spec.extraArgs[1]"][0] == "--max-offset is given twice (also item 0)"


# --- extra environment -----------------------------------------------------------------------

def test_an_env_var_needs_a_valid_name() -> None:
    found = violations(with_spec(extraEnv=[{"name": "1ST", "value": "x"}]))
    assert "is not an environment variable name" in found["spec.extraEnv[0].name"][0]


@pytest.mark.parametrize("name", specs.RESERVED_ENV)
def test_env_vars_the_operator_sets_are_reserved(name: str) -> None:
    found = violations(with_spec(extraEnv=[{"name": name, "value": "x"}]))
    assert found["spec.extraEnv[0].name"][0] == f"{name} is set by the operator"


def test_an_env_var_defined_twice_is_refused() -> None:
    found = violations(with_spec(extraEnv=[{"name": "TZ", "value": "UTC"},
                                           {"name": "TZ", "value": "Asia/Shanghai"}]))
    assert found["spec.extraEnv[1].name"][0] == "TZ is defined twice"


@pytest.mark.parametrize("item", [
    {"name": "DB_PASSWORD"},
    {"name": "DB_PASSWORD", "value": "x", "secretKeyRef": {"name": "db", "key": "password"}},
])
def test_an_env_var_has_either_a_value_or_a_secret_reference(item: dict[str, Any]) -> None:
    found = violations(with_spec(extraEnv=[item]))
    assert found["spec.extraEnv[0]"][0] == "DB_PASSWORD needs exactly one of value and secretKeyRef"


def test_a_secret_reference_names_a_valid_secret() -> None:
    found = violations(with_spec(extraEnv=[{"name": "DB_PASSWORD",
                                            "secretKeyRef": {"name": "DB", "key": "pw"}}]))
    assert "is not a valid object name" in found["spec.extraEnv[0].secretKeyRef.name"][0]


# --- labels, annotations, selectors ----------------------------------------------------------

def all_problems(spec: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Schema and semantic problems together, as `kaiwu validate` reports them (the CRD itself
    holds the rules the API server can enforce, such as a label value's length and form)."""
    _, found = check_object(cluster("orders", "shop", **spec))
    return {dotted(path): (message, fix) for path, message, fix in found}


def test_labels_need_qualified_keys_and_short_plain_values() -> None:
    found = violations(with_spec(labels={"team orders": "a"}))
    assert "is not a valid key" in found["spec.labels.team orders"][0]
    found = all_problems(with_spec(labels={"tier": "x" * 64, "cost-centre": "b c"}))
    assert found["spec.labels.tier"] == (f"'{'x' * 37}...' is 64 characters long",
                                         "use at most 63 characters")
    assert "starts and ends with a letter or digit" in found["spec.labels.cost-centre"][1]
    # The KaiwuCluster's own labels, which no CRD schema covers, follow the same rule.
    found_meta = semantics.check_metadata({"name": "orders", "labels": {"tier": "x" * 64}})
    assert [(dotted(v.path), v.message) for v in found_meta] == [
        ("metadata.labels.tier", f"{'x' * 64!r} is not a valid label value")]


def test_annotation_values_may_be_anything_but_keys_must_be_qualified() -> None:
    assert violations(with_spec(annotations={"example.com/note": "any text: at all\n"})) == {}
    found = violations(with_spec(annotations={"/note": "x"}))
    assert "is not a valid key" in found["spec.annotations./note"][0]


@pytest.mark.parametrize("key", specs.SELECTOR_LABELS)
def test_labels_that_select_the_pods_are_the_operators(key: str) -> None:
    found = violations(with_spec(labels={key: "mine"}))
    assert found[f"spec.labels.{key}"][0] == f"label {key!r} is set by the operator"


def test_a_node_selector_uses_label_rules_and_service_annotations_use_key_rules() -> None:
    found = all_problems(with_spec(scheduling={"nodeSelector": {"disk": "fast ssd"}}))
    assert "a label value holds" in found["spec.scheduling.nodeSelector.disk"][1]
    found = violations(with_spec(scheduling={"nodeSelector": {"bad key": "ssd"}},
                                 service={"annotations": {"bad key": "x"}}))
    assert "is not a valid key" in found["spec.scheduling.nodeSelector.bad key"][0]
    assert "is not a valid key" in found["spec.service.annotations.bad key"][0]


# --- object names the spec refers to ---------------------------------------------------------

@pytest.mark.parametrize(("spec", "path"), [
    ({"storage": {"storageClassName": "Fast_SSD"}}, "spec.storage.storageClassName"),
    ({"scheduling": {"priorityClassName": "High"}}, "spec.scheduling.priorityClassName"),
    ({"image": {"pullSecrets": ["Registry"]}}, "spec.image.pullSecrets[0]"),
    ({"tls": {"nodeSecretName": "Node", "clientSecretName": "client"}},
     "spec.tls.nodeSecretName"),
])
def test_names_of_other_objects_must_be_valid_object_names(spec: dict[str, Any],
                                                           path: str) -> None:
    assert "is not a valid object name" in violations(with_spec(**spec))[path][0]


def test_your_own_certificates_need_both_secrets() -> None:
    found = violations(with_spec(tls={"nodeSecretName": "orders-node"}))
    assert found["spec.tls"] == (
        "name both nodeSecretName and clientSecretName, or neither",
        "your own certificates need both Secrets; leave both empty to let the operator manage "
        "them")
    assert violations(with_spec(tls={"nodeSecretName": "n", "clientSecretName": "c"})) == {}


def test_client_users_are_plain_sql_names_listed_once_and_never_root_or_node() -> None:
    assert violations(with_spec(tls={"clientUsers": ["app", "report_ro"]})) == {}
    found = violations(with_spec(tls={"clientUsers": ["app", "root", "node", "app"]}))
    assert found["spec.tls.clientUsers[1]"] == (
        "'root' is reserved: root's certificate is the cluster's <cluster>-root-client-certs",
        "remove it")
    assert "authenticates as a KaiwuDB node" in found["spec.tls.clientUsers[2]"][0]
    assert found["spec.tls.clientUsers[2]"][1] == "choose another user name"
    assert found["spec.tls.clientUsers[3]"] == ("'app' is listed twice", "keep one")


def test_a_bad_client_user_name_is_explained_where_the_schema_is_not_checked() -> None:
    # The CRD's pattern refuses it first; a live object the reconciler reads is checked again.
    obj = schema.apply_defaults(cluster("orders", "shop", **with_spec(
        tls={"clientUsers": ["App-1"]})))
    found = {dotted(v.path): (v.message, v.fix) for v in semantics.check(obj)}
    message, fix = found["spec.tls.clientUsers[0]"]
    assert "'App-1' is not a SQL user name" in message
    assert "lower-case letter" in fix and "'_'" in fix
    too_many = schema.apply_defaults(cluster("orders", "shop", **with_spec(
        tls={"clientUsers": [f"u{i}" for i in range(tls.MAX_CLIENT_USERS + 1)]})))
    found = {dotted(v.path): (v.message, v.fix) for v in semantics.check(too_many)}
    assert found["spec.tls.clientUsers"][1] == f"list at most {tls.MAX_CLIENT_USERS}"


def test_client_users_need_tls_and_the_reconcilers_own_ca() -> None:
    own = violations(with_spec(tls={"nodeSecretName": "n", "clientSecretName": "c",
                                    "clientUsers": ["app"]}))
    assert "reconciler holds only when it manages the certificates" in (
        own["spec.tls.clientUsers"][0])
    off = violations(with_spec(tls={"enabled": False, "clientUsers": ["app"]}))
    assert off["spec.tls.clientUsers"] == ("client certificates need TLS",
                                           "set spec.tls.enabled: true, or remove clientUsers")


def test_a_secret_layout_describes_your_own_secrets_only() -> None:
    found = violations(with_spec(tls={"secretLayout": "cert-manager"}))
    assert "none are named" in found["spec.tls.secretLayout"][0]
    assert violations(with_spec(tls={"nodeSecretName": "n", "clientSecretName": "c",
                                     "secretLayout": "cert-manager"})) == {}


def test_network_policy_namespaces_must_be_namespace_names() -> None:
    found = violations(with_spec(networkPolicy={"enabled": True,
                                                "allowedNamespaces": ["apps", "Apps"]}))
    assert list(found) == ["spec.networkPolicy.allowedNamespaces[1]"]


# --- scheduling ------------------------------------------------------------------------------

def test_a_topology_spread_key_must_be_a_node_label_key() -> None:
    found = violations(with_spec(scheduling={"topologySpread": [{"topologyKey": "zone name"}]}))
    assert "is not a node label key" in found["spec.scheduling.topologySpread[0].topologyKey"][0]


def test_an_exists_toleration_takes_no_value() -> None:
    found = violations(with_spec(scheduling={"tolerations": [
        {"key": "dedicated", "operator": "Exists", "value": "kaiwudb"}]}))
    assert found["spec.scheduling.tolerations[0].value"][0] == (
        "a toleration with operator Exists takes no value")


@pytest.mark.parametrize(("toleration", "path", "message"), [
    ({"operator": "Equal", "value": "x"}, "spec.scheduling.tolerations[0]",
     "a toleration without a key must use operator Exists"),
    ({}, "spec.scheduling.tolerations[0]", "a toleration without a key must use operator Exists"),
    ({"key": "bad key", "operator": "Exists"}, "spec.scheduling.tolerations[0].key",
     "'bad key' is not a taint key"),
    ({"key": "dedicated", "value": "kaiwu db"}, "spec.scheduling.tolerations[0].value",
     "'kaiwu db' is not a valid taint value"),
    ({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule",
      "tolerationSeconds": 30}, "spec.scheduling.tolerations[0].tolerationSeconds",
     "tolerationSeconds applies only to effect NoExecute"),
])
def test_tolerations_follow_the_api_servers_rules(toleration: dict[str, Any], path: str,
                                                  message: str) -> None:
    """A toleration the API server refuses would make the whole StatefulSet fail to apply."""
    found = violations(with_spec(scheduling={"tolerations": [toleration]}))
    assert found[path][0] == message


def test_a_toleration_without_a_key_says_how_to_tolerate_every_taint() -> None:
    found = violations(with_spec(scheduling={"tolerations": [{"operator": "Equal"}]}))
    assert found["spec.scheduling.tolerations[0]"][1] == (
        "set a key, or operator: Exists to tolerate every taint")


def test_valid_tolerations_pass() -> None:
    assert violations(with_spec(scheduling={"tolerations": [
        {"operator": "Exists"},
        {"key": "dedicated", "operator": "Equal", "value": "kaiwudb", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 30}]})) == {}


def test_a_topology_spread_is_not_given_twice() -> None:
    spread = {"topologyKey": "topology.kubernetes.io/zone"}
    found = violations(with_spec(scheduling={"topologySpread": [spread, spread]}))
    assert found["spec.scheduling.topologySpread[1]"][0] == (
        "topology.kubernetes.io/zone with DoNotSchedule is given twice")
    assert violations(with_spec(scheduling={"topologySpread": [
        spread, {**spread, "whenUnsatisfiable": "ScheduleAnyway"}]})) == {}


def test_a_secret_key_may_be_as_long_as_kubernetes_allows_and_no_longer() -> None:
    # The CRD's maxLength refuses it first; a live object the reconciler reads is checked again.
    def key_problem(key: str) -> tuple[str, str] | None:
        obj = schema.apply_defaults(cluster("orders", "shop", **with_spec(extraEnv=[{
            "name": "DB_PASSWORD", "secretKeyRef": {"name": "db", "key": key}}])))
        found = {dotted(v.path): (v.message, v.fix) for v in semantics.check(obj)}
        return found.get("spec.extraEnv[0].secretKeyRef.key")
    assert key_problem("k" * 253) is None
    assert key_problem("k" * 254) == (f"{'k' * 254!r} is not a Secret key",
                                      "use letters, digits, '-', '_' and '.'")


@pytest.mark.parametrize("key", ["my key", "..", ".", "..hidden", "a/b"])
def test_a_secret_reference_names_a_valid_key(key: str) -> None:
    found = violations(with_spec(extraEnv=[{"name": "DB_PASSWORD",
                                            "secretKeyRef": {"name": "db", "key": key}}]))
    assert found["spec.extraEnv[0].secretKeyRef.key"][0] == f"{key!r} is not a Secret key"


# --- durations -------------------------------------------------------------------------------

def test_a_timeout_too_long_to_hold_is_reported_not_crashed_on() -> None:
    found = violations(with_spec(failover={"nodeLostTimeout": "99999999999h"}))
    assert "is longer than a timedelta can hold" in found["spec.failover.nodeLostTimeout"][0]


@pytest.mark.parametrize("interval", ["30s5m", "1h1h", "500ms1s"])
def test_the_scrape_interval_is_a_prometheus_duration(interval: str) -> None:
    """The ServiceMonitor CRD wants units largest first, each once: 30s5m would not apply."""
    found = violations(with_spec(monitoring={"serviceMonitor": True, "interval": interval}))
    assert found["spec.monitoring.interval"][0] == f"{interval!r} is not a Prometheus duration"
    assert violations(with_spec(monitoring={"interval": "1h5m30s500ms"})) == {}


# --- transitions -----------------------------------------------------------------------------

def spec_of(**changes: Any) -> dict[str, Any]:
    """A defaulted spec, as `kaiwu diff` and the reconciler compare them."""
    obj = schema.apply_defaults(cluster("orders", "shop", **with_spec(**changes)))
    spec: dict[str, Any] = obj["spec"]
    return spec


def transition(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    return {dotted(v.path): v.message for v in semantics.check_transition(old, new)}


def test_ordinary_changes_are_allowed() -> None:
    old = spec_of()
    assert transition(old, spec_of(replicas=5)) == {}
    assert transition(old, spec_of(version="3.2.2")) == {}
    assert transition(old, spec_of(storage={"size": "200Gi"})) == {}
    assert transition(spec_of(replicas=5), old) == {}, "multi-replica scales in by decommission"


def test_the_start_mode_can_never_change() -> None:
    found = transition(spec_of(), spec_of(startMode="single-replica"))
    assert found["spec.startMode"] == ("the start mode cannot change (multi-replica -> "
                                       "single-replica): it is written into every store")


def test_a_single_replica_cluster_cannot_scale_in() -> None:
    old = spec_of(startMode="single-replica", replicas=2)
    found = transition(old, spec_of(startMode="single-replica", replicas=1))
    assert found["spec.replicas"] == (
        "a single-replica cluster cannot scale in (no second copy of the data exists)")
    assert transition(old, spec_of(startMode="single-replica", replicas=3)) == {}


def test_volumes_never_shrink_compared_by_value() -> None:
    found = transition(spec_of(storage={"size": "100Gi"}), spec_of(storage={"size": "99Gi"}))
    assert found["spec.storage.size"] == "volumes cannot shrink (100Gi -> 99Gi)"
    assert transition(spec_of(storage={"size": "1Gi"}), spec_of(storage={"size": "1024Mi"})) == {}
    assert "spec.storage.size" in transition(spec_of(storage={"size": "1Gi"}),
                                             spec_of(storage={"size": "1G"}))


def test_the_storage_class_of_existing_volumes_cannot_change() -> None:
    found = transition(spec_of(storage={"size": "100Gi", "storageClassName": "standard"}),
                       spec_of(storage={"size": "100Gi", "storageClassName": "fast-ssd"}))
    assert found == {"spec.storage.storageClassName":
                     "the storage class of existing volumes cannot change"}


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(dotted(v.path), v.message, v.fix) for v in semantics.check_change(old, new)]


def test_a_version_never_goes_back_nor_jumps_a_major_release() -> None:
    assert changes(spec_of(version="3.2.1"), spec_of(version="3.2.2")) == []
    assert changes(spec_of(version="3.2.1"), spec_of(version="3.10.0")) == [], "by number"
    assert changes(spec_of(version="3.2.1"), spec_of(version="3.2.0")) == [(
        "spec.version", "the version cannot go back (3.2.1 -> 3.2.0): KaiwuDB cannot be "
        "downgraded", "keep 3.2.1 or later")]
    assert changes(spec_of(version="2.2.0"), spec_of(version="3.0.0")) == [(
        "spec.version", "the major version cannot change in place (2.2.0 -> 3.0.0): KaiwuDB "
        "needs an export and import into a new cluster", "keep 2.x")]


def test_tags_that_are_not_plain_versions_are_not_judged() -> None:
    assert changes(spec_of(version="3.2.1"), spec_of(version="1.0.0.custom")) == []
    assert changes(spec_of(version="3.2.1"), spec_of(version="3.2.0-rc.1")) != [], "3.2.0"
    assert semantics.version_tuple("v3.2.1-rc.1") == (3, 2, 1)
    assert semantics.version_tuple("3.2.1.1") == (3, 2, 1, 1), "KaiwuDB's four-part versions"
    assert semantics.version_tuple("latest") is None
    assert semantics.version_tuple("3.x") is None
    assert semantics.check_version_change({"version": "latest"}, {"version": "1.0.0"}) == []
    assert semantics.check_version_change({}, {"version": "1.0.0"}) == []


def test_the_reconciler_remembers_what_it_needs_to_judge_the_next_change() -> None:
    """transition_facts: what the reconciler keeps of the spec it last applied; judging a new
    spec against them gives the same verdicts as against the whole old spec."""
    old = spec_of(startMode="single-replica", replicas=2, version="3.2.1",
                  storage={"size": "100Gi", "storageClassName": "standard"})
    facts = semantics.transition_facts(old)
    assert facts == {"startMode": "single-replica", "replicas": 2, "version": "3.2.1",
                     "storage": {"size": "100Gi", "storageClassName": "standard"},
                     "maxOffset": "500ms"}
    assert semantics.transition_facts(spec_of())["storage"] == {"size": "100Gi"}
    new = spec_of(startMode="single-replica", replicas=1, version="3.2.0",
                  storage={"size": "50Gi"})
    assert changes(facts, new) == changes(old, new)
    assert [path for path, _, _ in changes(facts, new)] == [
        "spec.replicas", "spec.storage.size", "spec.storage.storageClassName", "spec.version"]


def test_the_clock_offset_bound_is_checked_and_never_changes_on_a_running_cluster() -> None:
    """KWDB reads --max-offset as a duration of at most 5s (server/config.go:119-129), and
    every node must use the same: a node whose peer's differs panics (rpc/heartbeat.go:
    160-167), so a rolling restart cannot change it. The default is 500ms; facts written
    before the bound was kept do not judge it."""
    for value, problem in (("1.5s", "is not a duration"), ("6s", "more than 5s"),
                           ("", "is not a duration")):
        message, fix = violations(with_spec(extraArgs=[f"--max-offset={value}"]))[
            "spec.extraArgs[0]"]
        assert problem in message and "at most 5s" in fix
    assert violations(with_spec(extraArgs=["--max-offset=5s"])) == {}

    old = spec_of(extraArgs=["--max-offset=250ms"])
    found = changes(semantics.transition_facts(old), spec_of())
    assert found == changes(old, spec_of())
    assert [(path, message.split(":")[0]) for path, message, _ in found] == [
        ("spec.extraArgs", "--max-offset cannot change on a running cluster (250ms -> 500ms)")]
    assert changes(spec_of(), spec_of(extraArgs=["--max-offset=500ms"])) == [], "the default"
    assert changes(spec_of(), spec_of(extraArgs=["--max-offset=0.5s"])) != []
    written_before = {k: v for k, v in semantics.transition_facts(spec_of()).items()
                      if k != "maxOffset"}
    assert changes(written_before, spec_of(extraArgs=["--max-offset=1s"])) == []


@pytest.mark.parametrize("flag", ["--port", "--http-port", "--cluster-name", "--ts-store",
                                  "--external-io-dir", "--logtostderr"])
def test_flags_that_would_move_what_the_operator_relies_on_are_refused(flag: str) -> None:
    message, fix = violations(with_spec(extraArgs=[f"{flag}=x"]))["spec.extraArgs[0]"]
    assert message == f"{flag} is managed by the operator" and fix


def test_a_lone_surrogate_in_the_spec_is_named_by_its_path() -> None:
    """A live object can carry what no file can (JSON allows "\\ud800"): the rule finds it and
    names the field."""
    obj = schema.apply_defaults(cluster("orders", "shop", **with_spec(
        annotations={"note": "bad \ud800 text"})))
    found = {dotted(v.path): v.message for v in semantics.check(obj)}
    assert found == {"spec.annotations.note": "contains a lone UTF-16 surrogate (an escape such "
                     "as \\ud800), which is not text"}


def test_a_lone_surrogate_in_a_key_or_deep_in_a_list_is_found_too() -> None:
    """The rule looks at every string before it names places: keys and list items count."""
    obj = schema.apply_defaults(cluster("orders", "shop", **with_spec(
        annotations={"bad \ud800 key": "fine"}, extraArgs=["--a=1", "--b=\udfff"])))
    found = sorted(dotted(v.path) for v in semantics.check(obj) if "surrogate" in v.message)
    assert found == ["spec.annotations.bad \\ud800 key", "spec.extraArgs[1]"]


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer"])
def test_an_insecure_cluster_is_not_exposed_outside_kubernetes_unless_the_risk_is_accepted(
        kind: str) -> None:
    """An insecure kwbase takes any client as any user, root included, without a password: a
    NodePort or a load balancer in front of it is an open door."""
    found = violations(with_spec(tls={"enabled": False}, service={"type": kind}))
    message, fix = found["spec.service.type"]
    assert f"type {kind} exposes an insecure cluster" in message
    assert "spec.service.allowInsecureExposure: true" in fix
    assert violations(with_spec(tls={"enabled": False}, service={
        "type": kind, "allowInsecureExposure": True})) == {}
    assert violations(with_spec(service={"type": kind})) == {}, "TLS on: fine"
    assert violations(with_spec(tls={"enabled": False})) == {}, "ClusterIP: fine"


@pytest.mark.parametrize(("spec", "where"), [
    ({"storage": {"size": 10}}, "spec.storage.size"),
    ({"storage": {"size": "500k"}}, "spec.storage.size"),
    ({"resources": {"requests": {"memory": "512"}}}, "spec.resources.requests.memory"),
    ({"resources": {"limits": {"memory": 1000}}}, "spec.resources.limits.memory"),
])
def test_a_size_without_its_unit_is_refused_not_rendered_as_bytes(
        spec: dict[str, Any], where: str) -> None:
    """`storage.size: 10` rendered a 10-byte volume; `memory: 512` half a kilobyte."""
    message, fix = violations(with_spec(**spec))[where]
    assert "bytes" in message and fix.startswith("write the unit, e.g.")
    assert violations(with_spec(storage={"size": "1Mi"})) == {}
