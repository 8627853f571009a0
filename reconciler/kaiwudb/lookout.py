"""What each pod of a cluster shows to the failover step, as `Finding`s, read anew every pass.

The failover step (reconciler.kaiwudb.failover) asks `Lookout.look` once per pass and acts on
each finding by its stage (reconciler.reasons.FailoverStage); reconciler.kaiwudb.crashloop
supplies the crash-loop findings. Facts come from the cache view through reconciler.kaiwudb.loss
(Nodes, pods, claims and the nodes their volumes are pinned to) and from the KaiwuDB node ids
the lifecycle step's probe left in the pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.kaiwudb.loss import NodeLoss, node_loss, parse_time, pod_node, volume_node
from reconciler.kaiwudb.pods import claim_of
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import Kube
from reconciler.model import NodeEntry, Obj, Pass, meta, rfc3339
from reconciler.reasons import (
    CLAIM_GONE,
    CRASH_LOOP,
    NODE_LOST,
    STORE_REPLACED,
    VOLUME_ON_LOST_NODE,
    FailoverStage,
)
from renderer.spec import Cluster


@dataclass(frozen=True)
class FailoverSettings:
    """poll_s: how soon a pass looks again while a replacement is under way (pods scheduling,
    a claim going away, a new store joining)."""

    poll_s: float = 1.0


@dataclass(frozen=True)
class Finding:
    """What one pod shows (reconciler.kaiwudb.failover's module docstring says each stage)."""

    pod: str
    stage: FailoverStage
    node: str = ""  # the lost Kubernetes node (NodeLost, VolumeOnLostNode)
    node_ready: str = ""  # its Ready status: False, Unknown or Missing
    since: float | None = None  # lost / not Ready since
    dead_ids: tuple[int, ...] = ()  # StoreReplaced: the lost stores' node ids
    claim: Obj | None = field(default=None, compare=False)
    words: str = ""  # CrashLoop: exit code and message
    restarts: int = 0  # CrashLoop: restarts made for the pod's revision

    def record(self) -> dict[str, Any]:
        """The finding as status.failures shows it (information for people)."""
        entry: dict[str, Any] = {"stage": self.stage}
        if self.node:
            entry.update(node=self.node, nodeReady=self.node_ready)
        if self.since is not None:
            entry["since"] = rfc3339(self.since)
        if self.dead_ids:
            entry["deadNodeIds"] = list(self.dead_ids)
        if self.stage == CRASH_LOOP:
            entry.update(restarts=self.restarts, lastWords=self.words)
        return entry



def replaced_stores(nodes: Sequence[NodeEntry]) -> dict[str, tuple[int, ...]]:
    """pod -> node ids KaiwuDB lists for the pod's address that are not live while another id
    there is: stores lost with their volume and replaced by a fresh one (a decommissioned node
    that stopped is already left out of status.nodes)."""
    found: dict[str, tuple[int, ...]] = {}
    for pod in sorted({e.pod for e in nodes if e.pod}):
        mine = [e for e in nodes if e.pod == pod]
        if any(e.state == "live" for e in mine):
            dead = tuple(sorted(e.node_id for e in mine if e.state == "not-live"))
            if dead:
                found[pod] = dead
    return found

CrashFinder = Callable[[Pass, Cluster, str, Obj], "Finding | None"]
"""A crash-looping pod's finding (reconciler.kaiwudb.crashloop.CrashLoops.finding), or None."""


class Lookout:
    """What each pod of the cluster shows, as Findings: read anew on every pass (see the module
    docstring); the only thing kept between passes is when a Node that is gone was first seen
    missing. Part of the failover step."""

    def __init__(self, kube: Kube, view: CacheView, crash_finding: CrashFinder) -> None:
        self.kube = kube
        self.view = view
        self.crash_finding = crash_finding
        # A Node that is gone has no condition to date its loss from: when a pass first found
        # it missing (shared by the workers, hence the lock).
        self._lock = threading.Lock()
        self._missing_since: dict[str, float] = {}

    def look(self, p: Pass, cluster: Cluster, pods: Mapping[str, Obj],
             names: list[str]) -> list[Finding]:
        findings: list[Finding] = []
        for name in names:
            pod = pods.get(name)
            node = pod_node(pod)
            if node:
                loss = node_loss(self.view, node)
                if loss is not None:
                    findings.append(Finding(name, NODE_LOST, node, loss.status,
                                            self.lost_since(p, loss, name)))
                    continue
                assert pod is not None
                crash = self.crash_finding(p, cluster, name, pod)
                if crash is not None:
                    findings.append(crash)
                continue
            if pod is not None and meta(pod).get("deletionTimestamp"):
                continue  # going away: the StatefulSet recreates it
            claim = claim_of(self.view, self.kube, cluster.namespace, name)
            if claim is None or meta(claim).get("deletionTimestamp"):
                if pod is not None:
                    findings.append(Finding(name, CLAIM_GONE, claim=claim))
                continue
            pinned = volume_node(self.kube, claim)
            loss = node_loss(self.view, pinned) if pinned else None
            if loss is not None:
                findings.append(Finding(name, VOLUME_ON_LOST_NODE, pinned, loss.status,
                                        self.lost_since(p, loss, name), claim=claim))
        nodes = p.kaiwu.nodes or ()
        for pod_name, dead in replaced_stores(nodes).items():
            if pod_name in names and not any(f.pod == pod_name for f in findings):
                findings.append(Finding(pod_name, STORE_REPLACED, dead_ids=dead))
        with self._lock:
            for gone in [n for n in self._missing_since if self.view.peek(k.NODE, "", n)]:
                del self._missing_since[gone]
        return findings

    def lost_since(self, p: Pass, loss: NodeLoss, pod: str) -> float:
        """When the node was lost: its Ready condition's transition; for a Node that is gone,
        when a pass first found it missing (after a restart, the time status.failures shows,
        which only people otherwise read: without it the wait starts again, never shorter)."""
        if loss.since is not None:
            return min(loss.since, p.now)
        shown = (p.kaiwu.failures or {}).get(pod) or {}
        recorded = parse_time(str(shown.get("since"))) if shown.get("node") == loss.name else None
        with self._lock:
            first = self._missing_since.setdefault(loss.name, p.now)
        return min(first, recorded) if recorded is not None else first

