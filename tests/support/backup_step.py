"""The backup step's world (reconciler.kaiwudb.backup.step): the cluster shop/dev, its schedules and
backups in the fast tier's fake API (tests/support/fake_api.py), which stands for the API and the
caches' view at once, and the step over it. Used by the backup-step stories
(tests/unit/reconciler/kaiwudb/test_backup_step.py) and the cache's slim-copy story
(tests/unit/reconciler/kube/test_cache.py).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.kaiwudb.backup.step import Backups
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.kinds import Kind
from reconciler.model import Obj, Pass
from reconciler.settings import Settings
from renderer.render import read_live
from renderer.spec import Cluster
from tests.support.context import step_context
from tests.support.fake_api import FakeApi
from tests.support.peeks import Peeks

NS, NAME = "shop", "dev"


def stamp(text: str) -> str:
    return f"{text}Z"


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


class World(FakeApi, Peeks):
    """The API and the caches' view in one (the step reads and writes the same store; `peek`,
    `peek_list`: tests.support.peeks): a create is stamped 2026-01-02T03:00:01 (the clock);
    `add` stores an object as someone made it before."""

    def __init__(self) -> None:
        super().__init__(clock=lambda: at("2026-01-02T03:00:01"))

    def add(self, obj: Obj) -> None:
        self.put(obj)

    # CacheView
    def list(self, kind: Kind, namespace: str, labels: Mapping[str, str] = {}) -> list[Obj]:
        return [copy.deepcopy(obj) for (kind_, ns, _), obj in self.objects.items()
                if kind_ == kind.kind and ns == namespace]


def cluster_obj() -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": NAME, "namespace": NS, "uid": "c"},
            "spec": {"version": "3.2.1", "replicas": 3, "tls": {"enabled": False}}}


def a_pass(now: float, **status: Any) -> tuple[Pass, Cluster]:
    obj = cluster_obj()
    p = Pass(ClusterKey(NS, NAME), obj, now, {"initialized": True, **status})
    p.cluster = read_live(obj)
    return p, p.cluster


def schedule(name: str, cron: str, *, keep: int = 7, suspend: bool = False,
             target: Obj | None = None) -> Obj:
    return {"apiVersion": k.KAIWU_BACKUP_SCHEDULE.api_version,
            "kind": k.KAIWU_BACKUP_SCHEDULE.kind,
            "metadata": {"name": name, "namespace": NS,
                         "creationTimestamp": stamp("2026-01-01T00:00:00")},
            "spec": {"cluster": {"name": NAME}, "schedule": cron, "suspend": suspend,
                     "retention": {"keep": keep},
                     "template": {"target": target or {"volume": {"claimName": "dumps"}}}}}


def backup(name: str, phase: str, created: str, sched: str = "nightly") -> Obj:
    return {"apiVersion": k.KAIWU_BACKUP.api_version, "kind": k.KAIWU_BACKUP.kind,
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": stamp(created),
                         "labels": {k.SCHEDULE_LABEL: sched},
                         "annotations": {k.SLOT_ANNOTATION: stamp(created)}},
            "spec": {"cluster": {"name": NAME},
                     "target": {"volume": {"claimName": "dumps"}}},
            "status": {"phase": phase}}


def step(world: World, tmp_path: Path) -> Backups:
    (tmp_path / "dumps").mkdir(exist_ok=True)

    def no_admin(cluster: Any) -> Any:
        raise AssertionError("no KaiwuDB command expected in this story")
    return Backups(step_context(world, world, settings=Settings(
        leader_election=False, backup_volumes_dir=str(tmp_path)),
        admin_factory=lambda _, cluster, __: no_admin(cluster)))
