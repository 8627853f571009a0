"""Stories of drift detection: what a user or another tool does to live objects, and whether the
reconciler calls it drift.

The live objects are written out by hand as a Kubernetes 1.20 API server returns them (defaults,
allocated addresses, status, managedFields in FieldsV1 form), modelled on objects read back from
the test world's real apiserver. The same against that real apiserver:
tests/world_stories/drift/test_compare.py.

They reach the whole of the normalisation through reconciler.drift.normalise: its walk over maps
and scalars (reconciler.drift.walker) and lists (reconciler.drift.lists), where it stands
(reconciler.drift.position) and what it gives (reconciler.drift.projection).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Any, cast

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reconciler.controller.observe import others_added
from reconciler.drift import compare as compare_module
from reconciler.drift.compare import (
    Change,
    DriftReport,
    compare,
    format_report,
    projection_hash,
    report,
)
from reconciler.drift.ignore import IgnoreRule, format_pointer, parse_ignore_rules, parse_pointer
from reconciler.drift.managed_fields import (
    FieldsV1Error,
    PathElement,
    parse_fields_v1,
    parse_managed_fields,
)
from reconciler.drift.normalise import normalise
from reconciler.drift.projection import DriftSettings, Projection
from renderer.quantity import comparable, parse
from tests.support.hypothesis_profiles import examples

Obj = dict[str, Any]
SETTINGS = DriftSettings(mask_key=b"test-key")
LABELS = {
    "app.kubernetes.io/name": "kaiwudb",
    "app.kubernetes.io/instance": "kwdb",
    "app.kubernetes.io/managed-by": "kaiwu-operator",
    "app.kubernetes.io/component": "database",
}
SELECTOR = {"app.kubernetes.io/name": "kaiwudb", "app.kubernetes.io/instance": "kwdb"}
JOIN = ",".join(f"kwdb-{i}.kwdb.kaiwu.svc.cluster.local:26257" for i in range(3))
COMMAND = [
    "/kaiwudb/bin/kwbase",
    "start",
    "--insecure",
    "--listen-addr=0.0.0.0:26257",
    "--advertise-addr=$(POD_NAME).kwdb.kaiwu.svc.cluster.local:26257",
    "--brpc-addr=:27257",
    "--http-addr=0.0.0.0:8080",
    "--store=/kaiwudb/deploy/data",
    f"--join={JOIN}",
    "--cache=.25",
    "--max-sql-memory=.25",
    "--logtostderr",
]
KWBASE = 'k:{"name":"kwbase"}'


def check(desired: Obj, live: Obj | None, **kwargs: Any) -> DriftReport:
    return compare(desired, live, settings=SETTINGS, **kwargs)


def change_at(report: DriftReport, pointer: str) -> Change:
    found = [change for change in report.changes if change.pointer == pointer]
    assert found, f"no change at {pointer}; report:\n{format_report(report)}"
    return found[0]


def desired_statefulset() -> Obj:
    """The StatefulSet as the renderer emits it for a three-node insecure cluster."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "kwdb", "namespace": "kaiwu", "labels": dict(LABELS)},
        "spec": {
            "serviceName": "kwdb",
            "replicas": 3,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": dict(SELECTOR)},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "serviceAccountName": "kwdb",
                    "terminationGracePeriodSeconds": 60,
                    "containers": [
                        {
                            "name": "kwbase",
                            "image": "kwdb/kwdb:2.1.0",
                            "command": list(COMMAND),
                            "env": [
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                },
                                {"name": "LD_LIBRARY_PATH", "value": "/kaiwudb/lib"},
                            ],
                            "ports": [
                                {"name": "sql", "containerPort": 26257},
                                {"name": "http", "containerPort": 8080},
                                {"name": "brpc", "containerPort": 27257},
                            ],
                            "livenessProbe": {
                                "httpGet": {"path": "/health", "port": "http"},
                                "initialDelaySeconds": 30,
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/health?ready=1", "port": "http"},
                                "periodSeconds": 5,
                            },
                            "resources": {
                                "requests": {"cpu": "1000m", "memory": "2Gi"},
                                "limits": {"memory": "4Gi"},
                            },
                            "volumeMounts": [{"name": "data", "mountPath": "/kaiwudb/deploy/data"}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data", "labels": dict(SELECTOR)},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Gi"}},
                    },
                }
            ],
        },
    }


def _labels_fields() -> Obj:
    return {f"f:{key}": {} for key in LABELS}


def applied_fields() -> Obj:
    """FieldsV1 of our server-side apply of desired_statefulset(): exactly what we sent."""
    probe: Obj = {"f:httpGet": {"f:path": {}, "f:port": {}}}
    return {
        "f:metadata": {"f:labels": _labels_fields()},
        "f:spec": {
            "f:podManagementPolicy": {},
            "f:replicas": {},
            "f:selector": {},
            "f:serviceName": {},
            "f:template": {
                "f:metadata": {"f:labels": _labels_fields()},
                "f:spec": {
                    "f:containers": {
                        KWBASE: {
                            ".": {},
                            "f:command": {},
                            "f:env": {
                                'k:{"name":"POD_NAME"}': {
                                    ".": {},
                                    "f:name": {},
                                    "f:valueFrom": {"f:fieldRef": {"f:fieldPath": {}}},
                                },
                                'k:{"name":"LD_LIBRARY_PATH"}': {
                                    ".": {},
                                    "f:name": {},
                                    "f:value": {},
                                },
                            },
                            "f:image": {},
                            "f:livenessProbe": {**probe, "f:initialDelaySeconds": {}},
                            "f:name": {},
                            "f:ports": {
                                f'k:{{"containerPort":{port},"protocol":"TCP"}}': {
                                    ".": {},
                                    "f:containerPort": {},
                                    "f:name": {},
                                }
                                for port in (26257, 8080, 27257)
                            },
                            "f:readinessProbe": {**probe, "f:periodSeconds": {}},
                            "f:resources": {
                                "f:limits": {"f:memory": {}},
                                "f:requests": {"f:cpu": {}, "f:memory": {}},
                            },
                            "f:volumeMounts": {
                                'k:{"mountPath":"/kaiwudb/deploy/data"}': {
                                    ".": {},
                                    "f:mountPath": {},
                                    "f:name": {},
                                }
                            },
                        }
                    },
                    "f:serviceAccountName": {},
                    "f:terminationGracePeriodSeconds": {},
                },
            },
            "f:updateStrategy": {"f:type": {}},
            "f:volumeClaimTemplates": {},
        },
    }


def status_fields() -> Obj:
    return {
        "f:status": {
            f"f:{name}": {}
            for name in (
                "collisionCount",
                "currentReplicas",
                "currentRevision",
                "observedGeneration",
                "readyReplicas",
                "replicas",
                "updateRevision",
                "updatedReplicas",
            )
        }
    }


def entry(manager: str, operation: str, fields: Obj, api_version: str = "apps/v1") -> Obj:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": "2021-03-04T10:15:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def live_statefulset() -> Obj:
    """What a 1.20 API server returns for desired_statefulset() after our apply and a rollout."""
    probe_defaults = {"successThreshold": 1, "timeoutSeconds": 1, "failureThreshold": 3}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "kwdb",
            "namespace": "kaiwu",
            "uid": "b2e83eaf-2de7-498e-85e2-e3a96d644d9b",
            "resourceVersion": "48211",
            "generation": 1,
            "creationTimestamp": "2021-03-04T10:15:00Z",
            "labels": dict(LABELS),
            "managedFields": [
                entry("kaiwu-reconciler", "Apply", applied_fields()),
                entry("kube-controller-manager", "Update", status_fields()),
            ],
        },
        "spec": {
            "podManagementPolicy": "Parallel",
            "replicas": 3,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": dict(SELECTOR)},
            "serviceName": "kwdb",
            "template": {
                "metadata": {"creationTimestamp": None, "labels": dict(LABELS)},
                "spec": {
                    "containers": [
                        {
                            "command": list(COMMAND),
                            "env": [
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.name",
                                        }
                                    },
                                },
                                {"name": "LD_LIBRARY_PATH", "value": "/kaiwudb/lib"},
                            ],
                            "image": "kwdb/kwdb:2.1.0",
                            "imagePullPolicy": "IfNotPresent",
                            "livenessProbe": {
                                "httpGet": {"path": "/health", "port": "http", "scheme": "HTTP"},
                                "initialDelaySeconds": 30,
                                "periodSeconds": 10,
                                **probe_defaults,
                            },
                            "name": "kwbase",
                            "ports": [
                                {"containerPort": 26257, "name": "sql", "protocol": "TCP"},
                                {"containerPort": 8080, "name": "http", "protocol": "TCP"},
                                {"containerPort": 27257, "name": "brpc", "protocol": "TCP"},
                            ],
                            "readinessProbe": {
                                "httpGet": {
                                    "path": "/health?ready=1",
                                    "port": "http",
                                    "scheme": "HTTP",
                                },
                                "periodSeconds": 5,
                                **probe_defaults,
                            },
                            "resources": {
                                "limits": {"memory": "4Gi"},
                                "requests": {"cpu": "1", "memory": "2Gi"},
                            },
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "volumeMounts": [{"mountPath": "/kaiwudb/deploy/data", "name": "data"}],
                        }
                    ],
                    "dnsPolicy": "ClusterFirst",
                    "restartPolicy": "Always",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                    "serviceAccount": "kwdb",
                    "serviceAccountName": "kwdb",
                    "terminationGracePeriodSeconds": 60,
                },
            },
            "updateStrategy": {"type": "RollingUpdate"},
            "volumeClaimTemplates": [
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {
                        "creationTimestamp": None,
                        "labels": dict(SELECTOR),
                        "name": "data",
                    },
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Gi"}},
                        "volumeMode": "Filesystem",
                    },
                    "status": {"phase": "Pending"},
                }
            ],
        },
        "status": {
            "collisionCount": 0,
            "currentReplicas": 3,
            "currentRevision": "kwdb-7c9f6d5b8",
            "observedGeneration": 1,
            "readyReplicas": 3,
            "replicas": 3,
            "updateRevision": "kwdb-7c9f6d5b8",
            "updatedReplicas": 3,
        },
    }


