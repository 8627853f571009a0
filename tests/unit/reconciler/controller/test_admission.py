"""Stories about the admission webhook's decision (reconciler.controller.admission.review), as
the API server would ask it: AdmissionReviews for KaiwuCluster CREATE and UPDATE, the scale
subresource, and what a change is judged against. No server, no test world: the lookups are
dictionaries. The same decisions on the real API server: tests/world_stories/admission/.
"""

from __future__ import annotations

import copy
from typing import Any

from reconciler.controller import admission
from reconciler.controller.admission import Verdict, accepted_facts, facts_annotation, review
from reconciler.model import Obj
from renderer.render import check_live
from tests.support.admission import NAME, NS, View, accepted_statefulset, cluster, pod


def create(obj: Obj, **lookups: Any) -> Verdict:
    return review({"uid": "r1", "operation": "CREATE", "namespace": NS, "name": NAME,
                   "object": obj}, **_lookups(**lookups))


def update(old: Obj, new: Obj, **lookups: Any) -> Verdict:
    return review({"uid": "r2", "operation": "UPDATE", "namespace": NS, "name": NAME,
                   "object": new, "oldObject": old}, **_lookups(**lookups))


def scale(replicas: int, old_replicas: int, **lookups: Any) -> Verdict:
    """What `kubectl scale kwc orders --replicas=N` makes the API server send."""
    def scale_object(n: int) -> Obj:
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": NAME, "namespace": NS}, "spec": {"replicas": n}}
    return review({"uid": "r3", "operation": "UPDATE", "subResource": "scale",
                   "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                   "namespace": NS, "name": NAME, "object": scale_object(replicas),
                   "oldObject": scale_object(old_replicas)}, **_lookups(**lookups))


def _lookups(stored: Obj | None = None, accepted: dict[str, Any] | None = None,
             watched: str | None = None, neighbours: list[Obj] | None = None
             ) -> dict[str, Any]:
    return {"stored": lambda ns, name: copy.deepcopy(stored),
            "accepted": lambda _cluster: accepted,
            "watched": lambda ns: watched is None or ns == watched,
            "neighbours": lambda ns: [copy.deepcopy(o) for o in neighbours or ()
                                      if o["metadata"]["namespace"] == ns]}


def named(name: str, namespace: str = NS, **spec: Any) -> Obj:
    obj = cluster(**spec)
    obj["metadata"].update(name=name, namespace=namespace, uid=f"uid-{name}")
    return obj


def with_spec(obj: Obj, **changes: Any) -> Obj:
    changed = copy.deepcopy(obj)
    changed["spec"].update(changes)
    return changed


def test_a_valid_new_cluster_is_allowed_without_a_word() -> None:
    assert create(cluster()) == Verdict(True)


def test_an_invalid_new_cluster_is_refused_with_the_renderers_line_naming_field_and_fix() -> None:
    verdict = create(cluster(replicas=2))
    assert not verdict.allowed
    assert verdict.problems == (
        "KaiwuCluster db/orders: spec.replicas: multi-replica needs at least 3 nodes, got 2 "
        "(set replicas to 3 or more, or use startMode single-replica)",)


def test_every_problem_is_told_at_once() -> None:
    verdict = create(cluster(replicas=2, extraArgs=["--join=x"]))
    assert [p.split(": ")[1] for p in verdict.problems] == ["spec.extraArgs[0]",
                                                            "spec.replicas"]


def test_changing_the_start_mode_is_refused() -> None:
    old = cluster()
    verdict = update(old, with_spec(old, startMode="single-replica"))
    assert not verdict.allowed
    assert "spec.startMode: the start mode cannot change (multi-replica -> single-replica)" \
        in verdict.message


def test_shrinking_storage_is_refused_and_growing_it_is_allowed_with_a_warning() -> None:
    old = cluster(storage={"size": "100Gi"})
    shrink = update(old, with_spec(old, storage={"size": "50Gi"}))
    assert not shrink.allowed
    assert "volumes cannot shrink (100Gi -> 50Gi) (keep 100Gi or more)" in shrink.message
    grow = update(old, with_spec(old, storage={"size": "200Gi"}))
    assert grow.allowed
    assert grow.warnings == ("spec.storage.size 100Gi -> 200Gi: volumes grow only if their "
                             "StorageClass allows expansion; no going back down",)


def test_a_downgrade_and_a_major_jump_are_refused_and_a_minor_upgrade_passes() -> None:
    old = cluster(version="3.2.1")
    down = update(old, with_spec(old, version="3.1.0"))
    assert not down.allowed and "KaiwuDB cannot be downgraded (keep 3.2.1 or later)" \
        in down.message
    major = update(old, with_spec(old, version="4.0.0"))
    assert not major.allowed and "(keep 3.x)" in major.message
    assert update(old, with_spec(old, version="3.2.2")).allowed


