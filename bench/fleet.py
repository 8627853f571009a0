"""The fleet every benchmark measures: N KaiwuCluster specs, deterministic, varied the way a
platform team's clusters vary (dev, production-style TLS spread over zones, single node; sizes,
replica counts, namespaces shared by several clusters).

Used by the scripts in bench/ (render, diff, resync CPU, cache memory, repair latency) and by the
fleet stories, so every figure is measured on the same fleet. `fleet_specs(1000)` is the issue's
"1,000 generated clusters".
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ("dev.yaml", "production.yaml", "single-node.yaml")
NAMESPACES = 50


def _templates() -> list[dict[str, Any]]:
    yaml = YAML(typ="safe", pure=True)
    return [yaml.load((ROOT / "clusters" / name).read_text()) for name in TEMPLATES]


def fleet_specs(count: int) -> list[dict[str, Any]]:
    """`count` KaiwuCluster objects as a user would commit them: cluster i is named
    `fleet-<i>` in namespace `team-<i mod 50>`, shaped after one of the example clusters, with
    its replica count and volume size varied (multi-replica clusters keep at least 3 nodes)."""
    templates = _templates()
    fleet = []
    for index in range(count):
        spec_source = templates[index % len(templates)]
        obj = copy.deepcopy(spec_source)
        obj["metadata"] = {"name": f"fleet-{index:04d}",
                           "namespace": f"team-{index % NAMESPACES:02d}"}
        spec = obj["spec"]
        if spec.get("startMode", "multi-replica") == "multi-replica":
            spec["replicas"] = 3 + index % 5
        spec["storage"]["size"] = f"{10 + index % 90}Gi"
        spec.setdefault("labels", {})["fleet-index"] = str(index)
        fleet.append(obj)
    return fleet


def write_fleet(directory: Path, count: int) -> list[Path]:
    """The fleet as files, one cluster per file (`<namespace>/<name>.yaml`), as a git
    repository of cluster specs holds it; returns the paths written."""
    yaml = YAML()
    yaml.default_flow_style = False
    paths = []
    for obj in fleet_specs(count):
        path = directory / obj["metadata"]["namespace"] / f"{obj['metadata']['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            yaml.dump(obj, out)
        paths.append(path)
    return paths


# ---- the fleet as the API server holds it ------------------------------------------------------
#
# `live_fleet(n)` is what the reconciler's caches hold for the fleet once it is reconciled and
# running: each cluster's rendered objects as a 1.20 API server returns them after our
# server-side apply (uid, resourceVersion, creationTimestamp, managedFields, the server's
# defaults, status), and the objects others make for it: one Pod and one claim per replica (as
# the StatefulSet controller, the scheduler and a kubelet leave them) and, for TLS clusters, the
# three certificate Secrets. Modelled on objects read back from the test world's apiserver
# (tests/unit/reconciler/drift/test_compare.py writes one StatefulSet out by hand); the
# benchmarks only need the shape and size to be right, and `tests/unit/bench/test_fleet.py`
# checks that the drift comparison finds every rendered object in sync.

STAMP = "2026-11-30T08:00:00Z"
FIELD_MANAGER = "kaiwu-reconciler"
PEM_BYTES = 1200  # a PEM certificate or key, about what kaiwudb/certs/ issues (EC P-256, base64)


@dataclass(frozen=True)
class LiveCluster:
    """One cluster of the live fleet: the KaiwuCluster, its rendered objects (owned, as the
    controller applies them), those objects live, and the objects others made for it."""

    cluster: dict[str, Any]
    desired: list[dict[str, Any]]
    live: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    secrets: list[dict[str, Any]]

    def cached(self) -> list[dict[str, Any]]:
        """Everything the reconciler's caches hold for this cluster."""
        return [self.cluster, *self.live, *self.pods, *self.claims, *self.secrets]


def _uid(*parts: object) -> str:
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _key_of(item: Mapping[str, Any]) -> str | None:
    """The managedFields key of a keyed-list item (the merge keys the API declares)."""
    if "containerPort" in item:
        return json.dumps({"containerPort": item["containerPort"],
                           "protocol": item.get("protocol", "TCP")}, separators=(",", ":"))
    if "port" in item and "name" in item:
        return json.dumps({"port": item["port"], "protocol": item.get("protocol", "TCP")},
                          separators=(",", ":"))
    if "mountPath" in item:
        return json.dumps({"mountPath": item["mountPath"]}, separators=(",", ":"))
    if "name" in item and isinstance(item["name"], str):
        return json.dumps({"name": item["name"]}, separators=(",", ":"))
    return None


