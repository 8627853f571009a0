"""Bulk statements that outlive a pass: EXPORT and IMPORT run for minutes to hours on real data.

Called by reconciler.kaiwudb.backup.export (each item's EXPORT) and
reconciler.kaiwudb.backup.restore_import (each database's IMPORT). `BulkStatements.start` runs
one in a thread of its own that holds one exec for up to KwbaseSettings.long_timeout_s, so the
pass that starts it goes on; later passes `poll` it. `poll` first waits a moment (`wait_s`), so
a short statement ends within the pass that started it.

A thread holds only the answer (KWDB's client prints nothing until the statement ends). Whether
a statement runs, ran or failed is KWDB's to say, in its job row (KwbaseAdmin.statement_jobs):
callers ask it whenever the statement is not running here (a restarted reconciler, a thread
whose exec ended with no answer), so a statement is never started while KWDB still runs it, and
what a caller does with one that ended while nobody listened is its own decision (export.py,
restore_import.py). Threads are daemons: a reconciler that stops leaves them, and the statements
run on in KWDB, where the next reconciler finds them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reconciler.kaiwudb.kwbase.sql import SqlAnswer


@dataclass(frozen=True)
class Running:
    """The statement has not ended; it started `elapsed_s` seconds ago (this process's clock)."""

    elapsed_s: float


@dataclass
class _Entry:
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    answer: SqlAnswer | None = None
    error: BaseException | None = None


class BulkStatements:
    """Bulk statements running in this process, by key (see the module docstring)."""

    def __init__(self, wait_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def start(self, key: str, run: Callable[[], SqlAnswer]) -> None:
        """Run `run` (one exec of one statement) in a thread of its own under `key`; a key that
        is running already is left alone."""
        with self._lock:
            if key in self._entries:
                return
            entry = self._entries[key] = _Entry(self.clock())

        def body() -> None:
            try:
                entry.answer = run()
            except BaseException as err:  # handed to the pass that polls, which knows what it means
                entry.error = err
            finally:
                entry.done.set()

        threading.Thread(target=body, name=f"bulk {key}", daemon=True).start()

    def poll(self, key: str) -> SqlAnswer | Running | None:
        """The answer once the statement ended (and the key is forgotten), Running while it
        runs, None when no statement runs here under `key`. Raises what the exec raised."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return None
        if not entry.done.wait(self.wait_s):
            return Running(self.clock() - entry.started)
        with self._lock:
            self._entries.pop(key, None)
        if entry.error is not None:
            raise entry.error
        assert entry.answer is not None
        return entry.answer

    def running(self) -> list[str]:
        """The keys of statements running here (for tests and diagnostics)."""
        with self._lock:
            return sorted(k for k, e in self._entries.items() if not e.done.is_set())
