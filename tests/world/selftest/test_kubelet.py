"""Simulated nodes behave like real ones to the real control plane, the kwbase CLI and a user.

Stories: a three-replica KaiwuDB StatefulSet is spread by the real scheduler over three simulated
nodes, each pod's volume provisioned on its node and bound by the real PV controller; `kwbase
init` and `kwbase node status` run through the real apiserver's exec; a node that stops
heartbeating is judged by the real node lifecycle controller, which leaves its pod behind; a
container that cannot start crash-loops with a growing back-off; a pod can be made unready and
recover; a lost disk stops its pod for good; exec of a binary the image lacks fails as in a real
container. Timings are printed (pytest -s) for docs/testworld.md.
"""

from __future__ import annotations

import base64
import itertools
import json
import time

import pytest
import websocket
from kubernetes import client as k8s

from reconciler.kube.podexec import ExecNotRun
from tests.support.pods import (
    Obj,
    as_json,
    container,
    init_cluster,
    is_ready,
    kaiwu_statefulset,
    kubectl_exec,
    kwbase_status,
    list_pods,
    read_pod,
    ready_pods,
    replacement,
    running_pods,
    start_cluster,
)
from tests.support.waiting import eventually
from tests.world import kube_versions
from tests.world.controlplane import ControlPlane
from tests.world.faults import Faults
from tests.world.kwdb import DRAIN_BEGUN, DRAIN_DONE
from tests.world.simworld import SimWorld

# The real control plane's node-monitor-grace-period (8 s) plus its monitor period and slack.
NODE_GRACE_S = 8.0


def report(what: str, seconds: float) -> None:
    print(f"[timing] {what}: {seconds:.2f} s")


# ---- stories ----------------------------------------------------------------------------------


