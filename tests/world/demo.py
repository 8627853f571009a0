"""The live demo: ``make demo`` (``python -m tests.world.demo [--keep]``).

It shows a newcomer the operator at work on a real Kubernetes control plane (the test world:
kube-apiserver, controller-manager and scheduler 1.20; simulated kubelets, storage and KaiwuDB):

1. builds the test world on first use (root needed for apt; minutes, with a progress display);
2. starts it and prints the admin kubeconfig, so ``kubectl --kubeconfig ...`` works meanwhile;
3. runs the reconciler one of two ways, and says which and why:
   - as shipped, when this machine can run a real node (tests/world/real_node.py: root,
     containerd, runc, the kubelet `make world-node` builds; podman for the image): two real
     nodes start, the image `make image` builds is loaded into them, the whole bundle `kaiwu
     install` prints is applied with the node tier's test overlay, and the narration shows
     the two pods Ready (probes judged by the kubelets), the leader's Lease and the admission
     webhook refusing a bad spec through its Service (tests/world/real_operator.py);
   - otherwise as a local process under the bundle ServiceAccount's token, after the bundle's
     CRD, Namespace, ServiceAccount and RBAC: one line names what is missing for a real node.
   ``--reconciler pod`` or ``process`` picks one (pod fails when a node cannot start);
   the default, ``auto``, also falls back when starting the nodes fails, saying why;
4. applies clusters/dev.yaml, made small, and narrates with timings: pods scheduled, KaiwuDB
   initialised, Ready; a hand edit of the StatefulSet repaired; a node powered off and its pod
   replaced on another node with a new store; a scale-out to 4 and a scale-in to 3.

Every step is read back from the API before it is printed as done. Each shows what
``kubectl get kwc`` shows (the apiserver's Table, i.e. the CRD's printer columns) and the pods
with their nodes. Ctrl-C (or SIGTERM) at any point stops every process the demo started and
removes every temporary file; ``--keep`` holds the world open at the end until Ctrl-C.

Called by the Makefile's ``demo`` target, by tests/world_stories/runtime/test_demo.py (the
local process: the world tier runs where no container runtime is) and by
tests/world_stories/node/test_demo_on_node.py (the Deployment: the node tier), both with short
`DemoSettings` and an `on_step` hook through which the story reads the API itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from reconciler import install
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from renderer.settings import KubeVersion
from tests.world import image, real_node, real_operator
from tests.world.build import locate_binaries
from tests.world.controlplane import (
    REPO_ROOT,
    ControlPlane,
    ControlPlaneSettings,
    service_account_token,
)
from tests.world.kube_rest import ApiError, KubeAccess, KubeRest
from tests.world.simworld import SimWorld

NAME = "dev"  # clusters/dev.yaml
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
# What `kubectl set env statefulset/dev KWBASE_DEBUG=1` sends (tests/world_stories/drift too).
HAND_EDIT_ENV = "KWBASE_DEBUG"


@dataclass(frozen=True)
class DemoSettings:
    """Timings and knobs of one demo run. Defaults are for a person watching; the story
    (tests/world_stories/runtime/test_demo.py) passes shorter ones.

    node_lost_timeout_s: the cluster's spec.failover.nodeLostTimeout (the CRD's default is 5m).
    pause_s: a pause after each step, so a person can read the tables.
    *_timeout_s: how long each step may take before the demo says it failed and stops.
    tmp_root: parent of every temporary directory the demo makes (None: the system's).
    keep: hold the world open at the end until Ctrl-C.
    reconciler: 'auto' (its Deployment on real nodes when this machine can run them, else a
    local process), 'pod' or 'process'.
    """

    node_lost_timeout_s: float = 10.0
    pause_s: float = 2.0
    poll_s: float = 0.2
    install_timeout_s: float = 60.0
    ready_timeout_s: float = 120.0
    repair_timeout_s: float = 60.0
    failover_timeout_s: float = 120.0
    scale_timeout_s: float = 120.0
    tmp_root: Path | None = None
    keep: bool = False
    reconciler_namespace: str = install.DEFAULT_NAMESPACE
    reconciler: str = "auto"


class DemoError(RuntimeError):
    """A step did not happen in time (or the world could not start): the message says which,
    and what the API showed last."""


# ---- building the world on first use ---------------------------------------------------------

BUILD_COMMAND = ("sudo env KAIWU_TESTWORLD_CACHE=$HOME/.cache/kaiwu-testworld make world")


def world_missing() -> list[str]:
    """What of the test world is not there yet: the Kubernetes binaries, etcd."""
    missing = []
    if locate_binaries() is None:
        missing.append("the Kubernetes 1.20 binaries (built from Debian's sources)")
    if shutil.which("etcd") is None:
        missing.append("etcd (Debian's etcd-server)")
    return missing


RECONCILER_CHOICES = ("auto", "pod", "process")


def reconciler_mode(choice: str, namespace: str = install.DEFAULT_NAMESPACE) -> tuple[str, str]:
    """('pod', '') when the reconciler is to run as the bundle's Deployment on real nodes, or
    ('process', why not): `choice` is DemoSettings.reconciler. 'pod' with a machine that
    cannot run a real node is a DemoError naming what is missing."""
    if choice not in RECONCILER_CHOICES:
        raise DemoError(f"--reconciler {choice}: one of {', '.join(RECONCILER_CHOICES)}")
    if choice == "process":
        return "process", "asked for (--reconciler process)"
    missing = real_node.missing_prerequisites() + [
        f"{tool} (to build the image: make image; apt-get install {tool})"
        for tool in image.missing_tools()]
    if namespace != real_operator.NAMESPACE:
        missing.append(f"the bundle's own namespace ({real_operator.NAMESPACE}), not {namespace}")
    if not missing:
        return "pod", ""
    why = "this machine cannot run a real node; missing: " + "; ".join(missing)
    if choice == "pod":
        raise DemoError(f"--reconciler pod: {why}")
    return "process", why


class Progress:
    """A one-line progress display for a long stage: its name, its last output line and the
    elapsed time, redrawn every second on a terminal, one line every 15 s otherwise (CI logs)."""

    def __init__(self, out: IO[str], started: float) -> None:
        self._out = out
        self._started = started
        self._stage = ""
        self._detail = ""
        self._stage_started = started
        self._stop = threading.Event()
        self._tty = out.isatty()
        self._thread = threading.Thread(target=self._run, name="demo-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stage(self, name: str) -> None:
        self._stage, self._detail, self._stage_started = name, "", time.monotonic()
        self._line(newline=True)

    def detail(self, text: str) -> None:
        self._detail = text.strip()[:70]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._tty:
            self._out.write("\n")
            self._out.flush()

    def _line(self, newline: bool = False) -> None:
        now = time.monotonic()
        total, stage = now - self._started, now - self._stage_started
        text = (f"  [{_clock(total)}] {self._stage}: {_clock(stage)}"
                + (f"  {self._detail}" if self._detail else ""))
        if self._tty:
            self._out.write("\r\033[K" + text)
        elif newline or self._detail:
            self._out.write(text + "\n")
        self._out.flush()

    def _run(self) -> None:
        interval = 1.0 if self._tty else 15.0
        while not self._stop.wait(interval):
            self._line()


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def build_world(out: IO[str]) -> None:
    """Build what world_missing() reports: `tests/world/install_deps.sh` (apt, as root) and
    `python -m tests.world.build` (Kubernetes from source), each in its own process group so
    Ctrl-C ends it and everything it started. Raises DemoError when not root."""
    if os.geteuid() != 0:
        raise DemoError(
            "the test world is not built yet; building it needs root (apt installs etcd, Go's "
            "build tools and Kubernetes' Debian sources). Run once:\n"
            f"  {BUILD_COMMAND}\n"
            "(about 5 minutes), then `make demo` again.")
    print("Building the test world once: apt packages, then Kubernetes 1.20 from Debian's "
          "sources.\nThis takes about 5 minutes on 2 cores (cached afterwards in "
          "~/.cache/kaiwu-testworld).", file=out, flush=True)
    progress = Progress(out, time.monotonic())
    progress.start()
    stages = [
        ("installing packages (apt, Go toolchain)",
         ["bash", str(REPO_ROOT / "tests" / "world" / "install_deps.sh")]),
        ("building kube-apiserver, kube-controller-manager, kube-scheduler (about 5 min)",
         [sys.executable, "-m", "tests.world.build", "--no-image"]),
    ]
    try:
        for name, argv in stages:
            progress.stage(name)
            _run_stage(argv, progress)
    finally:
        progress.stop()


def _run_stage(argv: list[str], progress: Progress) -> None:
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    tail: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = [*tail[-30:], line.rstrip()]
            progress.detail(line)
        if proc.wait() != 0:
            raise DemoError(f"{' '.join(argv)} failed:\n" + "\n".join(tail))
    finally:
        if proc.poll() is None:
            # Interrupted: end the stage's whole process group (apt, make, go), ours alone.
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# ---- reading the API as kubectl does ---------------------------------------------------------

def render_table(table: dict[str, Any], *, wide: bool = False) -> str:
    """A metav1.Table as kubectl prints it: upper-case headers, priority-0 columns (all with
    wide), '<none>' for empty cells, columns padded to their widest cell."""
    columns = [(i, c) for i, c in enumerate(table.get("columnDefinitions") or ())
               if wide or not c.get("priority")]
    rows = [[c["name"].upper() for _, c in columns]]
    for row in table.get("rows") or ():
        cells = row.get("cells") or []
        rows.append([_cell(cells[i] if i < len(cells) else None) for i, _ in columns])
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True))
                     .rstrip() for r in rows)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "<none>"
    return str(value)


class Api:
    """The demo's admin view of the apiserver: objects through the reconciler's client (as
    `kubectl` does, under field managers named after the kubectl commands), tables through the
    Table media type."""

    def __init__(self, plane: ControlPlane) -> None:
        self.client = plane.api_client()
        self._server = plane.server
        self._token = plane.admin_token
        self._http = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(plane.ca_path))

    def kube(self, manager: str = "kubectl") -> Kube:
        return Kube(self.client, manager)

    def _get(self, path: str, accept: str) -> urllib3.BaseHTTPResponse:
        return self._http.request("GET", self._server + path, timeout=15.0, retries=False,
                                  headers={"Authorization": f"Bearer {self._token}",
                                           "Accept": accept})

    def exists(self, path: str) -> bool:
        resp = self._get(path, "application/json")
        if resp.status not in (200, 404):
            raise DemoError(f"GET {path}: HTTP {resp.status}: {resp.data[:300]!r}")
        return resp.status == 200

    def table(self, path: str, *, wide: bool = False) -> str:
        resp = self._get(path, TABLE)
        if resp.status != 200:
            raise DemoError(f"GET {path} as a Table: HTTP {resp.status}: {resp.data[:300]!r}")
        return render_table(yaml.safe_load(resp.data), wide=wide)

    def close(self) -> None:
        self._http.clear()
        self.client.close()  # type: ignore[no-untyped-call,unused-ignore]


def condition(obj: Obj | None, type_: str) -> dict[str, Any]:
    for item in ((obj or {}).get("status") or {}).get("conditions") or ():
        if item.get("type") == type_:
            return dict(item)
    return {}


def pod_ready(pod: Obj | None) -> bool:
    return pod is not None and not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ())


def actions_since(obj: Obj | None, action: str, since: str) -> list[dict[str, Any]]:
    """status.lastActions entries of that action stamped at or after `since` (RFC 3339)."""
    return [a for a in ((obj or {}).get("status") or {}).get("lastActions") or ()
            if a.get("action") == action and str(a.get("time", "")) >= since]


def stamp() -> str:
    """Now, to the second, as status.lastActions stamps its entries."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def demo_cluster(settings: DemoSettings) -> Obj:
    """clusters/dev.yaml made small as the stories' small_cluster (tests/support/lifecycle.py)
    does (small requests and volumes, one pod per node), with quick failover."""
    obj: Obj = yaml.safe_load((REPO_ROOT / "clusters" / f"{NAME}.yaml").read_text())
    spec = obj["spec"]
    spec["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    spec["storage"] = {"size": "1Gi"}
    spec["scheduling"] = {"antiAffinity": "required"}
    spec["failover"] = {"nodeLostTimeout": f"{settings.node_lost_timeout_s:g}s",
                        "replaceLostVolumes": True}
    return obj


# ---- the demo --------------------------------------------------------------------------------

@dataclass
class Demo:
    """One run. `run()` drives it; the attributes are there for the story to check (what was
    started, where temporary files went) and for on_step hooks (`api`, `namespace`)."""

    settings: DemoSettings
    out: IO[str]
    on_step: Callable[[str, Demo], None] | None = None
    plane: ControlPlane | None = None
    world: SimWorld | None = None
    api: Api | None = None
    reconciler: subprocess.Popen[bytes] | None = None
    mode: str = ""  # 'pod' or 'process' (reconciler_mode), once the world starts
    why_process: str = ""
    nodes: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    workdir: Path | None = None
    namespace: str = ""
    started_pids: list[int] = field(default_factory=list)
    temp_paths: list[Path] = field(default_factory=list)
    _t0: float = 0.0

    # ---- narration --------------------------------------------------------------------

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def done(self, text: str, since: float | None = None) -> None:
        """A step the API confirmed: elapsed demo time, what happened, how long it took."""
        took = f"  ({time.monotonic() - since:.1f} s)" if since is not None else ""
        self.say(f"[{time.monotonic() - self._t0:6.1f}s] \u2713 {text}{took}")

    def step(self, title: str) -> None:
        self.say()
        self.say(f"== {title}")

    def show(self) -> None:
        """What `kubectl get kwc` and `kubectl get pods -o wide` show right now."""
        api = self._api()
        self.say(f"$ kubectl get kwc -n {self.namespace}")
        self.say(api.table(f"/apis/{kk.KAIWU_CLUSTER.api_version}/namespaces/"
                           f"{self.namespace}/{kk.KAIWU_CLUSTER.plural}"))
        self.say(f"$ kubectl get pods -n {self.namespace} -o wide")
        self.say(api.table(f"/api/v1/namespaces/{self.namespace}/pods", wide=True))

    def checkpoint(self, name: str) -> None:
        if self.on_step is not None:
            self.on_step(name, self)
        if self.settings.pause_s:
            time.sleep(self.settings.pause_s)

    # ---- waiting ----------------------------------------------------------------------

    def until(self, what: str, check: Callable[[], Any], timeout_s: float) -> Any:
        """Poll the API until check() returns something truthy; DemoError after timeout_s
        (also when the reconciler process has exited: nothing would happen any more)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.reconciler is not None and self.reconciler.poll() is not None:
                raise DemoError(f"the reconciler exited ({self.reconciler.returncode}) while "
                                f"waiting for {what}; its log:\n{self._reconciler_log()}")
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                raise DemoError(f"{what}: not within {timeout_s:g} s. The cluster's status:\n"
                                + yaml.safe_dump((self.cluster() or {}).get("status")))
            time.sleep(self.settings.poll_s)

    def _api(self) -> Api:
        assert self.api is not None, "the world is not up"
        return self.api

    def cluster(self) -> Obj | None:
        return self._api().kube().get(kk.KAIWU_CLUSTER, self.namespace, NAME)

    def pod(self, name: str) -> Obj | None:
        return self._api().kube().get(kk.POD, self.namespace, name)

    def claim(self, name: str) -> Obj | None:
        return self._api().kube().get(kk.PVC, self.namespace, name)

    def statefulset(self) -> Obj | None:
        return self._api().kube().get(kk.STATEFUL_SET, self.namespace, NAME)

    def ready(self, replicas: int) -> Obj | None:
        """The cluster when Ready with `replicas` nodes ready and no failure reported."""
        found = self.cluster()
        st = (found or {}).get("status") or {}
        return found if condition(found, "Ready").get("status") == "True" and \
            st.get("readyNodes") == replicas and "failures" not in st else None

    # ---- the run ----------------------------------------------------------------------

    def run(self) -> None:
        """The whole demo; tears everything down at the end, on error and on Ctrl-C."""
        self._t0 = time.monotonic()
        try:
            self._start_world()
            self._install()
            self._bring_up()
            self._hand_edit()
            self._lose_node()
            self._scale()
            self.say()
            self.say(f"Done in {time.monotonic() - self._t0:.0f} s: every step above was read "
                     "back from the apiserver before it was printed.")
            if self.settings.keep:
                self.say(f"--keep: the world stays up. kubectl --kubeconfig {self._kubeconfig()}"
                         " ...; Ctrl-C stops it.")
                while True:
                    time.sleep(1)
        finally:
            self.teardown()

    def _kubeconfig(self) -> Path:
        assert self.plane is not None
        return self.plane.kubeconfig_path

    def _start_world(self) -> None:
        self.step("Starting the test world")
        self.workdir = Path(tempfile.mkdtemp(prefix="kaiwu-demo-", dir=self.settings.tmp_root))
        self.temp_paths.append(self.workdir)
        self.mode, self.why_process = reconciler_mode(self.settings.reconciler,
                                                      self.settings.reconciler_namespace)
        started = time.monotonic()
        # No CRD yet: the demo installs it from `kaiwu install`'s bundle, as an administrator.
        # For real nodes: their kubelets' tokens, and the API server dialling a Service's
        # endpoints (no kube-proxy).
        pod: dict[str, Any] = {"real_nodes": tuple(n.name for n in real_operator.NODES),
                               "route_to_endpoints": True} if self.mode == "pod" else {}
        self.plane = ControlPlane(ControlPlaneSettings(crd_paths=(),
                                                       tmp_root=self.settings.tmp_root, **pod))
        self.temp_paths += [self.plane.dir, self.plane.etcd_data_dir]
        self.plane.start()
        self.started_pids += self.plane.pids().values()
        self.done("real Kubernetes 1.20 control plane up: "
                  + ", ".join(f"{n} (pid {p})" for n, p in self.plane.pids().items()), started)
        self.api = Api(self.plane)
        started = time.monotonic()
        self.world = SimWorld(KubeAccess(self.plane.server, str(self.plane.ca_path),
                                         self.plane.admin_token))
        self.temp_paths.append(self.world._dir)
        self.world.start()
        nodes, _ = self._api().kube().list_objects(kk.NODE)
        ready = [n for n in nodes if condition(n, "Ready").get("status") == "True"]
        if len(ready) != len(self.world.kubelet.node_names):
            raise DemoError(f"nodes Ready: {len(ready)} of {len(self.world.kubelet.node_names)}")
        self.done(f"{len(ready)} simulated nodes Ready (kubelets, local disks, KaiwuDB are "
                  "simulated in this process)", started)
        self.say(f"$ kubectl get nodes --kubeconfig {self._kubeconfig()}")
        self.say(self._api().table("/api/v1/nodes"))
        self.say()
        self.say(f"Poke around while it runs:  export KUBECONFIG={self._kubeconfig()}")
        self.say("  kubectl get kwc,sts,pods,pvc -A -o wide;  kubectl describe kwc -n kaiwu-dev "
                 "dev")
        if self.mode == "pod":
            self._start_real_nodes()

    def _start_real_nodes(self) -> None:
        """Two real nodes with the image loaded; with --reconciler auto, a failure to start
        them is said and the demo goes on with a local process."""
        assert self.plane is not None and self.workdir is not None
        self.step("Starting two real nodes for the reconciler's pods (containerd and runc from "
                  "Debian, the kubelet 1.20\n   built from its source; tainted so only the "
                  "reconciler's pods land there)")
        started = time.monotonic()
        try:
            self.say("   Building the image first (make image: seconds with its layers cached, "
                     "minutes the first time)")
            archive = real_operator.save_image(self.workdir)
            self.done(f"image {image.image_tag()} built and saved", started)
            nodes = self.nodes.enter_context(real_operator.real_nodes(self.plane, archive))
        except (real_node.RealNodeError, RuntimeError, subprocess.CalledProcessError) as err:
            self.nodes.close()
            if self.settings.reconciler == "pod":
                raise DemoError(f"the real nodes did not start: {err}") from err
            self.mode, self.why_process = "process", f"the real nodes did not start: {err}"
            self.say(f"   Falling back to a local process: {self.why_process}")
            return
        for node in nodes.values():
            self.started_pids += [pid for pid in (node.containerd.pid, node.kubelet.pid)
                                  if pid is not None]
        archive.unlink()
        self.done(", ".join(f"{name} Ready after {node.ready_after_s or 0:.0f} s"
                            for name, node in nodes.items())
                  + ", the image imported into their containerd", started)
        self.say(self._api().table("/api/v1/nodes"))

    def _install(self) -> None:
        if self.mode == "pod":
            self._install_deployment()
            return
        self.step("Installing the operator: `kaiwu install --kube-version 1.20` (CRD, namespace, "
                  "ServiceAccount, RBAC; the test world runs Kubernetes 1.20)")
        assert self.plane is not None and self.workdir is not None
        api = self._api()
        started = time.monotonic()
        ns = self.settings.reconciler_namespace
        docs = [d.obj for d in install.bundle(install.Options(
            namespace=ns, kube_version=KubeVersion(1, 20)))]
        applied = []
        for doc in docs:
            # The Deployment's pod needs a kubelet that runs images; the simulated ones run only
            # KaiwuDB. So its Services (metrics, webhook) are left out with it, and the webhook's
            # registration: the demo's reconciler runs without its webhook (nothing routes the
            # API server to a local process), and the registration's failurePolicy Fail would
            # refuse every KaiwuCluster write (docs/reconciler.md, turning the webhook off).
            # The PodDisruptionBudget guards the Deployment's pods: none here.
            if doc["kind"] in ("Deployment", "Service", "ValidatingWebhookConfiguration",
                               "PodDisruptionBudget"):
                continue
            k8s_utils.create_from_dict(api.client, doc)  # type: ignore[no-untyped-call,unused-ignore]
            applied.append(f"{doc['kind']}/{doc['metadata']['name']}")
        crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")

        def served() -> bool:
            live = k8s.ApiextensionsV1Api(api.client).read_custom_resource_definition(
                crd["metadata"]["name"])
            return any(c.type == "Established" and c.status == "True"
                       for c in (live.status.conditions if live.status else None) or ())
        self.until("the CRD to be established", served, self.settings.install_timeout_s)
        missing = [a for a in applied if not self._exists(a, docs)]
        if missing:
            raise DemoError(f"applied but not found: {', '.join(missing)}")
        self.done(f"applied and read back: {', '.join(applied)}", started)

        started = time.monotonic()
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        self.reconciler = self._start_reconciler(deployment, ns)
        self.started_pids.append(self.reconciler.pid)
        identity = "demo-0"

        def leading() -> bool:
            lease = api.kube().get(kk.LEASE, ns, install.NAME)
            return bool(lease and (lease.get("spec") or {}).get("holderIdentity") == identity)
        self.until("the reconciler to take the leader Lease", leading,
                   self.settings.install_timeout_s)
        self.done(f"reconciler running (pid {self.reconciler.pid}) as "
                  f"system:serviceaccount:{ns}:{install.NAME}; it holds the Lease "
                  f"{ns}/{install.NAME}", started)
        self.say(f"   It runs as a local process, not as the bundle's Deployment: "
                 f"{self.why_process}.\n   It has the Deployment's KAIWU_* settings and nothing "
                 "but the ServiceAccount's token, so RBAC is\n   exactly the bundle's. Log: "
                 f"{self.workdir / 'reconciler.log'}")

    def _install_deployment(self) -> None:
        """The whole bundle (Deployment, Services, PDB, webhook registration too) with the
        node tier's overlay; both pods Ready, one leading, the webhook answering."""
        assert self.plane is not None
        self.step("Installing the operator as shipped: `kaiwu install --kube-version 1.20 | "
                  "kubectl apply --server-side -f -`\n   with the test overlay (host network, "
                  "the real nodes' taint tolerated, the image as loaded)")
        started = time.monotonic()
        try:
            applied = real_operator.install(self.plane)
            rest = KubeRest(KubeAccess(self.plane.server, str(self.plane.ca_path),
                                       self.plane.admin_token))
            pods = real_operator.wait_for_replicas(rest, len(real_operator.NODES),
                                                   self.settings.ready_timeout_s)
        except real_node.RealNodeError as err:
            raise DemoError(str(err)) from err
        self.done(f"applied: {', '.join(applied)}", started)
        self.done("reconciler pods Ready, started by containerd from the image, in-cluster "
                  "configuration, probes judged by the kubelet: "
                  + ", ".join(f"{p['metadata']['name']} -> {p['spec']['nodeName']}"
                              for p in pods), started)
        names = {p["metadata"]["name"] for p in pods}
        holder = self.until("one pod to take the leader Lease",
                            lambda: (h := real_operator.leader(rest)) in names and h,
                            self.settings.install_timeout_s)
        self.done(f"{holder} holds the Lease {real_operator.NAMESPACE}/{install.NAME}; the other "
                  "stands by", started)
        bad = {**demo_cluster(self.settings), "metadata": {"name": NAME, "namespace": "default"}}
        bad["spec"] = {**bad["spec"], "replicas": 2}

        def refused() -> str:
            try:
                rest.request("POST", f"/apis/{kk.KAIWU_CLUSTER.api_version}/namespaces/default/"
                             f"{kk.KAIWU_CLUSTER.plural}", query={"dryRun": "All"}, body=bad)
            except ApiError as err:
                return str(err) if err.status == 422 else ""
            return ""
        message = self.until("the webhook to refuse a bad spec", refused,
                             self.settings.install_timeout_s)
        at = message.find("spec.replicas")
        reason = message[at:].split('"')[0].strip() if at >= 0 else message[:300]
        self.done("the API server calls the admission webhook through its Service: a cluster "
                  f"with replicas 2 is refused (dry run):\n   {reason}", started)
        self.say(self._api().table(f"/api/v1/namespaces/{real_operator.NAMESPACE}/pods",
                                   wide=True))

    def _exists(self, ref: str, docs: list[Obj]) -> bool:
        kind, name = ref.split("/", 1)
        doc = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
        known = kk.KINDS.get((doc["apiVersion"], kind))
        ns = doc["metadata"].get("namespace")
        if known is not None:
            return self._api().exists(known.path(ns, name))
        api_version, plural = doc["apiVersion"], kind.lower() + "s"
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        path = f"{prefix}/namespaces/{ns}/{plural}/{name}" if ns else f"{prefix}/{plural}/{name}"
        return self._api().exists(path)

    def _start_reconciler(self, deployment: Obj, ns: str) -> subprocess.Popen[bytes]:
        """`python -m reconciler` with the Deployment's variables and the ServiceAccount's
        token (as tests/world_stories/runtime/test_install.py runs it)."""
        assert self.plane is not None and self.workdir is not None
        core = k8s.CoreV1Api(self._api().client)

        sa_token = service_account_token(core, ns, install.NAME,
                                         self.settings.install_timeout_s)
        kubeconfig = self.workdir / "reconciler.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self.plane.kubeconfig(token=sa_token,
                                                                   user="reconciler")))
        kubeconfig.chmod(0o600)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {**os.environ, "POD_NAMESPACE": ns, "KAIWU_IDENTITY": "demo-0",
               **{e["name"]: e["value"] for e in container["env"] if "value" in e}}
        # Short leases: a demo start should not wait out the Deployment's 15 s lease. No
        # admission webhook: this world has no Service routing the API server to a local
        # process (tests/world_stories/admission/ shows it with a URL instead).
        argv = [sys.executable, "-m", "reconciler", "--kubeconfig", str(kubeconfig),
                "--lease-duration-s", "3", "--renew-deadline-s", "2", "--retry-period-s", "0.5",
                "--http-address", "127.0.0.1:0", "--log-format", "text", "--no-webhook"]
        with (self.workdir / "reconciler.log").open("wb") as log:
            return subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def _reconciler_log(self) -> str:
        if self.workdir is None:
            return ""
        path = self.workdir / "reconciler.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def _bring_up(self) -> None:
        self.namespace = "kaiwu-dev"
        obj = demo_cluster(self.settings)
        self.namespace = obj["metadata"]["namespace"]
        self.step(f"Applying clusters/{NAME}.yaml (made small: 100m CPU, 256Mi, 1Gi volumes, one "
                  "pod per node;\n   failover.nodeLostTimeout "
                  f"{obj['spec']['failover']['nodeLostTimeout']} and replaceLostVolumes: see "
                  "below)")
        kube = self._api().kube()
        started = time.monotonic()
        k8s.CoreV1Api(self._api().client).create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.namespace)))
        kube.apply(obj)
        self.until("the cluster to exist", self.cluster, 10)
        self.done(f"$ kubectl apply -f clusters/{NAME}.yaml  (namespace {self.namespace})",
                  started)
        replicas = int(obj["spec"]["replicas"])
        names = [f"{NAME}-{i}" for i in range(replicas)]

        def scheduled() -> dict[str, str] | None:
            pods = {n: self.pod(n) for n in names}
            nodes = {n: str(((p or {}).get("spec") or {}).get("nodeName") or "")
                     for n, p in pods.items()}
            return nodes if all(nodes.values()) else None
        nodes = self.until("the pods to be scheduled", scheduled, self.settings.ready_timeout_s)
        self.done("StatefulSet made by the reconciler; pods scheduled: "
                  + ", ".join(f"{p} -> {n}" for p, n in nodes.items()), started)
        inited = self.until("KaiwuDB to be initialised",
                            lambda: actions_since(self.cluster(), "Initialized", ""),
                            self.settings.ready_timeout_s)
        self.done(f"KaiwuDB initialised ({inited[0]['target']}: {inited[0].get('message', '')})",
                  started)
        self.until("the cluster to be Ready", lambda: self.ready(replicas),
                   self.settings.ready_timeout_s)
        self.done(f"cluster Ready: {replicas} KaiwuDB nodes live", started)
        self.show()
        self.checkpoint("ready")

    def _hand_edit(self) -> None:
        self.step("A hand edit: `kubectl set env statefulset/dev KWBASE_DEBUG=1`")
        self.say("   The reconciler owns the StatefulSet; it puts back what the spec says.")
        started, since = time.monotonic(), stamp()
        k8s.AppsV1Api(self._api().client).patch_namespaced_stateful_set(
            NAME, self.namespace, {"spec": {"template": {"spec": {"containers": [
                {"name": "kwbase", "env": [{"name": HAND_EDIT_ENV, "value": "1"}]}]}}}},
            field_manager="kubectl-set")
        # The repair can beat this read: then the audit log is the only witness of the edit.
        seen = self._sts_env().get(HAND_EDIT_ENV)
        self.done(f"patched; read back: {HAND_EDIT_ENV}={seen} in the StatefulSet" if seen else
                  "patched; already repaired when read back", started)
        self.until("the edit to be repaired", lambda: HAND_EDIT_ENV not in self._sts_env()
                   and actions_since(self.cluster(), "DriftRepaired", since),
                   self.settings.repair_timeout_s)
        repaired = actions_since(self.cluster(), "DriftRepaired", since)[0]
        self.done(f"repaired: {HAND_EDIT_ENV} gone again ({repaired['target']}: "
                  f"{repaired.get('message', '')})", started)
        self.until("the cluster to be Ready", lambda: self.ready(3),
                   self.settings.ready_timeout_s)
        self.done("cluster Ready", started)
        self.show()
        self.checkpoint("repaired")

    def _sts_env(self) -> dict[str, str]:
        sts = self.statefulset() or {}
        containers = sts.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        return {e["name"]: str(e.get("value", "")) for c in containers if c["name"] == "kwbase"
                for e in c.get("env") or ()}

    def _lose_node(self) -> None:
        assert self.world is not None
        victim = f"{NAME}-1"
        old = self.pod(victim)
        old_claim = self.claim(f"data-{victim}")
        assert old is not None and old_claim is not None
        lost = str(old["spec"]["nodeName"])
        timeout = demo_cluster(self.settings)["spec"]["failover"]["nodeLostTimeout"]
        # KaiwuDB up-replicates after init: for some seconds a range may have two copies, and
        # a node lost then would take the quorum of such a range with it (and the failover gate
        # must then keep the lost volume: issue 24, branch lost-node-freshness). It waits, as
        # an administrator would check `kwbase node status --ranges`, here read from the
        # simulated KaiwuDB itself.
        self.step("Waiting until every range has its three copies (KaiwuDB up-replicates "
                  "after init)")
        started = time.monotonic()
        world = self.world

        def replicated() -> bool:
            view = world.kwdb.replication((self.namespace, NAME), world.clock.now())
            return view.initialized and (view.unavailable, view.underreplicated) == (0, 0)
        self.until("every range to have three copies", replicated,
                   self.settings.failover_timeout_s)
        self.done("the simulated KaiwuDB holds three copies of every range", started)
        self.step(f"Powering off node {lost} (it runs pod {victim})")
        self.say(f"   nodeLostTimeout is {timeout} here (default 5m, which rides out a reboot) so "
                 "you need not wait.\n   replaceLostVolumes is on because this world's volumes "
                 "are node-local (like local-path):\n   the disk cannot follow the pod, so it "
                 "gets a new, empty store and KaiwuDB re-replicates onto it.")
        started = time.monotonic()
        self.world.faults.lose_node(lost)

        def not_ready() -> bool:
            node = self._api().kube().get(kk.NODE, None, lost)
            return condition(node, "Ready").get("status") not in (None, "True")
        self.until(f"node {lost} to be NotReady", not_ready, self.settings.failover_timeout_s)
        self.done(f"node {lost} NotReady (the controller-manager's node-monitor grace period, "
                  "8 s in this world)", started)

        def replaced() -> Obj | None:
            found = self.pod(victim)
            claim = self.claim(f"data-{victim}")
            ok = (pod_ready(found) and found is not None and claim is not None
                  and found["spec"]["nodeName"] != lost
                  and claim["metadata"]["uid"] != old_claim["metadata"]["uid"])
            return found if ok else None
        new = self.until(f"{victim} to run on another node with a new volume", replaced,
                         self.settings.failover_timeout_s)
        self.done(f"pod {victim} force-deleted, its claim given up; now Ready on "
                  f"{new['spec']['nodeName']} with a new volume", started)
        self.until("the lost KaiwuDB node to be decommissioned and the cluster Ready", lambda:
                   self.ready(3) and actions_since(self.cluster(), "DeadNodeDecommissioned", ""),
                   self.settings.failover_timeout_s)
        self.done("the lost KaiwuDB node decommissioned; cluster Ready", started)
        self.show()
        self.checkpoint("failover")

        started = time.monotonic()
        self.world.faults.restore_node(lost)

        def back() -> bool:
            node = self._api().kube().get(kk.NODE, None, lost)
            return condition(node, "Ready").get("status") == "True"
        self.until(f"node {lost} to be Ready again", back, self.settings.failover_timeout_s)
        self.done(f"node {lost} powered on again: Ready, and empty (room for a fourth pod)",
                  started)

    def _scale(self) -> None:
        kube = self._api().kube("kubectl-patch")
        self.step("Scaling out: `kubectl patch kwc dev --type merge -p "
                  "'{\"spec\":{\"replicas\":4}}'`")
        started = time.monotonic()
        kube.patch(kk.KAIWU_CLUSTER, self.namespace, NAME, {"spec": {"replicas": 4}})
        self.until("4 nodes Ready", lambda: self.ready(4) and pod_ready(self.pod(f"{NAME}-3")),
                   self.settings.scale_timeout_s)
        added = self._live_nodes().get(f"{NAME}-3")
        self.done(f"{NAME}-3 joined as KaiwuDB node {added}; cluster Ready with 4", started)
        self.show()
        self.checkpoint("scaled-out")

        self.step("Scaling in: replicas 3 (the reconciler decommissions the node first)")
        started, since = time.monotonic(), stamp()
        kube.patch(kk.KAIWU_CLUSTER, self.namespace, NAME, {"spec": {"replicas": 3}})

        def shrunk() -> Obj | None:
            sts = self.statefulset() or {}
            return self.ready(3) if (sts.get("spec") or {}).get("replicas") == 3 and \
                self.pod(f"{NAME}-3") is None and \
                actions_since(self.cluster(), "NodeDecommissioned", since) else None
        self.until("the scale-in to finish", shrunk, self.settings.scale_timeout_s)
        self.done(f"KaiwuDB node {added} decommissioned (its ranges moved), then the "
                  f"StatefulSet shrunk: {NAME}-3 gone; cluster Ready with 3", started)
        self.show()
        self.checkpoint("scaled-in")

    def _live_nodes(self) -> dict[str, int]:
        st = (self.cluster() or {}).get("status") or {}
        return {e["pod"]: e["nodeId"] for e in st.get("nodes") or ()
                if e.get("state") == "live"}

    def teardown(self) -> None:
        """Stop the reconciler, the simulated nodes and the control plane; remove every
        temporary directory. Idempotent; each part is stopped even if another fails."""
        if self.reconciler is not None and self.reconciler.poll() is None:
            self.reconciler.terminate()
            try:
                self.reconciler.wait(15)
            except subprocess.TimeoutExpired:
                self.reconciler.kill()
                self.reconciler.wait(5)
        if self.api is not None:
            self.api.close()
        if self.world is not None:
            # Nodes stay: the apiserver is about to go with everything in it.
            self.world.stop(delete_nodes=False)
        self.nodes.close()  # the real nodes, their containers, mounts and addresses
        if self.plane is not None:
            self.plane.stop()
        for path in self.temp_paths:
            shutil.rmtree(path, ignore_errors=True)


