"""Stories about the controller's pass on the fast tier's fakes (no test world): which steps
run, and what the conditions say. The fake API (tests/support/fake_api.py: server-side apply by
field manager, resourceVersions, records every write) and the caches' view of it stand in for
the API server and the watch caches, so a pass costs milliseconds. The same pass against the
real apiserver: the drift and lifecycle stories.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from reconciler import status as st
from reconciler.controller.admission import ACCEPTED_ANNOTATION
from reconciler.controller.conditions import observed
from reconciler.controller.controller import Controller
from reconciler.controller.objects import ObjectPass
from reconciler.keys import ClusterKey
from reconciler.kube import kinds as k
from reconciler.metrics import Metrics
from reconciler.model import Obj
from reconciler.settings import Settings
from tests.support.controller_world import (
    NAME,
    NOW,
    NS,
    a_pass,
    cluster,
    conditions_of,
    controller_over,
    sts_state,
)
from tests.support.fake_api import FakeApi, FakeView


class Recording:
    """Wraps a step and notes when it runs."""

    def __init__(self, step: Any, ran: list[str]) -> None:
        self.step, self.ran = step, ran
        self.name, self.always, self.ctx = step.name, step.always, step.ctx

    def wanted(self, p: ObjectPass) -> bool:
        return bool(self.step.wanted(p))

    def run(self, p: ObjectPass) -> None:
        self.ran.append(self.name)
        self.step.run(p)


def reconcile(obj: Obj) -> tuple[list[str], FakeApi, dict[str, Any]]:
    """One pass over `obj`: the steps that ran, the API's record, the status written."""
    objects: dict[tuple[str, str, str], Obj] = {("KaiwuCluster", NS, NAME): obj}
    kube = FakeApi(objects, clock=lambda: NOW)
    controller = Controller(kube, FakeView(kube), Settings(watch_namespace=NS,  # type: ignore[arg-type]
                                                              leader_election=False),
                            Metrics(), clock=lambda: NOW)
    ran: list[str] = []
    controller.steps = [Recording(step, ran) for step in controller.steps]
    controller.reconcile(ClusterKey(NS, NAME))
    status: dict[str, Any] = objects[("KaiwuCluster", NS, NAME)].get("status") or {}
    return ran, kube, status


def condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    found = st.condition(status, type_)
    assert found is not None, (type_, status)
    return found


def test_the_steps_run_in_order_and_a_new_cluster_gets_every_object_in_one_pass() -> None:
    ran, kube, status = reconcile(cluster())
    assert ran == ["spec", "lifecycle", "render", "observe", "repair", "prune", "volumes",
                   "report"], \
        "certificates only with TLS; recreate only for immutable changes; failover only " \
        "once initialised"
    applied = sorted(kind for verb, kind, _ in kube.writes if verb == "apply")
    assert applied == ["PodDisruptionBudget", "Service", "Service", "ServiceAccount",
                       "StatefulSet"]
    assert ("status", "KaiwuCluster", NAME) in kube.writes
    assert condition(status, "Ready")["status"] == "False"
    assert status["observedGeneration"] == 1


