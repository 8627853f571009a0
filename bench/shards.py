"""Benchmark: a fleet split over shards (issue 31 item 4): per shard, the cold start (lists to the
end of the first full pass), one resync at rest, memory, the writes made at rest; and the move
of one cluster from one shard to another.

Run: `.venv/bin/python bench/shards.py [--clusters 10000] [--shards 4]`. Appends its figures to
bench/RESULTS.md (docs/sharding.md "Sharding" says what a shard is; the method is below, the
figures and what they mean for a fleet in docs/performance.md).

The fleet: `bench.fleet.live_fleet(n)`, cluster i labelled for shard i mod N (shard 0 is the
unnamed one: no label; shard j the label kaiwu.inspur.com/shard=sj). The API server: one
`FleetApi` (tests/support/fake_api.py's FakeApi, the calls of reconciler.kube.client.Kube answered
as kube-apiserver 1.20 does) holding every object of the fleet, in this process. The fleet's
objects are first brought AT REST: passes of the real Controller over it (caches filled by list
between passes) until a pass writes nothing, so the stored objects are what the reconciler would
have written (the generator's certificate Secrets are placeholders the reconciler replaces, and
it adds objects the generator does not render). That store is kept in ~/.cache/kaiwu-bench (keyed
by the fleet size, the shard count and the reconciler's source), as settling costs about a third
of a CPU second per cluster.

Each shard is a subprocess (its own heap: its VmHWM is the reconciler's alone, the API server's
store stays here). It runs the pieces `reconciler.runtime.process.Runtime.start` is made of, the
runtime's own code: `Caches` with the shard's `Settings` (the KaiwuCluster informer selected by
`Settings.shard_selector`, every other kind by the managed-by label, all clusters' objects),
the `Runtime`'s work queue, its leadership term (`_start_term`: wait for the caches, queue every
cluster, start the workers) and its workers (`_process` -> `Controller.reconcile`). What is not
the runtime's: the Kube handed to the caches and the Controller is `RemoteKube`, which sends each
call to this process over a local socket (pickled, where the real client parses JSON) instead of
an HTTP API server, so neither `GuardedKube`'s leader check nor the echo bookkeeping of our own
writes runs (there is no leader election and, at rest, no write), and the health server and
webhook are not started. A watch here waits for the store's next change of its kind and delivers
it as the 1.20 watch cache does, selector transitions included (a cluster whose label leaves a
shard's selector arrives there as DELETED, at its new shard as ADDED: cacher.go's
convertToWatchEvent).

Figures per shard: cold start wall and CPU (from `Caches.start()` until every cluster of the
shard has had its first pass), the CPU the lists alone took, one resync at rest (every cluster
queued as `Runtime._resync_loop` does, until each has had its pass: CPU of the whole process),
the writes each made (must be 0 at rest), VmHWM. The move: the label of one cluster changed
here; timed until the new shard's pass of it ended (after `--shard-handover-s`, by design) and
until the old shard dropped it from its cache and ran its forgetting pass.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import itertools
import json
import logging
import os
import pickle
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any, cast

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import ROOT, STAMP, live_fleet
from bench.resync import append_results
from reconciler.controller.controller import Controller
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.cache import Caches, Echoes
from reconciler.kube.client import LIST_PAGE_SIZE, ApiError
from reconciler.kube.echo import OwnWrites
from reconciler.kube.kinds import Kind
from reconciler.kube.selection import selector_for
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.runtime.process import Runtime, default_controller
from reconciler.settings import SHARD_LABEL, Settings
from tests.support.fake_api import FakeApi, FakeWatch, StoreKey
from tests.support.selectors import selector_matches

CACHE = Path.home() / ".cache" / "kaiwu-bench"
SETTLE_ROUNDS = 6  # passes over the fleet before it must be at rest
WATCH_WAIT_S = 2.0  # a watch answers with what came within this long (then it is resumed)
MOVE_TIMEOUT_S = 120.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the shards and their selectors ------------------------------------------------------------

def shard_name(index: int, shards: int) -> str:
    """The shard of the fleet's cluster `index`: "" (the unnamed shard) or "s<j>"."""
    j = index % shards
    return f"s{j}" if j else ""


