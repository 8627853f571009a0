"""Stories about what the controller does when what it applied changes behind its back: the
observe, repair, recreate, prune and report steps over several passes, on the fast tier's fake
API and its caches' view (tests/support/controller_world.py's World). A person edits or deletes
an object between passes; the stories check what the next pass writes, which actions and Events
it reports and what the status says. The same passes against the real apiserver:
tests/world_stories/drift/.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from reconciler.controller import admission, render, shared
from reconciler.controller.objects import Result
from reconciler.controller.prune import PruneStep
from reconciler.controller.repair import RepairStep
from reconciler.controller.shared import SHORT_REQUEUE_S, STALE_RECHECK_S
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import Kind
from reconciler.model import Obj, rfc3339
from tests.support.controller_world import NAME, NS, RecordingApi, World, cluster
from tests.support.fake_api import FakeView

PUBLIC = f"{NAME}-public"


def change_port(port: int) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        obj["spec"]["ports"][0]["port"] = port
    return change


def start_a_fight(world: World) -> Result:
    """Someone changes the public Service's port back a second after each repair, as many
    times as make a fight; returns the last pass's result."""
    for _ in range(world.settings.fight_threshold):
        world.now += 1
        world.edit("Service", PUBLIC, change_port(1234))
        result = world.reconcile()
    return result


def add_port(obj: Obj) -> None:
    obj["spec"]["ports"].append({"name": "extra", "port": 9999, "protocol": "TCP",
                                 "targetPort": 9999})


def test_a_new_cluster_reports_what_it_created_in_one_event() -> None:
    world = World()
    world.reconcile()
    created = [e for e in world.kube.events if e[1] == "Created"]
    assert created == [("Normal", "Created", f"created ServiceAccount/{NAME}, Service/{NAME}, "
                        f"Service/{PUBLIC}, StatefulSet/{NAME}, PodDisruptionBudget/{NAME}")]
    assert ("Created", f"Service/{PUBLIC}", "created") in world.actions()


def test_a_new_generation_is_applied_and_announced_with_its_number() -> None:
    world = World()
    world.reconcile()
    world.edit_spec(replicas=5)
    world.reconcile()
    assert ("StatefulSet", NAME) in world.applied()
    assert ("Applied", f"StatefulSet/{NAME}", "applied the spec's new generation") in \
        world.actions()
    applied = [e for e in world.kube.events if e[1] == "Applied"]
    assert applied and applied[0][0] == "Normal"
    assert applied[0][2].startswith(f"applied generation 2 to StatefulSet/{NAME}")
    assert world.status["observedGeneration"] == 2


def test_a_new_generation_touching_every_object_is_one_event_naming_them_all() -> None:
    world = World()
    world.reconcile()
    world.edit_spec(labels={"team": "orders"})
    world.reconcile()
    assert [e for e in world.kube.events if e[1] == "Applied"] == [(
        "Normal", "Applied", f"applied generation 2 to ServiceAccount/{NAME}, Service/{NAME}, "
        f"Service/{PUBLIC}, StatefulSet/{NAME}, PodDisruptionBudget/{NAME}")]


def test_a_port_changed_by_hand_is_put_back_and_the_repair_is_told() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()
    assert world.applied() == [("Service", PUBLIC)]
    # Their port 1234 keeps our port's name, so the server refuses to merge ours back (422):
    # theirs is removed first, and ours comes back after the others (an apply appends the
    # items the live list lacks: structured-merge-diff's typed/merge.go visitListItems).
    assert world.ports(PUBLIC) == [8080, 26257]
    [(action, target, message)] = [a for a in world.actions() if a[0] == "DriftRepaired"]
    assert (action, target) == ("DriftRepaired", f"Service/{PUBLIC}")
    assert message.startswith("repaired: spec.ports[")
    assert ("Normal", "DriftRepaired", f"Service/{PUBLIC}: {message}") in world.kube.events
    assert world.metrics.value("kaiwu_drift_repaired_total", {"kind": "Service"}) == 1
    assert world.metrics.value("kaiwu_drift_detected_total", {"kind": "Service"}) == 1
    drifted = world.condition("Drifted")
    assert (drifted["status"], drifted["reason"]) == ("False", "Repaired")
    # The next pass finds it as rendered: nothing to write, nothing to say.
    world.reconcile()
    assert world.applied() == [] and world.kube.events == []


def test_an_object_deleted_by_hand_is_recreated() -> None:
    world = World()
    world.reconcile()
    world.remove("Service", PUBLIC)
    world.settle()
    world.reconcile()
    assert world.applied() == [("Service", PUBLIC)]
    assert ("DriftRepaired", f"Service/{PUBLIC}", "recreated (it had been deleted)") in \
        world.actions()


@pytest.mark.parametrize("change", [change_port(1234), add_port], ids=["changed", "added"])
def test_the_log_tells_each_drift_with_its_report(caplog: pytest.LogCaptureFixture,
                                                  change: Callable[[Obj], None]) -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change)
    with caplog.at_level("INFO", logger="reconciler.controller.report"):
        world.reconcile()
    [told] = [r.getMessage() for r in caplog.records
              if r.getMessage().startswith("drift detected: ")]
    assert told.startswith(f"drift detected: Service {NS}/{PUBLIC}: drifted")
    assert "spec.ports[" in told


def test_a_port_someone_added_is_removed_without_applying_the_rest() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, add_port)
    world.reconcile()
    assert world.applied() == [], "only what others added differs: no apply"
    assert ("json_patch", "Service", PUBLIC) in world.kube.writes
    ports = [p["port"] for p in world.objects[("Service", NS, PUBLIC)]["spec"]["ports"]]
    assert ports == [26257, 8080]
    assert world.condition("Drifted")["status"] == "False"


def test_a_port_added_while_ours_was_changed_goes_with_the_repair() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.edit("Service", PUBLIC, add_port)
    world.reconcile()
    assert world.applied() == [("Service", PUBLIC)]
    ports = [p["port"] for p in world.objects[("Service", NS, PUBLIC)]["spec"]["ports"]]
    assert 9999 not in ports and 26257 in ports


def test_with_the_warn_policy_drift_is_told_once_and_left_alone() -> None:
    world = World(drift={"policy": "warn"})
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()
    assert world.applied() == []
    [warning] = [e for e in world.kube.events if e[1] == "DriftDetected"]
    assert warning[0] == "Warning"
    assert warning[2].startswith(f"Service/{PUBLIC}: spec.ports[")
    assert warning[2].endswith("(drift policy is warn)")
    drifted = world.condition("Drifted")
    assert (drifted["status"], drifted["reason"]) == ("True", "WarnOnly")
    world.reconcile()
    assert [e for e in world.kube.events if e[1] == "DriftDetected"] == [], "told once"
    assert world.metrics.value("kaiwu_drift_detected_total", {"kind": "Service"}) == 1
    # Deleted too: told again, as missing, and still not recreated.
    world.remove("Service", PUBLIC)
    world.settle()
    world.reconcile()
    assert world.applied() == []
    assert ("Warning", "DriftDetected", f"Service/{PUBLIC}: missing (drift policy is warn)") \
        in world.kube.events


