"""The "prune" step: objects we applied once and no longer render (status.inventory) are
deleted with a uid precondition; never claims or Secrets (reconciler.kube.kinds), never on an
empty render, never an object someone else has taken over.

Run by the Controller (reconciler.controller.controller) after "recreate", unless paused.
"""

from __future__ import annotations

from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import (
    SHORT_REQUEUE_S,
    STALE_RECHECK_S,
    ControllerMemory,
)
from reconciler.kaiwudb.context import StepContext
from reconciler.keys import ObjectRef
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.model import meta
from renderer.builders import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL


class PruneStep:
    """See the module docstring."""

    name = "prune"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory

    def wanted(self, p: ObjectPass) -> bool:
        return not p.paused and bool(p.states)

    def run(self, p: ObjectPass) -> None:
        """Delete objects we applied once and no longer render (status.inventory)."""
        rendered = {(s.ref.kind, s.ref.namespace, s.ref.name) for s in p.states}
        for entry in p.previous.get("inventory") or ():
            try:
                ref = ObjectRef.parse(str(entry))
            except ValueError:
                continue
            if (ref.kind, ref.namespace, ref.name) in rendered or ref.kind in k.NEVER_PRUNED:
                continue  # still rendered (perhaps under a newer apiVersion), or never pruned
            kind = k.KINDS.get((ref.api_version, ref.kind))
            if kind is None:
                continue
            if not (p.sync or p.policy == "enforce"):
                p.inventory.add(str(ref))  # warn/off: keep it listed, do not delete
                continue
            served = self.memory.served.served(kind, ref.namespace)
            live = self.ctx.view.peek(kind, ref.namespace, ref.name) if served else None
            if live is None:
                continue
            if self.memory.marks.stale(p.key, str(ref), live):
                p.inventory.add(str(ref))  # our delete is on its way
                p.requeue_in(STALE_RECHECK_S)
                continue
            labels = meta(live).get("labels") or {}
            if labels.get(MANAGED_BY_LABEL) != MANAGED_BY or \
                    labels.get(INSTANCE_LABEL) != p.key.name:
                continue  # someone took it over: it is not ours to delete any more
            try:
                self.memory.repairer.delete(kind, live, propagation="Background")
                self.memory.marks.wrote(p.key, str(ref), live)
            except ApiError as error:
                if error.conflict:
                    p.inventory.add(str(ref))
                    p.requeue_in(SHORT_REQUEUE_S)
                    continue
                raise
            p.act("Pruned", ref.short, "deleted: the spec no longer renders it")
