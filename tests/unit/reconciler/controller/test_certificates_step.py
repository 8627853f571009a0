"""Stories about the certificates step (reconciler.controller.certificates) over passes of the
controller on the fast tier's fake API (tests/support/controller_world.py's World): the
operator's own TLS Secrets made once and owned by nobody (an earlier version's, owned by the
cluster, released once), their hash rolled into the pod template, a user's Secrets read even
when the watch cache does not hold them, and what a pass does while the cache lags behind its
own writes, and the Event that names them among what a deleted cluster kept. The certificates
themselves (reconciler.kaiwudb.certs) have their own stories
(tests/unit/reconciler/kaiwudb/test_certs.py); the real apiserver: the TLS world stories.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from reconciler.controller.shared import SHORT_REQUEUE_S, STALE_RECHECK_S
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import TLS_SECRET_LABEL, Kind
from reconciler.model import Obj
from renderer.builders import CERTS_HASH_ANNOTATION
from tests.support.controller_world import KEY, NAME, NOW, NS, World

SECRETS = [f"{NAME}-ca", f"{NAME}-node-certs", f"{NAME}-root-client-certs"]


def pod_annotations(world: World) -> dict[str, str]:
    sts = world.objects[("StatefulSet", NS, NAME)]
    found: dict[str, str] = sts["spec"]["template"]["metadata"].get("annotations") or {}
    return found


def expiry(world: World) -> float:
    return world.metrics.value("kaiwu_cluster_certificate_expiry_seconds",
                               {"namespace": NS, "cluster": NAME})


def test_a_tls_cluster_gets_its_secrets_once_owned_by_nobody_and_their_hash_on_its_pods(
        ) -> None:
    world = World(tls={"enabled": True})
    world.reconcile()
    created = [name for verb, kind, name in world.kube.writes if kind == "Secret"]
    assert sorted(created) == SECRETS
    for name in SECRETS:
        md = world.objects[("Secret", NS, name)]["metadata"]
        # No owner: deleting the KaiwuCluster keeps them (the CA with them), as it keeps claims.
        assert "ownerReferences" not in md
        assert md["labels"] == {"app.kubernetes.io/managed-by": "kaiwu-operator",
                                "app.kubernetes.io/instance": NAME, TLS_SECRET_LABEL: "true"}
    assert ("CertificateWritten", f"Secret/{NAME}-ca", "new cluster CA") in world.actions()
    assert ("Normal", "CertificateWritten", f"Secret/{NAME}-ca: new cluster CA") in \
        world.kube.events
    first = pod_annotations(world)[CERTS_HASH_ANNOTATION]
    assert len(first) == 16
    world.settle()
    world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == [], "made once"
    assert pod_annotations(world)[CERTS_HASH_ANNOTATION] == first
    # Read back, the node certificate is valid for a long time yet; the gauge says how long.
    # (Node certificates last five years from the pass that made them; the gauge counts from
    # the wall clock.)
    days = (expiry(world) + time.time() - world.now) / 86400
    assert 1824.9 < days < 1825.1


def test_a_pass_before_the_cache_shows_the_new_secrets_makes_no_second_ca() -> None:
    world = World(tls={"enabled": True})
    world.reconcile()
    first = pod_annotations(world)[CERTS_HASH_ANNOTATION]
    # The API server has them; the watch has not delivered them to the cache yet.
    made = {name: world.objects.pop(("Secret", NS, name)) for name in SECRETS}
    world.kube.get = lambda kind, namespace, name: made.get(name)  # type: ignore[method-assign]
    world.edit_spec(replicas=4)  # the StatefulSet is applied this pass
    result = world.reconcile()
    assert world.objects[("StatefulSet", NS, NAME)]["spec"]["replicas"] == 4
    assert [w for w in world.kube.writes if w[1] == "Secret"] == []
    assert result.requeue_after_s == STALE_RECHECK_S
    assert pod_annotations(world)[CERTS_HASH_ANNOTATION] == first, "the pods keep their hash"
    for name, secret in made.items():
        world.objects[("Secret", NS, name)] = secret
    world.settle()
    world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == []



def test_a_cache_that_lost_sight_of_the_secrets_never_makes_a_second_ca() -> None:
    # A watch behind by more than the grace of our own writes: the cache shows none of the
    # certificate Secrets, so the plan is a new CA; the API server still holds the leaves it
    # signed. Nothing is written until the cache shows them.
    world = World(tls={"enabled": True})
    world.reconcile()
    held = {name: world.objects.pop(("Secret", NS, name)) for name in SECRETS}
    world.settle()
    world.kube.get = lambda kind, namespace, name: held.get(name)  # type: ignore[method-assign]
    result = world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == []
    assert result.requeue_after_s == SHORT_REQUEUE_S

def test_a_secret_created_meanwhile_by_someone_else_stops_the_step_and_is_looked_at_again(
        ) -> None:
    world = World(tls={"enabled": True})
    real_create = world.kube.create

    def create(obj: Obj) -> Obj:
        if obj["kind"] == "Secret":
            raise ApiError(409, "AlreadyExists", f"secrets \"{obj['metadata']['name']}\" "
                           "already exists")
        return real_create(obj)
    world.kube.create = create  # type: ignore[method-assign]
    result = world.reconcile()
    assert result.requeue_after_s == SHORT_REQUEUE_S
    assert [a for a in world.actions() if a[0] == "CertificateWritten"] == []
    assert CERTS_HASH_ANNOTATION not in pod_annotations(world)
    assert world.condition("Ready")["reason"] == "Applying"


def test_a_paused_tls_cluster_gets_no_secrets() -> None:
    world = World(tls={"enabled": True}, paused=True)
    world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == []


def test_the_users_own_secrets_are_read_from_the_api_when_the_cache_lacks_them() -> None:
    world = World(tls={"enabled": True, "nodeSecretName": "mine",
                       "clientSecretName": "mine-client"})
    world.reconcile()
    stalled = world.condition("Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "SecretNotMarked")
    assert stalled["message"].startswith(
        "spec.tls.nodeSecretName: Secret db/mine does not exist; create it with the "
        f"certificates and the label {TLS_SECRET_LABEL}=true; spec.tls.clientSecretName: "
        "Secret db/mine-client does not exist")
    assert [w for w in world.kube.writes if w[1] == "Secret"] == [], "never made for the user"
    assert ("StatefulSet", NS, NAME) not in world.objects, "nothing names it before it is seen"
    # Not the operator's (no managed-by label), so not in the watch cache: read from the API.
    def empty(name: str) -> Obj:
        return {"apiVersion": "v1", "kind": "Secret", "data": {},
                "metadata": {"name": name, "namespace": NS,
                             "labels": {TLS_SECRET_LABEL: "true"}}}
    real_get = world.kube.get

    def get(kind: Kind, namespace: str | None, name: str) -> Any:
        return empty(name) if name in ("mine", "mine-client") else real_get(kind, namespace,
                                                                              name)
    world.kube.get = get  # type: ignore[method-assign]
    world.reconcile()
    message = world.condition("Stalled")["message"]
    assert "Secret mine key ca.crt: the key is missing or empty" in message
    assert "Secret mine: the Secret does not exist" not in message


def users_own(now: float) -> World:
    """A cluster on the user's own Secrets (made here as the operator makes its own), `now`."""
    made = World(tls={"enabled": True})
    made.reconcile()
    world = World(tls={"enabled": True, "nodeSecretName": f"{NAME}-node-certs",
                       "clientSecretName": f"{NAME}-root-client-certs"})
    for name in SECRETS[1:]:
        secret = copy.deepcopy(made.objects[("Secret", NS, name)])
        assert "ownerReferences" not in secret["metadata"]
        secret["metadata"]["labels"] = {TLS_SECRET_LABEL: "true"}
        world.objects[("Secret", NS, name)] = secret
    world.now = now
    return world