def created_by_client_side_apply() -> Obj:
    """The same object made by `kubectl apply` (client side): an Update that owns the defaults.

    An Update records every field of the object it sent after the server defaulted it, so this
    manager owns terminationMessagePath, dnsPolicy, revisionHistoryLimit and friends.
    """
    live = live_statefulset()
    probe: Obj = {
        ".": {},
        "f:failureThreshold": {},
        "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}},
        "f:initialDelaySeconds": {},
        "f:periodSeconds": {},
        "f:successThreshold": {},
        "f:timeoutSeconds": {},
    }
    fields = applied_fields()
    container = fields["f:spec"]["f:template"]["f:spec"]["f:containers"][KWBASE]
    container.update(
        {
            "f:imagePullPolicy": {},
            "f:livenessProbe": probe,
            "f:readinessProbe": probe,
            "f:terminationMessagePath": {},
            "f:terminationMessagePolicy": {},
        }
    )
    container["f:env"]['k:{"name":"POD_NAME"}']["f:valueFrom"] = {
        ".": {},
        "f:fieldRef": {".": {}, "f:apiVersion": {}, "f:fieldPath": {}},
    }
    for port in container["f:ports"].values():
        port["f:protocol"] = {}
    pod = fields["f:spec"]["f:template"]["f:spec"]
    for name in ("dnsPolicy", "restartPolicy", "schedulerName", "securityContext"):
        pod[f"f:{name}"] = {}
    pod["f:serviceAccount"] = {}
    fields["f:spec"]["f:revisionHistoryLimit"] = {}
    live["metadata"]["managedFields"] = [
        entry("kubectl-client-side-apply", "Update", fields),
        entry("kube-controller-manager", "Update", status_fields()),
    ]
    live["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(desired_statefulset())
    }
    return live


def kwbase(obj: Obj) -> Obj:
    container: Obj = obj["spec"]["template"]["spec"]["containers"][0]
    return container


def our_container_fields(live: Obj) -> Obj:
    fields: Obj = live["metadata"]["managedFields"][0]["fieldsV1"]
    container: Obj = fields["f:spec"]["f:template"]["f:spec"]["f:containers"][KWBASE]
    return container


def desired_headless_service() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kwdb", "namespace": "kaiwu", "labels": dict(LABELS)},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "ports": [
                {"name": "sql", "port": 26257, "targetPort": "sql"},
                {"name": "http", "port": 8080, "targetPort": "http"},
                {"name": "brpc", "port": 27257, "targetPort": "brpc"},
            ],
            "selector": dict(SELECTOR),
        },
    }


def live_headless_service() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kwdb",
            "namespace": "kaiwu",
            "uid": "b603619d-a613-4c34-86ca-35c0ae4fc526",
            "resourceVersion": "48190",
            "creationTimestamp": "2021-03-04T10:15:00Z",
            "labels": dict(LABELS),
            "managedFields": [
                entry(
                    "kaiwu-reconciler",
                    "Apply",
                    {
                        "f:metadata": {"f:labels": _labels_fields()},
                        "f:spec": {
                            "f:clusterIP": {},
                            "f:ports": {
                                f'k:{{"port":{port},"protocol":"TCP"}}': {
                                    ".": {},
                                    "f:name": {},
                                    "f:port": {},
                                    "f:targetPort": {},
                                }
                                for port in (26257, 8080, 27257)
                            },
                            "f:publishNotReadyAddresses": {},
                            "f:selector": {f"f:{key}": {} for key in SELECTOR},
                        },
                    },
                    api_version="v1",
                )
            ],
        },
        "spec": {
            "ports": [
                {"name": "sql", "protocol": "TCP", "port": 26257, "targetPort": "sql"},
                {"name": "http", "protocol": "TCP", "port": 8080, "targetPort": "http"},
                {"name": "brpc", "protocol": "TCP", "port": 27257, "targetPort": "brpc"},
            ],
            "selector": dict(SELECTOR),
            "clusterIP": "None",
            "clusterIPs": ["None"],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "publishNotReadyAddresses": True,
        },
        "status": {"loadBalancer": {}},
    }


def desired_client_service() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kwdb-public", "namespace": "kaiwu", "labels": dict(LABELS)},
        "spec": {
            "ports": [
                {"name": "sql", "port": 26257, "targetPort": 26257},
                {"name": "http", "port": 8080},
            ],
            "selector": dict(SELECTOR),
        },
    }