def test_kubectl_scale_below_the_multi_replica_floor_is_refused() -> None:
    verdict = scale(2, 3, stored=cluster())
    assert not verdict.allowed
    assert "spec.replicas: multi-replica needs at least 3 nodes, got 2" in verdict.message
    assert scale(5, 3, stored=cluster()).allowed


def test_kubectl_scale_in_of_a_single_replica_cluster_is_refused_scale_out_passes() -> None:
    single = cluster(startMode="single-replica", replicas=3)
    verdict = scale(2, 3, stored=single)
    assert not verdict.allowed
    assert "a single-replica cluster cannot scale in" in verdict.message
    assert scale(4, 3, stored=single).allowed


def test_a_scale_of_a_cluster_that_cannot_be_read_passes_with_a_warning() -> None:
    verdict = scale(2, 3, stored=None)
    assert verdict.allowed
    assert verdict.warnings == ("KaiwuCluster db/orders could not be read: the reconciler "
                                "checks this scale instead",)


def test_changes_are_judged_against_what_the_reconciler_applied_not_what_is_stored() -> None:
    # Stored while the webhook was down: the start mode changed; the reconciler refused it, so
    # what exists is still multi-replica (its StatefulSet says so).
    applied = check_live(cluster())["spec"]
    memory = accepted_facts(accepted_statefulset(facts_annotation(applied)), cluster())
    stored = cluster(startMode="single-replica")
    back = update(stored, cluster(), accepted=memory)
    assert back.allowed, "changing it back to what exists is the fix"
    again = update(stored, with_spec(stored, replicas=4), accepted=memory)
    assert not again.allowed and "the start mode cannot change" in again.message
    # Without the memory, the stored object is the reference only when it passes the rules.
    assert not update(cluster(), cluster(startMode="single-replica")).allowed


def test_label_and_annotation_edits_of_a_refused_cluster_pass_so_it_can_be_paused() -> None:
    stored = cluster(replicas=2)
    paused = copy.deepcopy(stored)
    paused["metadata"]["annotations"] = {"kaiwu.inspur.com/paused": "true"}
    verdict = update(stored, paused)
    assert verdict.allowed
    assert verdict.warnings[0].startswith("the stored spec is refused by the reconciler: "
                                          "KaiwuCluster db/orders: spec.replicas:")
    assert all(len(w) <= admission.MAX_WARNING for w in verdict.warnings)


def test_a_change_to_a_paused_cluster_passes_with_a_warning() -> None:
    old = cluster(paused=True)
    verdict = update(old, with_spec(old, replicas=5))
    assert verdict.allowed
    assert verdict.warnings == ("the cluster is paused: this change is applied once it is "
                                "resumed",)


def test_a_namespace_another_install_watches_is_not_judged() -> None:
    assert review({"operation": "CREATE", "namespace": "other", "object": cluster(replicas=2)},
                  **_lookups(watched=NS)) == Verdict(True)


def test_the_answer_echoes_the_review_version_and_uid_and_says_why() -> None:
    request = {"uid": "abc", "operation": "CREATE", "namespace": NS, "name": NAME,
               "object": cluster(replicas=2)}
    for version in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
        body = {"apiVersion": version, "kind": "AdmissionReview", "request": request}
        answer = admission.response(body, review(request, **_lookups()))
        assert answer["apiVersion"] == version
        assert answer["response"]["uid"] == "abc"
        assert answer["response"]["allowed"] is False
        assert answer["response"]["status"]["code"] == 422
        assert "multi-replica needs at least 3 nodes" in answer["response"]["status"]["message"]


def test_the_memory_of_an_earlier_cluster_of_the_same_name_is_ignored() -> None:
    sts = accepted_statefulset(facts_annotation(check_live(cluster())["spec"]))
    assert accepted_facts(sts, cluster()) is not None
    newer = cluster()
    newer["metadata"]["uid"] = "uid-2"
    assert accepted_facts(sts, newer) is None
    sts["metadata"]["annotations"][admission.ACCEPTED_ANNOTATION] = "{not json"
    assert accepted_facts(sts, cluster()) is None








def test_a_version_is_judged_against_the_pods_so_a_stuck_upgrade_can_be_set_back() -> None:
    upgrading = cluster(version="3.2.2")
    sts = accepted_statefulset(facts_annotation(check_live(upgrading)["spec"]))
    # One pod moved to 3.2.2 (and crashes there); two still run 3.2.1.
    view = View(sts, pod("orders-0", "3.2.1"), pod("orders-1", "3.2.1"), pod("orders-2", "3.2.2"))
    memory = admission.applied(view, upgrading)
    assert memory is not None and memory["version"] == "3.2.1"
    assert update(upgrading, cluster(version="3.2.1"), accepted=memory).allowed
    assert not update(upgrading, cluster(version="3.2.0"), accepted=memory).allowed
    # Once every pod runs 3.2.2, going back is a downgrade.
    done = View(sts, *(pod(f"orders-{i}", "3.2.2") for i in range(3)))
    finished = admission.applied(done, upgrading)
    assert not update(upgrading, cluster(version="3.2.1"), accepted=finished).allowed


