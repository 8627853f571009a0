"""What a user writes in a KaiwuCluster reaches the reconciler as they meant it.

renderer.spec turns a checked, defaulted object into the `Cluster` the builders and the
reconciler act on, and renderer.settings reads the `--kube-version` a user passes. Each story
writes a spec (or a flag) and looks at what comes out: the failover timers, the drift rules, the
restore source, the certificate Secrets and their keys, and the messages a mistake gets.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from renderer.errors import RenderError
from renderer.render import read_live
from renderer.settings import KubeVersion, RenderSettings, supported_version
from renderer.spec import Cluster, StartMode, parse_duration
from tests.support.render import cluster, kaiwu


def read(**spec: Any) -> Cluster:
    return read_live(cluster("orders", "shop", **{"version": "3.2.1", **spec}))


def test_every_field_a_user_sets_reaches_the_cluster() -> None:
    found = read(
        image={"repository": "registry.example.com/kwdb", "pullPolicy": "Always",
               "pullSecrets": ["regcred"]},
        startMode="single-replica", replicas=2,
        resources={"requests": {"memory": "4Gi", "cpu": "2"}, "limits": {"memory": "8Gi"}},
        storage={"size": "50Gi", "storageClassName": "fast"},
        tls={"clientUsers": ["app_reader"]},
        cache="30%", maxSQLMemory="2Gi", terminationGracePeriodSeconds=120,
        scheduling={"antiAffinity": "required",
                    "topologySpread": [{"topologyKey": "zone", "maxSkew": 2,
                                        "whenUnsatisfiable": "ScheduleAnyway"}],
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "db", "operator": "Exists", "effect": "NoSchedule"}],
                    "priorityClassName": "critical"},
        service={"type": "NodePort", "annotations": {"example.com/lb": "internal"}},
        extraArgs=["--max-offset=250ms"],
        extraEnv=[{"name": "TZ", "value": "UTC"},
                  {"name": "PW", "secretKeyRef": {"name": "db", "key": "password"}}],
        labels={"team": "shop"}, annotations={"example.com/owner": "orders"},
        podDisruptionBudget={"enabled": False, "maxUnavailable": 1},
        failover={"enabled": False, "nodeLostTimeout": "1h30m", "podNotReadyTimeout": "90s",
                  "replaceLostVolumes": True, "maxCrashRestarts": 7},
        drift={"policy": "warn", "ignore": [{"pointer": "/spec/replicas", "kind": "StatefulSet",
                                             "name": "orders"}, {"pointer": "/metadata/x"}]},
        podSecurity={"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 5, "fsGroup": 6},
        nodeTuning={"enabled": True, "maxMapCount": 20000000},
        networkPolicy={"enabled": True, "allowedNamespaces": ["apps"]},
        monitoring={"serviceMonitor": True, "interval": "15s"},
        paused=True,
        bootstrap={"fromBackup": {"name": "nightly"}},
    )
    assert (found.name, found.namespace, found.version) == ("orders", "shop", "3.2.1")
    assert found.image == "registry.example.com/kwdb:3.2.1"
    assert (found.pull_policy, found.pull_secrets) == ("Always", ("regcred",))
    assert (found.start_mode, found.replicas) == (StartMode.SINGLE_REPLICA, 2)
    assert found.requests == (("cpu", "2"), ("memory", "4Gi")), "sorted, as rendered"
    assert found.limits == (("memory", "8Gi"),)
    assert (found.storage_size, found.storage_class) == ("50Gi", "fast")
    assert (found.tls, found.client_users) == (True, ("app_reader",))
    assert read(tls={"enabled": False}).tls is False
    assert (found.cache, found.max_sql_memory, found.grace_period_seconds) == ("30%", "2Gi", 120)
    assert found.anti_affinity == "required"
    assert [(s.topology_key, s.max_skew, s.when_unsatisfiable)
            for s in found.topology_spread] == [("zone", 2, "ScheduleAnyway")]
    assert found.node_selector == (("disk", "ssd"),)
    assert found.tolerations == ((("effect", "NoSchedule"), ("key", "db"),
                                  ("operator", "Exists")),)
    assert found.priority_class == "critical"
    assert (found.service_type, found.service_annotations) == (
        "NodePort", (("example.com/lb", "internal"),))
    assert found.extra_args == ("--max-offset=250ms",)
    assert [(e.name, e.value, e.secret_name, e.secret_key) for e in found.extra_env] == [
        ("TZ", "UTC", None, None), ("PW", None, "db", "password")]
    assert (found.labels, found.annotations) == ((("team", "shop"),),
                                                 (("example.com/owner", "orders"),))
    assert (found.pdb_enabled, found.pdb_max_unavailable) == (False, 1)
    assert found.failover.enabled is False
    assert found.failover.node_lost_timeout == timedelta(hours=1, minutes=30)
    assert found.failover.pod_not_ready_timeout == timedelta(seconds=90)
    assert found.failover.replace_lost_volumes is True
    assert found.failover.max_crash_restarts == 7
    assert found.drift_policy == "warn"
    assert [(i.pointer, i.kind, i.name) for i in found.drift_ignore] == [
        ("/spec/replicas", "StatefulSet", "orders"), ("/metadata/x", "", "")]
    security = found.pod_security
    assert (security.run_as_non_root, security.run_as_user, security.run_as_group,
            security.fs_group) == (False, 0, 5, 6)
    assert (found.node_tuning, found.max_map_count) == (True, 20000000)
    assert (found.network_policy, found.allowed_namespaces) == (True, ("apps",))
    assert (found.service_monitor, found.scrape_interval) == (True, "15s")
    assert found.paused is True
    assert found.restore_from == "nightly"


def test_a_spec_that_says_little_gets_the_documented_defaults() -> None:
    found = read()
    assert found.namespace == "shop"
    assert found.image == "kwdb/kwdb:3.2.1"
    assert (found.pull_secrets, found.requests, found.limits) == ((), (), ())
    assert (found.storage_class, found.priority_class, found.restore_from) == (None, None, None)
    assert found.failover.node_lost_timeout == timedelta(minutes=5)
    assert found.failover.pod_not_ready_timeout == timedelta(minutes=10)
    assert (found.drift_policy, found.drift_ignore, found.paused) == ("enforce", (), False)
    assert (found.topology_spread, found.tolerations, found.extra_env) == ((), (), ())


def test_a_cluster_without_a_namespace_is_read_into_default() -> None:
    obj = cluster("orders", None, version="3.2.1")
    assert read_live(obj).namespace == "default"


def test_the_operator_names_the_certificate_secrets_unless_the_user_does() -> None:
    managed = read()
    assert (managed.node_secret, managed.client_secret) == (
        "orders-node-certs", "orders-root-client-certs")
    assert managed.user_provided_certs is False
    assert managed.node_secret_keys == ("ca.crt", "node.crt", "node.key")
    assert managed.client_secret_keys == ("ca.crt", "client.root.crt", "client.root.key")

    own = read(tls={"nodeSecretName": "mine-node", "clientSecretName": "mine-client"})
    assert (own.node_secret, own.client_secret, own.user_provided_certs) == (
        "mine-node", "mine-client", True)
    assert own.node_secret_keys == ("ca.crt", "node.crt", "node.key"), "KWDB's names by default"


def test_cert_manager_secrets_are_read_by_their_tls_keys() -> None:
    own = read(tls={"nodeSecretName": "n", "clientSecretName": "c",
                    "secretLayout": "cert-manager"})
    assert own.secret_layout == "cert-manager"
    assert own.node_secret_keys == ("ca.crt", "tls.crt", "tls.key")
    assert own.client_secret_keys == ("ca.crt", "tls.crt", "tls.key")


def test_a_named_sql_users_secret_turns_underscores_into_dashes() -> None:
    assert read().user_client_secret("app_reader") == "orders-client-app-reader-certs"
    assert read().pod_name(4) == "orders-4"


@pytest.mark.parametrize(("mode", "command"), [
    (StartMode.MULTI_REPLICA, "start"), (StartMode.SINGLE_REPLICA, "start-single-replica"),
    (StartMode.SINGLE_NODE, "start-single-node")])
def test_each_start_mode_names_its_kwbase_subcommand(mode: StartMode, command: str) -> None:
    assert mode.command == command


@pytest.mark.parametrize(("text", "expected"), [
    ("30s", timedelta(seconds=30)), ("5m", timedelta(minutes=5)), ("2h", timedelta(hours=2)),
    ("500ms", timedelta(milliseconds=500)), ("1h30m", timedelta(minutes=90)),
    ("1m1s", timedelta(seconds=61)),
])
def test_durations_read_as_kubernetes_writes_them(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "5 m", "1d", "m5", "30s ", "1h30", "ms"])
def test_a_duration_that_is_not_one_says_what_one_looks_like(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_duration(text)
    assert str(raised.value) == f"{text!r} is not a duration such as 30s, 5m or 1h30m"


def test_a_duration_longer_than_python_can_hold_is_refused_not_crashed() -> None:
    with pytest.raises(ValueError) as raised:
        parse_duration("99999999999h")
    assert str(raised.value) == "'99999999999h' is longer than a timedelta can hold"


@pytest.mark.parametrize(("text", "version"), [
    ("1.20", (1, 20)), ("v1.29.3", (1, 29)), ("1.30.0-rc.1", (1, 30)), ("1.28+k3s1", (1, 28)),
    (" 1.25\n", (1, 25)), ("2.0", (2, 0)), ("1.100", (1, 100)),
])
def test_kubernetes_versions_are_read_as_major_and_minor(text: str,
                                                         version: tuple[int, int]) -> None:
    parsed = KubeVersion.parse(text)
    assert (parsed.major, parsed.minor) == version
    assert str(parsed) == f"{version[0]}.{version[1]}"


@pytest.mark.parametrize("text", ["1", "1.x", "one.two", "1.2.3.4", "x1.2", "1.2.", ""])
def test_a_version_that_is_not_one_is_refused_with_examples(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        KubeVersion.parse(text)
    assert str(raised.value) == (
        f"{text!r} is not a Kubernetes version (examples: 1.20, v1.29.3)")


def test_versions_compare_by_minor_release() -> None:
    assert KubeVersion(1, 20) < KubeVersion(1, 21) < KubeVersion(2, 0)
    assert supported_version("1.20") == KubeVersion(1, 20), "the oldest is supported"
    with pytest.raises(ValueError) as raised:
        supported_version("v1.19.9")
    assert str(raised.value) == (
        "Kubernetes 1.19 is older than the oldest supported release, 1.20")


def test_the_default_target_is_the_oldest_kubernetes_users_run_with_the_usual_domain() -> None:
    settings = RenderSettings()
    assert str(settings.kube_version) == "1.28"
    assert settings.cluster_domain == "cluster.local"
    live = settings.live
    assert (live.replicas, live.partition, live.certs_hash) == (None, None, None)


def test_an_unsupported_version_flag_is_a_usage_error_naming_the_oldest() -> None:
    run = kaiwu("render", "--stdout", "--kube-version", "1.19")
    assert run.code == 2
    assert "Kubernetes 1.19 is older than the oldest supported release, 1.20" in run.stderr


def test_a_live_cluster_that_breaks_a_rule_is_named_by_namespace_and_name() -> None:
    """The reconciler reads a live object: no file, so a problem names the object instead."""
    with pytest.raises(RenderError) as raised:
        read(tls={"enabled": False, "clientUsers": ["app"]})
    assert str(raised.value) == (
        "KaiwuCluster shop/orders: spec.tls.clientUsers: client certificates need TLS (set "
        "spec.tls.enabled: true, or remove clientUsers)")
    with pytest.raises(RenderError) as raised:
        read_live({**cluster("orders", None, version="3.2.1", replicas="three"),
                   "status": {"phase": "Running"}})
    assert str(raised.value).startswith("KaiwuCluster default/orders: spec.replicas: ")


def test_a_live_object_without_a_name_is_still_named_as_far_as_it_can_be() -> None:
    with pytest.raises(RenderError) as raised:
        read_live({"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                   "metadata": {"namespace": "shop"}, "spec": {"version": "3.2.1"}})
    assert str(raised.value) == (
        "KaiwuCluster shop/?: metadata.name: the cluster has no name (set metadata.name)")