def test_a_paused_cluster_tells_its_drift_and_why_it_is_not_repaired() -> None:
    world = World()
    world.reconcile()
    world.edit_spec(paused=True)
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()
    assert world.applied() == []
    [warning] = [e for e in world.kube.events if e[1] == "DriftDetected"]
    assert warning[2].startswith(f"Service/{PUBLIC}: spec.ports[")
    assert warning[2].endswith("(the cluster is paused)")


def test_with_the_off_policy_drift_is_neither_repaired_nor_told() -> None:
    world = World(drift={"policy": "off"})
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()
    assert world.applied() == []
    assert [e for e in world.kube.events if e[1] == "DriftDetected"] == []
    assert world.metrics.value("kaiwu_drift_detected_total", {"kind": "Service"}) == 0
    assert world.kube.dry_runs == 0, "nothing will be done about it: no dry run spent"
    # A new generation is applied all the same, drift and all.
    world.edit_spec(replicas=4)
    world.reconcile()
    assert ("Service", PUBLIC) in world.applied()


def test_an_object_someone_keeps_changing_back_is_a_fight_and_repairs_back_off() -> None:
    world = World()
    world.reconcile()
    threshold = world.settings.fight_threshold
    result = start_a_fight(world)
    fight = [e for e in world.kube.events if e[1] == "DriftFight" and "keeps changing" in e[2]]
    assert len(fight) == 1 and fight[0][0] == "Warning"
    assert fight[0][2].startswith(f"Service/{PUBLIC} keeps changing back ({threshold} repairs "
                                  f"within {world.settings.fight_window_s:g}s): next repair "
                                  "not before ")
    wait = float(fight[0][2].rsplit(" ", 1)[1].removesuffix("s"))
    assert 0 < wait <= world.settings.drift_backoff_max_s
    assert result.requeue_after_s is not None and result.requeue_after_s <= wait
    stalled = world.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "DriftFight")
    assert f"Service/{PUBLIC} keeps being changed back after each repair" in stalled["message"]
    assert stalled["message"].endswith(
        "repairs back off up to 300s. Stop whatever changes it (its managedFields name the "
        "manager), or add a spec.drift.ignore rule")
    # Changed again at once: left drifted while the back-off lasts, and said so.
    world.now += 0.25
    world.edit("Service", PUBLIC, change_port(4321))
    result = world.reconcile()
    assert world.applied() == []
    assert result.requeue_after_s is not None and 0.5 < result.requeue_after_s <= wait - 0.25
    assert any(e[1] == "DriftDetected" and "(repairs are backing off for " in e[2]
               for e in world.kube.events)


def test_an_apply_the_api_server_refuses_stalls_the_cluster_with_its_words() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.kube.refuse[("Service", PUBLIC)] = ApiError(400, "BadRequest", "spec.ports: forbidden")
    world.reconcile()
    stalled = world.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ApplyRejected")
    assert stalled["message"] == (f"Service/{PUBLIC}: the API server refused it: "
                                  "spec.ports: forbidden")
    assert world.metrics.value("kaiwu_errors_total", {"stage": "apply"}) == 0, \
        "the dry run already said no: no apply was tried"


