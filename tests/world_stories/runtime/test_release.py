"""Stories: a maintainer makes a release and a user takes every file of it.

`make release` (tests/world/release.py) runs in a clean checkout of HEAD (`git worktree`, as the
operator upgrade story checks out its earlier version; skipped, saying why, without git history)
and writes dist/. Then each file is used as a user would use it:

- SHA256SUMS verifies with `sha256sum -c` and covers every other file; RELEASE names HEAD and a
  clean tree; every file is named for the version.
- Every manifest (the cluster and namespace-scoped bundles, the CRDs alone) is accepted by the
  test world's API server: `kubectl apply --server-side --dry-run=server -f FILE` (Debian's
  kubectl, `make world`) of each file unchanged, every object answered "serverside-applied
  (server dry run)", once the namespaces the files name exist (a dry run creates none). On a
  world older than the default --kube-version the release targets the world's release
  (RELEASE says which), as `kaiwu install --kube-version` would: 1.20 has neither policy/v1
  nor CEL. On the 1.36 world (make test-136) the files are the default ones, as shipped.
- The wheel installs into a fresh venv outside the checkout, which answers `kaiwu --help`,
  `--version`, `validate` and `render` of the example clusters (tests/support/wheel.py, shared
  with the packaging story); the sdist holds the CRD the wheel needs.
- The OCI archive loads with `podman load` into an empty store, under the default image name and
  the image ID RELEASE records.
- The krew manifest's sha256 is the krew archive's; the monitoring archive holds deploy/monitoring
  byte for byte.

The image is built as `make image` builds it: from a clean checkout of the same sources the
image story built, podman's layer cache makes it a few seconds. Timings are printed (pytest -s).
Missing podman/buildah/runc/debootstrap fail the story with what `make world` installs.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from reconciler.model import Obj
from renderer.settings import DEFAULT_KUBE_VERSION
from tests.support import earlier, wheel
from tests.support.bundle import PATHS
from tests.support.lifecycle import report
from tests.support.world_kube import VERSION
from tests.world import image, release
from tests.world.build import locate_kubectl
from tests.world.controlplane import ControlPlane
from tests.world.fixtures import make_namespace

# Needs podman and builds the image, like the image story: the world tier.
pytestmark = pytest.mark.world

# The default bundle's target where the world runs it (1.36), else the world's own release:
# a 1.20 API server has neither policy/v1 nor CEL (docs/install.md, "Deploying it").
TARGET = DEFAULT_KUBE_VERSION if VERSION >= DEFAULT_KUBE_VERSION else VERSION


@dataclass(frozen=True)
class Release:
    checkout: Path  # the clean checkout it was made in
    dist: Path
    commit: str
    version: str

    def file(self, part: str) -> Path:
        return self.dist / release.names(self.version)[part]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    reason = earlier.earlier_skip_reason("HEAD", what="the release")
    if reason:
        pytest.skip(reason)
    missing = image.missing_tools()
    if missing:
        pytest.fail(f"the release story needs {', '.join(missing)}: make world installs them "
                    f"(apt-get install -y {' '.join(image.TOOLS)})", pytrace=False)
    commit = earlier.commit_id("HEAD")
    where = tmp_path_factory.mktemp("release")
    with earlier.earlier_checkout(where, commit) as checkout:
        started = time.monotonic()
        dist = where / "dist"
        # The checkout's own modules: `python -m` puts the working directory first.
        done = subprocess.run(
            [sys.executable, "-m", "tests.world.release", "--out", str(dist),
             "--kube-version", str(TARGET)],
            cwd=checkout, env=earlier.environment(checkout), capture_output=True, text=True,
            timeout=900, check=False)
        assert done.returncode == 0, f"make release failed:\n{done.stdout[-3000:]}\n" \
            f"{done.stderr[-3000:]}"
        report("release: make release in a clean checkout", time.monotonic() - started)
        yield Release(checkout, dist, commit, release.project_version(checkout))


def test_every_file_is_named_for_the_version_and_sha256sums_verifies(made: Release) -> None:
    v = made.version
    assert sorted(path.name for path in made.dist.iterdir()) == sorted([
        "RELEASE", "SHA256SUMS",
        f"kaiwu_operator-{v}-py3-none-any.whl", f"kaiwu_operator-{v}.tar.gz",
        f"kaiwu-reconciler-{v}.oci.tar",
        f"kaiwu-operator-{v}-install.yaml", f"kaiwu-operator-{v}-install-namespaced.yaml",
        f"kaiwu-operator-{v}-crds.yaml", f"kaiwu-operator-{v}-monitoring.tar.gz",
        f"kubectl-kaiwu-v{v}.tar.gz", f"kubectl-kaiwu-v{v}.krew.yaml"])
    checked = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"],
                             cwd=made.dist, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = {line.split("  ", 1)[1]
              for line in (made.dist / "SHA256SUMS").read_text().splitlines()}
    assert listed == {path.name for path in made.dist.iterdir()} - {"SHA256SUMS"}
    # A corrupted file is caught: the sums are of these bytes.
    broken = made.dist.parent / "broken"
    shutil.copytree(made.dist, broken, ignore=shutil.ignore_patterns("*.oci.tar"))
    (broken / "RELEASE").write_text((broken / "RELEASE").read_text() + "#\n")
    checked = subprocess.run(["sha256sum", "--check", "--quiet", "--ignore-missing",
                              "SHA256SUMS"], cwd=broken, capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 1 and "RELEASE: FAILED" in checked.stdout

    recorded = yaml.safe_load((made.dist / "RELEASE").read_text())
    assert recorded["commit"] == made.commit
    assert recorded["tree"] == "clean"
    assert recorded["version"] == v
    assert recorded["kube-version"] == str(TARGET)


MANIFESTS = ("install", "install-namespaced", "crds")


def documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture
def named_namespaces(made: Release, kube: k8s.ApiClient) -> Iterator[list[str]]:
    """The namespaces the manifests name, made where absent (a dry run creates none, so on a
    cluster without them `kubectl apply --dry-run=server` refuses every object in them) and
    deleted after. Nothing else in this world uses kaiwu-system: the demo and quickstart
    stories run control planes of their own."""
    core = k8s.CoreV1Api(kube)
    named = sorted({doc["metadata"].get("namespace") or doc["metadata"]["name"]
                    for part in MANIFESTS for doc in documents(made.file(part))
                    if doc["kind"] == "Namespace" or PATHS[doc["kind"]][1]})
    existing = {ns.metadata.name for ns in core.list_namespace().items if ns.metadata}
    made_here = [name for name in named if name not in existing]
    for name in made_here:
        make_namespace(core, name)
    yield named
    for name in made_here:
        with contextlib.suppress(k8s.ApiException):
            core.delete_namespace(name)


def test_every_manifest_is_accepted_by_kubectl_apply_with_a_server_side_dry_run(
        made: Release, control_plane: ControlPlane, named_namespaces: list[str],
        tmp_path: Path) -> None:
    kubectl = locate_kubectl()
    if kubectl is None:
        pytest.fail("no kubectl in the test world's cache: run `make world` (it fetches "
                    "Debian's kubectl beside the control plane)", pytrace=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(control_plane.kubeconfig()))
    assert named_namespaces == ["kaiwu-clusters", "kaiwu-system"]
    started = time.monotonic()
    applied = 0
    for part in MANIFESTS:
        path = made.file(part)
        # As an administrator applies it (server-side, as the README's steps do), the file
        # unchanged; --force-conflicts: the world's own CRDs were made by another manager.
        done = subprocess.run(
            [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "--server-side",
             "--force-conflicts", "--dry-run=server", "-f", str(path)],
            capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{path.name}: {done.stdout}{done.stderr}"
        said = done.stdout.splitlines()
        docs = documents(path)
        assert len(said) == len(docs), done.stdout
        assert all(line.endswith("serverside-applied (server dry run)") for line in said), \
            done.stdout
        applied += len(docs)
    report(f"release: {applied} objects of {len(MANIFESTS)} manifests applied with kubectl "
           "--dry-run=server", time.monotonic() - started)

    # The CRDs alone are the bundle's CRDs; the namespaced bundle watches what it says it does.
    crds = documents(made.file("crds"))
    assert {doc["kind"] for doc in crds} == {"CustomResourceDefinition"}
    assert crds == [doc for doc in documents(made.file("install"))
                    if doc["kind"] == "CustomResourceDefinition"]
    namespaced = made.file("install-namespaced")
    assert f"It watches the namespace {release.WATCHED} only" in namespaced.read_text()
    (deployment,) = [d for d in documents(namespaced) if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in
           deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["KAIWU_WATCH_NAMESPACE"] == release.WATCHED


def test_the_wheel_installs_into_a_fresh_venv_and_runs_outside_the_checkout(
        made: Release, tmp_path: Path) -> None:
    started = time.monotonic()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wheel.install(made.file("wheel"), made.checkout / "requirements.lock", tmp_path / "venv",
                  elsewhere)
    wheel.check(tmp_path / "venv", made.version, made.checkout / "clusters", elsewhere)
    report("release: wheel installed into a fresh venv and run", time.monotonic() - started)
    # The sdist builds that wheel: it carries the CRD (package data) and no checkout clutter.
    with tarfile.open(made.file("sdist")) as sdist:
        members = set(sdist.getnames())
    root = f"kaiwu_operator-{made.version}"
    assert f"{root}/renderer/crd/kaiwuclusters.yaml" in members
    assert f"{root}/pyproject.toml" in members
    assert not any("/.git/" in name or "/tests/" in name for name in members)
    with zipfile.ZipFile(made.file("wheel")) as built:
        assert "renderer/crd/kaiwuclusters.yaml" in built.namelist()


def test_the_image_archive_loads_with_podman_under_the_default_name(
        made: Release, tmp_path: Path) -> None:
    started = time.monotonic()
    # An empty store of its own: the archive alone must carry the image. Its runroot in a
    # short path: podman refuses one longer than 50 characters.
    runroot = Path(tempfile.mkdtemp(prefix="kaiwu-run-"))
    store = ("--root", str(tmp_path / "store"), "--runroot", str(runroot))
    try:
        loaded = image.podman(*store, "load", "--quiet", "--input", str(made.file("image")),
                              capture=True)
        tag = image.image_tag()
        assert tag in loaded, loaded
        found = image.podman(*store, "image", "inspect", "--format", "{{.Id}}", tag,
                             capture=True).strip()
        assert found == yaml.safe_load((made.dist / "RELEASE").read_text())["image-id"]
    finally:
        for made_here in (tmp_path / "store", runroot):  # a load mounts nothing
            shutil.rmtree(made_here, ignore_errors=True)
    report("release: OCI archive loaded into an empty store", time.monotonic() - started)


def test_the_krew_and_monitoring_archives_hold_what_the_checkout_holds(made: Release) -> None:
    plugin = yaml.safe_load(made.file("krew-manifest").read_text())
    (platform,) = plugin["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(made.file("krew").read_bytes()).hexdigest()
    with tarfile.open(made.file("krew")) as krew:
        assert krew.getnames() == ["kubectl-kaiwu"]

    folder = made.checkout / "deploy" / "monitoring"
    prefix = f"kaiwu-operator-{made.version}-monitoring/"
    with tarfile.open(made.file("monitoring")) as archive:
        held = {}
        for member in archive.getmembers():
            extracted = archive.extractfile(member)
            assert extracted is not None, member.name
            held[member.name] = extracted.read()
    assert held == {prefix + path.relative_to(folder).as_posix(): path.read_bytes()
                    for path in folder.rglob("*") if path.is_file()}
