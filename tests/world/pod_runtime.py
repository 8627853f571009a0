"""Per-pod runtime state of the simulated kubelet, and the pod status it reports.

Used by tests/world/kubelet.py, which owns the state machine (when containers start, die,
restart, get probed) and talks to the API server; this module holds the state itself and turns
it into the `status` a 1.20 kubelet posts: phase, conditions (Initialized, Ready,
ContainersReady), container statuses with state/lastState/restartCount, pod and host IPs. It also
has the kubelet's small rules: $(VAR) expansion of command lines, env from fieldRefs, the
CrashLoopBackOff back-off (client-go's flowcontrol.Backoff), which images are KaiwuDB's.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.world.kube_rest import JsonObj
from tests.world.kwdb_port import ClusterKey, ProcessExit

# The kubelet's cap on a termination message taken from the log (FallbackToLogsOnError).
TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048


def rfc3339(wall: float | None = None) -> str:
    moment = datetime.datetime.fromtimestamp(
        wall if wall is not None else time.time(), datetime.UTC
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(wall: float | None = None) -> str:
    moment = datetime.datetime.fromtimestamp(
        wall if wall is not None else time.time(), datetime.UTC
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_kwdb_image(image: str, suffix: str) -> bool:
    """kwdb/kwdb:3.2.1, ghcr.io/kwdb/kwdb@sha256:..., a mirror's .../kwdb/kwdb:tag."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    return repo == suffix or repo.endswith("/" + suffix)


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion in command/args: known vars replaced, $$ escapes a $."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(sub, text)


def rendered_argv(command: Sequence[str], pod: str, *, upgrade_complete: bool = False
                  ) -> list[str]:
    """What the kubelet runs of a rendered kwbase command line in `pod`: $(POD_NAME) and the
    start-flags ConfigMap's $(KAIWU_UPGRADE_COMPLETE) expanded (for tests that start the
    simulated processes themselves, without a kubelet)."""
    env = {"POD_NAME": pod, "KAIWU_UPGRADE_COMPLETE": "true" if upgrade_complete else "false"}
    return [expand(str(word), env) for word in command]


def _field_ref(pod: JsonObj, path: str, pod_ip: str, host_ip: str) -> str | None:
    meta = pod["metadata"]
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": pod["spec"].get("nodeName"),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.podIP": pod_ip,
        "status.hostIP": host_ip,
    }
    if path in simple:
        known = simple[path]
        return str(known) if known is not None else None
    found = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if found:
        value = (meta.get(found.group(1)) or {}).get(found.group(2))
        return str(value) if value is not None else None
    return None


def termination_message(container: JsonObj, ended: ProcessExit) -> str:
    """lastState.terminated.message: the process's last words only under the policy
    FallbackToLogsOnError and a failure; the default policy (File) reads /dev/termination-log,
    which kwbase never writes."""
    if container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
        return ""
    if ended.exit_code == 0:
        return ""
    tail = "\n".join(ended.message.splitlines()[-TERMINATION_LOG_LINES:])
    return tail.encode()[-TERMINATION_LOG_BYTES:].decode(errors="ignore")


class ContainerConfigError(Exception):
    """The container cannot be created yet (the kubelet's CreateContainerConfigError): an env
    var names a ConfigMap or key that does not exist and is not optional."""


