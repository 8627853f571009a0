"""Story: the image as shipped reconciles a cluster. The Dockerfile is built for real (podman,
FROM a base debootstrapped from Debian's packages, tests/world/image.py) and run the way
deploy/ runs it: as uid 10001, with a read-only root filesystem (only a tmpfs at /tmp, which the
Kubernetes client uses for the CA it is handed inline), host networking to reach the test
world's apiserver, and a kubeconfig for the ServiceAccount of a namespace-scoped `kaiwu install`
bundle, under exactly its RBAC (enforced; the audit log shows nothing refused).
A user applies a small cluster; the containerised reconciler brings it to Ready, then stops
cleanly on SIGTERM.

Missing podman/buildah/runc/debootstrap fail the story with what `make world` installs (never a
skip). Timings are printed (pytest -s): the base (a no-op once cached outside the work tree),
the build, and the run to Ready.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import yaml
from kubernetes import client as k8s

from reconciler import install
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.bundle import Installer
from tests.support.harness import condition, refused, user, wait_for
from tests.support.lifecycle import NAME, report, small_cluster
from tests.world import image
from tests.world.controlplane import REPO_ROOT, WRITE_VERBS, ControlPlane, service_account_token
from tests.world.simworld import SimWorld

UID = "10001"


@pytest.fixture(scope="module")
def reconciler_image() -> str:
    """The image, built once per run (podman's layer cache makes a rebuild of unchanged
    sources quick)."""
    missing = image.missing_tools()
    if missing:
        pytest.fail(f"the image story needs {', '.join(missing)}: make world installs them "
                    f"(apt-get install -y {' '.join(image.TOOLS)})", pytrace=False)
    started = time.monotonic()
    tag = image.build()
    report("image: base (cached) + wheelhouse + build", time.monotonic() - started)
    return tag


class Container:
    """One `podman run` of the image, its log in a file."""

    def __init__(self, tag: str, name: str, config_dir: Path, namespace: str,
                 log: Path) -> None:
        self.name, self.log = name, log
        argv = image.podman_argv(
            "run", "--rm", "--name", name, "--network", "host", "--user", f"{UID}:{UID}",
            "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp",
            "--volume", f"{config_dir}:/config:ro", tag,
            "--kubeconfig", "/config/kubeconfig", "--watch-namespace", namespace,
            "--lease-namespace", namespace, "--lease-duration-s", "3",
            "--renew-deadline-s", "2", "--retry-period-s", "0.5",
            "--http-address", "127.0.0.1:0", "--log-format", "text", "--identity", name)
        with log.open("wb") as out:
            self.popen = subprocess.Popen(argv, env=image.podman_env(), stdout=out,
                                          stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def inspect(self) -> dict[str, object]:
        found: list[dict[str, object]] = json.loads(image.podman("inspect", self.name,
                                                                 capture=True))
        return found[0]

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM (podman stop); the exit code of `podman run`."""
        if self.popen.poll() is None:
            subprocess.run(image.podman_argv("stop", "--time", "20", self.name),
                           env=image.podman_env(), check=False, capture_output=True)
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            subprocess.run(image.podman_argv("rm", "--force", self.name),
                           env=image.podman_env(), check=False, capture_output=True)
            self.popen.kill()
            self.popen.wait(5)
            raise


@pytest.fixture
def container(reconciler_image: str, control_plane: ControlPlane, kube: k8s.ApiClient,
              namespace: str, tmp_path: Path,
              installed: Installer) -> Iterator[Container]:
    # The bundle's ServiceAccount and RBAC, namespace-scoped, exactly as `kaiwu install` makes
    # them: the image runs with nothing more.
    installed(install.Options(namespace=namespace, scope="namespaced", image=reconciler_image,
                              watch_namespace=namespace), webhook=False)
    token = service_account_token(k8s.CoreV1Api(kube), namespace, install.NAME)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "kubeconfig").write_text(
        yaml.safe_dump(control_plane.kubeconfig(token=token, user="reconciler")))
    # Mounted into the container, where uid 10001 must be able to read it.
    os.chmod(config_dir, 0o755)
    os.chmod(config_dir / "kubeconfig", 0o644)
    started = Container(reconciler_image, f"kaiwu-image-{namespace}", config_dir, namespace,
                        tmp_path / "container.log")
    yield started
    if started.popen.poll() is None:
        started.stop()