# ---- the API server ----------------------------------------------------------------------------

class FleetApi(FakeApi):
    """The fake API holding the whole fleet, with what the benchmark needs of a real server
    beyond FakeApi: watches that wait for the next change (a change log per kind, each change
    with the object's previous version, to turn a selector transition into ADDED or DELETED as
    the watch cache does), and a condition variable woken by every change."""

    def __init__(self, objects: dict[StoreKey, Obj]) -> None:
        self.changed = threading.Condition()
        # kind -> [(revision, type, object, previous version or None)]
        self.changes: dict[str, list[tuple[int, str, Obj, Obj | None]]] = {}
        self.execs: list[str] = []  # the kwbase commands run, in order
        super().__init__(objects)

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        items = [obj for (kind_, ns, _), obj in self.objects.items()
                 if kind_ == kind.kind and (not namespace or ns == namespace)
                 and selector_matches(label_selector, obj["metadata"].get("labels"))]
        if keep is not None:  # a caller in this process (the settling passes)
            items = [keep(copy.deepcopy(item)) for item in items]
        return items, str(self.revision)

    def changes_since(self, kind: Kind, since: int, namespace: str | None,
                      label_selector: str | None) -> list[tuple[str, Obj]]:
        """The watch events of `kind` after resourceVersion `since` under the selector
        (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go, convertToWatchEvent: an
        object that stops matching is DELETED, with its previous content at the event's
        resourceVersion; one that starts matching is ADDED)."""
        events = []
        for revision, type_, obj, prev in self.changes.get(kind.kind, ()):
            if revision <= since or (namespace and obj["metadata"].get("namespace") != namespace):
                continue
            now = type_ != "DELETED" and selector_matches(label_selector,
                                                          obj["metadata"].get("labels"))
            before = prev is not None and selector_matches(label_selector,
                                                           prev["metadata"].get("labels"))
            if now and not before:
                events.append(("ADDED", obj))
            elif now:
                events.append(("MODIFIED", obj))
            elif before and prev is not None:
                gone = copy.deepcopy(prev)
                gone["metadata"]["resourceVersion"] = str(revision)
                events.append(("DELETED", gone))
        return events

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        """kwbase in a running, initialised cluster whose nodes are all live: what the
        reconciler asks at rest. `kwbase init` answers as an initialised cluster does
        (kwbase/pkg/cli/init.go: "cluster has already been initialized"), `kwbase node status
        --decommission` lists one live node per pod of the StatefulSet (the columns of
        kwbase/pkg/cli/node.go:101-122). Anything else is refused (counted by the Server)."""
        self.execs.append(" ".join(command[1:3]))
        words = command[1:]
        if words[:1] == ["init"]:
            return ("", "ERROR: cluster has already been initialized\n"
                    'Failed running "init"\n', 1)
        sts = self.objects.get(("StatefulSet", namespace, pod.rsplit("-", 1)[0]))
        if words[:2] == ["node", "status"] and sts is not None:
            header = ("id,address,sql_address,build,started_at,updated_at,locality,"
                      "start_mode,is_available,is_live,gossiped_replicas,is_decommissioning,"
                      "is_draining")
            name, service = sts["metadata"]["name"], sts["spec"].get("serviceName", "")
            rows = [f"{i + 1},{name}-{i}.{service}.{namespace}.svc.cluster.local:26257,"
                    f"{name}-{i}:26257,V3.2.1,2026-11-30 08:00:00,2026-11-30 08:00:05,,start,"
                    f"true,true,{20 + i},false,false"
                    for i in range(int(sts["spec"].get("replicas", 1)))]
            return "\n".join([header, *rows]) + "\n", "", 0
        raise RuntimeError(f"the benchmark's kwbase does not answer {' '.join(words)}")

    def _record(self, type_: str, obj: Obj, before: Obj | None) -> None:
        prev = obj if type_ == "DELETED" else before
        with self.changed:
            self.changes.setdefault(obj["kind"], []).append(
                (self.revision, type_, copy.deepcopy(obj), prev))
            self.changed.notify_all()


