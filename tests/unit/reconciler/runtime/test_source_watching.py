"""Stories about directory mode while it runs (reconciler.runtime.source_dir): what it watches
with inotify (the checkout, and the directory of each symlink on the way to it, as git-sync
swaps them), how a burst of changes becomes one scan after a quiet spell, what it logs for an
operator, and how it stops. Real watchdog observers on a temporary directory; the API is the
dictionary of test_source_dir.py. The same against the real apiserver and git-sync's layout:
tests/world_stories/runtime/test_source_dir.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler.metrics import Metrics
from reconciler.runtime import source_dir, source_watch
from reconciler.runtime.source_dir import DirectorySource
from tests.support.source_dir import (
    Api,
    cluster_file,
    repo_with,
    source,
)
from tests.support.threads import holding_up_exit, threads_started


def eventually(condition: Any, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_source_path_caught_in_a_symlink_loop_is_reported_and_the_source_keeps_running(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    directory = source(tmp_path / "a", Api(), source_debounce_s=0.01)
    with caplog.at_level(logging.WARNING, logger="reconciler.runtime.source_dir"):
        directory.start()
        try:
            eventually(lambda: directory.scans >= 1, "scanned")
            assert directory.alive
            assert directory.status()[-1] == f"source error: {tmp_path / 'a'} is not a directory"
        finally:
            directory.stop()
    record = next(r for r in caplog.records
                  if r.getMessage() == "cannot resolve the source directory")
    assert getattr(record, "error", "").startswith("Symlink loop from ")


def applied_replicas(api: Api, name: str) -> int | None:
    found = api.clusters.get(("shop", name))
    return found["spec"]["replicas"] if found else None


def test_a_file_changed_in_the_watched_directory_is_applied_after_a_quiet_spell(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    directory = source(repo, api, source_debounce_s=0.05)
    with threads_started() as threads:
        directory.start()
    try:
        eventually(lambda: api.applied == ["orders"], "read at start")
        assert "source-dir" in [thread.name for thread in threads]
        assert holding_up_exit(threads) == [], "neither the scanner nor inotify's threads"
        (repo / "team").mkdir()
        (repo / "team" / "payments.yaml").write_text(cluster_file("payments"))
        eventually(lambda: applied_replicas(api, "payments") == 3, "a new file in a new dir")
        (repo / "orders.yaml").write_text(cluster_file("orders", replicas=5))
        eventually(lambda: applied_replicas(api, "orders") == 5, "a changed file")
    finally:
        directory.stop()
    assert not directory.alive
    for thread in threads:  # inotify's threads too
        thread.join(5)
        assert not thread.is_alive(), thread.name
    # Started again (a new term of the same replica): everything is applied again.
    directory.start()
    try:
        eventually(lambda: api.applied.count("orders") == 3, "re-applied at the new start")
    finally:
        directory.stop()
    directory.stop()  # twice: no harm


def test_stopping_waits_for_a_scan_in_progress(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    slow_apply = api.apply

    def slow(obj: Any, **options: Any) -> Any:
        time.sleep(0.3)
        return slow_apply(obj, **options)
    api.apply = slow  # type: ignore[method-assign]
    directory = source(repo, api, source_debounce_s=0.01)
    directory.start()
    eventually(lambda: directory.scans == 0 and directory._lock.locked(), "a scan running")
    directory.stop()
    assert not directory.alive and api.applied == ["orders"], "the scan ended first"


def test_stopping_waits_only_so_long_for_a_scan_that_hangs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_dir, "STOP_WAIT_S", 0.1)
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    release = threading.Event()

    def hung(obj: Any, **options: Any) -> Any:
        release.wait(30)
        return obj
    api.apply = hung  # type: ignore[method-assign]
    directory = source(repo, api, source_debounce_s=0.01)
    directory.start()
    try:
        eventually(lambda: directory._lock.locked(), "a scan running")
        started = time.monotonic()
        directory.stop()
        # STOP_WAIT_S (0.1 s), not the scan's 30 s: the scan is left to end by itself.
        assert time.monotonic() - started < 3.0 and directory.alive
    finally:
        release.set()


def test_a_change_made_during_a_scan_is_read_a_quiet_spell_after_it_was_made(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    applied_at: list[float] = []
    plain_apply = api.apply

    def slow(obj: Any, **options: Any) -> Any:
        applied_at.append(time.monotonic())
        time.sleep(1.5)
        return plain_apply(obj, **options)
    api.apply = slow  # type: ignore[method-assign]
    directory = source(repo, api, source_debounce_s=2.0)
    directory.start()
    try:
        eventually(lambda: applied_at, "the first scan applies")
        (repo / "orders.yaml").write_text(cluster_file("orders", replicas=5))
        changed = time.monotonic()
        eventually(lambda: len(applied_at) == 2, "the change applied")
        # 2 s after the change; a whole quiet spell after the scan ended would be 3.5 s.
        assert applied_at[1] - changed < 3.2
    finally:
        directory.stop()


def test_a_burst_of_changes_is_read_once_it_is_over(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    directory = source(repo, api, source_debounce_s=0.15)
    directory.start()
    try:
        eventually(lambda: directory.scans == 1, "read at start")
        for replicas in (4, 5, 6):
            (repo / "orders.yaml").write_text(cluster_file("orders", replicas=replicas))
            time.sleep(0.03)
        last_change = time.monotonic()
        eventually(lambda: directory.scans == 2, "read after the burst")
        assert time.monotonic() - last_change >= 0.1, "not before the quiet spell"
        assert api.applied == ["orders", "orders"] and applied_replicas(api, "orders") == 6
        time.sleep(0.2)
        assert directory.scans == 2, "one scan for the burst"
    finally:
        directory.stop()


def test_a_requested_scan_applies_what_changed_or_everything_when_forced(
        tmp_path: Path) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api = Api()
    directory = source(repo, api, source_debounce_s=0.01)
    directory.start()
    try:
        eventually(lambda: directory.scans == 1, "read at start")
        directory.request_scan()
        eventually(lambda: directory.scans == 2, "read again")
        assert api.applied == ["orders"], "nothing changed"
        directory.request_scan(force=True)  # the periodic resync
        eventually(lambda: directory.scans == 3, "read again")
        assert api.applied == ["orders", "orders"], "re-applied, undoing hand edits"
        directory.request_scan()
        eventually(lambda: directory.scans == 4, "read again")
        assert api.applied == ["orders", "orders"], "a forced scan forces only itself"
    finally:
        directory.stop()


def test_a_git_sync_symlink_swap_moves_the_watch_to_the_new_checkout(tmp_path: Path) -> None:
    root = tmp_path / "git"
    root.mkdir()

    def checkout(commit: str, replicas: int) -> Path:
        worktree = root / ".worktrees" / commit
        (worktree / "clusters").mkdir(parents=True)
        (worktree / "clusters" / "orders.yaml").write_text(cluster_file("orders", replicas))
        return worktree

    def swap(worktree: Path) -> None:
        new_link = root / ".repo-new"
        new_link.symlink_to(worktree)
        os.replace(new_link, root / "repo")

    swap(checkout("c1", 3))
    api = Api()
    directory = source(root / "repo" / "clusters", api, source_debounce_s=0.05)
    directory.start()
    try:
        eventually(lambda: applied_replicas(api, "orders") == 3, "commit c1")
        assert directory.watch.watched == (root.resolve(),
                                           root.resolve() / ".worktrees/c1/clusters")
        swap(checkout("c2", 5))
        eventually(lambda: applied_replicas(api, "orders") == 5, "commit c2 after the swap")
        eventually(lambda: directory.watch.watched[-1] == root.resolve() / ".worktrees/c2/clusters",
                   "watching c2")
        (root / ".worktrees" / "c2" / "clusters" / "orders.yaml").write_text(
            cluster_file("orders", 7))
        eventually(lambda: applied_replicas(api, "orders") == 7, "a change inside c2")
    finally:
        directory.stop()


def test_a_directory_made_after_the_start_is_picked_up(tmp_path: Path) -> None:
    repo = tmp_path / "clusters"
    api = Api()
    directory = source(repo, api, source_debounce_s=0.05)
    directory.start()
    try:
        eventually(lambda: directory.scans == 1, "read at start")
        assert tuple(directory.watch.watched) == (tmp_path,), "its parent, for when it appears"
        repo.mkdir()
        (repo / "orders.yaml").write_text(cluster_file("orders"))
        eventually(lambda: applied_replicas(api, "orders") == 3, "the new directory read")
        eventually(lambda: directory.watch.watched == (tmp_path, repo), "and watched")
    finally:
        directory.stop()


def test_a_file_written_just_after_a_scan_read_its_new_directory_is_not_lost(
        tmp_path: Path) -> None:
    # The race of a loaded machine: the directory is made, the scan finds it still empty, and
    # the file lands before the scanner has watched the new directory. Made certain here by
    # writing the file at the end of the scan that read the empty directory.
    repo = tmp_path / "clusters"
    api = Api()
    directory = source(repo, api, source_debounce_s=0.05)
    read = directory.scan

    def scan_then_write(force: bool = False) -> Any:
        result = read(force)
        if repo.is_dir() and not (repo / "orders.yaml").exists():
            (repo / "orders.yaml").write_text(cluster_file("orders"))
        return result
    directory.scan = scan_then_write  # type: ignore[method-assign]
    directory.start()
    try:
        eventually(lambda: directory.scans == 1, "read at start")
        repo.mkdir()
        eventually(lambda: applied_replicas(api, "orders") == 3, "the late file read")
    finally:
        directory.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_scan_that_fails_is_logged_counted_and_the_source_keeps_going(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path, orders=cluster_file("orders"))
    api, metrics = Api(), Metrics()
    broken = {"yes"}

    def apply(obj: Any, **options: Any) -> Any:
        if broken:
            raise ValueError("the client broke")
        return Api.apply(api, obj, **options)
    api.apply = apply  # type: ignore[method-assign]
    directory = source(repo, api, metrics, source_debounce_s=0.01)
    with caplog.at_level(logging.ERROR, logger="reconciler.runtime.source_dir"):
        directory.start()
        try:
            eventually(lambda: "reading the source directory failed" in caplog.messages,
                       "logged")
            assert metrics.value("kaiwu_errors_total", {"stage": "source"}) == 1
            broken.clear()
            directory.request_scan()
            eventually(lambda: api.applied == ["orders"], "the next scan works")
        finally:
            directory.stop()
    record = next(r for r in caplog.records
                  if r.getMessage() == "reading the source directory failed")
    assert record.exc_info is not None and getattr(record, "path", None) == str(repo)


# ---- what is watched, and which events matter -----------------------------------------------

class Observer:
    """Records the watches asked for; `refuse` names paths that vanished meanwhile."""

    def __init__(self) -> None:
        self.scheduled: list[tuple[str, bool]] = []
        self.cleared = 0
        self.refuse: set[str] = set()
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def schedule(self, handler: Any, path: str, recursive: bool = False) -> None:
        if path in self.refuse:
            raise FileNotFoundError(2, "No such file or directory", path)
        self.scheduled.append((path, recursive))

    def unschedule_all(self) -> None:
        self.cleared += 1
        self.scheduled = []


def watching(path: Path) -> tuple[DirectorySource, Observer]:
    directory = source(path, Api())
    observer = Observer()
    directory.watch._observer = observer
    return directory, observer


def test_the_checkout_is_watched_whole_and_the_directories_on_the_way_only_themselves(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path)
    directory, observer = watching(repo)
    with caplog.at_level(logging.INFO, logger="reconciler.runtime.source_dir"):
        directory.watch.rewatch()
    assert observer.scheduled == [(str(tmp_path), False), (str(repo), True)]
    record = next(r for r in caplog.records if r.getMessage() == "watching the source directory")
    assert getattr(record, "path", None) == str(repo)
    assert getattr(record, "watched", None) == [str(tmp_path), str(repo)]
    directory.watch.rewatch()
    assert observer.cleared == 1, "the same paths: the watches are left as they are"

    checkout = tmp_path / "worktrees" / "c1"
    checkout.mkdir(parents=True)
    (tmp_path / "link").symlink_to(checkout)
    linked, observer = watching(tmp_path / "link")
    linked.watch.rewatch()
    assert observer.scheduled == [(str(tmp_path), False), (str(checkout), True)], \
        "the link's directory (where git-sync swaps it), not the link's parent again"


def test_a_path_that_vanishes_before_it_is_watched_is_logged_and_tried_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repo_with(tmp_path)
    directory, observer = watching(repo)
    observer.refuse.add(str(repo))
    with caplog.at_level(logging.WARNING, logger="reconciler.runtime.source_dir"):
        directory.watch.rewatch()
    assert observer.scheduled == [(str(tmp_path), False)]
    record = next(r for r in caplog.records if r.getMessage() == "cannot watch")
    assert getattr(record, "path", None) == str(repo)
    assert "No such file or directory" in getattr(record, "error", "")


def test_content_changes_ask_for_a_scan_reads_and_directory_touches_do_not(
        tmp_path: Path) -> None:
    from watchdog.events import (
        DirDeletedEvent,
        DirModifiedEvent,
        DirMovedEvent,
        FileClosedEvent,
        FileClosedNoWriteEvent,
        FileCreatedEvent,
        FileDeletedEvent,
        FileModifiedEvent,
        FileMovedEvent,
        FileOpenedEvent,
    )
    repo = repo_with(tmp_path)
    directory = source(repo, Api())
    requested: list[bool] = []
    directory.request_scan = lambda force=False: requested.append(force)  # type: ignore[method-assign]
    handler = source_watch.Changes(directory.watch)
    file = str(repo / "orders.yaml")
    for quiet in (FileOpenedEvent(file), FileClosedNoWriteEvent(file), DirModifiedEvent(str(repo))):
        handler.on_any_event(quiet)
    assert requested == []
    for change in (FileCreatedEvent(file), FileModifiedEvent(file), FileClosedEvent(file),
                   FileDeletedEvent(file), FileMovedEvent(file, file + ".old")):
        handler.on_any_event(change)
    assert requested == [False] * 5, "plain scans, after the quiet spell"
    directory.watch.watched = (tmp_path, repo)
    handler.on_any_event(FileDeletedEvent(file))
    assert directory.watch.watched == (tmp_path, repo), "a file inside: the watches still hold"
    handler.on_any_event(DirDeletedEvent(str(repo)))
    assert tuple(directory.watch.watched) == (), \
        "a watched directory gone: its watch is dead, set all up"
    directory.watch.watched = (tmp_path, repo)
    handler.on_any_event(DirMovedEvent(str(repo), str(tmp_path / "elsewhere")))
    assert tuple(directory.watch.watched) == ()
    assert len(requested) == 8


def test_a_stop_that_comes_while_the_watches_are_re_pointed_waits_for_them(
        tmp_path: Path) -> None:
    # The runtime stops the source (SIGTERM) just as the scanner re-points its watches after a
    # git-sync swap: the scanner's thread once died on an observer taken away under it.
    repo = repo_with(tmp_path)
    directory, observer = watching(repo)
    stopper = threading.Thread(target=directory.stop)

    def cleared_and_stopped_meanwhile() -> None:
        observer.cleared += 1
        observer.scheduled = []
        stopper.start()
        stopper.join(0.2)  # the stop waits for the watches, however long we give it here
    observer.unschedule_all = cleared_and_stopped_meanwhile  # type: ignore[method-assign]
    directory.watch.rewatch()
    stopper.join(5)
    assert not stopper.is_alive(), "the stop finished once the watches were set"
    assert observer.scheduled == [(str(tmp_path), False), (str(repo), True)]
    assert observer.stopped
    directory.watch.rewatch()  # stopped: nothing is watched any more, and nothing fails
    assert observer.cleared == 1
