"""Story: every example cluster is reconciled, then a quiet cluster costs the API server nothing.

A user applies all three example clusters (clusters/*.yaml) into one namespace. The reconciler
creates their objects (and the TLS Secrets of the two secure ones), reports their status, and then,
with nothing changing, makes no write request at all for 30 seconds: no apply, no no-op apply, no
dry run, no unchanged status update, no Event. The apiserver's audit log is the witness.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from tests.support.harness import (
    Reconciler,
    condition,
    example,
    now_stamp,
    parked,
    user,
    wait_for,
)
from tests.world.simworld import SimWorld

EXAMPLES = {"dev": "dev", "production": "orders", "single-node": "edge"}
STEADY_S = 30.0


def test_examples_reconciled_then_thirty_quiet_seconds_without_a_write(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    # Every cluster is also reconciled every 2 s, events or not: each pass over a quiet cluster
    # must find nothing to write.
    reconciler = reconciler_factory(resync_period_s=2.0)
    started = time.monotonic()
    for file in EXAMPLES:
        user(kube, "kubectl").apply(parked(example(file, namespace)))
    clusters = {name: reconciler.settle(name, quiet_s=3.0) for name in EXAMPLES.values()}
    setup_writes = Counter(f"{w['verb']} {w['objectRef']['resource']}"
                           for w in reconciler.writes())
    print(f"\nthree example clusters reconciled in {time.monotonic() - started:.1f}s "
          f"(including 3s of quiet), writes: {dict(setup_writes)}")

    for name, obj in clusters.items():
        status = obj["status"]
        assert status["observedGeneration"] == obj["metadata"]["generation"], name
        assert condition(obj, "Stalled")["status"] == "False", (name, status)
        assert condition(obj, "Drifted")["status"] == "False", (name, status)
        # Parked: pods stay Pending, so nobody is Ready (the next story covers a Ready one).
        assert condition(obj, "Ready")["status"] == "False", (name, status)
        assert any(entry.endswith(f"/StatefulSet/{namespace}/{name}")
                   for entry in status["inventory"])
    # The secure clusters got their certificates; the ServiceMonitor is reported, not forced.
    kube_admin = Kube(kube, "test")
    for name in ("orders", "edge"):
        for secret in (f"{name}-ca", f"{name}-node-certs", f"{name}-root-client-certs"):
            assert kube_admin.get(kk.SECRET, namespace, secret) is not None, secret
    assert "ServiceMonitor/orders" in condition(clusters["orders"], "Ready")["message"]

    since = now_stamp()
    passes = reconciler.passes
    time.sleep(STEADY_S)
    writes = reconciler.writes(since)
    print(f"steady state: {len(writes)} writes in {STEADY_S:.0f}s, "
          f"{reconciler.passes - passes} reconcile passes")
    assert writes == [], [(w["verb"], w["requestURI"]) for w in writes]
    assert reconciler.passes - passes >= 3 * (STEADY_S // 2 - 1)


def test_a_ready_cluster_costs_no_write_either(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str) -> None:
    # With simulated kubelets the dev cluster's pods run, KaiwuDB is initialised and the
    # cluster turns Ready; from then on, with a resync every 2 s, nothing is written.
    reconciler = reconciler_factory(resync_period_s=2.0)
    cluster = example("dev", namespace)
    cluster["spec"]["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    cluster["spec"]["storage"] = {"size": "1Gi"}
    started = time.monotonic()
    user(kube, "kubectl").apply(cluster)
    obj = wait_for("the dev cluster to be Ready", lambda: (
        o := reconciler.cluster("dev")) and condition(o, "Ready").get("status") == "True"
        and o, timeout_s=90, interval_s=0.2)
    print(f"\ndev cluster Ready in {time.monotonic() - started:.1f}s: "
          f"{condition(obj, 'Ready')['message']}")
    reconciler.settle("dev", quiet_s=3.0)

    since = now_stamp()
    passes = reconciler.passes
    time.sleep(STEADY_S)
    writes = reconciler.writes(since)
    print(f"steady state (Ready): {len(writes)} writes in {STEADY_S:.0f}s, "
          f"{reconciler.passes - passes} reconcile passes")
    assert writes == [], [(w["verb"], w["requestURI"]) for w in writes]
    assert condition(reconciler.cluster("dev"), "Ready")["status"] == "True"
