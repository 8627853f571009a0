"""Stories about directory mode's decisions (reconciler.runtime.source_dir), one scan at a time:
which files become which KaiwuClusters, what is applied again and what is not, what a broken
file costs, and when a cluster whose file is gone is deleted. `DirectorySource.scan` is called
directly on a temporary directory; the API is a dictionary that stores what is applied (the
same dictionary serves as the watch cache). Watching with inotify, git-sync's symlink swaps and
the real apiserver: tests/world_stories/runtime/test_source_dir.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from reconciler.keys import ClusterKey
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.runtime import source_dir
from reconciler.runtime.source_dir import SOURCE_ANNOTATION, SOURCE_FILE_ANNOTATION
from reconciler.runtime.source_watch import symlink_parents
from renderer import loader
from renderer.errors import Problem, RenderError
from tests.support.fake_api import FakeApi
from tests.support.source_dir import ORDERS, PAYMENTS, Api, cluster_file, repo_with, source


def test_each_file_becomes_its_cluster_marked_as_coming_from_the_directory(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    (repo / "team").mkdir()
    (repo / "team" / "payments.yaml").write_text(cluster_file("payments"))
    api, metrics = Api(), Metrics()
    result = source(repo, api, metrics).scan()
    assert result.clusters == (ORDERS, PAYMENTS) and result.applied == (ORDERS, PAYMENTS)
    meta = api.clusters[("shop", "payments")]["metadata"]
    assert (meta["name"], meta["namespace"], meta["annotations"]) == ("payments", "shop", {
        SOURCE_ANNOTATION: "dir", SOURCE_FILE_ANNOTATION: "team/payments.yaml"})
    assert "labels" not in meta
    assert api.clusters[("shop", "orders")]["spec"] == {"replicas": 3}, "as written"
    assert metrics.value("kaiwu_source_clusters") == 2
    assert metrics.value("kaiwu_writes_total", {"verb": "apply", "kind": "KaiwuCluster"}) == 2
    assert result.summary() == [f"source dir {repo}: 2 clusters, 0 broken files"]


def test_only_what_changed_is_applied_again_unless_forced(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"),
                     payments=cluster_file("payments"))
    api = Api()
    directory = source(repo, api)
    directory.scan()
    (repo / "orders.yaml").write_text(cluster_file("orders", replicas=5))
    assert directory.scan().applied == (ORDERS,)
    assert directory.scan().applied == ()
    # Someone deleted a cluster by hand: it comes back.
    FakeApi.delete(api, KAIWU_CLUSTER, "shop", "payments")  # kubectl delete
    assert directory.scan().applied == (PAYMENTS,)
    # The periodic resync re-applies everything (undoing hand edits).
    assert directory.scan(force=True).applied == (ORDERS, PAYMENTS)
    assert directory.scans == 5
    # Only the later one changed: the unchanged one before it does not stop the pass.
    (repo / "payments.yaml").write_text(cluster_file("payments", replicas=5))
    assert directory.scan().applied == (PAYMENTS,)


def test_a_file_whose_keys_are_only_reordered_is_not_applied_again(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    directory = source(repo, api)
    directory.scan()
    (repo / "orders.yaml").write_text("kind: KaiwuCluster\napiVersion: kaiwu.inspur.com/v1\n"
                                      "spec:\n  replicas: 3\n"
                                      "metadata:\n  namespace: shop\n  name: orders\n")
    assert directory.scan().applied == ()


def test_a_file_without_a_namespace_is_applied_to_the_default_one_with_its_own_annotations(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders="apiVersion: kaiwu.inspur.com/v1\nkind: KaiwuCluster\n"
                     "metadata:\n  name: orders\n  annotations:\n    team: sales\n"
                     "spec:\n  replicas: 3\n")
    api = Api()
    assert source(repo, api).scan().applied == (ClusterKey("default", "orders"),)
    meta = api.clusters[("default", "orders")]["metadata"]
    assert (meta["name"], meta["namespace"], meta["annotations"]) == ("orders", "default", {
        "team": "sales", SOURCE_ANNOTATION: "dir", SOURCE_FILE_ANNOTATION: "orders.yaml"})


def test_a_broken_file_is_reported_once_and_its_cluster_keeps_its_last_good_spec(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"),
                     payments=cluster_file("payments"))
    api, metrics = Api(), Metrics()
    directory = source(repo, api, metrics)
    directory.scan()
    (repo / "payments.yaml").write_text(cluster_file("payments", replicas=2))
    (repo / "orders.yaml").write_text(cluster_file("orders", replicas=5))
    result = directory.scan()
    assert result.applied == (ORDERS,) and result.clusters == (ORDERS,)
    [broken] = result.broken
    assert broken.file == "payments.yaml"
    assert "spec.replicas: multi-replica needs at least 3 nodes, got 2" in broken.problems[0]
    assert api.clusters[("shop", "payments")]["spec"]["replicas"] == 3
    assert metrics.value("kaiwu_source_broken_files") == 1
    assert metrics.value("kaiwu_source_errors_total") == 1
    [(name, type_, reason, message)] = api.emitted
    assert (name, type_, reason) == ("payments", "Warning", "InvalidSourceFile")
    assert message == ("payments.yaml is broken, the cluster keeps its last good spec: "
                       + broken.problems[0])
    assert result.summary()[:2] == [f"source dir {repo}: 1 clusters, 1 broken files",
                                    f"broken file payments.yaml: {broken.problems[0]}"]
    # The same broken version is not reported again; not pruned either, though no good file
    # defines it.
    again = directory.scan()
    assert len(again.broken) == 1 and len(api.emitted) == 1
    assert metrics.value("kaiwu_source_errors_total") == 1
    assert ("shop", "payments") in api.clusters
    # Broken differently, twice over: reported again, every problem in the Event.
    (repo / "payments.yaml").write_text(cluster_file("payments", replicas=2) + "---\n"
                                        + cluster_file("extra") + "  bogus: 1\n")
    problems = directory.scan().broken[0].problems
    assert len(problems) == 2 and api.emitted[-1][3].endswith("; ".join(problems))
    assert len(api.emitted) == 2 and metrics.value("kaiwu_source_errors_total") == 2
    # Fixed: applied, and nothing broken is left.
    (repo / "payments.yaml").write_text(cluster_file("payments", replicas=4))
    fixed = directory.scan()
    assert fixed.applied == (PAYMENTS,) and fixed.broken == ()
    assert metrics.value("kaiwu_source_broken_files") == 0


def test_a_cluster_defined_twice_is_kept_from_the_first_file(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, a=cluster_file("orders"), b=cluster_file("orders", replicas=5))
    api = Api()
    result = source(repo, api).scan()
    assert result.applied == (ORDERS,)
    assert api.clusters[("shop", "orders")]["spec"]["replicas"] == 3
    [broken] = result.broken
    assert broken.file == "b.yaml"
    assert broken.problems == ("b.yaml: cluster shop/orders is already defined in a.yaml",)


def test_a_file_skipped_does_not_stop_the_files_after_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo = repo_with(tmp_path, a="kind: [", b=cluster_file("orders"), c=cluster_file("orders"),
                     d=cluster_file("payments"))
    real_find_files = loader.find_files
    monkeypatch.setattr(source_dir, "find_files",
                        lambda root: [root / "0-gone.yaml", *real_find_files(root)])
    result = source(repo, Api()).scan()
    assert [b.file for b in result.broken] == ["0-gone.yaml", "a.yaml", "c.yaml"]
    assert result.applied == (ORDERS, PAYMENTS)


def test_a_refused_apply_does_not_stop_the_clusters_after_it(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"), payments=cluster_file("payments"))
    api = Api()
    api.refuse.add("orders")
    result = source(repo, api).scan()
    assert result.applied == (PAYMENTS,) and [key for key, _ in result.failed] == [ORDERS]


def test_a_cluster_outside_the_watched_namespace_is_refused(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"),
                     other=cluster_file("other", namespace="elsewhere"))
    api = Api()
    result = source(repo, api, watch_namespace="shop").scan()
    assert result.applied == (ORDERS,)
    refusal = ("namespace elsewhere is not one directory mode writes to (--source-namespaces "
               "shop)")
    assert result.failed == ((ClusterKey("elsewhere", "other"), refusal),)
    assert list(api.clusters) == [("shop", "orders")], "the other one sorts first: skipped"
    assert f"apply of elsewhere/other refused: {refusal}" in result.summary()


def test_directory_mode_writes_only_in_the_reconcilers_own_namespace_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit to the watched repository cannot make the reconciler create clusters in
    another team's namespace: by default it writes only where it runs."""
    monkeypatch.setenv("POD_NAMESPACE", "shop")
    repo = repo_with(tmp_path, orders=cluster_file("orders"),
                     other=cluster_file("other", namespace="payroll"))
    api = Api()
    result = source(repo, api, source_namespaces="").scan()
    assert result.applied == (ORDERS,)
    assert result.failed == ((ClusterKey("payroll", "other"),
                              "namespace payroll is not one directory mode writes to "
                              "(--source-namespaces shop)"),)
    assert list(api.clusters) == [("shop", "orders")]


