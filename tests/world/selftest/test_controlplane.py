"""The test world's control plane behaves like real Kubernetes, because it is real Kubernetes.

Stories a user of the test world relies on: the KaiwuCluster CRD is served with its schema's
defaults and validation; the garbage collector deletes dependents of a deleted custom resource;
RBAC is enforced for service-account tokens; the audit log records writes; the apiserver can be
restarted on the same address without losing data.
"""

from __future__ import annotations

import copy
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from tests.support.waiting import eventually
from tests.world.controlplane import (
    AUDIT_LOG_NEVER_ROTATE_MB,
    REPO_ROOT,
    ControlPlane,
    ControlPlaneError,
    service_account_token,
)

CRD_PATH = REPO_ROOT / "crd" / "kaiwuclusters.yaml"
GROUP, VERSION, PLURAL = "kaiwu.inspur.com", "v1", "kaiwuclusters"


def crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(Path(CRD_PATH).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == VERSION)
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def with_schema_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What a structural schema's defaults make of value: missing fields get their default, then
    the defaulting goes on inside every object and list item that is present."""
    if isinstance(value, dict) and schema.get("type") == "object":
        result = dict(value)
        for name, prop in schema.get("properties", {}).items():
            if name not in result and "default" in prop:
                result[name] = copy.deepcopy(prop["default"])
            if name in result:
                result[name] = with_schema_defaults(prop, result[name])
        return result
    if isinstance(value, list) and "items" in schema:
        return [with_schema_defaults(schema["items"], item) for item in value]
    return value


def create_kaiwucluster(kube: k8s.ApiClient, namespace: str, name: str,
                        spec: dict[str, Any]) -> dict[str, Any]:
    """kubectl apply of a KaiwuCluster, as a user would do it; returns what the server stored."""
    created = k8s.CustomObjectsApi(kube).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "KaiwuCluster",
         "metadata": {"name": name}, "spec": spec})
    assert isinstance(created, dict)
    return created


def kaiwucluster_names(kube: k8s.ApiClient, namespace: str) -> list[str]:
    listed = k8s.CustomObjectsApi(kube).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)
    assert isinstance(listed, dict)
    return [item["metadata"]["name"] for item in listed["items"]]


@pytest.mark.world
def test_the_apiserver_applies_the_kaiwucluster_schema_defaults(
        kube: k8s.ApiClient, namespace: str) -> None:
    created = create_kaiwucluster(kube, namespace, "demo", {"replicas": 5})

    # The user's value stands; everything else the schema defaults is filled in by the server.
    assert created["spec"]["replicas"] == 5
    assert created["spec"] == with_schema_defaults(crd_spec_schema(), {"replicas": 5})
    assert len(created["spec"]) > 1, "the CRD should default more than the field we set"

    assert kaiwucluster_names(kube, namespace) == ["demo"]


@pytest.mark.world
def test_the_apiserver_rejects_an_invalid_kaiwucluster_with_422(
        kube: k8s.ApiClient, namespace: str) -> None:
    too_many = crd_spec_schema()["properties"]["replicas"]["maximum"] + 1

    with pytest.raises(k8s.ApiException) as rejected:
        create_kaiwucluster(kube, namespace, "too-big", {"replicas": too_many})

    assert rejected.value.status == 422
    assert "spec.replicas" in str(rejected.value.body)
    assert kaiwucluster_names(kube, namespace) == [], "nothing was stored"


@pytest.mark.world
def test_deleting_a_kaiwucluster_garbage_collects_what_it_owns(
        kube: k8s.ApiClient, namespace: str) -> None:
    custom = k8s.CustomObjectsApi(kube)
    core = k8s.CoreV1Api(kube)
    owner = create_kaiwucluster(kube, namespace, "owner", {})
    core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name="owned", owner_references=[k8s.V1OwnerReference(
            api_version=f"{GROUP}/{VERSION}", kind="KaiwuCluster", name="owner",
            uid=owner["metadata"]["uid"], controller=True)]),
        data={"k": "v"}))
    core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name="bystander"), data={"k": "v"}))

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "owner")

    def owned_is_gone() -> bool | None:
        try:
            core.read_namespaced_config_map("owned", namespace)
        except k8s.ApiException as err:
            if err.status == 404:
                return True
            raise
        return None

    eventually(owned_is_gone, 30, "the garbage collector to delete the owned ConfigMap")
    assert core.read_namespaced_config_map("bystander", namespace).data == {"k": "v"}


@pytest.mark.world
def test_rbac_is_enforced_for_a_service_account_token(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(kube)
    core.create_namespaced_service_account(
        namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="reader")))
    as_reader = control_plane.api_client(token=service_account_token(core, namespace, "reader"))
    reader_core = k8s.CoreV1Api(as_reader)

    # Authenticated, but nothing grants it anything: forbidden.
    with pytest.raises(k8s.ApiException) as forbidden:
        reader_core.list_namespaced_config_map(namespace)
    assert forbidden.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in str(forbidden.value.body)

    # Once a Role and RoleBinding grant it, the same token may list config maps.
    rbac = k8s.RbacAuthorizationV1Api(kube)
    rbac.create_namespaced_role(namespace, k8s.V1Role(
        metadata=k8s.V1ObjectMeta(name="read-config"),
        rules=[k8s.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["list"])]))
    rbac.create_namespaced_role_binding(namespace, k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name="reader-reads-config"),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                               name="read-config"),
        subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name="reader",
                                    namespace=namespace)]))

    def can_list() -> bool | None:
        try:
            reader_core.list_namespaced_config_map(namespace)
        except k8s.ApiException as err:
            if err.status == 403:
                return None  # the RBAC authorizer's cache has not seen the binding yet
            raise
        return True

    eventually(can_list, 10, "the new RoleBinding to take effect")
    # Still only what was granted: reading secrets stays forbidden.
    with pytest.raises(k8s.ApiException) as still_forbidden:
        reader_core.list_namespaced_secret(namespace)
    assert still_forbidden.value.status == 403
    as_reader.close()  # type: ignore[no-untyped-call,unused-ignore]  # the client leaves close() unannotated


@pytest.mark.world
def test_the_audit_log_records_who_wrote_what(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    name = f"audited-{secrets.token_hex(3)}"
    k8s.CoreV1Api(kube).create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name), data={"k": "v"}))

    def the_create() -> dict[str, Any] | None:
        for event in control_plane.audit_events(user="admin", verbs={"create"}):
            ref = event.get("objectRef", {})
            if ref.get("resource") == "configmaps" and ref.get("name") == name:
                return event
        return None

    event = eventually(the_create, 5, f"an audit event for creating ConfigMap {name}")
    assert event["objectRef"]["namespace"] == namespace
    assert event["responseStatus"]["code"] == 201
    assert event["level"] == "Metadata"
    assert "requestObject" not in event, "Metadata level must not log request bodies"


@pytest.mark.world
def test_the_audit_log_never_rotates_and_a_rotated_one_fails_its_readers(
        control_plane: ControlPlane) -> None:
    # Left to its default the apiserver rotates at 100 MB, which a full session outgrows: every
    # story reading the log afterwards would miss what went before, silently.
    pid = control_plane.pids()["kube-apiserver"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert f"--audit-log-maxsize={AUDIT_LOG_NEVER_ROTATE_MB}".encode() in argv
    rotated = control_plane.log_dir / "audit-2026-12-02T03-00-00.000.log"
    rotated.write_text("")
    try:
        with pytest.raises(ControlPlaneError, match="rotated its audit log"):
            control_plane.audit_events()
    finally:
        rotated.unlink()


@pytest.mark.world
def test_the_apiserver_restarts_on_the_same_address_with_its_data(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(kube)
    core.create_namespaced_config_map(namespace, k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name="survivor"), data={"k": "v"}))
    pid_before = control_plane.pids()["kube-apiserver"]

    control_plane.restart_apiserver()

    assert control_plane.pids()["kube-apiserver"] != pid_before
    # The same client (same URL, CA and token) works again, and etcd kept the data.
    assert core.read_namespaced_config_map("survivor", namespace).data == {"k": "v"}


