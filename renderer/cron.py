"""Backup schedules' cron expressions: whether one is usable, and its times.

Called by renderer.companions (`kaiwu validate` of a KaiwuBackupSchedule file) and by the
reconciler's backup schedules (reconciler.kaiwudb.backup.schedule), so that git and the cluster
judge a schedule alike. Six fields have seconds first, as CloudNativePG writes them; five are
the classic minute-first form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from croniter import croniter


def cron(expr: str, start: float) -> croniter:
    """The expression's iterator from `start` (UNIX seconds); ValueError or KeyError when it
    is not one croniter reads."""
    from croniter import croniter  # only where a schedule is read: kaiwu --help stays light

    return croniter(expr, start, second_at_beginning=len(expr.split()) == 6)


def cron_problem(expr: str) -> str:
    """Why a schedule string is not usable ("" when it is)."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        return (f"spec.schedule {expr!r}: expected 6 fields (seconds first) or 5, got "
                f"{len(fields)}; e.g. '0 0 3 * * *' for 03:00 UTC daily")
    try:
        # A date no year has (31 February) reads, then fails when a time is asked for: both
        # directions are asked here, as the reconciler asks them (due and next slots).
        start = 1_767_225_600.0  # 2026-01-01, any instant would do
        cron(expr, start).get_next(float)
        cron(expr, start).get_prev(float)
    except (ValueError, KeyError) as err:  # croniter's errors are ValueErrors
        return f"spec.schedule {expr!r}: {err}"
    return ""