def container_env(
    container: JsonObj,
    pod: JsonObj,
    pod_ip: str,
    host_ip: str,
    config_map: Callable[[str], JsonObj | None] | None = None,
) -> dict[str, str]:
    """The env vars a container sees that can be known here: literals, fieldRefs, and
    configMapKeyRefs when `config_map` reads a ConfigMap of the pod's namespace by name (read
    at each container start, as the kubelet does; missing and not optional: ContainerConfigError
    with the kubelet's message, pkg/kubelet/kubelet_pods.go makeEnvironmentVariables)."""
    env: dict[str, str] = {}
    namespace = pod["metadata"].get("namespace")
    for var in container.get("env") or []:
        source = var.get("valueFrom") or {}
        if "value" in var:
            env[var["name"]] = expand(str(var["value"]), env)
        elif "fieldRef" in source:
            value = _field_ref(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ip)
            if value is not None:
                env[var["name"]] = value
        elif "configMapKeyRef" in source and config_map is not None:
            ref = source["configMapKeyRef"]
            name, key, optional = ref.get("name"), ref.get("key"), bool(ref.get("optional"))
            found = config_map(str(name))
            if found is None:
                if optional:
                    continue
                raise ContainerConfigError(f'configmap "{name}" not found')
            data = found.get("data") or {}
            if key not in data:
                if optional:
                    continue
                raise ContainerConfigError(
                    f"couldn't find key {key} in ConfigMap {namespace}/{name}")
            env[var["name"]] = str(data[key])
    return env


