"""`kaiwu status`'s reads of the API: every cluster asked for and what belongs to it, in one
list per kind (never one request per pod), made into reports by reconciler.statuscmd.report.

Called by reconciler.statuscmd (main), once per view.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from reconciler.kube import kinds as kk
from reconciler.kube.client import ApiError, Kube
from reconciler.model import Obj
from reconciler.statuscmd.report import backups_summary, cluster_report
from renderer.builders import INSTANCE_LABEL, MANAGED_SELECTOR


def gather(kube: Kube, namespace: str | None, name: str | None,
           now: float | None = None) -> list[dict[str, Any]]:
    """Every cluster asked for, as `cluster_report`s with their `backups_summary`. `namespace`
    None: every namespace. Six lists at most (the kinds below), however many clusters and pods
    there are."""
    now = time.time() if now is None else now
    if name is not None:
        assert namespace is not None
        one = kube.get(kk.KAIWU_CLUSTER, namespace, name)
        if one is None:
            raise LookupError(f"KaiwuCluster {namespace}/{name} not found (check the name, "
                              "or the namespace with -n)")
        clusters = [one]
    else:
        clusters, _ = kube.list_objects(kk.KAIWU_CLUSTER, namespace)
    if not clusters:
        return []
    selector = MANAGED_SELECTOR
    if name is not None:
        selector += f",{INSTANCE_LABEL}={name}"

    def by_cluster(kind: kk.Kind) -> dict[tuple[str, str], list[Obj]]:
        found: dict[tuple[str, str], list[Obj]] = {}
        try:
            items, _ = kube.list_objects(kind, namespace, selector)
        except ApiError as error:
            if not error.forbidden:
                raise
            items = []  # e.g. no right to read Secrets: that part is left out, not fatal
        for item in items:
            m = item.get("metadata") or {}
            owner = (m.get("labels") or {}).get(INSTANCE_LABEL)
            if owner:
                found.setdefault((m.get("namespace", ""), owner), []).append(item)
        return found

    unreadable: list[str] = []

    def backup_objects(kind: kk.Kind) -> dict[tuple[str, str], list[Obj]]:
        """KaiwuBackups or schedules by the cluster their spec names (no label selects them)."""
        found: dict[tuple[str, str], list[Obj]] = {}
        try:
            items, _ = kube.list_objects(kind, namespace)
        except ApiError as error:
            if error.forbidden:
                unreadable.append(kind.plural)  # said, never shown as "no backups"
            elif not error.not_found:  # the backup CRDs not installed: no backups
                raise
            items = []
        for item in items:
            spec = item.get("spec")
            owner = ((spec.get("cluster") if isinstance(spec, Mapping) else None) or {})
            owner_name = owner.get("name") if isinstance(owner, Mapping) else None
            if owner_name and (name is None or owner_name == name):
                key = ((item.get("metadata") or {}).get("namespace", ""), str(owner_name))
                found.setdefault(key, []).append(item)
        return found

    sets, pods, secrets = (by_cluster(kind) for kind in (kk.STATEFUL_SET, kk.POD, kk.SECRET))
    backups, schedules = (backup_objects(kind) for kind in (kk.KAIWU_BACKUP,
                                                            kk.KAIWU_BACKUP_SCHEDULE))
    reports = []
    for obj in sorted(clusters, key=lambda o: (o["metadata"].get("namespace", ""),
                                               o["metadata"]["name"])):
        m = obj["metadata"]
        key = (m.get("namespace", ""), m["name"])
        sts = next((s for s in sets.get(key, ()) if s["metadata"]["name"] == m["name"]), None)
        wanted = ((obj.get("spec") or {}).get("tls") or {}).get("nodeSecretName") \
            or f"{m['name']}-node-certs"
        secret = next((s for s in secrets.get(key, ()) if s["metadata"]["name"] == wanted), None)
        report = cluster_report(obj, sts, pods.get(key, []), secret, now)
        report["backups"] = backups_summary(backups.get(key, []), schedules.get(key, []), now,
                                            readable=not unreadable)
        reports.append(report)
    return reports