def test_a_port_renumbered_by_hand_that_keeps_its_name_is_removed_before_the_apply(
        caplog: pytest.LogCaptureFixture) -> None:
    # The server refuses to merge our port "sql" into a list holding another port of that
    # name (422), so the repair removes theirs first.
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    real_apply = world.kube.apply

    def apply(obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        stored = world.objects[("Service", NS, PUBLIC)]
        if obj["metadata"]["name"] == PUBLIC and any(
                p["port"] == 1234 for p in stored["spec"]["ports"]):
            raise ApiError(422, "Invalid", "spec.ports[0].name: Duplicate value: \"sql\"")
        return real_apply(obj, dry_run=dry_run, force=force)
    world.kube.apply = apply  # type: ignore[method-assign]
    with caplog.at_level("INFO", logger="reconciler.controller.report"):
        world.reconcile()
    assert any(r.getMessage().startswith(f"drift detected: Service {NS}/{PUBLIC}: drifted")
               for r in caplog.records)
    verbs = [(verb, kind) for verb, kind, name in world.kube.writes if name == PUBLIC]
    assert verbs == [("json_patch", "Service"), ("apply", "Service")]
    assert world.ports(PUBLIC) == [8080, 26257]
    assert world.condition("Stalled")["status"] == "False"
    assert world.condition("Drifted")["reason"] == "Repaired"


def test_a_container_port_renumbered_by_hand_is_removed_before_the_apply_not_called_immutable(
        ) -> None:
    """Kubernetes 1.36 refuses a StatefulSet whose container holds two ports named "http"
    (what merging ours back would make); 1.20 did not check. It is the same clash as a
    Service's: not an immutable field, and no orphaning recreate is asked for."""
    world = World()
    world.reconcile()

    def renumber(obj: Obj) -> None:
        for port in obj["spec"]["template"]["spec"]["containers"][0]["ports"]:
            if port["name"] == "http":
                port["containerPort"] = 8081
    world.edit("StatefulSet", NAME, renumber)
    real_apply = world.kube.apply

    def apply(obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        stored = world.objects[("StatefulSet", NS, NAME)]
        if obj["kind"] == "StatefulSet" and any(
                p["containerPort"] == 8081
                for p in stored["spec"]["template"]["spec"]["containers"][0]["ports"]):
            raise ApiError(422, "Invalid", 'StatefulSet.apps "dev" is invalid: spec.template.'
                           'spec.containers[0].ports[2].name: Duplicate value: "http"')
        return real_apply(obj, dry_run=dry_run, force=force)
    world.kube.apply = apply  # type: ignore[method-assign]
    world.reconcile()
    verbs = [(verb, kind) for verb, kind, name in world.kube.writes if name == NAME
             and kind == "StatefulSet"]
    assert verbs[-2:] == [("json_patch", "StatefulSet"), ("apply", "StatefulSet")]
    ports = sorted(p["containerPort"] for p in world.objects[("StatefulSet", NS, NAME)][
        "spec"]["template"]["spec"]["containers"][0]["ports"])
    assert ports == [8080, 26257, 27257]
    assert world.condition("Stalled")["status"] == "False"
    assert world.condition("Drifted")["reason"] == "Repaired"


def test_an_apply_that_fails_after_its_dry_run_passed_is_counted_and_reported() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_target_port)
    refusal = ApiError(403, "Forbidden", "not allowed")
    real_apply = world.kube.apply

    def apply(obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        if not dry_run and obj["metadata"]["name"] == PUBLIC:
            raise refusal
        return real_apply(obj, dry_run=dry_run, force=force)
    world.kube.apply = apply  # type: ignore[method-assign]
    world.reconcile()
    assert world.metrics.value("kaiwu_errors_total", {"stage": "apply"}) == 1
    assert world.condition("Stalled")["message"] == (
        f"Service/{PUBLIC}: the API server refused it: not allowed")
    # A lost race (409) is no refusal: looked at again shortly.
    refusal.status = 409
    world.edit("Service", PUBLIC, lambda svc: svc["spec"]["ports"][0].update(targetPort=1235))
    result = world.reconcile()
    assert result.requeue_after_s == SHORT_REQUEUE_S
    assert world.condition("Stalled")["status"] == "False"
    [told] = [e for e in world.kube.events if e[1] == "DriftDetected"]
    assert told[2].endswith("(not repaired)")


def test_a_changed_volume_claim_template_recreates_the_statefulset_keeping_pods_and_claims(
        ) -> None:
    world = World()
    world.reconcile()

    def other_claims(sts: Obj) -> None:
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = \
            "1Gi"
    world.edit("StatefulSet", NAME, other_claims)
    result = world.reconcile()
    assert world.kube.deletes == [("StatefulSet", NAME, "Orphan")]
    assert result.requeue_after_s == SHORT_REQUEUE_S
    [recreating] = [a for a in world.actions() if a[0] == "Recreating"]
    assert recreating[1] == f"StatefulSet/{NAME}"
    assert recreating[2].startswith("/spec/volumeClaimTemplates")
    assert "cannot change in place: deleted with its pods and claims orphaned" in recreating[2]
    reconciling = world.condition("Reconciling")
    assert (reconciling["status"], reconciling["reason"]) == ("True", "Recreating")
    assert reconciling["message"].startswith(f"recreating StatefulSet/{NAME}: "
                                             "/spec/volumeClaimTemplates")
    # The next pass creates it again, as rendered.
    world.reconcile()
    assert ("StatefulSet", NAME) in world.applied()


def test_a_new_generation_that_recreates_the_statefulset_is_observed_once_it_is_back() -> None:
    world = World()
    world.reconcile()
    world.edit_spec(storage={"size": "20Gi"})
    world.reconcile()
    assert world.kube.deletes == [("StatefulSet", NAME, "Orphan")]
    assert world.status["observedGeneration"] == 1, "not yet: the StatefulSet is not back"
    assert world.condition("Ready")["reason"] == "Applying"
    world.settle()
    world.reconcile()
    assert world.status["observedGeneration"] == 2


def test_a_statefulset_still_being_deleted_is_waited_for() -> None:
    world = World()
    world.reconcile()
    world.delete_held("StatefulSet", NAME)
    result = world.reconcile()
    assert ("StatefulSet", NAME) not in world.applied()
    assert result.requeue_after_s == SHORT_REQUEUE_S
    reconciling = world.condition("Reconciling")
    assert (reconciling["status"], reconciling["reason"]) == ("True", "Recreating")
    assert reconciling["message"] == (f"waiting for StatefulSet/{NAME} to be deleted (pods and "
                                      "claims are kept) to recreate it")
    assert world.condition("Ready")["reason"] == "Applying"


def test_objects_after_a_statefulset_being_deleted_are_still_repaired_in_that_pass() -> None:
    world = World()
    world.reconcile()
    world.delete_held("StatefulSet", NAME)
    world.remove("PodDisruptionBudget", NAME)  # listed after the StatefulSet
    world.settle()
    world.reconcile()
    assert world.applied() == [("PodDisruptionBudget", NAME)]


def test_a_new_selector_is_not_applied_and_the_stall_says_how_to_move_the_pods() -> None:
    world = World()
    world.reconcile()

    def old_selector(sts: Obj) -> None:
        sts["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] = "old"
    world.edit("StatefulSet", NAME, old_selector)
    world.reconcile()
    assert world.kube.deletes == [] and ("StatefulSet", NAME) not in world.applied()
    stalled = world.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ImmutableField")
    assert stalled["message"] == (
        f"StatefulSet/{NAME}: /spec/selector/matchLabels/app.kubernetes.io~1instance cannot be "
        "changed in place: the running pods would not match the new selector. To apply it, "
        f"delete the StatefulSet keeping its pods (kubectl delete statefulset {NAME} "
        "--cascade=orphan), give them the new labels (kubectl label pods -l "
        "app.kubernetes.io/instance=old,app.kubernetes.io/name=kaiwudb "
        f"app.kubernetes.io/instance={NAME}); the reconciler then recreates it and the new one "
        "adopts them")


def test_a_statefulset_the_server_refuses_to_change_is_stalled_with_its_words() -> None:
    world = World()
    world.reconcile()
    world.edit("StatefulSet", NAME, lambda sts: sts["spec"].update(replicas=7))
    world.kube.refuse[("StatefulSet", NAME)] = ApiError(
        422, "Invalid", "spec: Forbidden: updates to statefulset spec for fields other than")
    world.reconcile()
    stalled = world.condition("Stalled")
    assert stalled["reason"] == "ImmutableField"
    assert stalled["message"] == (
        f"StatefulSet/{NAME}: an immutable field cannot be changed in place: spec: Forbidden: "
        "updates to statefulset spec for fields other than. To apply it, delete the "
        f"StatefulSet keeping its pods (kubectl delete statefulset {NAME} --cascade=orphan); "
        "the reconciler recreates it and the new one adopts them")


# ---- prune ----------------------------------------------------------------------------------

def leftover(world: World, name: str = f"{NAME}-old", instance: str = NAME,
             managed_by: str = "kaiwu-operator") -> str:
    """A Service a former spec rendered: stored, and listed in status.inventory."""
    ref = f"v1/Service/{NS}/{name}"
    world.kube.put({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                     "resourceVersion": "50", "labels": {
                         "app.kubernetes.io/managed-by": managed_by,
                         "app.kubernetes.io/instance": instance}},
        "spec": {"ports": [{"port": 1}]}})
    world.edit_status(lambda obj: obj["status"]["inventory"].append(ref))
    return ref


def test_an_object_the_spec_no_longer_renders_is_deleted_and_leaves_the_inventory() -> None:
    world = World()
    world.reconcile()
    ref = leftover(world)
    world.reconcile()
    assert world.kube.deletes == [("Service", f"{NAME}-old", "Background")]
    assert ("Pruned", f"Service/{NAME}-old", "deleted: the spec no longer renders it") in \
        world.actions()
    assert ref not in world.status["inventory"]
    assert f"v1/Service/{NS}/{PUBLIC}" in world.status["inventory"]


def test_an_object_someone_took_over_is_not_pruned_and_the_next_one_still_is() -> None:
    for labels in ({"managed-by": "helm"}, {"instance": "another"}):
        world = World()
        world.reconcile()
        leftover(world, name="a-taken", managed_by=labels.get("managed-by", "kaiwu-operator"),
                 instance=labels.get("instance", NAME))
        leftover(world, name="b-ours")
        world.reconcile()
        assert world.kube.deletes == [("Service", "b-ours", "Background")], labels


def test_with_the_warn_policy_a_leftover_is_kept_listed_not_deleted() -> None:
    world = World(drift={"policy": "warn"})
    world.reconcile()
    ref = leftover(world)
    world.reconcile()
    assert world.kube.deletes == []
    assert ref in world.status["inventory"]


def test_a_leftover_already_gone_or_unreadable_in_the_inventory_is_dropped() -> None:
    world = World()
    world.reconcile()
    # Listed first (status.inventory is sorted; these sort before what the spec renders).
    world.edit_status(lambda obj: obj["status"].update(inventory=[
        "a reference nobody can read", f"example.com/v9/Thing/{NS}/x",
        f"v1/Secret/{NS}/{NAME}-ca", *obj["status"]["inventory"],
        f"v1/Service/{NS}/{NAME}-gone"]))
    ref = leftover(world, name=f"{NAME}-old")
    world.reconcile()
    assert world.kube.deletes == [("Service", f"{NAME}-old", "Background")]
    assert ref not in world.status["inventory"]
    assert all(NAME + "-gone" not in ref and "Thing" not in ref and "reference" not in ref
               for ref in world.status["inventory"])


def test_a_pass_before_the_cache_shows_our_delete_does_not_delete_again() -> None:
    world = World()
    world.reconcile()
    ref = leftover(world)
    shown = copy.deepcopy(world.objects[("Service", NS, f"{NAME}-old")])
    world.reconcile()
    world.objects[("Service", NS, f"{NAME}-old")] = shown
    world.edit_status(lambda obj: obj["status"]["inventory"].append(ref))
    result = world.reconcile()
    assert world.kube.deletes == []
    assert ref in world.status["inventory"], "still listed while our delete is on its way"
    assert result.requeue_after_s == STALE_RECHECK_S


def test_a_leftover_whose_delete_lost_a_race_is_kept_and_looked_at_again() -> None:
    world = World()
    world.reconcile()
    ref = leftover(world, name="a-replaced")
    leftover(world, name="b-ours")
    real_delete = world.kube.delete

    def delete(kind: Kind, namespace: str | None, name: str, **options: Any) -> bool:
        if name == "a-replaced":  # a successor of that name: the uid precondition fails
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
        return real_delete(kind, namespace, name, **options)
    world.kube.delete = delete  # type: ignore[method-assign]
    result = world.reconcile()
    assert ref in world.status["inventory"]
    assert result.requeue_after_s == SHORT_REQUEUE_S
    assert world.kube.deletes == [("Service", "b-ours", "Background")]
    world.kube.delete = real_delete  # type: ignore[method-assign]
    world.reconcile()
    assert world.kube.deletes == [("Service", "a-replaced", "Background")]


def test_the_repair_and_prune_steps_rest_while_the_cluster_is_paused() -> None:
    world = World()
    world.reconcile()
    world.edit_spec(paused=True)
    leftover(world)
    world.reconcile()
    assert world.kube.deletes == []
    steps = {step.name: step for step in world.controller.steps}
    assert isinstance(steps["repair"], RepairStep) and isinstance(steps["prune"], PruneStep)


def test_a_pass_right_after_our_own_write_waits_for_the_cache_to_show_it() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    shown = copy.deepcopy(world.objects[("Service", NS, PUBLIC)])
    world.reconcile()
    # The watch has not delivered our repair yet: the cache still shows the edited copy.
    world.objects[("Service", NS, PUBLIC)] = shown
    result = world.reconcile()
    assert world.applied() == [], "not repaired twice"
    assert result.requeue_after_s == STALE_RECHECK_S



def test_an_object_deleted_before_the_cache_showed_our_create_is_made_again_at_once() -> None:
    # The cache's "absent" right after our create is either our create on its way or someone's
    # delete of it: the API server says which. Gone there too: made again in this pass, not
    # after the seconds a create may take to show (STALE_GRACE_S).
    world = World()
    world.reconcile()
    world.remove("Service", PUBLIC)
    world.reconcile()
    assert world.applied() == [("Service", PUBLIC)]
    assert ("DriftRepaired", f"Service/{PUBLIC}", "recreated (it had been deleted)") in \
        world.actions()


def test_a_create_the_cache_does_not_show_yet_is_waited_for_not_made_twice() -> None:
    world = World()
    world.reconcile()
    made = world.objects.pop(("Service", NS, PUBLIC))
    # The API server has it; the watch has not delivered it to the cache yet.
    asked: list[str] = []

    def get(kind: Kind, namespace: str | None, name: str) -> Obj | None:
        asked.append(f"{kind.kind}/{name}")
        return copy.deepcopy(made) if (kind.kind, name) == ("Service", PUBLIC) else None
    world.kube.get = get  # type: ignore[method-assign]
    result = world.reconcile()
    assert world.applied() == [], "not created twice"
    assert result.requeue_after_s == STALE_RECHECK_S
    assert [read for read in asked if read.startswith("Service/")] == [f"Service/{PUBLIC}"], \
        "one read, of the object in doubt only"


def test_an_object_in_doubt_the_api_server_does_not_answer_about_is_waited_for() -> None:
    world = World()
    world.reconcile()
    del world.objects[("Service", NS, PUBLIC)]  # our create, not shown by the cache yet

    def get(kind: Kind, namespace: str | None, name: str) -> Obj | None:
        if (kind.kind, name) == ("Service", PUBLIC):
            raise ApiError(500, "InternalError", "etcd leader changed")
        return None
    world.kube.get = get  # type: ignore[method-assign]
    result = world.reconcile()
    assert world.applied() == [] and result.requeue_after_s == STALE_RECHECK_S, \
        "the pass goes on and looks again, as before the read was asked"


def test_a_create_the_cache_lags_behind_is_asked_about_every_half_second_at_most(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    world.reconcile()
    made = world.objects.pop(("Service", NS, PUBLIC))
    asked: list[str] = []

    def get(kind: Kind, namespace: str | None, name: str) -> Obj | None:
        asked.append(name)
        return copy.deepcopy(made) if (kind.kind, name) == ("Service", PUBLIC) else None
    world.kube.get = get  # type: ignore[method-assign]
    clock = [time.monotonic()]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    for _ in range(5):  # re-checks STALE_RECHECK_S apart
        world.reconcile()
        clock[0] += STALE_RECHECK_S
    assert asked.count(PUBLIC) == 1
    clock[0] += shared.ASK_AGAIN_S
    world.reconcile()
    assert asked.count(PUBLIC) == 2
    assert world.applied() == [], "never created twice"


def test_an_object_deleted_before_our_status_listed_it_is_drift_not_a_first_create() -> None:
    # Made by the first pass, deleted before that pass's status (its inventory) reached the
    # cache: under the warn policy it is told, not made again, as any deleted object is.
    world = World(drift={"policy": "warn"})
    world.reconcile()
    world.status.pop("inventory")
    world.remove("Service", PUBLIC)
    world.reconcile()
    assert world.applied() == []
    assert ("Warning", "DriftDetected", f"Service/{PUBLIC}: missing (drift policy is warn)") \
        in world.kube.events

# ---- the pass as a whole (reconciler.controller.controller, reconciler.controller.render) ---

def series(world: World) -> str:
    return world.metrics.exposition().decode()


def test_a_pass_that_runs_to_its_end_resets_the_clusters_success_clock() -> None:
    world = World()
    world.now = time.time() - 30.0
    world.reconcile()
    since = world.metrics.value("kaiwu_cluster_seconds_since_last_success",
                                {"namespace": NS, "cluster": NAME})
    assert 30 <= since < 90, "counted from the pass's own time"


def test_a_deleted_cluster_is_forgotten_with_its_series() -> None:
    world = World()
    world.reconcile()
    assert f'cluster="{NAME}"' in series(world)
    world.delete_held("KaiwuCluster", NAME)
    assert world.reconcile() == Result()
    assert world.kube.writes == [], "its objects go with it (ownerReferences)"
    assert f'cluster="{NAME}"' not in series(world)
    # Gone from the cache altogether: the same.
    world = World()
    world.reconcile()
    world.remove("KaiwuCluster", NAME)
    assert world.reconcile() == Result()
    assert f'cluster="{NAME}"' not in series(world)


def test_a_cluster_deleted_and_made_again_starts_with_a_clean_memory() -> None:
    world = World(drift={"policy": "warn"})
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()
    assert any(e[1] == "DriftDetected" for e in world.kube.events)
    world.delete_held("KaiwuCluster", NAME)
    world.reconcile()
    world.release("KaiwuCluster", NAME)  # gone, and its objects with it
    world.kube.create(cluster(drift={"policy": "warn"}))  # made again
    world.reconcile()
    world.settle()
    world.edit("Service", PUBLIC, change_port(1234))  # the same drift as before
    world.reconcile()
    assert world.metrics.value("kaiwu_drift_detected_total", {"kind": "Service"}) == 2, \
        "told again"


def test_the_pass_asks_to_come_back_at_the_soonest_time_a_step_asked_for() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    shown = copy.deepcopy(world.objects[("Service", NS, PUBLIC)])
    world.reconcile()
    world.objects[("Service", NS, PUBLIC)] = shown
    world.delete_held("StatefulSet", NAME)
    result = world.reconcile()
    assert result.requeue_after_s == min(STALE_RECHECK_S, SHORT_REQUEUE_S)


class ServingView(FakeView):
    """Caches of an API server that serves every optional kind too."""

    def served(self, kind: Kind) -> bool:
        return True


class Versioned(RecordingApi):
    """An API server of a given version, counting how often it is asked for it."""

    def __init__(self, objects: dict[tuple[str, str, str], Obj], version: str) -> None:
        super().__init__(objects)
        self.served_version = version
        self.asked = 0

    def server_version(self) -> str:
        self.asked += 1
        return self.served_version


def test_objects_are_rendered_for_the_servers_version_read_once_per_resync_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    kube = Versioned(world.objects, "v1.25.3")
    world.over(kube, ServingView(kube))
    world.reconcile()
    world.reconcile()
    assert world.objects[("PodDisruptionBudget", NS, NAME)]["apiVersion"] == "policy/v1"
    assert kube.asked == 1
    later = time.monotonic() + world.settings.resync_period_s + 1
    monkeypatch.setattr(render.time, "monotonic", lambda: later)  # type: ignore[attr-defined]
    world.reconcile()
    assert kube.asked == 2


def test_an_invalid_spec_is_counted_as_a_render_error() -> None:
    world = World(replicas=2)
    world.reconcile()
    assert world.metrics.value("kaiwu_errors_total", {"stage": "render"}) == 1
    assert world.condition("Stalled")["message"].startswith(
        "the spec cannot be rendered: KaiwuCluster db/dev: spec.replicas: multi-replica needs "
        "at least 3 nodes, got 2")
    assert "observedGeneration" in world.status
    # Every problem is told, one after the other.
    both = World(replicas=2, extraArgs=["--join=x"])
    both.reconcile()
    assert both.condition("Stalled")["message"].count("; KaiwuCluster db/dev: spec.") == 1


class Defaulting(RecordingApi):
    """An API server that fills in a default of its own on every Service it stores (as
    sessionAffinity is filled in), and answers dry runs with it too."""

    def admit(self, obj: Obj, *, dry_run: bool) -> None:
        if obj["kind"] == "Service":
            obj["spec"].setdefault("trafficDefault", "Cluster")


def with_kube(world: World, kube: RecordingApi) -> World:
    world.over(kube)
    return world


def test_removing_what_someone_added_keeps_what_the_server_filled_in() -> None:
    world = World()
    with_kube(world, Defaulting(world.objects))
    world.reconcile()
    world.edit("Service", PUBLIC, add_port)
    world.reconcile()
    spec = world.objects[("Service", NS, PUBLIC)]["spec"]
    assert [p["port"] for p in spec["ports"]] == [26257, 8080]
    assert spec["trafficDefault"] == "Cluster", "the server's default is no addition"


def test_an_object_changed_between_our_look_and_our_patch_is_looked_at_again() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, add_port)

    def json_patch(kind: Kind, namespace: str | None, name: str,
                   operations: list[dict[str, Any]]) -> Obj:
        raise ApiError(422, "Invalid", "the test of /spec/ports/2 failed")
    world.kube.json_patch = json_patch  # type: ignore[method-assign]
    result = world.reconcile()
    assert result.requeue_after_s == SHORT_REQUEUE_S
    assert world.condition("Stalled")["status"] == "False"
    [told] = [e for e in world.kube.events if e[1] == "DriftDetected"]
    assert told[2].endswith("(not repaired)"), "a race, not a refusal"



def test_a_changed_service_name_recreates_the_statefulset_too() -> None:
    world = World()
    world.reconcile()
    world.edit("StatefulSet", NAME, lambda sts: sts["spec"].update(serviceName="elsewhere"))
    world.reconcile()
    assert world.kube.deletes == [("StatefulSet", NAME, "Orphan")]
    assert world.kube.dry_runs == 0, "the offline comparison already knows: no dry run"


def test_with_the_warn_policy_an_immutable_change_is_left_alone() -> None:
    world = World(drift={"policy": "warn"})
    world.reconcile()
    world.edit("StatefulSet", NAME, lambda sts: sts["spec"].update(serviceName="elsewhere"))
    world.reconcile()
    assert world.kube.deletes == []


def test_an_optional_kind_this_kubernetes_does_not_serve_is_skipped_and_said() -> None:
    world = World()
    with_kube(world, Versioned(world.objects, "v1.25.3"))
    world.reconcile()
    assert ("PodDisruptionBudget", NAME) not in world.applied()
    assert world.condition("Ready")["message"].endswith(
        f"(not served by this Kubernetes, skipped: PodDisruptionBudget/{NAME}; install the "
        "CRDs that serve them)")
    assert world.condition("Drifted")["status"] == "False"


def test_an_object_being_deleted_by_someone_is_left_to_go_and_made_again_after() -> None:
    world = World()
    world.reconcile()
    world.delete_held("Service", PUBLIC)
    world.reconcile()
    assert world.applied() == [] and world.kube.dry_runs == 0
    world.release("Service", PUBLIC)
    world.settle()
    world.reconcile()
    assert world.applied() == [("Service", PUBLIC)]


class Unknowing(FakeView):
    """Caches that do not know yet whether an optional kind is served."""

    def served(self, kind: Kind) -> bool | None:  # type: ignore[override]
        return None if not kind.always_served else True


class Listing(RecordingApi):
    """Records in which namespace each kind was listed."""

    def __init__(self, objects: dict[tuple[str, str, str], Obj]) -> None:
        super().__init__(objects)
        self.lists: list[tuple[str, str | None]] = []

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        self.lists.append((kind.kind, namespace))
        return [], "1"


def test_a_leftover_of_an_optional_kind_is_looked_for_in_the_clusters_namespace() -> None:
    # A namespaced install may list nowhere else.
    world = World()
    kube = Listing(world.objects)
    world.over(kube, Unknowing(kube))
    world.reconcile()
    ref = f"monitoring.coreos.com/v1/ServiceMonitor/{NS}/{NAME}-old"
    world.kube.put({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": f"{NAME}-old", "namespace": NS, "uid": "sm", "labels": {
            "app.kubernetes.io/managed-by": "kaiwu-operator",
            "app.kubernetes.io/instance": NAME}}})
    world.edit_status(lambda obj: obj["status"]["inventory"].append(ref))
    world.reconcile()
    assert ("ServiceMonitor", NS) in kube.lists and ("ServiceMonitor", None) not in kube.lists
    assert world.kube.deletes == [("ServiceMonitor", f"{NAME}-old", "Background")]


