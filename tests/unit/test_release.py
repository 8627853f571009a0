"""What `make release` (tests/world/release.py) writes, where no image is built: the bundles
are `kaiwu install`'s (the cluster-wide one byte for byte deploy/install.yaml), the namespaced
one says in its header which namespace it watches and how to choose another, the monitoring
archive is deploy/monitoring and the same bytes every time, and a dirty tree is refused before
anything is built, naming what is uncommitted. The release story
(tests/world_stories/runtime/test_release.py) makes a whole release and uses every file."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from renderer.settings import DEFAULT_KUBE_VERSION, KubeVersion
from tests.world import release
from tests.world.controlplane import REPO_ROOT

VERSION = release.project_version()


def test_the_cluster_wide_bundle_is_deploy_install_yaml_and_the_crds_are_its_crds() -> None:
    files = release.manifests(VERSION, DEFAULT_KUBE_VERSION)
    names = release.names(VERSION)
    assert files[names["install"]] == (REPO_ROOT / "deploy" / "install.yaml").read_text()
    bundle = [d for d in yaml.safe_load_all(files[names["install"]]) if d]
    crds = [d for d in yaml.safe_load_all(files[names["crds"]]) if d]
    assert crds == [d for d in bundle if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 3


def test_the_namespaced_bundle_says_which_namespace_it_watches_and_how_to_choose_another() -> None:
    text = release.manifests(VERSION, KubeVersion(1, 20))[release.names(VERSION)
                                                          ["install-namespaced"]]
    header = text[:text.index("\n---\n")].splitlines()
    assert all(line.startswith("#") for line in header)
    said = " ".join(line.lstrip("# ") for line in header)
    assert f"It watches the namespace {release.WATCHED} only" in said
    assert ("kaiwu install --scope namespaced --watch-namespace NS [--namespace INSTALL_NS] "
            "--kube-version 1.20") in said
    (deployment,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "KAIWU_WATCH_NAMESPACE", "value": release.WATCHED} in env


def test_the_monitoring_archive_is_deploy_monitoring_and_the_same_bytes_every_time() -> None:
    packed = release.monitoring_archive(REPO_ROOT, VERSION)
    assert packed == release.monitoring_archive(REPO_ROOT, VERSION)
    folder = REPO_ROOT / "deploy" / "monitoring"
    with tarfile.open(fileobj=io.BytesIO(packed)) as archive:
        held = {m.name: m for m in archive.getmembers()}
        assert {name: archive.extractfile(m).read()  # type: ignore[union-attr]
                for name, m in held.items()} == {
            f"kaiwu-operator-{VERSION}-monitoring/{p.relative_to(folder).as_posix()}":
            p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert {(m.mtime, m.uid, m.uname) for m in held.values()} == {(0, 0, "")}


def test_a_dirty_tree_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], check=True, capture_output=True)
    git("init", "-q")
    git("add", "pyproject.toml")
    git("commit", "-qm", "one")
    (root / "renderer.py").write_text("# not committed\n")
    out = tmp_path / "dist"
    with pytest.raises(release.ReleaseError, match=r"untracked files \(\?\? renderer.py\).*"
                       r"Commit or stash them \(or --allow-dirty"):
        release.release(out, root=root)
    assert not out.exists()


def test_a_copy_without_git_is_refused_saying_a_release_records_its_commit(
        tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with pytest.raises(release.ReleaseError, match="records the commit it was made from"):
        release.release(tmp_path / "dist", root=tmp_path)