def test_an_invalid_spec_stops_after_reading_it_and_only_the_report_runs() -> None:
    ran, kube, status = reconcile(cluster(replicas=2))
    assert ran == ["spec", "report"]
    assert [w for w in kube.writes if w[0] != "status" and w[1] != "Event"] == []
    stalled = condition(status, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec"
    assert "multi-replica needs at least 3 nodes" in stalled["message"]
    assert condition(status, "Ready")["reason"] == "InvalidSpec"


def test_a_paused_cluster_is_looked_at_and_reported_but_nothing_is_written() -> None:
    ran, kube, status = reconcile(cluster(paused=True))
    assert not {"repair", "prune", "lifecycle", "volumes"} & set(ran)
    assert "observe" in ran and "report" in ran
    assert [w for w in kube.writes if w[0] != "status" and w[1] != "Event"] == []
    assert condition(status, "Reconciling")["reason"] == "Paused"


def test_the_paused_annotation_pauses_like_spec_paused_without_a_spec_change() -> None:
    obj = cluster()
    obj["metadata"]["annotations"] = {"kaiwu.inspur.com/paused": "true"}
    ran, kube, status = reconcile(obj)
    assert "repair" not in ran and "prune" not in ran and "lifecycle" not in ran
    assert "observe" in ran and "report" in ran
    assert [w for w in kube.writes if w[0] != "status" and w[1] != "Event"] == []
    reconciling = condition(status, "Reconciling")
    assert reconciling["reason"] == "Paused"
    assert "annotation kaiwu.inspur.com/paused=true" in reconciling["message"]
    # Removing the annotation is no new generation: the spec must still count as unapplied.
    assert "observedGeneration" not in status


def test_only_the_value_true_pauses() -> None:
    obj = cluster()
    obj["metadata"]["annotations"] = {"kaiwu.inspur.com/paused": "false"}
    ran, kube, _ = reconcile(obj)
    assert "repair" in ran and any(verb == "apply" for verb, _, _ in kube.writes)


def test_a_tls_cluster_makes_its_certificates_before_anything_is_rendered() -> None:
    ran, kube, _ = reconcile(cluster(tls={"enabled": True}))
    assert ran[:4] == ["spec", "certificates", "lifecycle", "render"]
    created = [name for verb, kind, name in kube.writes if verb == "create" and kind == "Secret"]
    assert sorted(created) == [f"{NAME}-ca", f"{NAME}-node-certs", f"{NAME}-root-client-certs"]


# ---- what the webhook would have refused, stored anyway (issue 11 part 5, issue 15 part 5) ---

def test_replicas_an_ignore_rule_hands_to_an_autoscaler_are_known_to_the_lifecycle_step(
        ) -> None:
    seen: list[bool] = []
    for ignore in ([], [{"kind": "StatefulSet", "pointer": "/spec/replicas"}],
                   [{"kind": "StatefulSet", "pointer": "/spec/template"}]):
        objects = {("KaiwuCluster", NS, NAME): cluster(
            drift={"policy": "enforce", "ignore": ignore})}
        controller = controller_over(FakeApi(objects, clock=lambda: NOW))
        controller.lifecycle.run = lambda p: seen.append(p.replicas_owned_elsewhere)  # type: ignore[method-assign]
        controller.reconcile(ClusterKey(NS, NAME))
    assert seen == [False, True, False]


def test_the_statefulset_remembers_the_spec_it_was_applied_from() -> None:
    _, kube, _ = reconcile(cluster(storage={"size": "20Gi"}))
    sts = kube.objects[("StatefulSet", NS, NAME)]
    memory = json.loads(sts["metadata"]["annotations"][ACCEPTED_ANNOTATION])
    assert memory == {"replicas": 3, "startMode": "multi-replica", "storage": {"size": "20Gi"},
                      "version": "3.2.1", "maxOffset": "500ms"}


def changed_spec(**changes: Any) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        obj["spec"].update(changes)
    return change


def test_a_change_stored_behind_the_webhooks_back_stalls_that_cluster_and_writes_nothing(
        ) -> None:
    # Two clusters applied; then one's start mode is changed while the webhook was down.
    objects: dict[tuple[str, str, str], Obj] = {}
    for name in (NAME, "other"):
        obj = cluster()
        obj["metadata"].update(name=name, uid=f"uid-{name}")
        objects[("KaiwuCluster", NS, name)] = obj
    kube = FakeApi(objects, clock=lambda: NOW)
    controller = Controller(kube, FakeView(kube), Settings(  # type: ignore[arg-type]
        watch_namespace=NS, leader_election=False), Metrics(), clock=lambda: NOW)
    for name in (NAME, "other"):
        controller.reconcile(ClusterKey(NS, name))
    for name, mode in ((NAME, "single-replica"), ("other", "multi-replica")):
        kube.edit(k.KAIWU_CLUSTER, NS, name, changed_spec(startMode=mode, replicas=4))
    kube.writes.clear()

    controller.reconcile(ClusterKey(NS, NAME))
    assert [w for w in kube.writes if w[0] != "status" and w[1] != "Event"] == []
    status = objects[("KaiwuCluster", NS, NAME)]["status"]
    stalled = condition(status, "Stalled")
    assert stalled["reason"] == "InvalidSpec"
    # The webhook's own line, word for word.
    assert stalled["message"] == (
        "the spec cannot be rendered: KaiwuCluster db/dev: spec.startMode: the start mode "
        "cannot change (multi-replica -> single-replica): it is written into every store "
        "(keep the old start mode, or create a new cluster and migrate the data)")
    sts = objects[("StatefulSet", NS, NAME)]
    assert json.loads(sts["metadata"]["annotations"][ACCEPTED_ANNOTATION])["startMode"] == \
        "multi-replica", "the memory is still what exists"

    controller.reconcile(ClusterKey(NS, "other"))
    assert ("apply", "StatefulSet", "other") in kube.writes, "the other cluster is served"
    other = objects[("StatefulSet", NS, "other")]
    assert json.loads(other["metadata"]["annotations"][ACCEPTED_ANNOTATION])["replicas"] == 4

    # Changed back: accepted again, and the pass goes on.
    kube.edit(k.KAIWU_CLUSTER, NS, NAME, lambda obj: obj["spec"].update(startMode="multi-replica"))
    controller.reconcile(ClusterKey(NS, NAME))
    assert condition(objects[("KaiwuCluster", NS, NAME)]["status"], "Stalled")["status"] \
        == "False"


# ---- conditions: pure functions of the pass ------------------------------------------------

def test_ready_needs_every_pod_ready_and_no_kaiwudb_reason_left() -> None:
    p = a_pass()
    p.states.append(sts_state(ready=3))
    assert conditions_of(p)["Ready"].status == "True"
    p.not_ready.append(("NodesJoining", "2/3 KaiwuDB nodes live"))
    ready = conditions_of(p)["Ready"]
    assert (ready.status, ready.reason) == ("False", "NodesJoining")
    short = a_pass()
    short.states.append(sts_state(ready=2))
    assert conditions_of(short)["Ready"].reason == "WaitingForPods"


def test_a_stall_wins_over_every_other_reason_and_the_first_cause_names_it() -> None:
    p = a_pass()
    p.states.append(sts_state(ready=3))
    p.not_ready.append(("NodeLost", "pod dev-1: Kubernetes node n1 is Unknown"))
    p.stalled.append(("CrashLoop", "pod dev-2 keeps crashing"))
    p.stalled.append(("StoreReplaced", "KaiwuDB node 2 lost its store"))
    found = conditions_of(p)
    assert (found["Stalled"].status, found["Stalled"].reason) == ("True", "CrashLoop")
    assert "KaiwuDB node 2 lost its store" in found["Stalled"].message
    assert found["Ready"].reason == "Stalled"


def test_drift_in_warn_mode_is_reported_not_repaired() -> None:
    p = a_pass(drift={"policy": "warn"})
    p.states.append(sts_state(ready=3, verdict="drifted"))
    found = conditions_of(p)
    assert (found["Drifted"].status, found["Drifted"].reason) == ("True", "WarnOnly")
    assert found["Ready"].reason == "Drifted"
    assert found["Reconciling"].reason == "WarnOnly"


def test_observing_a_pass_changes_nothing_in_it() -> None:
    p = a_pass()
    p.states.append(sts_state(ready=3, verdict="rejected"))
    before = (list(p.stalled), list(p.not_ready), list(p.requeue))
    observed(p)
    assert (p.stalled, p.not_ready, p.requeue) == before


def edit_statefulset(kube: FakeApi, manager: str, change: Any) -> None:
    """A hand edit of the StatefulSet's kwbase container by `manager`, who then owns the fields
    it changed."""
    kube.edit(k.STATEFUL_SET, NS, NAME,
              lambda sts: change(sts["spec"]["template"]["spec"]["containers"][0]),
              manager=manager)


def test_an_env_var_added_by_hand_is_removed_with_one_patch_and_no_dry_run() -> None:
    objects: dict[tuple[str, str, str], Obj] = {("KaiwuCluster", NS, NAME): cluster()}
    kube = FakeApi(objects, clock=lambda: NOW)
    controller = Controller(kube, FakeView(kube), Settings(watch_namespace=NS,  # type: ignore[arg-type]
                                                              leader_election=False),
                            Metrics(), clock=lambda: NOW)
    key = ClusterKey(NS, NAME)
    controller.reconcile(key)
    kube.writes.clear()

    # kubectl set env statefulset/dev DEBUG=1
    edit_statefulset(kube, "kubectl-set",
                     lambda c: c.setdefault("env", []).append({"name": "DEBUG", "value": "1"}))
    controller.reconcile(key)
    env = objects[("StatefulSet", NS, NAME)]["spec"]["template"]["spec"]["containers"][0].get(
        "env") or []
    assert "DEBUG" not in [item["name"] for item in env]
    assert [w for w in kube.writes if w[1] == "StatefulSet"] == [
        ("json_patch", "StatefulSet", NAME)]
    assert kube.dry_runs == 0, "nothing of ours changed: no false alarm for the server to settle"

    # kubectl set image: a field we render changed; the server's dry run has the last word.
    edit_statefulset(kube, "kubectl-set", lambda c: c.update(image="kwdb/kwdb:0.0.1"))
    controller.reconcile(key)
    assert kube.dry_runs == 1
    assert objects[("StatefulSet", NS, NAME)]["spec"]["template"]["spec"]["containers"][0][
        "image"] != "kwdb/kwdb:0.0.1"


def test_a_pass_that_changes_nothing_the_spec_step_reads_does_not_check_the_spec_again(
        monkeypatch: Any) -> None:
    from reconciler.controller import admission, render
    judged: list[str] = []
    real_judge = admission.judge

    def counting(obj: Obj, reference: Any) -> Any:
        judged.append(str(obj["metadata"].get("resourceVersion")))
        return real_judge(obj, reference)
    monkeypatch.setattr(render, "judge", counting)
    objects: dict[tuple[str, str, str], Obj] = {("KaiwuCluster", NS, NAME): cluster()}
    kube = FakeApi(objects, clock=lambda: NOW)
    controller = controller_over(kube)
    key = ClusterKey(NS, NAME)
    controller.reconcile(key)  # creates everything and writes the status
    controller.reconcile(key)  # the StatefulSet now remembers the spec: judged against it
    count = len(judged)
    controller.reconcile(key)
    assert len(judged) == count, "nothing changed: the last judgement holds"

    kube.edit(k.KAIWU_CLUSTER, NS, NAME, lambda obj: obj["spec"].update(replicas=1))
    controller.reconcile(key)
    assert len(judged) == count + 1
    status = objects[("KaiwuCluster", NS, NAME)]["status"]
    assert condition(status, "Stalled")["reason"] == "InvalidSpec", \
        "the change is judged: a three-node cluster cannot become one node"

    controller.forget(key)
    controller.reconcile(key)
    assert len(judged) == count + 2