# ---- what observe decides (reconciler.controller.observe) ------------------------------------

def test_an_ignore_rule_covers_the_object_it_names_and_no_other() -> None:
    world = World(drift={"ignore": [{"kind": "Service", "name": PUBLIC, "pointer": "/spec/ports"},
                                    {"kind": "Service", "name": NAME,
                                     "pointer": "/spec/replicas"}]})
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.edit("Service", NAME, change_port(1234))
    world.edit("StatefulSet", NAME, lambda sts: sts["spec"].update(replicas=7))
    world.reconcile()
    assert sorted(world.applied()) == [("Service", NAME), ("StatefulSet", NAME)], \
        "the rule of one Service covers neither the other nor a StatefulSet of its name"
    assert world.objects[("Service", NS, PUBLIC)]["spec"]["ports"][0]["port"] == 1234


def test_a_service_the_server_refuses_to_change_is_rejected_not_recreated() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, lambda svc: svc["spec"].update(type="NodePort"))
    world.kube.refuse[("Service", PUBLIC)] = ApiError(422, "Invalid", "spec.type: Invalid value")
    world.reconcile()
    stalled = world.condition("Stalled")
    assert (stalled["reason"], stalled["message"]) == (
        "ApplyRejected", f"Service/{PUBLIC}: the API server refused it: spec.type: Invalid value")
    assert world.kube.deletes == []


