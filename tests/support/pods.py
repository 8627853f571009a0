"""A plain KaiwuDB StatefulSet in the test world, without the reconciler: what a user applies,
what they look at (`kubectl get -o json`, `kubectl exec`), and the `cluster` fixture, a started
and initialised three-node KaiwuDB (tests/conftest.py registers it).

Used by the simulator's self-tests (tests/world/selftest/) and the adapter stories
(tests/world_stories/adapters/).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

from reconciler.kube.podexec import exit_status
from tests.support.waiting import eventually
from tests.world.simworld import SimWorld

IMAGE = "kwdb/kwdb:3.2.1"


# ---- what a user applies ----------------------------------------------------------------------


def kaiwu_statefulset(
    name: str, namespace: str, *, replicas: int = 3, extra_args: Sequence[str] = ()
) -> dict[str, Any]:
    """A minimal StatefulSet with the renderer's contract: kwdb image, `kwbase start` with
    --flag=value arguments, a `data` volume claim template, required anti-affinity by host."""
    domain = f"{name}.{namespace}.svc.cluster.local"
    join = ",".join(f"{name}-{i}.{domain}:26257" for i in range(min(replicas, 3)))
    labels = {
        "app.kubernetes.io/name": "kaiwudb",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "database",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 60,
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": labels},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "kwbase",
                            "image": IMAGE,
                            "command": [
                                "/kaiwudb/bin/kwbase",
                                "start",
                                "--insecure",
                                "--listen-addr=0.0.0.0:26257",
                                f"--advertise-addr=$(POD_NAME).{domain}:26257",
                                "--brpc-addr=:27257",
                                "--http-addr=0.0.0.0:8080",
                                "--store=/kaiwudb/deploy/data",
                                f"--join={join}",
                                "--cache=.25",
                                "--max-sql-memory=.25",
                                "--logtostderr",
                                *extra_args,
                            ],
                            "env": [
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                }
                            ],
                            "ports": [
                                {"name": "sql", "containerPort": 26257},
                                {"name": "http", "containerPort": 8080},
                                {"name": "brpc", "containerPort": 27257},
                            ],
                            "readinessProbe": {
                                "httpGet": {"path": "/health?ready=1", "port": "http"},
                                "periodSeconds": 5,
                                "failureThreshold": 2,
                            },
                            "livenessProbe": {
                                "httpGet": {"path": "/health", "port": "http"},
                                "periodSeconds": 5,
                                "failureThreshold": 3,
                            },
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/kaiwudb/deploy/data"}
                            ],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Gi"}},
                    },
                }
            ],
        },
    }


def headless_service(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"app.kubernetes.io/instance": name},
            "ports": [{"name": "sql", "port": 26257}, {"name": "http", "port": 8080}],
        },
    }


# ---- what a user looks at ---------------------------------------------------------------------

Obj = dict[str, Any]


def as_json(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """An API read as the JSON the server sent (what `kubectl get -o json` shows)."""
    resp = call(*args, _preload_content=False, **kwargs)
    data: Obj = json.loads(resp.data)
    return data


def read_pod(core: k8s.CoreV1Api, namespace: str, name: str) -> Obj:
    return as_json(core.read_namespaced_pod, name, namespace)


def list_pods(core: k8s.CoreV1Api, namespace: str) -> list[Obj]:
    items: list[Obj] = as_json(core.list_namespaced_pod, namespace)["items"]
    return sorted(items, key=lambda p: str(p["metadata"]["name"]))


def is_ready(pod: Obj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def container(pod: Obj) -> Obj:
    """The kwbase container's status (an empty dict before the kubelet reported one)."""
    statuses: list[Obj] = pod.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0]


@dataclass(frozen=True)
class Exec:
    stdout: str
    stderr: str
    exit_code: int | None


def kubectl_exec(core: k8s.CoreV1Api, namespace: str, pod: str, argv: Sequence[str]) -> Exec:
    """`kubectl exec pod -- argv` through the real apiserver's websocket exec, with the Python
    client's default offer (v5 first: a 1.36 API server translates it to SPDY towards the
    kubelet, which the reconciler's own exec avoids by offering v4 alone, Kube.exec)."""
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container="kwbase",
        command=list(argv),
        stdin=False,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=30)
    try:
        # The status read with the reconciler's reader (ExecNotRun when the command never ran).
        code = exit_status(resp.read_channel(ERROR_CHANNEL) if not resp.is_open() else "")
        return Exec(resp.read_stdout(), resp.read_stderr(), code)
    finally:
        resp.close()


def kwbase_status(core: k8s.CoreV1Api, namespace: str, pod: str) -> list[dict[str, str]]:
    host = f"{pod}.kdb.{namespace}.svc.cluster.local:26257"
    result = kubectl_exec(
        core, namespace, pod,
        ["/kaiwudb/bin/kwbase", "node", "status", "--format", "csv", "--insecure",
         f"--host={host}"],
    )
    assert result.exit_code == 0, result
    return list(csv.DictReader(io.StringIO(result.stdout)))


def start_cluster(kube: k8s.ApiClient, namespace: str, **kwargs: Any) -> None:
    service = k8s.V1Service.from_dict(headless_service("kdb", namespace))
    statefulset = k8s.V1StatefulSet.from_dict(kaiwu_statefulset("kdb", namespace, **kwargs))
    assert service is not None and statefulset is not None
    k8s.CoreV1Api(kube).create_namespaced_service(namespace, service)
    k8s.AppsV1Api(kube).create_namespaced_stateful_set(namespace, statefulset)


def running_pods(core: k8s.CoreV1Api, namespace: str, count: int) -> list[Obj] | None:
    running = [p for p in list_pods(core, namespace)
               if p.get("status", {}).get("phase") == "Running"
               and "running" in container(p).get("state", {})]
    return running if len(running) == count else None


def ready_pods(core: k8s.CoreV1Api, namespace: str, count: int) -> list[Obj] | None:
    ready = [p for p in list_pods(core, namespace) if is_ready(p)]
    return ready if len(ready) == count else None


def init_cluster(core: k8s.CoreV1Api, namespace: str) -> None:
    host = f"kdb-0.kdb.{namespace}.svc.cluster.local:26257"
    result = kubectl_exec(core, namespace, "kdb-0",
                          ["/kaiwudb/bin/kwbase", "init", "--insecure", f"--host={host}"])
    assert result.exit_code == 0, result
    assert "Cluster successfully initialized" in result.stdout + result.stderr


def replacement(core: k8s.CoreV1Api, namespace: str, old: Obj) -> Obj | None:
    """The Ready pod the StatefulSet made under old's name, once there is one."""
    return next((p for p in list_pods(core, namespace)
                 if p["metadata"]["name"] == old["metadata"]["name"]
                 and p["metadata"]["uid"] != old["metadata"]["uid"] and is_ready(p)), None)


@pytest.fixture
def cluster(sim_world: SimWorld, kube: k8s.ApiClient, namespace: str) -> list[Obj]:
    """A started and initialised three-node KaiwuDB; its pods, Ready, sorted by name."""
    core = k8s.CoreV1Api(kube)
    start_cluster(kube, namespace)
    eventually(lambda: running_pods(core, namespace, 3), 60, "three running kwbase pods")
    init_cluster(core, namespace)
    return eventually(lambda: ready_pods(core, namespace, 3), 60, "three ready pods")
