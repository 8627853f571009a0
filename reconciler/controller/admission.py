"""Is a KaiwuCluster (or a change to one) acceptable? The one judge for the admission webhook and
the reconciler, running exactly the renderer's rules.

Called by the webhook server (reconciler.runtime.webhook) for every AdmissionReview of a
KaiwuCluster CREATE or UPDATE, including the `scale` subresource, and by the controller's spec
step (reconciler.controller.render) on every pass. Both run `renderer.render.check_live` (schema
and semantic rules, what `kaiwu validate` runs in CI) and `renderer.semantics.check_change` (start
mode, volume size, storage class, single-replica scale-in, version), so a spec means the same
thing in CI, at the API's door and in the reconciler. At the door it also refuses a cluster that
would need an object another KaiwuCluster of its namespace needs (`kaiwu validate` refuses the
same across files; the reconciler reports such an object as NameTaken and leaves it alone).

What a change is judged against: the last spec the reconciler applied, remembered as
`ACCEPTED_ANNOTATION` on the cluster's StatefulSet (`accepted_facts`; status is never the only
memory), with the version the oldest its pods run (`applied`). That is what exists: a spec
stored while the webhook was down and refused by the reconciler never became it, so changing such
a spec back is allowed. Without that memory (a cluster not applied yet, or a StatefulSet from
before this annotation) the webhook judges against the stored object (`oldObject`) when that one
passes the rules itself.

Everything here but `applied` (which reads the watch caches) is a pure function of its inputs:
the webhook passes lookups into its caches, tests pass dictionaries.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.kaiwudb.rollout import running_versions
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.model import PAUSED_ANNOTATION, Obj, meta
from renderer import semantics
from renderer.builders import INSTANCE_LABEL
from renderer.errors import RenderError
from renderer.render import check_live, live_problem, owned_names, read_live
from renderer.semantics import FACT_KEYS, check_change, transition_facts

# On the StatefulSet: transition_facts of the spec the reconciler last applied, as JSON.
ACCEPTED_ANNOTATION = "kaiwu.inspur.com/accepted-spec"
# admission.k8s.io/v1 and v1beta1 answer in the same shape; the request's version is echoed.
REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
# A refused request's HTTP status (as the API server's own schema validation answers).
DENIED_CODE = 422
# Kubernetes asks for warnings of at most 120 characters (longer ones may be cut).
MAX_WARNING = 120

Lookup = Callable[[str, str], Obj | None]
# The KaiwuClusters stored in a namespace (for the names two clusters would both need).
Neighbours = Callable[[str], list[Obj]]
# The accepted transition facts of a stored cluster (`accepted_facts` of its StatefulSet).
Accepted = Callable[[Obj], dict[str, Any] | None]


@dataclass(frozen=True)
class Verdict:
    """The answer to one request: allowed or not, why (the renderer's one-line problems, each
    `KaiwuCluster ns/name: field: what (fix)`) and advice that does not refuse."""

    allowed: bool
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return "; ".join(self.problems)


@dataclass(frozen=True)
class Judgement:
    """A live KaiwuCluster judged: its defaulted object (None when it breaks a rule) and the
    problems, one line each."""

    defaulted: Obj | None
    problems: tuple[str, ...]


def judge(obj: Obj, reference: Mapping[str, Any] | None) -> Judgement:
    """The renderer's rules on `obj`, and the change rules from `reference` (the old spec or its
    transition facts; None: a new cluster)."""
    try:
        defaulted = check_live(obj)
    except RenderError as error:
        return Judgement(None, tuple(str(problem) for problem in error.problems))
    if reference is None:
        return Judgement(defaulted, ())
    found = [str(live_problem(obj, v.path, v.message, v.fix))
             for v in check_change(dict(reference), defaulted["spec"])]
    return Judgement(None if found else defaulted, tuple(found))


def facts_annotation(spec: Mapping[str, Any]) -> str:
    """The ACCEPTED_ANNOTATION value for a defaulted spec (sorted JSON: same spec, same text)."""
    return json.dumps(transition_facts(dict(spec)), sort_keys=True, separators=(",", ":"))


def accepted_facts(statefulset: Obj | None, cluster: Obj) -> dict[str, Any] | None:
    """The transition facts the reconciler wrote on the cluster's StatefulSet, or None: no
    StatefulSet, no annotation, unreadable, or a StatefulSet of an earlier cluster of the same
    name (its controller ownerReference names another uid)."""
    if statefulset is None:
        return None
    uid = meta(cluster).get("uid")
    owners = meta(statefulset).get("ownerReferences") or []
    if uid and not any(o.get("uid") == uid for o in owners if o.get("controller")):
        return None
    raw = (meta(statefulset).get("annotations") or {}).get(ACCEPTED_ANNOTATION)
    if not raw:
        return None
    try:
        facts = json.loads(raw)
    except ValueError:
        return None
    needed = {"startMode", "replicas", "version", "storage"}
    if not isinstance(facts, dict) or not needed <= facts.keys() or not isinstance(
            facts["storage"], dict) or "size" not in facts["storage"]:
        return None
    # Only the facts' own keys; a clock offset bound that is no text is not known (an
    # annotation written before it was kept has none either).
    return {key: value for key, value in facts.items() if key in FACT_KEYS
            and (key != "maxOffset" or isinstance(value, str))}


def applied(view: CacheView, cluster: Obj) -> dict[str, Any] | None:
    """What exists of a stored cluster, from the watch caches: the `accepted_facts` of its
    StatefulSet, with the version replaced by the oldest one its pods run. A version change is
    judged against the pods, as the rollout judges it: an upgrade that has moved one pod (and
    crashed there) can still be set back, a finished one cannot be downgraded."""
    m = meta(cluster)
    namespace, name = str(m.get("namespace") or ""), str(m.get("name") or "")
    # peek: the cached StatefulSet is only read (its annotation and owners), not copied.
    facts = accepted_facts(view.peek(k.STATEFUL_SET, namespace, name), cluster)
    if facts is None:
        return None
    pods = {str(meta(pod).get("name")): pod
            for pod in view.peek_list(k.POD, namespace, {INSTANCE_LABEL: name})}
    running = running_versions(pods)
    if running:
        facts = {**facts, "version": ".".join(str(part) for part in min(running))}
    return facts


# ---- AdmissionReview -------------------------------------------------------------------------


def review(request: Mapping[str, Any], *, stored: Lookup, accepted: Accepted,
           watched: Callable[[str], bool] = lambda _namespace: True,
           neighbours: Neighbours = lambda _namespace: []) -> Verdict:
    """The verdict on one AdmissionReview `request` (CREATE or UPDATE of a KaiwuCluster or its
    scale subresource). `stored(ns, name)` is the KaiwuCluster as stored (for a scale request,
    which carries only an autoscaling/v1 Scale); `accepted(cluster)` the transition facts of
    the last spec applied for that stored cluster (`accepted_facts`), None when unknown;
    `neighbours(ns)` the KaiwuClusters stored there: a cluster that would need an object another
    one needs is refused (each would overwrite the other's). A namespace this reconciler does
    not watch is another install's business: allowed."""
    namespace = str(request.get("namespace") or "")
    if not watched(namespace):
        return Verdict(True)
    if request.get("subResource") == "scale":
        return _with_neighbours(_review_scale(request, stored, accepted), request, stored,
                                neighbours)
    new = request.get("object") or {}
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    if old and (new.get("spec") == old.get("spec") or meta(new).get("deletionTimestamp")):
        # Labels, annotations, finalizers, the pause annotation: never refused, or an invalid
        # stored cluster could not even be paused or deleted.
        stale = judge(old, None)
        return Verdict(True, warnings=_short(
            [f"the stored spec is refused by the reconciler: {stale.problems[0]}"]
            if stale.problems else []))
    reference = None
    if old:
        reference = accepted(old) or _own_facts(old)
    return _with_neighbours(_verdict(new, reference), request, stored, neighbours)


def _with_neighbours(verdict: Verdict, request: Mapping[str, Any], stored: Lookup,
                     neighbours: Neighbours) -> Verdict:
    """An allowed verdict, refused when the cluster would need an object that another
    KaiwuCluster of its namespace needs (renderer.render.owned_names; `kaiwu validate` refuses
    the same for files)."""
    if not verdict.allowed:
        return verdict
    namespace = str(request.get("namespace") or "")
    name = str(request.get("name") or "")
    old: Obj | None = None
    if request.get("subResource") == "scale":
        cluster = stored(namespace, name)
        if cluster is None:
            return verdict
        old = cluster
        new = copy.deepcopy(cluster)
        new.setdefault("spec", {})["replicas"] = ((request.get("object") or {}).get(
            "spec") or {}).get("replicas")
    else:
        new = copy.deepcopy(request.get("object") or {})
        if request.get("operation") == "UPDATE":
            old = request.get("oldObject")
    new.setdefault("metadata", {}).setdefault("namespace", namespace)
    try:
        mine = read_live(new)
    except RenderError:
        return verdict  # judged already: the rules let it through
    had: dict[tuple[str, str], str] = {}  # what the cluster needed before this change
    if old:
        try:
            had = owned_names(read_live({**old, "metadata": {**meta(old),
                                                             "namespace": namespace}}))
        except RenderError:
            had = {}
    needs = owned_names(mine)  # each cluster's objects rendered once per request
    problems = []
    for other in neighbours(namespace):
        if meta(other).get("name") == mine.name or meta(other).get("deletionTimestamp"):
            continue
        try:
            theirs = read_live(other)
        except RenderError:
            continue  # a stored cluster the rules refuse renders nothing of its own
        # Only what this change brings: two clusters that met before it (stored before this
        # rule) can still be scaled, changed and so told apart, never made worse.
        their_needs = owned_names(theirs)
        shared = [f"{kind} {namespace}/{name} ({what})"
                  for (kind, name), what in sorted(needs.items())
                  if (kind, name) in their_needs and (kind, name) not in had]
        if shared:
            problems.append(str(live_problem(
                new, ("metadata", "name"),
                f"KaiwuCluster {mine.name!r} would need {', '.join(shared[:3])}"
                f"{' and more' if len(shared) > 3 else ''}, which KaiwuCluster "
                f"{theirs.name!r} needs too: each would overwrite the other's",
                "rename one of them or move it to another namespace")))
    return Verdict(False, tuple(problems)) if problems else verdict


def _review_scale(request: Mapping[str, Any], stored: Lookup, accepted: Accepted) -> Verdict:
    scale = request.get("object") or {}
    name = str(request.get("name") or meta(scale).get("name") or "")
    namespace = str(request.get("namespace") or "")
    cluster = stored(namespace, name)
    if cluster is None:
        return Verdict(True, warnings=_short([
            f"KaiwuCluster {namespace}/{name} could not be read: the reconciler checks this "
            "scale instead"]))
    replicas = (scale.get("spec") or {}).get("replicas")
    new = copy.deepcopy(cluster)
    new.pop("status", None)
    new.setdefault("spec", {})["replicas"] = replicas
    reference = accepted(cluster) or _own_facts(cluster)
    return _verdict(new, reference)


def _own_facts(old: Obj) -> dict[str, Any] | None:
    """The stored object's facts, when it passes the rules itself (else it was never accepted
    and is no reference)."""
    judged = judge(old, None)
    return transition_facts(judged.defaulted["spec"]) if judged.defaulted else None


def _verdict(new: Obj, reference: Mapping[str, Any] | None) -> Verdict:
    judged = judge(new, reference)
    if judged.defaulted is None:
        return Verdict(False, judged.problems)
    return Verdict(True, warnings=_short(advice(new, judged.defaulted["spec"], reference)))


def advice(new: Obj, spec: Mapping[str, Any], reference: Mapping[str, Any] | None) -> list[str]:
    """Warnings for an accepted change: things the user may not expect, none of them wrong."""
    found = []
    paused = spec.get("paused") or (meta(new).get("annotations") or {}).get(
        PAUSED_ANNOTATION) == "true"
    if paused and reference is not None:
        found.append("the cluster is paused: this change is applied once it is resumed")
    if reference is not None:
        found += semantics.transition_notes(reference, spec)
    return found


def _short(warnings: list[str]) -> tuple[str, ...]:
    return tuple(w if len(w) <= MAX_WARNING else w[:MAX_WARNING - 3] + "..." for w in warnings)


def response(review_obj: Mapping[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answer to `review_obj` (same apiVersion, the request's uid)."""
    request = review_obj.get("request") or {}
    answer: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": verdict.allowed}
    if not verdict.allowed:
        answer["status"] = {"code": DENIED_CODE, "reason": "Invalid",
                            "message": verdict.message}
    if verdict.warnings:
        answer["warnings"] = list(verdict.warnings)
    api_version = review_obj.get("apiVersion")
    return {"apiVersion": api_version if api_version in REVIEW_VERSIONS else REVIEW_VERSIONS[0],
            "kind": "AdmissionReview", "response": answer}
