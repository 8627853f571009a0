"""The chaos soak's machinery: random overlapping faults from a seeded RNG against several
KaiwuClusters and a reconciler in its own process, with the failover policy's invariants checked
from the API, the audit log and the simulated KaiwuDB's truth all the way through.

tests/world_stories/chaos/test_soak.py drives it (short mode under pytest, long mode with
KAIWU_SOAK=long or `make soak`); docs/testworld.md ("The chaos soak") says what it promises.

Three parts, each a thread or a loop of its own:
- `Observer` polls the API every `poll_s` (pods, claims, volumes, StatefulSets, KaiwuClusters)
  and keeps a timeline of samples: which pod ordinals of which cluster were Ready when;
- `Chaos` picks a fault every so often (exponential gaps, weighted kinds, targets from the RNG)
  and schedules its undo, under a budget that keeps the harness itself from destroying data
  (see `Chaos._volume_lost`);
- `Invariants` reads the audit log as it grows, plus every `kwbase node decommission` the
  simulated KaiwuDB receives (`tap_decommissions`: with its truth at that moment), and judges
  each of the reconciler's disruptive acts. tests/world_stories/chaos/test_invariants.py shows
  it catching each kind of break from made-up samples and audit lines.

The invariants, as docs/lifecycle.md ("The KaiwuDB lifecycle": failover, scale-in, rolling
upgrades) and
/work/shared/design.md promise them:
- one-at-a-time: a disruptive act of the reconciler on ordinal i of a cluster (a pod or claim
  deleted by its ServiceAccount, a pod deleted by the StatefulSet controller because the
  reconciler moved the rollout partition, a live node decommissioned for a scale-in) never
  happens while another ordinal j of that cluster is down (pod absent, terminating or not Ready,
  whoever caused it: harness faults count) and has been for the whole window `window_s` before
  the act. The window allows for the reconciler's view being that old (cache, a pass of execs,
  the StatefulSet controller's reaction). Exempt, as the policy says: the steps that finish a
  disruption already made (a Pending pod whose claim is gone, `ClaimGone`; a dead node id
  decommissioned, `StoreReplaced`), and the removal of a pod a scale-in has drained;
- claims: the reconciler deletes a claim only for a scale-in (ordinal >= spec.replicas) or
  when the cluster's policy says `replaceLostVolumes` and the volume's node has been lost (by
  the harness) for at least `nodeLostTimeout`;
- decommission: no node id that the simulated KaiwuDB counts live at that moment is
  decommissioned, except the target of a scale-in (ordinal >= spec.replicas);
- pause: no write by the reconciler for a paused cluster's objects (status, Events and the
  drift comparison's dry runs aside; a `kwbase` exec counts when it changes KaiwuDB) from the
  moment its status says Paused until the harness removes the annotation;
- convergence: once the faults stop and are healed, every cluster is Ready (no failure, the
  generation observed) within `converge_bound_s`.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import PAUSED_ANNOTATION, Obj, meta
from tests.support.harness import REPO
from tests.world.controlplane import ControlPlane
from tests.world.simworld import SimWorld

GROUP, VERSION, PLURAL = "kaiwu.inspur.com", "v1", "kaiwuclusters"
STS_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"
# kwbase commands that change KaiwuDB (everything else the reconciler execs only reads).
WRITING_COMMANDS = ("decommission", "recommission", "init", "quit", "drain")


@dataclass(frozen=True)
class SoakSettings:
    """How long and how hard the soak runs. Defaults are the short (CI) mode.

    seed: the RNG's seed (printed; give it back to replay the same choices as far as the
        world, whose timings vary with load, lets the same targets be picked).
    chaos_s: how long faults are injected.
    mean_gap_s: mean of the exponential gap between two faults.
    window_s: how old the reconciler's view of a pod may be when it acts (see the module
        docstring); generous because two shared cores make passes slow.
    converge_bound_s: the promise: every cluster Ready this long after the faults stop.
    poll_s: the Observer's sampling period.
    restore_s: (min, max) seconds before a lost node, a crash loop or an unready pod is
        healed.
    apiserver_every_s: at most one apiserver restart in this long.
    """

    seed: int
    chaos_s: float = 100.0
    mean_gap_s: float = 3.5
    window_s: float = 10.0
    converge_bound_s: float = 240.0
    poll_s: float = 0.5
    restore_s: tuple[float, float] = (12.0, 40.0)
    apiserver_every_s: float = 60.0


@dataclass(frozen=True)
class ClusterPlan:
    """One cluster of the soak and what happens to it on top of random faults."""

    name: str
    replicas: int
    replace_lost_volumes: bool
    node_lost_timeout_s: float = 5.0
    scale_in_to: int | None = None  # a scale-in issued mid-soak
    upgrade_to: str | None = None  # a version change issued mid-soak


@dataclass(frozen=True)
class ClusterSample:
    """One cluster as the API showed it at one moment."""

    ready: frozenset[int]  # ordinals whose pod exists, is not terminating and is Ready
    sts_replicas: int | None
    spec_replicas: int | None
    paused_seen: bool  # Reconciling=False with reason Paused
    claims: dict[int, tuple[str, bool]]  # ordinal -> (claim uid, terminating)
    claim_nodes: dict[str, str]  # claim name -> node its volume is pinned to


@dataclass(frozen=True)
class Sample:
    at: float  # time.time()
    clusters: dict[str, ClusterSample]


@dataclass(frozen=True)
class Decommission:
    """A `kwbase node decommission` the simulated KaiwuDB received, with its truth then."""

    at: float
    cluster: str
    node_ids: tuple[int, ...]
    live: dict[int, bool]
    decommissioning: dict[int, bool]
    pod_of: dict[int, str]


@dataclass(frozen=True)
class Break:
    invariant: str
    at: float
    what: str


def ordinal_of(name: str, cluster: str, prefix: str = "") -> int | None:
    match = re.fullmatch(re.escape(prefix + cluster) + r"-(\d+)", name)
    return int(match.group(1)) if match else None


def audit_time(event: dict[str, Any]) -> float:
    stamp = str(event.get("requestReceivedTimestamp") or event.get("stageTimestamp"))
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Observer:
    """Samples the namespace through the API every poll_s; a gap while the apiserver restarts."""

    def __init__(self, api: k8s.ApiClient, namespace: str, clusters: Sequence[str],
                 poll_s: float) -> None:
        self.kube = Kube(api, "chaos-observer", timeout=3.0)
        self.namespace = namespace
        self.clusters = tuple(clusters)
        self.poll_s = poll_s
        self.samples: list[Sample] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-observer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sample: Sample | None = self.sample()
            except Exception:  # the apiserver is restarting: a gap in the timeline
                sample = None
            if sample is not None:
                with self.lock:
                    self.samples.append(sample)
            self._stop.wait(self.poll_s)

    def sample(self) -> Sample:
        ns = self.namespace
        at = time.time()
        pods, _ = self.kube.list_objects(kk.POD, ns)
        claims, _ = self.kube.list_objects(kk.PVC, ns)
        volumes = {meta(v)["name"]: v for v in self.kube.list_objects(kk.PV)[0]}
        sets = {meta(s)["name"]: s for s in self.kube.list_objects(kk.STATEFUL_SET, ns)[0]}
        kwcs = {meta(c)["name"]: c for c in self.kube.list_objects(kk.KAIWU_CLUSTER, ns)[0]}
        found: dict[str, ClusterSample] = {}
        for name in self.clusters:
            ready: set[int] = set()
            for pod in pods:
                ordinal = ordinal_of(meta(pod)["name"], name)
                if ordinal is None or meta(pod).get("deletionTimestamp"):
                    continue
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (pod.get("status") or {}).get("conditions") or ()):
                    ready.add(ordinal)
            owned: dict[int, tuple[str, bool]] = {}
            claim_nodes: dict[str, str] = {}
            for claim in claims:
                ordinal = ordinal_of(meta(claim)["name"], name, "data-")
                if ordinal is None:
                    continue
                owned[ordinal] = (str(meta(claim)["uid"]),
                                  bool(meta(claim).get("deletionTimestamp")))
                node = pinned_node(volumes.get(claim["spec"].get("volumeName") or ""))
                if node:
                    claim_nodes[meta(claim)["name"]] = node
            sts = sets.get(name)
            kwc = kwcs.get(name) or {}
            conditions = (kwc.get("status") or {}).get("conditions") or ()
            reconciling: dict[str, Any] = next(
                (c for c in conditions if c.get("type") == "Reconciling"), {})
            found[name] = ClusterSample(
                ready=frozenset(ready),
                sts_replicas=sts["spec"].get("replicas") if sts else None,
                spec_replicas=(kwc.get("spec") or {}).get("replicas"),
                paused_seen=reconciling.get("reason") == "Paused",
                claims=owned, claim_nodes=claim_nodes)
        return Sample(at, found)

    def window(self, start: float, end: float) -> list[Sample]:
        with self.lock:
            return [s for s in self.samples if start <= s.at <= end]

    def first_after(self, at: float) -> Sample | None:
        with self.lock:
            return next((s for s in self.samples if s.at > at), None)

    def last_before(self, at: float) -> Sample | None:
        with self.lock:
            before = [s for s in self.samples if s.at <= at]
        return before[-1] if before else None


def pinned_node(volume: Obj | None) -> str:
    """The node a local volume's nodeAffinity pins it to ('' if none)."""
    required = (((volume or {}).get("spec") or {}).get("nodeAffinity") or {}).get(
        "required") or {}
    for term in required.get("nodeSelectorTerms") or ():
        for expr in term.get("matchExpressions") or ():
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("values"):
                return str(expr["values"][0])
    return ""


