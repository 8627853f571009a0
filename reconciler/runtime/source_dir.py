"""Directory mode (`--source dir:PATH`): KaiwuCluster files in a git checkout become the API's.

The pure GitOps pull model: a git-sync sidecar keeps PATH fresh (it checks out each commit into a
new worktree and swaps a symlink onto it), and the leader's `DirectorySource`, started by
`reconciler.runtime.process`, applies what it finds there. It watches PATH with watchdog
(inotify, reconciler.runtime.source_watch): the checkout recursively, plus the directory holding
each symlink on the way to it, so a swapped link is noticed and the watch moves to the new
worktree. After a short quiet spell (`source_debounce_s`) it reads every YAML file with the
renderer's loader and checks, each file on its own, and server-side applies each cluster
(annotated kaiwu.inspur.com/source: dir) that changed. The periodic resync re-applies all of
them, undoing hand edits of the KaiwuClusters.

A broken file is reported (a log line, kaiwu_source_errors_total, kaiwu_source_broken_files, the
/readyz detail, and a Warning Event on the clusters it defined before it broke) and skipped; the
clusters it defined before are kept and every other file is still applied. A cluster whose file
is gone is deleted only when `prune_deleted_clusters` is set (its data volumes stay: claims have
no owner); otherwise it is reported and kept. Nothing is pruned while the directory is missing,
holds no YAML files at all, or has broken files that may still define the cluster.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.keys import ClusterKey
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.kube.events import EventRecorder
from reconciler.kube.kinds import KAIWU_CLUSTER
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.runtime.source_watch import DirectoryWatch
from reconciler.settings import Settings
from renderer.errors import RenderError
from renderer.loader import find_files, load_documents, to_plain
from renderer.render import read_sources

log = logging.getLogger(__name__)

SOURCE_ANNOTATION = "kaiwu.inspur.com/source"
SOURCE_FILE_ANNOTATION = "kaiwu.inspur.com/source-file"
SOURCE_VALUE = "dir"
# How long stop() waits for a scan in progress (an apply hung on the API server must not hold
# up the end of a leadership term for long).
STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class BrokenFile:
    """A file that could not be used, and why (one `file:line: path: problem (fix)` each)."""

    file: str
    problems: tuple[str, ...]


@dataclass(frozen=True)
class ScanResult:
    """What one pass over the directory found and did."""

    root: str  # the directory actually read (the symlink resolved)
    clusters: tuple[ClusterKey, ...] = ()  # defined by good files
    broken: tuple[BrokenFile, ...] = ()
    applied: tuple[ClusterKey, ...] = ()
    failed: tuple[tuple[ClusterKey, str], ...] = ()  # the API refused the apply
    pruned: tuple[ClusterKey, ...] = ()
    kept: tuple[ClusterKey, ...] = ()  # gone from the directory, kept (pruning not allowed)
    error: str = ""  # the directory as a whole could not be used: nothing pruned

    def summary(self) -> list[str]:
        lines = [f"source dir {self.root}: {len(self.clusters)} clusters, "
                 f"{len(self.broken)} broken files"]
        if self.error:
            lines.append(f"source error: {self.error}")
        lines += [f"broken file {b.file}: {p}" for b in self.broken for p in b.problems]
        lines += [f"apply of {key} refused: {why}" for key, why in self.failed]
        lines += [f"cluster {key} is no longer in the directory; kept (pruning is off)"
                  for key in self.kept]
        return lines


@dataclass
class _FileState:
    digest: str = ""
    clusters: tuple[ClusterKey, ...] = ()  # from its last good version
    reported: str = ""  # digest of the broken version last reported
    passed_over: str = ""  # digest of the version whose backups and schedules were last logged


@dataclass
class _Pending:
    event: threading.Event = field(default_factory=threading.Event)
    last_change: float = 0.0
    force: bool = False


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class DirectorySource:
    """Applies the KaiwuCluster files under one directory; see the module docstring."""

    def __init__(self, path: Path, kube: Kube, view: CacheView, settings: Settings,
                 metrics: Metrics, events: EventRecorder | None = None) -> None:
        self.path = Path(os.path.abspath(path))
        self.kube = kube
        self.view = view
        self.settings = settings
        self.metrics = metrics
        self.events = events
        self.last_result: ScanResult | None = None
        self.scans = 0
        self._files: dict[str, _FileState] = {}
        self._applied: dict[ClusterKey, str] = {}  # digest of what we last applied
        self._warned_kept: set[ClusterKey] = set()
        self._pending = _Pending()
        self._lock = threading.Lock()  # one scan at a time
        self._stop = threading.Event()
        # Told of a change, scan (looked up at each call: a story may replace request_scan).
        self.watch = DirectoryWatch(self.path, lambda: self.request_scan())
        self._thread: threading.Thread | None = None

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self.watch.start()
        self.request_scan(force=True)
        self._thread = threading.Thread(target=self._run, name="source-dir", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._pending.event.set()
        self.watch.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def request_scan(self, force: bool = False) -> None:
        """Read the directory again soon (after the debounce); force re-applies everything."""
        self._pending.last_change = time.monotonic()
        self._pending.force = self._pending.force or force
        self._pending.event.set()

    def status(self) -> list[str]:
        """Lines for /readyz."""
        result = self.last_result
        return result.summary() if result else [f"source dir {self.path}: not read yet"]

    # ---- the scanner: waits for changes, then scans -----------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._pending.event.wait()
            if self._stop.is_set():
                return
            # Wait for quiet: a checkout or a copy is many events.
            while not self._stop.is_set():
                quiet = time.monotonic() - self._pending.last_change
                if quiet >= self.settings.source_debounce_s:
                    break
                self._stop.wait(self.settings.source_debounce_s - quiet)
            self._pending.event.clear()
            force, self._pending.force = self._pending.force, False
            # Watch first, then read: a file made after the read raises an event on a watch
            # already in place. The other order lost a file written into a directory created
            # moments before (read while still empty, watched only after the write).
            self.watch.rewatch()
            try:
                self.scan(force=force)
            except Exception:
                self.metrics.errors_total.labels(stage="source").inc()
                log.exception("reading the source directory failed",
                              extra={"path": str(self.path)})

    # ---- one pass ---------------------------------------------------------------------------

    def scan(self, force: bool = False) -> ScanResult:
        """Read every file, apply what changed (everything when force), prune if allowed."""
        with self._lock:
            result = self._scan(force)
        self.scans += 1
        self.last_result = result
        self.metrics.source_broken_files.set(len(result.broken))
        self.metrics.source_clusters.set(len(result.clusters))
        return result

    def _scan(self, force: bool) -> ScanResult:
        try:
            real = self.path.resolve()
        except RuntimeError:  # a symlink loop (Python 3.11; 3.13 leaves the path): no directory
            real = self.path
        if not real.is_dir():
            self.metrics.source_errors_total.inc()
            log.error("the source directory is missing; nothing applied or pruned",
                      extra={"path": str(self.path)})
            return ScanResult(str(real), error=f"{self.path} is not a directory")
        try:
            files = find_files(real)
        except RenderError as error:  # a sub-directory that cannot be read: its clusters
            self.metrics.source_errors_total.inc()  # are unknown, so none may be pruned
            log.error("part of the source directory cannot be read; nothing applied or pruned",
                      extra={"path": str(self.path), "error": str(error)})
            return ScanResult(str(real), error=str(error))
        good: dict[ClusterKey, tuple[str, Obj]] = {}  # key -> (file, object to apply)
        broken: list[BrokenFile] = []
        seen_files: set[str] = set()
        for path in files:
            shown = str(path.relative_to(real))
            seen_files.add(shown)
            state = self._files.setdefault(shown, _FileState())
            try:
                raw = path.read_bytes()
                state.digest = hashlib.sha256(raw).hexdigest()[:16]
                read = read_sources(load_documents([path], display_root=real))
                sources = read.clusters
                if read.companions and state.passed_over != state.digest:
                    # Checked like the clusters (`kaiwu validate` reads the same tree), but
                    # applied by whoever applies the tree: this mode applies KaiwuClusters.
                    state.passed_over = state.digest
                    log.warning("backups and schedules in the source directory are not "
                                "applied from it; apply them with kubectl or your GitOps tool",
                                extra={"file": shown, "objects": ", ".join(
                                    f"{c.kind} {c.namespace}/{c.name}" for c in read.companions)})
            except RenderError as error:
                broken.append(self._report_broken(shown, state,
                                                  [str(p) for p in error.problems]))
                continue
            except OSError as error:
                broken.append(self._report_broken(shown, state, [f"{shown}: {error}"]))
                continue
            keys: list[ClusterKey] = []
            duplicate = False
            for source in sources:
                key = ClusterKey(source.cluster.namespace, source.cluster.name)
                if key in good:
                    broken.append(self._report_broken(shown, state, [
                        f"{shown}: cluster {key} is already defined in {good[key][0]}"]))
                    duplicate = True
                    break
                keys.append(key)
            if duplicate:
                continue
            state.clusters = tuple(keys)
            state.reported = ""
            for source, key in zip(sources, keys, strict=True):
                good[key] = (shown, self._object(source.document.content, key, shown))
        for gone in set(self._files) - seen_files:
            del self._files[gone]

        applied: list[ClusterKey] = []
        failed: list[tuple[ClusterKey, str]] = []
        for key, (_, obj) in sorted(good.items()):
            if not self.settings.source_namespace_allowed(key.namespace):
                failed.append((key, f"namespace {key.namespace} is not one directory mode "
                                    f"writes to ({self.settings.described_source_namespaces()})"))
                continue
            digest = _digest(obj)
            live = self.view.get(KAIWU_CLUSTER, key.namespace, key.name)
            if not force and live is not None and self._applied.get(key) == digest:
                continue
            try:
                self.kube.apply(obj)
            except ApiError as error:
                self.metrics.errors_total.labels(stage="source").inc()
                log.error("applying a KaiwuCluster from the source directory failed", extra={
                    "cluster": str(key), "error": error.message[:500]})
                failed.append((key, f"HTTP {error.status}: {error.message[:300]}"))
                continue
            self._applied[key] = digest
            applied.append(key)
            log.info("applied KaiwuCluster from the source directory",
                     extra={"cluster": str(key), "file": good[key][0]})

        claimed = set(good) | {key for b in broken
                               for key in self._files.get(b.file, _FileState()).clusters}
        pruned, kept, problem = self._prune(claimed, has_files=bool(files))
        return ScanResult(str(real), tuple(sorted(good)), tuple(broken), tuple(applied),
                          tuple(failed), tuple(pruned), tuple(kept), problem)

    def _object(self, content: Any, key: ClusterKey, file: str) -> Obj:
        """What we apply: the file's KaiwuCluster as written (the API server defaults the
        rest), in its namespace, marked as coming from the directory."""
        obj: Obj = to_plain(content)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = key.namespace
        annotations = meta.setdefault("annotations", {}) or {}
        annotations[SOURCE_ANNOTATION] = SOURCE_VALUE
        annotations[SOURCE_FILE_ANNOTATION] = file
        meta["annotations"] = annotations
        return obj

    def _report_broken(self, file: str, state: _FileState, problems: list[str]) -> BrokenFile:
        broken = BrokenFile(file, tuple(problems))
        if state.reported == state.digest:
            return broken  # this version was reported already
        state.reported = state.digest
        self.metrics.source_errors_total.inc()
        log.error("broken KaiwuCluster file skipped; the other files are still applied",
                  extra={"file": file, "problems": problems,
                         "kept_clusters": [str(k) for k in state.clusters]})
        if self.events is not None:
            for key in state.clusters:
                live = self.view.get(KAIWU_CLUSTER, key.namespace, key.name)
                if live is not None:
                    self.events.emit(live, "Warning", "InvalidSourceFile",
                                     f"{file} is broken, the cluster keeps its last good spec: "
                                     + "; ".join(problems))
        return broken

    def _prune(self, claimed: set[ClusterKey], has_files: bool
               ) -> tuple[list[ClusterKey], list[ClusterKey], str]:
        ours = [obj for obj in self.view.list(KAIWU_CLUSTER, self.settings.watch_namespace)
                if ((obj.get("metadata") or {}).get("annotations") or {}).get(
                    SOURCE_ANNOTATION) == SOURCE_VALUE
                and self.settings.source_namespace_allowed(
                    str((obj.get("metadata") or {}).get("namespace") or ""))]
        orphans = sorted((ClusterKey(o["metadata"]["namespace"], o["metadata"]["name"]), o)
                         for o in ours
                         if ClusterKey(o["metadata"]["namespace"], o["metadata"]["name"])
                         not in claimed)
        if not orphans:
            return [], [], ""
        if not has_files:
            # An empty checkout is far more often a sync in progress or a wrong path than a
            # wish to delete every cluster.
            message = (f"no KaiwuCluster files under {self.path}: not pruning "
                       f"{len(orphans)} clusters")
            log.error(message)
            self.metrics.source_errors_total.inc()
            return [], [key for key, _ in orphans], message
        pruned: list[ClusterKey] = []
        kept: list[ClusterKey] = []
        for key, obj in orphans:
            self._applied.pop(key, None)
            if not self.settings.prune_deleted_clusters:
                kept.append(key)
                if key not in self._warned_kept:
                    self._warned_kept.add(key)
                    log.warning("KaiwuCluster removed from the source directory is kept "
                                "(set --prune-deleted-clusters to delete it)",
                                extra={"cluster": str(key)})
                continue
            try:
                self.kube.delete(KAIWU_CLUSTER, key.namespace, key.name,
                                 uid=obj["metadata"].get("uid"))
            except ApiError as error:
                self.metrics.errors_total.labels(stage="source").inc()
                log.error("pruning a KaiwuCluster failed",
                          extra={"cluster": str(key), "error": error.message[:300]})
                continue
            pruned.append(key)
            log.warning("deleted KaiwuCluster removed from the source directory "
                        "(its volumes stay)", extra={"cluster": str(key)})
        return pruned, kept, ""
