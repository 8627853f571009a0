"""Stories that prove the drift harness counts: a write the reconciler makes is counted, and a
read is not.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.model import Obj
from tests.support.harness import Reconciler, now_stamp, user, wait_for


def test_the_harness_counts_the_reconcilers_writes_and_nothing_else(
        reconciler_factory: Callable[..., Reconciler], kube: k8s.ApiClient,
        namespace: str) -> None:
    reconciler = reconciler_factory()
    since = now_stamp()
    # A read by the reconciler is not a write; one apply (even a dry run) is.
    reconciler.kube.list_objects(kk.SERVICE, namespace)
    service: Obj = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "probe", "namespace": namespace},
               "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}
    reconciler.kube.apply(copy.deepcopy(service), dry_run=True)
    reconciler.kube.apply(copy.deepcopy(service))
    # What someone else writes is not counted against the reconciler.
    user(kube, "kubectl").apply({**service, "metadata": {**service["metadata"], "name": "other"}})
    writes = wait_for("two audit lines", lambda: (w := reconciler.writes(since)) and
                      len(w) >= 2 and w)
    time.sleep(0.5)
    writes = reconciler.writes(since)
    assert [(w["verb"], w["objectRef"]["name"]) for w in writes] == [
        ("patch", "probe"), ("patch", "probe")]
    assert "dryRun=All" in writes[0]["requestURI"]
