"""Fixtures the world stories share (every folder under tests/world_stories/).

``reconciler_factory`` (function): start a real Controller, driven as the runtime drives it and
acting as its own ServiceAccount, for the test's namespace (tests/support/harness.py).
"""

from __future__ import annotations

from tests.support.harness import reconciler_factory

__all__ = ["reconciler_factory"]