def fields_v1(value: Any) -> dict[str, Any]:
    """FieldsV1 of an applied object: every field it sets, keyed lists by their merge keys,
    other lists atomic (owned whole)."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping):
        for key, child in value.items():
            if isinstance(child, Mapping) and child:
                out[f"f:{key}"] = fields_v1(child)
            elif isinstance(child, list) and child and all(
                    isinstance(item, Mapping) and _key_of(item) for item in child):
                out[f"f:{key}"] = {f"k:{_key_of(item)}": {".": {}, **fields_v1(item)}
                                   for item in child}
            else:
                out[f"f:{key}"] = {}
    return out


def _entry(manager: str, operation: str, api_version: str, fields: dict[str, Any],
           subresource: str = "") -> dict[str, Any]:
    found = {"manager": manager, "operation": operation, "apiVersion": api_version,
             "time": STAMP, "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        found["subresource"] = subresource
    return found


def _metadata(obj: Mapping[str, Any], version: int, managed: list[dict[str, Any]],
              generation: bool = False) -> dict[str, Any]:
    md = dict(copy.deepcopy(obj["metadata"]))
    md.update(uid=_uid(obj["kind"], md.get("namespace"), md["name"]),
              resourceVersion=str(version), creationTimestamp=STAMP, managedFields=managed)
    if generation:
        md["generation"] = 1
    return md


def _container_defaults(container: dict[str, Any]) -> None:
    container.setdefault("imagePullPolicy", "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or ():
        port.setdefault("protocol", "TCP")
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(name)
        if probe:
            probe.setdefault("timeoutSeconds", 1)
            probe.setdefault("periodSeconds", 10)
            probe.setdefault("successThreshold", 1)
            probe.setdefault("failureThreshold", 3)
            if "httpGet" in probe:
                probe["httpGet"].setdefault("scheme", "HTTP")
    for env in container.get("env") or ():
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if field_ref:
            field_ref.setdefault("apiVersion", "v1")


def _pod_spec_defaults(spec: dict[str, Any]) -> None:
    for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        _container_defaults(container)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    if spec.get("serviceAccountName"):
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
    for volume in spec.get("volumes") or ():
        for source in ("secret", "configMap"):
            if source in volume:
                volume[source].setdefault("defaultMode", 420)


def _defaults_and_status(live: dict[str, Any], index: int) -> None:
    """What the API server and the other controllers add to an object we applied."""
    kind = live["kind"]
    spec: dict[str, Any] = live.get("spec") or {}
    if kind == "StatefulSet":
        spec.setdefault("revisionHistoryLimit", 10)
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if strategy.get("type") == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {"partition": 0})
        template = spec["template"]
        template.setdefault("metadata", {})["creationTimestamp"] = None
        _pod_spec_defaults(template["spec"])
        for claim in spec.get("volumeClaimTemplates") or ():
            claim.setdefault("apiVersion", "v1")
            claim.setdefault("kind", "PersistentVolumeClaim")
            claim["metadata"]["creationTimestamp"] = None
            claim["spec"].setdefault("volumeMode", "Filesystem")
            claim["status"] = {"phase": "Pending"}
        replicas = spec.get("replicas", 1)
        revision = f"{live['metadata']['name']}-{_uid(index)[:10]}"
        live["status"] = {"collisionCount": 0, "currentReplicas": replicas,
                          "currentRevision": revision, "observedGeneration": 1,
                          "readyReplicas": replicas, "replicas": replicas,
                          "updateRevision": revision, "updatedReplicas": replicas}
    elif kind == "Service":
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("clusterIP") != "None":
            spec["clusterIP"] = f"10.96.{index // 250 % 250}.{index % 250 + 1}"
            spec["clusterIPs"] = [spec["clusterIP"]]
        else:
            spec["clusterIPs"] = ["None"]
        for port in spec.get("ports") or ():
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port["port"])
        live["status"] = {"loadBalancer": {}}
    elif kind == "ServiceAccount":
        live["secrets"] = [{"name": f"{live['metadata']['name']}-token-{_uid(index)[:5]}"}]
    elif kind == "PodDisruptionBudget":
        live["status"] = {"currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1,
                          "expectedPods": 3, "observedGeneration": 1}


def _live_object(desired: dict[str, Any], version: int, index: int) -> dict[str, Any]:
    """`desired` as the API server returns it after our apply and the controllers' work."""
    live = copy.deepcopy(desired)
    applied = {key: value for key, value in desired.items()
               if key not in ("apiVersion", "kind")}
    managed = [_entry(FIELD_MANAGER, "Apply", desired["apiVersion"], fields_v1(applied))]
    if desired["kind"] in ("StatefulSet", "PodDisruptionBudget"):
        managed.append(_entry("kube-controller-manager", "Update", desired["apiVersion"],
                              {"f:status": {".": {}, "f:observedGeneration": {},
                                            "f:replicas": {}}}, subresource="status"))
    live["metadata"] = _metadata(desired, version, managed,
                                 generation=desired["kind"] != "ServiceAccount")
    _defaults_and_status(live, index)
    return live