def test_the_users_certificates_near_their_end_are_warned_about_and_used() -> None:
    world = users_own(NOW + (5 * 365 - 5) * 86400)
    world.reconcile()
    warnings = [e for e in world.kube.events if e[1] == "CertificateWarning"]
    assert [(e[0], e[2].split(":")[0]) for e in warnings] == [
        ("Warning", f"Secret {NAME}-node-certs key node.crt"),
        ("Warning", f"Secret {NAME}-root-client-certs key client.root.crt")]
    assert "the certificate expires at " in warnings[0][2]
    assert world.condition("Stalled")["status"] == "False", "a warning stalls nothing"
    assert len(pod_annotations(world)[CERTS_HASH_ANNOTATION]) == 16
    assert [w for w in world.kube.writes if w[1] == "Secret"] == [], "never rewritten"


def test_unusable_certificates_keep_the_pods_on_the_ones_they_run_with() -> None:
    world = users_own(NOW)
    world.reconcile()
    running = pod_annotations(world)[CERTS_HASH_ANNOTATION]
    # The user replaces the node Secret with a broken one, and scales the cluster.
    world.edit("Secret", f"{NAME}-node-certs", lambda secret: secret["data"].pop("node.key"))
    world.edit_spec(replicas=4)
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "CertificatesUnusable"
    assert world.objects[("StatefulSet", NS, NAME)]["spec"]["replicas"] == 4
    assert pod_annotations(world)[CERTS_HASH_ANNOTATION] == running


