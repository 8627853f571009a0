"""What a normalisation is asked and what it gives: DriftSettings (how drift is judged, the
reconciler's defaults) and Projection (desired and live, normalised; an ordered keyed list keeps
its items' order under ORDER_KEY).

Used by reconciler.drift.normalise, which makes Projections; by reconciler.drift.compare, which
compares them; and by whoever chooses the settings (reconciler.controller, reconciler.drift.memo).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from renderer.redact import SECRET_NAMES

# The pseudo-key under which an ordered keyed list keeps the relative order of its items. Keys
# of such lists are container names (DNS labels), which cannot contain "$".
ORDER_KEY: Final = "$order"


@dataclass(frozen=True)
class DriftSettings:
    """How drift is judged. Defaults are what the reconciler uses."""

    # Our server-side-apply field manager. Fields it owns (operation Apply) but we no longer
    # render are drift: our next apply removes them.
    field_manager: str = "kaiwu-reconciler"
    # managedFields operations whose fields count as someone's deliberate change.
    counted_operations: frozenset[str] = frozenset({"Update", "Apply"})
    # Apply reconciler.drift.ignore.BUILTIN_IGNORE_RULES (fields other controllers own by design).
    builtin_ignores: bool = True
    # Env vars, annotations and --flags whose names match have their values masked (Secret
    # data always is).
    secret_names: str = SECRET_NAMES
    # HMAC key of the masks. Random per process by default: masks are comparable within one
    # process; pass a fixed key (e.g. derived from the KaiwuCluster uid) for masks that stay
    # the same across restarts.
    mask_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)


DEFAULT_SETTINGS: Final = DriftSettings()


@dataclass(frozen=True)
class Projection:
    """Desired and live, normalised for comparison. Secrets are already masked.

    ``live`` is None when the object does not exist. ``keyed_paths`` lists the paths of keyed
    lists (turned into maps keyed by item key); ``owners`` gives, for live fields that someone
    owns in managedFields, the managers that own them (for reports: "changed by kubectl-set").
    """

    kind: str
    namespace: str
    name: str
    desired: Mapping[str, Any]
    live: Mapping[str, Any] | None
    keyed_paths: frozenset[tuple[str, ...]]
    owners: Mapping[tuple[str, ...], tuple[str, ...]]
    warnings: tuple[str, ...] = ()
