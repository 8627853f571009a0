"""Problems a person can act on: where, what is wrong, what to do.

Every stage of the renderer (loader, schema, semantics, emit) reports `Problem`s instead of
raising on the first one, so a user sees every mistake in one run; the CLI prints them one per
line as `file:line: spec.path: what is wrong (what to do)` and exits 2.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class OutputDirectoryError(Exception):
    """The output directory holds something that is not an earlier render."""


@dataclass(frozen=True, order=True)
class Problem:
    """One mistake in one input file."""

    file: str
    line: int
    path: str
    message: str
    fix: str

    def __str__(self) -> str:
        location = f"{self.file}:{self.line}" if self.line else self.file
        path = f" {self.path}:" if self.path else ""
        fix = f" ({self.fix})" if self.fix else ""
        return f"{location}:{path} {self.message}{fix}"


class RenderError(Exception):
    """Raised with every problem found; nothing has been written when it is raised."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(sorted(set(problems)))
        super().__init__("\n".join(str(problem) for problem in self.problems))