class Platform(RecordingApi):
    """An API server whose platform's mutating webhook makes every Service a NodePort: the
    dry run says so too."""

    def admit(self, obj: Obj, *, dry_run: bool) -> None:
        if obj["kind"] == "Service" and obj["spec"].get("type") == "ClusterIP":
            obj["spec"]["type"] = "NodePort"


def test_a_difference_the_server_settles_is_no_drift_and_a_later_one_is_told_again() -> None:
    # Offline the Service looks drifted (we render ClusterIP); the server's dry run says that
    # is what applying it gives.
    world = World(drift={"policy": "warn"})
    with_kube(world, Platform(world.objects))
    world.reconcile()
    world.reconcile()
    assert world.kube.events == [] and world.condition("Drifted")["status"] == "False"
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()
    assert [e[1] for e in world.kube.events] == ["DriftDetected"]
    world.edit("Service", PUBLIC, change_port(26257))  # put back by hand
    world.reconcile()
    assert world.condition("Drifted")["status"] == "False"
    world.edit("Service", PUBLIC, change_port(1234))  # the same drift again: news again
    world.reconcile()
    assert world.metrics.value("kaiwu_drift_detected_total", {"kind": "Service"}) == 2


def change_target_port(obj: Obj) -> None:
    obj["spec"]["ports"][0]["targetPort"] = 9999


