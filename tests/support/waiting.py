"""Waiting in tests: poll until something is true, or fail the test saying what never came.

Every story that waits for the API server, the simulated world or the reconciler uses
`eventually`, so there is one rule: a check returns something truthy when it is done (the
object, the list, True) and None or another falsy value while it is not. An empty list is "not
yet", never "done".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def eventually(check: Callable[[], T | None], timeout: float, what: str,
               interval: float = 0.1) -> T:
    """Poll `check` until it returns something truthy and return that; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