def _pod(sts: dict[str, Any], ordinal: int, version: int, node: str) -> dict[str, Any]:
    """One pod of the StatefulSet, Running and Ready, as kubelet and controllers leave it."""
    name = f"{sts['metadata']['name']}-{ordinal}"
    namespace = sts["metadata"]["namespace"]
    template = copy.deepcopy(sts["spec"]["template"])
    spec = template["spec"]
    spec.update(hostname=name, subdomain=sts["spec"].get("serviceName", ""), nodeName=node,
                enableServiceLinks=True, priority=0, preemptionPolicy="PreemptLowerPriority")
    spec.setdefault("volumes", []).extend([
        {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}},
        {"name": f"{spec.get('serviceAccountName', 'default')}-token-abcde",
         "secret": {"secretName": f"{spec.get('serviceAccountName', 'default')}-token-abcde",
                    "defaultMode": 420}}])
    spec["tolerations"] = [
        {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300} for taint in ("not-ready", "unreachable")]
    for container in spec["containers"]:
        container.setdefault("volumeMounts", []).append({
            "name": f"{spec.get('serviceAccountName', 'default')}-token-abcde",
            "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    labels = {**template["metadata"].get("labels", {}),
              "controller-revision-hash": sts["status"]["updateRevision"],
              "statefulset.kubernetes.io/pod-name": name}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "generateName": f"{sts['metadata']['name']}-", "namespace": namespace,
        "labels": labels, "annotations": template["metadata"].get("annotations", {}),
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                             "name": sts["metadata"]["name"], "uid": sts["metadata"]["uid"],
                             "controller": True, "blockOwnerDeletion": True}]},
        "spec": spec}
    ip = f"10.244.{ordinal}.{version % 250 + 1}"
    started = {"running": {"startedAt": STAMP}}
    pod["status"] = {
        "phase": "Running", "hostIP": "172.18.0.2", "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": STAMP, "qosClass": "Burstable",
        "conditions": [{"type": kind, "status": "True", "lastProbeTime": None,
                        "lastTransitionTime": STAMP}
                       for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [{
            "name": container["name"], "ready": True, "restartCount": 0, "started": True,
            "image": container["image"], "imageID": f"docker-pullable://{container['image']}"
            f"@sha256:{_uid(container['image']).replace('-', '') * 2}",
            "containerID": f"containerd://{_uid(name, container['name']).replace('-', '') * 2}",
            "state": started, "lastState": {}} for container in spec["containers"]]}
    managed = [
        _entry("kube-controller-manager", "Update", "v1", fields_v1(
            {"metadata": {key: pod["metadata"][key] for key in
                          ("generateName", "labels", "ownerReferences")}, "spec": spec})),
        _entry("kubelet", "Update", "v1", fields_v1({"status": pod["status"]}),
               subresource="status")]
    pod["metadata"] = _metadata(pod, version, managed)
    return pod


def _claim(sts: dict[str, Any], ordinal: int, version: int, node: str) -> dict[str, Any]:
    """The claim of one pod, bound to a node-local volume."""
    template = sts["spec"]["volumeClaimTemplates"][0]
    name = f"{template['metadata']['name']}-{sts['metadata']['name']}-{ordinal}"
    spec = {**copy.deepcopy(template["spec"]), "volumeName": f"pvc-{_uid(name)}"}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
        "name": name, "namespace": sts["metadata"]["namespace"],
        "labels": dict(template["metadata"].get("labels", {})),
        "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                        "pv.kubernetes.io/bound-by-controller": "yes",
                        "volume.beta.kubernetes.io/storage-provisioner": "kaiwu.test/local",
                        "volume.kubernetes.io/selected-node": node},
        "finalizers": ["kubernetes.io/pvc-protection"]},
        "spec": spec,
        "status": {"phase": "Bound", "accessModes": spec.get("accessModes", []),
                   "capacity": dict(spec["resources"]["requests"])}}
    managed = [_entry("kube-controller-manager", "Update", "v1", fields_v1(
        {"metadata": claim["metadata"], "spec": spec, "status": claim["status"]})),
        _entry("kube-scheduler", "Update", "v1", {"f:metadata": {"f:annotations": {
            "f:volume.kubernetes.io/selected-node": {}}}})]
    claim["metadata"] = _metadata(claim, version, managed)
    return claim


