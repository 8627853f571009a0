"""Story: two reconciler shards split a fleet of 100 clusters, each cluster owned by exactly one,
also while one shard restarts, and a cluster moved from one shard to the other mid-run changes
hands without a gap and without both acting on it.

An administrator installs two bundles into the test's namespace (namespaced scope): the unnamed
shard's (`kaiwu install`) and shard a's (`kaiwu install --shard a`); each reconciler runs as its
Deployment would, `python -m reconciler` in its own process with the Deployment's variables and
the shared ServiceAccount's token. The 100 clusters (single-node, insecure, parked: their pods
never schedule) are labelled `kaiwu.inspur.com/shard=a` for the even ones; the odd ones carry no
label, so they are the unnamed shard's. Who wrote what is read from the apiserver's audit log:
the shards share the ServiceAccount and tell themselves apart by their user agent
(`kaiwu-reconciler (shard a)`, `kaiwu-reconciler (shard -)`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from reconciler import install
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as kk
from reconciler.kube.cache import Caches
from reconciler.kube.client import Kube
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import SHARD_LABEL, Settings
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from tests.support.bundle import Installer, stop
from tests.support.harness import REPO, now_stamp, user, wait_for
from tests.world.controlplane import WRITE_VERBS, ControlPlane, service_account_token

CLUSTERS = 100
AGENT = re.compile(r"\(shard (?P<shard>[^)]*)\)")
CLUSTER_NAME = re.compile(r"^(?P<cluster>c-\d{3})(-|$)")


def parked_single_node(namespace: str, index: int) -> Obj:
    labels = {SHARD_LABEL: "a"} if index % 2 == 0 else {}
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": f"c-{index:03d}", "namespace": namespace, "labels": labels},
            "spec": {"version": "3.2.1", "startMode": "single-node", "replicas": 1,
                     "tls": {"enabled": False}, "storage": {"size": "1Gi"},
                     "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                     "scheduling": {"nodeSelector": {"kaiwu.test/parked": "true"}}}}


def owner(index: int) -> str:
    return "a" if index % 2 == 0 else "-"


class Shards:
    """The two shards' processes, started as their Deployments would run them."""

    def __init__(self, plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
                 tmp: Path) -> None:
        self.plane, self.namespace, self.tmp = plane, namespace, tmp
        token = service_account_token(k8s.CoreV1Api(kube), namespace, install.NAME)
        self.kubeconfig = tmp / "reconciler.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(plane.kubeconfig(token=token,
                                                                   user="reconciler")))
        self.user = f"system:serviceaccount:{namespace}:{install.NAME}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.starts = 0

    def start(self, shard: str, docs: list[Obj]) -> None:
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        self.starts += 1
        env = {**os.environ, "POD_NAMESPACE": self.namespace,
               "KAIWU_IDENTITY": f"shard-{shard}-{self.starts}",
               **{e["name"]: e["value"] for e in container["env"] if "value" in e}}
        argv = [sys.executable, "-m", "reconciler", "--kubeconfig", str(self.kubeconfig),
                "--lease-duration-s", "3", "--renew-deadline-s", "2", "--retry-period-s", "0.5",
                "--http-address", "127.0.0.1:0", "--log-format", "text",
                # The unnamed shard's bundle turns the admission webhook on; this world has no
                # Service routing the API server to a local process, so a registration would
                # refuse every KaiwuCluster write (the webhook has its own stories).
                "--no-webhook"]
        with (self.tmp / f"shard-{shard}-{self.starts}.log").open("wb") as out:
            self.processes[shard] = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out,
                                                     stderr=subprocess.STDOUT)

    def kill(self, shard: str) -> None:
        """A crash: no goodbye, the Lease is left to expire."""
        self.processes[shard].kill()
        self.processes[shard].wait(10)

    def alive(self) -> bool:
        """Every shard process still runs (else fail with its log's end)."""
        for shard, process in self.processes.items():
            assert process.poll() is None, f"shard {shard} exited: " + "".join(
                path.read_text(errors="replace")[-2000:]
                for path in self.tmp.glob(f"shard-{shard}-*.log"))
        return True

    def stop(self) -> None:
        for process in self.processes.values():
            stop(process)

    def writes(self, since: str = "") -> dict[str, list[tuple[str, str]]]:
        """cluster -> [(shard, when)] of every write to the cluster's objects and status."""
        found: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for event in self.plane.audit_events(user=self.user, verbs=WRITE_VERBS):
            ref = event.get("objectRef") or {}
            when = str(event.get("requestReceivedTimestamp", ""))
            if ref.get("namespace") != self.namespace or ref.get("resource") == "events" \
                    or when < since:
                continue
            name = CLUSTER_NAME.match(str(ref.get("name") or ""))
            agent = AGENT.search(str(event.get("userAgent", "")))
            if name is not None:
                found[name["cluster"]].append((agent["shard"] if agent else "?", when))
        return found


