"""The metric names a PromQL expression reads, for checking rules and dashboards against what is
exported, and where promtool is.

Used by tests/unit/test_monitoring.py (the reconciler's registry, the dashboard) and
tests/unit/test_kwdb_monitoring.py (KaiwuDB's names). A small scanner, not a PromQL parser: it is
exact for the expressions deploy/monitoring/ holds, and test_monitoring.py pins what it returns
for the shapes used there.
"""

from __future__ import annotations

import re
import shutil

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
            "and", "or", "unless", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names one PromQL expression (or Grafana label_values query) selects: string
    literals, label matchers, ranges and grouping clauses removed, function names skipped."""
    label_values = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", expr)
    if label_values:
        expr = label_values.group(1)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    # Number literals, so the `e9` of `/ 1e9` is not taken for a metric.
    expr = re.sub(r"(?<![A-Za-z0-9_:.])\d+(?:\.\d*)?(?:[eE][+-]?\d+)?", " ", expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[match.end():].lstrip()
        if rest.startswith("(") or match.group(0).lower() in KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def promtool() -> str:
    """The promtool binary (Debian's prometheus package, tests/world/install_deps.sh)."""
    found = shutil.which("promtool")
    assert found, "promtool is missing: apt-get install prometheus (tests/world/install_deps.sh)"
    return found
