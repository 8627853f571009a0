"""Directory mode: KaiwuCluster files in a git checkout become KaiwuClusters in the API.

Stories of a team that keeps its clusters in git and runs the reconciler with a git-sync sidecar
(`--source dir:/git/repo`): a new file becomes a cluster; a broken file is reported and skipped
while the other files keep being applied; a file removed from git deletes its cluster only when
pruning is allowed; git-sync's symlink swap onto a new checkout is followed, again and again.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from kubernetes import client as k8s

from reconciler.runtime import source_dir
from reconciler.runtime.process import Runtime
from reconciler.runtime.source_dir import SOURCE_ANNOTATION
from renderer.errors import Problem, RenderError
from tests.support.runtime import (
    RecordingController,
    controller_of,
    create_cluster,
    get_cluster,
    running,
    runtime_settings,
)
from tests.support.waiting import eventually
from tests.world.controlplane import ControlPlane


def cluster_file(namespace: str, name: str, replicas: int = 3, version: str = "3.2.1") -> str:
    return (f"apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\n"
            f"metadata:\n  name: {name}\n  namespace: {namespace}\n"
            f"spec:\n  version: \"{version}\"\n  replicas: {replicas}\n")


def replicas_of(kube: k8s.ApiClient, namespace: str, name: str) -> int | None:
    found = get_cluster(kube, namespace, name)
    return found["spec"]["replicas"] if found else None


def write(path: Path, text: str) -> None:
    # Write then rename, as git does: a reader never sees half a file.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def test_files_become_clusters_and_a_broken_file_is_reported_while_others_apply(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    repo = tmp_path / "clusters"
    repo.mkdir()
    write(repo / "orders.yaml", cluster_file(namespace, "orders"))
    settings = runtime_settings(control_plane, namespace, source=f"dir:{repo}",
                                source_debounce_s=0.2)
    with running(settings) as runtime, caplog.at_level(logging.INFO):
        orders = eventually(lambda: get_cluster(kube, namespace, "orders"), 20,
                            "the cluster of orders.yaml in the API")
        assert orders["metadata"]["annotations"][SOURCE_ANNOTATION] == "dir"
        eventually(lambda: controller_of(runtime).calls("orders"), 10, "its reconcile")

        # A new file appears (git pulled a commit that adds it).
        write(repo / "payments.yaml", cluster_file(namespace, "payments"))
        eventually(lambda: get_cluster(kube, namespace, "payments"), 10,
                   "the new file's cluster in the API")

        # One commit breaks payments.yaml (multi-replica needs 3 nodes) and scales orders.
        write(repo / "payments.yaml", cluster_file(namespace, "payments", replicas=2))
        write(repo / "orders.yaml", cluster_file(namespace, "orders", replicas=5))
        eventually(lambda: replicas_of(kube, namespace, "orders") == 5, 10,
                   "the good file to still be applied")
        eventually(lambda: runtime.metrics.value("kaiwu_source_broken_files") == 1, 10,
                   "the broken file to be counted")
        assert runtime.metrics.value("kaiwu_source_errors_total") >= 1
        assert replicas_of(kube, namespace, "payments") == 3, "keeps its last good spec"
        ok, lines = runtime.ready()
        assert ok, "a broken file does not make the replica unready"
        assert any("broken file payments.yaml" in line and "spec.replicas" in line
                   for line in lines), lines
        assert any("payments.yaml" in record.getMessage() or
                   "payments.yaml" in str(getattr(record, "file", ""))
                   for record in caplog.records if record.levelno >= logging.ERROR)
        events = k8s.CoreV1Api(kube).list_namespaced_event(namespace).items
        warned = [e for e in events if e.reason == "InvalidSourceFile"
                  and e.involved_object.name == "payments"]
        assert warned and "payments.yaml" in str(warned[0].message)

        # A syntax error elsewhere is one more broken file; nothing else changes.
        write(repo / "typo.yaml", "apiVersion: kaiwu.inspur.com/v1\nkind: [KaiwuCluster\n")
        eventually(lambda: runtime.metrics.value("kaiwu_source_broken_files") == 2, 10,
                   "the second broken file")

        # Fixed: the cluster follows again and the problem count drops.
        write(repo / "payments.yaml", cluster_file(namespace, "payments", replicas=4))
        (repo / "typo.yaml").unlink()
        eventually(lambda: replicas_of(kube, namespace, "payments") == 4, 10,
                   "the fixed file applied")
        eventually(lambda: runtime.metrics.value("kaiwu_source_broken_files") == 0, 10,
                   "no broken files left")


def test_a_file_removed_from_git_deletes_its_cluster_only_when_pruning_is_allowed(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        tmp_path: Path) -> None:
    repo = tmp_path / "clusters"
    repo.mkdir()
    write(repo / "keep.yaml", cluster_file(namespace, "keep"))
    write(repo / "retired.yaml", cluster_file(namespace, "retired"))
    settings = runtime_settings(control_plane, namespace, source=f"dir:{repo}",
                                source_debounce_s=0.2)
    with running(settings) as runtime:
        eventually(lambda: get_cluster(kube, namespace, "retired"), 20, "both clusters")
        (repo / "retired.yaml").unlink()
        source = eventually(lambda: runtime.source, 5, "the directory source")
        scans = source.scans
        eventually(lambda: source.scans > scans and source.last_result
                   and source.last_result.kept, 10, "a scan that notices the removal")
        assert get_cluster(kube, namespace, "retired") is not None, "kept: pruning is off"
        assert any("retired is no longer in the directory; kept" in line
                   for line in runtime.ready()[1])

    pruning = settings.replace(prune_deleted_clusters=True)
    with running(pruning):
        eventually(lambda: get_cluster(kube, namespace, "retired") is None, 20,
                   "the removed file's cluster to be deleted")
        assert get_cluster(kube, namespace, "keep") is not None


def test_a_sub_directory_that_cannot_be_read_prunes_nothing(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A team directory made unreadable (a bad chmod in a commit) hides its clusters' files: the
    scan reports the directory and applies and prunes nothing, even with pruning allowed. (Root
    ignores permission bits and the runtime runs in this process, so the reader's refusal is
    what is simulated; tests/unit/renderer/test_filesystem_errors.py shows find_files refuses a
    real untraversable directory.)"""
    repo = tmp_path / "clusters"
    (repo / "team-b").mkdir(parents=True)
    write(repo / "team-b" / "orders.yaml", cluster_file(namespace, "orders"))
    settings = runtime_settings(control_plane, namespace, source=f"dir:{repo}",
                                source_debounce_s=0.2, prune_deleted_clusters=True)
    with running(settings) as runtime:
        eventually(lambda: get_cluster(kube, namespace, "orders"), 20, "the cluster")
        source = eventually(lambda: runtime.source, 5, "the directory source")

        def unreadable(root: Path) -> list[Path]:
            raise RenderError([Problem(str(root / "team-b"), 0, "",
                                       "cannot read directory: Permission denied", "")])

        monkeypatch.setattr(source_dir, "find_files", unreadable)
        scans = source.scans
        source.request_scan(force=True)
        eventually(lambda: source.scans > scans and source.last_result
                   and source.last_result.error, 10, "a scan that cannot read team-b")
        result = source.last_result
        assert result is not None and "team-b: cannot read directory" in result.error
        assert get_cluster(kube, namespace, "orders") is not None, "nothing pruned"