def test_a_secret_of_the_users_not_marked_for_kaiwudb_is_never_mounted() -> None:
    """Whoever may write a KaiwuCluster could otherwise name any Secret of the namespace and
    have the reconciler mount it into pods it makes: the pass stops before anything is
    rendered or applied, says which Secret and how to mark it, and goes on once it is."""
    world = users_own(NOW)
    world.edit("Secret", f"{NAME}-node-certs", lambda secret: secret["metadata"].pop("labels"))
    world.reconcile()
    assert ("StatefulSet", NS, NAME) not in world.objects, "nothing mounts it"
    ready, stalled = world.condition("Ready"), world.condition("Stalled")
    assert (ready["status"], ready["reason"]) == ("False", "SecretNotMarked")
    assert (stalled["status"], stalled["reason"]) == ("True", "SecretNotMarked")
    assert stalled["message"] == (
        f"spec.tls.nodeSecretName: Secret {NS}/{NAME}-node-certs is not marked for KaiwuDB's "
        f"certificates; label it: kubectl label secret -n {NS} {NAME}-node-certs "
        f"{TLS_SECRET_LABEL}=true (a KaiwuCluster may name only Secrets meant for it)")

    world.edit("Secret", f"{NAME}-node-certs", lambda secret: secret["metadata"].update(
        labels={TLS_SECRET_LABEL: "true"}))
    world.reconcile()
    assert ("StatefulSet", NS, NAME) in world.objects
    assert world.condition("Stalled")["status"] == "False"


def test_a_secret_named_before_it_exists_is_not_mounted_once_someone_makes_it_unmarked(
        ) -> None:
    """Naming a Secret that does not exist yet must not put it into the StatefulSet: it would
    count as mounted already when someone made it without the label."""
    world = users_own(NOW)
    world.objects.pop(("Secret", NS, f"{NAME}-node-certs"))
    world.reconcile()
    assert ("StatefulSet", NS, NAME) not in world.objects
    made = users_own(NOW).objects[("Secret", NS, f"{NAME}-node-certs")]
    made["metadata"].pop("labels")
    world.objects[("Secret", NS, f"{NAME}-node-certs")] = made
    world.reconcile()
    assert ("StatefulSet", NS, NAME) not in world.objects
    assert world.condition("Stalled")["reason"] == "SecretNotMarked"


def test_a_running_cluster_keeps_its_unmarked_secret_but_cannot_switch_to_another() -> None:
    """A cluster made before the label was asked for runs on (its failover with it), warned
    until the Secret is labelled; pointing it at another unmarked Secret is refused and the
    pods keep what they mount."""
    world = users_own(NOW)
    world.reconcile()
    running = copy.deepcopy(world.objects[("StatefulSet", NS, NAME)])
    world.edit("Secret", f"{NAME}-node-certs", lambda secret: secret["metadata"].pop("labels"))
    world.edit_spec(replicas=4)
    world.reconcile()
    assert world.objects[("StatefulSet", NS, NAME)]["spec"]["replicas"] == 4
    assert world.condition("Stalled")["status"] == "False"
    warned = [e for e in world.kube.events if e[1] == "SecretNotMarked"]
    assert warned and warned[0][0] == "Warning" and f"{NAME}-node-certs" in warned[0][2]

    other = copy.deepcopy(world.objects[("Secret", NS, f"{NAME}-node-certs")])
    other["metadata"]["name"] = "someone-elses"
    world.objects[("Secret", NS, "someone-elses")] = other
    world.edit_spec(replicas=5, tls={"enabled": True, "nodeSecretName": "someone-elses",
                                     "clientSecretName": f"{NAME}-root-client-certs"})
    world.reconcile()
    assert world.condition("Stalled")["reason"] == "SecretNotMarked"
    volumes = world.objects[("StatefulSet", NS, NAME)]["spec"]["template"]["spec"]["volumes"]
    assert volumes == running["spec"]["template"]["spec"]["volumes"]
    assert world.objects[("StatefulSet", NS, NAME)]["spec"]["replicas"] == 4, "nothing applied"


def test_a_cluster_without_tls_gets_no_certificates() -> None:
    world = World()
    world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == []
    assert CERTS_HASH_ANNOTATION not in pod_annotations(world)


