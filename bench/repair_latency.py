"""Benchmark: how soon a hand edit is repaired, and what an event storm costs, on the real
apiserver of the test world; the reconciler's token buckets beside the old fixed interval.

Run: `.venv/bin/python bench/repair_latency.py [--edits 100] [--storm 50]` (the test world must
be built: `make world`). It starts the control plane (no simulated kubelet: the cluster is parked,
its pods never schedule), then, once per limiter, in a namespace of its own, the production
`Runtime` (watch caches, work queue, two workers, the real Controller) with the dev example
cluster, and:

- **latency**: `--edits` hand edits of the StatefulSet (`kubectl set env` adds a variable), spaced
  0.2 to 2 s apart at random (fixed seed), each timed from the edit's answer to the watch event
  that shows it undone; p50, p99 and max;
- **storm**: `--storm` edits back to back, then quiet: how many reconciles they cost, and the
  seconds from the first edit to the last one's repair (before 2026-12-01 the table gave the
  seconds the script took to send the edits).

The two limiters are `ours` (the defaults: token buckets, echoes of our own writes free) and
`old` (`min_reconcile_interval_s=1`: one reconcile per cluster per second, echoes included).
Prints the table and appends it to bench/RESULTS.md with the date and the core count.
The world story tests/world_stories/drift/test_repair_latency.py runs the same measurement,
shorter, with loose bounds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from ruamel.yaml import YAML

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube, Watch
from reconciler.kube.kinds import Kind
from reconciler.model import Obj
from reconciler.runtime.process import Runtime
from reconciler.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
NAME = "dev"
EDIT_VAR = "KAIWU_BENCH_EDIT"
LIMITERS: dict[str, dict[str, Any]] = {
    "ours": {},  # the defaults: token buckets
    "old": {"min_reconcile_interval_s": 1.0},  # the fixed interval this replaced
}


@dataclass(frozen=True)
class Figures:
    """One limiter's measurements."""

    limiter: str
    latencies_s: tuple[float, ...]
    throttled: int  # edits' reconciles the limiter held back (WorkQueue.throttled)
    storm_edits: int
    storm_reconciles: int
    storm_s: float

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_s)


