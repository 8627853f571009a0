"""Stories of a cluster's life going wrong and put right: a double scale-in, a bad upgrade, a bad
flag. (A volume lost with its node is failover/test_failover.py's.)

- Scale 3 -> 5 -> 3: the reconciler removes two nodes strictly one at a time (the second
  decommission starts only after the first node holds no replicas and its pod is gone), KaiwuDB
  ends with the two removed node ids decommissioned and the three others live; and a scale-in
  below 3 on a multi-replica cluster is refused (Stalled with the renderer's reason), touching
  nothing.
- An upgrade to an image whose pods crash (the test world does not model images: a watcher
  crash-loops every pod that runs the bad tag): the rollout stops after its first pod, the
  cluster says which pod fails and why (Stalled, after its bounded crash-loop restarts), the
  other pods stay Ready on the old image; setting the version back lets the StatefulSet put the
  broken pod back on the old image (the partition still stands at it) and the cluster is Ready.
- A bad kwbase flag in spec.extraArgs: the simulated kwbase refuses it with the real message, the
  first pod of the rollout crash-loops, the reconciler restarts it maxCrashRestarts times and
  then reports Stalled (naming the pod and the error); no other pod is touched; removing the
  flag brings the cluster back with the same node ids.

The reconciler runs as in production against the test world (real apiserver, simulated kubelets
and KaiwuDB). Timings are printed (pytest -s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import ApiError, Kube
from reconciler.model import Obj
from renderer.settings import CEL_SINCE
from tests.support import world_kube
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import (
    NAME,
    bring_up,
    kaiwudb_admin,
    lifecycle_count,
    live_nodes,
    report,
    small_cluster,
    status,
    wait_ready,
)
from tests.world.faults import Faults
from tests.world.simworld import SimWorld


def patch_spec(kube: k8s.ApiClient, namespace: str, spec: dict[str, Any]) -> None:
    """What `kubectl patch kwc dev --type merge -p '{"spec": ...}'` does."""
    Kube(kube, "kubectl-patch").patch(kk.KAIWU_CLUSTER, namespace, NAME, {"spec": spec})


def pods(kube: k8s.ApiClient, namespace: str) -> dict[str, Obj]:
    items, _ = Kube(kube, "test").list_objects(kk.POD, namespace,
                                               f"app.kubernetes.io/instance={NAME}")
    return {str(pod["metadata"]["name"]): pod for pod in items}


def pod_ready(pod: Obj | None) -> bool:
    return pod is not None and not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ())


def image(pod: Obj) -> str:
    return str(pod["spec"]["containers"][0]["image"])


def statefulset(kube: k8s.ApiClient, namespace: str) -> Obj:
    found = Kube(kube, "test").get(kk.STATEFUL_SET, namespace, NAME)
    assert found is not None
    return found


def five_fit(namespace: str, **spec: Any) -> Obj:
    """The dev example, small, with the example's preferred anti-affinity: the test world has
    four Kubernetes nodes, so a fifth pod shares one."""
    obj = small_cluster(namespace, **spec)
    obj["spec"]["scheduling"] = {"antiAffinity": "preferred"}
    return obj


# ---- scale 3 -> 5 -> 3 ------------------------------------------------------------------------


def test_scaling_in_by_two_removes_one_node_at_a_time_and_below_three_is_refused(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    spec = five_fit(namespace)
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, spec)
    report("apply -> Ready (3 nodes)", took)
    three = live_nodes(obj)

    started = time.monotonic()
    patch_spec(kube, namespace, {"replicas": 5})
    grown = wait_for("5 live KaiwuDB nodes and Ready", lambda: (
        o := wait_ready(reconciler)) and len(live_nodes(o)) == 5 and o, 75, 0.1)
    report("replicas 3 -> 5: two new nodes live, Ready", time.monotonic() - started)
    five = live_nodes(grown)
    assert {pod: five[pod] for pod in three} == three
    removed = {pod: five[pod] for pod in (f"{NAME}-4", f"{NAME}-3")}

    # Scale in by two; sample what the user can see while it runs: the operation in status
    # and which pods exist (read after the status, so a pod seen gone was gone at that status).
    started = time.monotonic()
    patch_spec(kube, namespace, {"replicas": 3})
    seen: list[tuple[str, str, frozenset[str]]] = []  # (operation pod, phase, pods present)

    def scaled_in() -> bool:
        st = status(reconciler)
        present = frozenset(pods(kube, namespace))
        operation = st.get("operation")
        if operation:
            seen.append((str(operation["pod"]), str(operation.get("phase")), present))
        return (condition(reconciler.cluster(NAME), "Ready").get("status") == "True"
                and "operation" not in st and st.get("replicas") == 3
                and live_nodes({"status": st}) == three)
    wait_for("Ready with the three original nodes and no operation", scaled_in, 80, 0.05)
    report("replicas 5 -> 3: two decommissions, one at a time, Ready",
           time.monotonic() - started)

    order = [pod for pod, _, _ in seen]
    assert order and set(order) == set(removed), seen
    first_of_3 = order.index(f"{NAME}-3")
    assert all(pod == f"{NAME}-4" for pod in order[:first_of_3]), "highest ordinal first"
    assert all(pod == f"{NAME}-3" for pod in order[first_of_3:]), "never back to dev-4"
    assert f"{NAME}-4" not in seen[first_of_3][2], \
        "dev-3's decommission starts only once dev-4's pod is removed"
    assert lifecycle_count(reconciler, "decommission") == 2
    assert lifecycle_count(reconciler, "scale-in-step") == 2
    assert int(statefulset(kube, namespace)["spec"]["replicas"]) == 3

    # The reconciler's own account, newest first: each node drained (0 replicas) and its pod
    # removed before the next decommission began.
    actions = [(a["action"], a["target"]) for a in status(reconciler)["lastActions"]][::-1]
    wanted = [(action, f"Pod/{pod}") for pod in (f"{NAME}-4", f"{NAME}-3")
              for action in ("Decommissioning", "NodeDecommissioned")]
    steps = [a for a in actions if a in wanted or a[0] == "ScaledIn"]
    assert [a[0] for a in steps] == ["Decommissioning", "NodeDecommissioned", "ScaledIn"] * 2, \
        actions
    assert [a for a in steps if a[0] != "ScaledIn"] == wanted, actions

    # KaiwuDB agrees: the two removed ids are decommissioned and hold nothing; three are live.
    rows = {n.id: n for n in kaiwudb_admin(kube, namespace, spec).node_status(
        f"{NAME}-0", decommission=True)}
    for pod, node_id in removed.items():
        assert rows[node_id].is_decommissioning and rows[node_id].gossiped_replicas == 0, pod
    assert all(rows[i].healthy and not rows[i].is_decommissioning for i in three.values())
    for pod in removed:
        wait_for(f"the claim of {pod} to go", lambda pod=pod: Kube(kube, "test").get(  # type: ignore[misc]
            kk.PVC, namespace, f"data-{pod}") is None, 20, 0.1)

    # Below three a multi-replica cluster loses quorum: refused, and nothing moves. From
    # Kubernetes 1.25 the CRD's CEL rule refuses it at the API server, with the same words.
    if world_kube.VERSION >= CEL_SINCE:
        with pytest.raises(ApiError, match="multi-replica needs at least 3 nodes"):
            patch_spec(kube, namespace, {"replicas": 2})
        assert int(statefulset(kube, namespace)["spec"]["replicas"]) == 3
        assert live_nodes(wait_ready(reconciler)) == three
        return
    uids = {name: pod["metadata"]["uid"] for name, pod in pods(kube, namespace).items()}
    decommissions = lifecycle_count(reconciler, "decommission")
    started = time.monotonic()
    patch_spec(kube, namespace, {"replicas": 2})
    stalled = wait_for("the scale-in to 2 to be refused", lambda: (c := condition(
        reconciler.cluster(NAME), "Stalled")).get("status") == "True" and c, 20, 0.1)
    report("replicas 3 -> 2: refused", time.monotonic() - started)
    assert "spec.replicas" in stalled["message"]
    assert "at least 3 nodes" in stalled["message"], stalled
    time.sleep(2.0)  # passes go by: nothing is touched
    assert int(statefulset(kube, namespace)["spec"]["replicas"]) == 3
    assert {name: pod["metadata"]["uid"] for name, pod in pods(kube, namespace).items()} == uids
    assert lifecycle_count(reconciler, "decommission") == decommissions
    assert "operation" not in status(reconciler)

    patch_spec(kube, namespace, {"replicas": 3})
    wait_for("Ready and no longer Stalled", lambda: (found := reconciler.cluster(NAME))
             and condition(found, "Ready").get("status") == "True"
             and condition(found, "Stalled").get("status") == "False", 30, 0.1)
    assert live_nodes(wait_ready(reconciler)) == three


# ---- an upgrade to a bad image ------------------------------------------------------------------

BAD_VERSION = "3.2.2"
BAD_WORDS = "/kaiwudb/bin/kwbase: cannot execute binary file: Exec format error"


@pytest.fixture
def bad_image(faults: Faults, kube: k8s.ApiClient, namespace: str) -> Iterator[list[str]]:
    """The test world does not model images, so a broken build is played by a watcher: every
    pod of the cluster whose kwbase image is kwdb/kwdb:BAD_VERSION crashes at each start (the
    kubelet's crash fault), and a pod of that name back on another image starts normally.
    Yields the pods that ran the bad image."""
    crashed: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        crashing: set[str] = set()
        while not stop.is_set():
            for name, pod in pods(kube, namespace).items():
                bad = image(pod).endswith(f":{BAD_VERSION}")
                if bad and name not in crashing:
                    faults.crash_loop(namespace, name, exit_code=126, message=BAD_WORDS)
                    crashing.add(name)
                    crashed.append(name)
                elif not bad and name in crashing:
                    faults.stop_crash_loop(namespace, name)
                    crashing.discard(name)
            stop.wait(0.02)

    thread = threading.Thread(target=watch, name="bad-image", daemon=True)
    thread.start()
    yield crashed
    stop.set()
    thread.join(5)


def test_an_upgrade_to_a_crashing_image_stops_after_one_pod_and_setting_it_back_recovers(
        sim_world: SimWorld, bad_image: list[str], reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    spec = small_cluster(namespace, failover={"podNotReadyTimeout": "1s",
                                              "maxCrashRestarts": 1})
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, spec)
    report("apply -> Ready (3 nodes on 3.2.1)", took)
    nodes = live_nodes(obj)
    first = f"{NAME}-2"
    others = [f"{NAME}-0", f"{NAME}-1"]
    uids = {name: pods(kube, namespace)[name]["metadata"]["uid"] for name in others}

    started = time.monotonic()
    patch_spec(kube, namespace, {"version": BAD_VERSION})
    worst_others_ready = 2

    def stalled() -> dict[str, Any] | None:
        nonlocal worst_others_ready
        current = pods(kube, namespace)
        worst_others_ready = min(worst_others_ready, sum(
            pod_ready(current.get(name)) for name in others))
        found = condition(reconciler.cluster(NAME), "Stalled")
        return found if found.get("status") == "True" else None
    halted = wait_for("the cluster to report the failing pod (Stalled)", stalled, 60, 0.05)
    report(f"version 3.2.1 -> {BAD_VERSION} (crashing): rollout stopped, Stalled",
           time.monotonic() - started)
    assert halted["reason"] == "CrashLoop", halted
    assert f"pod {first} keeps crashing (exit code 126: {BAD_WORDS}" in halted["message"]
    ready_condition = condition(reconciler.cluster(NAME), "Ready")
    assert ready_condition["status"] == "False" and first in ready_condition["message"]

    time.sleep(2.0)  # passes go by: the rollout does not go on to the next pod
    current = pods(kube, namespace)
    assert image(current[first]).endswith(f":{BAD_VERSION}") and not pod_ready(current[first])
    for name in others:
        assert image(current[name]).endswith(":3.2.1") and pod_ready(current[name]), name
        assert current[name]["metadata"]["uid"] == uids[name], f"{name} was never restarted"
    assert worst_others_ready == 2, "the other pods stayed Ready throughout"
    assert set(bad_image) == {first}, "only the first pod ever ran the bad image"
    assert lifecycle_count(reconciler, "upgrade-step") == 1
    sts = statefulset(kube, namespace)
    assert sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 2

    # The user sets the version back: the broken pod returns to 3.2.1 with its store.
    started = time.monotonic()
    patch_spec(kube, namespace, {"version": "3.2.1"})

    def recovered() -> Obj | None:
        found = reconciler.cluster(NAME)
        current = pods(kube, namespace)
        return found if condition(found, "Ready").get("status") == "True" and condition(
            found, "Stalled").get("status") == "False" and len(current) == 3 and all(
            image(pod).endswith(":3.2.1") and pod_ready(pod) for pod in current.values()) \
            and "failures" not in ((found or {}).get("status") or {}) else None
    obj = wait_for("every pod Ready on 3.2.1 and the cluster Ready", recovered, 60, 0.1)
    report("version set back to 3.2.1: broken pod back on 3.2.1, Ready",
           time.monotonic() - started)
    assert live_nodes(obj) == nodes, "the store survived: the same node ids"
    for name in others:
        assert pods(kube, namespace)[name]["metadata"]["uid"] == uids[name], name
    # Once the template is back, the StatefulSet controller replaces the broken pod itself
    # (the partition still stands at the broken pod); the reconciler deleted it only for its
    # one crash-loop restart, before the user stepped in.
    assert [w["objectRef"]["name"] for w in reconciler.writes(resource="pods")
            if w["verb"] == "delete"] == [first]
    assert lifecycle_count(reconciler, "upgrade-step") == 1, "the rollout never went further"
    sts = statefulset(kube, namespace)
    assert sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"] == 3
    assert sts["status"]["updateRevision"] == sts["status"]["currentRevision"]


def test_a_bad_flag_crash_loops_one_pod_a_bounded_number_of_times_then_stalls(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    # No fault injected: the simulated kwbase itself refuses the flag, with the real message,
    # as `kwbase start` would. The new template rolls out like any change, so only the first
    # pod ever gets it; the reconciler restarts it a bounded number of times, then gives up.
    spec = small_cluster(namespace, failover={"podNotReadyTimeout": "1s",
                                              "maxCrashRestarts": 2})
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, spec)
    report("apply -> Ready (3 nodes)", took)
    nodes = live_nodes(obj)
    first, others = f"{NAME}-2", [f"{NAME}-0", f"{NAME}-1"]
    uids = {name: pods(kube, namespace)[name]["metadata"]["uid"] for name in others}

    started = time.monotonic()
    patch_spec(kube, namespace, {"extraArgs": ["--no-such-flag=1"]})
    halted = wait_for("the cluster to give up on the crashing pod (Stalled)", lambda: (
        c := condition(reconciler.cluster(NAME), "Stalled")).get("status") == "True" and c,
        90, 0.1)
    report("bad flag -> bounded restarts -> Stalled", time.monotonic() - started)
    assert halted["reason"] == "CrashLoop", halted
    assert f"pod {first} keeps crashing" in halted["message"]
    assert "unknown flag: --no-such-flag" in halted["message"]
    assert "restarted it 2 times" in halted["message"]
    assert lifecycle_count(reconciler, "restart-crashing-pod") == 2

    stuck = pods(kube, namespace)[first]["metadata"]["uid"]
    time.sleep(2.0)  # passes go by: no more restarts, and no other pod is touched
    assert lifecycle_count(reconciler, "restart-crashing-pod") == 2
    current = pods(kube, namespace)
    assert current[first]["metadata"]["uid"] == stuck, "given up on: no longer deleted"
    assert condition(reconciler.cluster(NAME), "Ready")["status"] == "False"
    for name in others:
        assert current[name]["metadata"]["uid"] == uids[name], f"{name} was never restarted"
        assert pod_ready(current[name]), name
    deleted = [w["objectRef"]["name"] for w in reconciler.writes(resource="pods")
               if w["verb"] == "delete"]
    assert deleted == [first, first], "only the crashing pod, twice"

    # The user removes the flag: the pod comes back with its store.
    started = time.monotonic()
    patch_spec(kube, namespace, {"extraArgs": []})
    obj = wait_for("Ready again, no longer Stalled, no failure left", lambda: (
        found := reconciler.cluster(NAME)) and condition(found, "Ready").get("status") == "True"
        and condition(found, "Stalled").get("status") == "False"
        and "failures" not in (found.get("status") or {}) and found, 60, 0.1)
    report("flag removed -> Ready", time.monotonic() - started)
    assert live_nodes(obj) == nodes, "the same stores: the same node ids"
