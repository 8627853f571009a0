"""Stories: a user creates a KaiwuCluster and the reconciler brings KaiwuDB up, initialised once.

The reconciler runs as in production (watch caches feeding a Controller, its own
ServiceAccount; the drift harness drives it) against the test world's real apiserver, with
simulated kubelets and a simulated KaiwuDB behind the real exec path. The user applies a
cluster and waits for Ready: the pods start and wait for `kwbase init`, the reconciler inits the
cluster exactly once, records the node ids and only then reports Ready. A reconciler that lost
its record of the init (it died before writing status) inits again harmlessly. The same with TLS:
certificate Secrets first, then init over TLS. Timings are printed (pytest -s).

The helpers these stories share with the scale and failover stories: tests/support/lifecycle.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.keys import ClusterKey
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from tests.support.harness import (
    Reconciler,
    condition,
    user,
    wait_for,
)
from tests.support.lifecycle import (
    NAME,
    bring_up,
    lifecycle_count,
    live_nodes,
    report,
    small_cluster,
    status,
    wait_ready,
)
from tests.world.simworld import SimWorld


def test_a_new_cluster_is_initialised_once_and_ready_only_then(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler = reconciler_factory()
    started = time.monotonic()
    user(kube, "kubectl").apply(small_cluster(namespace))

    # Before init the pods run but are not ready, and the cluster says what it waits for.
    waiting = wait_for("the reconciler's first status", lambda: condition(
        reconciler.cluster(NAME), "Ready") or None, 30)
    assert waiting["status"] == "False"
    obj = wait_ready(reconciler, 75)
    report("apply -> Ready (3 insecure nodes, init included)", time.monotonic() - started)

    assert obj["status"]["initialized"] is True
    nodes = live_nodes(obj)
    assert sorted(nodes) == [f"{NAME}-0", f"{NAME}-1", f"{NAME}-2"]
    assert len(set(nodes.values())) == 3, "each pod is its own KaiwuDB node"
    assert lifecycle_count(reconciler, "init") == 1
    actions = [a["action"] for a in obj["status"].get("lastActions") or ()]
    assert "Initialized" in actions

    # A reconciler that died between `kwbase init` and its status write has no record of the
    # init: it runs it again, KaiwuDB answers "already initialised", and that is success.
    # (Status-only changes start no pass: the periodic resync does, here at once.)
    before = time.monotonic()
    record = reconciler.cluster(NAME)
    assert record is not None
    record["status"].pop("initialized")
    Kube(kube, "test").replace_status(record)
    wait_for("the reconciler's cache to see it", lambda: "initialized" not in (
        (reconciler.caches.get(kk.KAIWU_CLUSTER, namespace, NAME) or {}).get("status") or {}),
        10, 0.02)
    reconciler.enqueue(ClusterKey(namespace, NAME))
    wait_for("status.initialized again", lambda: status(reconciler).get("initialized"), 20,
             0.1)
    report("lost init record -> recorded again", time.monotonic() - before)
    assert lifecycle_count(reconciler, "init") == 1, "the second init found it done"
    assert live_nodes(wait_ready(reconciler, 20)) == nodes, "same nodes, nothing re-created"


def test_a_tls_cluster_gets_certificates_then_init_then_ready(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace,
                                     small_cluster(namespace, tls={"enabled": True}))
    report("apply -> Ready (3 TLS nodes: certificates, init)", took)
    api = Kube(kube, "test")
    for secret in (f"{NAME}-node-certs", f"{NAME}-root-client-certs", f"{NAME}-ca"):
        assert api.get(kk.SECRET, namespace, secret) is not None, secret
    assert obj["status"]["initialized"] is True
    assert sorted(live_nodes(obj)) == [f"{NAME}-0", f"{NAME}-1", f"{NAME}-2"]
    assert lifecycle_count(reconciler, "init") == 1


def test_a_single_node_cluster_initialises_itself(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    reconciler, obj, took = bring_up(reconciler_factory, kube, namespace, small_cluster(
        namespace, startMode="single-node", replicas=1))
    report("apply -> Ready (single-node, self-initialising)", took)
    assert obj["status"]["initialized"] is True
    assert sorted(live_nodes(obj)) == [f"{NAME}-0"]
    assert lifecycle_count(reconciler, "init") == 0, "kwbase start-single-node needs no init"
