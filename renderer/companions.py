"""KaiwuBackup and KaiwuBackupSchedule files kept in git beside the clusters they protect:
checked against their CRDs and the schedule's cron, then passed through as written.

Called by renderer.render (`read_sources`, for `kaiwu validate`, `render` and `diff`). A
companion is not rendered into anything else: `kaiwu render` writes it as it is (the API server
applies its defaults when it is applied) in its cluster's directory, and `kaiwu diff` shows its
changes beside the cluster's objects. The reconciler acts on them once they are in the cluster
(docs/backup.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from renderer import schema
from renderer.cron import cron_problem
from renderer.errors import Problem
from renderer.loader import Document
from renderer.semantics.names import DNS_1123_LABEL, DNS_1123_SUBDOMAIN, MAX_NAMESPACE_LENGTH

COMPANION_KINDS = (schema.BACKUP_KIND, schema.SCHEDULE_KIND)
DEFAULT_NAMESPACE = "default"  # where kubectl applies an object that names none


@dataclass(frozen=True)
class SourceObject:
    """A KaiwuBackup or KaiwuBackupSchedule read from a file: where, and the object as written
    (plain data, no defaults)."""

    document: Document
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace") or DEFAULT_NAMESPACE)

    @property
    def cluster(self) -> str:
        """The KaiwuCluster it backs up (spec.cluster.name)."""
        return str(self.obj["spec"]["cluster"]["name"])

    def manifest(self) -> dict[str, Any]:
        """The object as it is applied: its namespace written out, as a rendered object has."""
        return {**self.obj, "metadata": {**self.obj["metadata"], "namespace": self.namespace}}


def read_companion(document: Document, content: dict[str, Any]
                   ) -> tuple[SourceObject | None, list[Problem]]:
    """The companion a document holds (its kind is one of COMPANION_KINDS), or every problem
    with it."""
    def problem(path: tuple[Any, ...], message: str, fix: str) -> Problem:
        dotted = ".".join(str(part) for part in path)
        return Problem(document.file, document.line_of(list(path)), dotted, message, fix)

    kind = str(content.get("kind"))
    if content.get("apiVersion") != schema.API_VERSION:
        return None, [problem(("apiVersion",), f"unknown apiVersion {content.get('apiVersion')!r}",
                              f"use apiVersion: {schema.API_VERSION}")]
    if "status" in content:
        return None, [problem(("status",), "status is written by the reconciler",
                              "remove the status block from the file")]
    meta = content.get("metadata")
    if not isinstance(meta, dict):
        return None, [problem(("metadata",), "metadata is missing",
                              "add metadata with at least a name")]
    found = [problem(tuple(v.path), v.message, v.fix)
             for v in _violations(content, kind)]
    if found:  # the fields below are read only from an object of the CRD's shape
        return None, found
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not DNS_1123_SUBDOMAIN.match(name) or len(name) > 253:
        found.append(problem(("metadata", "name"), f"{name!r} is not a valid {kind} name",
                             "use lower-case letters, digits, '-' and '.'"))
    if namespace is not None and not (isinstance(namespace, str)
                                      and DNS_1123_LABEL.match(namespace)
                                      and len(namespace) <= MAX_NAMESPACE_LENGTH):
        found.append(problem(("metadata", "namespace"), f"{namespace!r} is not a valid "
                             "namespace", "use lower-case letters, digits and '-'"))
    # spec.cluster.name, which names a directory of `kaiwu render`'s output and of the
    # backup's target, has a cluster name's pattern in the CRD: checked above.
    schedule = content["spec"].get("schedule")
    if kind == schema.SCHEDULE_KIND and isinstance(schedule, str) and not found:
        reason = cron_problem(schedule)
        if reason:
            found.append(problem(("spec", "schedule"), reason.removeprefix("spec.schedule "),
                                 "six fields with seconds first, e.g. '0 0 3 * * *' for 03:00 "
                                 "UTC daily, or five with minutes first"))
    if found:
        return None, found
    return SourceObject(document, content), []


def _violations(content: dict[str, Any], kind: str) -> list[schema.SchemaViolation]:
    from renderer import schema_explain  # jsonschema: only when a companion is read

    return schema_explain.violations(content, kind)