def live_client_service() -> Obj:
    """Created by a client-side `kubectl apply`: an Update owning defaults and allocations."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kwdb-public",
            "namespace": "kaiwu",
            "uid": "27aac868-e08b-407e-a1e8-8208da71b5a3",
            "resourceVersion": "48192",
            "creationTimestamp": "2021-03-04T10:15:00Z",
            "labels": dict(LABELS),
            "managedFields": [
                entry(
                    "kubectl-client-side-apply",
                    "Update",
                    {
                        "f:metadata": {"f:labels": {".": {}, **_labels_fields()}},
                        "f:spec": {
                            "f:ports": {
                                ".": {},
                                'k:{"port":26257,"protocol":"TCP"}': {
                                    ".": {},
                                    "f:name": {},
                                    "f:port": {},
                                    "f:protocol": {},
                                    "f:targetPort": {},
                                },
                                'k:{"port":8080,"protocol":"TCP"}': {
                                    ".": {},
                                    "f:name": {},
                                    "f:port": {},
                                    "f:protocol": {},
                                    "f:targetPort": {},
                                },
                            },
                            "f:selector": {".": {}, **{f"f:{key}": {} for key in SELECTOR}},
                            "f:sessionAffinity": {},
                            "f:type": {},
                        },
                    },
                    api_version="v1",
                )
            ],
        },
        "spec": {
            "ports": [
                {"name": "sql", "protocol": "TCP", "port": 26257, "targetPort": 26257},
                {"name": "http", "protocol": "TCP", "port": 8080, "targetPort": 8080},
            ],
            "selector": dict(SELECTOR),
            "clusterIP": "10.96.122.139",
            "clusterIPs": ["10.96.122.139"],
            "type": "ClusterIP",
            "sessionAffinity": "None",
        },
        "status": {"loadBalancer": {}},
    }


# --- a freshly applied cluster is in sync ---


def test_a_freshly_applied_statefulset_is_in_sync() -> None:
    report = check(desired_statefulset(), live_statefulset())

    assert not report.drifted
    assert report.changes == ()
    assert report.desired_hash == report.live_hash
    assert format_report(report) == "StatefulSet kaiwu/kwdb: in sync"


def test_services_with_allocated_addresses_and_defaults_are_in_sync() -> None:
    # The headless Service keeps the clusterIP: None we render; the client Service gets an
    # allocated address, a default type, session affinity, protocol and targetPort.
    assert not check(desired_headless_service(), live_headless_service()).drifted
    assert not check(desired_client_service(), live_client_service()).drifted


def test_a_headless_service_recreated_with_a_cluster_ip_is_drift() -> None:
    # Allocated addresses are ignored, except where we render one: headless is "None".
    live = live_headless_service()
    live["spec"].update(clusterIP="10.96.40.7", clusterIPs=["10.96.40.7"])

    report = check(desired_headless_service(), live)

    change = change_at(report, "/spec/clusterIP")
    assert (change.desired, change.live) == ("None", "10.96.40.7")


def test_server_defaults_owned_by_a_client_side_apply_are_not_drift() -> None:
    report = check(desired_statefulset(), created_by_client_side_apply())

    assert not report.drifted, format_report(report)


def test_an_object_that_does_not_exist_is_reported_missing() -> None:
    report = check(desired_statefulset(), None)

    assert report.drifted
    assert report.live_hash == ""
    assert [(c.kind, c.pointer, c.path, c.live) for c in report.changes] == [
        ("removed", "", "(whole object)", None)]
    assert format_report(report) == "StatefulSet kaiwu/kwdb: missing"


def test_when_the_hashes_differ_but_deepdiff_sees_no_change_the_whole_object_is_named() -> None:
    # normalise() turns integral floats into ints, so only a projection made some other way
    # gets here; deepdiff calls 1 and 1.0 equal, the canonical JSON does not. A drifted report
    # must never list no change: a reviewer would read "drifted" beside nothing.
    desired, live = {"spec": {"replicas": 1}}, {"spec": {"replicas": 1.0}}
    projection = Projection("StatefulSet", "kaiwu", "kwdb", desired, live, frozenset(), {})
    found = report(projection)
    assert found.drifted
    assert [(c.kind, c.pointer, c.desired, c.live) for c in found.changes] == [
        ("changed", "", desired, live)]
    assert format_report(found).splitlines() == [
        "StatefulSet kaiwu/kwdb: drifted (1 change)",
        '  (whole object): {"spec": {"replicas": 1}} -> {"spec": {"replicas": 1.0}} [changed]']


def test_the_normaliser_warnings_reach_the_report_whether_or_not_the_object_exists() -> None:
    warned = ("ignore rule /spec/nothing matched nothing",)
    for live in ({"spec": {"replicas": 1}}, None):
        projection = Projection("StatefulSet", "kaiwu", "kwdb", {"spec": {"replicas": 1}}, live,
                                frozenset(), {}, warned)
        assert report(projection).warnings == warned


# --- hand edits are drift ---


def test_an_image_changed_with_kubectl_set_image_is_drift_with_path_and_values() -> None:
    live = live_statefulset()
    kwbase(live)["image"] = "kwdb/kwdb:2.0.0"
    # The Update takes the field over from our apply.
    del our_container_fields(live)["f:image"]
    set_image: Obj = {
        "f:spec": {"f:template": {"f:spec": {"f:containers": {KWBASE: {"f:image": {}}}}}}
    }
    live["metadata"]["managedFields"].append(entry("kubectl-set", "Update", set_image))

    report = check(desired_statefulset(), live)

    assert report.drifted
    assert report.desired_hash != report.live_hash
    assert report.changes == (
        Change(
            kind="changed",
            pointer="/spec/template/spec/containers/kwbase/image",
            path="spec.template.spec.containers[kwbase].image",
            desired="kwdb/kwdb:2.1.0",
            live="kwdb/kwdb:2.0.0",
            managers=("kubectl-set",),
        ),
    )
    assert format_report(report).splitlines() == [
        "StatefulSet kaiwu/kwdb: drifted (1 change)",
        '  spec.template.spec.containers[kwbase].image: "kwdb/kwdb:2.1.0" -> "kwdb/kwdb:2.0.0"'
        " [changed] (by kubectl-set)",
    ]


def test_scaling_the_statefulset_by_hand_is_drift() -> None:
    live = live_statefulset()
    live["spec"]["replicas"] = 5

    report = check(desired_statefulset(), live)

    change = change_at(report, "/spec/replicas")
    assert (change.kind, change.desired, change.live) == ("changed", 3, 5)


def test_an_env_var_added_with_kubectl_set_env_is_drift() -> None:
    live = live_statefulset()
    # kubectl set env (a strategic merge patch) puts the new variable first.
    kwbase(live)["env"].insert(0, {"name": "KWBASE_DEBUG", "value": "1"})
    set_env: Obj = {
        "f:spec": {
            "f:template": {
                "f:spec": {
                    "f:containers": {
                        KWBASE: {
                            "f:env": {
                                'k:{"name":"KWBASE_DEBUG"}': {".": {}, "f:name": {}, "f:value": {}}
                            }
                        }
                    }
                }
            }
        }
    }
    live["metadata"]["managedFields"].append(entry("kubectl-set", "Update", set_env))

    report = check(desired_statefulset(), live)

    assert report.changes == (
        Change(
            "added",
            "/spec/template/spec/containers/kwbase/env/KWBASE_DEBUG",
            "spec.template.spec.containers[kwbase].env[KWBASE_DEBUG]",
            None,
            {"name": "KWBASE_DEBUG", "value": "1"},
            ("kubectl-set",),
        ),
    )


def test_an_extra_item_in_a_list_we_render_is_drift_even_without_managed_fields() -> None:
    live = live_statefulset()
    del live["metadata"]["managedFields"]
    kwbase(live)["env"].append({"name": "KWBASE_DEBUG", "value": "1"})
    kwbase(live)["ports"].append({"containerPort": 9090, "name": "metrics", "protocol": "TCP"})

    report = check(desired_statefulset(), live)

    assert {(c.kind, c.pointer) for c in report.changes} == {
        ("added", "/spec/template/spec/containers/kwbase/env/KWBASE_DEBUG"),
        ("added", "/spec/template/spec/containers/kwbase/ports/9090~1TCP"),
    }


def test_a_changed_container_port_is_drift() -> None:
    live = live_statefulset()
    kwbase(live)["ports"][0]["containerPort"] = 26258

    report = check(desired_statefulset(), live)

    ports = "/spec/template/spec/containers/kwbase/ports/"
    assert {(c.kind, c.pointer) for c in report.changes} == {
        ("removed", ports + "26257~1TCP"),
        ("added", ports + "26258~1TCP"),
    }
    assert change_at(report, ports + "26257~1TCP").desired == {
        "containerPort": 26257,
        "name": "sql",
    }
    assert change_at(report, ports + "26257~1TCP").managers == (), "nobody owns what is gone"


def test_a_keyed_list_mostly_replaced_by_hand_is_still_told_item_by_item() -> None:
    # Two ports renumbered and one added in one edit: the lists share one key of six, which
    # deepdiff reports as one change of the whole list, owned by nobody. Each item is its own
    # change, so the repair can tell (and remove) the items another manager added.
    live = live_statefulset()
    kwbase(live)["ports"][0]["containerPort"] = 26258
    kwbase(live)["ports"][1]["containerPort"] += 1
    kwbase(live)["ports"].append({"containerPort": 9090, "name": "debug", "protocol": "TCP"})

    report = check(desired_statefulset(), live)

    ports = "/spec/template/spec/containers/kwbase/ports/"
    kinds = sorted((c.kind, c.pointer.removeprefix(ports)) for c in report.changes)
    assert [kind for kind, _ in kinds] == ["added", "added", "added", "removed", "removed"]
    assert ("added", "9090~1TCP") in kinds and ("removed", "26257~1TCP") in kinds
    assert all(c.pointer.startswith(ports) and c.pointer != ports for c in report.changes)
    # What the edit added is theirs, so the repair removes it before it applies ours.
    added = sorted(c.pointer for c in report.changes if c.kind == "added")
    edit: Obj = {"f:spec": {"f:template": {"f:spec": {"f:containers": {KWBASE: {"f:ports": {
        f'k:{{"containerPort":{c.live["containerPort"]},"protocol":"TCP"}}': {".": {}}
        for c in report.changes if c.kind == "added"}}}}}}}
    live["metadata"]["managedFields"].append(entry("kubectl-edit", "Update", edit))
    report = check(desired_statefulset(), live)
    assert sorted(others_added(report, "kaiwu-operator")) == added
    assert all(c.managers == ("kubectl-edit",) for c in report.changes if c.kind == "added")


def test_a_keyed_list_inside_a_mostly_replaced_one_is_told_item_by_item_too() -> None:
    # Three sidecars added beside kwbase while kwbase's own ports were renumbered: each level
    # is told by item, the ports inside kwbase too.
    live = live_statefulset()
    kwbase(live)["ports"][0]["containerPort"] = 26258
    kwbase(live)["ports"][1]["containerPort"] += 1
    containers = live["spec"]["template"]["spec"]["containers"]
    containers += [{"name": f"sidecar-{i}", "image": "busybox"} for i in range(3)]

    report = check(desired_statefulset(), live)

    pointers = {(c.kind, c.pointer) for c in report.changes}
    where = "/spec/template/spec/containers/"
    assert {("added", where + f"sidecar-{i}") for i in range(3)} <= pointers
    assert ("added", where + "kwbase/ports/26258~1TCP") in pointers
    assert ("removed", where + "kwbase/ports/26257~1TCP") in pointers
    assert not [c for c in report.changes if c.pointer == where + "kwbase"], "not as a whole"


def test_a_reordered_keyed_list_mostly_replaced_says_reordered_not_dollar_order() -> None:
    # An env whose order matters (one variable refers to another), reversed by hand, with
    # ten variables added: the lists share four keys (the order among them) of fourteen.
    desired = desired_statefulset()
    kwbase(desired)["env"].append({"name": "ADDR", "value": "$(POD_NAME):26257"})
    live = live_statefulset()
    env = kwbase(live)["env"]
    env.append({"name": "ADDR", "value": "$(POD_NAME):26257"})
    env.reverse()
    env += [{"name": f"EXTRA_{i}", "value": "1"} for i in range(10)]

    report = check(desired, live)

    assert not [c for c in report.changes if "$order" in c.pointer or "$order" in c.path]
    assert ("reordered", "/spec/template/spec/containers/kwbase/env") in {
        (c.kind, c.pointer) for c in report.changes}


def test_a_field_added_inside_our_container_with_kubectl_edit_is_drift() -> None:
    live = live_statefulset()
    kwbase(live)["stdin"] = True
    kwbase(live)["imagePullPolicy"] = "Always"
    edit: Obj = {
        "f:spec": {
            "f:template": {
                "f:spec": {"f:containers": {KWBASE: {"f:stdin": {}, "f:imagePullPolicy": {}}}}
            }
        }
    }
    live["metadata"]["managedFields"].append(entry("kubectl-edit", "Update", edit))

    report = check(desired_statefulset(), live)

    assert [(c.kind, c.path, c.live, c.managers) for c in report.changes] == [
        (
            "added",
            "spec.template.spec.containers[kwbase].imagePullPolicy",
            "Always",
            ("kubectl-edit",),
        ),
        ("added", "spec.template.spec.containers[kwbase].stdin", True, ("kubectl-edit",)),
    ]


def test_a_field_nobody_owns_is_a_server_default_and_not_drift() -> None:
    # The same values without a managedFields entry: the server put them there.
    live = live_statefulset()
    kwbase(live)["stdin"] = True
    live["spec"]["minReadySeconds"] = 10

    assert not check(desired_statefulset(), live).drifted


def _spread_over_zones(obj: Obj, fields: Obj | None) -> None:
    """Add a topology spread constraint, and our apply's ownership of it when ``fields``."""
    obj["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": dict(SELECTOR)},
        }
    ]
    if fields is not None:
        key = 'k:{"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule"}'
        pod = fields["f:spec"]["f:template"]["f:spec"]
        pod["f:topologySpreadConstraints"] = {
            key: {
                ".": {},
                "f:labelSelector": {},
                "f:maxSkew": {},
                "f:topologyKey": {},
                "f:whenUnsatisfiable": {},
            }
        }


