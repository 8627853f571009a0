"""The KaiwuDB versions this kaiwu knows, and the check `kaiwu validate`, `render` and `diff`
make of each spec's `spec.version` against them.

Called by renderer.cli (and renderer.diff for the head side of a diff). Only the command line
checks: it runs in CI before a change lands, where a typo (`9.9.9`, `3.21`) should fail review
rather than a rollout pull an image that does not exist. The reconciler and the admission
webhook accept any version the CRD's pattern allows, so a KaiwuDB release newer than this kaiwu
need not wait for one; on the command line `--allow-unknown-version` lets it through with a
warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from renderer.errors import Problem

if TYPE_CHECKING:
    from renderer.render import SourceCluster

KNOWN_VERSIONS = ("3.0.0", "3.0.1", "3.1.0", "3.2.0", "3.2.1")
"""KWDB's 3.x releases (its tags V3.0.0 to V3.2.1); the reconciler's contract with KaiwuDB is
read from V3.2.1 (docs/kwdb-contract.md), whose cluster version the earlier 3.x share."""
ALLOW_FLAG = "--allow-unknown-version"


def unknown_versions(clusters: Iterable[SourceCluster]) -> list[Problem]:
    """A problem for each cluster whose spec.version is not a KaiwuDB release this kaiwu knows,
    at the line that sets it (the document's own line when the default applies)."""
    found = []
    for source in clusters:
        version = source.cluster.version
        if version in KNOWN_VERSIONS:
            continue
        document = source.document
        found.append(Problem(
            document.file, document.line_of(["spec", "version"]), "spec.version",
            f"{version} is not a KaiwuDB release this kaiwu knows "
            f"({', '.join(KNOWN_VERSIONS)})",
            f"use one of them, or pass {ALLOW_FLAG} if {version} is a newer KaiwuDB release"))
    return found
