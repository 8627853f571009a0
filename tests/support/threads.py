"""The threads a part of the reconciler starts, as the process sees them.

At exit the interpreter waits for every thread that is not a daemon: one left running by a part
that was not stopped (a crash path, a test that failed half-way) would keep a replica told to
exit alive until the kubelet kills it. `threads_started` records the threads a block starts, so
a story can say which ones a part runs (their names are what a thread dump or an uncaught
"Exception in thread ..." line shows) and that none of them holds up exit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


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