class Backoff:
    """The kubelet's per-container back-off (k8s.io/client-go/util/flowcontrol.Backoff)."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.delay: float | None = None
        self.last_update = 0.0

    def _expired(self, event: float) -> bool:
        return event - self.last_update > 2 * self.maximum

    def in_backoff_since(self, event: float, now: float) -> bool:
        if self.delay is None or self._expired(event):
            return False
        return now - event < self.delay

    def next(self, now: float) -> None:
        if self.delay is None or self._expired(now):
            self.delay = self.initial
        else:
            self.delay = min(self.delay * 2, self.maximum)
        self.last_update = now

    def reset(self) -> None:
        self.delay = None


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str
    message: str
    started_at: str
    finished_at: str
    container_id: str

    def as_status(self) -> JsonObj:
        status: JsonObj = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "containerID": self.container_id,
        }
        if self.message:
            status["message"] = self.message
        return status


class ContainerRuntime:
    """Mutable runtime state of one container (or init container) of a pod."""

    def __init__(self, spec: JsonObj, kwdb: bool, backoff: Backoff) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.image: str = spec.get("image", "")
        self.kwdb = kwdb
        self.state = "new"  # new | running | exited
        self.started_wall = 0.0
        self.started_mono = 0.0
        self.finished_mono = 0.0
        self.container_id = ""
        self.current: Terminated | None = None  # the exited instance
        self.last: Terminated | None = None  # the one before the running/waiting instance
        self.restart_count = 0
        self.ready = False
        self.started_probe = False
        # One probe worker per probe kind, as pkg/kubelet/prober/worker.go keeps them: its next
        # tick (monotonic), the last result and how many times in a row it came, and whether it
        # is on hold after a liveness/startup failure until a new container runs.
        self.probe_tick: dict[str, float] = {}
        self.last_result: dict[str, bool] = {}
        self.result_run = {"readiness": 0, "liveness": 0, "startup": 0}
        self.on_hold = {"readiness": False, "liveness": False, "startup": False}
        # Being killed (killContainer): why, when the process would end its drain by itself and
        # when the grace period ends (monotonic), until it exits.
        self.stopping = ""
        self.drain_done_at = 0.0
        self.kill_at = 0.0
        self.backoff = backoff
        self.backoff_event_sent = False
        self.lost = False  # its machine went down while it ran
        self.config_error = ""  # why it could not be created yet (CreateContainerConfigError)

    def image_id(self) -> str:
        digest = hashlib.sha256(self.image.encode()).hexdigest()
        repo = self.image.split("@", 1)[0].rsplit(":", 1)[0]
        return f"docker.io/{repo}@sha256:{digest}"


class PodRuntime:
    """Mutable runtime state of one pod on one of our nodes."""

    def __init__(
        self,
        pod: JsonObj,
        *,
        now: float,
        kwdb_image_suffix: str,
        backoff_initial_s: float,
        backoff_max_s: float,
    ) -> None:
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.node: str = pod["spec"]["nodeName"]
        self.seen_at = now
        self.sandbox = False
        self.pod_ip = ""
        self.start_time = ""
        self.store_key: str | None = None
        self.volume_error = ""
        self.next_mount = 0.0
        self.volume_event_sent = False
        self.terminating_since: float | None = None
        self.delete_sent = False

        def make(spec: JsonObj) -> ContainerRuntime:
            kwdb = is_kwdb_image(spec.get("image", ""), kwdb_image_suffix)
            backoff = Backoff(backoff_initial_s, backoff_max_s)
            return ContainerRuntime(spec, kwdb, backoff)

        self.init = [make(c) for c in pod["spec"].get("initContainers") or []]
        self.containers = [make(c) for c in pod["spec"].get("containers") or []]

    @property
    def cluster(self) -> ClusterKey:
        meta = self.pod["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "StatefulSet":
                return ClusterKey(self.namespace, ref["name"])
        instance = (meta.get("labels") or {}).get("app.kubernetes.io/instance")
        return ClusterKey(self.namespace, instance or self.name)

    @property
    def restart_policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    def container(self, name: str) -> ContainerRuntime | None:
        for c in itertools.chain(self.containers, self.init):
            if c.name == name:
                return c
        return None


def prune(value: Any) -> Any:
    """Drop None, empty strings/lists/dicts, so our status and the server's compare equal."""
    if isinstance(value, dict):
        pruned = {k: prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [prune(v) for v in value]
    return value


def initialized(pod: PodRuntime) -> bool:
    """Every init container has exited 0."""
    return all(c.state == "exited" and c.current and c.current.exit_code == 0
               for c in pod.init)


def container_status(pod: PodRuntime, c: ContainerRuntime, init: bool) -> JsonObj:
    """A containerStatuses / initContainerStatuses entry as the kubelet reports it."""
    state: JsonObj
    if pod.volume_error or (not pod.sandbox and c.state == "new"):
        state = {"waiting": {"reason": "ContainerCreating"}}
    elif c.state == "new" and c.config_error:
        state = {"waiting": {"reason": "CreateContainerConfigError", "message": c.config_error}}
    elif c.state == "new":
        state = {"waiting": {"reason": "PodInitializing" if not init else "ContainerCreating"}}
    elif c.state == "running":
        state = {"running": {"startedAt": rfc3339(c.started_wall)}}
    else:
        assert c.current is not None
        restarting = not init and (
            pod.restart_policy == "Always"
            or (pod.restart_policy == "OnFailure" and c.current.exit_code != 0)
        )
        if restarting and pod.terminating_since is None:
            delay = int(c.backoff.delay or 0)
            state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": (
                        f"back-off {delay}s restarting failed container={c.name} "
                        f"pod={pod.name}_{pod.namespace}({pod.uid})"
                    ),
                }
            }
        else:
            state = {"terminated": c.current.as_status()}
    last = c.last
    if c.state == "exited" and "waiting" in state and c.current is not None:
        last = c.current  # waiting to restart: the instance that just died is the last state
    status: JsonObj = {
        "name": c.name,
        "state": state,
        "lastState": {"terminated": last.as_status()} if last else {},
        "ready": c.ready,
        "restartCount": c.restart_count,
        "image": c.image,
        "imageID": c.image_id() if c.container_id else "",
        "started": c.state == "running" and c.started_probe,
    }
    if c.container_id:
        status["containerID"] = c.container_id
    if init:
        status.pop("started")
    return status

def phase(pod: PodRuntime) -> str:
    """The pod phase the kubelet computes from its containers."""
    if not initialized(pod):
        return "Pending"
    if all(c.state == "new" for c in pod.containers):
        return "Pending"
    if all(c.state == "exited" for c in pod.containers) and (
        pod.restart_policy == "Never"
        or (pod.restart_policy == "OnFailure"
            and all(c.current and c.current.exit_code == 0 for c in pod.containers))
    ):
        failed = any(c.current and c.current.exit_code != 0 for c in pod.containers)
        return "Failed" if failed else "Succeeded"
    return "Running"