def test_three_replicas_land_ready_on_three_nodes_with_node_pinned_volumes(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(kube)
    applied = time.monotonic()
    start_cluster(kube, namespace)

    pods = eventually(lambda: running_pods(core, namespace, 3), 60, "three running kwbase pods")
    report("StatefulSet applied -> 3 pods Running", time.monotonic() - applied)
    # Not ready before `kwbase init`: /health?ready=1 fails on an uninitialised node.
    assert not any(is_ready(p) for p in pods)

    started = time.monotonic()
    init_cluster(core, namespace)
    report("kwbase init through the apiserver's exec", time.monotonic() - started)
    pods = eventually(lambda: ready_pods(core, namespace, 3), 60, "three ready pods")
    report("StatefulSet applied -> 3 pods Ready (incl. init)", time.monotonic() - applied)

    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert len(set(nodes.values())) == 3, nodes
    assert set(nodes.values()) <= set(sim_world.kubelet.node_names)
    for pod in pods:
        name, node_name = pod["metadata"]["name"], pod["spec"]["nodeName"]
        assert pod["status"]["hostIP"] == sim_world.kubelet.node(node_name).address
        assert pod["status"]["podIP"]
        claim = as_json(core.read_namespaced_persistent_volume_claim, f"data-{name}", namespace)
        assert claim["status"]["phase"] == "Bound"
        volume = as_json(core.read_persistent_volume, claim["spec"]["volumeName"])
        assert volume["spec"]["storageClassName"] == sim_world.storage.settings.class_name
        assert volume["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
        term = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
        assert term["matchExpressions"] == [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}
        ]

    started = time.monotonic()
    rows = kwbase_status(core, namespace, "kdb-1")
    report("exec round trip (kwbase node status)", time.monotonic() - started)
    assert len(rows) == 3
    assert all(r["is_live"] == "true" and r["is_available"] == "true" for r in rows), rows


def test_a_node_that_stops_heartbeating_is_judged_by_the_real_controller(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str, faults: Faults,
    cluster: list[Obj],
) -> None:
    core = k8s.CoreV1Api(kube)
    victim = cluster[2]
    name, node_name = victim["metadata"]["name"], victim["spec"]["nodeName"]

    lost = time.monotonic()
    faults.lose_node(node_name)

    def node_ready_status() -> str | None:
        node = as_json(core.read_node, node_name)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        return None if ready["status"] == "True" else str(ready["status"])

    assert eventually(node_ready_status, NODE_GRACE_S + 12, "node to leave Ready") == "Unknown"
    report("node lost -> NotReady/Unknown", time.monotonic() - lost)

    # The controller marks the pod not ready and evicts it, but nobody can finish the job: no
    # kubelet answers, so it stays Terminating.
    eventually(lambda: None if is_ready(read_pod(core, namespace, name)) else True,
               15, "the lost node's pod to be marked not ready")
    evicted = eventually(
        lambda: pod if (pod := read_pod(core, namespace, name))["metadata"].get(
            "deletionTimestamp") else None,
        30, "the taint manager to evict the pod")
    report("node lost -> pod evicted (Terminating)", time.monotonic() - lost)
    assert evicted["metadata"]["uid"] == victim["metadata"]["uid"]
    time.sleep(3)
    assert read_pod(core, namespace, name)["metadata"]["uid"] == victim["metadata"]["uid"]

    # Exec cannot reach a dead node's kubelet: 1.20 refuses the request; 1.29 and later
    # upgrade the client's websocket first and say so in the exec's status.
    with pytest.raises(k8s.ApiException if kube_versions.selected() == "1.20" else ExecNotRun):
        kubectl_exec(core, namespace, name, ["kwbase", "version"])

    # The rest of the cluster sees the node's process gone.
    def not_live() -> list[dict[str, str]] | None:
        rows = kwbase_status(core, namespace, "kdb-0")
        return rows if any(r["is_live"] == "false" for r in rows) else None

    rows = eventually(not_live, 30, "KaiwuDB to see the node not live")
    assert sum(r["is_live"] == "true" for r in rows) == 2

    # The machine comes back: its kubelet finishes the eviction, the StatefulSet makes the pod
    # again, and it lands on the same node because its volume lives there.
    faults.restore_node(node_name)
    back = eventually(lambda: replacement(core, namespace, victim), 60,
                      "the pod to come back Ready")
    assert back["spec"]["nodeName"] == node_name


def test_a_partitioned_node_comes_back_with_its_pod_still_running(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str, faults: Faults,
    cluster: list[Obj],
) -> None:
    core = k8s.CoreV1Api(kube)
    victim = cluster[0]
    name, node_name = victim["metadata"]["name"], victim["spec"]["nodeName"]
    faults.lose_node(node_name, partition=True)

    def node_ready() -> str:
        node = as_json(core.read_node, node_name)
        return str(next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"])

    eventually(lambda: True if node_ready() == "Unknown" else None, NODE_GRACE_S + 12,
               "the partitioned node to turn Unknown")
    # Its peers cannot reach the process, so KaiwuDB counts it not live either.
    eventually(lambda: True if sum(r["is_live"] == "true" for r in kwbase_status(
        core, namespace, "kdb-1")) == 2 else None, 20, "KaiwuDB to lose sight of the node")

    # Healed before the pod's 10 s unreachable toleration runs out: nothing was evicted, and
    # the container never stopped.
    faults.restore_node(node_name)
    eventually(lambda: True if node_ready() == "True" else None, 15, "the node to be Ready")
    pod = eventually(lambda: p if is_ready(p := read_pod(core, namespace, name)) else None, 30,
                     "the pod to be Ready again")
    assert pod["metadata"]["uid"] == victim["metadata"]["uid"]
    assert container(pod)["restartCount"] == 0


def test_a_node_back_from_a_power_cut_restarts_its_containers(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str, faults: Faults,
    cluster: list[Obj],
) -> None:
    core = k8s.CoreV1Api(kube)
    victim = cluster[1]
    name, node_name = victim["metadata"]["name"], victim["spec"]["nodeName"]
    faults.lose_node(node_name)
    eventually(lambda: None if is_ready(read_pod(core, namespace, name)) else True,
               NODE_GRACE_S + 12, "the controller to mark the pod not ready")
    faults.restore_node(node_name)
    pod = eventually(lambda: p if is_ready(p := read_pod(core, namespace, name)) else None, 30,
                     "the pod to be Ready again")
    assert pod["metadata"]["uid"] == victim["metadata"]["uid"], "restored before eviction"
    status = container(pod)
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["reason"] == "Unknown"
    assert status["lastState"]["terminated"]["exitCode"] == 255


def test_a_container_that_cannot_start_crash_loops_with_growing_back_off(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(kube)
    start_cluster(kube, namespace, replicas=1, extra_args=["--no-such-flag=1"])

    # Watch restartCount grow and note when each restart shows up.
    restarts: dict[int, float] = {}
    looping: Obj = {}
    deadline = time.monotonic() + 60
    while len([n for n in restarts if n >= 2]) < 3 and time.monotonic() < deadline:
        status = container(list_pods(core, namespace)[0]) if list_pods(core, namespace) else {}
        if "restartCount" in status:
            restarts.setdefault(int(status["restartCount"]), time.monotonic())
        if status.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff":
            looping = status
        time.sleep(0.05)
    assert looping, "never saw CrashLoopBackOff"
    counts = sorted(n for n in restarts if n >= 2)
    assert len(counts) >= 3, restarts
    terminated = looping["lastState"]["terminated"]
    assert terminated["exitCode"] == 1
    assert "unknown flag: --no-such-flag" in terminated["message"]
    assert "back-off" in looping["state"]["waiting"]["message"]

    # The kubelet's back-off doubles: each wait is longer than the one before.
    gaps = [restarts[b] - restarts[a] for a, b in itertools.pairwise(counts)]
    assert gaps[1] > gaps[0] * 1.3, gaps
    pod = list_pods(core, namespace)[0]
    assert pod["status"]["phase"] == "Running" and not is_ready(pod)


def test_an_injected_crash_loop_and_unreadiness_come_and_go(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str, faults: Faults,
    cluster: list[Obj],
) -> None:
    core = k8s.CoreV1Api(kube)
    faults.set_unready(namespace, "kdb-1")
    eventually(lambda: None if is_ready(read_pod(core, namespace, "kdb-1")) else True,
               15, "kdb-1 to turn unready")
    assert "running" in container(read_pod(core, namespace, "kdb-1"))["state"], "not stopped"
    faults.set_unready(namespace, "kdb-1", False)
    eventually(lambda: True if is_ready(read_pod(core, namespace, "kdb-1")) else None,
               15, "kdb-1 to be ready again")

    faults.crash_loop(namespace, "kdb-2", exit_code=139, message="segmentation violation")

    def crashing() -> Obj | None:
        status = container(read_pod(core, namespace, "kdb-2"))
        waiting = status.get("state", {}).get("waiting", {})
        return status if waiting.get("reason") == "CrashLoopBackOff" else None

    status = eventually(crashing, 30, "kdb-2 in CrashLoopBackOff")
    assert status["lastState"]["terminated"]["exitCode"] == 139
    assert status["lastState"]["terminated"]["message"] == "segmentation violation"
    faults.stop_crash_loop(namespace, "kdb-2")
    eventually(lambda: True if is_ready(read_pod(core, namespace, "kdb-2")) else None,
               30, "kdb-2 to recover")


def test_a_lost_volume_stops_its_pod_for_good(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str, faults: Faults,
    cluster: list[Obj],
) -> None:
    core = k8s.CoreV1Api(kube)
    faults.lose_volume(namespace, "data-kdb-1")

    def stuck() -> Obj | None:
        pod = read_pod(core, namespace, "kdb-1")
        waiting = container(pod).get("state", {}).get("waiting", {})
        return pod if waiting.get("reason") == "ContainerCreating" else None

    pod = eventually(stuck, 15, "kdb-1's container to wait for its volume")
    assert not is_ready(pod)
    events = as_json(core.list_namespaced_event, namespace,
                     field_selector="involvedObject.name=kdb-1,reason=FailedMount")["items"]
    assert events and "does not exist" in events[0]["message"]
    # KaiwuDB notices once the node's liveness record expires (9 s in kwbase v20.1).
    eventually(lambda: True if sum(r["is_live"] == "true" for r in kwbase_status(
        core, namespace, "kdb-0")) == 2 else None, 20, "KaiwuDB to see the store's node die")
    time.sleep(2)
    assert stuck() is not None, "a lost disk does not come back"


def test_exec_of_what_the_image_lacks_fails_as_in_a_real_container(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str, cluster: list[Obj]
) -> None:
    core = k8s.CoreV1Api(kube)
    missing = kubectl_exec(core, namespace, "kdb-0", ["psql", "-c", "select 1"])
    assert missing.exit_code == 126
    assert 'exec: "psql": executable file not found in $PATH' in missing.stdout
    # The simulated KaiwuDB refuses shells: callers must run kwbase with its arguments.
    in_shell = kubectl_exec(core, namespace, "kdb-0", ["sh", "-c", "kwbase node status"])
    assert in_shell.exit_code not in (0, None)
    assert kubectl_exec(core, namespace, "kdb-0", ["hostname"]).stdout == "kdb-0\n"
    failing = kubectl_exec(core, namespace, "kdb-0", ["kwbase", "node", "status", "--insecure",
                                                      "--host=nowhere:26257"])
    assert failing.exit_code == 1 and "ERROR" in failing.stderr


def test_logs_and_every_exec_subprotocol_reach_the_kubelet_through_the_apiserver(
    sim_world: SimWorld, control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
    cluster: list[Obj],
) -> None:
    core = k8s.CoreV1Api(kube)
    log = core.read_namespaced_pod_log("kdb-0", namespace, container="kwbase")
    assert "nodeID:" in log
    assert core.read_namespaced_pod_log("kdb-0", namespace, container="kwbase",
                                        tail_lines=1) == log.splitlines(keepends=True)[-1]

    # Older clients and browsers use the other channel protocols; the kubelet answers each in
    # its own framing, and only v4 ends with a Status.
    url = (control_plane.server.replace("https://", "wss://")
           + f"/api/v1/namespaces/{namespace}/pods/kdb-0/exec"
           + "?command=kwbase&command=version&stdout=1&stderr=1")
    for protocol in ("v4.base64.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"):
        ws = websocket.create_connection(
            url, header=[f"Authorization: Bearer {control_plane.admin_token}"],
            subprotocols=[protocol], sslopt={"ca_certs": str(control_plane.ca_path)})
        frames: list[bytes] = []
        while True:
            opcode, data = ws.recv_data()
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            frames.append(data)
        ws.close()
        assert ws.getsubprotocol() == protocol
        if "base64" in protocol:
            channels = [(int(chr(f[0])), base64.b64decode(f[1:])) for f in frames]
        else:
            channels = [(f[0], f[1:]) for f in frames]
        assert channels[0] == (1, b""), "the hello on stdout comes first"
        stdout = b"".join(d for ch, d in channels if ch == 1).decode()
        assert "KaiwuDB Version" in stdout
        status = [json.loads(d) for ch, d in channels if ch == 3]
        assert status == ([{"metadata": {}, "status": "Success"}]
                          if protocol.startswith("v4.") else [])


def test_deleting_a_pod_honours_the_grace_period_and_the_store_comes_back(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str, cluster: list[Obj]
) -> None:
    core = k8s.CoreV1Api(kube)
    before = {r["address"]: r["id"] for r in kwbase_status(core, namespace, "kdb-0")}
    victim = cluster[1]
    deleted = time.monotonic()
    core.delete_namespaced_pod(victim["metadata"]["name"], namespace)
    back = eventually(lambda: replacement(core, namespace, victim), 60,
                      "the StatefulSet's replacement pod to be Ready")
    report("pod deleted -> replacement Ready", time.monotonic() - deleted)
    assert back["spec"]["nodeName"] == victim["spec"]["nodeName"], "its volume pins it there"
    after = {r["address"]: r["id"] for r in kwbase_status(core, namespace, "kdb-0")}
    assert after == before, "node ids belong to stores, and the store survived"


# ---- the kubelet checks the probes and grace periods it is given -------------------------------
# Probe periods, initial delays and grace periods run on KubeletSettings.time_scale (0.1: a
# 10 s period lasts 1 real second); thresholds are counts and stay exact.


def kwbase_pod(name: str, namespace: str, *, grace_s: int = 60, **probes: Obj) -> Obj:
    """A bare pod running a single-node KaiwuDB (ready without `kwbase init`) with the given
    probes (readinessProbe=..., livenessProbe=..., startupProbe=...); the simulated KaiwuDB
    keys it by the pod's name."""
    statefulset = kaiwu_statefulset(name, namespace, replicas=1)
    spec = statefulset["spec"]["template"]["spec"]
    kwbase = spec["containers"][0]
    kwbase["command"] = ["start-single-node" if word == "start" else word
                         for word in kwbase["command"] if not word.startswith("--join=")]
    for kind in ("readinessProbe", "livenessProbe"):
        kwbase.pop(kind)
    kwbase.update(probes)
    kwbase["volumeMounts"] = []
    spec.pop("affinity")
    spec["terminationGracePeriodSeconds"] = grace_s
    # kwbase needs no API token; without this the pod may come before the namespace's token.
    spec["automountServiceAccountToken"] = False
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def http_probe(path: str = "/health?ready=1", port: int | str = "http", scheme: str = "HTTP",
               **timings: int) -> Obj:
    return {"httpGet": {"path": path, "port": port, "scheme": scheme},
            "periodSeconds": 2, **timings}


def create_pods(core: k8s.CoreV1Api, namespace: str, *pods: Obj) -> None:
    for pod in pods:
        body = k8s.V1Pod.from_dict(pod)
        assert body is not None
        core.create_namespaced_pod(namespace, body)


def wait_ready(core: k8s.CoreV1Api, namespace: str, name: str) -> Obj:
    return eventually(lambda: p if is_ready(p := read_pod(core, namespace, name)) else None, 30,
                      f"{name} to be Ready")


def events_of(core: k8s.CoreV1Api, namespace: str, pod: str) -> list[str]:
    """The pod's events as `reason: message`, in the order they were recorded."""
    items = as_json(core.list_namespaced_event, namespace,
                    field_selector=f"involvedObject.name={pod}")["items"]
    items.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [f"{e['reason']}: {e['message']}" for e in items for _ in range(e.get("count") or 1)]


def test_a_readiness_probe_at_the_wrong_port_path_or_scheme_never_becomes_ready(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str
) -> None:
    """Only the probe kwbase can answer (its HTTP port, by number or by name; /health?ready=1;
    plain HTTP on an insecure node) makes the pod Ready."""
    core = k8s.CoreV1Api(kube)
    right = {"by-name": http_probe(), "by-number": http_probe(port=8080)}
    wrong = {
        "wrong-port": http_probe(port=26257),
        "no-such-name": http_probe(port="metrics"),
        "wrong-path": http_probe(path="/healthz"),
        "tls-to-insecure": http_probe(scheme="HTTPS"),
    }
    create_pods(core, namespace, *(kwbase_pod(name, namespace, readinessProbe=probe)
                                   for name, probe in {**right, **wrong}.items()))
    for name in right:
        wait_ready(core, namespace, name)

    def failed_often(name: str) -> bool:
        return events_of(core, namespace, name).count(
            "Unhealthy: Readiness probe failed: HTTP probe failed") >= 4

    while not all(failed_often(name) for name in wrong):
        pods = [read_pod(core, namespace, name) for name in wrong]
        assert not any(is_ready(p) for p in pods), [p["metadata"]["name"] for p in pods]
        time.sleep(0.2)
    for name in wrong:
        pod = read_pod(core, namespace, name)
        assert not is_ready(pod) and "running" in container(pod)["state"], name
        assert container(pod)["restartCount"] == 0, "a readiness probe never restarts"


def test_a_liveness_probe_restarts_after_failure_threshold_failures_not_before(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str
) -> None:
    """Four failed liveness probes in a row, then the kill (SIGTERM; kwbase drains within the
    grace period and exits 0), then the restart; the worker holds until the new container."""
    core = k8s.CoreV1Api(kube)
    create_pods(core, namespace, kwbase_pod(
        "lively", namespace, readinessProbe=http_probe(),
        livenessProbe=http_probe(path="/healthz", failureThreshold=4)))
    pod = eventually(lambda: p if container(p := read_pod(core, namespace, "lively")).get(
        "restartCount") else None, 30, "the liveness probe to restart the container")
    events = events_of(core, namespace, "lively")
    killing = events.index("Killing: Container kwbase failed liveness probe, will be restarted")
    failures = [e for e in events[:killing] if e.startswith("Unhealthy: Liveness probe failed")]
    assert len(failures) == 4, events
    assert container(pod)["lastState"]["terminated"]["exitCode"] == 0, "a clean drain"


def test_a_startup_probe_holds_the_other_probes_back_and_restarts_when_it_fails(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(kube)
    create_pods(core, namespace, kwbase_pod(
        "slow", namespace, readinessProbe=http_probe(path="/healthz"),
        startupProbe=http_probe(path="/healthz", failureThreshold=2)))
    eventually(lambda: True if container(read_pod(core, namespace, "slow")).get(
        "restartCount") else None, 30, "the startup probe to restart the container")
    events = events_of(core, namespace, "slow")
    killing = events.index("Killing: Container kwbase failed startup probe, will be restarted")
    assert [e for e in events[:killing] if e.startswith("Unhealthy")] == [
        "Unhealthy: Startup probe failed: HTTP probe failed"] * 2, events
    assert not any("Readiness" in e for e in events), "readiness waits for startup"
    assert not is_ready(read_pod(core, namespace, "slow"))


def test_a_grace_period_shorter_than_the_drain_kills_kwbase_mid_drain(
    sim_world: SimWorld, kube: k8s.ApiClient, namespace: str
) -> None:
    """Deleting a pod sends SIGTERM: kwbase drains (KwdbSettings.drain_s, 2 s) and exits, then
    the pod is gone. A drain longer than the grace period is cut short by SIGKILL at its end:
    the drain never completes and the node is never marked draining, so its leases stay
    behind until its liveness expires."""
    core = k8s.CoreV1Api(kube)
    create_pods(core, namespace, kwbase_pod("clean", namespace, grace_s=30),
                kwbase_pod("cut", namespace, grace_s=30))
    sim_world.kwdb.tune((namespace, "cut"), sim_world.clock.now(), drain_s=50.0)
    for name in ("clean", "cut"):
        wait_ready(core, namespace, name)

    def gone(name: str) -> float:
        deleted = time.monotonic()
        core.delete_namespaced_pod(name, namespace)
        eventually(lambda: True if name not in {p["metadata"]["name"] for p in list_pods(
            core, namespace)} else None, 30, f"{name} to be gone")
        return time.monotonic() - deleted

    scale = sim_world.settings.kubelet.time_scale
    took = {name: gone(name) for name in ("clean", "cut")}
    report("pod deleted -> gone, kwbase drained", took["clean"])
    report("pod deleted -> gone, killed at the end of a 30 s grace period", took["cut"])
    assert took["cut"] >= 30 * scale, took
    now = sim_world.clock.now()
    clean, cut = (sim_world.kwdb.logs((namespace, n), n) for n in ("clean", "cut"))
    assert DRAIN_BEGUN in clean and DRAIN_DONE in clean
    assert DRAIN_BEGUN in cut and DRAIN_DONE not in cut
    assert sim_world.kwdb.nodes((namespace, "clean"), now)[0].draining
    assert not sim_world.kwdb.nodes((namespace, "cut"), now)[0].draining