def run(settings: DemoSettings, out: IO[str] = sys.stdout,
        on_step: Callable[[str, Demo], None] | None = None) -> Demo:
    """Build the world if needed, then run the demo (tearing it down); returns the finished
    Demo. Raises DemoError when a step fails, KeyboardInterrupt on Ctrl-C (after teardown)."""
    missing = world_missing()
    if missing:
        print(f"Not built yet: {'; '.join(missing)}.", file=out, flush=True)
        build_world(out)
    demo = Demo(settings, out, on_step)
    demo.run()
    return demo


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    # A shell that starts us in the background ignores SIGINT for us: take it back.
    previous_int = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.world.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true",
                        help="hold the world open at the end until Ctrl-C")
    parser.add_argument("--reconciler", choices=RECONCILER_CHOICES, default="auto",
                        help="pod: the bundle's Deployment on real nodes; process: a local "
                             "process; auto (default): pod when this machine can run a real "
                             "node (python -m tests.world.real_node check), else process")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        with _sigterm_as_interrupt():
            run(DemoSettings(keep=args.keep, reconciler=args.reconciler))
    except KeyboardInterrupt:
        print(f"\nInterrupted after {time.monotonic() - started:.0f} s: everything the demo "
              "started is stopped and its temporary files are removed.", flush=True)
        return 130
    except DemoError as err:
        print(f"\nThe demo stopped: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