def test_a_hand_made_cluster_is_never_pruned(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        tmp_path: Path) -> None:
    repo = tmp_path / "clusters"
    repo.mkdir()
    write(repo / "from-git.yaml", cluster_file(namespace, "from-git"))
    create_cluster(kube, namespace, "by-hand")
    settings = runtime_settings(control_plane, namespace, source=f"dir:{repo}",
                                prune_deleted_clusters=True, source_debounce_s=0.2)
    with running(settings) as runtime:
        eventually(lambda: get_cluster(kube, namespace, "from-git"), 20, "the file's cluster")
        source = eventually(lambda: runtime.source, 5, "the directory source")
        result = eventually(lambda: source.last_result, 10, "a scan")
        assert result.pruned == ()
        assert get_cluster(kube, namespace, "by-hand") is not None
        # Both are reconciled: the directory only adds clusters to what the API holds.
        eventually(lambda: controller_of(runtime).calls("by-hand"), 10, "reconcile by-hand")


def test_a_git_sync_symlink_swap_is_followed(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        tmp_path: Path) -> None:
    root = tmp_path / "git"
    root.mkdir()

    def checkout(commit: str, files: dict[str, str]) -> Path:
        worktree = root / ".worktrees" / commit
        (worktree / "clusters").mkdir(parents=True)
        for name, text in files.items():
            (worktree / "clusters" / name).write_text(text)
        return worktree

    def swap(worktree: Path) -> None:
        # What git-sync does: a new symlink beside the old one, renamed over it (atomic).
        new_link = root / ".repo-new"
        new_link.symlink_to(worktree)
        os.replace(new_link, root / "repo")

    swap(checkout("c1", {"orders.yaml": cluster_file(namespace, "orders")}))
    settings = runtime_settings(control_plane, namespace,
                                source=f"dir:{root / 'repo' / 'clusters'}",
                                source_debounce_s=0.2)
    with running(settings):
        eventually(lambda: replicas_of(kube, namespace, "orders") == 3, 20, "commit c1")

        swap(checkout("c2", {"orders.yaml": cluster_file(namespace, "orders", replicas=5),
                             "billing.yaml": cluster_file(namespace, "billing")}))
        eventually(lambda: replicas_of(kube, namespace, "orders") == 5, 10,
                   "commit c2's change after the swap")
        eventually(lambda: get_cluster(kube, namespace, "billing"), 10, "c2's new cluster")

        # git-sync removes the old worktree; the next commit must still be seen.
        for stale in (root / ".worktrees" / "c1" / "clusters").iterdir():
            stale.unlink()
        (root / ".worktrees" / "c1" / "clusters").rmdir()
        swap(checkout("c3", {"orders.yaml": cluster_file(namespace, "orders", replicas=7),
                             "billing.yaml": cluster_file(namespace, "billing")}))
        eventually(lambda: replicas_of(kube, namespace, "orders") == 7, 10,
                   "commit c3's change after the second swap")


def test_only_the_leader_applies_the_directory(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        tmp_path: Path) -> None:
    repo = tmp_path / "clusters"
    repo.mkdir()
    write(repo / "orders.yaml", cluster_file(namespace, "orders"))
    leader = Runtime(runtime_settings(control_plane, namespace, identity="a",
                                      source=f"dir:{repo}", source_debounce_s=0.2),
                     controller_factory=RecordingController)
    standby = Runtime(runtime_settings(control_plane, namespace, identity="b",
                                       source=f"dir:{repo}", source_debounce_s=0.2),
                      controller_factory=RecordingController)
    leader.start()
    try:
        eventually(leader.is_leader, 10, "leadership")
        standby.start()
        eventually(lambda: get_cluster(kube, namespace, "orders"), 20, "the cluster")
        eventually(lambda: standby.ready()[0], 20, "the standby's caches")
        assert standby.source is None
        assert standby.metrics.value("kaiwu_writes_total",
                                     {"verb": "apply", "kind": "KaiwuCluster"}) == 0
        assert leader.metrics.value("kaiwu_writes_total",
                                    {"verb": "apply", "kind": "KaiwuCluster"}) == 1
    finally:
        standby.stop()
        leader.stop()
