"""Helpers for the admission webhook's stories (tests/world_stories/admission/).

The test world has no kube-proxy, so the webhook's Service is simulated: `ServiceProxy` listens
on one 127.0.0.1 port (the address the ValidatingWebhookConfiguration's `url` names) and hands
each TCP connection to the next ready replica that accepts it, as a Service does with its ready
endpoints: a backend is skipped while its readiness (the replica's `/readyz`, false until it
has a serving certificate) says no, or while it refuses connections (stopped), as its endpoint
would be removed. Bytes are passed through untouched: TLS is between the real API server and the
replica. `webhook_settings` turns the webhook on for a runtime of the stories, registered under a
name of the test's own (`registered` deletes it afterwards: with failurePolicy Fail a leftover
registration would refuse every later story's KaiwuCluster).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from kubernetes import client as k8s

from reconciler.settings import Settings
from tests.support.runtime import runtime_settings
from tests.world.controlplane import ControlPlane


class ServiceProxy:
    """A TCP forwarder over several backend ports, round robin, skipping refusing ones."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        # (port, ready): ready is the replica's readiness, as the endpoints controller reads it.
        self.backends: list[tuple[int, Callable[[], bool]]] = []
        self._next = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="service-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _connect(self) -> socket.socket | None:
        backends = list(self.backends)
        for offset in range(len(backends)):
            port, ready = backends[(self._next + offset) % len(backends)]
            if not ready():
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                continue
            self._next = (self._next + offset + 1) % len(backends)
            return upstream
        return None

    def _serve(self, client: socket.socket) -> None:
        upstream = self._connect()
        if upstream is None:
            client.close()
            return
        upstream.settimeout(None)

        def pipe(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (source, sink):
                    with suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

        back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
        back.start()
        pipe(client, upstream)
        back.join(timeout=15)
        client.close()
        upstream.close()


def webhook_settings(control_plane: ControlPlane, namespace: str, proxy: ServiceProxy,
                     **changes: Any) -> Settings:
    """A runtime of the stories with the webhook on, registered with the proxy's URL."""
    values: dict[str, Any] = {
        "webhook": True, "webhook_address": "127.0.0.1:0",
        "webhook_url": f"https://127.0.0.1:{proxy.port}", "webhook_hosts": "127.0.0.1",
        "webhook_configuration": f"kaiwu-test-{namespace}",
        "webhook_reload_s": 0.5, "webhook_ca_overlap_s": 2.0,
        # RSA keys of the default size: the API server's TLS stack checks them as in production.
    }
    values.update(changes)
    return runtime_settings(control_plane, namespace, **values)


@contextmanager
def registered(kube: k8s.ApiClient, settings: Settings) -> Iterator[None]:
    """Delete the test's ValidatingWebhookConfiguration at the end, whatever happened."""
    try:
        yield
    finally:
        try:
            k8s.AdmissionregistrationV1Api(kube).delete_validating_webhook_configuration(
                settings.effective_webhook_configuration())
        except k8s.ApiException as error:
            if error.status != 404:
                raise
