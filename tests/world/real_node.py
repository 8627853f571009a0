"""A real Kubernetes node in the test world (issue 30, item 1): containerd and runc from
Debian, and a kubelet built from the same Debian source as the control plane, registered beside
the simulated nodes and tainted so only pods that tolerate it land there.

Who calls it: the node tier's stories (tests/world_stories/node/, `make test-node`)
and `python -m tests.world.real_node build` (`make world-node`), which builds the kubelet and the
pause binary into ``~/.cache/kaiwu-testworld/kubernetes-<version>/node-bin/``. Nothing in `make
test` needs any of it.

What is real here: the kubelet (its sync loop, probes, volumes, ServiceAccount tokens, status),
containerd's CRI plugin, runc, and the images it runs. What is set for this machine, and why:
- containerd runs with its own config, root, state and socket under the node's directory, never
  the machine's defaults: podman, buildah or a system containerd are left alone.
- ``restrict_oom_score_adj``: this machine's sandbox refuses a negative oom_score_adj, and the
  CRI plugin gives every pod sandbox -998 (runc then dies with "can't get final child's PID from
  pipe"); restricted, the score is clamped to containerd's own.
- The pause image is made here (no registry is reachable): pause.c from the same source,
  compiled statically, written as a one-layer OCI archive and imported with ``ctr``.
- The network is loopback-only CNI: the node runs host-network pods only. The API server
  listens on 127.0.0.1, which a pod in its own network namespace cannot reach without
  kube-proxy rewriting a ClusterIP to loopback (Linux drops such packets unless route_localnet
  is set host-wide), so no kube-proxy runs either; the test overlay points in-cluster
  configuration at the API server's address instead.
- The node's address: the kubelet refuses a loopback node IP (127/8) and wants one the host
  holds, so each node adds 198.18.0.N/32 to the loopback interface and removes it on stop (RFC
  2544's benchmarking range; on `lo` it is never reachable from off this machine, and this
  kernel has no dummy interfaces). The kubelet serves on that address; host-network pods get it
  as their IP.
- cgroupfs, no QoS cgroups, no node-allocatable enforcement and no evictions: the kubelet
  shares the machine with the tests, and only the pods it runs are its business.
- The kubelet's identity is a token of system:node:NAME in system:nodes
  (ControlPlaneSettings.real_nodes), judged by the Node authorizer and NodeRestriction.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from tests.world import build as world_build
from tests.world.controlplane import ControlPlane, Process

# The node tier's stories (tests/world_stories/node): `pytestmark = NODE_TIER` in each.
NODE_TIER = [
    pytest.mark.world,
    pytest.mark.own_world,  # a control plane of its own: not the shared world, not its gate
    pytest.mark.skipif(os.environ.get("KAIWU_TESTWORLD_REAL_NODE") != "1",
                       reason="a real kubelet: this story runs in the node tier (make test-node)"),
]

NODE_BINARIES = ("kubelet", "pause")
PAUSE_IMAGE = "localhost/kaiwu-test/pause:3.2"
TAINT_KEY = "kaiwu.test/real-node"
NODE_ROOT = Path("/tmp")  # each node's directory (containerd's, the kubelet's), see RealNode
K8S_NAMESPACE = "k8s.io"  # containerd's namespace for the CRI plugin's images and containers


class RealNodeError(RuntimeError):
    """The real node cannot be built or started; the message says what is missing and the fix."""


# ---- build ------------------------------------------------------------------------------

def node_bin_dir(settings: world_build.BuildSettings, version: str) -> Path:
    return settings.cache_dir / f"{world_build.SOURCE_PACKAGE}-{version}" / "node-bin"


def locate_node_binaries(cache_dir: Path | None = None) -> Path | None:
    """The cached node-bin/ beside the newest built control plane, or None before `make
    world-node`."""
    bin_dir = world_build.locate_binaries(cache_dir)
    node = bin_dir.with_name("node-bin") if bin_dir is not None else None
    if node is None or not all(os.access(node / n, os.X_OK) for n in NODE_BINARIES):
        return None
    return node


def build_node(settings: world_build.BuildSettings) -> Path:
    """Build (or reuse) the kubelet and the pause binary; return the node-bin/ directory."""
    version = world_build.source_version()
    out_dir = node_bin_dir(settings, version)
    if all(os.access(out_dir / n, os.X_OK) for n in NODE_BINARIES):
        world_build.say(f"cached, nothing to do: {out_dir}")
        return out_dir
    started = time.monotonic()
    tree, built = world_build.compile_targets(
        settings, version, ("cmd/kubelet",), "kubelet (about 5 minutes on 2 quiet cores)")
    staging = out_dir.with_name("node-bin.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(built / "kubelet", staging / "kubelet")
    # The pause container of Kubernetes' own image, from the same source.
    world_build._run(["gcc", "-Os", "-static", "-DVERSION=3.2-kaiwu-test", "-o",
                      str(staging / "pause"), str(tree / "build/pause/linux/pause.c")],
                     "compile pause")
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)  # whole or absent
    if not settings.keep_tree:
        shutil.rmtree(tree, ignore_errors=True)
    world_build.say(f"built in {time.monotonic() - started:.0f} s: {out_dir}")
    return out_dir


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, Any]:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def single_binary_image(binary: Path, name: str, reference: str) -> bytes:
    """An OCI image archive (image-layout 1.0.0, as `ctr images import` reads it) of one layer
    holding `binary` as /`name`, its entrypoint."""
    layer_tar = io.BytesIO()
    with tarfile.open(fileobj=layer_tar, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = binary.stat().st_size, 0o755, 0
        with binary.open("rb") as fh:
            tar.addfile(info, fh)
    raw = layer_tar.getvalue()
    blobs: dict[str, bytes] = {}
    layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
             **_blob(blobs, gzip.compress(raw, mtime=0))}
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": [f"/{name}"]},
              "rootfs": {"type": "layers",
                         "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           **_blob(blobs, json.dumps(config).encode())},
                "layers": [layer]}
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **_blob(blobs, json.dumps(manifest).encode()),
        "annotations": {"org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1],
                        "io.containerd.image.name": reference}}]}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
                 "index.json": json.dumps(index).encode(),
                 **{f"blobs/sha256/{d.removeprefix('sha256:')}": b for d, b in blobs.items()}}
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# ---- run --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RealNodeSpec:
    """One real node: its name, its address (added to `lo`), its kubelet's ports."""

    name: str = "real-node-1"
    address: str = "198.18.0.1"
    kubelet_port: int = 10350
    healthz_port: int = 10358
    ready_timeout_s: float = 90.0


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run a real node, each with its fix (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (containerd, runc and the kubelet's mounts need it)")
    for tool, package in (("containerd", "containerd"), ("ctr", "containerd"),
                          ("runc", "runc"), ("ip", "iproute2")):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (apt-get install {package}: make world-node)")
    if not Path("/usr/lib/cni/loopback").exists():
        missing.append("the CNI loopback plugin (apt-get install containernetworking-plugins)")
    if locate_node_binaries() is None:
        missing.append("the kubelet built from Debian's source (make world-node)")
    return missing


class RealNode:
    """containerd and a kubelet for one node of `plane` (which must list it in
    ControlPlaneSettings.real_nodes). `start` returns once the Node is Ready; `stop` kills
    every container it ran, unmounts what the kubelet mounted and removes its address."""

    def __init__(self, plane: ControlPlane, spec: RealNodeSpec = RealNodeSpec(),
                 bin_dir: Path | None = None) -> None:
        if spec.name not in plane.node_tokens:
            raise RealNodeError(f"node {spec.name} has no token: list it in "
                                "ControlPlaneSettings.real_nodes")
        found = bin_dir or locate_node_binaries()
        if found is None:
            raise RealNodeError("no kubelet built: run make world-node")
        self.plane, self.spec, self.bin_dir = plane, spec, found
        self._lock: IO[str] | None = None
        self.ready_after_s: float | None = None  # start() to the Node Ready, once started
        # Not under the plane's directory, which a caller's tmp_root can make long: containerd
        # and the kubelet make unix sockets under it, and a socket's path must stay under 104
        # bytes (containerd refuses "unix socket path too long"). One run per node name.
        self.dir = NODE_ROOT / f"kaiwu-testworld-{spec.name}"
        self.socket = self.dir / "containerd" / "containerd.sock"
        self.containerd = Process("containerd", ["containerd", "--config",
                                                 str(self.dir / "containerd.toml")],
                                  plane.log_dir / f"{spec.name}-containerd.log")
        self.kubelet = Process("kubelet", [
            str(self.bin_dir / "kubelet"), f"--config={self.dir / 'kubelet.yaml'}",
            f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{self.socket}",
            f"--root-dir={self.dir / 'kubelet'}", f"--cert-dir={self.dir / 'kubelet-certs'}",
            f"--hostname-override={spec.name}", f"--node-ip={spec.address}",
            f"--node-labels={TAINT_KEY}=true",
            f"--register-with-taints={TAINT_KEY}=true:NoSchedule", "--v=2"],
            plane.log_dir / f"{spec.name}-kubelet.log")

    @property
    def log_paths(self) -> dict[str, Path]:
        return {f"{self.spec.name}-containerd": self.containerd.log_path,
                f"{self.spec.name}-kubelet": self.kubelet.log_path}

    def ctr(self, *args: str, stdin: bytes | None = None, check: bool = True) -> str:
        """`ctr` against this node's containerd, in the CRI plugin's namespace; with check,
        a failure is a RealNodeError naming the command."""
        proc = subprocess.run(["ctr", "--address", str(self.socket), "-n", K8S_NAMESPACE, *args],
                              input=stdin, capture_output=True, check=False)
        if check and proc.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)} failed: "
                                f"{proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode(errors="replace")

    def import_image(self, archive: bytes | Path) -> None:
        """Load an OCI or docker archive into the node's containerd (the image then counts as
        present: a pod naming it with imagePullPolicy IfNotPresent or Never runs it)."""
        data = archive.read_bytes() if isinstance(archive, Path) else archive
        self.ctr("images", "import", "--all-platforms", "-", stdin=data)

    def images(self) -> list[str]:
        return sorted(self.ctr("images", "ls", "-q").split())

    def start(self) -> None:
        """Start containerd and the kubelet; return once the Node is Ready. One run at a time
        holds a node name (its address and ports are fixed): a second run is refused, and what
        a killed run left (processes, containers, mounts, the address) is removed first."""
        missing = missing_prerequisites()
        if missing:
            raise RealNodeError("a real node cannot start here; missing: " + "; ".join(missing))
        started = time.monotonic()
        self._hold_lock()
        self._clean_after_killed_run()
        _unmount_under(self.dir)  # the directory is fixed per name: nothing of before stays
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self._state.write_text(str(self.dir))
        try:
            self._add_address()
            self._write_files()
            self.containerd.start()
            self._wait("containerd to answer", lambda: self._containerd_up(), 30)
            self.import_image(single_binary_image(self.bin_dir / "pause", "pause", PAUSE_IMAGE))
            self.kubelet.start()
            self._wait(f"node {self.spec.name} to be Ready", self._node_ready,
                       self.spec.ready_timeout_s)
            self.ready_after_s = time.monotonic() - started
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Best effort, every step whatever the one before it did: the kubelet, every
        container, containerd, the mounts, the address, the directory; the lock last, in any
        case."""
        steps: list[tuple[str, Any]] = [
            ("kubelet", lambda: self.kubelet.stop(timeout=10)),
            ("containers", lambda: self._kill_containers() if self.containerd.running()
             else None),
            ("containerd", lambda: self.containerd.stop(timeout=10)),
            ("mounts", lambda: _unmount_under(self.dir)),
            ("address", self._remove_address),
            ("directory", lambda: shutil.rmtree(self.dir, ignore_errors=True)),
            ("state", lambda: self._state.unlink(missing_ok=True))]
        # Each step's time and any failure, in the plane's logs (a slow teardown says where).
        lines = []
        try:
            for name, step in steps:
                began = time.monotonic()
                try:
                    step()
                    outcome = "done"
                except Exception as err:  # the next steps run all the same
                    outcome = f"failed: {err}"
                lines.append(f"{name}: {outcome} in {time.monotonic() - began:.1f} s")
        finally:
            # Even when interrupted (a test's timeout, Ctrl-C): the next run may then start,
            # and cleans what this one left (the state file names it).
            self._release_lock()
            with contextlib.suppress(OSError):
                (self.plane.log_dir / f"{self.spec.name}-stop.log").write_text(
                    "\n".join(lines) + "\n")

    # ---- one run per node name ------------------------------------------------------------

    @property
    def _state(self) -> Path:
        """Where the running node's directory is written, beside the cached binaries."""
        return self.bin_dir / f"{self.spec.name}.running"

    def _hold_lock(self) -> None:
        lock = (self.bin_dir / f"{self.spec.name}.lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise RealNodeError(f"another run holds the real node {self.spec.name} (its address "
                                f"{self.spec.address} and ports are fixed): wait for it") from None
        self._lock = lock

    def _release_lock(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _clean_after_killed_run(self) -> None:
        """A run killed before its stop left its kubelet, containerd, shims and containers
        running and its mounts and address in place: every process whose command line or
        container bundle names its directory is killed, then the rest is removed."""
        if not self._state.exists():
            return
        stale = self._state.read_text().strip()
        if not stale.startswith("/"):
            return
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError, ValueError):
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                root = os.readlink(proc / "cwd")
                if stale in cmdline or root.startswith(stale):
                    os.kill(int(proc.name), 9)
        _unmount_under(Path(stale))
        self._remove_address()
        shutil.rmtree(stale, ignore_errors=True)
        self._state.unlink(missing_ok=True)

    # ---- steps -----------------------------------------------------------------------------

    def _add_address(self) -> None:
        self._remove_address()  # left by a run that was killed
        argv = ["ip", "addr", "add", f"{self.spec.address}/32", "dev", "lo"]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RealNodeError(f"{' '.join(argv)}: {proc.stderr.strip()}")

    def _remove_address(self) -> None:
        subprocess.run(["ip", "addr", "del", f"{self.spec.address}/32", "dev", "lo"],
                       capture_output=True, check=False)

    def _write_files(self) -> None:
        cni = self.dir / "cni"
        cni.mkdir(exist_ok=True)
        (cni / "10-loopback.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "kaiwu-test-loopback",
            "plugins": [{"type": "loopback"}]}))
        state = self.dir / "containerd"
        (self.dir / "containerd.toml").write_text(f"""version = 2
root = "{state / 'root'}"
state = "{state / 'state'}"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
""")
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": self.spec.address, "port": self.spec.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.spec.healthz_port,
            # The API server reaches the kubelet (exec, logs) without a client certificate in
            # the test world; the kubelet serves only on its own address (on `lo`).
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
            "failSwapOn": False, "evictionHard": {},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "2s", "syncFrequency": "10s"}))
        kubeconfig = self.plane.kubeconfig(token=self.plane.node_tokens[self.spec.name],
                                           user=f"system:node:{self.spec.name}")
        (self.dir / "kubelet.kubeconfig").write_text(yaml.safe_dump(kubeconfig))

    def _containerd_up(self) -> bool:
        if not self.containerd.running():
            raise RealNodeError(f"containerd exited:\n{self.containerd.log_tail()}")
        try:
            self.ctr("version")
        except RealNodeError:
            return False
        return True

    def _node_ready(self) -> bool:
        if not self.kubelet.running():
            raise RealNodeError(f"the kubelet exited:\n{self.kubelet.log_tail()}")
        from kubernetes import client as k8s

        api = self.plane.api_client()
        try:
            node = k8s.CoreV1Api(api).read_node(self.spec.name)
        except k8s.ApiException as err:
            if err.status == 404:
                return False
            raise
        finally:
            api.close()  # type: ignore[no-untyped-call,unused-ignore]
        conditions = (node.status.conditions if node.status else None) or ()
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    def _wait(self, what: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RealNodeError(f"timed out after {timeout:g} s waiting for {what}; logs: "
                                    f"{self.containerd.log_path}, {self.kubelet.log_path}")
            time.sleep(0.5)

    def _live_tasks(self) -> list[str]:
        """The node's tasks not yet STOPPED (`ctr tasks ls` lists a stopped task until it is
        deleted: waiting for an empty list would wait out the deadline)."""
        rows = [line.split() for line in self.ctr("tasks", "ls").splitlines()[1:]]
        return [row[0] for row in rows if row and row[-1] != "STOPPED"]

    def _kill_containers(self) -> None:
        """Every task killed and every container removed: the node's pods end with it."""
        for task in self._live_tasks():
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        deadline = time.monotonic() + 10
        while self._live_tasks() and time.monotonic() < deadline:
            time.sleep(0.2)
        for task in self.ctr("tasks", "ls", "-q").split():
            self.ctr("tasks", "delete", "-f", task, check=False)
        for container in self.ctr("containers", "ls", "-q").split():
            self.ctr("containers", "rm", container, check=False)



def _unmount_under(directory: Path) -> None:
    """What the kubelet (tmpfs for Secret and token volumes) and containerd (overlay rootfs,
    shm) mounted under a node's directory, deepest first."""
    prefix = str(directory) + "/"
    mounts = [line.split()[1].replace("\\040", " ")
              for line in Path("/proc/self/mounts").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def on_real_node(bundle: list[dict[str, Any]], server: str,
                 settings: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The install bundle with the test overlay a real node of this test world needs, and
    nothing else: the reconciler's pods on the host network (the API server listens on
    127.0.0.1), their listeners on the pod's own address (two pods share the host's ports
    only at different addresses), the real node's taint tolerated and its label selected,
    the image used as loaded (no registry), and in-cluster configuration pointed at the API
    server (no kube-proxy turns the `kubernetes` Service's ClusterIP into it). `settings`:
    more of the reconciler's KAIWU_* variables, as a user would set them in the Deployment
    (a story's short certificate lifetimes, say); a name the bundle sets is refused."""
    host, _, port = server.removeprefix("https://").rpartition(":")
    extra = dict(settings or {})
    out = []
    for doc in bundle:
        if doc and doc.get("kind") == "Deployment":
            doc = json.loads(json.dumps(doc))
            pod = doc["spec"]["template"]["spec"]
            pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet",
                       nodeSelector={TAINT_KEY: "true"},
                       tolerations=[{"key": TAINT_KEY, "operator": "Exists"}])
            for container in pod["containers"]:
                container["imagePullPolicy"] = "Never"
                ports = {p["name"]: p["containerPort"] for p in container.get("ports") or ()}
                container["env"] = [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    *(container.get("env") or ()),
                    {"name": "KUBERNETES_SERVICE_HOST", "value": host},
                    {"name": "KUBERNETES_SERVICE_PORT", "value": port},
                    *({"name": f"KAIWU_{setting}", "value": f"$(POD_IP):{ports[name]}"}
                      for setting, name in (("HTTP_ADDRESS", "http-metrics"),
                                            ("WEBHOOK_ADDRESS", "webhook"),
                                            ("RESTORE_HTTP_ADDRESS", "restore-files"))
                      if name in ports)]
                clash = sorted({e["name"] for e in container["env"]} & extra.keys())
                if clash:
                    raise RealNodeError(f"on_real_node settings {clash}: the bundle or the "
                                        "overlay sets them already; change them there")
                container["env"] += [{"name": k, "value": v} for k, v in sorted(extra.items())]
        out.append(doc)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.world.real_node",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "check"],
                        help="build: the kubelet and pause into the cache; check: say what "
                             "this machine lacks to run a real node")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            build_node(world_build.BuildSettings())
        except world_build.BuildError as err:
            world_build.say(f"FAILED: {err}")
            return 1
        return 0
    missing = missing_prerequisites()
    for item in missing:
        print(f"missing: {item}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