def test_the_image_run_read_only_as_uid_10001_brings_a_cluster_to_ready(
        sim_world: SimWorld, container: Container, control_plane: ControlPlane,
        kube: k8s.ApiClient, namespace: str) -> None:
    started = time.monotonic()
    user(kube, "kubectl").apply(small_cluster(namespace))

    def ready() -> Obj | None:
        assert container.popen.poll() is None, f"the container exited:\n{container.text()}"
        found = Kube(kube, "test").get(kk.KAIWU_CLUSTER, namespace, NAME)
        return found if condition(found, "Ready").get("status") == "True" else None
    wait_for("the cluster to be Ready", ready, 120, 0.2)
    report("image run: apply -> Ready (3 nodes, reconciler in the container)",
           time.monotonic() - started)

    # It ran as the Dockerfile says and as deploy/ runs it.
    inspected = container.inspect()
    config, host = inspected["Config"], inspected["HostConfig"]
    assert isinstance(config, dict) and isinstance(host, dict)
    assert config["User"] == f"{UID}:{UID}"
    assert host["ReadonlyRootfs"] is True
    uid = image.podman("exec", container.name, "id", "-u", capture=True)
    assert uid.strip() == UID
    # The writes came from the container, under the bundle's ServiceAccount, and the bundle's
    # RBAC refused it nothing.
    sa_user = f"system:serviceaccount:{namespace}:{install.NAME}"
    writes = control_plane.audit_events(user=sa_user, verbs=WRITE_VERBS)
    if not any(w["objectRef"]["resource"] == "statefulsets" for w in writes):
        # Say who did write this namespace's StatefulSet, if anyone did.
        by_anyone = [f"{e['user']['username']} {e['verb']} {e['requestURI']}"
                     for e in control_plane.audit_events(verbs=WRITE_VERBS)
                     if e.get("objectRef", {}).get("namespace") == namespace
                     and e["objectRef"].get("resource") == "statefulsets"]
        raise AssertionError(f"{sa_user} wrote no StatefulSet; who did: {by_anyone}; "
                             f"its writes: {[(w['verb'], w['requestURI']) for w in writes]}")
    assert refused(control_plane, sa_user, namespace, "namespaced") == []

    assert container.stop() == 0, container.text()[-3000:]
    log = container.text()
    assert "Traceback" not in log, log[-3000:]
    assert "Read-only file system" not in log, log[-3000:]


@pytest.mark.world  # needs podman and the built image, not the control plane
def test_make_push_copies_the_image_it_built_to_the_destination_a_user_names(
        reconciler_image: str, tmp_path: Path) -> None:
    """`make push IMAGE=REF` (README, "Run it on your cluster") to a local destination, since no
    registry is reachable here: the archive holds the very image `make image` built (its
    config's digest is the image's id), under the name the default bundle runs."""
    archive = tmp_path / "pushed.tar"
    # This checkout's venv is the one running the tests; `-o` keeps make from remaking it.
    subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "push",
                    f"IMAGE=oci-archive:{archive}", f"BIN={Path(sys.executable).parent}"],
                   cwd=REPO_ROOT, check=True, timeout=300)
    assert image.image_tag() == reconciler_image, "make push copies what the bundle runs"
    with tarfile.open(archive) as tar:
        index = json.load(_member(tar, "index.json"))
        manifest = json.load(_member(tar, _blob(index["manifests"][0]["digest"])))
    built = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}",
                            reconciler_image], check=True, capture_output=True, text=True)
    assert manifest["config"]["digest"] == f"sha256:{built.stdout.strip()}"


def _blob(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    found = tar.extractfile(name)
    assert found is not None, f"the pushed archive has no {name}"
    return found
