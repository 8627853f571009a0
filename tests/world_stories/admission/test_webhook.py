"""The admission webhook on the real 1.20 API server: the renderer's rules at the door.

Stories: with the reconciler running and its webhook registered (by the reconciler itself, with
its own certificate), a user creating an invalid KaiwuCluster, changing the start mode, shrinking
storage, downgrading the version, or running `kubectl scale` below the floor (the PATCH, and the
PUT, it sends to the scale subresource) is refused at once with the renderer's one-line message,
and the audit log shows each as a denied request; a valid change passes. Killing the leader
leaves the door kept by the standby. The CA and serving certificate rotate (lifetimes of
seconds) while a loop of valid updates runs, and none is refused.

What is simulated: the webhook's Service (tests/support/webhook.py: a TCP forwarder over the
replicas, standing in for kube-proxy); the replicas run the real runtime with a stand-in
Controller, so no KaiwuDB is involved (the change rules are judged against the stored object;
the reconciler's own memory of the applied spec is a unit story).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from reconciler.kube import kinds as kk
from reconciler.kube.client import ApiError, Kube
from reconciler.runtime.process import Runtime
from reconciler.settings import Settings
from tests.support.runtime import GROUP, PLURAL, VERSION, RecordingController, create_cluster
from tests.support.waiting import eventually
from tests.support.webhook import ServiceProxy, registered, webhook_settings
from tests.world.controlplane import ControlPlane

DENIED = 'admission webhook "kaiwuclusters.kaiwu.inspur.com" denied the request: '


@pytest.fixture
def proxy() -> Iterator[ServiceProxy]:
    service = ServiceProxy()
    service.start()
    yield service
    service.stop()


def refusal(call: Callable[[], Any]) -> tuple[int, str]:
    """(HTTP status, message) of a request the API server refused; fails if it passed."""
    try:
        call()
    except k8s.ApiException as error:
        return int(error.status), str(json.loads(error.body or "{}").get("message", ""))
    except ApiError as error:
        return error.status, error.message
    pytest.fail("the request was accepted")


def patch(kube: k8s.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return k8s.CustomObjectsApi(kube).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def scale_patch(kube: k8s.ApiClient, namespace: str, name: str, replicas: int) -> Any:
    """What `kubectl scale kwc NAME --replicas=N` sends: a merge patch of the Scale."""
    return Kube(kube, "kubectl").patch(kk.KAIWU_CLUSTER, namespace, name,
                                       {"spec": {"replicas": replicas}}, subresource="scale")


def scale_put(kube: k8s.ApiClient, namespace: str, name: str, replicas: int) -> Any:
    """What `kubectl scale --current-replicas` (and older clients) send: a PUT of the Scale."""
    api = k8s.CustomObjectsApi(kube)
    current: dict[str, Any] = api.get_namespaced_custom_object_scale(  # type: ignore[assignment,unused-ignore]
        GROUP, VERSION, namespace, PLURAL, name)
    current["spec"]["replicas"] = replicas
    return api.replace_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, name,
                                                      current)


def started(settings: Settings, proxy: ServiceProxy) -> Runtime:
    runtime = Runtime(settings, controller_factory=RecordingController)
    runtime.start()
    proxy.backends.append((runtime.webhook_port, lambda: runtime.ready()[0]))
    return runtime


def wait_for_the_door(kube: k8s.ApiClient, namespace: str) -> float:
    """Until the API server sends KaiwuClusters to the webhook (an invalid one is refused);
    returns how long that took."""
    began = time.monotonic()

    def refused() -> bool:
        try:
            create_cluster(kube, namespace, "probe", {"replicas": 2})
        except k8s.ApiException as error:
            return error.status == 422 and DENIED in json.loads(error.body or "{}").get(
                "message", "")
        k8s.CustomObjectsApi(kube).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "probe")
        return False

    eventually(refused, 30, "the webhook to be registered and answering", interval=0.2)
    return time.monotonic() - began


def test_the_renderers_refusals_happen_at_the_door_with_its_message_and_are_audited(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        proxy: ServiceProxy) -> None:
    settings = webhook_settings(control_plane, namespace, proxy)
    with registered(kube, settings):
        runtime = started(settings, proxy)
        try:
            ready_s = wait_for_the_door(kube, namespace)
            began = time.monotonic()
            code, message = refusal(lambda: create_cluster(kube, namespace, "bad",
                                                           {"replicas": 2}))
            assert code == 422
            assert message == DENIED + (
                f"KaiwuCluster {namespace}/bad: spec.replicas: multi-replica needs at least 3 "
                "nodes, got 2 (set replicas to 3 or more, or use startMode single-replica)")

            create_cluster(kube, namespace, "orders", {"storage": {"size": "20Gi"},
                                                       "tls": {"enabled": False}})
            eventually(lambda: runtime.caches.get(kk.KAIWU_CLUSTER, namespace, "orders"), 10,
                       "the cluster in the replica's cache")
            refused = {
                "start mode": (lambda: patch(kube, namespace, "orders",
                                             {"startMode": "single-replica"}),
                               "spec.startMode: the start mode cannot change "
                               "(multi-replica -> single-replica)"),
                "shrink": (lambda: patch(kube, namespace, "orders",
                                         {"storage": {"size": "10Gi"}}),
                           "spec.storage.size: volumes cannot shrink (20Gi -> 10Gi) "
                           "(keep 20Gi or more)"),
                "downgrade": (lambda: patch(kube, namespace, "orders", {"version": "3.1.0"}),
                              "spec.version: the version cannot go back (3.2.1 -> 3.1.0): "
                              "KaiwuDB cannot be downgraded (keep 3.2.1 or later)"),
                "kubectl scale": (lambda: scale_patch(kube, namespace, "orders", 2),
                                  "spec.replicas: multi-replica needs at least 3 nodes, got 2"),
                "scale by PUT": (lambda: scale_put(kube, namespace, "orders", 1),
                                 "spec.replicas: multi-replica needs at least 3 nodes, got 1"),
            }
            timings = []
            for what, (call, expected) in refused.items():
                started_at = time.monotonic()
                code, message = refusal(call)
                timings.append(time.monotonic() - started_at)
                assert code == 422, what
                assert message.startswith(DENIED + f"KaiwuCluster {namespace}/orders: "), what
                assert expected in message, (what, message)

            # Valid changes pass, the scale subresource included, and nothing refused was
            # stored.
            patch(kube, namespace, "orders", {"replicas": 4, "storage": {"size": "30Gi"}})
            scale_patch(kube, namespace, "orders", 5)
            stored: dict[str, Any] = k8s.CustomObjectsApi(  # type: ignore[assignment,unused-ignore]
                kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "orders")
            assert (stored["spec"]["replicas"], stored["spec"]["startMode"],
                    stored["spec"]["storage"]["size"], stored["spec"]["version"]) == \
                (5, "multi-replica", "30Gi", "3.2.1")
            total_s = time.monotonic() - began
        finally:
            runtime.stop()

    denied = [e for e in control_plane.audit_events(verbs={"create", "patch", "update"})
              if (e.get("objectRef") or {}).get("resource") == PLURAL
              and (e.get("objectRef") or {}).get("namespace") == namespace
              and (e.get("objectRef") or {}).get("name") != "probe"
              and (e.get("responseStatus") or {}).get("code") == 422]
    assert sorted((e["verb"], e["objectRef"].get("subresource", "")) for e in denied) == [
        ("create", ""), ("patch", ""), ("patch", ""), ("patch", ""), ("patch", "scale"),
        ("update", "scale")]
    # Metadata level records no message; every one of these would pass without the webhook
    # (they are schema-valid), so each 422 here is its refusal.
    assert all(e["responseStatus"].get("reason") == "Invalid" for e in denied)
    assert runtime.metrics.value("kaiwu_admission_reviews_total", {"result": "denied"}) >= 6
    print(f"\nwebhook answering {ready_s:.2f} s after the reconciler started; refusals took "
          f"{min(timings) * 1000:.0f}-{max(timings) * 1000:.0f} ms each (round trip through "
          f"the API server); the whole story {total_s:.1f} s")


def test_the_standby_keeps_the_door_when_the_leader_is_killed(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        proxy: ServiceProxy) -> None:
    leader_settings = webhook_settings(control_plane, namespace, proxy, identity="leader")
    with registered(kube, leader_settings):
        leader = started(leader_settings, proxy)
        standby = started(webhook_settings(control_plane, namespace, proxy,
                                           identity="standby"), proxy)
        try:
            eventually(leader.is_leader, 30, "the first replica to lead")
            wait_for_the_door(kube, namespace)
            eventually(lambda: standby.webhook is not None and standby.webhook.serving, 10,
                       "the standby to serve the leader's certificate")
            assert not standby.is_leader()
            create_cluster(kube, namespace, "orders", {"tls": {"enabled": False}})

            leader.stop()
            killed = time.monotonic()
            answers = [answer(kube, namespace, replicas) for replicas in (2, 4, 1, 5)]
            answered_s = time.monotonic() - killed
        finally:
            standby.stop()
            leader.stop()
    assert [code for code, _ in answers] == [422, 200, 422, 200], answers
    assert all("multi-replica needs at least 3 nodes" in message
               for code, message in answers if code == 422)
    assert standby.metrics.value("kaiwu_admission_reviews_total", {"result": "denied"}) >= 2
    print(f"\nafter the leader stopped, four scale requests answered by the standby in "
          f"{answered_s:.2f} s")


def answer(kube: k8s.ApiClient, namespace: str, replicas: int) -> tuple[int, str]:
    """(status, message) of a `kubectl scale` of orders."""
    try:
        scale_patch(kube, namespace, "orders", replicas)
    except ApiError as error:
        return error.status, error.message
    return 200, ""


def test_certificates_rotate_under_a_loop_of_updates_and_none_is_refused(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        proxy: ServiceProxy) -> None:
    # A CA living 30 s (a next one made with 10 s left), serving certificates living 10 s:
    # within the loop below the serving certificate is reissued several times and the CA
    # is replaced once, with two replicas reloading on their own.
    lifetimes = {"webhook_ca_validity_s": 30.0, "webhook_cert_validity_s": 10.0,
                 "webhook_ca_overlap_s": 1.0, "webhook_reload_s": 0.25}
    settings = webhook_settings(control_plane, namespace, proxy, identity="a", **lifetimes)
    with registered(kube, settings):
        first = started(settings, proxy)
        second = started(webhook_settings(control_plane, namespace, proxy, identity="b",
                                          **lifetimes), proxy)
        try:
            eventually(first.is_leader, 10, "a leader")
            wait_for_the_door(kube, namespace)
            create_cluster(kube, namespace, "orders", {"tls": {"enabled": False}})
            core = k8s.CoreV1Api(kube)

            def secret() -> dict[str, str]:
                found = core.read_namespaced_secret(settings.webhook_secret, namespace)
                return {key: str(value) for key, value in (found.data or {}).items()}

            initial_ca = secret()["ca.crt"]
            serving: set[str] = set()
            cas: set[str] = {initial_ca}
            updates, failures = 0, []
            began = time.monotonic()
            rotated_at = None
            while time.monotonic() - began < 40:
                try:
                    patch(kube, namespace, "orders", {"replicas": 3 + updates % 3})
                    updates += 1
                except k8s.ApiException as error:
                    failures.append(f"{error.status}: {(error.body or '')[:300]}")
                data = secret()
                serving.add(data["tls.crt"])
                cas.add(data["ca.crt"])
                if rotated_at is None and data["ca.crt"] != initial_ca and \
                        "previous-ca.crt" not in data:
                    rotated_at = time.monotonic() - began
                if rotated_at is not None and time.monotonic() - began > rotated_at + 3:
                    break
                time.sleep(0.05)
        finally:
            second.stop()
            first.stop()
    assert failures == [], failures
    assert rotated_at is not None, "the CA was replaced within the loop"
    assert len(serving) >= 3, "the serving certificate was reissued"
    print(f"\n{updates} updates in {time.monotonic() - began:.1f} s through "
          f"{len(serving)} serving certificates and {len(cas)} CAs (the CA replaced after "
          f"{rotated_at:.1f} s): 0 refused")


def test_a_cluster_that_would_take_another_clusters_objects_is_refused_at_the_door(
        control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str,
        proxy: ServiceProxy) -> None:
    """KaiwuCluster `orders` would render a Service `orders-public`, which KaiwuCluster
    `orders-public` renders too (its headless Service): each would overwrite the other's. The
    second one is refused before it is stored, naming the first and the objects."""
    settings = webhook_settings(control_plane, namespace, proxy)
    with registered(kube, settings):
        runtime = started(settings, proxy)
        try:
            wait_for_the_door(kube, namespace)
            create_cluster(kube, namespace, "orders-public", {"tls": {"enabled": False}})
            eventually(lambda: runtime.caches.get(kk.KAIWU_CLUSTER, namespace,
                                                  "orders-public"), 10,
                       "the first cluster in the replica's cache")
            code, message = refusal(lambda: create_cluster(kube, namespace, "orders",
                                                           {"tls": {"enabled": False}}))
            assert code == 422
            assert message.startswith(DENIED + f"KaiwuCluster {namespace}/orders: metadata.name: "
                                      "KaiwuCluster 'orders' would need ")
            assert f"Service {namespace}/orders-public" in message
            assert "which KaiwuCluster 'orders-public' needs too" in message
            stored: dict[str, Any] = k8s.CustomObjectsApi(  # type: ignore[assignment,unused-ignore]
                kube).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
            assert [i["metadata"]["name"] for i in stored["items"]] == ["orders-public"], \
                "nothing else was stored"
            create_cluster(kube, namespace, "payments", {"tls": {"enabled": False}})
        finally:
            runtime.stop()
