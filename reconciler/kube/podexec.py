"""A command run in a container over the Kubernetes exec API: the websocket protocol offered,
the streams read without waiting, and the kubelet's exit status read (or its absence, or a
command that never ran: ExecNotRun).

Called by `reconciler.kube.client.Kube.exec`, through which every command the reconciler runs in
a pod goes; tests/support/pods.py reads exit statuses with `exit_status` too.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from kubernetes import client
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL, STDERR_CHANNEL, STDOUT_CHANNEL
from websocket import WebSocketException


def run(configuration: client.Configuration, namespace: str, pod: str, container: str,
        command: list[str], timeout: float) -> tuple[str, str, int]:
    """Run a command in a container (no shell); returns (stdout, stderr, exit code), the
    code -1 when no exit status came: the time-out passed, or the stream was cut (a kubelet
    restarting, a node losing power, a proxy). Callers never read -1 as "did not run".

    It offers only the websocket protocol v4 (EXEC_PROTOCOL): its exit status is the
    kubelet's own, which the kubelet sends for a success too, so a stream cut midway has
    none. The client's default offer puts v5 first, and from Kubernetes 1.30 an API server
    answers v5 by translating the exec to SPDY towards the kubelet; its translator reports
    a SPDY stream that ends without a status as Success (client-go reads an empty error
    stream as no error), so a cut exec read exit 0 with part of its output (seen on
    1.36.2: tests/world/selftest/test_exec_spdy.py). v4 is proxied to the kubelet as it is,
    by every release from 1.20 to 1.36.

    The client's `stream` helper swaps the request function of the ApiClient it is given
    for a websocket one while it runs. On the shared client every other thread's request
    made meanwhile (a Lease renewal, a write) would go out as a websocket GET and be lost,
    so each exec gets an ApiClient of its own over the same configuration (credentials,
    CA, token refresh), closed when the command ends."""
    own = client.ApiClient(configuration)
    try:
        response = stream(client.CoreV1Api(own).connect_get_namespaced_pod_exec, pod,
                          namespace, container=container, command=command, stdout=True,
                          stderr=True, stdin=False, tty=False, _preload_content=False,
                          _request_timeout=timeout,
                          _headers={"sec-websocket-protocol": EXEC_PROTOCOL})
        try:
            cut = False
            try:
                response.run_forever(timeout=timeout)
            except (WebSocketException, OSError):
                cut = True  # the connection ended without a closing frame
            # Whether the stream ended is read before any channel: a read takes in the
            # frames that came meanwhile, the closing ones too, so a stream still open when
            # the time-out passed would otherwise read as ended, its output cut short. A
            # stream cut after its status frame came did end (the status comes last).
            ended = cut or not response.is_open()
            # What arrived, without waiting: read_stdout()'s default (timeout=None) blocks
            # until the channel gets data, so a silent command outliving `timeout` (a long
            # EXPORT) would hold this call until it printed.
            stdout = _arrived(response, STDOUT_CHANNEL)
            stderr = _arrived(response, STDERR_CHANNEL)
            code = exit_status(_arrived(response, ERROR_CHANNEL)) if ended else None
        finally:
            response.close()
    finally:
        own.close()  # type: ignore[no-untyped-call,unused-ignore]  # the client leaves close() unannotated
    return stdout, stderr, int(code if code is not None else -1)


# Failures that come before the command starts: the API server could not reach the kubelet
# (stream translation, 1.30+: "error sending request: ... dial tcp ..."), or the kubelet or the
# runtime could not start it (a container that is not there, an exec that failed to start).
NOT_STARTED = re.compile(r"error sending request|dial tcp|unable to upgrade connection|"
                         r"container not found|failed to start exec|OCI runtime exec failed",
                         re.IGNORECASE)


class ExecNotRun(Exception):
    """The exec's status says the command did not run to an exit code: the container or its
    kubelet could not be reached, or the kubelet refused (its message is the error's)."""


# The exec protocol offered (see run): the kubelet's own streams and exit status.
EXEC_PROTOCOL = "v4.channel.k8s.io"


def _arrived(response: Any, channel: int) -> str:
    """What a channel holds now, without waiting; after a cut, what arrived before it (a read
    that would touch the closed socket again gives nothing more)."""
    try:
        return str(response.read_channel(channel, timeout=0) or "")
    except (WebSocketException, OSError):
        return ""


def exit_status(raw: str) -> int | None:
    """The exit code in an exec's status channel (a metav1.Status: Success is 0, Failure with
    reason NonZeroExitCode carries the code as its ExitCode cause; kubelet's remotecommand
    v4). None when no status came (the stream was cut: an idle time-out, an API server
    restart, a proxy), or a Failure that may have come after the command started: a caller
    cannot tell that from a command still running. ExecNotRun for a Failure that comes before
    the command starts (NOT_STARTED): an API server that translates an exec (1.30+, for a
    client offering v5; run offers v4, which is proxied as it is) upgrades the
    websocket before it reaches the kubelet, so a kubelet it cannot reach comes back as such
    a Failure, not as an HTTP error."""
    if not raw.strip():
        return None
    try:
        status = yaml.safe_load(raw)
    except yaml.YAMLError:
        status = None
    if not isinstance(status, dict):
        raise ExecNotRun(raw.strip()[:500])
    if status.get("status") == "Success":
        return 0
    details = status.get("details")
    found = details.get("causes") if isinstance(details, dict) else None
    causes = [c for c in found or () if isinstance(c, dict)]
    if status.get("reason") == "NonZeroExitCode" and causes and \
            causes[0].get("reason") == "ExitCode" and str(causes[0].get("message")).isdigit():
        return int(causes[0]["message"])
    message = str(status.get("message") or raw.strip())[:500]
    if NOT_STARTED.search(message):
        raise ExecNotRun(message)
    # Any other Failure may come after the command started (a runtime stream lost midway):
    # no exit status, as a cut stream; the caller's time-out path asks KWDB what happened.
    return None

