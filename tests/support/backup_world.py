"""A fast stand-in for the backup and restore stories' world: the API's objects in memory, pods
that run the simulated KaiwuDB (tests/world/kwdb, no Kubernetes in between), a volume target in
a temporary directory, and passes of the backup and restore steps run one after another.

Used by tests/unit/reconciler/kaiwudb/test_backup_run.py and test_restore_run.py; the world
stories (tests/world_stories/backup) run the same steps against a real API server.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.kaiwudb.backup.step import Backups
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin, KwbaseSettings
from reconciler.kaiwudb.statements import BulkStatements
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.kinds import Kind
from reconciler.model import NodeEntry, Obj, Pass
from reconciler.settings import Settings
from renderer.render import build_objects, read_live
from renderer.settings import RenderSettings
from renderer.spec import Cluster
from tests.support.context import step_context
from tests.support.peeks import Peeks
from tests.support.sim_exec import SimExec
from tests.world.kwdb.world import KwdbWorld
from tests.world.pod_runtime import rendered_argv

NS = "shop"
CLAIM = "dumps"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()  # KwdbSettings.epoch_unix_s: t = 0


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(EPOCH + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Api(Peeks):
    """The API's objects by (kind, namespace, name), serving as the cache view (`peek`,
    `peek_list`: tests.support.peeks) and as Kube; every write is recorded."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.created_at = 0.0

    def add(self, obj: Obj) -> Obj:
        obj.setdefault("metadata", {}).setdefault("uid", f"uid-{obj['metadata']['name']}")
        obj["metadata"].setdefault("creationTimestamp", stamp(self.created_at))
        self.objects[(obj["kind"], obj["metadata"].get("namespace", NS),
                      obj["metadata"]["name"])] = obj
        return obj

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        found = self.objects.get((kind.kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        return [copy.deepcopy(o) for (kd, ns, _), o in self.objects.items()
                if kd == kind.kind and ns == namespace and all(
                    (o["metadata"].get("labels") or {}).get(key) == value
                    for key, value in labels.items())]

    def create(self, obj: Obj) -> Obj:
        self.writes.append(("create", obj["kind"], obj["metadata"]["name"]))
        return self.add(copy.deepcopy(obj))

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
              subresource: str = "") -> Obj:
        self.writes.append(("patch" + (f"/{subresource}" if subresource else ""), kind.kind,
                            name))
        found = self.objects[(kind.kind, namespace or "", name)]
        if subresource == "status":
            found.setdefault("status", {}).update(patch.get("status") or {})
        else:
            annotations = (patch.get("metadata") or {}).get("annotations") or {}
            found["metadata"].setdefault("annotations", {}).update(annotations)
        return found

    def delete(self, kind: Kind, namespace: str | None, name: str, **_: Any) -> bool:
        self.writes.append(("delete", kind.kind, name))
        return self.objects.pop((kind.kind, namespace or "", name), None) is not None


def _statefulset(cluster: Cluster) -> Obj:
    return next(o for o in build_objects(cluster, RenderSettings()) if o["kind"] == "StatefulSet")


def cluster_obj(name: str, replicas: int = 3, restore_from: str = "") -> Obj:
    spec: Obj = {"version": "3.2.1", "replicas": replicas, "tls": {"enabled": False}}
    if restore_from:
        spec["bootstrap"] = {"fromBackup": {"name": restore_from}}
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}, "spec": spec}