def node(name: str) -> Obj:
    """A Ready Kubernetes node, as its kubelet reports it (the parts the caches keep)."""
    conditions = [{"type": kind, "status": "False", "reason": f"Kubelet{ok}",
                   "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP}
                  for kind, ok in (("MemoryPressure", "HasSufficientMemory"),
                                   ("DiskPressure", "HasNoDiskPressure"),
                                   ("PIDPressure", "HasSufficientPID"))]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "kubernetes.io/os": "linux"}},
            "spec": {"podCIDR": "10.244.0.0/24"},
            "status": {"conditions": conditions,
                       "capacity": {"cpu": "32", "memory": "131072Mi", "pods": "110"}}}


def store_of(count: int) -> dict[StoreKey, Obj]:
    """Every object of `live_fleet(count)`, and the Ready nodes its pods run on (about 30 pods
    a node, as a fleet's nodes would carry at most 110)."""
    objects: dict[StoreKey, Obj] = {}
    for index in range(nodes_for(count)):
        objects[("Node", "", f"node-{index}")] = node(f"node-{index}")
    for cluster in live_fleet(count, nodes=nodes_for(count)):
        for obj in cluster.cached():
            meta = obj["metadata"]
            objects[(obj["kind"], meta.get("namespace") or "", meta["name"])] = obj
    return objects


def label_shards(objects: dict[StoreKey, Obj], shards: int) -> None:
    """Cluster i (fleet-<i>) labelled for shard i mod `shards`, as its owner would have
    labelled it in git (the label changes nothing the reconciler writes)."""
    for (kind, _, name), obj in objects.items():
        if kind == "KaiwuCluster":
            shard = shard_name(int(name.rsplit("-", 1)[1]), shards)
            if shard:
                obj["metadata"].setdefault("labels", {})[SHARD_LABEL] = shard


