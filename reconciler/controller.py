"""The reconciler's controller: one pass over one KaiwuCluster, from cache to status.

The runtime (reconciler.runtime) calls `Controller.reconcile(key)` from its workers whenever the
watch caches report a change to a cluster or one of its objects, and again after the delay a pass
asks for (`Result.requeue_after_s`). A pass reads only the caches (`CacheView`), so a cluster
where nothing changed costs no API request at all, and writes only what differs.

A pass is a list of named steps, each a (predicate, action) pair over one `Pass` record, in the
style of cockroach-operator's actors. Lifecycle and failover (issue 5) slot in as more steps
before "report":

  render        the spec -> desired objects (renderer); an invalid spec stops here, Stalled
  certificates  TLS Secrets planned by reconciler.certs; written unless paused
  lifecycle     KaiwuDB init once, node ids, scale-in by decommission (reconciler.lifecycle);
                during a scale-in it sets the StatefulSet replicas "observe" compares with
  observe       each desired object against its live copy (reconciler.compare), confirmed by a
                server-side-apply dry run when the offline comparison sees drift (the server's
                own defaults settle false alarms); dry runs are cached per (desired, live) so an
                unchanged object never costs one again
  repair        missing and drifted objects: server-side apply, then removal of fields others
                added; per drift policy (enforce repairs; warn and off only report) except that
                a new generation of the spec is always applied once (a sync), and objects never
                created before are always created; fights back off (reconciler.backoff)
  recreate      a StatefulSet whose immutable fields must change: orphaning delete, then the
                repair step of a later pass recreates it and it adopts the pods and claims
  prune         objects in status.inventory that are no longer rendered (never PVCs or Secrets,
                never on an empty render), deleted with a uid precondition
  failover      pods on lost Kubernetes nodes replaced (reconciler.failover)
  report        status per kstatus (written only when it changed), Events on transitions

Writes are server-side applies under `Settings.field_manager`; every applied object gets an
ownerReference to its KaiwuCluster (controller: true), so deleting the cluster garbage-collects
them (the StatefulSet's claims have none and survive).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from reconciler import kube as k
from reconciler import status as st
from reconciler.backoff import BackoffPolicy, FightTracker
from reconciler.cache import CacheView
from reconciler.certs import CERTS_HASH_ANNOTATION, ca_secret_name, certs_action, format_problem
from reconciler.compare import DriftReport, compare, format_report, projection_hash
from reconciler.events import EventRecorder, EventType, rfc3339
from reconciler.failover import Failover
from reconciler.ignore import IgnoreRule
from reconciler.keys import ClusterKey, ObjectRef
from reconciler.kube import ApiError, Kind, Kube, Obj
from reconciler.lifecycle import Lifecycle, LifecycleSettings
from reconciler.metrics import Metrics
from reconciler.normalise import DriftSettings
from reconciler.repair import Repairer
from reconciler.settings import Settings
from renderer import schema
from renderer.builders import MANAGED_BY, selector_labels
from renderer.errors import RenderError
from renderer.render import desired_objects
from renderer.settings import KubeVersion, RenderSettings
from renderer.spec import Cluster

log = logging.getLogger(__name__)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
INSTANCE_LABEL = "app.kubernetes.io/instance"
# Kinds every supported Kubernetes serves; others (ServiceMonitor: a CRD) are looked up first.
ALWAYS_SERVED = frozenset({k.SERVICE_ACCOUNT, k.SERVICE, k.STATEFUL_SET, k.SECRET,
                           k.NETWORK_POLICY, k.PDB_V1BETA1, k.POD, k.PVC})
# Never pruned: claims hold the data, Secrets hold the CA (losing it breaks every certificate).
NEVER_PRUNED = frozenset({"PersistentVolumeClaim", "Secret"})
# StatefulSet fields the API server refuses to change, and which of them an orphaning delete and
# recreate can change without touching pods or data. A new selector would not match the
# running pods (the new StatefulSet would try to create pods whose names are taken): Stalled.
STS_IMMUTABLE = ("/spec/selector", "/spec/volumeClaimTemplates", "/spec/serviceName",
                 "/spec/podManagementPolicy")
STS_RECREATABLE = ("/spec/volumeClaimTemplates", "/spec/serviceName", "/spec/podManagementPolicy")
# Bound on remembered dry runs (each is one object): enough for hundreds of clusters.
DRY_RUN_CACHE_SIZE = 4096
# How soon to look again while the API server finishes something we started (an orphaning
# delete) or after a write lost a race with another writer (409).
SHORT_REQUEUE_S = 0.5
# After a write, the watch cache shows the old object until the write's event arrives (usually
# milliseconds). A pass in between would judge the old copy and write again (a duplicate repair,
# a 409 on status). For this long at most, a cached object still at the version we overwrote is
# taken as "our write is on its way": skipped, and looked at again shortly.
STALE_GRACE_S = 5.0
STALE_RECHECK_S = 0.1

Verdict = Literal["in-sync", "missing", "drifted", "terminating", "immutable", "rejected",
                  "unserved"]


@dataclass(frozen=True)
class Result:
    """What a pass asks of the runtime: run again after this many seconds (None: only when a
    watch event comes)."""

    requeue_after_s: float | None = None


@dataclass
class ObjectState:
    """One desired object and what the pass found and did about it."""

    ref: ObjectRef
    kind: Kind
    desired: Obj
    live: Obj | None
    verdict: Verdict = "in-sync"
    report: DriftReport | None = None
    detail: str = ""  # the server's words for immutable/rejected, else the drift report
    repaired: bool = False  # written this pass and now as rendered
    stale: bool = False  # the cache still shows the version our last write replaced
    rules: tuple[IgnoreRule, ...] = ()  # the cluster's ignore rules (spec.drift.ignore)
    blocked_s: float = 0.0  # a fight's back-off keeps it drifted this long

    @property
    def outstanding(self) -> bool:
        """Still different from what we render after this pass."""
        return self.verdict in ("missing", "drifted", "immutable", "rejected") \
            and not self.repaired


@dataclass
class Pass:
    """Everything one reconcile of one cluster knows and decides; the steps fill it in."""

    key: ClusterKey
    obj: Obj
    now: float
    previous: dict[str, Any]
    cluster: Cluster | None = None
    desired: list[Obj] = field(default_factory=list)
    states: list[ObjectState] = field(default_factory=list)
    # The spec's generation has not been fully applied yet: apply it whatever the drift policy.
    sync: bool = False
    # Every desired object exists as rendered (or is stalled): the generation is observed.
    complete: bool = True
    wrote: bool = False
    stalled: list[tuple[str, str]] = field(default_factory=list)
    progressing: list[tuple[str, str]] = field(default_factory=list)
    actions: list[st.Action] = field(default_factory=list)
    events: list[tuple[EventType, str, str]] = field(default_factory=list)
    inventory: set[str] = field(default_factory=set)
    requeue: list[float] = field(default_factory=list)
    halted: bool = False
    # Lifecycle and failover steps: why the cluster is not Ready although its pods may be
    # (reason, message), and the status fields they own (initialized, nodes, operation,
    # failures; None removes one).
    not_ready: list[tuple[str, str]] = field(default_factory=list)
    status_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def paused(self) -> bool:
        return self.cluster is not None and self.cluster.paused

    @property
    def policy(self) -> str:
        return self.cluster.drift_policy if self.cluster is not None else "enforce"

    @property
    def generation(self) -> int | None:
        value = (self.obj.get("metadata") or {}).get("generation")
        return int(value) if value is not None else None

    def requeue_in(self, seconds: float) -> None:
        self.requeue.append(max(seconds, 0.05))

    def act(self, action: str, target: str, message: str, *, event: EventType | None = "Normal",
            reason: str = "") -> None:
        """Record an action for status.lastActions and (unless event is None) an Event."""
        self.actions.append(st.Action(rfc3339(self.now), action, target, message))
        if event is not None:
            self.events.append((event, reason or action, f"{target}: {message}"))


@dataclass(frozen=True)
class Step:
    """One named step of a pass: `run` when `when` holds. `always` steps (report) run even
    after an earlier step halted the pass."""

    name: str
    when: Callable[[Pass], bool]
    run: Callable[[Pass], None]
    always: bool = False


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _content_key(live: Mapping[str, Any]) -> str:
    """What identifies a live object's content for the dry-run cache: everything but status and
    bookkeeping that changes without the content changing (resourceVersion, managedFields times).
    Coarser than the resourceVersion on purpose: status updates (every pod readiness change bumps
    a StatefulSet's) must not cost a new dry run."""
    meta = dict(_meta(live))
    meta.pop("resourceVersion", None)
    managed = []
    for entry in meta.get("managedFields") or ():
        # Who owns which status fields changes with the status (omitempty counters come and
        # go): not content either.
        fields = {key: value for key, value in (entry.get("fieldsV1") or {}).items()
                  if key != "f:status"}
        if fields:
            managed.append({**{key: value for key, value in entry.items()
                               if key not in ("time", "fieldsV1")}, "fieldsV1": fields})
    meta["managedFields"] = managed
    body = {key: value for key, value in live.items() if key not in ("status", "metadata")}
    return projection_hash({"metadata": meta, **body})


def with_owner(obj: Obj, cluster: Obj) -> Obj:
    """A copy of `obj` owned by the KaiwuCluster (garbage-collected with it)."""
    meta = _meta(cluster)
    owned = dict(obj)
    owned["metadata"] = {**obj["metadata"], "ownerReferences": [{
        "apiVersion": cluster["apiVersion"], "kind": cluster["kind"], "name": meta["name"],
        "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]}
    return owned


class Controller:
    """Reconciles KaiwuClusters: `reconcile(key)` runs one pass (see the module docstring)."""

    def __init__(self, kube: Kube, view: CacheView, settings: Settings, metrics: Metrics,
                 clock: Callable[[], float] = time.time,
                 events: EventRecorder | None = None) -> None:
        self.kube = kube
        self.view = view
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.repairer = Repairer(kube, metrics)
        self.events = events or EventRecorder(kube, metrics, clock=clock,
                                              instance=settings.identity)
        self.fights = FightTracker(BackoffPolicy(
            threshold=settings.fight_threshold, window_s=settings.fight_window_s,
            base_s=settings.drift_backoff_base_s, max_s=settings.drift_backoff_max_s), clock)
        self.drift = DriftSettings(field_manager=settings.field_manager)
        # Workers reconcile different clusters at once; what they share is guarded by _lock
        # (per-cluster entries are only touched by the one worker holding that cluster).
        self._lock = threading.Lock()
        self._dry_runs: OrderedDict[tuple[str, str], Obj | ApiError] = OrderedDict()
        self._served: dict[tuple[Kind, str], tuple[bool, float]] = {}
        self._render_settings: tuple[RenderSettings, float] | None = None
        # The last drift reported per object (its live hash): Events and drift_detected_total
        # count a drift once, not once per pass.
        self._seen_drift: dict[tuple[ClusterKey, ObjectRef], str] = {}
        # What we last wrote, per cluster and object (or "status"): the resourceVersion it
        # replaced ("" for a create) and when; see STALE_GRACE_S.
        self._written: dict[tuple[ClusterKey, str], tuple[str, float]] = {}
        # Actions of passes whose status write waited for the cache: reported with the next.
        self._pending_actions: dict[ClusterKey, list[st.Action]] = {}
        self.lifecycle = Lifecycle(kube, view, metrics, LifecycleSettings(
            poll_s=settings.lifecycle_poll_s, probe_every_s=settings.node_probe_every_s,
            exec_timeout_s=settings.exec_timeout_s))
        self.failover = Failover(kube, view, metrics, self.lifecycle)
        self.steps: list[Step] = self.default_steps()

    def default_steps(self) -> list[Step]:
        """The pipeline. Issue 5's lifecycle steps go before "report"."""
        def writable(p: Pass) -> bool:
            return not p.paused

        return [
            Step("render", lambda p: True, self.render),
            Step("certificates", lambda p: p.cluster is not None and p.cluster.tls,
                 self.certificates),
            Step("lifecycle", self.lifecycle.wanted, self.lifecycle.run),
            Step("observe", lambda p: True, self.observe),
            Step("repair", writable, self.repair),
            Step("recreate", lambda p: writable(p) and any(
                s.verdict == "immutable" for s in p.states), self.recreate),
            Step("prune", lambda p: writable(p) and bool(p.states), self.prune),
            Step("failover", self.failover.wanted, self.failover.run),
            Step("report", lambda p: True, self.report, always=True),
        ]

    # ---- entry point ------------------------------------------------------------------------

    def reconcile(self, key: ClusterKey) -> Result:
        obj = self.view.get(k.KAIWU_CLUSTER, key.namespace, key.name)
        if obj is None or _meta(obj).get("deletionTimestamp"):
            # Its objects go with it (ownerReferences); forget what we knew.
            self.forget(key)
            return Result()
        p = Pass(key, obj, self.clock(), dict(obj.get("status") or {}))
        p.sync = p.generation != p.previous.get("observedGeneration")
        for step in self.steps:
            if (p.halted and not step.always) or not step.when(p):
                continue
            step.run(p)
        return Result(min(p.requeue) if p.requeue else None)

    def forget(self, key: ClusterKey) -> None:
        self.fights.forget(key)
        self.lifecycle.forget(key.namespace, key.name)
        with self._lock:
            self._pending_actions.pop(key, None)
            for written in [w for w in self._written if w[0] == key]:
                del self._written[written]
            for entry in [e for e in self._seen_drift if e[0] == key]:
                del self._seen_drift[entry]

    def wrote(self, key: ClusterKey, name: str, before: Obj | None) -> None:
        """Remember that we replaced `before` (None: created `name`) with a write."""
        version = str(_meta(before).get("resourceVersion") or "")
        with self._lock:
            self._written[(key, name)] = (version, time.monotonic())

    def stale(self, key: ClusterKey, name: str, cached: Obj | None) -> bool:
        """Whether the cache still shows what our last write to `name` replaced."""
        version = str(_meta(cached).get("resourceVersion") or "")
        with self._lock:
            mark = self._written.get((key, name))
            if mark is None:
                return False
            if version == mark[0] and time.monotonic() - mark[1] < STALE_GRACE_S:
                return True
            del self._written[(key, name)]
            return False

    # ---- render -----------------------------------------------------------------------------

    def render_settings(self) -> RenderSettings:
        """Rendering targets the API server's version (read once per resync period)."""
        now = time.monotonic()
        if self._render_settings is None or \
                now - self._render_settings[1] > self.settings.resync_period_s:
            version = KubeVersion.parse(self.kube.server_version())
            self._render_settings = (RenderSettings(kube_version=version), now)
        return self._render_settings[0]

    def render(self, p: Pass) -> None:
        try:
            p.desired = desired_objects(p.obj, self.render_settings())
            p.cluster = Cluster.from_object(schema.apply_defaults(
                {key: value for key, value in p.obj.items() if key != "status"}))
        except RenderError as error:
            self.metrics.errors_total.labels(stage="render").inc()
            p.stalled.append(("InvalidSpec", f"the spec cannot be rendered: {error}"))
            p.halted = True

    # ---- certificates -----------------------------------------------------------------------

    def certificates(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        names = {cluster.node_secret, cluster.client_secret, ca_secret_name(cluster)}
        secrets: dict[str, Obj] = {}
        for name in names:
            found = self.view.get(k.SECRET, cluster.namespace, name)
            if found is None and cluster.user_provided_certs:
                # A user's own Secrets need not carry our label, so the cache may not hold them.
                found = self.kube.get(k.SECRET, cluster.namespace, name)
            if found is not None:
                secrets[name] = found
        plan = certs_action(cluster, secrets, datetime.fromtimestamp(p.now, UTC))
        stale = any(self.stale(p.key, f"Secret/{name}", secrets.get(name)) for name in names)
        if stale:
            # Planned from Secrets we have just written: wait for the cache to show ours.
            p.requeue_in(STALE_RECHECK_S)
            p.complete = False
        elif not p.paused:
            for write in plan.writes:
                body = with_owner(write.secret, p.obj)
                target = f"Secret/{write.name}"
                try:
                    if write.verb == "create":
                        self.repairer.create(body)
                    else:
                        self.repairer.apply(body)
                except ApiError as error:
                    if error.conflict:
                        # The cache was stale: never overwrite a CA we have not seen.
                        p.requeue_in(SHORT_REQUEUE_S)
                        p.complete = False
                        return
                    raise
                p.wrote = True
                self.wrote(p.key, target, secrets.get(write.name))
                p.act("CertificateWritten", target, write.reason)
        for problem in plan.problems:
            p.stalled.append(("CertificatesUnusable", format_problem(problem)))
        for warning in plan.warnings:
            p.events.append(("Warning", "CertificateWarning", format_problem(warning)))
        certs_hash = plan.certs_hash
        for obj in p.desired:
            if obj["kind"] != "StatefulSet":
                continue
            if certs_hash is None or plan.problems or stale:
                # Keep what the pods run with: never roll them onto unusable certificates, nor
                # onto a plan made from Secrets older than the ones we wrote.
                live = self.view.get(k.STATEFUL_SET, cluster.namespace, obj["metadata"]["name"])
                template = ((live or {}).get("spec") or {}).get("template") or {}
                certs_hash = (_meta(template).get("annotations") or {}).get(CERTS_HASH_ANNOTATION)
            if certs_hash:
                meta = obj["spec"]["template"].setdefault("metadata", {})
                meta.setdefault("annotations", {})[CERTS_HASH_ANNOTATION] = certs_hash

    # ---- observe ----------------------------------------------------------------------------

    def observe(self, p: Pass) -> None:
        cluster = p.cluster
        assert cluster is not None
        rules = tuple(IgnoreRule.parse({"pointer": rule.pointer, "kind": rule.kind,
                                        "name": rule.name}) for rule in cluster.drift_ignore)
        for desired in p.desired:
            kind = k.KINDS.get((desired["apiVersion"], desired["kind"]))
            if kind is None:  # pragma: no cover - the renderer emits only kinds kube.py knows
                raise LookupError(f"no API mapping for {desired['apiVersion']} {desired['kind']}")
            ref = ObjectRef.of(desired)
            owned = with_owner(desired, p.obj)
            live = self.view.get(kind, ref.namespace, ref.name)
            state = ObjectState(ref, kind, owned, live, rules=rules)
            p.states.append(state)
            if self.stale(p.key, str(ref), live):
                state.stale = True
                p.requeue_in(STALE_RECHECK_S)
            elif live is None:
                state.verdict = "missing" if self.served(kind, ref.namespace) else "unserved"
            elif _meta(live).get("deletionTimestamp"):
                state.verdict = "terminating"
            else:
                self.judge(p, state)

    def judge(self, p: Pass, state: ObjectState) -> None:
        """In sync, drifted, immutable or rejected: offline first, then the server's word."""
        assert state.live is not None
        rules = state.rules
        report = compare(state.desired, state.live, ignore_rules=rules, settings=self.drift)
        state.report = report
        if not report.drifted:
            return
        if state.kind == k.STATEFUL_SET and self.immutable_changes(report):
            state.verdict = "immutable"
            state.detail = format_report(report)
            return
        if p.policy == "off" and not p.sync:
            # Nothing will be done or said about it: spend no dry run on it.
            state.verdict = "drifted"
            return
        dry = self.dry_run(state.desired, state.live)
        if isinstance(dry, ApiError):
            state.verdict = "immutable" if (state.kind == k.STATEFUL_SET
                                            and dry.status == 422) else "rejected"
            state.detail = dry.message
            return
        report = compare(state.desired, state.live, ignore_rules=rules, dry_run=dry,
                         settings=self.drift)
        state.report = report
        state.verdict = "drifted" if report.drifted else "in-sync"
        if report.drifted:
            state.detail = format_report(report)

    @staticmethod
    def immutable_changes(report: DriftReport) -> list[str]:
        return [c.pointer for c in report.changes
                if any(c.pointer == f or c.pointer.startswith(f + "/") for f in STS_IMMUTABLE)]

    def dry_run(self, desired: Obj, live: Obj) -> Obj | ApiError:
        """The server's view of "desired applied to live", cached per (desired, live content)."""
        key = (projection_hash(desired), _content_key(live))
        with self._lock:
            if key in self._dry_runs:
                self._dry_runs.move_to_end(key)
                return self._dry_runs[key]
        try:
            result: Obj | ApiError = self.repairer.dry_run(desired)
        except ApiError as error:
            if error.status not in (400, 403, 409, 422):
                raise
            result = error
        self._remember_dry_run(desired, live, result)
        return result

    def _remember_dry_run(self, desired: Obj, live: Obj, result: Obj | ApiError) -> None:
        key = (projection_hash(desired), _content_key(live))
        with self._lock:
            self._dry_runs[key] = result
            while len(self._dry_runs) > DRY_RUN_CACHE_SIZE:
                self._dry_runs.popitem(last=False)

    def served(self, kind: Kind, namespace: str) -> bool:
        """Whether the API server serves `kind` (CRD-backed kinds may be missing). The watch
        caches know when they offer `served(kind)` (reconciler.cache.Caches does); otherwise a
        read, remembered for a resync period."""
        if kind in ALWAYS_SERVED:
            return True
        cached = getattr(self.view, "served", None)
        if callable(cached):
            answer = cached(kind)
            if isinstance(answer, bool):
                return answer
        now = time.monotonic()
        known = self._served.get((kind, namespace))
        if known is not None and now - known[1] < self.settings.resync_period_s:
            return known[0]
        try:
            self.kube.list_objects(kind, namespace, f"{MANAGED_BY_LABEL}={MANAGED_BY}")
            found = True
        except ApiError as error:
            if not error.not_found:
                raise
            found = False
        self._served[(kind, namespace)] = (found, now)
        return found

    # ---- repair -----------------------------------------------------------------------------

    def repair(self, p: Pass) -> None:
        inventory = set(p.previous.get("inventory") or ())
        for state in p.states:
            if state.verdict in ("terminating",):
                # An orphaning delete we started is finishing; the next pass recreates it.
                p.progressing.append(("Recreating", f"waiting for {state.ref.short} to be "
                                      "deleted (pods and claims are kept) to recreate it"))
                p.requeue_in(SHORT_REQUEUE_S)
                p.complete = False
                continue
            if state.verdict not in ("missing", "drifted"):
                continue
            first = state.verdict == "missing" and str(state.ref) not in inventory
            drift_repair = not (p.sync or first)
            if drift_repair and p.policy != "enforce":
                continue  # warn and off: reported (or not) by the report step
            if drift_repair:
                wait = self.fights.wait_s(p.key, state.ref)
                if wait > 0:
                    state.blocked_s = wait
                    p.requeue_in(wait)
                    continue
            before = state.live
            try:
                self.write(state)
            except ApiError as error:
                self.metrics.errors_total.labels(stage="apply").inc()
                if error.conflict:
                    p.requeue_in(SHORT_REQUEUE_S)
                    p.complete = False
                    continue
                if error.status in (400, 403, 404, 422):
                    state.verdict = "rejected"
                    state.detail = error.message
                    continue
                raise
            p.wrote = True
            self.wrote(p.key, str(state.ref), before)
            self._after_write(p, state, first, drift_repair)

    def write(self, state: ObjectState) -> None:
        """Make the live object what we render: apply (unless the only differences are fields
        others added), then remove fields others added. Leaves state.live as stored."""
        report = state.report
        others_only = report is not None and state.live is not None and all(
            c.kind == "added" and self.settings.field_manager not in c.managers
            for c in report.changes)
        live = state.live
        dry: Obj | None = None
        if not others_only:
            live = self.repairer.apply(state.desired)
            dry = live
            # Applying the same object to what the server now has would change nothing.
            self._remember_dry_run(state.desired, live, live)
        assert live is not None
        after = compare(state.desired, live, ignore_rules=state.rules,
                        dry_run=dry or self._cached_dry_run(state, live), settings=self.drift)
        added = [c.pointer for c in after.changes if c.kind == "added" and c.pointer]
        if added:
            try:
                patched = self.repairer.remove_fields(live, added)
            except ApiError as error:
                if error.status == 422:
                    # A `test` failed: the object changed since we looked. Look again.
                    raise ApiError(409, "Conflict", error.message) from error
                raise
            if patched is not None:
                live = patched
                after = compare(state.desired, live, ignore_rules=state.rules, dry_run=dry,
                                settings=self.drift)
        state.live = live
        state.repaired = not after.drifted
        if after.drifted:
            state.verdict = "drifted"
            state.detail = format_report(after)
            log.warning("object still differs after repair: %s", state.detail)

    def _cached_dry_run(self, state: ObjectState, live: Obj) -> Obj | None:
        key = (projection_hash(state.desired), _content_key(live))
        with self._lock:
            found = self._dry_runs.get(key)
        return found if isinstance(found, dict) else None

    def _after_write(self, p: Pass, state: ObjectState, first: bool, drift_repair: bool) -> None:
        target = state.ref.short
        if first:
            p.act("Created", target, "created", event=None)
            return
        if not drift_repair:
            p.act("Applied", target, "applied the spec's new generation", event=None)
            return
        self.metrics.drift_repaired_total.labels(kind=state.ref.kind).inc()
        what = "recreated (it had been deleted)" if state.verdict == "missing" else \
            "repaired: " + _changes_text(state.report)
        p.act("DriftRepaired", target, what)
        with self._lock:
            self._seen_drift.pop((p.key, state.ref), None)
        fight = self.fights.record_repair(p.key, state.ref, what)
        if fight.fighting:
            wait = max(0.0, fight.blocked_until - p.now)
            p.events.append(("Warning", "DriftFight", (
                f"{target} keeps changing back ({len(fight.repairs)} repairs within "
                f"{self.settings.fight_window_s:g}s): next repair not before {wait:.0f}s")))
            p.requeue_in(wait)

    # ---- recreate ---------------------------------------------------------------------------

    def recreate(self, p: Pass) -> None:
        for state in p.states:
            if state.verdict != "immutable" or state.live is None:
                continue
            fields = self.immutable_changes(state.report) if state.report else []
            recreatable = bool(fields) and all(
                any(f == r or f.startswith(r + "/") for r in STS_RECREATABLE) for f in fields)
            if not recreatable:
                p.stalled.append(("ImmutableField", self._immutable_advice(state, fields)))
                continue
            if not (p.sync or p.policy == "enforce"):
                continue
            try:
                self.repairer.delete(state.kind, state.live, propagation="Orphan")
                self.wrote(p.key, str(state.ref), state.live)
            except ApiError as error:
                if error.conflict:  # the uid precondition failed: a successor is there
                    p.requeue_in(SHORT_REQUEUE_S)
                    continue
                raise
            p.wrote = True
            p.complete = False
            state.repaired = True
            p.progressing.append(("Recreating", f"recreating {state.ref.short}: "
                                  f"{', '.join(fields)} changed"))
            p.requeue_in(SHORT_REQUEUE_S)
            p.act("Recreating", state.ref.short, (
                f"{', '.join(fields)} cannot change in place: deleted with its pods and claims "
                "orphaned (they keep running and keep their data); it is recreated at once and "
                "adopts them"))

    @staticmethod
    def _immutable_advice(state: ObjectState, fields: list[str]) -> str:
        """What a person can do about a change the reconciler will not make by itself."""
        which = ", ".join(fields) or "an immutable field"
        text = (f"{state.ref.short}: {which} cannot be changed in place"
                f"{': ' + state.detail if state.detail and not fields else ''}")
        orphan = f"kubectl delete statefulset {state.ref.name} --cascade=orphan"
        selector = ((state.desired.get("spec") or {}).get("selector") or {}).get(
            "matchLabels") or {}
        old = (((state.live or {}).get("spec") or {}).get("selector") or {}).get(
            "matchLabels") or {}
        if any(f.startswith("/spec/selector") for f in fields) and selector and old:
            # The recreated StatefulSet adopts only pods its new selector matches.
            wanted = " ".join(f"{key}={value}" for key, value in sorted(selector.items())
                              if old.get(key) != value)
            current = ",".join(f"{key}={value}" for key, value in sorted(old.items()))
            return (f"{text}: the running pods would not match the new selector. To apply it, "
                    f"delete the StatefulSet keeping its pods ({orphan}), give them the new "
                    f"labels (kubectl label pods -l {current} {wanted}); the reconciler then "
                    "recreates it and the new one adopts them")
        return (f"{text}. To apply it, delete the StatefulSet keeping its pods ({orphan}); the "
                "reconciler recreates it and the new one adopts them")

    # ---- prune ------------------------------------------------------------------------------

    def prune(self, p: Pass) -> None:
        """Delete objects we applied once and no longer render (status.inventory)."""
        rendered = {(s.ref.kind, s.ref.namespace, s.ref.name) for s in p.states}
        for entry in p.previous.get("inventory") or ():
            try:
                ref = ObjectRef.parse(str(entry))
            except ValueError:
                continue
            if (ref.kind, ref.namespace, ref.name) in rendered or ref.kind in NEVER_PRUNED:
                continue  # still rendered (perhaps under a newer apiVersion), or never pruned
            kind = k.KINDS.get((ref.api_version, ref.kind))
            if kind is None:
                continue
            if not (p.sync or p.policy == "enforce"):
                p.inventory.add(str(ref))  # warn/off: keep it listed, do not delete
                continue
            live = self.view.get(kind, ref.namespace, ref.name) if self.served(
                kind, ref.namespace) else None
            if live is None:
                continue
            if self.stale(p.key, str(ref), live):
                p.inventory.add(str(ref))  # our delete is on its way
                p.requeue_in(STALE_RECHECK_S)
                continue
            labels = _meta(live).get("labels") or {}
            if labels.get(MANAGED_BY_LABEL) != MANAGED_BY or \
                    labels.get(INSTANCE_LABEL) != p.key.name:
                continue  # someone took it over: it is not ours to delete any more
            try:
                self.repairer.delete(kind, live, propagation="Background")
                self.wrote(p.key, str(ref), live)
            except ApiError as error:
                if error.conflict:
                    p.inventory.add(str(ref))
                    p.requeue_in(SHORT_REQUEUE_S)
                    continue
                raise
            p.wrote = True
            p.act("Pruned", ref.short, "deleted: the spec no longer renders it")

    # ---- report -----------------------------------------------------------------------------

    def report(self, p: Pass) -> None:
        # Actions taken together make one Event per kind of action, not one per object.
        created = [a.target for a in p.actions if a.action == "Created"]
        if created:
            p.events.append(("Normal", "Created", "created " + ", ".join(created)))
        applied = [a.target for a in p.actions if a.action == "Applied"]
        if applied:
            p.events.append(("Normal", "Applied", f"applied generation {p.generation} to "
                             + ", ".join(applied)))
        self._drift_events(p)
        with self._lock:
            p.actions = self._pending_actions.pop(p.key, []) + p.actions
        if self.stale(p.key, "status", p.obj):
            # Our last status write is not in the cache yet: judging transitions against the
            # old status would write and announce them twice. The next pass reports.
            if p.actions:
                with self._lock:
                    self._pending_actions[p.key] = p.actions
            p.requeue_in(STALE_RECHECK_S)
            self._emit(p)
            return
        observed = self.observed(p)
        new = st.build(p.previous, observed, rfc3339(p.now))
        if new != p.previous:
            body = {**p.obj, "status": new}
            try:
                self.repairer.replace_status(body)
            except ApiError as error:
                self.metrics.errors_total.labels(stage="status").inc()
                if error.conflict or error.not_found:
                    # A newer cluster object is on its way; its pass reports these actions.
                    with self._lock:
                        self._pending_actions[p.key] = p.actions
                    p.requeue_in(SHORT_REQUEUE_S)
                    self._emit(p)
                    return
                raise
            self.wrote(p.key, "status", p.obj)
        for transition in st.transitions(p.previous, new):
            event = self._transition_event(transition)
            if event is not None:
                p.events.append(event)
        self._emit(p)

    def _emit(self, p: Pass) -> None:
        for type_, reason, message in p.events:
            self.events.emit(p.obj, type_, reason, message)

    def _drift_events(self, p: Pass) -> None:
        """A drift seen for the first time (per object and per distinct live state) is counted
        and, when it stays (warn, paused, back-off), announced once."""
        for state in p.states:
            entry = (p.key, state.ref)
            if state.stale:
                continue  # our write is on its way: nothing new to say about it
            if state.verdict not in ("missing", "drifted") or p.policy == "off":
                if state.verdict == "in-sync":
                    with self._lock:
                        self._seen_drift.pop(entry, None)
                    self.fights.record_in_sync(p.key, state.ref)
                continue
            if p.sync or (state.verdict == "missing" and str(state.ref) not in set(
                    p.previous.get("inventory") or ())):
                continue  # a new spec being applied, or never created yet: not drift
            fingerprint = state.report.live_hash if state.report else "missing"
            with self._lock:
                if self._seen_drift.get(entry) == fingerprint:
                    continue
            self.metrics.drift_detected_total.labels(kind=state.ref.kind).inc()
            log.info("drift detected: %s", state.detail or f"{state.ref.short} missing")
            if state.repaired:
                continue  # the DriftRepaired event says it all
            with self._lock:
                self._seen_drift[entry] = fingerprint
            why = ("the cluster is paused" if p.paused else
                   "drift policy is warn" if p.policy == "warn" else
                   f"repairs are backing off for {state.blocked_s:.0f}s" if state.blocked_s
                   else "not repaired")
            what = "missing" if state.verdict == "missing" else _changes_text(state.report)
            p.events.append(("Warning", "DriftDetected",
                             f"{state.ref.short}: {what} ({why})"))

    @staticmethod
    def _transition_event(t: st.Transition) -> tuple[EventType, str, str] | None:
        if t.type == st.READY and t.after == "True":
            return "Normal", "Ready", t.message
        if t.type == st.READY and t.before == "True":
            return "Warning", "NotReady", f"{t.reason}: {t.message}"
        if t.type == st.STALLED and t.after == "True":
            return "Warning", t.reason, t.message
        if t.type == st.STALLED and t.before == "True":
            return "Normal", "Progressing", "no longer stalled"
        if t.type == st.DRIFTED and t.before == "True" and t.after == "False":
            return "Normal", "DriftResolved", t.message
        return None

    def observed(self, p: Pass) -> st.Observed:
        """Sum the pass up as conditions and status fields."""
        cluster = p.cluster
        inventory = set(p.inventory)
        for state in p.states:
            if (state.live is not None or state.stale) and state.verdict != "terminating" \
                    and not (state.verdict == "immutable" and state.repaired):
                inventory.add(str(state.ref))
        if p.halted and not p.states:
            # Nothing rendered (invalid spec): what we applied before is still there.
            inventory |= set(p.previous.get("inventory") or ())
        for fight_ref, fight in self.fights.fights(p.key).items():
            p.stalled.append(("DriftFight", (
                f"{fight_ref.short} keeps being changed back after each repair "
                f"({fight.last_drift}); repairs back off up to "
                f"{self.settings.drift_backoff_max_s:g}s. Stop whatever changes it (its "
                "managedFields name the manager), or add a spec.drift.ignore rule")))
            quiet = self.fights.quiet_in_s(p.key, fight_ref)
            if quiet > 0:
                p.requeue_in(quiet)
        for state in p.states:
            if state.verdict == "rejected":
                p.stalled.append(("ApplyRejected",
                                  f"{state.ref.short}: the API server refused it: {state.detail}"))
        unserved = [s.ref.short for s in p.states if s.verdict == "unserved"]

        sts_state = next((s for s in p.states if s.kind == k.STATEFUL_SET), None)
        sts = sts_state.live if sts_state is not None else None
        sts_status = (sts or {}).get("status") or {}
        # What we apply (a scale-in in progress applies fewer than spec.replicas).
        want = int(sts_state.desired["spec"].get("replicas", 1)) if sts_state is not None else 0
        ready = int(sts_status.get("readyReplicas") or 0)
        updated = int(sts_status.get("updatedReplicas") or 0)
        current = int(sts_status.get("replicas") or 0)
        rolled = sts is not None and int(sts_status.get("observedGeneration") or 0) >= int(
            _meta(sts).get("generation") or 0) and updated == want and current == want
        pods_ready = rolled and ready == want

        drifted = [s for s in p.states if s.outstanding and s.verdict in ("missing", "drifted")
                   and not (s.verdict == "missing" and p.sync)]
        conditions: list[st.Condition] = []
        stalled = bool(p.stalled)
        if stalled:
            conditions.append(st.Condition(st.STALLED, "True", p.stalled[0][0],
                                           "; ".join(message for _, message in p.stalled)))
        else:
            conditions.append(st.Condition(st.STALLED, "False", "Progressing" if not p.halted
                                           else "Halted"))
        if p.policy == "off" and not p.paused:
            conditions.append(st.Condition(st.DRIFTED, "Unknown", "PolicyOff",
                                           "drift policy is off: live objects are not checked"))
        elif drifted:
            reason = "Paused" if p.paused else "WarnOnly" if p.policy == "warn" else \
                "BackingOff" if any(s.blocked_s for s in drifted) else "Pending"
            conditions.append(st.Condition(st.DRIFTED, "True", reason, "; ".join(
                f"{s.ref.short}: {'missing' if s.verdict == 'missing' else _changes_text(s.report)}"
                for s in drifted)))
        else:
            repaired = [a for a in p.actions if a.action == "DriftRepaired"]
            conditions.append(st.Condition(
                st.DRIFTED, "False", "Repaired" if repaired else "InSync",
                "; ".join(f"{a.target} {a.message}" for a in repaired) if repaired
                else "every object is as the spec renders it"))

        outstanding = [s for s in p.states if s.outstanding]
        if p.halted:
            ready_reason, ready_message = "InvalidSpec", "the spec cannot be rendered"
        elif stalled:
            ready_reason, ready_message = "Stalled", p.stalled[0][1]
        elif drifted:
            ready_reason, ready_message = "Drifted", "objects differ from the spec: " + ", ".join(
                s.ref.short for s in drifted)
        elif outstanding or not p.complete:
            ready_reason, ready_message = "Applying", "objects are being applied"
        elif p.not_ready:
            ready_reason = p.not_ready[0][0]
            ready_message = "; ".join(message for _, message in p.not_ready)
        elif not pods_ready:
            ready_reason = "WaitingForPods"
            ready_message = f"{ready}/{want} pods ready" + ("" if rolled else
                                                           ", rollout in progress")
        else:
            ready_reason, ready_message = "Ready", f"{ready}/{want} pods ready"
        if unserved:
            ready_message += (f" (not served by this Kubernetes, skipped: {', '.join(unserved)};"
                              " install the CRDs that serve them)")
        is_ready = ready_reason == "Ready"
        conditions.append(st.Condition(st.READY, "True" if is_ready else "False", ready_reason,
                                       ready_message))

        if p.paused:
            conditions.append(st.Condition(st.RECONCILING, "False", "Paused",
                                           "spec.paused is set: only reporting"))
        elif is_ready or stalled or p.halted:
            conditions.append(st.Condition(st.RECONCILING, "False", ready_reason, ""))
        elif drifted and p.policy != "enforce":
            conditions.append(st.Condition(st.RECONCILING, "False", "WarnOnly",
                                           "drift is reported, not repaired (spec.drift.policy)"))
        elif p.progressing:
            conditions.append(st.Condition(st.RECONCILING, "True", p.progressing[0][0],
                                           "; ".join(m for _, m in p.progressing)))
        else:
            conditions.append(st.Condition(st.RECONCILING, "True", ready_reason, ready_message))

        # The generation is observed once all of it is applied (or we are stuck on it).
        done = p.complete and not any(s.verdict in ("missing", "terminating", "immutable")
                                      and s.outstanding for s in p.states)
        # Paused counts as observed: unpausing is a new generation, which is applied then.
        generation = p.generation if (done or stalled or p.paused) else None
        previous_phase = p.previous.get("phase")
        phase = ("Failed" if p.halted else "Running" if is_ready else
                 "Pending" if ready == 0 else
                 "Degraded" if previous_phase in ("Running", "Degraded") else "Pending")
        labels = selector_labels(cluster) if cluster is not None else {}
        return st.Observed(
            generation=generation,
            conditions=tuple(conditions),
            phase=phase,
            replicas=current,
            ready_nodes=ready,
            selector=",".join(f"{key}={value}" for key, value in sorted(labels.items())),
            version=cluster.version if cluster is not None and pods_ready else None,
            inventory=tuple(sorted(inventory)),
            actions=tuple(p.actions),
            fields=tuple(sorted(p.status_fields.items())),
        )


def _changes_text(report: DriftReport | None, limit: int = 5) -> str:
    """`path: desired -> live` for the first changes of a report (values already masked)."""
    if report is None or not report.changes:
        return "differs"
    lines = format_report(report).splitlines()[1:]
    shown = [line.strip() for line in lines[:limit]]
    more = len(report.changes) - limit
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
