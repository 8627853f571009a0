"""Crash-looping pods on healthy nodes, for the failover step: found, restarted a bounded number
of times per pod template revision, then Stalled.

The failover step (reconciler.kaiwudb.failover) hands `CrashLoops.finding` to its lookout
(reconciler.kaiwudb.lookout) and calls `CrashLoops.restart` for each CrashLoop finding; what
a crash loop means and the step it gets are in reconciler.kaiwudb.failover's module docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from reconciler import failpoints
from reconciler.kaiwudb.lookout import FailoverSettings, Finding
from reconciler.kaiwudb.loss import parse_time, ready_condition
from reconciler.kaiwudb.pods import CLAIM_TEMPLATE, pod_ready
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.metrics import Metrics
from reconciler.model import Obj, Pass, meta
from reconciler.reasons import CRASH_LOOP, LifecycleMetric, Verdict, Wait
from renderer.spec import Cluster

REVISION_LABEL = "controller-revision-hash"
# On a pod's claim: "<template revision>:<restarts>", the crash restarts made for that revision.
CRASH_RESTARTS = "kaiwu.inspur.com/crash-restarts"


def crash_state(pod: Obj) -> tuple[bool, str]:
    """(the kwbase container crash-loops, its last words: exit code and message)."""
    for item in (pod.get("status") or {}).get("containerStatuses") or ():
        if item.get("name") != "kwbase":
            continue
        state = item.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        exited = "terminated" in state and int(item.get("restartCount") or 0) > 0
        last = state.get("terminated") or (item.get("lastState") or {}).get("terminated") or {}
        words = f"exit code {last.get('exitCode')}" if last else "no exit status yet"
        if last.get("message") or last.get("reason"):
            said = str(last.get('message') or last.get('reason')).strip()
            words += f": {said[:200]}"
            cause = crash_cause(said)
            words += f"; {cause}" if cause else ""
        return waiting or exited, words
    return False, ""


CRASH_CAUSES = (
    ("clock synchronization error", "the node's clock is too far from its peers' (KWDB stops "
     "a node that is more than --max-offset away from half of them, rpc/clock_offset.go:"
     "203-284): fix the hosts' time sync (NTP, chrony); restarts do not"),
    ("maximum clock offset", "the nodes' --max-offset differ (rpc/heartbeat.go:160-167): give "
     "every node the same value"),
)
"""Last words whose cause is known, and what to do: said with the crash loop."""


def crash_cause(words: str) -> str:
    """What to do about last words of a known cause ("" for any other)."""
    return next((advice for marker, advice in CRASH_CAUSES if marker in words), "")


def crash_restarts(claim: Obj | None, revision: str) -> int:
    """Crash restarts recorded on the claim for this template revision (0 for another)."""
    value = str((meta(claim).get("annotations") or {}).get(CRASH_RESTARTS) or "")
    recorded, _, count = value.rpartition(":")
    return int(count) if recorded == revision and count.isdigit() else 0


class CrashLoops:
    """Crash-looping pods on healthy nodes: found, restarted a bounded number of times per
    template revision (counted on the pod's claim), then Stalled (see the module docstring).
    Part of the failover step."""

    def __init__(self, kube: Kube, view: CacheView, metrics: Metrics,
                 settings: FailoverSettings) -> None:
        self.kube = kube
        self.view = view
        self.metrics = metrics
        self.settings = settings

    def finding(self, p: Pass, cluster: Cluster, name: str, pod: Obj) -> Finding | None:
        """A pod on a healthy node that crash-loops (or was restarted by us and is not back);
        clears the claim's restart count once the pod is Ready."""
        ready, changed = ready_condition(pod)
        if meta(pod).get("deletionTimestamp"):
            return None
        revision = str((meta(pod).get("labels") or {}).get(REVISION_LABEL) or "")
        claim = self.view.peek(k.PVC, cluster.namespace, f"{CLAIM_TEMPLATE}-{name}")
        if ready and pod_ready(pod):
            if claim is not None and CRASH_RESTARTS in (meta(claim).get("annotations") or {}):
                self.write_restarts(cluster, claim, None)  # the story ends: a fresh count
            return None
        crashing, words = crash_state(pod)
        restarts = crash_restarts(claim, revision)
        if not crashing and not restarts:
            return None
        created = parse_time(str(meta(pod).get("creationTimestamp") or ""))
        since = changed if changed is not None else created
        return Finding(name, CRASH_LOOP, since=min(since or p.now, p.now) if crashing else None,
                       claim=claim, words=words, restarts=restarts)

    def restart(self, p: Pass, cluster: Cluster, f: Finding, pods: Mapping[str, Obj],
                guard: Callable[[], Verdict]) -> list[Wait]:
        """Restart the pod once it has crash-looped for podNotReadyTimeout, unless `guard`
        says to wait; Stalled at the limit. Returns why Ready is not True, first reason first."""
        limit = cluster.failover.max_crash_restarts
        if f.since is None:
            return [Wait(CRASH_LOOP, f"pod {f.pod} was restarted after crashing; waiting for it "
                                     "to come up")]
        if f.restarts >= limit:
            p.stalled.append((CRASH_LOOP, (
                f"pod {f.pod} keeps crashing ({f.words}); the reconciler restarted it "
                f"{f.restarts} times (spec.failover.maxCrashRestarts) and stops here: restarts "
                f"do not fix a configuration error. See `kubectl logs {f.pod} --previous`, fix "
                "the spec or the cause (a new spec revision allows new restarts)")))
            return []
        timeout = cluster.failover.pod_not_ready_timeout.total_seconds()
        looping = Wait(CRASH_LOOP, f"pod {f.pod} is crash-looping ({f.words})")
        # Whole seconds, rounded up: the timeout is never cut short.
        due = math.ceil(f.since) + timeout
        if due > p.now:
            p.requeue_in(due - p.now)
            return [looping]
        verdict = guard()
        if isinstance(verdict, Wait):
            p.requeue_in(self.settings.poll_s)
            return [verdict, looping]
        pod = pods[f.pod]
        if f.claim is None:
            return [Wait(CRASH_LOOP, f"pod {f.pod} has no claim to count restarts on; not "
                                     "restarted"), looping]
        revision = str((meta(pod).get("labels") or {}).get(REVISION_LABEL) or "")
        # Counted before the delete: a crash in between costs a restart, never adds one.
        self.write_restarts(cluster, f.claim, f"{revision}:{f.restarts + 1}")
        try:
            self.kube.delete(k.POD, cluster.namespace, f.pod, uid=str(meta(pod).get("uid")))
        except ApiError as error:
            if not error.conflict:
                raise
        failpoints.reached("failover.crash-restart")
        action: LifecycleMetric = "restart-crashing-pod"
        self.metrics.lifecycle_actions_total.labels(action=action).inc()
        p.act("CrashLoopRestarted", f"Pod/{f.pod}", (
            f"crash-looping for more than podNotReadyTimeout {timeout:g}s ({f.words}): deleted "
            f"for a fresh start, restart {f.restarts + 1} of {limit}"), event="Warning")
        return [looping]

    def write_restarts(self, cluster: Cluster, claim: Obj, value: str | None) -> None:
        self.kube.patch(k.PVC, cluster.namespace, str(meta(claim).get("name")),
                        {"metadata": {"annotations": {CRASH_RESTARTS: value}}})