def _secrets(cluster: dict[str, Any], version: int) -> list[dict[str, Any]]:
    """The CA, node and root client certificate Secrets the certificates step keeps (owned by
    their KaiwuCluster, as the step writes them)."""
    from reconciler.model import with_owner

    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    pem = base64.b64encode(b"-" * PEM_BYTES).decode()
    layouts = {f"{name}-ca": ("ca.crt", "ca.key"),
               f"{name}-node": ("ca.crt", "node.crt", "node.key"),
               f"{name}-client-root": ("ca.crt", "client.root.crt", "client.root.key")}
    found = []
    for offset, (secret, keys) in enumerate(layouts.items()):
        obj = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": secret, "namespace": namespace, "labels": {
                   "app.kubernetes.io/managed-by": "kaiwu-operator",
                   "app.kubernetes.io/instance": name}},
               "data": {key: pem for key in keys}}
        obj["metadata"] = _metadata(obj, version + offset, [_entry(
            FIELD_MANAGER, "Update", "v1", fields_v1({"metadata": obj["metadata"],
                                                      "data": obj["data"], "type": "Opaque"}))])
        found.append(with_owner(obj, cluster))
    return found


def live_fleet(count: int, nodes: int = 20) -> list[LiveCluster]:
    """`fleet_specs(count)` reconciled and running (see the comment above): rendered for
    Kubernetes 1.20, pods spread round-robin over `nodes` Kubernetes nodes (`node-<i>`)."""
    # Imported here: `fleet_specs` alone (the render benchmarks) needs nothing of the reconciler.
    from reconciler.model import with_owner
    from renderer.render import build_objects, read_live
    from renderer.settings import KubeVersion, RenderSettings

    settings = RenderSettings(kube_version=KubeVersion.parse("v1.20.2"))
    version = 1000
    fleet = []
    placed = 0
    for index, obj in enumerate(fleet_specs(count)):
        obj.setdefault("apiVersion", "kaiwu.inspur.com/v1")
        obj.setdefault("kind", "KaiwuCluster")
        version += 1
        obj["metadata"] = _metadata(obj, version, [_entry(
            "kubectl-client-side-apply", "Update", "kaiwu.inspur.com/v1",
            fields_v1({"spec": obj["spec"]}))], generation=True)
        obj["status"] = {"observedGeneration": 1, "phase": "Ready", "conditions": [
            {"type": kind, "status": status, "reason": "AsExpected", "message": "",
             "lastTransitionTime": STAMP, "observedGeneration": 1}
            for kind, status in (("Ready", "True"), ("Reconciling", "False"),
                                 ("Stalled", "False"), ("Drifted", "False"))]}
        desired = [with_owner(each, obj) for each in build_objects(read_live(obj), settings)]
        live = []
        for each in desired:
            version += 1
            live.append(_live_object(each, version, index))
        sts = next(each for each in live if each["kind"] == "StatefulSet")
        pods, claims = [], []
        for ordinal in range(int(sts["spec"].get("replicas", 1))):
            node = f"node-{placed % nodes}"
            placed += 1
            version += 2
            pods.append(_pod(sts, ordinal, version, node))
            claims.append(_claim(sts, ordinal, version + 1, node))
        tls = bool((obj["spec"].get("tls") or {}).get("enabled"))
        secrets = _secrets(obj, version + 1) if tls else []
        version += 3
        fleet.append(LiveCluster(obj, desired, live, pods, claims, secrets))
    return fleet


def drifted_copy(live: dict[str, Any], version: int) -> dict[str, Any]:
    """`live` after a hand edit (a new resourceVersion): an env var added to a StatefulSet
    (kubectl set env), a label value changed elsewhere (kubectl label --overwrite)."""
    edited = copy.deepcopy(live)
    edited["metadata"]["resourceVersion"] = str(version)
    if edited["kind"] == "StatefulSet":
        container = edited["spec"]["template"]["spec"]["containers"][0]
        container.setdefault("env", []).append({"name": "KWBASE_DEBUG", "value": "1"})
        edited["metadata"]["managedFields"].append(_entry(
            "kubectl-set", "Update", "apps/v1", {"f:spec": {"f:template": {"f:spec": {
                "f:containers": {f'k:{{"name":"{container["name"]}"}}': {"f:env": {
                    'k:{"name":"KWBASE_DEBUG"}': {".": {}, "f:name": {}, "f:value": {}}}}}}}}}))
    else:
        edited["metadata"]["labels"]["app.kubernetes.io/name"] = "changed-by-hand"
    return edited
