"""A broken rule of a KaiwuCluster: where in the object, what is wrong and what to do.

Made by every module of renderer.semantics; read by renderer.render (problems of a spec),
renderer.diff and the reconciler's admission webhook (reconciler.controller.admission).
"""

from __future__ import annotations

from dataclasses import dataclass

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Violation:
    """A broken rule: where in the object, what is wrong and what to do."""

    path: Path
    message: str
    fix: str