class DecommissionLog:
    """The decommissions seen so far (appended by DecommissionTap, read by Invariants)."""

    def __init__(self) -> None:
        self.seen: list[Decommission] = []
        self.lock = threading.Lock()

    def add(self, decommission: Decommission) -> None:
        with self.lock:
            self.seen.append(decommission)

    def since(self, count: int) -> list[Decommission]:
        with self.lock:
            return list(self.seen[count:])


def tap_decommissions(world: SimWorld, log: DecommissionLog) -> None:
    """Wrap the simulated KaiwuDB's exec to record each decommission with the truth then."""
    original = world.kwdb.exec

    def exec_(cluster: tuple[str, str], pod_name: str, argv: Sequence[str], now: float) -> Any:
        args = list(argv)
        if "node" in args and "decommission" in args:
            ids = tuple(int(a) for a in args[args.index("decommission") + 1:] if a.isdigit())
            views = {v.node_id: v for v in world.kwdb.nodes(cluster, now)}
            log.add(Decommission(
                time.time(), cluster[1], ids, {i: v.is_live for i, v in views.items()},
                {i: v.decommissioning for i, v in views.items()},
                {i: v.pod_name for i, v in views.items()}))
        return original(cluster, pod_name, argv, now)

    world.kwdb.exec = exec_  # type: ignore[method-assign]