def test_inside_an_atomic_value_the_last_writer_owns_everything() -> None:
    # A label selector is atomic: whoever writes any part of it owns all of it.
    desired = desired_statefulset()
    _spread_over_zones(desired, None)
    live = live_statefulset()
    ours = live["metadata"]["managedFields"][0]["fieldsV1"]
    _spread_over_zones(live, ours)
    selector = live["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"]
    selector["matchExpressions"] = [{"key": "tier", "operator": "In", "values": ["db"]}]
    # Under our apply's ownership, what we did not send came from the server.
    assert not check(desired, live).drifted

    # kubectl edit of the selector takes the whole selector over: its additions are drift.
    key = 'k:{"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule"}'
    del ours["f:spec"]["f:template"]["f:spec"]["f:topologySpreadConstraints"][key][
        "f:labelSelector"
    ]
    edit: Obj = {
        "f:spec": {
            "f:template": {
                "f:spec": {"f:topologySpreadConstraints": {key: {"f:labelSelector": {}}}}
            }
        }
    }
    live["metadata"]["managedFields"].append(entry("kubectl-edit", "Update", edit))
    report = check(desired, live)

    change = change_at(
        report,
        "/spec/template/spec/topologySpreadConstraints/topology.kubernetes.io~1zone~1DoNotSchedule"
        "/labelSelector/matchExpressions",
    )
    assert (change.kind, change.managers) == ("added", ("kubectl-edit",))


def test_a_field_our_earlier_apply_set_and_we_no_longer_render_is_drift() -> None:
    live = live_statefulset()
    live["spec"]["minReadySeconds"] = 10
    live["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:minReadySeconds"] = {}

    report = check(desired_statefulset(), live)

    change = change_at(report, "/spec/minReadySeconds")
    assert (change.kind, change.live, change.managers) == ("added", 10, ("kaiwu-reconciler",))


def test_a_memory_limit_rewritten_in_other_units_is_drift_only_when_the_value_changes() -> None:
    live = live_statefulset()
    limits = kwbase(live)["resources"]["limits"]
    limits["memory"] = "4096Mi"  # the same 4Gi
    assert not check(desired_statefulset(), live).drifted

    limits["memory"] = "4G"  # 4 * 10^9 bytes, not 4 * 2^30
    report = check(desired_statefulset(), live)

    change = change_at(report, "/spec/template/spec/containers/kwbase/resources/limits/memory")
    assert (change.desired, change.live) == ("4Gi", "4G")