def test_certificates_near_their_end_are_renewed_and_the_pods_roll_onto_them() -> None:
    world = World(tls={"enabled": True})
    world.reconcile()
    first = pod_annotations(world)[CERTS_HASH_ANNOTATION]
    world.settle()
    world.now = NOW + (5 * 365 - 5) * 86400
    world.reconcile()
    renewed = [name for verb, kind, name in world.kube.writes if kind == "Secret"]
    assert renewed and all(verb == "apply" for verb, kind, _ in world.kube.writes
                           if kind == "Secret"), "renewed in place"
    assert f"{NAME}-ca" not in renewed, "the CA lasts longer"
    assert pod_annotations(world)[CERTS_HASH_ANNOTATION] != first


def test_a_cluster_that_turns_tls_off_drops_the_certificates_hash_from_its_pods() -> None:
    world = World(tls={"enabled": True})
    world.reconcile()
    assert CERTS_HASH_ANNOTATION in pod_annotations(world)
    world.settle()
    world.edit_spec(tls={"enabled": False})
    world.reconcile()
    assert CERTS_HASH_ANNOTATION not in pod_annotations(world)


def secret_reads(world: World) -> list[tuple[str | None, str]]:
    """Record the Secrets the step reads from the API (not the cache): (namespace, name)."""
    reads: list[tuple[str | None, str]] = []
    real_get = world.kube.get

    def get(kind: Kind, namespace: str | None, name: str) -> Any:
        if kind.kind == "Secret":
            reads.append((namespace, name))
        return real_get(kind, namespace, name)
    world.kube.get = get  # type: ignore[method-assign]
    return reads


def test_only_the_users_own_secrets_are_looked_for_past_the_cache_in_the_clusters_namespace(
        ) -> None:
    ours = World(tls={"enabled": True})
    reads = secret_reads(ours)
    ours.reconcile()  # the cache holds none of them yet: they are made
    # Before a new CA, the API server is asked whether certificates it would not sign exist
    # (a cache that lost sight of them must not make a second CA); nothing else is read.
    assert reads == [(NS, f"{NAME}-node-certs"), (NS, f"{NAME}-root-client-certs")]
    theirs = users_own(NOW)
    reads = secret_reads(theirs)
    del theirs.objects[("Secret", NS, f"{NAME}-node-certs")]
    theirs.reconcile()
    # The user's Secrets are no cluster's own: the cache keeps none of their data
    # (kinds.slim), so each is read from the API, the missing one too.
    assert sorted(reads) == [(NS, f"{NAME}-ca"), (NS, f"{NAME}-node-certs"),
                             (NS, f"{NAME}-root-client-certs")]


def test_a_pass_before_the_cache_shows_renewed_secrets_renews_nothing_twice() -> None:
    world = World(tls={"enabled": True})
    world.reconcile()
    world.settle()
    old = {name: copy.deepcopy(world.objects[("Secret", NS, name)]) for name in SECRETS}
    world.now = NOW + (5 * 365 - 5) * 86400
    world.reconcile()
    renewed = sorted(name for _, kind, name in world.kube.writes if kind == "Secret")
    assert renewed
    for name in renewed:  # the cache still shows the Secrets our renewal replaced
        world.objects[("Secret", NS, name)] = old[name]
    result = world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == []
    assert result.requeue_after_s == STALE_RECHECK_S


