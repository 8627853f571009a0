"""The threads a part of the reconciler starts, as the process sees them.

At exit the interpreter waits for every thread that is not a daemon: one left running by a part
that was not stopped (a crash path, a test that failed half-way) would keep a replica told to
exit alive until the kubelet kills it. `threads_started` records the threads a block starts, so
a story can say which ones a part runs (their names are what a thread dump or an uncaught
"Exception in thread ..." line shows) and that none of them holds up exit. `serve_forever_polls`
records how often the reconciler's HTTP servers look for a stop request.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from reconciler.listeners import BoundedServer


@contextmanager
def threads_started() -> Iterator[list[threading.Thread]]:
    """Yields a list filled, when the block ends, with the threads started in it still alive."""
    before = set(threading.enumerate())
    started: list[threading.Thread] = []
    yield started
    started.extend(thread for thread in threading.enumerate() if thread not in before)


def holding_up_exit(threads: list[threading.Thread]) -> list[str]:
    """The names of those the interpreter would wait for at exit."""
    return [thread.name for thread in threads if thread.is_alive() and not thread.daemon]


@contextmanager
def serve_forever_polls() -> Iterator[list[float]]:
    """Yields the poll intervals every BoundedServer started in the block serves with, as they
    start. A server's shutdown() returns at its serve loop's next poll, so the interval bounds
    how long stopping it takes: counted, not timed on a busy machine."""
    original = BoundedServer.serve_forever
    polls: list[float] = []

    def recording(self: BoundedServer, poll_interval: float = 0.5) -> None:
        polls.append(poll_interval)
        original(self, poll_interval)

    with mock.patch.object(BoundedServer, "serve_forever", recording):
        yield polls