def test_quantities_compare_by_value_wherever_kubernetes_has_quantities() -> None:
    desired = desired_statefulset()
    kwbase(desired)["resources"]["requests"]["cpu"] = 0.5  # a YAML number
    desired["spec"]["template"]["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}
    ]
    live = live_statefulset()
    kwbase(live)["resources"]["requests"]["cpu"] = "500m"
    live["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "10240Mi"
    live["spec"]["template"]["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {"sizeLimit": "1024Mi"}}
    ]

    assert not check(desired, live).drifted


def test_a_request_below_a_millicpu_is_rounded_up_by_the_server_and_not_drift() -> None:
    desired = desired_statefulset()
    kwbase(desired)["resources"]["requests"]["cpu"] = "100u"
    live = live_statefulset()
    kwbase(live)["resources"]["requests"]["cpu"] = "1m"  # SetDefaults_ResourceList

    assert not check(desired, live).drifted


def test_an_empty_dir_volume_keeps_its_type_although_it_is_an_empty_map() -> None:
    desired = desired_statefulset()
    desired["spec"]["template"]["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    live = live_statefulset()
    live["spec"]["template"]["spec"]["volumes"] = [
        {"name": "scratch", "hostPath": {"path": "/tmp", "type": ""}}
    ]

    report = check(desired, live)

    change = change_at(report, "/spec/template/spec/volumes/scratch/emptyDir")
    assert (change.kind, change.desired) == ("removed", {})


def test_a_named_port_is_not_a_number() -> None:
    desired = desired_client_service()
    live = live_client_service()
    live["spec"]["ports"][0]["targetPort"] = "26257"

    report = check(desired, live)

    change = change_at(report, "/spec/ports/26257~1TCP/targetPort")
    assert (change.kind, change.desired, change.live) == ("changed", 26257, "26257")


def test_ints_and_floats_compare_by_value() -> None:
    desired = desired_statefulset()
    desired["spec"]["replicas"] = 3.0

    assert not check(desired, live_statefulset()).drifted


# --- labels and annotations ---


def test_a_rendered_label_removed_is_drift() -> None:
    live = live_statefulset()
    del live["metadata"]["labels"]["app.kubernetes.io/component"]

    report = check(desired_statefulset(), live)

    change = change_at(report, "/metadata/labels/app.kubernetes.io~1component")
    assert (change.kind, change.path) == (
        "removed",
        'metadata.labels["app.kubernetes.io/component"]',
    )


def test_a_rendered_label_changed_is_drift() -> None:
    live = live_statefulset()
    live["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] = "db"

    assert check(desired_statefulset(), live).drifted


def test_labels_annotations_and_finalizers_added_by_others_are_not_drift() -> None:
    live = live_statefulset()
    live["metadata"]["labels"]["team"] = "orders"
    live["metadata"]["annotations"] = {"backup.example.com/schedule": "daily"}
    live["metadata"]["finalizers"] = ["example.com/protect"]
    live["spec"]["template"]["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/restartedAt": "2021-03-05T08:00:00Z"
    }
    others = {
        "f:metadata": {
            "f:labels": {"f:team": {}},
            "f:annotations": {".": {}, "f:backup.example.com/schedule": {}},
            "f:finalizers": {".": {}, 'v:"example.com/protect"': {}},
        },
        "f:spec": {
            "f:template": {
                "f:metadata": {
                    "f:annotations": {".": {}, "f:kubectl.kubernetes.io/restartedAt": {}}
                }
            }
        },
    }
    live["metadata"]["managedFields"].append(entry("kubectl-label", "Update", others))

    assert not check(desired_statefulset(), live).drifted


def test_a_finalizer_we_render_must_stay_but_others_may_add_theirs() -> None:
    desired = desired_statefulset()
    desired["metadata"]["finalizers"] = ["kaiwu.inspur.com/decommission"]
    live = live_statefulset()
    live["metadata"]["finalizers"] = ["example.com/backup", "kaiwu.inspur.com/decommission"]
    assert not check(desired, live).drifted
    assert not check(desired, live, dry_run=copy.deepcopy(live)).drifted

    live["metadata"]["finalizers"] = ["example.com/backup"]
    dry_run = copy.deepcopy(live)  # our apply would put ours back
    dry_run["metadata"]["finalizers"].append("kaiwu.inspur.com/decommission")
    report = check(desired, live, dry_run=dry_run)

    change = change_at(report, "/metadata/finalizers")
    assert (change.desired, change.live) == (["kaiwu.inspur.com/decommission"], None)


def test_a_label_on_a_service_that_renders_none_is_not_drift() -> None:
    desired = desired_headless_service()
    del desired["metadata"]["labels"]
    live = live_headless_service()
    live["metadata"]["labels"]["team"] = "orders"

    assert not check(desired, live).drifted


# --- order ---


def test_reordering_env_is_not_drift_but_reordering_arguments_is() -> None:
    live = live_statefulset()
    kwbase(live)["env"].reverse()
    assert not check(desired_statefulset(), live).drifted

    command = kwbase(live)["command"]
    command[2], command[3] = command[3], command[2]
    report = check(desired_statefulset(), live)

    assert report.drifted
    assert {c.pointer for c in report.changes} <= {
        "/spec/template/spec/containers/kwbase/command/2",
        "/spec/template/spec/containers/kwbase/command/3",
    }


def test_env_order_matters_once_one_variable_refers_to_another() -> None:
    desired = desired_statefulset()
    kwbase(desired)["env"].append({"name": "ADVERTISE", "value": "$(POD_NAME).kwdb"})
    live = live_statefulset()
    kwbase(live)["env"].insert(0, {"name": "ADVERTISE", "value": "$(POD_NAME).kwdb"})

    report = check(desired, live)

    change = change_at(report, "/spec/template/spec/containers/kwbase/env")
    assert change.kind == "reordered"
    assert change.desired == ["POD_NAME", "LD_LIBRARY_PATH", "ADVERTISE"]
    assert change.live == ["ADVERTISE", "POD_NAME", "LD_LIBRARY_PATH"]
    assert change.managers == ()


def test_a_reordered_list_names_the_manager_that_owns_it_whole() -> None:
    desired = desired_statefulset()
    kwbase(desired)["env"].append({"name": "ADVERTISE", "value": "$(POD_NAME).kwdb"})
    live = live_statefulset()
    kwbase(live)["env"].insert(0, {"name": "ADVERTISE", "value": "$(POD_NAME).kwdb"})
    whole: Obj = {"f:spec": {"f:template": {"f:spec": {"f:containers": {KWBASE: {"f:env": {}}}}}}}
    live["metadata"]["managedFields"].append(entry("kubectl-replace", "Update", whole))

    change = change_at(check(desired, live), "/spec/template/spec/containers/kwbase/env")

    assert (change.kind, change.managers) == ("reordered", ("kubectl-replace",))


def test_container_order_is_kept_but_containers_match_by_name() -> None:
    desired = desired_statefulset()
    sidecar = {"name": "exporter", "image": "kwdb/exporter:1.0"}
    desired["spec"]["template"]["spec"]["containers"].append(dict(sidecar))
    live = live_statefulset()
    live_sidecar = {
        **sidecar,
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "resources": {},
    }
    live["spec"]["template"]["spec"]["containers"].append(live_sidecar)
    assert not check(desired, live).drifted

    live["spec"]["template"]["spec"]["containers"].reverse()
    report = check(desired, live)

    assert [(c.kind, c.pointer, c.desired, c.live) for c in report.changes] == [
        (
            "reordered",
            "/spec/template/spec/containers",
            ["kwbase", "exporter"],
            ["exporter", "kwbase"],
        )
    ]


# --- ignore rules ---


def test_an_ignore_rule_by_json_pointer_suppresses_a_change() -> None:
    live = live_statefulset()
    live["spec"]["replicas"] = 5
    kwbase(live)["image"] = "kwdb/kwdb:2.0.0"
    rules = parse_ignore_rules(
        [
            {"kind": "StatefulSet", "name": "kw*", "pointer": "/spec/replicas"},
            {"pointer": "/spec/template/spec/containers/0/image"},
        ]
    )

    assert not check(desired_statefulset(), live, ignore_rules=rules).drifted


def test_an_ignore_rule_for_another_object_changes_nothing() -> None:
    live = live_statefulset()
    live["spec"]["replicas"] = 5
    rules = (
        IgnoreRule.parse({"kind": "StatefulSet", "name": "other", "pointer": "/spec/replicas"}),
        IgnoreRule.parse({"kind": "Service", "pointer": "/spec/replicas"}),
    )

    assert check(desired_statefulset(), live, ignore_rules=rules).drifted


def test_a_pointer_from_a_report_can_be_pasted_into_an_ignore_rule() -> None:
    live = live_statefulset()
    kwbase(live)["env"].append({"name": "KWBASE_DEBUG", "value": "1"})
    report = check(desired_statefulset(), live)
    rule = IgnoreRule.parse({"pointer": report.changes[0].pointer})

    assert not check(desired_statefulset(), live, ignore_rules=[rule]).drifted


def test_the_rollout_partition_the_reconciler_drives_is_not_drift() -> None:
    live = live_statefulset()
    live["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    rollout: Obj = {
        "f:spec": {"f:updateStrategy": {"f:rollingUpdate": {".": {}, "f:partition": {}}}}
    }
    live["metadata"]["managedFields"].append(entry("kaiwu-rollout", "Update", rollout))

    assert not check(desired_statefulset(), live).drifted
    # Without the built-in list it would be.
    unguarded = DriftSettings(mask_key=b"test-key", builtin_ignores=False)
    assert compare(desired_statefulset(), live, settings=unguarded).drifted


def test_a_service_account_token_reference_from_the_token_controller_is_not_drift() -> None:
    desired: Obj = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "kwdb", "namespace": "kaiwu", "labels": dict(LABELS)},
        "automountServiceAccountToken": False,
    }
    live = copy.deepcopy(desired)
    live["secrets"] = [{"name": "kwdb-token-x7k2p"}]
    live["metadata"]["managedFields"] = [
        entry("kaiwu-reconciler", "Apply", {"f:automountServiceAccountToken": {}}, "v1"),
        entry(
            "kube-controller-manager",
            "Update",
            {"f:secrets": {".": {}, 'k:{"name":"kwdb-token-x7k2p"}': {".": {}, "f:name": {}}}},
            "v1",
        ),
    ]

    assert not check(desired, live).drifted


# --- absent values ---


def test_none_empty_maps_and_empty_lists_mean_absent() -> None:
    desired = desired_statefulset()
    pod = desired["spec"]["template"]["spec"]
    pod["tolerations"] = []
    pod["nodeSelector"] = {}
    pod["affinity"] = None
    kwbase(desired)["args"] = []
    kwbase(desired)["securityContext"] = {}

    assert not check(desired, live_statefulset()).drifted


def test_zero_values_the_server_drops_are_not_drift_but_kept_ones_are_compared() -> None:
    desired = desired_statefulset()
    kwbase(desired)["volumeMounts"][0]["readOnly"] = False  # omitted by the server
    assert not check(desired, live_statefulset()).drifted

    desired["spec"]["replicas"] = 0  # a pointer: the server keeps 0, so absent is drift
    live = live_statefulset()
    del live["spec"]["replicas"]
    report = check(desired, live)
    assert report.drifted
    assert [(c.pointer, c.kind) for c in report.changes] == [("/spec/replicas", "removed")]


# --- secrets ---


def desired_secret() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kwdb-users", "namespace": "kaiwu", "labels": dict(LABELS)},
        "type": "Opaque",
        "stringData": {"root-password": "hunter2-hunter2", "app-password": "correct horse"},
    }