def conditions(pod: PodRuntime) -> list[JsonObj]:
    """Initialized, Ready, ContainersReady; others' conditions carried over."""
    live = {c["type"]: c for c in pod.pod.get("status", {}).get("conditions") or []}
    now = rfc3339()

    def condition(kind: str, ok: bool, reason: str = "", message: str = "") -> JsonObj:
        status = "True" if ok else "False"
        before = live.get(kind)
        since = before["lastTransitionTime"] if before and before["status"] == status else now
        cond: JsonObj = {"type": kind, "status": status, "lastProbeTime": None,
                         "lastTransitionTime": since}
        if not ok:
            cond["reason"] = reason
            if message:
                cond["message"] = message
        return cond

    pending_init = [c.name for c in pod.init if not (c.state == "exited" and c.current
                                                      and c.current.exit_code == 0)]
    unready = [c.name for c in pod.containers if not c.ready]
    gates = [g["conditionType"] for g in pod.pod["spec"].get("readinessGates") or []]
    gates_ok = all(live.get(g, {}).get("status") == "True" for g in gates)
    names = ", ".join(unready)
    ours = [
        condition("Initialized", not pending_init, "ContainersNotInitialized",
                  f"containers with incomplete status: [{' '.join(pending_init)}]"),
        condition("Ready", not unready and gates_ok,
                  "ContainersNotReady" if unready else "ReadinessGatesNotReady",
                  f"containers with unready status: [{names}]" if unready
                  else "corresponding condition of pod readiness gate is not true"),
        condition("ContainersReady", not unready, "ContainersNotReady",
                  f"containers with unready status: [{names}]"),
    ]
    mine = {c["type"] for c in ours}
    # Conditions others own (PodScheduled, readiness gates) are carried over untouched.
    return ours + [c for kind, c in live.items() if kind not in mine]

def pod_status(pod: PodRuntime, host_ip: str) -> JsonObj:
    """The whole status the kubelet would post for the pod now."""
    status: JsonObj = {
        "phase": phase(pod),
        "conditions": conditions(pod),
        "hostIP": host_ip,
        "containerStatuses": [container_status(pod, c, False) for c in pod.containers],
    }
    if pod.init:
        status["initContainerStatuses"] = [
            container_status(pod, c, True) for c in pod.init
        ]
    if pod.pod_ip:
        status["podIP"] = pod.pod_ip
        status["podIPs"] = [{"ip": pod.pod_ip}]
    if pod.start_time:
        status["startTime"] = pod.start_time
    return status


PROJECTED_DEFAULT_MODE = 0o644  # the API's default for a secret or projected volume
READ_ONLY_GROUP_MASK = 0o440


def mounted_file_modes(container: JsonObj, pod: JsonObj) -> dict[str, int]:
    """The files a container's secret and projected volumes hold, path -> mode, as the kubelet
    writes them (Kubernetes v1.20.2): each item's mode, or the volume's defaultMode
    (pkg/volume/projected/projected.go:250, secret/secret.go), and with the pod's fsGroup every
    file of such a read-only volume also readable by the group (projected.go:171, 240;
    pkg/volume/volume_linux.go:35-36, 91-128: mode | 0440). A source without items (every key
    of the Secret) is not listed: its keys are not read here."""
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    grouped = (spec.get("securityContext") or {}).get("fsGroup") is not None
    found: dict[str, int] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name")) or {}
        if "secret" in volume:
            sources, default = [{"secret": volume["secret"]}], volume["secret"].get("defaultMode")
        elif "projected" in volume:
            sources = volume["projected"].get("sources") or []
            default = volume["projected"].get("defaultMode")
        else:
            continue
        for source in sources:
            for item in (source.get("secret") or {}).get("items") or []:
                mode = int(item.get("mode", PROJECTED_DEFAULT_MODE if default is None
                                    else default))
                path = str(mount.get("mountPath", "")).rstrip("/") + "/" + str(item["path"])
                found[path] = mode | READ_ONLY_GROUP_MASK if grouped else mode
    return found