@dataclass
class NodeLoss:
    node: str
    lost_at: float
    restored_at: float | None = None


@dataclass
class Ledger:
    """What the harness did: the faults by kind, and the facts the invariants need."""

    faults: Counter[str] = field(default_factory=Counter)
    node_losses: list[NodeLoss] = field(default_factory=list)
    # cluster -> list of [paused_at, resumed_at or None]
    pauses: dict[str, list[list[float | None]]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, kind: str, what: str) -> None:
        with self.lock:
            self.faults[kind] += 1
            self.log.append(f"{time.strftime('%H:%M:%S')} {kind}: {what}")

    def lost_for(self, node: str, at: float) -> float:
        """How long the node had been lost by the harness at `at` (0 if it was up)."""
        with self.lock:
            for loss in self.node_losses:
                if loss.node == node and loss.lost_at <= at and (
                        loss.restored_at is None or loss.restored_at >= at):
                    return at - loss.lost_at
        return 0.0


class Invariants:
    """Judges the reconciler's acts as the audit log and the simulated KaiwuDB record them."""

    def __init__(self, plane: ControlPlane, namespace: str, reconciler_user: str,
                 plans: Sequence[ClusterPlan], observer: Observer, tap: DecommissionLog,
                 ledger: Ledger, window_s: float, *, verbose: bool = True) -> None:
        self.verbose = verbose  # print each break as it is found
        self.plane = plane
        self.namespace = namespace
        self.user = reconciler_user
        self.plans = {p.name: p for p in plans}
        self.observer = observer
        self.tap = tap
        self.ledger = ledger
        self.window_s = window_s
        self.checked: Counter[str] = Counter()
        self.acts: Counter[str] = Counter()  # what the reconciler did, by kind
        self.breaks: list[Break] = []
        self._offset = 0
        self._decommissions = 0
        self._pending: list[dict[str, Any]] = []
        self._writes: list[tuple[float, str, str]] = []  # (at, cluster, what) of the reconciler

    # ----- reading -----
    def _new_events(self) -> list[dict[str, Any]]:
        path = self.plane.audit_log_path
        if not path.exists():
            return []
        events: list[dict[str, Any]] = []
        with path.open("rb") as fh:
            if os.fstat(fh.fileno()).st_size < self._offset:
                # Rotated or truncated: what was appended meanwhile is gone, so say so.
                raise RuntimeError(f"the audit log {path} shrank below the {self._offset} bytes "
                                   "already read; the invariants can no longer see every write")
            fh.seek(self._offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            ref = event.get("objectRef") or {}
            if event.get("stage") == "ResponseComplete" and ref.get("namespace") == \
                    self.namespace:
                events.append(event)
        return events

    def check(self, settle_s: float = 2.0) -> None:
        """Judge everything recorded up to settle_s ago (the Observer has sampled past it)."""
        self._pending.extend(self._new_events())
        horizon = time.time() - settle_s
        ready = [e for e in self._pending if audit_time(e) <= horizon]
        self._pending = [e for e in self._pending if audit_time(e) > horizon]
        for event in ready:
            self._judge_event(event)
        decommissions = [d for d in self.tap.since(self._decommissions) if d.at <= horizon]
        self._decommissions += len(decommissions)
        for decommission in decommissions:
            self._judge_decommission(decommission)
        self._judge_pauses(horizon)

    def _broken(self, invariant: str, at: float, what: str) -> None:
        self.breaks.append(Break(invariant, at, what))
        shown = time.strftime("%H:%M:%S", time.localtime(at))
        if self.verbose:
            print(f"[chaos] INVARIANT BROKEN {invariant} at {shown}: {what}")

    # ----- one event -----
    def _cluster_of(self, name: str) -> str | None:
        for cluster in self.plans:
            if name == cluster or name.startswith(cluster + "-") or \
                    name.startswith(f"data-{cluster}-"):
                return cluster
        return None

    def _judge_event(self, event: dict[str, Any]) -> None:
        ref = event.get("objectRef") or {}
        username = (event.get("user") or {}).get("username")
        code = (event.get("responseStatus") or {}).get("code") or 0
        verb, resource = event.get("verb"), ref.get("resource")
        name, sub = str(ref.get("name") or ""), ref.get("subresource")
        cluster = self._cluster_of(name)
        at = audit_time(event)
        if cluster is None or code >= 400:
            return
        if username == self.user:
            writing = verb in {"create", "update", "patch", "delete", "deletecollection"} and \
                resource not in {"events", "leases"} and not (
                    resource == "kaiwuclusters" and sub == "status")
            uri = str(event.get("requestURI") or "")
            if resource == "pods" and sub == "exec":
                writing = any(f"command={word}" in uri for word in WRITING_COMMANDS)
            if "dryRun=All" in uri:
                writing = False  # the drift comparison's server-side dry run changes nothing
            if writing:
                self._writes.append((at, cluster, f"{verb} {resource}/{name}"
                                     + (f"/{sub}" if sub else "")))
            if verb == "delete" and resource == "pods" and not sub:
                ordinal = ordinal_of(name, cluster)
                if ordinal is not None:
                    self.acts["pods deleted by the reconciler"] += 1
                    self._judge_pod_delete(cluster, ordinal, at, "the reconciler")
            if verb == "delete" and resource == "persistentvolumeclaims":
                ordinal = ordinal_of(name, cluster, "data-")
                if ordinal is not None:
                    self.acts["claims deleted by the reconciler"] += 1
                    self._judge_claim_delete(cluster, ordinal, name, at)
        elif username == STS_CONTROLLER and verb == "delete" and resource == "pods":
            ordinal = ordinal_of(name, cluster)
            if ordinal is not None:
                self.acts["pods deleted by the StatefulSet controller"] += 1
                self._judge_pod_delete(cluster, ordinal, at, "the StatefulSet controller")

    def _wanted(self, cluster: str, at: float) -> int | None:
        """spec.replicas when the reconciler acted: the smaller of the samples either side of
        `at` (it may have read a scale-in the Observer had not sampled yet; in this soak
        spec.replicas only ever goes down)."""
        found = [s.clusters[cluster].spec_replicas
                 for s in (self.observer.last_before(at), self.observer.first_after(at))
                 if s is not None and s.clusters[cluster].spec_replicas is not None]
        return min(v for v in found if v is not None) if found else None

    def _down_throughout(self, cluster: str, others: Sequence[int], at: float) -> list[int]:
        """Ordinals among `others` down for the whole window before `at`: not Ready in the
        last sample before the window, in every sample within it, and in the first sample
        after `at` (the reconciler may have seen a change the Observer had not yet sampled).
        Without samples on both sides nothing is claimed."""
        before = self.observer.last_before(at - self.window_s)
        after = self.observer.first_after(at)
        if before is None or after is None:
            return []
        samples = [before, *self.observer.window(at - self.window_s, at), after]
        return [j for j in others if all(j not in s.clusters[cluster].ready for s in samples)]

    def _one_at_a_time(self, cluster: str, ordinal: int, at: float, what: str) -> None:
        self.checked["one disruption at a time"] += 1
        last = self.observer.last_before(at)
        if last is None:
            return
        replicas = last.clusters[cluster].sts_replicas or 0
        down = self._down_throughout(cluster, [j for j in range(replicas) if j != ordinal], at)
        if down:
            self._broken("one disruption at a time", at,
                         f"{what} while {cluster} ordinal(s) {down} had been down for "
                         f"{self.window_s:g} s")

    def _judge_pod_delete(self, cluster: str, ordinal: int, at: float, who: str) -> None:
        last = self.observer.last_before(at)
        if last is None:
            return
        state = last.clusters[cluster]
        wanted = self._wanted(cluster, at)
        if wanted is not None and ordinal >= wanted:
            self.checked["scale-in removal (exempt)"] += 1
            return  # a pod a scale-in drained: the scale-in's decommission was judged
        claim = state.claims.get(ordinal)
        if who == "the reconciler" and (claim is None or claim[1]):
            self.checked["ClaimGone follow-up (exempt)"] += 1
            return  # finishes a disruption already made (its claim is gone)
        self._one_at_a_time(cluster, ordinal, at, f"{who} deleted pod {cluster}-{ordinal}")

    def _judge_claim_delete(self, cluster: str, ordinal: int, name: str, at: float) -> None:
        self.checked["claims deleted only by policy"] += 1
        plan = self.plans[cluster]
        wanted = self._wanted(cluster, at)
        if wanted is not None and ordinal >= wanted:
            return  # a scale-in's claim
        samples = self.observer.window(at - 60, at)
        node = next((s.clusters[cluster].claim_nodes[name] for s in reversed(samples)
                     if name in s.clusters[cluster].claim_nodes), "")
        lost_for = self.ledger.lost_for(node, at) if node else 0.0
        if not plan.replace_lost_volumes:
            self._broken("claims deleted only by policy", at,
                         f"claim {name} deleted though {cluster} has replaceLostVolumes off")
        elif lost_for < plan.node_lost_timeout_s:
            self._broken("claims deleted only by policy", at,
                         f"claim {name} (volume on {node or 'unknown node'}) deleted, its node "
                         f"lost for {lost_for:.1f} s < nodeLostTimeout "
                         f"{plan.node_lost_timeout_s:g} s")
        self._one_at_a_time(cluster, ordinal, at, f"the reconciler deleted claim {name}")

    def _judge_decommission(self, d: Decommission) -> None:
        wanted = self._wanted(d.cluster, d.at)
        for node_id in d.node_ids:
            self.checked["no live node decommissioned"] += 1
            if node_id not in d.live or d.decommissioning.get(node_id):
                continue  # unknown, or a repeat (a scale-in polls with --wait=none)
            self.acts["node ids decommissioned: " + ("live" if d.live[node_id] else "dead")] += 1
            if not d.live[node_id]:
                continue  # a dead node id: StoreReplaced, or a stray
            ordinal = ordinal_of(d.pod_of[node_id], d.cluster)
            if ordinal is not None and wanted is not None and ordinal >= wanted:
                self._one_at_a_time(d.cluster, ordinal, d.at,
                                    f"the scale-in decommissioned node {node_id} "
                                    f"({d.pod_of[node_id]})")
                continue
            self._broken("no live node decommissioned", d.at,
                         f"node {node_id} ({d.pod_of[node_id]}) of {d.cluster} was live")

    def _judge_pauses(self, horizon: float) -> None:
        """Writes for a paused cluster between 'status says Paused' and the resume."""
        writes = [w for w in self._writes if w[0] <= horizon]
        self._writes = [w for w in self._writes if w[0] > horizon]
        for at, cluster, what in writes:
            self.checked["no write while paused"] += 1
            for start, end in self.paused_intervals(cluster):
                if start < at < end:
                    self._broken("no write while paused", at, f"{what} while {cluster} paused")

    def paused_intervals(self, cluster: str) -> list[tuple[float, float]]:
        """(first sample showing Paused after the annotation, resume) of each pause."""
        found: list[tuple[float, float]] = []
        with self.ledger.lock:
            pauses = list(self.ledger.pauses.get(cluster, ()))
        for paused_at, resumed_at in pauses:
            assert paused_at is not None
            end = resumed_at if resumed_at is not None else float("inf")
            seen = [s.at for s in self.observer.window(paused_at, end)
                    if s.clusters[cluster].paused_seen]
            if seen:
                found.append((seen[0], end))
        return found


class ReconcilerProcesses:
    """`python -m reconciler` processes for one namespace, started and SIGKILLed in turn."""

    def __init__(self, kubeconfig: Path, namespace: str, logs: Path) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        index = len(self.started)
        argv = [sys.executable, "-m", "reconciler", "--kubeconfig", str(self.kubeconfig),
                "--watch-namespace", self.namespace, "--lease-namespace", self.namespace,
                "--lease-duration-s", "3", "--renew-deadline-s", "2", "--retry-period-s",
                "0.5", "--http-address", "127.0.0.1:0", "--log-format", "text",
                "--identity", f"reconciler-{index}"]
        with (self.logs / f"reconciler-{index}.log").open("wb") as out:
            popen = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        self.started.append(popen)
        return popen

    def last_words(self) -> str:
        """The last line the newest process logged."""
        log = self.logs / f"reconciler-{len(self.started) - 1}.log"
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        return lines[-1][:300] if lines else ""

    def running(self) -> subprocess.Popen[bytes] | None:
        alive = [p for p in self.started if p.poll() is None]
        return alive[-1] if alive else None

    def kill(self) -> None:
        popen = self.running()
        if popen is not None:
            popen.send_signal(signal.SIGKILL)
            popen.wait(10)

    def stop(self) -> None:
        for popen in self.started:
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
                try:
                    popen.wait(15)
                except subprocess.TimeoutExpired:
                    popen.kill()
                    popen.wait(5)


@dataclass(order=True)
class _Undo:
    at: float
    what: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class Chaos:
    """Injects the faults. Every choice comes from one seeded RNG."""

    WEIGHTS: ClassVar[dict[str, int]] = {
        "pod deleted": 3, "node powered off": 2, "node partitioned": 2, "crash loop": 2,
        "pod unready": 1, "volume lost": 1, "hand edit": 3, "reconciler SIGKILLed": 2,
        "apiserver restarted": 1, "cluster paused": 1,
    }

    def __init__(self, settings: SoakSettings, plane: ControlPlane, world: SimWorld,
                 admin: k8s.ApiClient, namespace: str, plans: Sequence[ClusterPlan],
                 reconcilers: ReconcilerProcesses, observer: Observer, ledger: Ledger) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.plane = plane
        self.world = world
        self.core = k8s.CoreV1Api(admin)
        self.apps = k8s.AppsV1Api(admin)
        self.custom = k8s.CustomObjectsApi(admin)
        self.namespace = namespace
        self.plans = list(plans)
        self.reconcilers = reconcilers
        self.observer = observer
        self.ledger = ledger
        self.undo: list[_Undo] = []
        self.lost_nodes: set[str] = set()
        self.crashing: set[str] = set()
        self.unready: set[str] = set()
        self.paused: set[str] = set()
        self.lost_volumes: set[str] = set()  # clusters with a lost volume not yet replaced
        self.last_apiserver_restart = 0.0
        self.skipped: Counter[str] = Counter()
        self.exited: list[str] = []  # reconcilers that ended by themselves, with their words
        self._down_since: float | None = None

    # ----- the loop -----
    def run(self, until: float, extra: Callable[[], None]) -> None:
        """Inject until `until` (time.time()), calling `extra` (the invariant check) between
        faults; scheduled undos run on time."""
        milestones = [(p, 0.25 + 0.2 * i) for i, p in enumerate(
            p for p in self.plans if p.scale_in_to or p.upgrade_to)]
        start = time.time()
        next_fault = start + self.rng.expovariate(1 / self.settings.mean_gap_s)
        while time.time() < until:
            now = time.time()
            self._run_undos(now)
            for plan, fraction in list(milestones):
                if now >= start + fraction * self.settings.chaos_s:
                    milestones.remove((plan, fraction))
                    self._milestone(plan)
            if now >= next_fault:
                self._one_fault()
                next_fault = time.time() + self.rng.expovariate(1 / self.settings.mean_gap_s)
            self.supervise()
            extra()
            time.sleep(0.2)

    def heal(self) -> None:
        """Run every pending undo now (nodes back, crash loops over, pauses lifted, lost
        volumes replaced by the runbook), and make sure a reconciler runs."""
        while self.undo:
            item = heapq.heappop(self.undo)
            self._safely(item.what, item.action)
        if self.reconcilers.running() is None:
            self.reconcilers.start()

    def supervise(self) -> None:
        """What the reconciler's Deployment does: a process that ended by itself (it exits
        when it cannot reach the apiserver at start) is started again, here after 2 s."""
        if self.reconcilers.running() is not None or any(
                u.what == "start a reconciler" for u in self.undo):
            self._down_since = None
            return
        if self._down_since is None:
            self._down_since = time.time()
            last = self.reconcilers.started[-1] if self.reconcilers.started else None
            if last is not None and last.returncode != -signal.SIGKILL:
                self.exited.append(f"exit {last.returncode}: {self.reconcilers.last_words()}")
        elif time.time() - self._down_since >= 2.0:
            self.reconcilers.start()
            self._down_since = None

    def _run_undos(self, now: float) -> None:
        while self.undo and self.undo[0].at <= now:
            item = heapq.heappop(self.undo)
            self._safely(item.what, item.action)
            self.ledger.log.append(f"{time.strftime('%H:%M:%S')} undo: {item.what}")

    def _later(self, delay: float, what: str, action: Callable[[], None]) -> None:
        heapq.heappush(self.undo, _Undo(time.time() + delay, what, action))

    def _safely(self, what: str, action: Callable[[], None]) -> None:
        for attempt in range(20):  # the apiserver may be restarting
            try:
                action()
                return
            except k8s.ApiException as error:
                if error.status in (404, 409):
                    return
                time.sleep(0.5)
            except Exception:
                if attempt == 19:
                    raise
                time.sleep(0.5)
        raise RuntimeError(f"chaos could not {what}")

    def _one_fault(self) -> None:
        kinds = list(self.WEIGHTS)
        for _ in range(5):
            kind = self.rng.choices(kinds, weights=[self.WEIGHTS[k] for k in kinds])[0]
            inject = getattr(self, "_" + kind.replace(" ", "_").replace("SIGKILLed",
                                                                          "killed"))
            done = False
            try:
                done = inject()
            except Exception as error:  # a fault that could not be made (API down)
                self.ledger.log.append(f"{kind}: not injected ({error})")
            if done:
                return
            self.skipped[kind] += 1

    # ----- helpers -----
    def _pods(self, cluster: str) -> list[str]:
        plan = next(p for p in self.plans if p.name == cluster)
        last = self.observer.last_before(time.time())
        replicas = (last.clusters[cluster].sts_replicas if last else None) or plan.replicas
        return [f"{cluster}-{i}" for i in range(replicas)]

    def _cluster(self) -> str:
        return self.rng.choice(self.plans).name

    # ----- the faults (each returns False when the budget says not now) -----
    def _pod_deleted(self) -> bool:
        cluster = self._cluster()
        pod = self.rng.choice(self._pods(cluster))
        self.core.delete_namespaced_pod(pod, self.namespace, _request_timeout=5)
        self.ledger.note("pod deleted", pod)
        return True

    def _lose(self, partition: bool) -> bool:
        if len(self.lost_nodes) >= 2:
            return False
        node = self.rng.choice([n for n in self.world.kubelet.node_names
                                if n not in self.lost_nodes])
        self.world.faults.lose_node(node, partition=partition)
        self.lost_nodes.add(node)
        kind = "node partitioned" if partition else "node powered off"
        with self.ledger.lock:
            loss = NodeLoss(node, time.time())
            self.ledger.node_losses.append(loss)
        self.ledger.note(kind, node)

        def restore() -> None:
            self.world.faults.restore_node(node)
            self.lost_nodes.discard(node)
            loss.restored_at = time.time()
        self._later(self.rng.uniform(*self.settings.restore_s), f"restore {node}", restore)
        return True

    def _node_powered_off(self) -> bool:
        return self._lose(partition=False)

    def _node_partitioned(self) -> bool:
        return self._lose(partition=True)

    def _crash_loop(self) -> bool:
        cluster = self._cluster()
        pod = self.rng.choice(self._pods(cluster))
        if pod in self.crashing:
            return False
        self.world.faults.crash_loop(self.namespace, pod, exit_code=1,
                                     message="chaos: simulated crash")
        self.crashing.add(pod)
        self.ledger.note("crash loop", pod)

        def stop() -> None:
            self.world.faults.stop_crash_loop(self.namespace, pod)
            self.crashing.discard(pod)
        self._later(self.rng.uniform(*self.settings.restore_s), f"end crash loop {pod}", stop)
        return True

    def _pod_unready(self) -> bool:
        cluster = self._cluster()
        pod = self.rng.choice(self._pods(cluster))
        if pod in self.unready:
            return False
        self.world.faults.set_unready(self.namespace, pod)
        self.unready.add(pod)
        self.ledger.note("pod unready", pod)

        def stop() -> None:
            self.world.faults.set_unready(self.namespace, pod, False)
            self.unready.discard(pod)
        self._later(self.rng.uniform(5.0, 20.0), f"end unready {pod}", stop)
        return True

    def _volume_lost(self) -> bool:
        """A disk dies. The harness must not destroy data itself: only in a cluster that the
        simulated KaiwuDB shows fully replicated with every node live, with no other fault of
        the harness on it (no pod on a lost node, crash-looping, unready or without its
        disk). After a while a person follows the runbook: delete the claim and the pod, and
        the StatefulSet makes a fresh volume."""
        cluster = self._cluster()
        key = (self.namespace, cluster)
        now = self.world.clock.now()
        health = self.world.kwdb.replication(key, now)
        views = self.world.kwdb.nodes(key, now)
        pods = self._pods(cluster)
        on_lost_nodes = [pod.metadata.name for pod in self.core.list_namespaced_pod(
            self.namespace, _request_timeout=5).items
                         if pod.metadata and pod.spec and pod.metadata.name in pods
                         and pod.spec.node_name in self.lost_nodes]
        busy = cluster in self.lost_volumes or on_lost_nodes or any(
            p in self.crashing or p in self.unready for p in pods)
        if busy or not health.initialized or health.unavailable or \
                health.underreplicated or any(
                    not v.is_live for v in views if not v.decommissioning):
            return False
        pod = self.rng.choice(pods)
        claim = f"data-{pod}"
        self.world.faults.lose_volume(self.namespace, claim)
        self.lost_volumes.add(cluster)
        self.ledger.note("volume lost", claim)

        def runbook() -> None:
            try:
                self.core.delete_namespaced_persistent_volume_claim(claim, self.namespace,
                                                                     _request_timeout=5)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise
            try:
                self.core.delete_namespaced_pod(pod, self.namespace, _request_timeout=5)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise
            self.lost_volumes.discard(cluster)
        self._later(self.rng.uniform(4.0, 10.0), f"runbook for {claim}", runbook)
        return True

    def _hand_edit(self) -> bool:
        cluster = self._cluster()
        edit = self.rng.choice(["label the client Service", "delete the client Service",
                                "annotate the StatefulSet", "change the client port"])
        if edit == "label the client Service":
            self.core.patch_namespaced_service(
                f"{cluster}-public", self.namespace,
                {"metadata": {"labels": {"edited-by": "chaos"}}}, _request_timeout=5)
        elif edit == "delete the client Service":
            self.core.delete_namespaced_service(f"{cluster}-public", self.namespace,
                                                _request_timeout=5, _preload_content=False)
        elif edit == "annotate the StatefulSet":
            self.apps.patch_namespaced_stateful_set(
                cluster, self.namespace,
                {"metadata": {"annotations": {"chaos/edited": str(time.time())}}},
                _request_timeout=5)
        else:
            service = self.core.read_namespaced_service(f"{cluster}-public", self.namespace,
                                                        _request_timeout=5)
            assert service.spec is not None and service.spec.ports
            self.core.patch_namespaced_service(
                f"{cluster}-public", self.namespace,
                [{"op": "replace", "path": "/spec/ports/0/port",
                  "value": service.spec.ports[0].port + 1000}], _request_timeout=5)
        self.ledger.note("hand edit", f"{cluster}: {edit}")
        return True

    def _reconciler_killed(self) -> bool:
        if self.reconcilers.running() is None:
            return False
        self.reconcilers.kill()
        self.ledger.note("reconciler SIGKILLed", f"pid {self.reconcilers.started[-1].pid}")
        def restart() -> None:
            if self.reconcilers.running() is None:
                self.reconcilers.start()
        self._later(self.rng.uniform(0.0, 4.0), "start a reconciler", restart)
        return True

    def _apiserver_restarted(self) -> bool:
        if time.time() - self.last_apiserver_restart < self.settings.apiserver_every_s:
            return False
        self.ledger.note("apiserver restarted", "etcd keeps its data")
        self.plane.restart_apiserver()
        self.last_apiserver_restart = time.time()
        return True

    def _cluster_paused(self) -> bool:
        if self.paused:
            return False
        cluster = self._cluster()
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, cluster,
            {"metadata": {"annotations": {PAUSED_ANNOTATION: "true"}}}, _request_timeout=5)
        pause: list[float | None] = [time.time(), None]
        with self.ledger.lock:
            self.ledger.pauses.setdefault(cluster, []).append(pause)
        self.paused.add(cluster)
        self.ledger.note("cluster paused", cluster)

        def resume() -> None:
            pause[1] = time.time()  # from here on writes are allowed again
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, cluster,
                {"metadata": {"annotations": {PAUSED_ANNOTATION: None}}}, _request_timeout=5)
            self.paused.discard(cluster)
        self._later(self.rng.uniform(10.0, 25.0), f"resume {cluster}", resume)
        return True

    def _milestone(self, plan: ClusterPlan) -> None:
        changes: dict[str, Any] = {}
        if plan.scale_in_to is not None:
            changes["replicas"] = plan.scale_in_to
            kind, what = "scale-in", f"{plan.name}: {plan.replicas} -> {plan.scale_in_to}"
        else:
            changes["version"] = plan.upgrade_to
            kind, what = "upgrade", f"{plan.name}: -> {plan.upgrade_to}"
        def patch() -> None:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, plan.name, {"spec": changes},
                _request_timeout=5)
        self._safely(kind, patch)
        self.ledger.note(kind, what)