@pytest.fixture
def shards(control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
           installed: Installer,
           tmp_path: Path) -> Iterator[tuple[Shards, dict[str, list[Obj]]]]:
    bundles: dict[str, list[Obj]] = {}
    for shard in ("-", "a"):
        options = install.Options(namespace=namespace, scope="namespaced",
                                  watch_namespace=namespace, image="kaiwu-reconciler:test",
                                  shard="" if shard == "-" else shard)
        # The second shard's bundle applies over the first's: the shared objects are the
        # same, only the shard's own (its Lease's Role, its Deployment) are new.
        bundles[shard] = installed(options, webhook=False)  # the shards run without it
    running = Shards(control_plane, kube, namespace, tmp_path)
    try:
        yield running, bundles
    finally:
        running.stop()


def all_reconciled(kube: k8s.ApiClient, namespace: str) -> bool:
    clusters = Kube(kube, "test").list_objects(kk.KAIWU_CLUSTER, namespace)[0]
    statefulsets = {s["metadata"]["name"] for s in
                    Kube(kube, "test").list_objects(kk.STATEFUL_SET, namespace)[0]}
    return len(clusters) == CLUSTERS and all(
        (c.get("status") or {}).get("observedGeneration") == c["metadata"]["generation"]
        and c["metadata"]["name"] in statefulsets for c in clusters)


def quiet(shards: Shards, seconds: float) -> None:
    """Until no shard wrote anything for `seconds`."""
    def settled() -> bool:
        shards.alive()
        last = max((when for writes in shards.writes().values() for _, when in writes),
                   default="")
        return last < time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - seconds))
    wait_for(f"{seconds} s without a write", settled, 60, 0.5)


def service_back(kube: k8s.ApiClient, namespace: str, name: str, uid: str) -> bool:
    live = Kube(kube, "test").get(kk.SERVICE, namespace, name)
    return live is not None and live["metadata"]["uid"] != uid


def delete_service(kube: k8s.ApiClient, namespace: str, name: str) -> str:
    live = Kube(kube, "test").get(kk.SERVICE, namespace, name)
    assert live is not None
    assert Kube(kube, "kubectl").delete(kk.SERVICE, namespace, name)
    return str(live["metadata"]["uid"])


def test_two_shards_split_a_fleet_each_cluster_owned_once_through_a_restart_and_a_move(
        shards: tuple[Shards, dict[str, list[Obj]]], control_plane: ControlPlane,
        kube: k8s.ApiClient, namespace: str) -> None:
    running, bundles = shards
    started = time.monotonic()
    running.start("-", bundles["-"])
    running.start("a", bundles["a"])
    api = k8s.CustomObjectsApi(kube)
    for index in range(CLUSTERS):
        api.create_namespaced_custom_object("kaiwu.inspur.com", "v1", namespace,
                                            "kaiwuclusters", parked_single_node(namespace, index))
    wait_for("every cluster reconciled", lambda: running.alive() and all_reconciled(
        kube, namespace), 100, 0.5)
    print(f"\n{CLUSTERS} clusters created and reconciled by two shards in "
          f"{time.monotonic() - started:.1f} s")

    # Shard a crashes. Its clusters wait for it; the other shard does not take them.
    running.kill("a")
    a_uid = delete_service(kube, namespace, "c-000-public")
    b_uid = delete_service(kube, namespace, "c-001-public")
    wait_for("the unnamed shard to repair its own cluster",
             lambda: service_back(kube, namespace, "c-001-public", b_uid), 20, 0.1)
    time.sleep(2.0)
    assert not service_back(kube, namespace, "c-000-public", a_uid), \
        "shard a's cluster was repaired while shard a was down: by someone else"
    down = time.monotonic()
    running.start("a", bundles["a"])
    wait_for("shard a, restarted, to repair its cluster",
             lambda: service_back(kube, namespace, "c-000-public", a_uid), 30, 0.1)
    print(f"shard a restarted -> its cluster repaired in {time.monotonic() - down:.1f} s "
          "(the crashed replica's Lease expires first)")

    # c-002 moves from shard a to the unnamed shard: its label is removed.
    quiet(running, 1.5)
    moved_at = now_stamp()
    user(kube, "kubectl-label").patch(kk.KAIWU_CLUSTER, namespace, "c-002",
                                      {"metadata": {"labels": {SHARD_LABEL: None}}})
    moved = time.monotonic()
    c_uid = delete_service(kube, namespace, "c-002-public")
    wait_for("the cluster's new shard to repair it",
             lambda: service_back(kube, namespace, "c-002-public", c_uid), 30, 0.1)
    print(f"c-002 moved to the unnamed shard -> repaired by it {time.monotonic() - moved:.1f} s "
          "after the move (its handover delay is 2 s)")
    time.sleep(1.0)  # the last requests into the audit log
    running.alive()

    # From the API: every cluster's objects were written by exactly the shard that owns it.
    writes = running.writes()
    assert set(writes) == {f"c-{index:03d}" for index in range(CLUSTERS)}, \
        "some cluster was never written by any shard"
    twice = {name: sorted({shard for shard, _ in found}) for name, found in writes.items()
             if name != "c-002" and {shard for shard, _ in found} != {owner(int(name[2:]))}}
    assert twice == {}, f"clusters written by a shard that does not own them: {twice}"
    before = {shard for shard, when in writes["c-002"] if when < moved_at}
    after = {shard for shard, when in writes["c-002"] if when >= moved_at}
    assert before == {"a"} and after == {"-"}, (before, after)
    total = sum(len(found) for found in writes.values())
    print(f"{total} writes to {CLUSTERS} clusters, each cluster by one shard; story "
          f"{time.monotonic() - started:.1f} s")