def test_directory_mode_writes_in_the_namespaces_it_is_given_and_prunes_only_there(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"),
                     other=cluster_file("other", namespace="payroll"))
    api = Api()
    for name, namespace in (("gone", "shop"), ("kept", "payroll")):
        api.put({"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
                 "metadata": {"name": name, "namespace": namespace,
                              "annotations": {SOURCE_ANNOTATION: "dir"}}, "spec": {}})
    result = source(repo, api, source_namespaces="shop, accounts",
                    prune_deleted_clusters=True).scan()
    assert result.applied == (ORDERS,)
    assert [key for key, _ in result.failed] == [ClusterKey("payroll", "other")]
    assert ("shop", "gone") not in api.clusters, "pruned: in the lane, its file is gone"
    assert ("payroll", "kept") in api.clusters, "outside the lane: never pruned"


def test_an_apply_the_api_server_refuses_is_reported_and_tried_again_next_time(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api, metrics = Api(), Metrics()
    api.refuse.add("orders")
    directory = source(repo, api, metrics)
    result = directory.scan()
    assert result.failed == ((ORDERS, "HTTP 422: KaiwuCluster orders is invalid: "
                                      "spec.replicas"),)
    assert metrics.value("kaiwu_errors_total", {"stage": "source"}) == 1
    api.refuse.clear()
    assert directory.scan().applied == (ORDERS,)


def test_a_cluster_whose_file_is_gone_is_kept_unless_pruning_is_allowed(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"),
                     payments=cluster_file("payments"))
    api = Api()
    api.put({"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
             "metadata": {"name": "by-hand", "namespace": "shop"}})
    keeping = source(repo, api)
    keeping.scan()
    (repo / "payments.yaml").unlink()
    result = keeping.scan()
    assert result.kept == (PAYMENTS,) and result.pruned == () and api.deleted == []
    assert result.summary()[-1] == ("cluster shop/payments is no longer in the directory; "
                                    "kept (pruning is off)")
    # Back as it was: applied again (it may have been edited by hand while it was not ours).
    (repo / "payments.yaml").write_text(cluster_file("payments"))
    assert keeping.scan().applied == (PAYMENTS,)
    (repo / "payments.yaml").unlink()
    keeping.scan()
    metrics = Metrics()
    pruning = source(repo, api, metrics, prune_deleted_clusters=True)
    result = pruning.scan()
    assert result.pruned == (PAYMENTS,) and result.kept == ()
    assert api.deleted == [("payments", "uid-payments")], "a cluster made by hand is not ours"
    assert ("shop", "payments") not in api.clusters and result.error == ""
    assert result.summary() == [f"source dir {repo}: 1 clusters, 0 broken files"]
    assert metrics.value("kaiwu_writes_total", {"verb": "delete", "kind": "KaiwuCluster"}) == 1
    # Added back: applied again, though the same content was applied before it went.
    (repo / "payments.yaml").write_text(cluster_file("payments"))
    assert pruning.scan().applied == (PAYMENTS,)


def test_only_the_watched_namespaces_clusters_are_pruned(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    api.put({"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster", "metadata": {
        "name": "other", "namespace": "elsewhere", "annotations": {SOURCE_ANNOTATION: "dir"}}})
    result = source(repo, api, prune_deleted_clusters=True, watch_namespace="shop").scan()
    assert result.pruned == () and api.deleted == []


def test_a_broken_files_clusters_are_not_pruned(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"), payments=cluster_file("payments"))
    api = Api()
    directory = source(repo, api, prune_deleted_clusters=True)
    directory.scan()
    (repo / "payments.yaml").write_text("kind: [")
    result = directory.scan()
    assert result.pruned == () and result.kept == () and api.deleted == []


def test_a_source_stopped_before_it_started_or_twice_stops_cleanly(tmp_path: Path) -> None:
    directory = source(repo_with(tmp_path), Api())
    directory.stop()
    directory.stop()
    assert not directory.alive


def test_a_prune_the_api_server_refuses_is_counted_and_the_rest_go_on(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"), a=cluster_file("a"),
                     payments=cluster_file("payments"))
    api, metrics = Api(), Metrics()
    directory = source(repo, api, metrics, prune_deleted_clusters=True)
    directory.scan()
    (repo / "a.yaml").unlink()
    (repo / "payments.yaml").unlink()
    api.refuse.add("a")
    result = directory.scan()
    assert result.pruned == (PAYMENTS,)
    assert metrics.value("kaiwu_errors_total", {"stage": "source"}) == 1


def test_an_empty_or_missing_directory_prunes_nothing(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api, metrics = Api(), Metrics()
    directory = source(repo, api, metrics, prune_deleted_clusters=True)
    directory.scan()
    (repo / "orders.yaml").unlink()
    result = directory.scan()
    assert result.pruned == () and result.kept == (ORDERS,) and api.deleted == []
    assert result.error == f"no KaiwuCluster files under {repo}: not pruning 1 clusters"
    assert metrics.value("kaiwu_source_errors_total") == 1
    repo.rmdir()
    missing = directory.scan()
    assert missing.error == f"{repo} is not a directory" and api.deleted == []
    assert missing.summary() == [f"source dir {repo}: 0 clusters, 0 broken files",
                                 f"source error: {repo} is not a directory"]
    assert metrics.value("kaiwu_source_errors_total") == 2


def test_readyz_says_the_directory_was_not_read_yet_then_what_it_holds(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    directory = source(repo, Api())
    assert directory.status() == [f"source dir {repo}: not read yet"]
    directory.scan()
    assert directory.status() == [f"source dir {repo}: 1 clusters, 0 broken files"]


def test_the_directories_holding_each_symlink_on_the_way_are_watched(tmp_path: Path) -> None:
    checkout = tmp_path / "worktrees" / "abc123"
    checkout.mkdir(parents=True)
    (tmp_path / "git").mkdir()
    (tmp_path / "git" / "repo").symlink_to(checkout)
    assert symlink_parents(tmp_path / "git" / "repo" / "clusters") == [
        (tmp_path / "git").resolve()]
    assert symlink_parents(checkout) == []


# ---- what an operator reads in the log ------------------------------------------------------

def records(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == message]


def fields(record: logging.LogRecord, *names: str) -> dict[str, Any]:
    return {name: getattr(record, name, "(missing)") for name in names}


def test_each_cluster_applied_or_refused_is_logged_with_its_file_or_the_reason(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"), payments=cluster_file("payments"))
    api = Api()
    long = "x" * 600

    def refuse(obj: Obj, **options: Any) -> Obj:
        if obj["metadata"]["name"] == "payments":
            raise ApiError(422, "Invalid", long)
        return Api.apply(api, obj, **options)
    api.apply = refuse  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.source_dir"):
        result = source(repo, api).scan()
    [applied] = records(caplog, "applied KaiwuCluster from the source directory")
    assert applied.levelno == logging.INFO
    assert fields(applied, "cluster", "file") == {"cluster": "shop/orders", "file": "orders.yaml"}
    [refused] = records(caplog, "applying a KaiwuCluster from the source directory failed")
    assert refused.levelno == logging.ERROR
    assert fields(refused, "cluster", "error") == {"cluster": "shop/payments", "error": "x" * 500}
    assert result.failed == ((PAYMENTS, "HTTP 422: " + "x" * 300),)


def test_a_broken_file_is_logged_with_its_problems_and_the_clusters_it_keeps(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path, payments=cluster_file("payments"))
    directory = source(repo, Api())
    directory.scan()
    (repo / "payments.yaml").write_text(cluster_file("payments", replicas=2))
    with caplog.at_level(logging.ERROR, logger="reconciler.runtime.source_dir"):
        [broken] = directory.scan().broken
    assert broken.problems[0].startswith("payments.yaml:"), "named as under the directory"
    [logged] = records(caplog, "broken KaiwuCluster file skipped; the other files are still "
                               "applied")
    assert logged.levelno == logging.ERROR
    assert fields(logged, "file", "problems", "kept_clusters") == {
        "file": "payments.yaml", "problems": list(broken.problems),
        "kept_clusters": ["shop/payments"]}


def test_a_file_removed_while_the_directory_is_read_is_a_broken_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    real_find_files = loader.find_files
    monkeypatch.setattr(source_dir, "find_files",
                        lambda root: [*real_find_files(root), root / "gone.yaml"])
    result = source(repo, Api()).scan()
    assert result.applied == (ORDERS,)
    [broken] = result.broken
    assert broken.file == "gone.yaml"
    assert broken.problems[0].startswith("gone.yaml: [Errno 2] No such file or directory")


def test_a_directory_that_cannot_be_read_whole_is_reported_and_nothing_applied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    problem = Problem(str(repo / "team"), 0, "", "cannot read directory: Permission denied",
                      "make it readable")

    def unreadable(root: Path) -> list[Path]:
        raise RenderError([problem])
    monkeypatch.setattr(source_dir, "find_files", unreadable)
    api, metrics = Api(), Metrics()
    with caplog.at_level(logging.ERROR, logger="reconciler.runtime.source_dir"):
        result = source(repo, api, metrics).scan()
    assert api.applied == [] and result.root == str(repo)
    assert result.error == str(RenderError([problem])) and "Permission denied" in result.error
    assert metrics.value("kaiwu_source_errors_total") == 1
    [logged] = records(caplog, "part of the source directory cannot be read; nothing applied "
                               "or pruned")
    assert fields(logged, "path", "error") == {"path": str(repo), "error": result.error}


def test_a_missing_directory_and_an_empty_one_are_logged_as_errors(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    directory = source(repo, Api(), prune_deleted_clusters=True)
    directory.scan()
    (repo / "orders.yaml").unlink()
    with caplog.at_level(logging.ERROR, logger="reconciler.runtime.source_dir"):
        directory.scan()
        repo.rmdir()
        directory.scan()
    [empty] = records(caplog, f"no KaiwuCluster files under {repo}: not pruning 1 clusters")
    assert empty.levelno == logging.ERROR
    [missing] = records(caplog, "the source directory is missing; nothing applied or pruned")
    assert missing.levelno == logging.ERROR and fields(missing, "path") == {"path": str(repo)}


def test_a_cluster_gone_from_the_directory_is_logged_once_when_kept_and_when_deleted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"), payments=cluster_file("payments"),
                     a=cluster_file("a"))
    api = Api()
    api.refusal = "y" * 400
    keeping = source(repo, api)
    keeping.scan()
    (repo / "payments.yaml").unlink()
    (repo / "a.yaml").unlink()
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.source_dir"):
        keeping.scan()
        keeping.scan()
        api.refuse.add("a")
        source(repo, api, prune_deleted_clusters=True).scan()
    kept = records(caplog, "KaiwuCluster removed from the source directory is kept "
                           "(set --prune-deleted-clusters to delete it)")
    assert [fields(r, "cluster")["cluster"] for r in kept] == ["shop/a", "shop/payments"], \
        "once each, not at every scan"
    assert all(r.levelno == logging.WARNING for r in kept)
    [deleted] = records(caplog, "deleted KaiwuCluster removed from the source directory "
                                "(its volumes stay)")
    assert deleted.levelno == logging.WARNING
    assert fields(deleted, "cluster") == {"cluster": "shop/payments"}
    [failed] = records(caplog, "pruning a KaiwuCluster failed")
    assert failed.levelno == logging.ERROR
    assert fields(failed, "cluster", "error") == {"cluster": "shop/a", "error": "y" * 300}


def test_a_schedule_kept_beside_its_cluster_is_checked_and_said_not_applied_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The tree `kaiwu validate` accepts (a cluster and its backup schedule) works in directory
    mode too: the cluster is applied; the schedule is checked, not applied (whoever applies the
    tree applies it), and said so once per version of the file."""
    schedule = ("---\napiVersion: kaiwu.inspur.com/v1\nkind: KaiwuBackupSchedule\n"
                "metadata:\n  name: nightly\n  namespace: shop\n"
                "spec:\n  cluster: {name: orders}\n  schedule: '0 0 3 * * *'\n"
                "  template: {target: {volume: {claimName: dumps}}}\n")
    repo = repo_with(tmp_path, orders=cluster_file("orders") + schedule)
    api = Api()
    watched = source(repo, api)
    with caplog.at_level(logging.WARNING, logger="reconciler.runtime.source_dir"):
        first = watched.scan()
        watched.scan(force=True)
    assert first.clusters == (ORDERS,) and first.applied == (ORDERS,) and not first.broken
    said = [r for r in caplog.records if "backups and schedules" in r.getMessage()]
    assert len(said) == 1 and said[0].objects == "KaiwuBackupSchedule shop/nightly"  # type: ignore[attr-defined]
    broken = repo_with(tmp_path, orders=cluster_file("orders") + schedule.replace(
        "'0 0 3 * * *'", "'61 0 3 * * *'"))
    assert source(broken, Api()).scan().broken, "an invalid schedule is a broken file"
