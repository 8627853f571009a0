"""Stories: `kaiwu status` shows what each cluster is doing, read from a real apiserver.

One namespace holds four clusters the in-process reconciler (reconciler_factory) drives into
four states: `ok` Ready with TLS (its node certificate's expiry is read from the Secret),
`crash` Stalled in a crash loop (a simulated kubelet's fault), `lost` mid-failover (its
Kubernetes node powered off, the pod waiting out a long nodeLostTimeout) and `shrink` mid
scale-in (the reconciler stopped while a node id decommissions, as a deploy would stop it).
Each cluster is pinned to its own zone's nodes so one fault touches one cluster only. The
command runs as a user runs it (a child process, the admin kubeconfig), and must show each
state: the conditions' reasons, the operation, the pods with their KaiwuDB node ids, the exit
code (1: not every cluster is Ready; 0 for `ok` alone).

Cost: `kaiwu status -A` over 50 parked clusters (their pods stay Pending) makes four list
requests, never one per cluster or pod; that is what keeps it under a second. The requests are
counted; the seconds are printed (pytest -s), not asserted on a busy machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from reconciler import statuscmd
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube, load_api_client, send
from reconciler.model import Obj
from tests.support.harness import Reconciler, condition, parked, user, wait_for
from tests.support.lifecycle import node_lost_since, report, small_cluster
from tests.world.controlplane import REPO_ROOT, ControlPlane
from tests.world.faults import Faults
from tests.world.simworld import SimWorld


class CountingKube(Kube):
    """The API adapter, noting the plural of every list it makes."""

    def __init__(self, api: k8s.ApiClient, field_manager: str) -> None:
        super().__init__(api, field_manager)
        self.lists: list[str] = []

    def list_objects(self, kind: kk.Kind, namespace: str | None = None,
                     label_selector: str | None = None, **options: Any) -> tuple[list[Obj], str]:
        self.lists.append(kind.plural)
        return super().list_objects(kind, namespace, label_selector, **options)

NODE_GRACE_S = 8.0  # the test control plane's node-monitor-grace-period


def kaiwu_status(plane: ControlPlane, *args: str) -> tuple[int, str, str]:
    """`kaiwu status ARGS` as a user runs it: its own process, the admin kubeconfig."""
    done = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; raise SystemExit(main())",
         "status", "--kubeconfig", str(plane.kubeconfig_path), *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def printed(api: k8s.ApiClient, namespace: str) -> tuple[list[str], dict[str, list[Any]]]:
    """What `kubectl get kwc` prints: the Table the apiserver makes from the CRD's printer
    columns (column names; cells by cluster name)."""
    table = json.loads(send(api, "GET", kk.KAIWU_CLUSTER.path(namespace), headers={
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).data)
    assert table["kind"] == "Table", table
    return ([c["name"] for c in table["columnDefinitions"]],
            {row["cells"][0]: row["cells"] for row in table["rows"]})


def pinned(namespace: str, name: str, zone: str, **spec: Any) -> Obj:
    """A small cluster named `name` on the nodes of one zone (pods may share a node)."""
    obj = small_cluster(namespace, **spec)
    obj["metadata"]["name"] = name
    obj["spec"]["scheduling"] = {"antiAffinity": "preferred",
                                 "nodeSelector": {"topology.kubernetes.io/zone": zone}}
    return obj


def test_status_shows_ready_scale_in_crash_loop_and_failover(
        sim_world: SimWorld, faults: Faults, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str, control_plane: ControlPlane) -> None:
    reconciler = reconciler_factory()
    # The test world's nodes: kw-node-1 and -4 in zone-a, -2 in zone-b, -3 in zone-c.
    clusters = [
        pinned(namespace, "ok", "zone-b", tls={"enabled": True}),
        pinned(namespace, "shrink", "zone-b", replicas=4),
        pinned(namespace, "crash", "zone-c",
               failover={"podNotReadyTimeout": "1s", "maxCrashRestarts": 1}),
        pinned(namespace, "lost", "zone-a", failover={"nodeLostTimeout": "600s"}),
    ]
    started = time.monotonic()
    for obj in clusters:
        user(kube, "kubectl").apply(obj)
    for obj in clusters:
        name = obj["metadata"]["name"]
        wait_for(f"{name} to be Ready", lambda n=name: condition(  # type: ignore[misc]
            reconciler.cluster(n), "Ready").get("status") == "True", 120, 0.2)
    report("apply -> 4 clusters Ready", time.monotonic() - started)
    code, out, err = kaiwu_status(control_plane, "-n", namespace)
    assert (code, err) == (0, ""), out + err

    # crash: the container of crash-2 exits at once, every time; one restart, then Stalled.
    faults.crash_loop(namespace, "crash-2", exit_code=3, message="ERROR: invalid --cache value")
    wait_for("crash to be Stalled", lambda: condition(reconciler.cluster("crash"), "Stalled")
             .get("status") == "True", 60, 0.2)

    # lost: the node of lost-0 powers off; the pod waits out nodeLostTimeout (600 s).
    pod = Kube(kube, "test").get(kk.POD, namespace, "lost-0")
    assert pod is not None
    lost_node = pod["spec"]["nodeName"]
    faults.lose_node(lost_node)
    wait_for("the node to leave Ready", lambda: node_lost_since(kube, lost_node),
             NODE_GRACE_S + 12, 0.2)
    wait_for("lost-0 in status.failures", lambda: "lost-0" in (
        (reconciler.cluster("lost") or {}).get("status") or {}).get("failures", {}), 30, 0.2)

    # shrink: 4 -> 3; the reconciler stops while node 4 decommissions (as a deploy stops it).
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, "shrink",
                                      {"spec": {"replicas": 3}})
    wait_for("shrink-3's decommission to start", lambda: (
        ((reconciler.cluster("shrink") or {}).get("status") or {}).get("operation") or {}
    ).get("phase") == "Decommissioning", 30, 0.02)
    reconciler.stop()

    code, out, err = kaiwu_status(control_plane, "-n", namespace, "-o", "json")
    assert code == 1 and err == "", "not every cluster is Ready"
    shown = {c["name"]: c for c in json.loads(out)["clusters"]}
    assert sorted(shown) == ["crash", "lost", "ok", "shrink"]

    ok = shown["ok"]
    assert ok["ready"] and ok["reason"] == "Ready" and ok["operation"] is None
    assert ok["version"] == ok["specVersion"]
    assert [p["name"] for p in ok["pods"]] == ["ok-0", "ok-1", "ok-2"]
    assert all(p["ready"] and p["liveness"] == "live" and p["node"] == "kw-node-2"
               for p in ok["pods"])
    assert sorted(p["nodeId"] for p in ok["pods"]) == [1, 2, 3]
    assert ok["drift"]["reason"] == "InSync"
    assert ok["certificates"]["secret"] == "ok-node-certs"
    assert ok["certificates"]["days"] > 300, ok["certificates"]
    assert ok["lastActions"], "init and the certificates are recorded"

    crash = shown["crash"]
    assert not crash["ready"] and crash["reason"] == "Stalled"
    stalled = next(c for c in crash["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "CrashLoop"
    assert crash["operation"]["type"] == "Failover"
    assert crash["operation"]["pods"]["crash-2"]["stage"] == "CrashLoop"
    crashing = next(p for p in crash["pods"] if p["name"] == "crash-2")
    assert not crashing["ready"] and crashing["restarts"] >= 1

    lost = shown["lost"]
    assert not lost["ready"]
    assert lost["operation"]["type"] == "Failover"
    finding = lost["operation"]["pods"]["lost-0"]
    assert finding["stage"] == "NodeLost" and finding["node"] == lost_node, finding
    assert next(p for p in lost["pods"] if p["name"] == "lost-0")["node"] == lost_node

    shrink = shown["shrink"]
    assert not shrink["ready"]
    operation = shrink["operation"]
    assert operation["type"] == "ScaleIn" and operation["phase"] == "Decommissioning"
    assert (operation["replicas"], operation["targetReplicas"], operation["pod"]) == (
        4, 3, "shrink-3")
    assert next(p for p in shrink["pods"] if p["name"] == "shrink-3")["nodeId"] == \
        operation["nodeId"]

    # The same, for people: plain text (not a terminal: no colour), one block per cluster.
    code, text, _ = kaiwu_status(control_plane, "-n", namespace)
    print("\n" + text)
    assert code == 1 and "\033" not in text
    assert f"{namespace}/ok  Ready  nodes 3/3" in text
    assert "operation: ScaleIn 4 -> 3: Decommissioning node" in text
    assert "operation: Failover crash-2: CrashLoop" in text
    assert "operation: Failover lost-0: NodeLost" in text
    assert "certificates: node certificate (ok-node-certs) expires" in text
    # `kubectl get kwc`: Ready and Reason from the Ready condition, ready and desired nodes.
    columns, rows = printed(kube, namespace)
    assert columns == ["Name", "Ready", "Reason", "Nodes", "Desired", "Version", "Age"]
    version = ok["version"]
    assert rows["ok"][:6] == ["ok", "True", "Ready", 3, 3, version]
    assert rows["crash"][1:3] == ["False", "Stalled"]
    assert rows["shrink"][1:5] == ["False", "ScalingIn", 4, 3]
    assert rows["lost"][1] == "False"
    print("\n".join("  ".join(str(cell) for cell in row) for row in [columns, *rows.values()]))

    # One cluster by name: exit 0 when that one is Ready.
    code, text, _ = kaiwu_status(control_plane, "ok", "-n", namespace)
    assert code == 0 and text.startswith(f"{namespace}/ok  Ready")
    code, _, err = kaiwu_status(control_plane, "nosuch", "-n", namespace)
    assert code == 2 and err == (f"kaiwu status: KaiwuCluster {namespace}/nosuch not found "
                                 "(check the name, or the namespace with -n)\n")


def test_status_over_50_parked_clusters_costs_six_lists_whatever_their_number(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient, namespace: str,
        control_plane: ControlPlane) -> None:
    reconciler = reconciler_factory()
    names = [f"c{i:02d}" for i in range(50)]
    for name in names:
        obj = parked(small_cluster(namespace))
        obj["metadata"]["name"] = name
        user(kube, "kubectl").apply(obj)
    wait_for("50 clusters with status and pods", lambda: all(
        (reconciler.cluster(n) or {}).get("status", {}).get("inventory") for n in names)
        and len(Kube(kube, "test").list_objects(kk.POD, namespace)[0]) == 150, 180, 0.5)
    # The command runs in a process of its own; the reconciler here shares this one (and its
    # GIL), so it stops first.
    reconciler.stop()

    kube_ = CountingKube(load_api_client(str(control_plane.kubeconfig_path)), "test")
    statuscmd.gather(kube_, namespace, "c00")  # connect once: a process does at start
    kube_.lists.clear()
    started = time.monotonic()
    reports = statuscmd.gather(kube_, None, None)
    # What keeps it fast, counted (the seconds are printed; bench/ measures): one list per
    # kind, whatever the number of clusters and pods, and no GET per cluster.
    assert kube_.lists == ["kaiwuclusters", "statefulsets", "pods", "secrets", "kaiwubackups",
                           "kaiwubackupschedules"]
    gathered = time.monotonic() - started
    text = statuscmd.render(reports, "table", colour=False)
    in_process = time.monotonic() - started
    mine = [r for r in reports if r["namespace"] == namespace]
    assert len(mine) == 50 and all(len(r["pods"]) == 3 for r in mine)
    assert all(p["state"] == "Pending" and not p["ready"] for r in mine for p in r["pods"])

    started = time.monotonic()
    code, out, err = kaiwu_status(control_plane, "-A")
    whole = time.monotonic() - started
    assert code == 1 and err == "" and out.count(f"{namespace}/c") == 50
    report(f"kaiwu status -A: gather + format, {len(reports)} clusters, "
           f"{sum(len(r['pods']) for r in reports)} pods", in_process)
    report("  of which the four lists", gathered)
    report("kaiwu status -A as a process (Python start-up included)", whole)
    assert len(text.splitlines()) > 50 * 5
