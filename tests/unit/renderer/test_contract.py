"""The names and wiring the reconciler, the docs and users rely on, read off rendered objects.

For a KaiwuCluster N in namespace NS: StatefulSet N running container `kwbase` from
`kwdb/kwdb:<version>` with KWDB's documented start line, headless Service N, client Service
N-public, claim template `data`, the four app.kubernetes.io labels, certificate Secrets
N-node-certs and N-root-client-certs mounted read-only 0400. Each story renders a small spec the
way a user writes it and looks at the objects, not at the renderer's code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from renderer.render import build_objects, read_live
from renderer.settings import LiveState, RenderSettings
from tests.support.render import cluster, render_tree, write_yaml

LABELS = {"app.kubernetes.io/name": "kaiwudb", "app.kubernetes.io/instance": "orders",
          "app.kubernetes.io/managed-by": "kaiwu-operator",
          "app.kubernetes.io/component": "database"}
FQDN = "orders.shop.svc.cluster.local"


def render_one(tmp_path: Path, *options: str, **spec: Any) -> dict[str, dict[str, Any]]:
    """Render one cluster `orders` in namespace `shop`; objects keyed by `Kind/name`."""
    write_yaml(tmp_path / "src" / "orders.yaml", cluster("orders", "shop", **spec))
    objects = render_tree(tmp_path / "src", tmp_path / "out", *options)
    return {f"{obj['kind']}/{obj['metadata']['name']}": obj for obj in objects.values()}


def container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers = objects["StatefulSet/orders"]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["kwbase"]
    found: dict[str, Any] = containers[0]
    return found


def test_a_default_cluster_renders_the_expected_objects(tmp_path: Path) -> None:
    objects = render_one(tmp_path)
    assert sorted(objects) == ["PodDisruptionBudget/orders", "Service/orders",
                               "Service/orders-public", "ServiceAccount/orders",
                               "StatefulSet/orders"]
    for obj in objects.values():
        assert obj["metadata"]["namespace"] == "shop"
        assert obj["metadata"]["labels"].items() >= LABELS.items()


def test_a_multi_replica_node_starts_with_kwdbs_documented_flags(tmp_path: Path) -> None:
    kwbase = container(render_one(tmp_path, version="3.2.0", replicas=5))
    assert kwbase["image"] == "kwdb/kwdb:3.2.0"
    assert kwbase["command"] == [
        "/kaiwudb/bin/kwbase", "start", "--certs-dir=/kaiwudb/certs",
        "--listen-addr=0.0.0.0:26257", f"--advertise-addr=$(POD_NAME).{FQDN}:26257",
        "--http-addr=0.0.0.0:8080", "--store=/kaiwudb/deploy/data", "--brpc-addr=:27257",
        f"--join=orders-0.{FQDN}:26257,orders-1.{FQDN}:26257,orders-2.{FQDN}:26257",
        "--cache=.25", "--max-sql-memory=.25", "--logtostderr",
        "--upgrade-complete=$(KAIWU_UPGRADE_COMPLETE)"]
    assert "args" not in kwbase, "never a shell, never a second argument list"
    pod_name = next(env for env in kwbase["env"] if env["name"] == "POD_NAME")
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # KWDB's upgrade restart, and only it, passes --upgrade-complete=true: the reconciler
    # switches the value in a ConfigMap the kubelet reads at every container start.
    flag = next(env for env in kwbase["env"] if env["name"] == "KAIWU_UPGRADE_COMPLETE")
    assert flag["valueFrom"] == {"configMapKeyRef": {"name": "orders-start-flags",
                                                     "key": "upgrade-complete"}}


def test_scaling_never_changes_the_pod_template(tmp_path: Path) -> None:
    """The join list names the first three pods at every size: scaling restarts nothing."""
    small = render_one(tmp_path / "a", replicas=3)["StatefulSet/orders"]
    large = render_one(tmp_path / "b", replicas=7)["StatefulSet/orders"]
    assert small["spec"]["template"] == large["spec"]["template"]
    assert (small["spec"]["replicas"], large["spec"]["replicas"]) == (3, 7)


@pytest.mark.parametrize(("mode", "replicas", "subcommand", "joins"), [
    ("single-replica", 2, "start-single-replica", True),
    ("single-node", 1, "start-single-node", False),
])
def test_each_start_mode_runs_its_own_kwbase_subcommand(tmp_path: Path, mode: str, replicas: int,
                                                        subcommand: str, joins: bool) -> None:
    command = container(render_one(tmp_path, startMode=mode, replicas=replicas))["command"]
    assert command[1] == subcommand
    flags = {arg.split("=", 1)[0] for arg in command[2:]}
    # start-single-node rejects --join; brpc is mandatory for the other two modes.
    assert ("--join" in flags) is joins
    assert ("--brpc-addr" in flags) is joins


def test_insecure_mode_mounts_no_certificates(tmp_path: Path) -> None:
    objects = render_one(tmp_path, tls={"enabled": False})
    kwbase = container(objects)
    assert "--insecure" in kwbase["command"]
    assert not any(arg.startswith("--certs-dir") for arg in kwbase["command"])
    assert "volumes" not in objects["StatefulSet/orders"]["spec"]["template"]["spec"]
    assert [mount["name"] for mount in kwbase["volumeMounts"]] == ["data"]
    assert kwbase["livenessProbe"]["httpGet"]["scheme"] == "HTTP"


def test_certificates_come_from_the_two_secrets_read_only_0400(tmp_path: Path) -> None:
    objects = render_one(tmp_path)
    pod = objects["StatefulSet/orders"]["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["projected"]["defaultMode"] == 0o400
    sources = {source["secret"]["name"]: [item["path"] for item in source["secret"]["items"]]
               for source in volume["projected"]["sources"]}
    assert sources == {"orders-node-certs": ["ca.crt", "node.crt", "node.key"],
                       "orders-root-client-certs": ["client.root.crt", "client.root.key"]}
    mount = next(m for m in container(objects)["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": "certs", "mountPath": "/kaiwudb/certs", "readOnly": True}
    assert container(objects)["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_your_own_certificate_secrets_replace_the_managed_ones(tmp_path: Path) -> None:
    objects = render_one(tmp_path, tls={"nodeSecretName": "my-node",
                                        "clientSecretName": "my-client"})
    pod = objects["StatefulSet/orders"]["spec"]["template"]["spec"]
    names = [s["secret"]["name"] for s in pod["volumes"][0]["projected"]["sources"]]
    assert names == ["my-node", "my-client"]


def test_cert_manager_layout_secrets_are_mounted_under_kwdbs_file_names(
        tmp_path: Path) -> None:
    objects = render_one(tmp_path, tls={"nodeSecretName": "my-node",
                                        "clientSecretName": "my-client",
                                        "secretLayout": "cert-manager"})
    pod = objects["StatefulSet/orders"]["spec"]["template"]["spec"]
    items = {s["secret"]["name"]: [(i["key"], i["path"]) for i in s["secret"]["items"]]
             for s in pod["volumes"][0]["projected"]["sources"]}
    assert items == {
        "my-node": [("ca.crt", "ca.crt"), ("tls.crt", "node.crt"), ("tls.key", "node.key")],
        "my-client": [("tls.crt", "client.root.crt"), ("tls.key", "client.root.key")]}
    assert pod["volumes"][0]["projected"]["defaultMode"] == 0o400


def test_client_user_secrets_are_never_rendered_nor_mounted(tmp_path: Path) -> None:
    plain = render_one(tmp_path / "a")
    with_users = render_one(tmp_path / "b", tls={"clientUsers": ["app"]})
    assert with_users == plain, "the reconciler issues them; pods do not mount them"


def test_the_headless_service_publishes_every_pod_before_it_is_ready(tmp_path: Path) -> None:
    headless = render_one(tmp_path)["Service/orders"]["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in headless["ports"]} == {
        "sql": 26257, "http": 8080, "brpc": 27257}
    assert headless["selector"] == {"app.kubernetes.io/instance": "orders",
                                    "app.kubernetes.io/name": "kaiwudb"}


def test_clients_reach_sql_and_http_but_never_brpc(tmp_path: Path) -> None:
    objects = render_one(tmp_path, service={"type": "LoadBalancer",
                                            "annotations": {"example.com/internal": "true"}})
    client = objects["Service/orders-public"]
    assert client["spec"]["type"] == "LoadBalancer"
    assert [(p["name"], p["port"], p["targetPort"]) for p in client["spec"]["ports"]] == [
        ("sql", 26257, "sql"), ("http", 8080, "http")]
    assert client["metadata"]["annotations"] == {"example.com/internal": "true"}
    assert "annotations" not in objects["Service/orders"]["metadata"]


def test_brpc_is_never_remapped(tmp_path: Path) -> None:
    """A node advertises <host>:27257 for brpc, so every port number must stay 27257."""
    objects = render_one(tmp_path)
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert ports == {"sql": 26257, "http": 8080, "brpc": 27257}
    brpc = next(p for p in objects["Service/orders"]["spec"]["ports"] if p["name"] == "brpc")
    assert brpc["port"] == 27257 and brpc["targetPort"] == "brpc"


def test_each_node_keeps_its_store_on_a_claim_named_data(tmp_path: Path) -> None:
    objects = render_one(tmp_path, storage={"size": "0.5Ti", "storageClassName": "fast-ssd"})
    statefulset = objects["StatefulSet/orders"]["spec"]
    (claim,) = statefulset["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "512Gi", "canonical quantity"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert {"name": "data", "mountPath": "/kaiwudb/deploy/data"} in container(objects)[
        "volumeMounts"]
    assert statefulset["serviceName"] == "orders"
    assert statefulset["podManagementPolicy"] == "Parallel"


def test_health_probes_use_the_http_port(tmp_path: Path) -> None:
    kwbase = container(render_one(tmp_path))
    assert kwbase["livenessProbe"]["httpGet"]["path"] == "/health"
    assert kwbase["readinessProbe"]["httpGet"]["path"] == "/health?ready=1"
    assert kwbase["livenessProbe"]["httpGet"]["port"] == "http"


def test_resources_render_in_canonical_form(tmp_path: Path) -> None:
    kwbase = container(render_one(tmp_path, resources={
        "requests": {"cpu": "1000m", "memory": "1024Mi"}, "limits": {"cpu": 2, "memory": "2Gi"}}))
    assert kwbase["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"},
                                   "limits": {"cpu": "2", "memory": "2Gi"}}


def test_memory_flags_pass_fractions_and_turn_sizes_into_bytes(tmp_path: Path) -> None:
    command = container(render_one(tmp_path, cache="30%", maxSQLMemory="1Gi"))["command"]
    assert "--cache=30%" in command
    assert "--max-sql-memory=1073741824" in command


def test_extra_args_follow_the_managed_flags_and_extra_env_is_added(tmp_path: Path) -> None:
    kwbase = container(render_one(tmp_path, extraArgs=["--max-offset=250ms", "--locality=zone=a"],
                                  extraEnv=[{"name": "TZ", "value": "UTC"},
                                            {"name": "DB_PASSWORD", "secretKeyRef": {
                                                "name": "db", "key": "password"}}]))
    assert kwbase["command"][-2:] == ["--max-offset=250ms", "--locality=zone=a"]
    env = {item["name"]: item for item in kwbase["env"]}
    assert env["TZ"] == {"name": "TZ", "value": "UTC"}
    assert env["DB_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "db", "key": "password"}}
    assert env["LD_LIBRARY_PATH"]["value"] == "/kaiwudb/lib"


def test_another_cluster_domain_changes_every_address(tmp_path: Path) -> None:
    command = container(render_one(tmp_path, "--cluster-domain", "corp.internal"))["command"]
    addresses = [arg for arg in command if arg.startswith(("--advertise-addr", "--join"))]
    assert all("orders.shop.svc.corp.internal:26257" in arg for arg in addresses)
    assert not any("cluster.local" in arg for arg in command)


@pytest.mark.parametrize(("choice", "key"), [
    ("preferred", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("required", "requiredDuringSchedulingIgnoredDuringExecution"),
])
def test_nodes_keep_apart_on_separate_machines(tmp_path: Path, choice: str, key: str) -> None:
    spec = {"scheduling": {"antiAffinity": choice}} if choice != "preferred" else {}
    pod = render_one(tmp_path, **spec)["StatefulSet/orders"]["spec"]["template"]["spec"]
    assert list(pod["affinity"]["podAntiAffinity"]) == [key]


def test_anti_affinity_can_be_switched_off(tmp_path: Path) -> None:
    pod = render_one(tmp_path, scheduling={"antiAffinity": "none"})["StatefulSet/orders"]
    assert "affinity" not in pod["spec"]["template"]["spec"]


def test_the_pods_never_get_a_kubernetes_api_token(tmp_path: Path) -> None:
    objects = render_one(tmp_path)
    assert objects["ServiceAccount/orders"]["automountServiceAccountToken"] is False
    pod = objects["StatefulSet/orders"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "orders"
    assert pod["automountServiceAccountToken"] is False


def test_user_labels_reach_every_object_and_pod_but_ours_win(tmp_path: Path) -> None:
    objects = render_one(tmp_path, labels={"team": "orders"},
                         annotations={"example.com/owner": "shop"})
    template = objects["StatefulSet/orders"]["spec"]["template"]["metadata"]
    for meta in [obj["metadata"] for obj in objects.values()] + [template]:
        assert meta["labels"]["team"] == "orders"
        assert meta["annotations"]["example.com/owner"] == "shop"


def test_the_budget_can_be_switched_off_and_optional_objects_on(tmp_path: Path) -> None:
    objects = render_one(tmp_path, podDisruptionBudget={"enabled": False},
                         networkPolicy={"enabled": True, "allowedNamespaces": ["apps"]},
                         monitoring={"serviceMonitor": True, "interval": "15s"})
    assert "PodDisruptionBudget/orders" not in objects
    ingress = objects["NetworkPolicy/orders"]["spec"]["ingress"]
    assert ingress[1]["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "apps"}}}]
    endpoint = objects["ServiceMonitor/orders"]["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"], endpoint["interval"]) == (
        "http", "/_status/vars", "https", "15s")


def test_node_tuning_adds_a_privileged_init_container(tmp_path: Path) -> None:
    pod = render_one(tmp_path, nodeTuning={"enabled": True, "maxMapCount": 20000000})[
        "StatefulSet/orders"]["spec"]["template"]["spec"]
    (tuner,) = pod["initContainers"]
    assert tuner["command"] == ["sysctl", "-w", "vm.max_map_count=20000000"]
    # Privileged alone is not enough under the pod's non-root user: sysctl needs root.
    assert tuner["securityContext"] == {"privileged": True, "runAsUser": 0,
                                        "runAsNonRoot": False}


def test_a_cluster_without_a_namespace_lands_in_default(tmp_path: Path) -> None:
    write_yaml(tmp_path / "src" / "x.yaml", cluster("orders", None))
    objects = render_tree(tmp_path / "src", tmp_path / "out")
    assert {name.split("/")[0] for name in objects} == {"default"}


def test_private_registry_credentials_reach_the_pods(tmp_path: Path) -> None:
    pod = render_one(tmp_path, image={"repository": "registry.example.com/kwdb",
                                      "pullSecrets": ["regcred", "mirror"]})[
        "StatefulSet/orders"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert "imagePullSecrets" not in render_one(tmp_path / "plain")["StatefulSet/orders"][
        "spec"]["template"]["spec"]


def test_the_reconcilers_decisions_shape_the_running_statefulset() -> None:
    """Mid scale-in, mid rollout, after a certificate renewal: the reconciler hands the renderer
    the replicas, the partition and the certificates' hash, and they land where Kubernetes acts
    on them (a new hash on the pod template rolls the pods)."""
    orders = read_live(cluster("orders", "shop", version="3.2.1", replicas=5))
    live = LiveState(replicas=4, partition=2, certs_hash="sha256:abc")
    (statefulset,) = [obj for obj in build_objects(orders, RenderSettings(live=live))
                      if obj["kind"] == "StatefulSet"]
    assert statefulset["spec"]["replicas"] == 4
    assert statefulset["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                                     "rollingUpdate": {"partition": 2}}
    template = statefulset["spec"]["template"]["metadata"]
    assert template["annotations"] == {"kaiwu.inspur.com/certs-hash": "sha256:abc"}

    (plain,) = [obj for obj in build_objects(orders, RenderSettings())
                if obj["kind"] == "StatefulSet"]
    assert plain["spec"]["replicas"] == 5
    assert plain["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    assert "annotations" not in plain["spec"]["template"]["metadata"]


def test_prometheus_scrapes_an_insecure_cluster_over_plain_http(tmp_path: Path) -> None:
    secure = render_one(tmp_path / "a", monitoring={"serviceMonitor": True})
    endpoint = secure["ServiceMonitor/orders"]["spec"]["endpoints"][0]
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "orders-node-certs", "key": "ca.crt"}},
        "serverName": "orders-public.shop.svc.cluster.local"}

    insecure = render_one(tmp_path / "b", monitoring={"serviceMonitor": True},
                          tls={"enabled": False})
    endpoint = insecure["ServiceMonitor/orders"]["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "http"
    assert "tlsConfig" not in endpoint
