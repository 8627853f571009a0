"""Story: the operator is upgraded in place (docs/install.md, "Upgrading the operator").

A team installed an earlier version of the operator (tests/support/earlier.py: a fixed commit
of this repository, checked out with `git worktree`; skipped where the history is missing),
namespaced in its own namespace, and runs two clusters under it: `dev` (insecure) and `orders`
(TLS). It upgrades as the docs say: today's `kaiwu install` applied over the old bundle
(`kubectl apply --server-side`, CRDs first), and today's reconciler replaces the earlier one
(the Deployment's rollout; here the processes, as the demo runs it). Then:

- the CRDs are today's, and both clusters stay Ready, their specs observed by today's reconciler;
- no KaiwuDB pod restarts where today's StatefulSet template equals the earlier one; where it
  differs, the pods roll one at a time, never two of a cluster unready at once;
- the certificate Secrets the earlier version made owned by `orders` are released (kept if the
  cluster is ever deleted), their certificates unchanged;
- once settled, today's reconciler writes nothing for 10 seconds (the audit log is the witness).

Timings are printed (pytest -s).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from reconciler import install
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from renderer.builders import INSTANCE_LABEL
from tests.support import earlier
from tests.support.bundle import Installer, run_as_deployed, server_side_apply, stop
from tests.support.harness import condition, user, wait_for
from tests.support.lifecycle import pod_ready, report, small_cluster
from tests.support.world_kube import VERSION
from tests.world.controlplane import WRITE_VERBS, ControlPlane
from tests.world.simworld import SimWorld

CLUSTERS = ("dev", "orders")
QUIET_S = 10.0


def stamp(at: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if at is None else at, UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def clusters(namespace: str) -> list[Obj]:
    dev = small_cluster(namespace)
    orders = small_cluster(namespace, tls={"enabled": True})
    orders["metadata"]["name"] = "orders"
    return [dev, orders]


def pods_of(api: Kube, namespace: str, name: str) -> list[Obj]:
    items, _ = api.list_objects(kk.POD, namespace, f"{INSTANCE_LABEL}={name}")
    return items


class PodWatch:
    """Samples every cluster's pods every 0.2 s: every pod uid seen, and the most pods of one
    cluster unready (or missing) at once."""

    def __init__(self, api: Kube, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.uids: dict[str, set[str]] = {name: set() for name in CLUSTERS}
        self.most_down = dict.fromkeys(CLUSTERS, 0)
        # The Ready condition's (reason, message) whenever it was not True.
        self.unready: dict[str, set[tuple[str, str]]] = {name: set() for name in CLUSTERS}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pod-watch")

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):  # a failed read is a missed sample
                for name in CLUSTERS:
                    pods = pods_of(self.api, self.namespace, name)
                    self.uids[name].update(p["metadata"]["uid"] for p in pods)
                    ready = sum(pod_ready(p) for p in pods)
                    self.most_down[name] = max(self.most_down[name], 3 - ready)
                    said = condition(self.api.get(kk.KAIWU_CLUSTER, self.namespace, name),
                                     "Ready")
                    if said.get("status") != "True":
                        self.unready[name].add((str(said.get("reason")),
                                                str(said.get("message"))))

    @contextlib.contextmanager
    def running(self) -> Iterator[PodWatch]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(5)


def settled(api: Kube, namespace: str) -> bool:
    """Both clusters Ready, their latest generation observed."""
    for name in CLUSTERS:
        obj = api.get(kk.KAIWU_CLUSTER, namespace, name)
        status = (obj or {}).get("status") or {}
        if obj is None or status.get("observedGeneration") != obj["metadata"]["generation"] \
                or condition(obj, "Ready").get("status") != "True":
            return False
    return True


def template(api: Kube, namespace: str, name: str) -> Any:
    found = api.get(kk.STATEFUL_SET, namespace, name)
    assert found is not None
    return found["spec"]["template"]


def test_an_upgrade_updates_the_crds_and_takes_the_clusters_over_without_a_restart(
        control_plane: ControlPlane, sim_world: SimWorld, kube: k8s.ApiClient,
        namespace: str, installed: Installer, tmp_path: Path) -> None:
    reason = earlier.earlier_skip_reason()
    if reason:
        pytest.skip(reason)
    api = Kube(kube, "test")
    options = install.Options(namespace=namespace, scope="namespaced",
                              watch_namespace=namespace, image="kaiwu-reconciler:test")
    flags = ["--namespace", namespace, "--scope", "namespaced", "--watch-namespace", namespace,
             "--kube-version", str(VERSION), "--image", "kaiwu-reconciler:earlier"]
    admission = k8s.AdmissionregistrationV1Api(kube)
    registration = f"{install.NAME}-{namespace}"
    today = [d.obj for d in install.bundle(install.Options(crds_only=True,
                                                           kube_version=VERSION))]
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def registered() -> bool:
        proc, log = procs[-1]  # the one running now
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        webhooks = admission.read_validating_webhook_configuration(registration).webhooks
        return bool(webhooks and webhooks[0].client_config.ca_bundle)

    def writes(who: str, since: str) -> list[str]:
        """The reconciler's writes since then, its leader Lease's renewals aside."""
        return [f"{e['requestReceivedTimestamp'][11:23]} {e['verb']} "
                f"{e['objectRef'].get('resource')}/{e['objectRef'].get('name')}"
                for e in control_plane.audit_events(user=who, verbs=WRITE_VERBS)
                if e.get("requestReceivedTimestamp", "") >= since
                and e["objectRef"].get("resource") != "leases"]

    def leading(identity: str) -> bool:
        lease = api.get(kk.LEASE, namespace, install.NAME)
        return ((lease or {}).get("spec") or {}).get("holderIdentity") == identity

    started = time.monotonic()
    with earlier.earlier_checkout(tmp_path) as old:
        try:
            # The earlier install: its CRDs over the world's (forced: as they were then), then
            # the rest of its bundle; its reconciler as its Deployment would run it.
            old_docs = earlier.bundle(old, flags)
            for doc in old_docs:
                server_side_apply(kube, doc, dry_run=doc["kind"] == "Deployment",
                                  force=doc["kind"] == "CustomResourceDefinition")
            proc, log, who = run_as_deployed(control_plane, kube, namespace, old_docs, tmp_path,
                                             source=old, identity="earlier-0")
            procs.append((proc, log))
            wait_for("the earlier leader to register its webhook", registered, 30, 0.2)
            for obj in clusters(namespace):
                user(kube, "kubectl").apply(obj)
            wait_for("both clusters Ready under the earlier version",
                     lambda: registered() and settled(api, namespace), 90, 0.2)
            report(f"earlier version {earlier.EARLIER_COMMIT[:12]}: checked out, installed, "
                   "two clusters Ready", time.monotonic() - started)
            before = {name: {p["metadata"]["uid"] for p in pods_of(api, namespace, name)}
                      for name in CLUSTERS}
            templates = {name: template(api, namespace, name) for name in CLUSTERS}
            secrets = {s["metadata"]["name"]: s for s in api.list_objects(
                kk.SECRET, namespace, f"{INSTANCE_LABEL}=orders")[0]}
            assert len(secrets) == 3 and all(
                [r["kind"] for r in s["metadata"].get("ownerReferences") or ()] ==
                ["KaiwuCluster"] for s in secrets.values()), "the earlier version owned them"

            # The upgrade: today's bundle applied over it, CRDs first; today's reconciler in
            # the earlier one's place.
            with PodWatch(api, namespace).running() as watch:
                started = time.monotonic()
                # (Its registration names the URL the leader registered: no Service here.)
                hooks = admission.read_validating_webhook_configuration(registration).webhooks
                url = (hooks or [])[0].client_config.url
                today_docs = installed(options, webhook_url=str(url))
                crds = k8s.ApiextensionsV1Api(kube)
                for doc in today:
                    raw = crds.read_custom_resource_definition(doc["metadata"]["name"],
                                                               _preload_content=False)
                    live = json.loads(raw.data)  # type: ignore[attr-defined]
                    assert [v["schema"] for v in live["spec"]["versions"]] == [
                        v["schema"] for v in doc["spec"]["versions"]], "the CRD is today's"
                stop(proc)
                proc, log, _ = run_as_deployed(control_plane, kube, namespace, today_docs,
                                               tmp_path, identity="today-0")
                procs.append((proc, log))
                took_over = stamp()

                wait_for("today's reconciler to lead", lambda: registered() and leading(
                    "today-0"), 30, 0.2)

                def quiet() -> bool:
                    # Reported by today's reconciler (VolumesExpanded is newer than the
                    # earlier version), then nothing written for 3 s.
                    return registered() and settled(api, namespace) and all(condition(
                        api.get(kk.KAIWU_CLUSTER, namespace, name), "VolumesExpanded")
                        for name in CLUSTERS) and not writes(who, stamp(time.time() - 3.0))
                try:
                    wait_for("both clusters settled under today's reconciler", quiet, 120, 0.5)
                except BaseException:
                    recent = writes(who, stamp(time.time() - 10.0))
                    states = {name: [(c.get("type"), c.get("status"), c.get("reason"),
                                      c.get("message")) for c in ((api.get(
                                          kk.KAIWU_CLUSTER, namespace, name) or {}).get(
                                          "status") or {}).get("conditions") or ()]
                              for name in CLUSTERS}
                    print(f"writes in the last 10 s: {recent}\nconditions: {states}\n"
                          f"log: {log.read_text(errors='replace')[-4000:]}")
                    raise
                report("today's bundle applied, reconciler replaced, clusters settled",
                       time.monotonic() - started)
            taking_over = writes(who, took_over)
            said = [f"{e.reason}: {e.message}" for e in k8s.CoreV1Api(kube).list_namespaced_event(
                namespace).items if e.last_timestamp and stamp(e.last_timestamp.timestamp())
                >= took_over and e.involved_object.kind == "KaiwuCluster"]
            print(f"today's reconciler, taking over: {len(taking_over)} writes: {taking_over}; "
                  f"its Events: {said}")

            # At rest (KaiwuDB done up-replicating, so the status has nothing new to say):
            # nothing written.
            wait_for("every range of both clusters fully replicated", lambda: all(
                sim_world.kwdb.replication((namespace, name), sim_world.clock.now())
                .underreplicated == 0 for name in CLUSTERS), 60, 0.2)
            wait_for("the reconciler quiet", lambda: not writes(who, stamp(time.time() - 3.0)),
                     60, 0.5)
            since = stamp()
            time.sleep(QUIET_S)
            at_rest = writes(who, since)
            events = [(e.reason, e.message) for e in k8s.CoreV1Api(kube).list_namespaced_event(
                namespace).items if e.last_timestamp and stamp(
                    e.last_timestamp.timestamp()) >= since]
            assert at_rest == [], f"today's reconciler writes at rest: {at_rest} {events}"
            assert settled(api, namespace)
        finally:
            for proc, _ in procs:
                stop(proc)
            with contextlib.suppress(k8s.ApiException):
                admission.delete_validating_webhook_configuration(registration)
            for doc in today:  # the world's CRDs as every other story expects them
                server_side_apply(kube, doc, force=True)

    for name in CLUSTERS:
        same = template(api, namespace, name) == templates[name]
        print(f"{name}: pod template {'unchanged' if same else 'changed'}, "
              f"{len(watch.uids[name] - before[name])} pods replaced, at most "
              f"{watch.most_down[name]} unready at once; Ready throughout: "
              f"{not watch.unready[name]}")
        assert not watch.unready[name], f"{name} was not Ready for a moment: {watch.unready}"
        if same:
            assert watch.uids[name] == before[name], f"{name}: a pod was replaced"
        else:
            assert watch.most_down[name] <= 1, f"{name}: two pods down at once"
    for name, secret in secrets.items():
        now = api.get(kk.SECRET, namespace, name)
        assert now is not None and now["data"] == secret["data"], name
        assert not now["metadata"].get("ownerReferences"), f"{name} still owned by the cluster"