def live_secret(**data: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "kwdb-users",
            "namespace": "kaiwu",
            "uid": "0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5",
            "resourceVersion": "48300",
            "creationTimestamp": "2021-03-04T10:15:00Z",
            "labels": dict(LABELS),
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def test_secret_values_are_masked_equally_and_never_shown() -> None:
    same = live_secret(**{"root-password": "hunter2-hunter2", "app-password": "correct horse"})
    assert not check(desired_secret(), same).drifted

    changed = live_secret(**{"root-password": "hunter2-hunter2", "app-password": "battery staple"})
    report = check(desired_secret(), changed)
    text = format_report(report) + repr(report)

    change = change_at(report, "/data/app-password")
    assert change.kind == "changed"
    assert change.desired.startswith("***") and change.live.startswith("***")
    assert change.desired != change.live
    for secret in ("correct horse", "battery staple", "hunter2", "Y29ycmVjdCBob3JzZQ=="):
        assert secret not in text
    # Equal values mask equally: a reviewer sees which key changed and which did not.
    projection = normalise(desired_secret(), changed, settings=SETTINGS)
    assert projection.live is not None
    assert projection.desired["data"]["root-password"] == projection.live["data"]["root-password"]
    assert projection.desired["data"]["app-password"] != projection.live["data"]["app-password"]


def test_secret_looking_env_values_and_flags_are_masked() -> None:
    desired = desired_statefulset()
    kwbase(desired)["env"].append({"name": "KWDB_ROOT_PASSWORD", "value": "s3cr3t-one"})
    kwbase(desired)["command"].append("--password=s3cr3t-two")
    live = live_statefulset()
    kwbase(live)["env"].append({"name": "KWDB_ROOT_PASSWORD", "value": "s3cr3t-changed"})
    kwbase(live)["command"].append("--password=s3cr3t-two")

    report = check(desired, live)
    text = format_report(report)

    assert "s3cr3t" not in text and "s3cr3t" not in json.dumps(normalise(desired, live).desired)
    change = change_at(report, "/spec/template/spec/containers/kwbase/env/KWDB_ROOT_PASSWORD/value")
    assert change.desired.startswith("***") and change.desired != change.live


def test_a_secret_env_var_removed_by_hand_is_reported_masked() -> None:
    desired = desired_statefulset()
    kwbase(desired)["env"].append({"name": "KWDB_ROOT_PASSWORD", "value": "s3cr3t-one"})

    report = check(desired, live_statefulset())

    change = change_at(report, "/spec/template/spec/containers/kwbase/env/KWDB_ROOT_PASSWORD")
    assert change.kind == "removed" and change.desired["value"].startswith("***")
    assert "s3cr3t" not in format_report(report)


def test_masks_differ_between_keys_so_they_cannot_be_looked_up() -> None:
    a = normalise(desired_secret(), None, settings=DriftSettings(mask_key=b"a"))
    b = normalise(desired_secret(), None, settings=DriftSettings(mask_key=b"b"))

    assert a.desired["data"] != b.desired["data"]


# --- server-side apply dry run ---


def test_a_dry_run_shows_what_admission_changed_so_it_is_not_drift() -> None:
    # A mutating webhook rewrites images to a registry mirror.
    live = live_statefulset()
    kwbase(live)["image"] = "mirror.example.com/kwdb/kwdb:2.1.0"
    assert check(desired_statefulset(), live).drifted

    dry_run = copy.deepcopy(live)
    assert not check(desired_statefulset(), live, dry_run=dry_run).drifted


def test_a_dry_run_still_sees_an_env_var_someone_added() -> None:
    live = live_statefulset()
    kwbase(live)["env"].append({"name": "KWBASE_DEBUG", "value": "1"})
    dry_run = copy.deepcopy(live)  # an apply keeps fields others own

    report = check(desired_statefulset(), live, dry_run=dry_run)

    assert [c.pointer for c in report.changes] == [
        "/spec/template/spec/containers/kwbase/env/KWBASE_DEBUG"
    ]


def test_a_field_the_server_drops_is_not_drift_with_a_dry_run() -> None:
    desired = desired_statefulset()
    desired["spec"]["persistentVolumeClaimRetentionPolicy"] = {"whenScaled": "Delete"}  # 1.27+
    live = live_statefulset()
    assert check(desired, live).drifted

    assert not check(desired, live, dry_run=copy.deepcopy(live)).drifted


# --- the hash: equal exactly when nothing drifted ---


def _server_variations() -> list[Callable[[Obj], None]]:
    """Things an API server or a harmless neighbour does to an object: never drift."""

    def pod(obj: Obj) -> Obj:
        spec: Obj = obj["spec"]["template"]["spec"]
        return spec

    def default_protocols(obj: Obj) -> None:
        for port in kwbase(obj)["ports"]:
            port["protocol"] = "TCP"

    def respell(obj: Obj) -> None:
        kwbase(obj)["resources"]["requests"].update(cpu="1", memory="2048Mi")
        storage = obj["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
        storage["storage"] = "10737418240"

    return [
        lambda obj: kwbase(obj).update(terminationMessagePath="/dev/termination-log"),
        lambda obj: kwbase(obj).update(terminationMessagePolicy="File", securityContext={}),
        lambda obj: kwbase(obj).update(imagePullPolicy="IfNotPresent"),
        lambda obj: pod(obj).update(dnsPolicy="ClusterFirst", restartPolicy="Always"),
        lambda obj: pod(obj).update(schedulerName="default-scheduler", securityContext={}),
        lambda obj: pod(obj).update(serviceAccount="kwdb", enableServiceLinks=True),
        lambda obj: obj["spec"].update(revisionHistoryLimit=10),
        lambda obj: obj["spec"]["updateStrategy"].update(rollingUpdate={"partition": 0}),
        lambda obj: kwbase(obj)["livenessProbe"].update(timeoutSeconds=1, successThreshold=1),
        lambda obj: kwbase(obj)["livenessProbe"].update(periodSeconds=10, failureThreshold=3),
        lambda obj: kwbase(obj)["livenessProbe"]["httpGet"].update(scheme="HTTP"),
        default_protocols,
        lambda obj: kwbase(obj)["env"][0]["valueFrom"]["fieldRef"].update(apiVersion="v1"),
        lambda obj: obj["spec"]["volumeClaimTemplates"][0].update(
            apiVersion="v1", kind="PersistentVolumeClaim", status={"phase": "Pending"}
        ),
        lambda obj: obj["spec"]["volumeClaimTemplates"][0]["spec"].update(volumeMode="Filesystem"),
        lambda obj: obj["spec"]["template"]["metadata"].update(creationTimestamp=None),
        lambda obj: obj["metadata"]["labels"].update(team="orders"),
        lambda obj: obj["metadata"].update(annotations={"note": "x"}, generation=4, uid="u-1"),
        lambda obj: obj.update(status={"replicas": 3, "readyReplicas": 2}),
        respell,
    ]


def _owned_by_an_update(obj: Obj) -> Obj:
    """FieldsV1 of an Update that sent every field of ``obj`` (a client-side apply or create)."""
    keys = {"containers": ("name",), "env": ("name",), "volumeMounts": ("mountPath",)}

    def fields(value: Any, field_name: str = "") -> Obj:
        if isinstance(value, dict):
            return {f"f:{k}": fields(v, k) for k, v in value.items() if k != "status"}
        if isinstance(value, list) and field_name in keys | {"ports": ()}:
            owned: Obj = {".": {}}
            for item in value:
                if field_name == "ports":
                    key = {"containerPort": item["containerPort"], "protocol": "TCP"}
                else:
                    key = {name: item[name] for name in keys[field_name]}
                owned["k:" + json.dumps(key, separators=(",", ":"))] = {".": {}, **fields(item)}
            return owned
        return {}

    return fields({k: v for k, v in obj.items() if k not in ("metadata", "status")})


variations = st.lists(st.sampled_from(_server_variations()), unique=True)


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), changes=variations, owned=st.booleans())
def test_permuted_keyed_lists_and_server_defaults_never_change_the_hash(
    data: st.DataObject, changes: list[Callable[[Obj], None]], owned: bool
) -> None:
    desired = desired_statefulset()
    live = copy.deepcopy(desired)
    for change in changes:
        change(live)
    container = kwbase(live)
    for name in ("env", "ports", "volumeMounts"):
        container[name] = data.draw(st.permutations(container[name]))
    if owned:
        live["metadata"]["managedFields"] = [
            entry("kubectl-client-side-apply", "Update", _owned_by_an_update(live))
        ]

    report = check(desired, live)

    assert report.desired_hash == report.live_hash, format_report(report)
    assert not report.drifted
    assert report.desired_hash == check(desired, live_statefulset()).desired_hash


def _real_drift() -> list[Callable[[Obj], None]]:
    return [
        lambda obj: kwbase(obj).update(image="kwdb/kwdb:2.2.0"),
        lambda obj: obj["spec"].update(replicas=4),
        lambda obj: kwbase(obj)["env"].append({"name": "X", "value": "1"}),
        lambda obj: kwbase(obj)["ports"].pop(),
        lambda obj: kwbase(obj)["command"].append("--max-offset=250ms"),
        lambda obj: kwbase(obj)["resources"]["limits"].update(memory="4G"),
        lambda obj: obj["metadata"]["labels"].pop("app.kubernetes.io/name"),
        lambda obj: kwbase(obj)["volumeMounts"][0].update(mountPath="/data"),
        lambda obj: kwbase(obj)["readinessProbe"].update(periodSeconds=6),
    ]


@settings(max_examples=examples(100), deadline=None)
@given(
    noise=variations,
    drift=st.lists(st.sampled_from(_real_drift()), min_size=1, unique=True),
)
def test_any_real_change_changes_the_hash_and_is_reported(
    noise: list[Callable[[Obj], None]], drift: list[Callable[[Obj], None]]
) -> None:
    desired = desired_statefulset()
    live = copy.deepcopy(desired)
    for change in noise + drift:
        change(live)

    report = check(desired, live)

    assert report.drifted and report.desired_hash != report.live_hash
    assert report.changes


def test_the_projection_hash_is_canonical_json() -> None:
    assert projection_hash({"b": [1, 2], "a": "é"}) == projection_hash({"a": "é", "b": [1, 2]})
    assert projection_hash({"a": 1}) != projection_hash({"a": "1"})
    assert projection_hash({}).startswith("sha256:")