class Undoing(RecordingApi):
    """An API server where something sets the public Service's target port back to 9999 as
    each real write is stored (a mutating webhook that skips dry runs): its dry runs promise the
    repair."""

    def admit(self, obj: Obj, *, dry_run: bool) -> None:
        if not dry_run and obj["metadata"]["name"] == PUBLIC:
            change_target_port(obj)


def test_a_repair_the_api_server_undoes_as_it_stores_it_is_not_told_as_repaired(
        caplog: pytest.LogCaptureFixture) -> None:
    world = World()
    world.reconcile()
    with_kube(world, Undoing(world.objects))
    world.edit("Service", PUBLIC, change_target_port)
    with caplog.at_level("WARNING", logger="reconciler.controller.repair"):
        world.reconcile()
    assert [r.getMessage() for r in caplog.records] == [
        f"object still differs after repair: Service {NS}/{PUBLIC}: drifted (1 change)\n"
        '  spec.ports[26257/TCP].targetPort: "sql" -> 9999 [changed] (by kaiwu-reconciler)']
    assert world.applied() == [("Service", PUBLIC)], "the repair was written"
    assert not [a for a in world.actions() if a[0] == "DriftRepaired"]
    assert not [e for e in world.kube.events if e[1] == "DriftRepaired"]
    assert world.metrics.value("kaiwu_drift_repaired_total", {"kind": "Service"}) == 0
    [told] = [e for e in world.kube.events if e[1] == "DriftDetected"]
    assert told[0] == "Warning" and told[2].startswith(f"Service/{PUBLIC}: spec.ports[")
    assert told[2].endswith("(the API server changed it back as it stored the repair)")
    drifted = world.condition("Drifted")
    assert (drifted["status"], drifted["reason"]) == ("True", "Pending")
    assert world.condition("Ready")["reason"] == "Drifted"
    # Each pass writes again until the fight's back-off stops it: no write on every pass.
    for _ in range(world.settings.fight_threshold - 1):
        world.now += 1
        world.reconcile()
    assert any(e[1] == "DriftFight" for e in world.kube.events)
    stalled = world.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "DriftFight")
    assert stalled["message"].startswith(
        f"Service/{PUBLIC} keeps being changed back after each repair (undone by the API "
        'server as it was stored: spec.ports[26257/TCP].targetPort: "sql" -> 9999 [changed] '
        "(by kaiwu-reconciler))")
    world.now += 0.25
    world.reconcile()
    assert world.applied() == [], "backing off"


