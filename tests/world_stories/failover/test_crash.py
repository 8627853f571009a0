"""Stories: failover that cannot forget. The reconciler dies mid-failover, or an administrator
steps in first, and a new reconciler carries on from what the cluster shows.

The reconciler runs as in production: `python -m reconciler` in its own process, with leader
election on a Lease, under its own ServiceAccount (the audit log tells its requests apart). Its
pods tolerate a lost node for Kubernetes' default 300 s, so the taint manager evicts nothing
and the reconciler alone acts. A crash point (reconciler.failpoints) makes the first process
SIGKILL itself right after one failover write and before the pass writes status; a second
process then starts with no memory at all. Each story ends with the cluster Ready: a new store
for the lost pod, the lost node id decommissioned, never two pods down, no other pod or claim
touched, no write repeated, no live KaiwuDB node decommissioned, and no Lease request turned into
something else by an exec. Timings are printed (pytest -s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.harness import (
    REPO,
    condition,
    reconciler_identity,
    user,
    wait_for,
)
from tests.support.lifecycle import (
    HEALTH_AFTER_LOSS_S,
    NAME,
    fully_replicated,
    live_nodes,
    node_lost_since,
    pod_ready,
    report,
    small_cluster,
)
from tests.world.controlplane import WRITE_VERBS, ControlPlane, service_account_token
from tests.world.faults import Faults
from tests.world.simworld import SimWorld

TIMEOUT_S = 5.0
NODE_GRACE_S = 8.0  # the test control plane's node-monitor-grace-period
# Kubernetes' defaults, which the DefaultTolerationSeconds admission plugin would add: with
# them nothing but the reconciler moves a pod off a lost node within a story.
DEFAULT_TOLERATIONS = [
    {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300} for taint in ("not-ready", "unreachable")]


@dataclass
class ReconcilerProcess:
    """One `python -m reconciler` process and its log."""

    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


class Reconcilers:
    """Starts reconciler processes for one namespace, all as its one ServiceAccount."""

    def __init__(self, plane: ControlPlane, admin: k8s.ApiClient, namespace: str,
                 tmp: Path) -> None:
        self.plane = plane
        self.namespace = namespace
        self.tmp = tmp
        _, self.user = reconciler_identity(plane, admin, namespace)
        token = service_account_token(k8s.CoreV1Api(admin), namespace, "kaiwu-reconciler")
        self.kubeconfig = tmp / "reconciler.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(plane.kubeconfig(token=token,
                                                                   user="reconciler")))
        self.started: list[ReconcilerProcess] = []

    def start(self, crash_at: str = "") -> ReconcilerProcess:
        log = self.tmp / f"reconciler-{len(self.started)}.log"
        env = {**os.environ, "KAIWU_FAILPOINTS": crash_at}
        argv = [sys.executable, "-m", "reconciler", "--kubeconfig", str(self.kubeconfig),
                "--watch-namespace", self.namespace, "--lease-namespace", self.namespace,
                # A successor takes over within seconds; the leader has 4 s (each Lease
                # request 2 s) to renew on a busy two-core CI machine.
                "--lease-duration-s", "6", "--renew-deadline-s", "4", "--retry-period-s",
                "0.5", "--http-address", "127.0.0.1:0", "--log-format", "text",
                "--identity", f"reconciler-{len(self.started)}"]
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out,
                                     stderr=subprocess.STDOUT)
        process = ReconcilerProcess(popen, log)
        self.started.append(process)
        return process

    def writes(self) -> list[dict[str, Any]]:
        return self.plane.audit_events(user=self.user, verbs=WRITE_VERBS)

    def cluster(self) -> Obj | None:
        return Kube(self.plane.api_client(), "test").get(kk.KAIWU_CLUSTER, self.namespace,
                                                         NAME)

    def stop(self) -> None:
        for process in self.started:
            process.stop()


@pytest.fixture
def reconcilers(control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
                tmp_path: Path) -> Iterator[Reconcilers]:
    started = Reconcilers(control_plane, kube, namespace, tmp_path)
    yield started
    started.stop()
    try:
        k8s.RbacAuthorizationV1Api(kube).delete_cluster_role_binding(
            f"kaiwu-test-node-reader-{namespace}")
    except k8s.ApiException as error:
        if error.status != 404:
            raise


def get(kube: k8s.ApiClient, kind: kk.Kind, namespace: str, name: str) -> Obj | None:
    return Kube(kube, "test").get(kind, namespace, name)


def ready_cluster(reconcilers: Reconcilers) -> Obj | None:
    found = reconcilers.cluster()
    status = (found or {}).get("status") or {}
    if condition(found, "Ready").get("status") == "True" and "failures" not in status:
        return found
    return None


def crashed(process: ReconcilerProcess, point: str, timeout_s: float) -> None:
    """Wait for the process to have killed itself at the crash point."""
    wait_for(f"the reconciler to die at {point}", lambda: process.popen.poll() is not None,
             timeout_s, 0.05)
    assert process.popen.returncode == -signal.SIGKILL, process.text()[-3000:]
    assert f"failpoint={point}" in process.text()


@pytest.mark.parametrize(("crash_at", "admin_deletes_pod"), [
    ("failover.pod-force-deleted", False),
    ("failover.claim-deleted", True),
    ("failover.dead-node-decommissioned", False),
    ("", True),
])
def test_a_lost_node_is_replaced_whoever_deleted_the_pod_and_whenever_the_reconciler_died(
        crash_at: str, admin_deletes_pod: bool, sim_world: SimWorld, faults: Faults,
        reconcilers: Reconcilers, kube: k8s.ApiClient, namespace: str) -> None:
    spec = small_cluster(namespace, failover={"nodeLostTimeout": f"{TIMEOUT_S:g}s",
                                              "replaceLostVolumes": True})
    spec["spec"]["scheduling"]["tolerations"] = DEFAULT_TOLERATIONS
    first = reconcilers.start(crash_at)
    started = time.monotonic()
    user(kube, "kubectl").apply(spec)
    obj = wait_for("the cluster to be Ready", lambda: ready_cluster(reconcilers), 90, 0.2)
    report("apply -> Ready (3 nodes, reconciler in its own process)",
           time.monotonic() - started)
    before = live_nodes(obj)
    victim, others = f"{NAME}-1", [f"{NAME}-0", f"{NAME}-2"]
    old = get(kube, kk.POD, namespace, victim)
    assert old is not None
    lost_node = old["spec"]["nodeName"]
    uids = {name: (get(kube, kk.POD, namespace, name) or {})["metadata"]["uid"]
            for name in others}
    claims = {name: (get(kube, kk.PVC, namespace, f"data-{name}") or {})["metadata"]["uid"]
              for name in others}
    victim_claim = (get(kube, kk.PVC, namespace, f"data-{victim}") or {})["metadata"]["uid"]

    fully_replicated(sim_world, namespace)
    lost_at = time.monotonic()
    faults.lose_node(lost_node)
    wait_for("the node to leave Ready", lambda: node_lost_since(kube, lost_node),
             NODE_GRACE_S + 12, 0.1)
    # Until the reconciler has seen the loss, status still says Ready from before.
    wait_for("the reconciler to report the lost node", lambda: condition(
        reconcilers.cluster(), "Ready").get("status") == "False", 20, 0.1)
    if admin_deletes_pod:
        # The StatefulSet runbook: force-delete the pod on the dead node, before the
        # reconciler's timeout. Its successor is Pending for good: its volume is on that node.
        k8s.CoreV1Api(kube).delete_namespaced_pod(victim, namespace, grace_period_seconds=0,
                                                  body=k8s.V1DeleteOptions(
                                                      grace_period_seconds=0))
    worst_ready_others = 2

    def watch_others() -> None:
        nonlocal worst_ready_others
        worst_ready_others = min(worst_ready_others, sum(
            pod_ready(get(kube, kk.POD, namespace, name)) for name in others))

    if crash_at:
        def died() -> bool:
            watch_others()
            return first.popen.poll() is not None
        wait_for(f"the reconciler to die at {crash_at}", died,
                 TIMEOUT_S + 60 + HEALTH_AFTER_LOSS_S, 0.1)
        crashed(first, crash_at, 1)
        report(f"node lost -> reconciler killed at {crash_at}", time.monotonic() - lost_at)
        # It died before its status write: status does not know what it just did.
        found = reconcilers.cluster() or {}
        done = {a["action"] for a in (found.get("status") or {}).get("lastActions") or ()}
        step = {"failover.pod-force-deleted": "PodForceDeleted",
                "failover.claim-deleted": "VolumeReplaced",
                "failover.dead-node-decommissioned": "DeadNodeDecommissioned"}[crash_at]
        assert step not in done, done
        reconcilers.start()  # a new leader, knowing nothing but what the cluster shows

    def settled() -> Obj | None:
        watch_others()
        return ready_cluster(reconcilers)
    obj = wait_for("the cluster to be Ready again", settled, TIMEOUT_S + 90, 0.2)
    report("node lost -> cluster Ready again, new store", time.monotonic() - lost_at)

    after = live_nodes(obj)
    assert {name: after[name] for name in others} == {name: before[name] for name in others}
    assert after[victim] not in before.values(), "a fresh store is a new KaiwuDB node"
    new = get(kube, kk.POD, namespace, victim)
    assert new is not None and new["spec"]["nodeName"] != lost_node
    assert worst_ready_others == 2, "never two pods down"
    for name in others:
        assert (get(kube, kk.POD, namespace, name) or {})["metadata"]["uid"] == uids[name]
        assert (get(kube, kk.PVC, namespace, f"data-{name}") or {})["metadata"]["uid"] == \
            claims[name]
    new_claim = get(kube, kk.PVC, namespace, f"data-{victim}")
    assert new_claim is not None and new_claim["metadata"]["uid"] != victim_claim
    # No write repeated: every delete of the reconciler found its object (uid preconditions
    # make a repeat fail), one claim was given up, the pod at most twice (on the lost node,
    # then once more if the StatefulSet recreated it against the terminating claim).
    deletes = [w for w in reconcilers.writes() if w["verb"] == "delete"]
    assert all(w["responseStatus"]["code"] < 300 for w in deletes), [
        (w["requestURI"], w["responseStatus"]) for w in deletes]
    targets = [(w["objectRef"]["resource"], w["objectRef"]["name"]) for w in deletes]
    assert set(targets) <= {("pods", victim), ("persistentvolumeclaims", f"data-{victim}")}
    assert targets.count(("persistentvolumeclaims", f"data-{victim}")) == 1
    assert targets.count(("pods", victim)) <= (1 if admin_deletes_pod else 2), targets
    # KaiwuDB: the lost store's id is decommissioned, no live node is.
    views = sim_world.kwdb.nodes((namespace, NAME), sim_world.clock.now())
    lost_id = before[victim]
    assert [v.node_id for v in views if v.decommissioning] == [lost_id]
    assert not any(v.is_live for v in views if v.node_id == lost_id)
    for process in reconcilers.started:
        assert "lease request failed" not in process.text(), process.text()[-3000:]


def test_a_crash_loop_restart_counted_before_a_crash_is_not_made_twice(
        sim_world: SimWorld, faults: Faults, reconcilers: Reconcilers, kube: k8s.ApiClient,
        namespace: str) -> None:
    spec = small_cluster(namespace, failover={"podNotReadyTimeout": "1s",
                                              "maxCrashRestarts": 2})
    first = reconcilers.start("failover.crash-restart")
    user(kube, "kubectl").apply(spec)
    wait_for("the cluster to be Ready", lambda: ready_cluster(reconcilers), 90, 0.2)
    victim = f"{NAME}-2"
    started = time.monotonic()
    faults.crash_loop(namespace, victim, exit_code=3, message="ERROR: invalid --cache value")
    crashed(first, "failover.crash-restart", 60)
    report("crash loop -> restart 1 -> reconciler killed", time.monotonic() - started)
    reconcilers.start()

    def stalled() -> dict[str, Any] | None:
        found = condition(reconcilers.cluster(), "Stalled")
        return found if found.get("status") == "True" else None
    found = wait_for("the new reconciler to give up (Stalled)", stalled, 60, 0.2)
    report("reconciler restarted -> restart 2 -> Stalled", time.monotonic() - started)
    assert "restarted it 2 times" in found["message"]
    time.sleep(3.0)  # several crashes later: still no third restart
    deletes = [w for w in reconcilers.writes()
               if w["verb"] == "delete" and w["objectRef"]["resource"] == "pods"]
    assert len(deletes) == 2, [w["requestURI"] for w in deletes]

    # The cause goes away with no change to the spec (here: the fault; a full disk freed, say):
    # the kubelet's next restart comes up and joins, and Stalled clears at the same generation.
    generation = (reconcilers.cluster() or {})["metadata"]["generation"]
    started = time.monotonic()
    faults.stop_crash_loop(namespace, victim)

    def healed() -> dict[str, Any] | None:
        found = reconcilers.cluster()
        st = (found or {}).get("status") or {}
        return found if condition(found, "Ready").get("status") == "True" and condition(
            found, "Stalled").get("status") == "False" and "failures" not in st else None
    obj = wait_for("Ready again and no longer Stalled", healed, 60, 0.2)
    report("crash loop ends -> Ready", time.monotonic() - started)
    assert obj["metadata"]["generation"] == generation
    assert f"{NAME}-2" in live_nodes(obj)