# --- the building blocks ---


QUANTITY_SCALES: dict[str, Fraction] = {
    "": Fraction(1), "m": Fraction(1, 1000), "k": Fraction(1000), "M": Fraction(10**6),
    "Ki": Fraction(1024), "Mi": Fraction(2**20), "Gi": Fraction(2**30)}


def _spelled(value: Fraction, suffix: str) -> str | None:
    """`value` written exactly with `suffix` (None when that needs infinitely many digits)."""
    mantissa = value / QUANTITY_SCALES[suffix]
    twos = fives = 0
    rest = mantissa.denominator
    while rest % 2 == 0:
        rest, twos = rest // 2, twos + 1
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    if rest != 1:
        return None
    places = max(twos, fives)
    digits = str(mantissa.numerator * 10**places // mantissa.denominator).rjust(places + 1, "0")
    number = digits if not places else f"{digits[:-places]}.{digits[-places:]}"
    return number + suffix


@given(
    st.fractions(min_value=0, max_value=10**12, max_denominator=1000),
    st.tuples(st.sampled_from(sorted(QUANTITY_SCALES)), st.sampled_from(sorted(QUANTITY_SCALES))),
)
def test_a_quantity_written_any_way_has_one_canonical_spelling(
        value: Fraction, suffixes: tuple[str, str]) -> None:
    one, other = (_spelled(value, suffix) for suffix in suffixes)
    assume(one is not None and other is not None)
    assert one is not None and other is not None
    spelling = comparable(one)
    assert spelling == comparable(other), (one, other)
    assert isinstance(spelling, str)
    assert Fraction(parse(spelling).value) == value


def test_quantity_examples() -> None:
    assert comparable("1000m") == comparable("1") == "1"
    assert comparable("0.5") == comparable("500m") == "500m"
    assert comparable("1Gi") == comparable("1024Mi") == "1Gi"
    assert comparable("1G") == "1G" != comparable("1Gi")
    assert comparable("1e3") == "1k"
    assert comparable("not a quantity") == "not a quantity"


def test_fields_v1_is_parsed_into_typed_path_elements() -> None:
    fields = parse_fields_v1(applied_fields())
    containers = fields.field_child("spec").field_child("template")  # type: ignore[union-attr]
    containers = containers.field_child("spec").field_child("containers")  # type: ignore[union-attr]
    assert containers is not None
    kwbase_fields = containers.item_child({"name": "kwbase", "image": "x"})
    assert kwbase_fields is not None and kwbase_fields.owns_self
    ports = kwbase_fields.field_child("ports")
    assert ports is not None
    assert ports.item_child({"containerPort": 8080, "protocol": "TCP", "name": "http"})
    assert ports.item_child({"containerPort": "8080", "protocol": "TCP"}) is None  # typed
    assert PathElement.parse('v:"example.com/protect"').matches_item("example.com/protect")
    assert PathElement.parse("i:3") == PathElement("i", 3)
    paths = {"/".join(str(e) for e in path) for path in fields.paths()}
    assert "f:spec/f:replicas" in paths
    assert 'f:spec/f:template/f:spec/f:containers/k:{"name":"kwbase"}' in paths


@pytest.mark.parametrize("bad", ["x:1", "k:[1]", "k:{", "i:one", "nocolon"])
def test_malformed_fields_v1_is_rejected(bad: str) -> None:
    with pytest.raises(FieldsV1Error):
        parse_fields_v1({"f:spec": {bad: {}}})


def test_a_malformed_managed_fields_entry_is_skipped_with_a_warning() -> None:
    live = live_statefulset()
    live["metadata"]["managedFields"].append(entry("broken", "Update", {"f:spec": {"q:x": {}}}))

    entries, warnings = parse_managed_fields(live["metadata"]["managedFields"])
    report = check(desired_statefulset(), live)

    assert [e.manager for e in entries] == ["kaiwu-reconciler", "kube-controller-manager"]
    assert len(warnings) == 1 and "broken" in warnings[0]
    assert report.warnings == warnings and not report.drifted


@given(st.lists(st.text(max_size=6), max_size=5))
def test_json_pointers_round_trip(tokens: list[str]) -> None:
    assert parse_pointer(format_pointer(tokens)) == tuple(tokens)


def test_json_pointer_escapes() -> None:
    assert parse_pointer("/metadata/annotations/a~1b~0c") == ("metadata", "annotations", "a/b~c")
    assert parse_pointer("/~01") == ("~1",)
    for bad in ("spec", "/a~2b", "/a~"):
        with pytest.raises(ValueError):
            parse_pointer(bad)
    with pytest.raises(ValueError):
        IgnoreRule.parse({"kind": "StatefulSet"})


def test_a_report_line_names_who_changed_a_value_only_when_known_and_keeps_unicode() -> None:
    report = DriftReport("ConfigMap", "kaiwu", "notes", True, (
        Change("changed", "/data/a", "data.a", "café", "cafe"),
        Change("changed", "/data/b", "data.b", "1", "2", ("kubectl-edit",))), "x", "y")
    assert format_report(report).splitlines() == [
        "ConfigMap kaiwu/notes: drifted (2 changes)",
        '  data.a: "café" -> "cafe" [changed]',
        '  data.b: "1" -> "2" [changed] (by kubectl-edit)']


def test_a_projection_with_a_nan_has_no_hash() -> None:
    with pytest.raises(ValueError):
        projection_hash({"a": float("nan")})


def test_an_ignore_rule_covers_a_field_at_or_below_its_pointer_in_the_objects_it_names(
        ) -> None:
    path = ("spec", "replicas")
    assert IgnoreRule.of("StatefulSet", "/spec/replicas").covers("StatefulSet", "dev", path)
    assert IgnoreRule.of("", "/spec").covers("StatefulSet", "dev", path)
    assert IgnoreRule.of("", "/*/replicas", name="d*").covers("StatefulSet", "dev", path)
    assert not IgnoreRule.of("StatefulSet", "/spec/replicas", name="other").covers(
        "StatefulSet", "dev", path)
    assert not IgnoreRule.of("Service", "/spec/replicas").covers("StatefulSet", "dev", path)
    assert not IgnoreRule.of("", "/spec/replicas/x").covers("StatefulSet", "dev", path)
    assert not IgnoreRule.of("", "/spec/template").covers("StatefulSet", "dev", path)


def test_ignore_rules_read_back_as_written_and_bad_ones_say_what_is_wrong() -> None:
    rule = IgnoreRule.of("Service", "/spec/ports/*/nodePort", name="kw*", unless_rendered=True)
    assert rule == IgnoreRule(("spec", "ports", "*", "nodePort"), "Service", "kw*", True)
    assert str(rule) == "Service/kw* /spec/ports/*/nodePort (unless rendered)"
    assert str(IgnoreRule.of("", "/metadata/annotations/a~1b")) == "*/* /metadata/annotations/a~1b"
    assert IgnoreRule.parse({"pointer": "/spec/replicas", "kind": None}) == \
        IgnoreRule.of("", "/spec/replicas")
    assert parse_ignore_rules(None) == ()
    with pytest.raises(ValueError, match=r"an ignore rule needs a string 'pointer': \{'kind'"):
        IgnoreRule.parse({"kind": "StatefulSet", "pointer": 3})
    with pytest.raises(ValueError, match="ignore rule 'kind' and 'name' must be strings"):
        IgnoreRule.parse({"kind": ["StatefulSet"], "pointer": "/spec"})
    with pytest.raises(ValueError, match="bad '~' escape in JSON pointer '/a~2b'"):
        parse_pointer("/a~2b")
    with pytest.raises(ValueError, match="a JSON pointer starts with '/': 'spec'"):
        parse_pointer("spec")


def test_managed_fields_from_the_typed_client_and_odd_entries() -> None:
    typed = {"manager": "kubectl-edit", "operation": "Update", "api_version": "apps/v1",
             "fields_type": "FieldsV1", "fields_v1": {"f:spec": {"f:replicas": {}}},
             "subresource": "scale"}
    odd = ["not an entry", {"manager": "future", "fieldsType": "FieldsV2", "fieldsV1": {}},
           {"fields_type": "FieldsV2", "fields_v1": {}}, {"operation": "Apply"}, typed]
    entries, warnings = parse_managed_fields(odd)
    assert warnings == ("managedFields[0] is not an object",
                        "managedFields[1] (future): fieldsType 'FieldsV2'",
                        "managedFields[2] (): fieldsType 'FieldsV2'")
    assert [(e.manager, e.operation, e.api_version, e.subresource) for e in entries] == [
        ("", "Apply", "", ""), ("kubectl-edit", "Update", "apps/v1", "scale")]
    assert [[str(e) for e in path] for path in entries[1].fields.paths()] == [
        ["f:spec", "f:replicas"]]
    assert parse_managed_fields(None) == ((), ())
    assert parse_managed_fields("f:spec") == ((), ("metadata.managedFields is not a list: str",))
    with pytest.raises(FieldsV1Error, match=r"bad JSON in path element: 'k:\{'"):
        PathElement.parse("k:{")


def test_path_elements_name_list_items_by_key_value_or_position() -> None:
    port = PathElement.parse('k:{"protocol":"TCP","containerPort":26257}')
    assert port == PathElement.parse('k:{"containerPort":26257,"protocol":"TCP"}')
    assert str(port) == 'k:{"containerPort":26257,"protocol":"TCP"}'
    assert str(PathElement.parse('v:"a, b"')) == 'v:"a, b"'
    assert not port.matches_item("26257/TCP") and not PathElement("i", 0).matches_item({})
    assert not PathElement("f", "name").matches_item({"name": "x"})
    ports = parse_fields_v1({"i:1": {"f:name": {}}, 'k:{"name":"sql"}': {}})
    second = ports.item_child({"name": "http"}, 1)
    assert second is not None and second.field_child("name") is not None
    assert ports.item_child({"name": "http"}, 0) is None
    assert ports.item_child({"name": "sql"}, 1) == parse_fields_v1({})


def test_a_rendered_value_of_one_removed_by_hand_is_drift_unlike_a_zero() -> None:
    desired = desired_statefulset()
    desired["spec"]["minReadySeconds"] = 1
    live = live_statefulset()
    assert "minReadySeconds" not in live["spec"]
    assert [c.pointer for c in check(desired, live).changes] == ["/spec/minReadySeconds"]
    desired["spec"]["minReadySeconds"] = 0
    assert not check(desired, live).drifted, "the server drops a zero on output"


def test_an_ignored_env_var_hides_only_itself() -> None:
    live = live_statefulset()
    env = kwbase(live)["env"]
    env[0] = {"name": "POD_NAME", "value": "changed by hand"}
    env[1] = {"name": "LD_LIBRARY_PATH", "value": "/tmp"}
    rules = [IgnoreRule.parse(
        {"pointer": "/spec/template/spec/containers/kwbase/env/POD_NAME"})]
    report = check(desired_statefulset(), live, ignore_rules=rules)
    assert [c.pointer for c in report.changes] == [
        "/spec/template/spec/containers/kwbase/env/LD_LIBRARY_PATH/value"]


def test_an_ignored_field_someone_added_hides_only_itself() -> None:
    live = live_statefulset()
    kwbase(live)["tty"] = True
    kwbase(live)["stdin"] = True
    edit: Obj = {"f:spec": {"f:template": {"f:spec": {"f:containers": {
        KWBASE: {"f:tty": {}, "f:stdin": {}}}}}}}
    live["metadata"]["managedFields"].append(entry("kubectl-edit", "Update", edit))
    rules = [IgnoreRule.parse({"pointer": "/spec/template/spec/containers/kwbase/tty"})]
    report = check(desired_statefulset(), live, ignore_rules=rules)
    assert [c.path for c in report.changes] == ["spec.template.spec.containers[kwbase].stdin"]


def test_a_secret_looking_annotation_changed_by_hand_shows_masks_only() -> None:
    desired = desired_statefulset()
    desired["metadata"]["annotations"] = {"vault.example.com/secret-token": "t0ken-one",
                                          "team": "orders"}
    live = live_statefulset()
    live["metadata"]["annotations"] = {"vault.example.com/secret-token": "t0ken-two",
                                       "team": "orders"}
    report = check(desired, live)
    change = change_at(report, "/metadata/annotations/vault.example.com~1secret-token")
    assert change.desired.startswith("***") and change.live.startswith("***")
    assert change.desired != change.live
    assert "t0ken" not in format_report(report)


def network_policies() -> tuple[Obj, Obj]:
    """A NetworkPolicy as we render it, and as the server keeps it after a client-side
    `kubectl apply` created it (that manager owns the atomic ingress rules whole)."""
    desired: Obj = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "kwdb", "namespace": "kaiwu", "labels": dict(LABELS)},
        "spec": {"podSelector": {"matchLabels": dict(SELECTOR)},
                 "ingress": [{"ports": [{"port": 26257}]}]}}
    live = copy.deepcopy(desired)
    live["metadata"].update(uid="np-1", resourceVersion="8", managedFields=[entry(
        "kubectl-client-side-apply", "Update",
        {"f:spec": {"f:ingress": {}, "f:podSelector": {}, "f:policyTypes": {}}},
        "networking.k8s.io/v1")])
    live["spec"]["ingress"][0]["ports"][0]["protocol"] = "TCP"
    live["spec"]["policyTypes"] = ["Ingress"]
    return desired, live


