"""What the cluster-directory stories (tests/unit/reconciler/runtime/test_source_dir.py,
test_source_watching.py) run a DirectorySource against: the fake API (tests/support/fake_api.py)
with what the source did to it recorded, and the files of a directory of clusters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.keys import ClusterKey
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import KAIWU_CLUSTER, Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.runtime.source_dir import DirectorySource
from reconciler.settings import Settings
from tests.support.fake_api import FakeApi, FakeView, counted

ORDERS, PAYMENTS = ClusterKey("shop", "orders"), ClusterKey("shop", "payments")


def cluster_file(name: str, replicas: int = 3, namespace: str = "shop") -> str:
    return (f"apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\n"
            f"metadata:\n  name: {name}\n  namespace: {namespace}\n"
            f"spec:\n  replicas: {replicas}\n")


class Api(FakeApi):
    """The fake API as a directory source uses it: the names of the KaiwuClusters it applied
    (`applied`), its deletes (`deleted`: name, uid), the Events it emitted (`emitted`); an apply
    or delete of a cluster named in `refuse` fails (a delete with `refusal`). `clusters`: the
    stored KaiwuClusters by (namespace, name)."""

    def __init__(self) -> None:
        super().__init__()
        self.view = FakeView(self)
        self.applied: list[str] = []
        self.deleted: list[tuple[str, str | None]] = []
        self.refuse: set[str] = set()
        self.refusal = "no"  # the message of a refused delete
        self.emitted: list[tuple[str, str, str, str]] = []

    @property
    def clusters(self) -> dict[tuple[str, str], Obj]:
        return {(ns, name): obj for (kind, ns, name), obj in self.objects.items()
                if kind == KAIWU_CLUSTER.kind}

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        name = obj["metadata"]["name"]
        if name in self.refuse:
            raise ApiError(422, "Invalid", f"KaiwuCluster {name} is invalid: spec.replicas")
        self.applied.append(name)
        return super().apply(obj, dry_run=dry_run, force=force)

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None,
               propagation: str | None = None) -> bool:
        if name in self.refuse:
            raise ApiError(403, "Forbidden", self.refusal)
        self.deleted.append((name, uid))
        return super().delete(kind, namespace, name, uid=uid,
                              grace_period_seconds=grace_period_seconds,
                              propagation=propagation)

    # the Event recorder
    def emit(self, cluster: Obj, type_: str, reason: str, message: str) -> None:
        self.emitted.append((cluster["metadata"]["name"], type_, reason, message))


def source(repo: Path, api: Api, metrics: Metrics | None = None, **settings: Any
           ) -> DirectorySource:
    """A directory source; unless a story says otherwise it may write in every namespace (its
    lane has stories of its own)."""
    settings.setdefault("source_namespaces", "*")
    metrics = metrics or Metrics()
    return DirectorySource(repo, counted(api, metrics), api.view,
                           Settings(**settings), metrics, api)  # type: ignore[arg-type]


def repo_with(tmp_path: Path, **files: str) -> Path:
    repo = tmp_path / "clusters"
    repo.mkdir(exist_ok=True)
    for name, text in files.items():
        (repo / f"{name}.yaml").write_text(text)
    return repo
