"""The reconciler's controller: one pass over one KaiwuCluster, from cache to status.

The runtime (reconciler.runtime.process) calls `Controller.reconcile(key)` from its workers
whenever the watch caches report a change to a cluster or one of its objects, and again after
the delay a pass asks for (`Result.requeue_after_s`). A pass reads only the caches
(`CacheView`), so a cluster where nothing changed costs no API request at all, and writes only
what differs.

A pass is the ordered list of steps below, each a small class that says when it is wanted and
runs over one `ObjectPass` record (in the style of cockroach-operator's actors):

  spec          the KaiwuCluster read by the renderer; an invalid spec stops here
  certificates  TLS Secrets made, checked and renewed (reconciler.kaiwudb.certs); the
                certificates' hash for the pod template
  lifecycle     KaiwuDB init, node ids, rolling updates, scale-in (reconciler.kaiwudb.lifecycle):
                the StatefulSet replicas and partition this pass applies
  render        the desired objects, rendered from the spec and those decisions
  observe       each desired object against its live copy (reconciler.controller.observe)
  repair        missing and drifted objects written as rendered, per drift policy
  recreate      a StatefulSet whose immutable fields must change: orphaning delete
  prune         objects no longer rendered, deleted (never claims or Secrets)
  volumes       claims grown to spec.storage.size (reconciler.controller.volumes)
  failover      lost nodes, lost volumes, crash loops (reconciler.kaiwudb.failover)
  restore       spec.bootstrap.fromBackup: IMPORTs in KWDB's order
                (reconciler.kaiwudb.backup.restore)
  backup        schedules, retention and the running KaiwuBackup
                (reconciler.kaiwudb.backup.step)
  report        status (kstatus), Events, the requeue delay

Every step is built with the controller's one `StepContext` (reconciler.kaiwudb.context: the
API client, the caches, the settings, metrics, Events, the clock, the kwbase adapter), its
first argument; the controller's own steps also get its `ControllerMemory`
(reconciler.controller.shared). Each step derives its timings from the settings itself.

Writes are server-side applies under `Settings.field_manager`; every applied object gets an
ownerReference to its KaiwuCluster (controller: true), so deleting the cluster garbage-collects
them (the StatefulSet's claims have none and survive).

A pass that runs to its end resets the cluster's kaiwu_cluster_seconds_since_last_success; a
cluster gone from the cache (or being deleted) loses every kaiwu_cluster_* series. One this
process knew, gone from the API server too, gets a last Event (ClusterDeleted) naming what was
kept: its claims and certificate Secrets (`tell_deleted`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from reconciler.controller.certificates import CertificatesStep
from reconciler.controller.objects import ObjectPass, Result, Step
from reconciler.controller.observe import ObserveStep
from reconciler.controller.prune import PruneStep
from reconciler.controller.render import RenderStep, SpecStep
from reconciler.controller.repair import RecreateStep, RepairStep
from reconciler.controller.report import ReportStep
from reconciler.controller.shared import (
    ControllerMemory,
    DriftNotices,
    DryRuns,
    PendingActions,
    ServedKinds,
    WriteMarks,
)
from reconciler.controller.volumes import VolumesStep
from reconciler.drift.backoff import BackoffPolicy, FightTracker
from reconciler.drift.memo import ComparisonMemo
from reconciler.drift.projection import DriftSettings
from reconciler.drift.repair import Repairer
from reconciler.kaiwudb.backup.file_server import BackupFileServer, default_advertise_host
from reconciler.kaiwudb.backup.restore import Restore
from reconciler.kaiwudb.backup.step import Backups
from reconciler.kaiwudb.context import StepContext
from reconciler.kaiwudb.failover import Failover
from reconciler.kaiwudb.lifecycle import Lifecycle
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.kube.client import ApiError, Kube
from reconciler.kube.events import EventRecorder
from reconciler.metrics import Metrics
from reconciler.model import Obj, meta
from reconciler.settings import Settings
from renderer.builders import INSTANCE_LABEL


class Controller:
    """Reconciles KaiwuClusters: `reconcile(key)` runs one pass (see the module docstring)."""

    def __init__(self, kube: Kube, view: CacheView, settings: Settings, metrics: Metrics,
                 clock: Callable[[], float] = time.time,
                 events: EventRecorder | None = None) -> None:
        self.view = view
        self.clock = clock
        # What every step is given (reconciler.kaiwudb.context), and the controller's own
        # steps' memories (reconciler.controller.shared).
        self.ctx = ctx = StepContext(
            kube=kube, view=view, settings=settings, metrics=metrics,
            events=events or EventRecorder(kube, metrics, clock=clock,
                                           instance=settings.identity),
            clock=clock)
        repairer = Repairer(kube)
        self.memory = memory = ControllerMemory(
            repairer=repairer,
            fights=FightTracker(BackoffPolicy(
                threshold=settings.fight_threshold, window_s=settings.fight_window_s,
                base_s=settings.drift_backoff_base_s, max_s=settings.drift_backoff_max_s),
                clock),
            drift=DriftSettings(field_manager=settings.field_manager),
            marks=WriteMarks(), dry_runs=DryRuns(repairer),
            served=ServedKinds(kube, view, settings), notices=DriftNotices(),
            pending=PendingActions(), comparisons=ComparisonMemo())
        self.lifecycle = Lifecycle(ctx)
        self.backups = Backups(ctx)
        self.restore = Restore(ctx, self.backups, BackupFileServer(
            settings.restore_http_address,
            settings.restore_advertise_host or default_advertise_host(),
            on_drop=lambda reason: metrics.http_connections_dropped_total.labels(
                listener="restore", reason=reason).inc()))
        self.spec = SpecStep(ctx, memory)
        # Each cluster's reference (apiVersion, kind, name, namespace, uid) as last seen: an
        # Event about it once it is deleted (tell_deleted).
        self._known: dict[ClusterKey, Obj] = {}
        self.volumes = VolumesStep(ctx, memory)
        self.steps: list[Step] = [
            self.spec,
            CertificatesStep(ctx, memory),
            self.lifecycle,
            RenderStep(ctx, memory),
            ObserveStep(ctx, memory),
            RepairStep(ctx, memory),
            RecreateStep(ctx, memory),
            PruneStep(ctx, memory),
            self.volumes,
            Failover(ctx, self.lifecycle),
            self.restore,
            self.backups,
            ReportStep(ctx, memory),
        ]

    def reconcile(self, key: ClusterKey) -> Result:
        obj = self.view.peek(k.KAIWU_CLUSTER, key.namespace, key.name)
        if obj is None or meta(obj).get("deletionTimestamp"):
            # Its objects go with it (ownerReferences); forget what we knew.
            self.forget(key)
            if obj is None:
                self.tell_deleted(key)
            return Result()
        md = meta(obj)
        self._known[key] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                            "metadata": {"name": md.get("name"), "namespace": md.get("namespace"),
                                         "uid": md.get("uid")}}
        p = ObjectPass(key, obj, self.clock(), dict(obj.get("status") or {}))
        p.sync = p.generation != p.previous.get("observedGeneration")
        for step in self.steps:
            if (p.halted and not step.always) or not step.wanted(p):
                continue
            step.run(p)
        self.ctx.metrics.cluster_succeeded(key.namespace, key.name, p.now)
        return Result(min(p.requeue) if p.requeue else None)

    def tell_deleted(self, key: ClusterKey) -> None:
        """A cluster this reconciler knew is gone from the cache: if the API server says it is
        deleted (not moved to another shard, nor made again), an Event on it says what went
        with it and what was kept, by name (docs/install.md, "Deleting a cluster")."""
        known = self._known.pop(key, None)
        if known is None:
            return
        try:
            if self.ctx.kube.get(k.KAIWU_CLUSTER, key.namespace, key.name) is not None:
                return
        except ApiError:
            return  # a courtesy: not worth a retry
        selector = {INSTANCE_LABEL: key.name}
        claims = sorted(str(meta(c).get("name")) for c in self.view.peek_list(
            k.PVC, key.namespace, selector))
        secrets = sorted(str(meta(s).get("name")) for s in self.view.peek_list(
            k.SECRET, key.namespace, {**selector, k.TLS_SECRET_LABEL: "true"}))
        kept = ([f"claims {', '.join(claims)} (the data)"] if claims else []) + (
            [f"Secrets {', '.join(secrets)} (the CA and certificates)"] if secrets else [])
        where = f"kubectl -n {key.namespace}"
        self.ctx.events.emit(known, "Normal", "ClusterDeleted", (
            "deleted: its StatefulSet and pods, Services and the other objects it owned go "
            "with it (garbage collector); "
            + (f"kept: {' and '.join(kept)}: the same spec applied again finds them; to free "
               f"them: {where} delete pvc -l {INSTANCE_LABEL}={key.name}; {where} delete "
               f"secret -l {INSTANCE_LABEL}={key.name},{k.TLS_SECRET_LABEL}=true"
               if kept else "nothing of it is kept")))

    def forget(self, key: ClusterKey) -> None:
        self.spec.forget(key)
        self.volumes.forget(key)
        self.memory.fights.forget(key)
        self.lifecycle.forget(key.namespace, key.name)
        self.memory.pending.forget(key)
        self.restore.forget(key.namespace, key.name)
        self.memory.marks.forget(key)
        self.memory.notices.forget(key)
        self.memory.comparisons.forget(key)
        self.ctx.metrics.forget_cluster(key.namespace, key.name)