def test_defaults_inside_atomic_rules_another_manager_owns_are_not_drift() -> None:
    desired, live = network_policies()
    assert not check(desired, live).drifted
    live["spec"]["ingress"][0]["ports"][0]["protocol"] = "UDP"
    assert [c.pointer for c in check(desired, live).changes] == [
        "/spec/ingress/0/ports/0/protocol"]


def test_an_empty_dir_volume_in_sync_is_no_drift() -> None:
    desired = desired_statefulset()
    desired["spec"]["template"]["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    live = live_statefulset()
    live["spec"]["template"]["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    assert not check(desired, live).drifted


def test_a_map_replaced_by_a_scalar_shows_the_scalar() -> None:
    desired: Obj = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                    "metadata": {"name": "kwdb", "namespace": "kaiwu"},
                    "spec": {"selector": {"matchLabels": dict(SELECTOR)}}}
    live = copy.deepcopy(desired)
    live["spec"]["selector"] = "app=kwdb"
    (change,) = check(desired, live).changes
    assert (change.pointer, change.live) == ("/spec/selector", "app=kwdb")


# --- the report's words and the hash's form ---


def test_a_report_reads_desired_then_live_with_absent_sides_and_every_manager() -> None:
    report = DriftReport("ClusterRole", "", "kaiwu-reader", True, (
        Change("added", "/rules/1", "rules[1]", None, {"verbs": ["get"]},
               ("kubectl-edit", "kubectl-patch")),
        Change("removed", "/metadata/labels/team", "metadata.labels.team", "db", None),
    ), "sha256:a", "sha256:b")
    assert format_report(report).splitlines() == [
        "ClusterRole kaiwu-reader: drifted (2 changes)",
        '  rules[1]: (absent) -> {"verbs": ["get"]} [added] (by kubectl-edit, kubectl-patch)',
        '  metadata.labels.team: "db" -> (absent) [removed]',
    ]
    assert format_report(replace(report, drifted=False)) == "ClusterRole kaiwu-reader: in sync"


def test_a_change_inside_a_list_held_in_a_list_is_named_by_positions() -> None:
    projection = Projection("Thing", "ns", "a", {"spec": {"terms": [{"values": ["x", "y"]}]}},
                            {"spec": {"terms": [{"values": ["x", "z"]}]}}, frozenset(), {})
    [change] = report(projection).changes
    assert (change.pointer, change.path) == ("/spec/terms/0/values/1", "spec.terms[0].values[1]")


def test_the_hash_is_of_canonical_json_sorted_compact_and_utf8() -> None:
    obj = {"b": "é", "a": [1, 2]}
    text = '{"a":[1,2],"b":"é"}'
    assert projection_hash(obj) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    with pytest.raises(ValueError):
        projection_hash({"a": float("nan")})


def test_a_live_object_of_another_shape_altogether_is_one_change_of_the_whole() -> None:
    projection = Projection("Thing", "ns", "a", {"spec": {"a": 1}},
                            cast(Any, ["spec"]), frozenset(), {})
    [change] = report(projection).changes
    assert (change.kind, change.pointer, change.path) == ("changed", "", "(whole object)")


@pytest.mark.parametrize("desired, live", [
    # One changed key among many equal ones, with keys only one side has.
    ({**{f"k{i}": i for i in range(10)}, "x": 1, "a": 1, "b": 2, "c": 3},
     {**{f"k{i}": i for i in range(10)}, "x": 2, "d": 4, "e": 5, "f": 6}),
    ({"k0": 0, "k1": 1, "x": {"y": 1, "z": 2}, "a": 1},
     {"k0": 0, "k1": 1, "x": {"y": 2, "w": 3}, "b": 1}),
    ({"only": {"m": 1, "n": 2, "o": 3}}, {"only": {"p": 1, "q": 2, "o": 4}}),
])
def test_pruning_what_both_sides_share_changes_nothing_deepdiff_reports(
        desired: Obj, live: Obj, monkeypatch: pytest.MonkeyPatch) -> None:
    projection = Projection("Thing", "ns", "a", {"spec": desired}, {"spec": live},
                            frozenset(), {})
    pruned = report(projection)
    monkeypatch.setattr(compare_module, "differing", lambda d, lv: (d, lv))
    assert report(projection) == pruned