def parked_dev(namespace: str, *, every_kind: bool = False) -> Obj:
    """The dev example with a node selector no node has: its pods stay Pending. every_kind:
    with TLS (the reconciler's own certificates, a SQL user's among them), a
    PodDisruptionBudget and a NetworkPolicy, so that it owns an object of each kind a user can
    delete (DELETED)."""
    obj: Obj = YAML(typ="safe").load((ROOT / "clusters" / "dev.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["scheduling"] = {"nodeSelector": {"kaiwu.test/parked": "true"}}
    if every_kind:
        obj["spec"]["tls"] = {"enabled": True, "clientUsers": ["app"]}
        obj["spec"]["podDisruptionBudget"] = {"enabled": True}
        obj["spec"]["networkPolicy"] = {"enabled": True}
    return obj


# What a user can delete of the every-kind cluster, one of each kind, and the reconciler makes
# again: (kind, name). The Secret is a SQL user's client certificate, which is reissued from
# the cluster's CA (a deleted CA Secret is never remade while certificates signed by it exist:
# reconciler.kaiwudb.certs).
DELETED: tuple[tuple[Kind, str], ...] = (
    (kk.SERVICE, "dev-public"), (kk.SERVICE, "dev"), (kk.SERVICE_ACCOUNT, "dev"),
    (kk.PDB_V1BETA1, "dev"), (kk.NETWORK_POLICY, "dev"), (kk.SECRET, "dev-client-app-certs"),
    (kk.STATEFUL_SET, "dev"))


def _env(obj: Obj) -> list[dict[str, Any]]:
    containers = obj["spec"]["template"]["spec"]["containers"]
    env: list[dict[str, Any]] = containers[0].get("env") or []
    return env


def edited(obj: Obj) -> bool:
    return any(item.get("name") == EDIT_VAR for item in _env(obj))


class ObjectEvents:
    """Every watch event of one named object of one kind, timestamped on arrival."""

    def __init__(self, kube: Kube, kind: Kind, namespace: str, name: str) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self._seen: list[tuple[float, str, int, Obj]] = []  # (arrival, type, version, object)
        self._cond = threading.Condition()
        self._watch: Watch | None = None
        self._thread = threading.Thread(target=self._run, name=f"bench-watch-{kind.kind}",
                                        daemon=True)

    def start(self, resource_version: str) -> None:
        self._watch = self.kube.watch(self.kind, resource_version, self.namespace,
                                      timeout_seconds=3600)
        self._thread.start()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.close()

    def _run(self) -> None:
        assert self._watch is not None
        for kind, obj in self._watch:
            if kind == "BOOKMARK" or obj.get("metadata", {}).get("name") != self.name:
                continue
            entry = (time.monotonic(), kind, int(obj["metadata"]["resourceVersion"]), obj)
            with self._cond:
                self._seen.append(entry)
                self._cond.notify_all()

    def first_after(self, version: int, timeout_s: float,
                    matches: Callable[[str, Obj], bool]) -> float:
        """When the first event after `version` that `matches` (event type, object) arrived."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for arrival, kind, seen, obj in self._seen:
                    if seen > version and matches(kind, obj):
                        return arrival
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no such {self.kind.kind} event within {timeout_s} s "
                                       f"of version {version}")
                self._cond.wait(left)

    def repaired_after(self, version: int, timeout_s: float) -> float:
        """When the first event after `version` showing the edit undone arrived."""
        return self.first_after(version, timeout_s, lambda _, obj: not edited(obj))

    def recreated_after(self, version: int, timeout_s: float) -> float:
        """When the object came back (an ADDED event after `version`)."""
        return self.first_after(version, timeout_s, lambda kind, _: kind == "ADDED")


def edit(kube: k8s.ApiClient, namespace: str, value: str) -> int:
    """`kubectl set env statefulset/dev KAIWU_BENCH_EDIT=value`; the stored resourceVersion."""
    answer = k8s.AppsV1Api(kube).patch_namespaced_stateful_set(
        NAME, namespace, {"spec": {"template": {"spec": {"containers": [
            {"name": "kwbase", "env": [{"name": EDIT_VAR, "value": value}]}]}}}},
        field_manager="kubectl-set")
    assert answer.metadata is not None and answer.metadata.resource_version is not None
    return int(answer.metadata.resource_version)


def reconciles(runtime: Runtime) -> float:
    return runtime.metrics.value("kaiwu_reconcile_total", {"result": "success"})


def wait_quiet(runtime: Runtime, quiet_s: float, timeout_s: float = 60.0) -> None:
    """Until no reconcile started for quiet_s."""
    deadline = time.monotonic() + timeout_s
    last, since = reconciles(runtime), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = reconciles(runtime)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s and runtime.queue.depth == 0 \
                and runtime.queue.processing() == 0:
            return
    raise TimeoutError("the reconciler did not go quiet")


def new_namespace(admin: k8s.ApiClient, prefix: str) -> str:
    core = k8s.CoreV1Api(admin)
    name = f"{prefix}-{os.urandom(3).hex()}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


@contextmanager
def reconciling(kubeconfig: Path, admin: k8s.ApiClient, namespace: str, *,
                every_kind: bool = False,
                **changes: Any) -> Iterator[tuple[Runtime, ObjectEvents]]:
    """The production runtime for `namespace`, the parked dev cluster (`parked_dev`) applied
    and settled, and a watch on its StatefulSet."""
    settings = Settings(kubeconfig=str(kubeconfig), watch_namespace=namespace,
                        leader_election=False, http_address="127.0.0.1:0",
                        identity=f"bench-{namespace}", log_format="text",
                        log_level="warning",
                        # Every edit is the same person's: not a fight to back off from.
                        fight_threshold=10_000, **changes)
    runtime = Runtime(settings)
    runtime.start()
    events: ObjectEvents | None = None
    try:
        user = Kube(admin, "kubectl")
        user.apply(parked_dev(namespace, every_kind=every_kind))
        deadline = time.monotonic() + 60
        while user.get(kk.STATEFUL_SET, namespace, NAME) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the reconciler made no StatefulSet")
            time.sleep(0.1)
        wait_quiet(runtime, 2.0)
        live = user.get(kk.STATEFUL_SET, namespace, NAME)
        assert live is not None
        events = ObjectEvents(Kube(admin, "bench"), kk.STATEFUL_SET, namespace, NAME)
        events.start(str(live["metadata"]["resourceVersion"]))
        yield runtime, events
    finally:
        if events is not None:
            events.stop()
        runtime.stop()


def measure_latency(admin: k8s.ApiClient, namespace: str, events: ObjectEvents,
                    edits: int, spacing_s: tuple[float, float], seed: int = 14) -> list[float]:
    """`edits` hand edits spaced at random within spacing_s; seconds until each is undone."""
    rng = random.Random(seed)
    latencies = []
    for index in range(edits):
        time.sleep(rng.uniform(*spacing_s))
        version = edit(admin, namespace, f"latency-{index}")
        stored = time.monotonic()
        latencies.append(events.repaired_after(version, 30.0) - stored)
    return latencies


def measure_storm(admin: k8s.ApiClient, namespace: str, runtime: Runtime,
                  events: ObjectEvents, edits: int) -> tuple[int, float]:
    """`edits` hand edits back to back; the reconciles they cost, and the seconds from the first
    edit to the last one's repair (the window in which the limiter hands out tokens: the watch
    events of the last edits can arrive after the script has finished)."""
    time.sleep(3.0)  # quiet first: every bucket full
    before = reconciles(runtime)
    started = time.monotonic()
    version = 0
    for index in range(edits):
        version = edit(admin, namespace, f"storm-{index}")
    events.repaired_after(version, 30.0)
    storm_s = time.monotonic() - started
    wait_quiet(runtime, 2.5)
    return int(reconciles(runtime) - before), storm_s


# Deletes are spaced wider than edits: a delete costs a cluster more than one token's worth of
# events (the delete; after our create, the StatefulSet controller's status reports or the
# token controller's), so deletes a second apart would measure the rate limit (3 at once, then
# one a second per cluster), which the edit storm measures already.
DELETE_SPACING_S = (1.0, 3.0)


def measure_deletes(admin: k8s.ApiClient, namespace: str, kind: Kind, name: str, count: int,
                    spacing_s: tuple[float, float], seed: int = 31) -> list[float]:
    """`count` deletes of one object (`kubectl delete`, background propagation), spaced at
    random within spacing_s; seconds from each delete's watch event until the new object's."""
    rng = random.Random(seed)
    user = Kube(admin, "kubectl")
    live = user.get(kind, namespace, name)
    if live is None:
        raise LookupError(f"{kind.kind} {namespace}/{name} does not exist")
    events = ObjectEvents(Kube(admin, "bench"), kind, namespace, name)
    events.start(str(live["metadata"]["resourceVersion"]))
    latencies = []
    try:
        for _ in range(count):
            time.sleep(rng.uniform(*spacing_s))
            live = user.get(kind, namespace, name)
            assert live is not None, f"{kind.kind} {name} was not made again"
            version = int(live["metadata"]["resourceVersion"])
            user.delete(kind, namespace, name, propagation="Background")
            # Both ends as the watch saw them (the delete's answer can come after the new
            # object's event).
            deleted = events.first_after(version, 30.0, lambda kind, _: kind == "DELETED")
            latencies.append(events.recreated_after(version, 30.0) - deleted)
    finally:
        events.stop()
    return latencies


def pdb_kind(admin: k8s.ApiClient) -> Kind:
    """The PodDisruptionBudget version the server serves (policy/v1 from Kubernetes 1.21)."""
    served = {group.name: [v.version for v in group.versions]
              for group in k8s.ApisApi(admin).get_api_versions().groups}
    return kk.PDB_V1 if "v1" in served.get("policy", ()) else kk.PDB_V1BETA1


def run_deletes(kubeconfig: Path, admin: k8s.ApiClient, count: int,
                spacing_s: tuple[float, float] = DELETE_SPACING_S
                ) -> list[tuple[str, list[float]]]:
    """Each object of DELETED deleted `count` times under the production runtime (defaults)."""
    namespace = new_namespace(admin, "bench-repair-deletes")
    results = []
    try:
        with reconciling(kubeconfig, admin, namespace, every_kind=True):
            for kind, name in DELETED:
                if kind.kind == "PodDisruptionBudget":
                    kind = pdb_kind(admin)
                results.append((f"{kind.kind} {name}", measure_deletes(
                    admin, namespace, kind, name, count, spacing_s)))
    finally:
        k8s.CoreV1Api(admin).delete_namespace(namespace)
    return results


def run(kubeconfig: Path, admin: k8s.ApiClient, limiter: str, *, edits: int, storm: int,
        spacing_s: tuple[float, float] = (0.2, 2.0)) -> Figures:
    namespace = new_namespace(admin, f"bench-repair-{limiter}")
    try:
        with reconciling(kubeconfig, admin, namespace, **LIMITERS[limiter]) as (runtime, events):
            before = runtime.queue.throttled
            latencies = measure_latency(admin, namespace, events, edits, spacing_s)
            throttled = runtime.queue.throttled - before
            storm_reconciles, storm_s = measure_storm(admin, namespace, runtime, events, storm)
    finally:
        k8s.CoreV1Api(admin).delete_namespace(namespace)
    return Figures(limiter, tuple(latencies), throttled, storm, storm_reconciles, storm_s)


def table(results: list[Figures]) -> str:
    lines = ["| limiter | edits | p50 | p99 | max | held back | storm: edits -> reconciles |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for figures in results:
        lines.append(
            f"| {figures.limiter} | {len(figures.latencies_s)} | "
            f"{figures.p50 * 1000:.0f} ms | {figures.quantile(0.99) * 1000:.0f} ms | "
            f"{max(figures.latencies_s) * 1000:.0f} ms | {figures.throttled} | "
            f"{figures.storm_edits} in "
            f"{figures.storm_s:.2f} s -> {figures.storm_reconciles} |")
    return "\n".join(lines)


def deletes_table(results: list[tuple[str, list[float]]]) -> str:
    lines = ["| deleted | deletes | p50 | p99 | max |", "| --- | --- | --- | --- | --- |"]
    for what, latencies in results:
        ordered = sorted(latencies)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        lines.append(f"| {what} | {len(latencies)} | {statistics.median(latencies) * 1000:.0f} "
                     f"ms | {p99 * 1000:.0f} ms | {max(latencies) * 1000:.0f} ms |")
    return "\n".join(lines)


def append_results(text: str, edits: int, deletes: int, load: float) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    method = []
    if edits:
        method.append(
            f"Latency: {edits} hand edits of the StatefulSet (an env var added) spaced 0.2-2 s "
            f"apart, from the edit's answer to the watch event showing it undone; held back: "
            f"reconciles the limiter delayed during them. `ours`: token buckets (defaults: 3 "
            f"per cluster, 1/s; echoes of our own writes free); `old`: "
            f"`min_reconcile_interval_s=1`. Storm seconds: from the first edit to the last "
            f"one's repair.")
    if deletes:
        method.append(
            f"Deletes: each object {deletes} times (`kubectl delete`), spaced "
            f"{DELETE_SPACING_S[0]:g}-{DELETE_SPACING_S[1]:g} s apart, "
            f"from the delete's watch event to the one of the object made again; the "
            f"cluster has TLS with a SQL user, a PodDisruptionBudget and a NetworkPolicy.")
    section = (
        f"\n## Repair latency and event storms (`bench/repair_latency.py`)\n\n"
        f"{stamp}, {os.cpu_count()} cores, load average {load:.1f} at the end (the machine is "
        f"shared). Real kube-apiserver 1.20.2 (test world), production "
        f"runtime with the real Controller, dev cluster parked. {' '.join(method)} "
        f"Target: p50 <= 100 ms, p99 <= 500 ms, a 50-edit storm a handful of reconciles.\n\n"
        f"{text}\n")
    if not RESULTS.exists():
        RESULTS.write_text("# Benchmark results\n\nAppended by the scripts in bench/, newest "
                           "last.\n")
    with RESULTS.open("a") as out:
        out.write(section)


def main() -> None:
    from tests.world.controlplane import ControlPlane  # the test world: only for running

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--storm", type=int, default=50)
    parser.add_argument("--deletes", type=int, default=20,
                        help="deletes of each object in DELETED (0: none)")
    parser.add_argument("--no-append", action="store_true",
                        help="print only; do not append to bench/RESULTS.md")
    args = parser.parse_args()
    with ControlPlane() as plane:
        admin = plane.api_client()
        results = [run(plane.kubeconfig_path, admin, limiter, edits=args.edits,
                       storm=args.storm) for limiter in LIMITERS] if args.edits else []
        deletes = run_deletes(plane.kubeconfig_path, admin, args.deletes) \
            if args.deletes else []
    text = "\n\n".join(part for part in (table(results) if results else "",
                                          deletes_table(deletes) if deletes else "") if part)
    load = os.getloadavg()[0]
    print(text)
    print(f"load average at the end: {load:.1f}")
    if not args.no_append:
        append_results(text, args.edits, args.deletes, load)


if __name__ == "__main__":
    main()