def test_secrets_an_earlier_version_made_owned_by_the_cluster_are_released_once() -> None:
    """Before, the Secrets were owned by the KaiwuCluster, and deleting it had the garbage
    collector delete them, the CA with them. Now one guarded patch each removes the reference
    (another owner's stays) and marks them, and the certificates are left as they were."""
    world = World(tls={"enabled": True})
    world.reconcile()
    first = pod_annotations(world)[CERTS_HASH_ANNOTATION]
    ref = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster", "name": NAME,
           "uid": "cluster-uid", "controller": True, "blockOwnerDeletion": True}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "x"}
    world.kube.put({"apiVersion": "v1", "kind": "ConfigMap",  # the other owner exists
                    "metadata": {"name": "keep", "namespace": NS, "uid": "x"}})

    def as_before(secret: Obj) -> None:
        secret["metadata"]["labels"].pop(TLS_SECRET_LABEL)
        secret["metadata"]["ownerReferences"] = [ref] if "ca" in secret["metadata"]["name"] \
            else [other, ref]
    for name in SECRETS:
        world.edit("Secret", name, as_before)
    data = {name: world.objects[("Secret", NS, name)]["data"] for name in SECRETS}
    owned = {name: copy.deepcopy(world.objects[("Secret", NS, name)]) for name in SECRETS}
    world.settle()
    result = world.reconcile()
    assert sorted(w for w in world.kube.writes if w[1] == "Secret") == [
        ("json_patch", "Secret", name) for name in SECRETS]
    for name in SECRETS:
        md = world.objects[("Secret", NS, name)]["metadata"]
        assert md.get("ownerReferences", []) == ([] if name.endswith("-ca") else [other])
        assert md["labels"][TLS_SECRET_LABEL] == "true"
        assert world.objects[("Secret", NS, name)]["data"] == data[name]
    assert ("SecretKept", f"Secret/{NAME}-ca", "no longer owned by the KaiwuCluster: deleting "
            "the cluster keeps it, as it keeps the volumes") in world.actions()
    assert world.metrics.value("kaiwu_writes_total", {"verb": "patch", "kind": "Secret"}) == 3
    # The data is unchanged: the plan need not wait for the cache (the cluster stays Ready).
    assert result.requeue_after_s != STALE_RECHECK_S
    assert pod_annotations(world)[CERTS_HASH_ANNOTATION] == first
    # A pass before the cache shows the release patches nothing again.
    released = {name: world.objects[("Secret", NS, name)] for name in SECRETS}
    for name in SECRETS:
        world.objects[("Secret", NS, name)] = owned[name]
    world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == [], "released once"
    world.objects.update({("Secret", NS, name): secret for name, secret in released.items()})
    world.settle()
    world.reconcile()
    assert [w for w in world.kube.writes if w[1] == "Secret"] == []
    assert pod_annotations(world)[CERTS_HASH_ANNOTATION] == first


def test_a_secret_changed_before_its_release_is_looked_at_again_not_overwritten() -> None:
    world = World(tls={"enabled": True})
    world.reconcile()
    ref = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster", "name": NAME,
           "uid": "cluster-uid", "controller": True}
    world.edit("Secret", f"{NAME}-ca",
               lambda secret: secret["metadata"].update(ownerReferences=[ref]))
    world.settle()

    def refuse(*args: Any) -> Obj:
        raise ApiError(422, "Invalid", "the test of /metadata/resourceVersion failed")
    world.kube.json_patch = refuse  # type: ignore[method-assign,assignment]
    result = world.reconcile()
    assert result.requeue_after_s == SHORT_REQUEUE_S
    assert world.objects[("Secret", NS, f"{NAME}-ca")]["metadata"]["ownerReferences"] == [ref]


def test_a_deleted_cluster_gets_one_event_naming_the_claims_and_secrets_it_kept() -> None:
    """Deleting a KaiwuCluster takes its pods; the Event says what stays and how to free it."""
    world = World(tls={"enabled": True})
    world.reconcile()
    for i in range(3):
        world.objects[("PersistentVolumeClaim", NS, f"data-{NAME}-{i}")] = {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{NAME}-{i}", "namespace": NS,
                         "labels": {"app.kubernetes.io/instance": NAME}}}
    gone = world.objects.pop(("KaiwuCluster", NS, NAME))
    world.kube.events.clear()
    world.controller.reconcile(KEY)
    [(type_, reason, message)] = world.kube.events
    assert (type_, reason) == ("Normal", "ClusterDeleted")
    assert message == (
        "deleted: its StatefulSet and pods, Services and the other objects it owned go with it "
        f"(garbage collector); kept: claims data-{NAME}-0, data-{NAME}-1, data-{NAME}-2 (the "
        f"data) and Secrets {', '.join(sorted(SECRETS))} (the CA and certificates): the same "
        f"spec applied again finds them; to free them: kubectl -n {NS} delete pvc -l "
        f"app.kubernetes.io/instance={NAME}; kubectl -n {NS} delete secret -l "
        f"app.kubernetes.io/instance={NAME},{TLS_SECRET_LABEL}=true")
    world.kube.events.clear()
    world.controller.reconcile(KEY)
    assert world.kube.events == [], "told once"

    # Gone from this reconciler's cache but not from the API server (moved to another shard):
    # nothing is said.
    world.objects[("KaiwuCluster", NS, NAME)] = gone
    world.controller.reconcile(KEY)
    world.objects.pop(("KaiwuCluster", NS, NAME))
    world.kube.get = lambda kind, namespace, name: gone  # type: ignore[method-assign]
    world.kube.events.clear()
    world.controller.reconcile(KEY)
    assert world.kube.events == []
