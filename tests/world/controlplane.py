"""A real Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler) for tests.

The pytest fixtures in tests/world/fixtures.py start one per test session; ``python -m tests.world
up`` starts one by hand. The binaries come from ``python -m tests.world.build`` (Kubernetes 1.20
built from Debian's sources); etcd is Debian's ``etcd-server``. Everything listens on 127.0.0.1
on ports chosen at run time, so several control planes can run side by side.

Nothing here is simulated: RBAC, admission, defaulting, validation, garbage collection, the
StatefulSet and node lifecycle controllers and the scheduler are the real ones. Nodes and
kubelets are not: tests/world/kubelet.py simulates them.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client as k8s

from tests.world import kube_versions
from tests.world.build import locate_binaries

REPO_ROOT = Path(__file__).resolve().parents[2]

# Every controller the project's tests rely on, plus those a real cluster always runs that change
# what tests see (podgc deletes pods of deleted nodes; root-ca-cert-publisher makes the
# kube-root-ca.crt config map; resourcequota fills a ResourceQuota's status, without which the
# ResourceQuota admission plugin enforces nothing).
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "statefulset", "garbagecollector", "namespace", "nodelifecycle", "serviceaccount",
    "serviceaccount-token", "job", "disruption", "persistentvolume-binder", "pvc-protection",
    "pv-protection", "endpoint", "endpointslice", "replicaset", "deployment", "podgc",
    "root-ca-cert-publisher", "resourcequota",
)

# Every request at Metadata level (who, what, which object, response code; no bodies). The
# RequestReceived stage is omitted so each request is one ResponseComplete line (watches add a
# ResponseStarted line), which is what tests count.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""

AUDIT_LOG_NEVER_ROTATE_MB = 1024 * 1024

WRITE_VERBS: frozenset[str] = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def default_crd_paths() -> tuple[Path, ...]:
    """Every manifest in the repository's crd/ directory (the KaiwuCluster CRD)."""
    crd_dir = REPO_ROOT / "crd"
    return tuple(sorted(p for p in crd_dir.glob("*.y*ml") if p.is_file()))


def _default_etcd_data_root() -> Path | None:
    # etcd fsyncs every write; on a tmpfs that costs nothing, which keeps the apiserver snappy on
    # slow shared disks. None means "inside the control plane's temp dir".
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


