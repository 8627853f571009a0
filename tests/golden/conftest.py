"""The `--update-golden` option: rewrite tests/golden/<example>/ from the current renderer.

    .venv/bin/pytest tests/golden --update-golden

pytest registers options only from conftest files it loads at start-up, which includes this one
when tests/golden (or a file in it) is named on the command line, as above. Review the rewritten
files with `git diff tests/golden` before committing them.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden render trees in tests/golden from the renderer")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite the golden files instead of comparing them."""
    return bool(request.config.getoption("--update-golden", default=False))
