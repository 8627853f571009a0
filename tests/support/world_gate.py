"""The world tier's gate: one reference cluster must become Ready before any world story runs.

tests/world_stories/conftest.py makes `reference_cluster_ready` an autouse session fixture. On
first use it applies the dev example (3 insecure nodes) in a namespace of its own, drives a real
reconciler at it (tests/support/harness.py) and waits at most GATE_BOUND_S for Ready. If a
reconcile pass raises, it stops at once with that error; if the bound passes, with the cluster's
Ready condition. The failure is the fixture's: pytest keeps a failed session fixture's error and
raises it again for every later story in a moment, so a reconciler that cannot bring a cluster up
fails the tier in minutes with the cause on screen, instead of each story waiting out its own
timeouts (docs/testworld.md, "Fail fast").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kubernetes import client as k8s

from tests.support.harness import NODE_READER, Reconciler, condition, user
from tests.support.lifecycle import NAME, small_cluster
from tests.world.controlplane import ControlPlane
from tests.world.fixtures import make_namespace

GATE_BOUND_S = 120.0
"""How long the reference cluster may take to become Ready. A healthy run needs about 4 s
(bring-up stories print it); a third of the stories' own 75 s bound would be too tight on a busy
machine, so twice that bound's margin."""

GATE_NAMESPACE_PREFIX = "world-gate-"


@dataclass(frozen=True)
class GateVerdict:
    """What the gate saw: Ready after `seconds`, or why not (`problem`)."""

    seconds: float
    problem: str = ""


def reference_cluster_verdict(plane: ControlPlane, admin: k8s.ApiClient,
                              namespace: str, bound_s: float = GATE_BOUND_S) -> GateVerdict:
    """Apply the reference cluster in `namespace` (made and deleted here) and watch it."""
    core = k8s.CoreV1Api(admin)
    started = time.monotonic()
    reconciler: Reconciler | None = None
    try:
        make_namespace(core, namespace)
        reconciler = Reconciler(plane, admin, namespace).start()
        user(admin, "kubectl").apply(small_cluster(namespace))
        return _watch(reconciler, started, bound_s)
    finally:
        if reconciler is not None:
            reconciler.stop()
        _delete(core, admin, namespace)


def _watch(reconciler: Reconciler, started: float, bound_s: float) -> GateVerdict:
    while True:
        elapsed = time.monotonic() - started
        if reconciler.errors:
            return GateVerdict(elapsed, "a reconcile pass raised: " + reconciler.errors[0])
        ready = condition(reconciler.cluster(NAME), "Ready")
        if ready.get("status") == "True":
            return GateVerdict(elapsed)
        if elapsed > bound_s:
            said = (f"Ready {ready.get('status')} {ready.get('reason')}: {ready.get('message')}"
                    if ready else "no Ready condition written")
            return GateVerdict(elapsed, f"not Ready within {bound_s:g} s ({said})")
        time.sleep(0.2)


def _delete(core: k8s.CoreV1Api, admin: k8s.ApiClient, namespace: str) -> None:
    rbac = k8s.RbacAuthorizationV1Api(admin)
    try:
        core.delete_namespace(namespace)
        rbac.delete_cluster_role_binding(f"{NODE_READER}-{namespace}")
    except k8s.ApiException as error:
        if error.status != 404:
            raise
