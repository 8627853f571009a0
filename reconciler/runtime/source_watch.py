"""Directory mode's watch of its path (watchdog, inotify): the checkout recursively, plus the
directory holding each symlink on the way to it, so that git-sync's swap of a link onto a new
worktree is noticed and the watch moves there; each content change asks for a scan.

Used by reconciler.runtime.source_dir (DirectorySource: re-points the watch before each scan and
scans when told of a change).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

# The source's own log, as before this module was split out of it.
log = logging.getLogger("reconciler.runtime.source_dir")

# Events that mean content changed; reads (opened, closed_no_write) are ignored, or every scan
# would trigger the next.
_CHANGES = frozenset({"created", "deleted", "modified", "moved", "closed"})


class DirectoryWatch:
    """The watches on one path; `on_change()` for each change of content under it."""

    def __init__(self, path: Path, on_change: Callable[[], None]) -> None:
        self.path = path
        self.on_change = on_change
        self._observer: Any = None
        # stop() may come from another thread while the scanner re-points the watches: the
        # observer is replaced, used and dropped only under this lock.
        self._lock = threading.Lock()
        self.watched: tuple[Path, ...] = ()  # what inotify watches now

    def start(self) -> None:
        self._observer = Observer()
        self._observer.daemon = True
        self._observer.start()
        self.rewatch()

    def stop(self) -> None:
        with self._lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()

    def rewatch(self) -> None:
        """Watch the current target of the path, and the directories of its symlinks."""
        with self._lock:
            if self._observer is not None:  # None: stopped
                self._point_watches(self._observer)

    def _point_watches(self, observer: Any) -> None:
        wanted: list[tuple[Path, bool]] = []
        try:
            wanted = [(parent, False) for parent in symlink_parents(self.path)]
            if not wanted and self.path.parent.is_dir():
                # PATH itself may be created, replaced or removed later: watch its parent too.
                wanted.append((self.path.parent, False))
            real = self.path.resolve()
            if real.is_dir():
                wanted.append((real, True))
        except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop
            log.warning("cannot resolve the source directory", extra={"error": str(error)})
        if tuple(path for path, _ in wanted) == self.watched:
            return
        observer.unschedule_all()
        handler = Changes(self)
        for path, recursive in wanted:
            try:
                observer.schedule(handler, str(path), recursive=recursive)
            except OSError as error:  # vanished between resolve and watch: next scan retries
                log.warning("cannot watch", extra={"path": str(path), "error": str(error)})
        self.watched = tuple(path for path, _ in wanted)
        log.info("watching the source directory", extra={
            "path": str(self.path), "watched": [str(p) for p in self.watched]})


class Changes(FileSystemEventHandler):
    """Turns watchdog's events into scans: content changes only, and a watched directory
    gone sets every watch up again."""

    def __init__(self, watch: DirectoryWatch) -> None:
        self.watch = watch

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CHANGES:
            return
        if event.is_directory and event.event_type == "modified":
            return  # a file inside changed: that file's own event follows
        if event.event_type in ("deleted", "moved") and \
                os.fsdecode(event.src_path) in {str(p) for p in self.watch.watched}:
            # A watched directory itself went away: its watch is dead, set all up again.
            self.watch.watched = ()
        self.watch.on_change()


def symlink_parents(path: Path) -> list[Path]:
    """The directories holding each symlink on the way to `path` (git-sync swaps the link
    itself, which shows as an event in the link's directory, not inside the old target)."""
    parents: list[Path] = []
    current = Path(path.anchor)
    for part in path.parts[1:]:
        current = current / part
        if current.is_symlink():
            parents.append(current.parent.resolve())
            current = current.resolve()
    return parents