def pod_obj(cluster: Cluster, ordinal: int, ready: bool = True) -> Obj:
    sts = next(o for o in build_objects(cluster, RenderSettings()) if o["kind"] == "StatefulSet")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": cluster.pod_name(ordinal), "namespace": NS,
                         "labels": dict(sts["spec"]["selector"]["matchLabels"])},
            "status": {"phase": "Running",
                       "containerStatuses": [{"name": "kwbase", "state": {"running": {}}}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@dataclass
class Site:
    """KaiwuDB clusters in one namespace, their API objects, and the steps under test."""

    api: Api
    kwdb: KwdbWorld
    runner: SimExec
    volumes: Path
    backups: Backups
    now: float = 30.0
    clusters: dict[str, Obj] = field(default_factory=dict)

    def admin(self, cluster: Cluster) -> KwbaseAdmin:
        return KwbaseAdmin.for_cluster(self.runner, cluster)

    def at(self, seconds: float) -> None:
        self.now = seconds
        self.runner.now = seconds

    def start_cluster(self, name: str, replicas: int = 3, restore_from: str = "") -> Cluster:
        """The rendered StatefulSet's pods running kwbase, initialised, all Ready."""
        obj = self.api.add(cluster_obj(name, replicas, restore_from))
        self.clusters[name] = obj
        cluster = read_live(obj)
        sts = _statefulset(cluster)
        for ordinal in range(replicas):
            self.start_pod(name, ordinal)
            self.api.add(pod_obj(cluster, ordinal))
        self.api.add({**sts, "metadata": {**sts["metadata"], "namespace": NS}})
        self.admin(cluster).init(cluster.pod_name(0))
        self.at(self.now + 30)
        return cluster

    def start_pod(self, name: str, ordinal: int) -> None:
        """The pod's kwbase process starts (again) on its own store, as the rendered
        StatefulSet runs it."""
        cluster = read_live(self.clusters[name])
        command = _statefulset(cluster)["spec"]["template"]["spec"]["containers"][0]["command"]
        pod = cluster.pod_name(ordinal)
        argv = rendered_argv(command, pod)
        started = self.kwdb.start_process((NS, name), pod, f"claim-{pod}", argv, self.now,
                                          image="kwdb/kwdb:3.2.1")
        assert started.ok, started.stderr

    def nodes(self, name: str) -> list[Obj]:
        """status.nodes as the node probe writes them: node id -> pod, live or not."""
        return [NodeEntry(n.id, n.address, "live" if n.is_live else "not-live",
                          n.pod_name).to_status()
                for n in KwbaseAdmin(self.runner, NS, name, secure=False).node_status(
                    f"{name}-0")]

    def a_pass(self, name: str, nodes: list[Obj] | None = None, **status: Any) -> Pass:
        # Peeked, as the controller's pass reads its KaiwuCluster: a step that changes it in
        # place (instead of a copy) fails the test (tests.support.peeks).
        obj = self.api.peek(k.KAIWU_CLUSTER, NS, name) or {}
        previous = {"initialized": True, "nodes": self.nodes(name) if nodes is None else nodes,
                    **status}
        p = Pass(ClusterKey(NS, name), obj, EPOCH + self.now, previous)
        p.cluster = read_live(obj)
        return p

    def backup(self, name: str, cluster: str = "dev", databases: list[str] | None = None,
               target: Obj | None = None) -> Obj:
        spec: Obj = {"cluster": {"name": cluster},
                     "target": target or {"volume": {"claimName": CLAIM}}}
        if databases:
            spec["databases"] = databases
        return self.api.add({"apiVersion": k.KAIWU_BACKUP.api_version,
                             "kind": k.KAIWU_BACKUP.kind,
                             "metadata": {"name": name, "namespace": NS}, "spec": spec})

    def status(self, kind: Kind, name: str) -> Obj:
        return dict((self.api.get(kind, NS, name) or {}).get("status") or {})

    def files(self, cluster: str, backup: str) -> Path:
        return self.volumes / CLAIM / NS / cluster / backup

    def run_backup(self, cluster: str = "dev", passes: int = 20) -> list[Pass]:
        """Passes of the backup step, a second apart, until every backup of the cluster has
        completed or failed (a schedule's new one included)."""
        done = []
        for _ in range(passes):
            p = self.a_pass(cluster)
            self.backups.run(p)
            done.append(p)
            self.at(self.now + 1)
            if not any((b.get("status") or {}).get("phase") not in ("completed", "failed")
                       for b in self.api.list(k.KAIWU_BACKUP, NS)
                       if b["spec"]["cluster"]["name"] == cluster):
                break
        return done


def a_site(tmp_path: Path, remove_node_files: bool = True,
           kwbase: KwbaseSettings | None = None, statements_wait_s: float = 0.2) -> Site:
    """remove_node_files: Settings.backup_remove_node_files. kwbase: the adapter's settings
    (e.g. a short long_timeout_s, for exports that outlive their exec). statements_wait_s: how
    long a pass waits for an EXPORT or IMPORT it started to end (BulkStatements.wait_s): a
    restore's IMPORT reads its files over TLS, a few milliseconds a request, so its stories
    give it longer."""
    (tmp_path / CLAIM).mkdir(exist_ok=True)
    api, kwdb = Api(), KwdbWorld()
    runner = SimExec(kwdb)
    ctx = step_context(api, api, settings=Settings(
        leader_election=False, backup_volumes_dir=str(tmp_path),
        backup_remove_node_files=remove_node_files),
        admin_factory=lambda _, cluster, __: KwbaseAdmin.for_cluster(runner, cluster, kwbase))
    backups = Backups(ctx, statements=BulkStatements(wait_s=statements_wait_s))
    return Site(api, kwdb, runner, tmp_path, backups)


def a_restarted_site(site: Site) -> Site:
    """A new reconciler process in the same world (the API, KaiwuDB, the exec and the clock
    carry on): a backup step with nothing in memory."""
    ctx = step_context(site.api, site.api, settings=site.backups.ctx.settings,
                       admin_factory=site.backups.ctx.admin_factory)
    backups = Backups(ctx, statements=BulkStatements(wait_s=site.backups.statements.wait_s))
    return Site(site.api, site.kwdb, site.runner, site.volumes, backups, site.now,
                site.clusters)

def load_shop(site: Site, name: str = "dev") -> None:
    """A relational database with two tables, a time-series one, a user and a setting (as the
    world stories' tests/support/backup.load_shop)."""
    key, now = (NS, name), site.now
    site.kwdb.load(key, now, database="shop", table="orders",
                   columns=[("id", "INT8"), ("item", "STRING")],
                   rows=[("1", "tea"), ("2", "rice"), ("3", "salt")])
    site.kwdb.load(key, now, database="shop", table="customers",
                   columns=[("id", "INT8"), ("name", "STRING")], rows=[("7", "Ada")])
    site.kwdb.load(key, now, database="sensors", table="temps",
                   columns=[("ts", "TIMESTAMPTZ"), ("v", "FLOAT8")],
                   rows=[("2026-01-01 00:00:00", "20.5"), ("2026-01-01 00:01:00", "20.7")],
                   time_series=True)
    site.kwdb.set_user(key, now, "app")
    site.kwdb.set_setting(key, now, "sql.defaults.idle_timeout", "10m")


def manifest(site: Site, cluster: str, backup: str) -> Obj:
    loaded: Obj = json.loads((site.files(cluster, backup) / "manifest.json").read_text())
    return loaded