def test_a_deleted_cluster_leaves_no_comparison_behind() -> None:
    world = World(drift={"policy": "warn"})
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()
    assert len(world.controller.memory.comparisons) > 0
    world.remove("KaiwuCluster", NAME)
    world.reconcile()
    assert len(world.controller.memory.comparisons) == 0


# ---- what the report step writes and says (reconciler.controller.report) ----------------------

def test_a_fight_ends_after_a_quiet_window_and_the_stall_with_it() -> None:
    world = World()
    world.reconcile()
    start_a_fight(world)
    last_repair = world.now
    assert world.condition("Stalled")["reason"] == "DriftFight"
    world.now += 1  # nobody changes it any more
    result = world.reconcile()
    assert world.condition("Stalled")["reason"] == "DriftFight", "not over yet"
    quiet = last_repair + world.settings.fight_window_s - world.now
    assert result.requeue_after_s == quiet, "looked at again when the fight would be over"
    world.now += quiet
    world.reconcile()
    stalled = world.condition("Stalled")
    assert stalled["status"] == "False"
    assert ("Normal", "Progressing", "no longer stalled") in world.kube.events
    assert stalled["lastTransitionTime"] == rfc3339(world.now)


def test_the_same_drift_told_during_a_back_off_counts_again_after_its_repair() -> None:
    world = World()
    world.reconcile()
    start_a_fight(world)
    world.now += 0.25
    world.edit("Service", PUBLIC, change_port(4321))
    world.reconcile()
    told = [e for e in world.kube.events if e[1] == "DriftDetected"]
    assert len(told) == 1 and "(repairs are backing off for " in told[0][2]
    world.now += world.settings.drift_backoff_max_s  # the back-off is over: repaired
    world.reconcile()
    assert world.applied() == [("Service", PUBLIC)]
    detected = world.metrics.value("kaiwu_drift_detected_total", {"kind": "Service"})
    world.now += 0.25
    world.edit("Service", PUBLIC, change_port(4321))  # the very same drift again
    world.reconcile()
    assert world.applied() == [("Service", PUBLIC)]
    assert world.metrics.value("kaiwu_drift_detected_total", {"kind": "Service"}) == \
        detected + 1, "news again: the repair in between ended the first notice"


def test_a_fight_less_than_a_second_from_its_end_is_looked_at_again_then() -> None:
    world = World()
    world.reconcile()
    start_a_fight(world)
    world.now += world.settings.fight_window_s - 0.5  # half a second of quiet left
    result = world.reconcile()
    assert world.condition("Stalled")["reason"] == "DriftFight"
    assert result.requeue_after_s == pytest.approx(0.5)


def test_the_clusters_gauges_count_its_nodes_by_state() -> None:
    world = World()
    world.edit_status(lambda obj: obj.update(status={"nodes": [
        {"nodeId": 1, "address": "a:26257", "state": "live"},
        {"nodeId": 2, "address": "b:26257", "state": "live"},
        {"nodeId": 3, "address": "c:26257", "state": "not-live"},
        {"nodeId": 4, "address": "d:26257", "state": "decommissioning"}]}))
    world.reconcile()
    who = {"namespace": NS, "cluster": NAME}
    assert world.metrics.value("kaiwu_cluster_live_nodes", who) == 2
    assert world.metrics.value("kaiwu_cluster_not_live_nodes", who) == 1


def test_a_pass_before_the_cache_shows_our_status_write_keeps_its_actions_for_the_next() -> None:
    world = World()
    world.reconcile()
    before = copy.deepcopy(world.objects[("KaiwuCluster", NS, NAME)])
    world.edit("Service", PUBLIC, change_port(1234))
    world.reconcile()  # repaired, status written
    written = world.objects[("KaiwuCluster", NS, NAME)]
    # The watch has not delivered that status yet; someone deletes a Service meanwhile.
    world.objects[("KaiwuCluster", NS, NAME)] = before
    del world.objects[("Service", NS, NAME)]
    result = world.reconcile()
    assert ("Service", NAME) in world.applied()
    assert [w for w in world.kube.writes if w[0] == "status"] == [], "not judged on old status"
    assert result.requeue_after_s == STALE_RECHECK_S
    assert any(e[1] == "DriftRepaired" and e[2].startswith(f"Service/{NAME}: recreated")
               for e in world.kube.events), "Events are sent all the same"
    # The cache catches up: the next pass reports the waiting actions with its own.
    world.objects[("KaiwuCluster", NS, NAME)] = written
    world.now += 1
    world.reconcile()
    assert ("status", "KaiwuCluster", NAME) in world.kube.writes
    actions = [(a["action"], a["target"]) for a in world.status["lastActions"]]
    assert ("DriftRepaired", f"Service/{NAME}") in actions


def test_a_status_write_that_loses_a_race_is_reported_by_the_next_pass() -> None:
    for error in (ApiError(409, "Conflict", "the object has been modified"),
                  ApiError(404, "NotFound", "kaiwuclusters dev not found")):
        world = World()
        world.reconcile()
        world.edit("Service", PUBLIC, change_port(1234))
        real = world.kube.replace_status

        def replace_status(obj: Obj, error: ApiError = error) -> Obj:
            raise error
        world.kube.replace_status = replace_status  # type: ignore[method-assign]
        result = world.reconcile()
        assert result.requeue_after_s == SHORT_REQUEUE_S, error
        assert world.metrics.value("kaiwu_errors_total", {"stage": "status"}) == 1
        assert any(e[1] == "DriftRepaired" for e in world.kube.events)
        world.kube.replace_status = real  # type: ignore[method-assign]
        world.now += 1
        world.reconcile()
        assert ("DriftRepaired", f"Service/{PUBLIC}") in [
            (a["action"], a["target"]) for a in world.status["lastActions"]]


