"""An Event's message is clipped to a screenful, and the clipped text says so (the full drift
report is in the log and the status)."""

from __future__ import annotations

from reconciler.kube.events import MESSAGE_LIMIT, truncate


def test_a_long_event_message_is_clipped_to_the_limit_and_says_so() -> None:
    assert truncate("x" * MESSAGE_LIMIT) == "x" * MESSAGE_LIMIT
    clipped = truncate("y" * (MESSAGE_LIMIT + 1))
    assert len(clipped) == MESSAGE_LIMIT
    assert clipped == "y" * (MESSAGE_LIMIT - 15) + " ...(truncated)"