def test_a_shard_only_watches_its_own_clusters(control_plane: ControlPlane,
                                              kube: k8s.ApiClient, namespace: str) -> None:
    """The selector is the API server's: shard a's watch never sees another shard's cluster."""
    api = k8s.CustomObjectsApi(kube)
    for index in range(4):
        api.create_namespaced_custom_object("kaiwu.inspur.com", "v1", namespace,
                                            "kaiwuclusters", parked_single_node(namespace, index))
    def names(selector: str) -> set[str]:
        items: Any = Kube(kube, "test").list_objects(kk.KAIWU_CLUSTER, namespace, selector)[0]
        return {item["metadata"]["name"] for item in items}
    assert names(f"{SHARD_LABEL}=a") == {"c-000", "c-002"}
    assert names(f"!{SHARD_LABEL}") == {"c-001", "c-003"}


def test_a_shards_caches_hold_only_its_own_clusters_objects_as_the_api_server_selects_them(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    """The watches of the clusters' objects are selected by the names of the shard's clusters
    (reconciler.kube.selection), and the API server does the selecting: shard a's Secret cache
    holds its clusters' Secrets and no other's, and follows when a cluster of its is made."""
    api, core = k8s.CustomObjectsApi(kube), k8s.CoreV1Api(kube)

    def cluster_with_secret(index: int) -> None:
        made = parked_single_node(namespace, index)
        api.create_namespaced_custom_object("kaiwu.inspur.com", "v1", namespace,
                                            "kaiwuclusters", made)
        name = made["metadata"]["name"]
        core.create_namespaced_secret(namespace, k8s.V1Secret(metadata=k8s.V1ObjectMeta(
            name=f"{name}-x", labels={INSTANCE_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY})))

    for index in range(4):
        cluster_with_secret(index)
    queued: list[ClusterKey] = []
    caches = Caches(Kube(kube, "test"), Settings(shard="a", watch_namespace=namespace,
                                                 leader_election=False),
                    Metrics(), queued.append, managed_kinds=(kk.SECRET,))
    caches.start()
    try:
        wait_for("shard a's clusters listed",
                 lambda: caches.owns(ClusterKey(namespace, "c-002")), 30)

        def secrets() -> set[str]:
            return {str(s["metadata"]["name"]) for s in caches.peek_list(kk.SECRET, namespace)}
        assert secrets() == {"c-000-x", "c-002-x"}, "the unnamed shard's are not listed"
        assert not caches.owns(ClusterKey(namespace, "c-001"))
        cluster_with_secret(4)  # even: shard a's
        fresh = ClusterKey(namespace, "c-004")
        wait_for("the new cluster's objects listed", lambda: caches.owns(fresh), 30)
        assert secrets() == {"c-000-x", "c-002-x", "c-004-x"}
        assert queued.count(fresh) == 1, "queued once, when its objects were in the cache"
    finally:
        caches.stop()
