"""Argo CD's view of a KaiwuCluster: deploy/argocd/health.lua, run with Lua 5.1 (the dialect of
gopher-lua, which Argo CD embeds) through lupa, against KaiwuCluster objects whose status is
built by the reconciler's own `reconciler.status.build`.

Stories: a cluster the reconciler has not reported on, or whose new generation it has not
observed, is Progressing; one coming up (Reconciling) is Progressing; a Ready one is Healthy; a
Stalled one is Degraded with the condition's message; one not Ready with nothing in progress (a
KaiwuDB node lost) is Degraded; a paused one (spec.paused, or the kaiwu.inspur.com/paused
annotation) is Suspended; the argocd-cm patch carries the script verbatim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import lua51

from reconciler import status as st

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "argocd" / "health.lua"
KEY = "resource.customizations.health.kaiwu.inspur.com_KaiwuCluster"


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """Run the script as Argo CD does: `obj` a global table, the script's result a table."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(SCRIPT.read_text())
    return str(result["status"]), str(result["message"])


def cluster(*conditions: st.Condition, generation: int = 2, observed: int | None = 2,
            paused: bool = False, annotations: dict[str, str] | None = None,
            with_status: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
        "metadata": {"name": "orders", "namespace": "kaiwu-prod", "generation": generation,
                     "annotations": annotations or {}},
        "spec": {"replicas": 3, "paused": paused}}
    if with_status:
        obj["status"] = st.build(None, st.Observed(
            generation=observed, conditions=tuple(conditions), phase="Running", replicas=3,
            ready_nodes=3, selector="app=kaiwudb", version="3.2.1", inventory=()),
            "2026-01-01T00:00:00Z")
    return obj


READY = st.Condition(st.READY, "True", "Ready", "3 of 3 nodes ready")
NOT_READY = st.Condition(st.READY, "False", "NodesNotLive", "node 2 is not live")
DONE = st.Condition(st.RECONCILING, "False", "Done")
BUSY = st.Condition(st.RECONCILING, "True", "WaitingForPods", "1 of 3 pods ready")
CALM = st.Condition(st.STALLED, "False", "Progressing")
STUCK = st.Condition(st.STALLED, "True", "DriftFight", "StatefulSet/orders keeps being changed")


@pytest.mark.parametrize(("obj", "expected"), [
    (cluster(with_status=False), ("Progressing", "Waiting for the reconciler to report status")),
    (cluster(READY, DONE, CALM, generation=3, observed=2),
     ("Progressing", "Waiting for the reconciler to apply generation 3")),
    (cluster(NOT_READY, BUSY, CALM), ("Progressing", "1 of 3 pods ready")),
    (cluster(READY, DONE, CALM), ("Healthy", "3 of 3 nodes ready")),
    (cluster(NOT_READY, DONE, STUCK), ("Degraded", "StatefulSet/orders keeps being changed")),
    (cluster(READY, BUSY, STUCK), ("Degraded", "StatefulSet/orders keeps being changed")),
    (cluster(NOT_READY, DONE, CALM), ("Degraded", "node 2 is not live")),
    (cluster(NOT_READY, BUSY, STUCK, paused=True),
     ("Suspended", "Paused: the reconciler takes no action on this cluster")),
    (cluster(READY, DONE, CALM, annotations={"kaiwu.inspur.com/paused": "true"}),
     ("Suspended", "Paused: the reconciler takes no action on this cluster")),
    (cluster(READY, DONE, CALM, annotations={"kaiwu.inspur.com/paused": "false"}),
     ("Healthy", "3 of 3 nodes ready")),
], ids=["no-status", "new-generation", "coming-up", "ready", "stalled", "stalled-wins",
        "node-lost", "paused-spec", "paused-annotation", "annotation-false"])
def test_argocd_health_follows_the_kstatus_conditions(obj: dict[str, Any],
                                                       expected: tuple[str, str]) -> None:
    assert health(obj) == expected


def test_the_argocd_cm_patch_carries_the_script_verbatim() -> None:
    patch = yaml.safe_load((SCRIPT.parent / "argocd-cm-patch.yaml").read_text())
    assert patch["kind"] == "ConfigMap" and patch["metadata"]["name"] == "argocd-cm"
    assert patch["data"][KEY] == SCRIPT.read_text()