def test_a_namespace_this_install_watches_is_judged() -> None:
    assert not create(cluster(replicas=2), watched=NS).allowed


def test_a_cluster_being_deleted_is_never_refused_even_with_a_spec_that_breaks_the_rules(
        ) -> None:
    # Removing the last finalizer of a cluster whose stored spec is refused: the API server
    # sends an UPDATE carrying deletionTimestamp; refusing it would keep the cluster forever.
    old = cluster()
    deleting = with_spec(old, replicas=2)
    deleting["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    assert update(old, deleting).allowed
    assert not update(old, with_spec(old, replicas=2)).allowed, "without it: refused"


def test_a_change_to_a_cluster_paused_by_its_annotation_passes_with_a_warning() -> None:
    old = cluster()
    old["metadata"]["annotations"] = {"kaiwu.inspur.com/paused": "true"}
    verdict = update(old, with_spec(old, replicas=5))
    assert verdict.warnings == ("the cluster is paused: this change is applied once it is "
                                "resumed",)
    running = cluster()
    assert update(running, with_spec(running, replicas=5)).warnings == ()


def test_the_memory_is_written_in_one_spelling_keys_sorted() -> None:
    text = facts_annotation(check_live(cluster(storage={"size": "20Gi"}))["spec"])
    assert text == ('{"maxOffset":"500ms","replicas":3,"startMode":"multi-replica",'
                    '"storage":{"size":"20Gi"},"version":"3.2.1"}')


def test_a_memory_that_is_not_the_facts_of_a_spec_is_ignored() -> None:
    for raw in ('["multi-replica"]', '{"startMode":"multi-replica"}',
                '{"startMode":"multi-replica","replicas":3,"version":"3.2.1","storage":"20Gi"}',
                '{"startMode":"multi-replica","replicas":3,"version":"3.2.1","storage":{}}'):
        assert accepted_facts(accepted_statefulset(raw), cluster()) is None, raw


def test_the_answer_to_a_review_of_an_unknown_version_is_a_v1_review() -> None:
    request = {"uid": "abc", "operation": "CREATE", "namespace": NS, "name": NAME,
               "object": cluster(replicas=2)}
    body = {"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": request}
    answer = admission.response(body, review(request, **_lookups()))
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "abc", "allowed": False, "status": {
                          "code": 422, "reason": "Invalid",
                          "message": review(request, **_lookups()).message}}}


def test_the_statefulset_of_an_earlier_cluster_of_the_same_name_is_no_memory_for_the_webhook(
        ) -> None:
    sts = accepted_statefulset(facts_annotation(check_live(cluster())["spec"]))
    assert admission.applied(View(sts), cluster()) is not None
    newer = cluster()
    newer["metadata"]["uid"] = "uid-2"
    assert admission.applied(View(sts), newer) is None


def test_a_cluster_that_would_need_another_clusters_objects_is_refused_before_it_is_stored(
) -> None:
    """KaiwuCluster `orders` renders a Service `orders-public`; a KaiwuCluster named
    `orders-public` renders a headless Service `orders-public` too: each would overwrite the
    other's. `kaiwu validate` refuses it for files; at the API's door it is refused as well."""
    public = named("orders-public")
    verdict = create(cluster(), neighbours=[public])
    assert not verdict.allowed
    assert verdict.message.startswith("KaiwuCluster db/orders: metadata.name: KaiwuCluster "
                                      "'orders' would need ")
    assert "Service db/orders-public" in verdict.message
    assert "which KaiwuCluster 'orders-public' needs too: each would overwrite the other's " \
        "(rename one of them or move it to another namespace)" in verdict.message
    # The same cluster in another namespace, or alone, is allowed.
    assert create(cluster(), neighbours=[named("orders-public", namespace="elsewhere")]).allowed
    assert create(cluster(), neighbours=[named("payments")]).allowed


def test_a_cluster_is_never_refused_for_colliding_with_itself_or_a_cluster_being_deleted(
) -> None:
    stored = cluster()
    assert update(stored, with_spec(stored, replicas=4), neighbours=[stored]).allowed
    leaving = named("orders-public")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    assert create(cluster(), neighbours=[leaving]).allowed


def test_two_clusters_that_met_before_this_rule_can_still_be_changed_but_not_made_worse(
) -> None:
    """`orders` and `orders-public` were both stored before the webhook refused such pairs:
    `orders` can still be scaled and changed (that is how they are told apart, or drained), but
    no change may add another shared object."""
    stored = cluster()
    public = named("orders-public")
    assert update(stored, with_spec(stored, replicas=4), neighbours=[public]).allowed
    assert scale(5, 3, stored=stored, neighbours=[public]).allowed
