"""What the node tier's stories share: the reconciler's image, built once a session."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.world.real_operator import save_image


@pytest.fixture(scope="session")
def image_archive() -> Iterator[Path]:
    """`make image`'s image as an OCI archive, for each story's real nodes to import."""
    with tempfile.TemporaryDirectory() as tmp:
        yield save_image(Path(tmp))
