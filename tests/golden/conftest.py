"""The `--update-golden` option: rewrite tests/golden/<example>/ from the current renderer.

    .venv/bin/pytest tests/unit/renderer/test_golden_trees.py tests/golden --update-golden

The option itself is registered in tests/conftest.py (pytest reads options only from conftest
files it loads at start-up), so it works with any selection of tests. Review the rewritten files
with `git diff tests/golden` before committing them.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite the golden files instead of comparing them."""
    return bool(request.config.getoption("--update-golden", default=False))