def test_a_stall_whose_reason_changes_sends_a_new_event_and_one_that_stands_does_not() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, lambda svc: svc["spec"].update(type="NodePort"))
    world.kube.refuse[("Service", PUBLIC)] = ApiError(422, "Invalid", "spec.type: Invalid value")
    world.reconcile()
    assert [e[:2] for e in world.kube.events if e[0] == "Warning"] == [
        ("Warning", "ApplyRejected")]
    world.now += 1
    world.reconcile()
    assert [e for e in world.kube.events if e[0] == "Warning"] == [], "no news"

    def old_selector(sts: Obj) -> None:
        sts["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] = "old"
    world.edit("StatefulSet", NAME, old_selector)
    world.now += 1
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "ImmutableField"
    [event] = [e for e in world.kube.events if e[0] == "Warning"]
    assert event[1] == "ImmutableField" and event[2].startswith(f"StatefulSet/{NAME}: ")


def test_objects_just_created_that_the_cache_does_not_show_yet_stay_listed() -> None:
    world = World()
    world.reconcile()
    listed = list(world.status["inventory"])
    # The API server has them; the watch has not delivered the creates to the cache yet.
    made = {key: world.objects.pop(key) for key in list(world.objects) if key[0] == "Service"}
    world.kube.get = lambda kind, namespace, name: made.get(  # type: ignore[method-assign]
        (kind.kind, namespace or "", name))
    result = world.reconcile()
    assert world.applied() == [], "not created twice"
    assert world.status["inventory"] == listed
    assert result.requeue_after_s == STALE_RECHECK_S


class Listing125(Listing):
    def server_version(self) -> str:
        return "v1.25.3"


def test_whether_an_optional_kind_is_served_is_asked_in_the_clusters_namespace() -> None:
    world = World()
    kube = Listing125(world.objects)
    world.over(kube, Unknowing(kube))
    world.reconcile()
    assert kube.lists == [("PodDisruptionBudget", NS)]
    assert ("PodDisruptionBudget", NAME) in world.applied(), "served: created"


def test_a_cluster_made_again_under_the_same_name_does_not_inherit_unreported_actions() -> None:
    world = World()
    world.reconcile()
    world.edit("Service", PUBLIC, change_port(1234))
    real = world.kube.replace_status

    def replace_status(obj: Obj) -> Obj:
        raise ApiError(409, "Conflict", "the object has been modified")
    world.kube.replace_status = replace_status  # type: ignore[method-assign]
    world.reconcile()  # repaired; the report of it waits for the next pass
    world.kube.replace_status = real  # type: ignore[method-assign]
    stored = copy.deepcopy(world.objects[("KaiwuCluster", NS, NAME)])
    world.remove("KaiwuCluster", NAME)
    world.reconcile()  # deleted: forgotten
    again = copy.deepcopy(stored)
    again["metadata"]["uid"] = "cluster-uid-2"
    again.pop("status", None)
    world.kube.put(again)
    world.now += 1
    world.reconcile()
    assert "DriftRepaired" not in [a["action"] for a in world.status["lastActions"]]


# ---- the spec step's memory of its judgements (reconciler.controller.render) ------------------

def test_a_spec_is_judged_again_only_when_what_the_judgement_reads_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[str] = []

    def counting(obj: Obj, reference: Any) -> Any:
        judged.append(obj["metadata"]["resourceVersion"])
        return admission.judge(obj, reference)  # what the spec step imported
    monkeypatch.setattr(render, "judge", counting)
    world = World()
    world.reconcile()
    world.settle()
    world.reconcile()  # the StatefulSet now remembers the spec applied: a new reference
    judged.clear()

    world.edit_status(lambda obj: obj["status"].update(phase="Degraded"))
    world.reconcile()
    assert judged == [], "status, resourceVersion and managedFields are not read"

    def reordered(obj: Obj) -> None:
        obj["spec"] = dict(reversed(list(obj["spec"].items())))
        obj["metadata"] = dict(reversed(list(obj["metadata"].items())))
    world.edit("KaiwuCluster", NAME, reordered)
    world.reconcile()
    assert judged == [], "the same spec in another key order"

    world.edit("KaiwuCluster", NAME, lambda obj: obj["metadata"].update(labels={"team": "a"}))
    world.reconcile()
    assert len(judged) == 1, "labels are read (the metadata rules)"
    world.edit_spec(replicas=4)
    world.reconcile()
    assert len(judged) == 2, "a new spec"
    world.reconcile()
    assert len(judged) == 3, "the StatefulSet now remembers the new spec: a new reference"
    world.reconcile()
    assert len(judged) == 3


# ---- objects with our names that are not ours ---------------------------------------------------

def foreign_service(**metadata: Any) -> Obj:
    """The Service another application made under the name the cluster renders for its own."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": PUBLIC, "namespace": NS, "uid": "svc-uid",
                         "resourceVersion": "7", **metadata},
            "spec": {"selector": {"app": "billing"}, "ports": [{"port": 443}]}}


def test_an_object_of_another_application_under_our_name_is_reported_and_left_alone() -> None:
    """A Service named like the cluster's client Service exists, made by someone else: it is
    never applied over (which would take it over) nor deleted; the cluster says which object
    and waits."""
    world = World()
    world.kube.put(foreign_service(labels={"app": "billing"}))
    before = copy.deepcopy(world.objects[("Service", NS, PUBLIC)])

    world.reconcile()

    assert world.objects[("Service", NS, PUBLIC)] == before
    assert not [w for w in world.kube.writes if w[1:] == ("Service", PUBLIC)]
    assert not [d for d in world.kube.deletes if d[:2] == ("Service", PUBLIC)]
    stalled = world.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "NameTaken")
    assert f"Service/{PUBLIC} exists and is not this cluster's (owner: none" in (
        stalled["message"])
    assert world.condition("Ready")["status"] == "False"


def test_an_object_of_another_cluster_under_our_name_is_never_taken_over() -> None:
    """Two clusters whose rendered names meet: the second never applies over the first's."""
    world = World()
    billing = cluster()
    billing["metadata"].update(name="billing", uid="billing-uid")
    world.kube.put(billing)
    world.kube.put(foreign_service(ownerReferences=[{
        "apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster", "name": "billing",
        "uid": "billing-uid", "controller": True}], labels={
        "app.kubernetes.io/managed-by": "kaiwu-operator",
        "app.kubernetes.io/instance": "billing"}))
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "NameTaken"
    assert "owner: KaiwuCluster/billing" in world.condition("Stalled")["message"]
    assert not [w for w in world.kube.writes if w[1:] == ("Service", PUBLIC)]


def test_our_own_objects_without_an_owner_are_adopted() -> None:
    """A preview applied by hand (`kubectl apply -k out`) carries our labels and no owner:
    the cluster adopts it, as before."""
    world = World()
    world.kube.put(foreign_service(labels={
        "app.kubernetes.io/managed-by": "kaiwu-operator", "app.kubernetes.io/instance": NAME}))
    world.reconcile()
    assert world.condition("Stalled")["reason"] != "NameTaken"
    owners = world.objects[("Service", NS, PUBLIC)]["metadata"].get("ownerReferences") or []
    assert [o["name"] for o in owners] == [NAME]
