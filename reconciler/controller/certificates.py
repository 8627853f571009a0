"""The "certificates" step: TLS Secrets planned by reconciler.kaiwudb.certs, written unless
paused, and the certificates' hash put on the pod template (a renewal rolls the pods). The node
Secret's earliest notAfter, as read, goes to kaiwu_cluster_certificate_expiry_seconds.

The Secrets it writes carry no ownerReference, unlike every other object the reconciler writes:
deleting the KaiwuCluster keeps them, as it keeps the claims, so the same spec applied again
finds its stores and its CA, and applications keep trusting it. A Secret an earlier version
wrote with the KaiwuCluster as its owner is released once (`release`: the reference removed,
TLS_SECRET_LABEL added, one JSON patch guarded by its resourceVersion).

Run by the Controller (reconciler.controller.controller) after "render", for TLS clusters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from reconciler.controller.objects import ObjectPass
from reconciler.controller.shared import SHORT_REQUEUE_S, STALE_RECHECK_S, ControllerMemory
from reconciler.kaiwudb.certs.layout import (
    ca_secret_name,
    earliest_expiry,
    secret_names,
    unmarked_secrets,
)
from reconciler.kaiwudb.certs.rotation import SecretWrite, certs_action
from reconciler.kaiwudb.certs.user_secrets import format_problem
from reconciler.kaiwudb.context import StepContext
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.kube.kinds import TLS_SECRET_LABEL
from reconciler.model import Obj, meta
from renderer.builders import CERTS_HASH_ANNOTATION
from renderer.spec import Cluster


class CertificatesStep:
    """See the module docstring."""

    name = "certificates"
    always = False

    def __init__(self, ctx: StepContext, memory: ControllerMemory) -> None:
        self.ctx = ctx
        self.memory = memory

    def wanted(self, p: ObjectPass) -> bool:
        return p.cluster is not None and p.cluster.tls

    def unmarked(self, p: ObjectPass, cluster: Cluster, secrets: dict[str, Obj]) -> bool:
        """True, and the pass halted (nothing rendered, applied or mounted), when the spec names
        a Secret of the user's that is not marked for KaiwuDB and the pods do not mount it yet.
        One they already mount (a cluster made before the label was asked for) goes on, with a
        Warning Event until it is labelled: halting it would halt its failover too."""
        if not cluster.user_provided_certs:
            return False
        live = self.ctx.view.peek(k.STATEFUL_SET, cluster.namespace, cluster.name)
        mounted = mounted_secrets(live)
        # One that does not exist yet is not mounted either: else the StatefulSet would name
        # it now and take it, unmarked, once someone made it.
        missing = [name for name in dict.fromkeys((cluster.node_secret, cluster.client_secret))
                   if name not in secrets and name not in mounted]
        for name in missing:
            field = _spec_field(cluster, name)
            p.stalled.append(("SecretNotMarked", (
                f"spec.tls.{field}: Secret {cluster.namespace}/{name} does not exist; create "
                f"it with the certificates and the label {TLS_SECRET_LABEL}=true")))
        refused = bool(missing)
        for name in unmarked_secrets(cluster, secrets):
            field = _spec_field(cluster, name)
            message = (f"spec.tls.{field}: Secret {cluster.namespace}/{name} is not marked for "
                       f"KaiwuDB's certificates; label it: kubectl label secret -n "
                       f"{cluster.namespace} {name} {TLS_SECRET_LABEL}=true (a KaiwuCluster may "
                       "name only Secrets meant for it)")
            if name in mounted:
                p.events.append(("Warning", "SecretNotMarked", message))
            else:
                p.stalled.append(("SecretNotMarked", message))
                refused = True
        if refused:
            p.halted = True
        return refused

    def _ca_only_seems_new(self, cluster: Cluster, writes: Sequence[SecretWrite]) -> bool:
        """Before a new CA is made (planned when the cache shows none of the cluster's
        certificate Secrets), whether the API server holds a node or client Secret after all:
        certificates signed by a CA we cannot see. One read each, only then."""
        if not any(w.verb == "create" and w.name == ca_secret_name(cluster) for w in writes):
            return False
        return any(self.ctx.kube.get(k.SECRET, cluster.namespace, name) is not None
                   for name in dict.fromkeys((cluster.node_secret, cluster.client_secret)))

    def run(self, p: ObjectPass) -> None:
        cluster = p.cluster
        assert cluster is not None
        names = set(secret_names(cluster))
        secrets: dict[str, Obj] = {}
        for name in names:
            found = self.ctx.view.peek(k.SECRET, cluster.namespace, name)
            if (found is None and cluster.user_provided_certs) or \
                    (found is not None and "data" not in found):
                # A user's own Secrets need not carry our label, so the cache may not hold
                # them; one the cache keeps without its data (not ours: kinds.slim) is read.
                found = self.ctx.kube.get(k.SECRET, cluster.namespace, name)
            if found is not None:
                secrets[name] = found
        if self.unmarked(p, cluster, secrets):
            return
        if not p.paused:
            for name in sorted(secrets):
                if not self.release(p, secrets[name]):
                    return
        node = secrets.get(cluster.node_secret)
        expiry = earliest_expiry(node) if node is not None else None
        self.ctx.metrics.cluster_certificate_expiry(
            p.key.namespace, p.key.name, expiry.timestamp() if expiry is not None else None)
        plan = certs_action(cluster, secrets, datetime.fromtimestamp(p.now, UTC))
        stale = any(self.memory.marks.in_flight(self.ctx.kube, p.key, f"Secret/{name}", k.SECRET,
                                                cluster.namespace, name, secrets.get(name))
                    for name in names)
        if stale:
            # Planned from Secrets we have just written: wait for the cache to show ours.
            p.requeue_in(STALE_RECHECK_S)
            p.complete = False
        elif not p.paused and self._ca_only_seems_new(cluster, plan.writes):
            # The cache lost sight of Secrets signed by the CA (a watch behind by more than the
            # grace of our own writes): a new CA now would split the cluster's trust.
            p.requeue_in(SHORT_REQUEUE_S)
            p.complete = False
        elif not p.paused:
            for write in plan.writes:
                body = write.secret  # no owner: kept if the cluster is deleted
                target = f"Secret/{write.name}"
                try:
                    if write.verb == "create":
                        self.memory.repairer.create(body)
                    else:
                        self.memory.repairer.apply(body)
                except ApiError as error:
                    if error.conflict:
                        # The cache was stale: never overwrite a CA we have not seen.
                        p.requeue_in(SHORT_REQUEUE_S)
                        p.complete = False
                        return
                    raise
                self.memory.marks.wrote(p.key, target, secrets.get(write.name))
                p.act("CertificateWritten", target, write.reason)
        for problem in plan.problems:
            p.stalled.append(("CertificatesUnusable", format_problem(problem)))
        for warning in plan.warnings:
            p.events.append(("Warning", "CertificateWarning", format_problem(warning)))
        certs_hash = plan.certs_hash
        if certs_hash is None or plan.problems or stale:
            # Keep what the pods run with: never roll them onto unusable certificates, nor
            # onto a plan made from Secrets older than the ones we wrote.
            live = self.ctx.view.peek(k.STATEFUL_SET, cluster.namespace, cluster.name)
            template = ((live or {}).get("spec") or {}).get("template") or {}
            certs_hash = (meta(template).get("annotations") or {}).get(CERTS_HASH_ANNOTATION)
        if certs_hash:
            p.live = replace(p.live, certs_hash=certs_hash)


    def release(self, p: ObjectPass, secret: Obj) -> bool:
        """Remove this KaiwuCluster's ownerReference from a Secret an earlier version wrote
        with it (and mark it TLS_SECRET_LABEL=true, so the caches keep its data): deleting the
        cluster then keeps it. False, and the pass requeued, when the Secret changed under us.
        Nothing is written for a Secret without that reference, nor twice for one whose patch
        the cache does not show yet (WriteMarks, under a key of its own: the data is unchanged,
        so the plan need not wait for the cache, and the cluster stays Ready throughout)."""
        md = meta(secret)
        refs = md.get("ownerReferences") or []
        ours = [index for index, ref in enumerate(refs) if _this_cluster(ref, p.key.name)]
        target = f"Secret/{md.get('name')}"
        mark = f"{target}#released"
        if not ours or self.memory.marks.stale(p.key, mark, secret):
            return True
        ops: list[Obj] = [{"op": "test", "path": "/metadata/resourceVersion",
                           "value": md.get("resourceVersion")}]
        if len(ours) == len(refs):
            ops.append({"op": "remove", "path": "/metadata/ownerReferences"})
        else:
            ops += [{"op": "remove", "path": f"/metadata/ownerReferences/{index}"}
                    for index in reversed(ours)]
        label = "/metadata/labels/" + TLS_SECRET_LABEL.replace("~", "~0").replace("/", "~1")
        ops.append({"op": "add", "path": label, "value": "true"} if md.get("labels") else
                   {"op": "add", "path": "/metadata/labels", "value": {TLS_SECRET_LABEL: "true"}})
        try:
            self.memory.repairer.json_patch(secret, ops)
        except ApiError as error:
            if error.conflict or error.status == 422:
                # Changed since the cache showed it (the test failed): look again shortly.
                p.requeue_in(SHORT_REQUEUE_S)
                p.complete = False
                return False
            raise
        self.memory.marks.wrote(p.key, mark, secret)
        p.act("SecretKept", target, "no longer owned by the KaiwuCluster: deleting the cluster "
              "keeps it, as it keeps the volumes")
        return True


def _this_cluster(ref: Obj, name: str) -> bool:
    return (ref.get("kind") == k.KAIWU_CLUSTER.kind and ref.get("name") == name
            and str(ref.get("apiVersion", "")).startswith(f"{k.KAIWU_CLUSTER.group}/"))


def _spec_field(cluster: Cluster, secret: str) -> str:
    """The spec.tls field that names one of the user's own Secrets."""
    return "nodeSecretName" if secret == cluster.node_secret else "clientSecretName"


def mounted_secrets(statefulset: Obj | None) -> set[str]:
    """The Secrets a StatefulSet's pods mount: whole (`secret`) or as a projected volume's
    sources (the certs volume, renderer.builders)."""
    volumes = ((((statefulset or {}).get("spec") or {}).get("template") or {}).get("spec")
               or {}).get("volumes") or ()
    names = set()
    for volume in volumes:
        if (volume.get("secret") or {}).get("secretName"):
            names.add(str(volume["secret"]["secretName"]))
        for source in (volume.get("projected") or {}).get("sources") or ():
            if (source.get("secret") or {}).get("name"):
                names.add(str(source["secret"]["name"]))
    return names