@dataclass(frozen=True)
class ControlPlaneSettings:
    """How the control plane is started. Defaults suit tests: short timeouts, quick failover.

    Durations are seconds. The node-lifecycle values decide how fast real Kubernetes gives up on
    a node whose (simulated) kubelet stops heartbeating: it marks the node NotReady/Unknown after
    ``node_monitor_grace_period``, taints it, and the taint manager evicts pods once their
    tolerations (``*_toleration_seconds``, added by the DefaultTolerationSeconds admission plugin
    to every pod that sets none) run out. A simulated kubelet must renew its Lease well within
    the grace period (every grace/4 or faster).
    """

    # Which Kubernetes runs (tests/world/kube_versions.py): KAIWU_TESTWORLD_KUBE, default 1.20.
    kube_version: str = field(default_factory=kube_versions.selected)
    # Directory holding kube-apiserver, kube-controller-manager and kube-scheduler; None: the
    # cache python -m tests.world.build fills (1.20), or the unpacked 1.36 binaries.
    bin_dir: Path | None = None
    # The etcd binary (Debian's etcd-server installs /usr/bin/etcd; 1.36 needs etcd 3.5.24 or
    # newer and brings its own, used unless this names another).
    etcd_binary: str = "etcd"
    # CRD manifests installed before the controller-manager starts, because its garbage collector
    # discovers new resource types only at its 30 s resync. None: every file in crd/.
    crd_paths: tuple[Path, ...] | None = None
    controllers: tuple[str, ...] = DEFAULT_CONTROLLERS
    # Kubernetes defaults in brackets.
    node_monitor_period: float = 1.0  # how often the controller checks nodes [5 s]
    node_monitor_grace_period: float = 8.0  # silence before a node turns Unknown [40 s]
    node_startup_grace_period: float = 10.0  # silence allowed for a new node [60 s]
    pod_eviction_timeout: float = 10.0  # only used when taint-based eviction is off [300 s]
    node_eviction_rate: float = 10.0  # nodes per second that may be tainted/evicted [0.1]
    not_ready_toleration_seconds: int = 10  # default NoExecute toleration, not-ready [300]
    unreachable_toleration_seconds: int = 10  # default NoExecute toleration, unreachable [300]
    service_cluster_ip_range: str = "10.96.0.0/16"
    # The service-account token issuer, also the audience the apiserver accepts.
    service_account_issuer: str = "https://kubernetes.default.svc.cluster.local"
    authorization_mode: str = "Node,RBAC"
    log_verbosity: int = 1  # klog -v for the Kubernetes components
    # Real kubelets that may join (tests/world/real_node.py): each gets a token of user
    # system:node:NAME in group system:nodes, so the Node authorizer and NodeRestriction judge
    # it as on a real cluster.
    real_nodes: tuple[str, ...] = ()
    # The API server dials a webhook's Service at its endpoints' addresses instead of its
    # ClusterIP (--enable-aggregator-routing): no kube-proxy runs in the test world, so a
    # ClusterIP leads nowhere. The real-node tier sets it, where the webhook's registration names
    # its Service as the bundle ships it.
    route_to_endpoints: bool = False
    # Where etcd keeps its data: a tmpfs when there is one, else the control plane's temp dir.
    etcd_data_root: Path | None = field(default_factory=_default_etcd_data_root)
    # Parent of the control plane's temp dir (logs, certs, kubeconfigs); None: the system's.
    tmp_root: Path | None = None
    start_timeout: float = 60.0  # for each component to report healthy
    # SIGTERM grace before SIGKILL. The 1.20 apiserver stops listening at once on SIGTERM but then
    # lingers for its full drain timeout; nothing in the test world needs that drain.
    stop_timeout: float = 3.0


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message names the component and its log."""


def service_account_token(core: k8s.CoreV1Api, namespace: str, name: str,
                          timeout_s: float = 30.0, expiration_s: int = 86400) -> str:
    """A token for a ServiceAccount from the TokenRequest API, as `kubectl create token` gets
    one: Kubernetes 1.24 and later make no token Secrets, and 1.20 serves TokenRequest as well.
    Asked again while the ServiceAccount is not there yet (404)."""
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_s))
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            answer = core.create_namespaced_service_account_token(name, namespace, request)
            assert answer.status is not None, "a TokenRequest answered without a status"
            return str(answer.status.token)
        except k8s.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Process:
    """One component: its command line, log file and (while running) its Popen."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self) -> None:
        # Append so a restarted apiserver keeps the earlier run's log above the new one.
        self._log = self.log_path.open("ab")
        self._log.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
        self._log.flush()
        # A new session keeps a terminal's Ctrl-C away from the children: the owner stops them
        # in order (scheduler and controllers first, etcd last).
        self.popen = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float) -> None:
        """SIGTERM this process (by its own PID), then SIGKILL if it outlives timeout."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
        self.popen = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def rss_bytes(self) -> int:
        if not self.running() or self.pid is None:
            return 0
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return 0
        return 0


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. After start:
    ``server`` (https URL), ``ca_path`` (PEM bundle clients trust), ``admin_token`` (a
    ``system:masters`` bearer token), ``kubeconfig_path`` (admin kubeconfig file),
    ``audit_log_path`` (JSON lines, one per request), ``log_paths`` (one log per component).
    """

    def __init__(self, settings: ControlPlaneSettings | None = None) -> None:
        self.settings = settings or ControlPlaneSettings()
        self.kube_version = self.settings.kube_version
        self.modern = self.kube_version != "1.20"
        bin_dir = self.settings.bin_dir or (kube_versions.binaries_136() if self.modern
                                            else locate_binaries())
        if bin_dir is None or not all(
                (bin_dir / n).exists()
                for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")):
            raise ControlPlaneError(
                "the test world's Kubernetes binaries are not built. Run, as root:\n"
                "  bash tests/world/install_deps.sh && python -m tests.world.build")
        self.etcd_binary = (str(bin_dir / "etcd") if self.modern and
                            self.settings.etcd_binary == "etcd" else self.settings.etcd_binary)
        if shutil.which(self.etcd_binary) is None:
            raise ControlPlaneError(f"no '{self.etcd_binary}' on PATH: install "
                                    "etcd-server (bash tests/world/install_deps.sh)")
        self.bin_dir: Path = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="kaiwu-testworld-", dir=self.settings.tmp_root))
        self.log_dir = self.dir / "logs"
        self.log_dir.mkdir()
        data_root = self.settings.etcd_data_root or self.dir
        self.etcd_data_dir = Path(tempfile.mkdtemp(prefix="kaiwu-testworld-etcd-",
                                                   dir=data_root))
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.apiserver_port = free_port()
        self.controller_manager_port = free_port()
        self.scheduler_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.cert_dir = self.dir / "apiserver-certs"
        # --cert-dir writes the self-signed serving cert followed by the CA that signed it.
        self.ca_path = self.cert_dir / "apiserver.crt"
        self.audit_log_path = self.log_dir / "audit.log"
        self.kubeconfig_path = self.dir / "admin.kubeconfig"
        self.admin_token = secrets.token_hex(24)
        # One identity per component, so audit lines and RBAC see who is who, as in a real
        # cluster. The bootstrap RBAC policy already binds these user names.
        self.component_tokens: dict[str, str] = {
            "system:kube-controller-manager": secrets.token_hex(24),
            "system:kube-scheduler": secrets.token_hex(24),
        }
        self.node_tokens: dict[str, str] = {
            name: secrets.token_hex(24) for name in self.settings.real_nodes}
        self._procs: dict[str, Process] = {}
        self._started = False
        self.startup_seconds = 0.0  # wall time of the last start(), for docs and reports
        self.startup_phases: dict[str, float] = {}  # seconds since start() when each was ready
        atexit.register(self._atexit)

    # ---- public API ---------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(keep_logs=exc[0] is not None)

    @property
    def log_paths(self) -> dict[str, Path]:
        """Every component's log file (plus the audit log), by component name."""
        paths = {name: proc.log_path for name, proc in self._procs.items()}
        paths["audit"] = self.audit_log_path
        return paths

    def start(self) -> None:
        """Start every component and wait until each is healthy, CRDs installed in between."""
        started = time.monotonic()

        def phase(name: str) -> None:
            self.startup_phases[name] = round(time.monotonic() - started, 2)

        self._write_files()
        try:
            self._start_etcd()
            phase("etcd")
            self.start_apiserver()
            phase("kube-apiserver")
            self.install_crds(self.settings.crd_paths
                              if self.settings.crd_paths is not None else self._default_crds())
            phase("crds")
            self._start_controller_manager()
            self._start_scheduler()
            self._wait_healthy("kube-controller-manager", self.controller_manager_port)
            phase("kube-controller-manager")
            self._wait_healthy("kube-scheduler", self.scheduler_port)
            phase("kube-scheduler")
        except BaseException:
            self.stop(keep_logs=True)
            raise
        self._started = True
        self.startup_seconds = time.monotonic() - started

    def stop(self, keep_logs: bool = False) -> None:
        """Stop every component (scheduler first, etcd last), each by its own PID.

        The temp dir goes too, unless keep_logs: then only etcd's data is removed and the logs
        stay for reading (their paths are in ``log_paths``).
        """
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self._procs.get(name)
            if proc is not None:
                proc.stop(self.settings.stop_timeout)
        shutil.rmtree(self.etcd_data_dir, ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)
        self._started = False

    def api_client(self, token: str | None = None) -> k8s.ApiClient:
        """A ``kubernetes`` client talking to this apiserver as admin, or with another token."""
        config = k8s.Configuration()
        config.host = self.server
        config.ssl_ca_cert = str(self.ca_path)
        # The client looks the token up as "BearerToken" (36 and later) or "authorization"
        # (before), and the prefix under the name it found the token by: set both.
        bearer = token or self.admin_token
        config.api_key = {"BearerToken": bearer, "authorization": bearer}
        config.api_key_prefix = {"BearerToken": "Bearer", "authorization": "Bearer"}
        return k8s.ApiClient(config)

    def stop_apiserver(self) -> None:
        """Stop only the apiserver (clients see connection refused until start_apiserver)."""
        proc = self._procs.get("kube-apiserver")
        if proc is not None:
            proc.stop(self.settings.stop_timeout)

    def start_apiserver(self) -> None:
        """Start the apiserver on its port against the same etcd; return once it is ready."""
        proc = self._procs.setdefault("kube-apiserver", Process(
            "kube-apiserver", self._apiserver_argv(), self.log_dir / "kube-apiserver.log"))
        if proc.running():
            return
        proc.start()
        self._wait_ready(proc, f"{self.server}/readyz", token=self.admin_token)

    def restart_apiserver(self) -> None:
        """Stop and start the apiserver: same port, same etcd, same certificate and tokens."""
        self.stop_apiserver()
        self.start_apiserver()

    def install_crds(self, paths: Sequence[Path]) -> None:
        """Create (or replace) the CRDs in these manifests and wait until they are served."""
        api = k8s.ApiextensionsV1Api(self.api_client())
        names: list[tuple[str, str, str]] = []  # (name, group/version, plural)
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                name = doc["metadata"]["name"]
                try:
                    api.create_custom_resource_definition(doc)
                except k8s.ApiException as err:
                    if err.status != 409:
                        raise ControlPlaneError(f"installing CRD {name} from {path} failed: "
                                                f"{err.status} {err.body}") from err
                    live = api.read_custom_resource_definition(name)
                    assert live.metadata is not None  # the apiserver always returns metadata
                    doc["metadata"]["resourceVersion"] = live.metadata.resource_version
                    api.replace_custom_resource_definition(name, doc)
                served = [v["name"] for v in doc["spec"]["versions"] if v.get("served")]
                names.extend((name, f"{doc['spec']['group']}/{v}", doc["spec"]["names"]["plural"])
                             for v in served)
        deadline = time.monotonic() + self.settings.start_timeout
        for name, group_version, plural in names:
            # Established means the apiserver accepts the type; discovery listing it is what the
            # garbage collector and clients go by.
            while True:
                crd = api.read_custom_resource_definition(name)
                conditions = (crd.status.conditions if crd.status else None) or []
                established = any(c.type == "Established" and c.status == "True"
                                  for c in conditions)
                # 1.36 answers a list of a type just made with 429 "storage is
                # (re)initializing" for a moment: served means a list answers.
                if established and self._discovery_lists(group_version, plural) and \
                        self._get(f"{self.server}/apis/{group_version}/{plural}",
                                  token=self.admin_token)[0] == 200:
                    break
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} not established and served in time")
                time.sleep(0.1)

    def audit_events(self, *, user: str | None = None,
                     verbs: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Completed requests from the audit log, optionally only one user's or some verbs."""
        events: list[dict[str, Any]] = []
        if not self.audit_log_path.exists():
            return events
        self.check_audit_log_whole()
        # Cheap byte tests before parsing: late in a session the log holds ~10^5 lines.
        wanted_user = user.encode() if user is not None else b""
        with self.audit_log_path.open("rb") as fh:
            for line in fh:
                if b"ResponseComplete" not in line or wanted_user not in line:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written right now
                if event.get("stage") != "ResponseComplete":
                    continue
                if user is not None and event.get("user", {}).get("username") != user:
                    continue
                if verbs is not None and event.get("verb") not in verbs:
                    continue
                events.append(event)
        return events

    def check_audit_log_whole(self) -> None:
        """Raise if the apiserver ever rotated audit.log: its readers would miss earlier events."""
        rotated = sorted(p.name for p in self.log_dir.glob("audit-*"))
        if rotated:
            raise ControlPlaneError(
                f"the apiserver rotated its audit log ({', '.join(rotated)} in {self.log_dir}); "
                "audit.log no longer holds every request. Raise AUDIT_LOG_NEVER_ROTATE_MB in "
                "tests/world/controlplane.py")

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running component, in bytes."""
        return {name: proc.rss_bytes() for name, proc in self._procs.items()}

    def exited(self) -> list[str]:
        """Components that were started and have since exited on their own (crashed)."""
        return [name for name, proc in self._procs.items()
                if proc.popen is not None and proc.popen.poll() is not None]

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._procs.items() if proc.pid is not None}

    def kubeconfig(self, token: str | None = None, user: str = "admin") -> dict[str, Any]:
        """A kubeconfig (as a dict) for this apiserver, the CA embedded so it can be copied."""
        ca_data = base64.b64encode(self.ca_path.read_bytes()).decode()
        return {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "kaiwu-testworld", "cluster": {
                "server": self.server, "certificate-authority-data": ca_data}}],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": "kaiwu-testworld", "context": {
                "cluster": "kaiwu-testworld", "user": user}}],
            "current-context": "kaiwu-testworld",
        }

    # ---- components ---------------------------------------------------------------------

    def _write_files(self) -> None:
        (self.dir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        rows = [f'{self.admin_token},admin,admin,"system:masters"']
        rows += [f"{token},{user},{user}" for user, token in self.component_tokens.items()]
        rows += [f'{token},system:node:{name},system:node:{name},"system:nodes"'
                 for name, token in self.node_tokens.items()]
        tokens = self.dir / "tokens.csv"
        tokens.write_text("\n".join(rows) + "\n")
        tokens.chmod(0o600)
        # The service-account signing key pair: the controller-manager signs legacy token
        # secrets with the private key, the apiserver verifies (and signs bound tokens) with it.
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.dir / "sa.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()))
        (self.dir / "sa.pub").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        (self.dir / "sa.key").chmod(0o600)

    def _default_crds(self) -> tuple[Path, ...]:
        """crd/ as it is for 1.20; on a later release, the KaiwuCluster CRD as `kaiwu crd
        --kube-version` prints it there (with that release's CEL rules), as a user installs it."""
        if not self.modern:
            return default_crd_paths()
        from renderer.cel import crd_for  # the renderer only where a CRD must be made
        from renderer.settings import KubeVersion

        made = self.dir / f"kaiwuclusters-{self.kube_version}.yaml"
        made.write_text(yaml.safe_dump(crd_for(KubeVersion.parse(self.kube_version))))
        return tuple(made if path.name == "kaiwuclusters.yaml" else path
                     for path in default_crd_paths())

    def _write_kubeconfigs(self) -> None:
        # Only once the apiserver has written its certificate (the CA is embedded).
        self.kubeconfig_path.write_text(yaml.safe_dump(self.kubeconfig()))
        for user, token in self.component_tokens.items():
            short = user.removeprefix("system:")
            (self.dir / f"{short}.kubeconfig").write_text(
                yaml.safe_dump(self.kubeconfig(token=token, user=user)))

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        proc = Process("etcd", [
            self.etcd_binary, "--name=testworld",
            f"--data-dir={self.etcd_data_dir}",
            f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testworld={peer}", "--initial-cluster-state=new",
            "--logger=zap", "--log-outputs=stderr", "--log-level=warn",
        ], self.log_dir / "etcd.log")
        self._procs["etcd"] = proc
        proc.start()
        self._wait_ready(proc, f"{client_url}/health")

    def _apiserver_argv(self) -> list[str]:
        s = self.settings
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}", *self._only_1_20("--insecure-port=0"),
            f"--cert-dir={self.cert_dir}",
            f"--token-auth-file={self.dir / 'tokens.csv'}",
            f"--authorization-mode={s.authorization_mode}",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-account-key-file={self.dir / 'sa.pub'}",
            f"--service-account-signing-key-file={self.dir / 'sa.key'}",
            f"--service-account-issuer={s.service_account_issuer}",
            f"--api-audiences={s.service_account_issuer}",
            f"--service-cluster-ip-range={s.service_cluster_ip_range}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--default-not-ready-toleration-seconds={s.not_ready_toleration_seconds}",
            f"--default-unreachable-toleration-seconds={s.unreachable_toleration_seconds}",
            "--allow-privileged=true",
            f"--audit-policy-file={self.dir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json", "--audit-log-mode=blocking",
            # Never rotate: lumberjack's default (0 here) means 100 MB, which a full test session
            # outgrows; readers of audit.log would then silently miss everything before the
            # rotation (a "no write at rest" check passing on an empty log). 1 TiB is never reached.
            f"--audit-log-maxsize={AUDIT_LOG_NEVER_ROTATE_MB}",
            *(["--enable-aggregator-routing=true"] if s.route_to_endpoints else []),
            "--profiling=false",
            f"--v={s.log_verbosity}",
        ]

    def _controllers(self) -> tuple[str, ...]:
        """The settings' controllers; from 1.29 the node lifecycle controller no longer evicts
        pods from tainted nodes: the taint eviction controller does (KEP-3902), so it runs too."""
        modern = ("taint-eviction-controller",) if self.modern else ()
        return (*self.settings.controllers, *modern)

    def _only_1_20(self, *flags: str) -> tuple[str, ...]:
        """Flags 1.20 needs that later versions removed (the insecure ports, the taint manager
        switch and the pod eviction timeout: taint-based eviction is all there is)."""
        return () if self.modern else flags

    def _start_controller_manager(self) -> None:
        s = self.settings
        self._write_kubeconfigs()
        kubeconfig = self.dir / "kube-controller-manager.kubeconfig"
        proc = Process("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # There is no client-certificate or front-proxy CA to look up in the cluster: bearer
            # tokens are the only credentials (without this they log an error every few seconds).
            "--authentication-skip-lookup=true",
            "--bind-address=127.0.0.1", f"--secure-port={self.controller_manager_port}",
            *self._only_1_20("--port=0"), f"--cert-dir={self.dir / 'controller-manager-certs'}",
            "--leader-elect=false",
            f"--controllers={','.join(self._controllers())}",
            # Each controller acts under its own service account, so RBAC applies to it as in
            # a real cluster.
            "--use-service-account-credentials=true",
            f"--root-ca-file={self.ca_path}",
            f"--service-account-private-key-file={self.dir / 'sa.key'}",
            f"--service-cluster-ip-range={s.service_cluster_ip_range}",
            f"--node-monitor-period={s.node_monitor_period}s",
            f"--node-monitor-grace-period={s.node_monitor_grace_period}s",
            f"--node-startup-grace-period={s.node_startup_grace_period}s",
            *self._only_1_20(f"--pod-eviction-timeout={s.pod_eviction_timeout}s"),
            f"--node-eviction-rate={s.node_eviction_rate}",
            f"--secondary-node-eviction-rate={s.node_eviction_rate}",
            *self._only_1_20("--enable-taint-manager=true"),
            "--profiling=false",
            f"--v={s.log_verbosity}",
        ], self.log_dir / "kube-controller-manager.log")
        self._procs["kube-controller-manager"] = proc
        proc.start()

    def _start_scheduler(self) -> None:
        kubeconfig = self.dir / "kube-scheduler.kubeconfig"
        proc = Process("kube-scheduler", [
            str(self.bin_dir / "kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # There is no client-certificate or front-proxy CA to look up in the cluster: bearer
            # tokens are the only credentials (without this they log an error every few seconds).
            "--authentication-skip-lookup=true",
            "--bind-address=127.0.0.1", f"--secure-port={self.scheduler_port}",
            *self._only_1_20("--port=0"),
            f"--cert-dir={self.dir / 'scheduler-certs'}",
            "--leader-elect=false", "--profiling=false",
            f"--v={self.settings.log_verbosity}",
        ], self.log_dir / "kube-scheduler.log")
        self._procs["kube-scheduler"] = proc
        proc.start()

    # ---- readiness ----------------------------------------------------------------------

    def _wait_healthy(self, name: str, port: int) -> None:
        # Their serving certs are self-signed and of no interest here: only /healthz is read.
        self._wait_ready(self._procs[name], f"https://127.0.0.1:{port}/healthz", verify=False)

    def _wait_ready(self, proc: Process, url: str, *, token: str | None = None,
                    verify: bool = True) -> None:
        deadline = time.monotonic() + self.settings.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not proc.running():
                raise ControlPlaneError(
                    f"{proc.name} exited while starting (log: {proc.log_path}):\n"
                    f"{proc.log_tail()}")
            status, body = self._get(url, token=token, verify=verify)
            if status == 200:
                return
            last = f"{status} {body[:200]}"
            time.sleep(0.1)
        raise ControlPlaneError(f"{proc.name} not ready after {self.settings.start_timeout} s "
                                f"({url}: {last}; log: {proc.log_path}):\n{proc.log_tail()}")

    def _get(self, url: str, *, token: str | None = None,
             verify: bool = True) -> tuple[int, str]:
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        context: ssl.SSLContext | None = None
        if url.startswith("https"):
            if verify and self.ca_path.exists():
                context = ssl.create_default_context(cafile=str(self.ca_path))
            else:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as resp:
                return int(resp.status), resp.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode(errors="replace")
        except (OSError, ssl.SSLError) as err:
            return 0, str(err)

    def _discovery_lists(self, group_version: str, plural: str) -> bool:
        status, body = self._get(f"{self.server}/apis/{group_version}", token=self.admin_token)
        if status != 200:
            return False
        return any(r.get("name") == plural for r in json.loads(body).get("resources", []))

    def _atexit(self) -> None:
        # Last resort for an interpreter that exits without stop(): never leave processes behind.
        if any(proc.running() for proc in self._procs.values()):
            self.stop(keep_logs=True)