def nodes_for(count: int) -> int:
    return max(20, count // 8)


def cluster_keys(objects: Mapping[StoreKey, Obj]) -> list[ClusterKey]:
    return sorted(ClusterKey(ns, name) for kind, ns, name in objects if kind == "KaiwuCluster")


def settle(api: FleetApi, settings: Settings, keys: list[ClusterKey]) -> int:
    """Passes of the Controller over the clusters `keys`, the caches listed afresh before each,
    until a pass writes nothing; returns the number of passes. Raises when they do not come to
    rest (a pass that always writes is what the benchmark is there to find)."""
    for round_ in range(1, SETTLE_ROUNDS + 1):
        caches = Caches(cast(Any, api), settings, Metrics(), on_key=lambda key: None)
        caches.informers[k.KAIWU_CLUSTER].label_selector = ""  # every shard's clusters
        selected = selector_for({key.name for key in keys})  # their objects, as a shard's
        for informer in caches.selection.informers:
            informer.label_selector = selected
        for informer in caches.informers.values():
            informer._list()
        controller = Controller(cast(Any, api), caches, settings, Metrics())
        before, started = len(api.writes), time.process_time()
        for done, key in enumerate(keys, 1):
            controller.reconcile(key)
            if done % 500 == 0:
                log(f"settling, pass {round_}: {done}/{len(keys)} clusters, "
                    f"{len(api.writes) - before} writes")
        written = api.writes[before:]
        log(f"settling, pass {round_}: {len(written)} writes {_tally({'': written})}, "
            f"{time.process_time() - started:.1f} s CPU")
        if not written:
            return round_
    raise SystemExit(f"the fleet is not at rest after {SETTLE_ROUNDS} passes; the last wrote "
                     f"{written[:10]}")


def settled_store(count: int, shards: int, measured: int) -> dict[StoreKey, Obj]:
    """The fleet, its clusters labelled for their shards, the clusters of the `measured`
    first shards at rest (the others as generated: no shard measured here lists them); from
    ~/.cache/kaiwu-bench when this source has settled it before."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("reconciler/**/*.py"), *ROOT.glob("renderer/**/*.py"),
                        ROOT / "bench" / "fleet.py"]):
        digest.update(path.read_bytes())
    # The kwbase answers' and the nodes' versions.
    digest.update(f"{FleetApi.exec.__doc__}{node('n')}{nodes_for(count)}".encode())
    digest.update(f"{shards}/{measured}".encode())
    cached = CACHE / f"shards-{count}-{digest.hexdigest()[:16]}.pickle"
    if cached.exists():
        log(f"the fleet at rest, from {cached}")
        found: dict[StoreKey, Obj] = pickle.loads(cached.read_bytes())
        return found
    log(f"generating {count} clusters")
    objects = store_of(count)
    label_shards(objects, shards)
    api = FleetApi(objects)
    ours = {shard_name(j, shards) for j in range(measured)}
    keys = [key for key in cluster_keys(api.objects)
            if shard_name(int(key.name.rsplit("-", 1)[1]), shards) in ours]
    log(f"settling the {len(keys)} clusters of the {measured} shards measured")
    passes = settle(api, Settings(leader_election=False), keys)
    log(f"at rest after {passes} passes")
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(pickle.dumps(api.objects, protocol=pickle.HIGHEST_PROTOCOL))
    return api.objects


class Server:
    """Answers RemoteKube's calls on FleetApi, one thread per connection, and counts the
    writes each shard made."""

    def __init__(self, api: FleetApi) -> None:
        self.api = api
        self.lock = threading.Lock()
        self.listener = Listener(family="AF_UNIX")
        self.writes: dict[str, list[tuple[str, str, str]]] = {}
        self.execs: dict[str, list[str]] = {}
        self.calls: dict[str, dict[str, int]] = {}  # shard -> method -> calls
        self._snapshots: dict[str, tuple[list[Obj], str, int]] = {}  # continue token -> list
        self._tokens = itertools.count()

    @property
    def address(self) -> str:
        return str(self.listener.address)

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            connection = self.listener.accept()
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: Connection) -> None:
        shard = connection.recv()
        try:
            while True:
                method, args, kwargs = connection.recv()
                try:
                    connection.send(("ok", self._call(shard, method, args, kwargs)))
                except ApiError as error:
                    connection.send(("error", (error.status, error.reason, error.message)))
                except Exception as error:  # a call the fake does not answer: the caller's
                    connection.send(("failed", f"{type(error).__name__}: {error}"))
        except (EOFError, OSError):
            return

    def _call(self, shard: str, method: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
        counts = self.calls.setdefault(shard, {})
        counts[method] = counts.get(method, 0) + 1
        if method == "exec":
            self.execs.setdefault(shard, []).append(" ".join(args[3][1:3]))
        if method == "list_page":
            return self._page(*args)
        if method == "watch":
            kind, version, namespace, selector = args
            deadline = time.monotonic() + WATCH_WAIT_S
            with self.api.changed:
                while True:
                    events = self.api.changes_since(kind, int(version or 0), namespace,
                                                    selector)
                    left = deadline - time.monotonic()
                    if events or left <= 0:
                        return events
                    self.api.changed.wait(left)
        with self.lock:
            before = len(self.api.writes)
            try:
                return getattr(self.api, method)(*args, **kwargs)
            finally:
                self.writes.setdefault(shard, []).extend(self.api.writes[before:])

    def _page(self, kind: Kind, namespace: str | None, selector: str | None, limit: int,
              token: str) -> tuple[list[Obj], str, str]:
        """One page of a list, from one snapshot taken at its first page (the server's
        continue token): (items, the list's resourceVersion, the next token or "")."""
        if not token:
            with self.lock:
                items, version = self.api.list_objects(kind, namespace, selector)
            token = f"{kind.kind}-{next(self._tokens)}"
            self._snapshots[token] = (items, version, 0)
        items, version, start = self._snapshots.pop(token)
        end = start + limit
        if end < len(items):
            self._snapshots[token] = (items, version, end)
            return items[start:end], version, token
        return items[start:end], version, ""

    def label(self, key: ClusterKey, shard: str) -> None:
        """kubectl label: the cluster's shard label set (or removed, for the unnamed shard)."""
        def change(obj: Obj) -> None:
            labels = obj["metadata"].setdefault("labels", {})
            if shard:
                labels[SHARD_LABEL] = shard
            else:
                labels.pop(SHARD_LABEL, None)
        with self.lock:
            self.api.edit(k.KAIWU_CLUSTER, key.namespace, key.name, change,
                          manager="kubectl-label")


# ---- a shard -------------------------------------------------------------------------------------

class RemoteKube:
    """The calls of reconciler.kube.client.Kube, sent to the benchmark's Server (one connection
    per thread, as the client's pool gives each watch its own)."""

    def __init__(self, address: str, shard: str, field_manager: str) -> None:
        self.address = address
        self.shard = shard
        self.field_manager = field_manager
        self._local = threading.local()
        self.list_cpu_s = 0.0  # CPU of the calling threads in list_objects (parse and keep)
        self._lists = threading.Lock()

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = Client(self.address, family="AF_UNIX")
            connection.send(self.shard)
            self._local.connection = connection
        connection.send((method, args, kwargs))
        outcome, value = connection.recv()
        if outcome == "error":
            raise ApiError(*value)
        if outcome == "failed":
            raise RuntimeError(value)
        return value

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        """In pages, `keep` applied to each page as it arrives, as Kube.list_objects reads
        them (a whole list of whole objects is never held at once)."""
        started = time.thread_time()
        items: list[Obj] = []
        token = ""
        while True:
            page, version, token = self._call("list_page", kind, namespace, label_selector,
                                              kind.list_page or LIST_PAGE_SIZE, token)
            items += [keep(item) for item in page] if keep is not None else page
            del page
            if not token:
                break
        with self._lists:
            self.list_cpu_s += time.thread_time() - started
        return items, version

    def watch(self, kind: Kind, resource_version: str, namespace: str | None = None,
              label_selector: str | None = None, timeout_seconds: int = 300) -> FakeWatch:
        return FakeWatch(self._call("watch", kind, resource_version, namespace, label_selector))

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self._call(method, *args, **kwargs)


def vm(field: str) -> int:
    """A VmXXX figure of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


class Shard:
    """One shard's reconciler, as Runtime.start assembles it (see the module docstring), and
    the passes it has run, per cluster."""

    def __init__(self, address: str, shard: str) -> None:
        self.settings = Settings(shard=shard, leader_election=False,
                                 resync_period_s=10**6)  # resyncs are the benchmark's
        runtime = self.runtime = Runtime(self.settings)
        self.kube = RemoteKube(address, shard, self.settings.field_manager)
        kube = cast(Any, self.kube)
        runtime.kube = kube
        runtime.caches = Caches(kube, self.settings, runtime.metrics, on_key=runtime.queue.add,
                                echoes=Echoes(OwnWrites(), runtime._on_echo),
                                on_handover=runtime.queue.add_after)
        controller = default_controller(kube, runtime.caches, self.settings, runtime.metrics)
        self.passes: dict[ClusterKey, int] = {}
        self.requeued: dict[ClusterKey, float] = {}
        self._lock = threading.Condition()

        class Counted:
            def reconcile(inner, key: ClusterKey) -> Any:
                result = controller.reconcile(key)
                with self._lock:
                    self.passes[key] = self.passes.get(key, 0) + 1
                    requeue = getattr(result, "requeue_after_s", None)
                    if requeue is not None:
                        self.requeued[key] = float(requeue)
                    self._lock.notify_all()
                return result

        runtime.controller = Counted()

    def wait(self, done: Callable[[], bool], what: str) -> None:
        last = time.monotonic()
        with self._lock:
            while not done():
                self._lock.wait(1.0)
                if time.monotonic() - last > 30:
                    log(f"shard {self.settings.shard or '(unnamed)'}: {what}, "
                        f"{sum(self.passes.values())} passes so far")
                    last = time.monotonic()

    def cold_start(self) -> dict[str, Any]:
        wall, cpu = time.monotonic(), time.process_time()
        self.runtime.caches.start()
        self.runtime._start_term()  # waits for the caches, queues every cluster, starts workers
        if not self.runtime.caches.wait_synced(600):
            raise SystemExit("caches did not sync in 600 s")
        keys = self.runtime.caches.cluster_keys()
        self.wait(lambda: all(self.passes.get(key) for key in keys), "cold start")
        cached = sum(len(informer) for informer in self.runtime.caches.informers.values())
        return {"clusters": len(keys), "cold_wall_s": time.monotonic() - wall,
                "objects_cached": cached,
                "cold_cpu_s": time.process_time() - cpu, "list_cpu_s": self.kube.list_cpu_s,
                "requeued": len(self.requeued),
                "requeue_min_s": min(self.requeued.values(), default=None)}

    def resync(self) -> dict[str, Any]:
        """One periodic resync, as Runtime._resync_loop queues it, until every cluster had
        its pass."""
        keys = self.runtime.caches.cluster_keys()
        with self._lock:
            before = {key: self.passes.get(key, 0) for key in keys}
        wall, cpu = time.monotonic(), time.process_time()
        for key in keys:
            self.runtime.queue.add(key)
        self.wait(lambda: all(self.passes.get(key, 0) > before[key] for key in keys), "resync")
        return {"resync_wall_s": time.monotonic() - wall,
                "resync_cpu_s": time.process_time() - cpu}

    def move(self, key: ClusterKey) -> dict[str, Any]:
        """Time (wall clock, comparable across processes) when this shard's pass of `key`
        next ends, and whether the key is then in its cache."""
        with self._lock:
            before = self.passes.get(key, 0)
        self.wait(lambda: self.passes.get(key, 0) > before, f"moving {key}")
        return {"at": time.time(), "cached": self.runtime.caches.informers[
            k.KAIWU_CLUSTER].has(key.namespace, key.name), "owns": self.runtime.caches.owns(key)}


def child(address: str, shard: str) -> None:
    """A shard's process: commands on stdin, one JSON answer a line on stdout."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    imports_rss = vm("VmRSS")
    node = Shard(address, shard)
    for line in sys.stdin:
        command = json.loads(line)
        answer: dict[str, Any]
        if command["do"] == "start":
            answer = node.cold_start()
        elif command["do"] == "resync":
            answer = node.resync()
        elif command["do"] == "move":
            answer = node.move(ClusterKey(*command["key"]))
        else:
            raise SystemExit(f"unknown command {command}")
        answer.update(hwm=vm("VmHWM"), rss=vm("VmRSS"), imports_rss=imports_rss,
                      maxrss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        print(json.dumps(answer), flush=True)
    os._exit(0)  # the informers' threads are daemons waiting on the server


class ShardProcess:
    def __init__(self, server: Server, shard: str) -> None:
        self.shard = shard
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child", server.address, shard],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"shard {self.shard or '(unnamed)'} ended: see its stderr")
        found: dict[str, Any] = json.loads(line)
        return found

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        self.send(command)
        return self.answer()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)


def mib(value: int) -> str:
    return f"{value / 2**20:.0f} MiB"


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clusters", type=int, default=10000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--measure", type=int, default=0, help=(
        "run (and settle) only the first N shards; the others' clusters stay in the API "
        "server as generated, never reconciled (default: every shard)"))
    parser.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    measured = args.measure or args.shards
    if args.shards < 2 or args.clusters < args.shards or not 2 <= measured <= args.shards:
        raise SystemExit("--shards: at least 2 (a move needs two), and at most --clusters; "
                         "--measure: 2 to --shards")

    objects = settled_store(args.clusters, args.shards, measured)
    api = FleetApi(objects)
    server = Server(api)
    server.start()
    names = [shard_name(j, args.shards) for j in range(measured)]
    log(f"{args.clusters} clusters ({len(objects)} objects); starting {measured} of "
        f"{args.shards} shards at once, their clusters at rest")
    shards = [ShardProcess(server, name) for name in names]
    for shard in shards:
        shard.send({"do": "start"})
    started = {shard.shard: shard.answer() for shard in shards}
    cold_writes = {name: len(server.writes.get(name, ())) for name in names}
    log(f"writes at cold start: {_tally(server.writes)}")
    log("cold starts done; one resync at rest, shard by shard")
    calls_before = {name: dict(server.calls.get(name, {})) for name in names}
    rested = {shard.shard: shard.ask({"do": "resync"}) for shard in shards}
    resync_calls = {name: {method: count - calls_before[name].get(method, 0)
                           for method, count in server.calls.get(name, {}).items()
                           if method != "watch" and count > calls_before[name].get(method, 0)}
                    for name in names}
    rest_writes = {name: len(server.writes.get(name, ())) - cold_writes[name] for name in names}

    # The move: the first cluster of shard s1 goes to the unnamed shard.
    key = _cluster_of_shard(api, names[1])
    old, new = shards[1], shards[0]
    log(f"moving {key} from shard {old.shard} to the unnamed shard")
    moved_writes = {name: len(server.writes.get(name, ())) for name in names}
    old.send({"do": "move", "key": [key.namespace, key.name]})
    new.send({"do": "move", "key": [key.namespace, key.name]})
    labelled = time.time()
    server.label(key, new.shard)
    left, taken = old.answer(), new.answer()
    move_writes = {name: len(server.writes.get(name, ())) - moved_writes[name]
                   for name in names}
    for shard in shards:
        shard.close()

    lines = [f"shards: {args.clusters} clusters ({len(objects)} objects) over "
             f"{args.shards} shards, {measured} of them measured (each a process, started at "
             "once; their clusters at rest, the others' as generated); CPU seconds of the "
             "shard's whole process"]
    lines.append(f"  {'shard':9} {'clusters':>8} {'cached':>7} {'cold wall':>10} "
                 f"{'cold CPU':>9} {'lists CPU':>9} {'resync CPU':>10} {'resync wall':>11} "
                 f"{'VmHWM':>9} {'imports':>8} {'writes':>6}")
    for name in names:
        cold, rest = started[name], rested[name]
        lines.append(
            f"  {name or '(none)':9} {cold['clusters']:8} {cold['objects_cached']:7} "
            f"{cold['cold_wall_s']:9.1f}s "
            f"{cold['cold_cpu_s']:8.1f}s {cold['list_cpu_s']:8.1f}s "
            f"{rest['resync_cpu_s']:9.2f}s {rest['resync_wall_s']:10.1f}s "
            f"{mib(rest['hwm']):>9} {mib(rest['imports_rss']):>8} "
            f"{cold_writes[name] + rest_writes[name]:6}")
    lines.append(f"  API calls of each shard's resync at rest (watches aside): {resync_calls}")
    requeues = {name: started[name]["requeued"] for name in names}
    execs = {name: len(server.execs.get(name, ())) for name in names}
    lines.append(f"  kwbase execs (cold start, resync and move): {execs} "
                 f"{sorted(set(c for calls in server.execs.values() for c in calls))}")
    lines.append(f"  passes asking to be requeued at rest (per shard): {requeues}")
    lines.append(
        f"  move of {key} from shard {old.shard} to the unnamed shard (handover delay "
        f"{Settings().shard_handover_s:g} s): taken over after {taken['at'] - labelled:.2f} s "
        f"(new shard owns it: {taken['owns']}), let go after {left['at'] - labelled:.2f} s "
        f"(still cached by the old shard: {left['cached']}); writes {move_writes}")
    print("\n".join(lines))
    if not args.no_results:
        append_results(f"bench/shards.py --clusters {args.clusters} --shards {args.shards}"
                       f" --measure {measured}", lines)


def _tally(writes: Mapping[str, list[tuple[str, str, str]]]) -> dict[str, int]:
    """(verb kind) -> count, over every shard's writes."""
    found: dict[str, int] = {}
    for made in writes.values():
        for verb, kind, _ in made:
            found[f"{verb} {kind}"] = found.get(f"{verb} {kind}", 0) + 1
    return found


def _cluster_of_shard(api: FleetApi, shard: str) -> ClusterKey:
    for (kind, ns, name), obj in sorted(api.objects.items()):
        if kind == "KaiwuCluster" and \
                (obj["metadata"].get("labels") or {}).get(SHARD_LABEL) == shard:
            return ClusterKey(ns, name)
    raise SystemExit(f"no cluster of shard {shard}")


if __name__ == "__main__":
    main()
