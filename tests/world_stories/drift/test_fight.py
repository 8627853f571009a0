"""Story: something keeps changing a field back, and the reconciler stops fighting it.

A rival (a script, another operator) scales the dev cluster's StatefulSet to 5 replicas every
second. The reconciler repairs it a few times, then recognises the fight: it backs off
exponentially, says so with an Event and a Stalled condition naming the object, and its writes
stay bounded (a handful, not one per second). When the rival stops, the reconciler repairs the
object once more and, after a quiet window, the cluster is no longer stalled.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from kubernetes import client as k8s

from tests.support.drift import NAME, dev_with_pdb, scale, sts
from tests.support.harness import (
    Reconciler,
    condition,
    now_stamp,
    user,
    wait_for,
)

FIGHT_S = 16.0
THRESHOLD = 5
WINDOW_S = 8.0


def test_a_fight_ends_in_back_off_and_stalled_with_bounded_writes(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler = reconciler_factory(fight_threshold=THRESHOLD, fight_window_s=WINDOW_S,
                                    drift_backoff_base_s=1.0, drift_backoff_max_s=60.0)
    user(kube, "kubectl").apply(dev_with_pdb(namespace))
    reconciler.settle(NAME)
    since = now_stamp()
    stop = threading.Event()
    changes = 0

    def rival() -> None:
        nonlocal changes
        while not stop.is_set():
            scale(kube, namespace)
            changes += 1
            stop.wait(1.0)

    fighter = threading.Thread(target=rival, daemon=True)
    fighter.start()
    try:
        stalled = wait_for("Stalled=True (DriftFight)", lambda: (
            o := reconciler.cluster(NAME)) and condition(o, "Stalled").get(
            "reason") == "DriftFight" and o, timeout_s=FIGHT_S)
        time.sleep(max(0.0, FIGHT_S - 8))
    finally:
        stop.set()
        fighter.join()
    fought_for = FIGHT_S
    repairs = [w for w in reconciler.writes(since, resource="statefulsets")
               if "dryRun=All" not in w["requestURI"]]
    message = condition(stalled, "Stalled")["message"]
    print(f"\nrival changed replicas {changes} times in about {fought_for:.0f}s; the reconciler "
          f"repaired {len(repairs)} times; Stalled: {message}")
    assert "StatefulSet/dev" in message and "spec.drift.ignore" in message
    events = [e for e in k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
              if e.reason == "DriftFight"]
    assert events and "StatefulSet/dev" in (events[0].message or "")
    # Without back-off there would be one repair per change; with it, the threshold plus one
    # per doubling of the back-off.
    bound = THRESHOLD + math.ceil(math.log2(fought_for)) + 1
    assert THRESHOLD <= len(repairs) <= bound, (len(repairs), bound)
    assert len(repairs) < changes

    # The rival is gone: the next repair sticks, and after a quiet window the fight is over.
    started = time.monotonic()
    wait_for("the replicas to be repaired", lambda: sts(kube, namespace)["spec"][
        "replicas"] == 3, timeout_s=40, interval_s=0.1)
    wait_for("Stalled=False", lambda: condition(reconciler.cluster(NAME), "Stalled").get(
        "status") == "False", timeout_s=WINDOW_S + 10, interval_s=0.1)
    print(f"fight over {time.monotonic() - started:.1f}s after the rival stopped")
