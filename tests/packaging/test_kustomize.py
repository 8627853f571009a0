"""Story: a kustomize user installs the reconciler from deploy/kustomize/ and gets what
`kaiwu install` prints for the same choice, whichever kustomize their kubectl carries.

Each overlay (and deploy/ itself, and the base's crds/ part) is built with `kubectl kustomize`
and its objects compared with those of `kaiwu install` with the overlay's flags, written out
here (not taken from the generator): as a set of parsed objects, order and formatting aside,
every field equal. Then what the overlays' comments tell a user to do: an `images:` overlay
of their own does what `--image` does, and the example value replaced with `sed` (here, the
same substitution in Python) builds the bundle for the new value.

Two kubectls: Debian bookworm's 1.20 (kustomize v2.0.3, the oldest dialect the files are
written in), fetched into the test world's cache by `python -m tests.world.build` (`make
world`), required; and a current one where the PATH has it (kustomize v5 on this machine),
skipped where it has none. World tier: the fast tier runs before `make world` fetches kubectl,
so a fresh CI machine has it only then. No control plane is started. About a second per build.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from deepdiff import DeepDiff

from reconciler import install
from reconciler.cli import main
from tests.world.build import locate_kubectl
from tests.world.controlplane import REPO_ROOT

pytestmark = pytest.mark.world

DEPLOY = REPO_ROOT / "deploy"
OVERLAYS = DEPLOY / "kustomize" / "overlays"
MONITORING_OBJECTS = ("servicemonitor.yaml", "prometheusrule.yaml")
GIT_REPO = "https://git.example.com/platform/kaiwu-clusters.git"

# Each directory a user applies with `kubectl apply -k`, and the `kaiwu install` flags of the
# same choice.
CHOICES: dict[str, list[str]] = {
    ".": [],
    "kustomize/base/crds": ["--crds-only"],
    "kustomize/overlays/cluster": [],
    "kustomize/overlays/namespaced": ["--scope", "namespaced", "--watch-namespace", "team-a"],
    "kustomize/overlays/shard": ["--shard", "emea"],
    "kustomize/overlays/directory-mode": ["--directory-mode", "--git-repo", GIT_REPO],
    "kustomize/overlays/monitoring": [],
}


def debian_kubectl() -> str:
    found = locate_kubectl()
    assert found is not None, ("Debian's kubectl 1.20 is not in the test world's cache: run "
                               "`make world` (python -m tests.world.build fetches it)")
    return str(found)


def current_kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl on the PATH: only Debian's kustomize v2.0.3 builds the overlays "
                    "here")
    return found


KUBECTLS = {"kubectl-1.20": debian_kubectl, "kubectl-on-path": current_kubectl}


@pytest.fixture(params=sorted(KUBECTLS))
def kubectl(request: pytest.FixtureRequest) -> str:
    return KUBECTLS[request.param]()


def objects(text: str) -> Counter[str]:
    """The objects of a YAML stream, each as JSON with sorted keys: a multiset, so order and
    formatting do not count and every field (and its type: "1" is not 1) does."""
    return Counter(json.dumps(doc, sort_keys=True)
                   for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc)


def kustomize(kubectl: str, directory: Path) -> str:
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{kubectl} kustomize {directory}:\n{done.stderr}"
    return done.stdout


def kaiwu_install(flags: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["install", *flags]) == 0
    return capsys.readouterr().out


def by_name(found: Counter[str]) -> dict[str, dict[str, Any]]:
    """The objects by kind/namespace/name, for a readable failure."""
    out = {}
    for text in found.elements():
        obj: dict[str, Any] = json.loads(text)
        meta = obj["metadata"]
        out[f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"] = obj
    return out


def assert_same(built: Counter[str], printed: Counter[str], what: str) -> None:
    only_built, only_printed = by_name(built - printed), by_name(printed - built)
    differ = {name: DeepDiff(only_printed[name], obj).to_dict()
              for name, obj in only_built.items() if name in only_printed}
    assert built == printed, (
        f"{what}: kustomize builds other objects than kaiwu install prints.\n"
        f"only built: {sorted(set(only_built) - set(differ))}\n"
        f"only printed: {sorted(set(only_printed) - set(differ))}\n"
        f"built otherwise (printed -> built): {differ}")


@pytest.mark.parametrize("directory", sorted(CHOICES))
def test_each_overlay_builds_what_kaiwu_install_prints(
        kubectl: str, directory: str, capsys: pytest.CaptureFixture[str]) -> None:
    printed = objects(kaiwu_install(CHOICES[directory], capsys))
    if directory.endswith("monitoring"):
        printed += sum((objects((DEPLOY / "monitoring" / name).read_text())
                        for name in MONITORING_OBJECTS), Counter())
    assert_same(objects(kustomize(kubectl, DEPLOY / directory)), printed, directory)


def copy_deploy(tmp_path: Path) -> Path:
    """deploy/kustomize and deploy/monitoring as a user copies them into their repository."""
    copy = tmp_path / "deploy"
    for part in ("kustomize", "monitoring"):
        shutil.copytree(DEPLOY / part, copy / part)
    return copy


def test_an_images_entry_of_your_own_overlay_does_what_image_does(
        kubectl: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = copy_deploy(tmp_path)
    mine = copy / "mine"
    mine.mkdir()
    # What the overlays' comments say to write (a directory under `bases:` for kustomize v2).
    (mine / "kustomization.yaml").write_text(
        "bases:\n- ../kustomize/overlays/directory-mode\n"
        f"images:\n- name: {install.IMAGE_REPOSITORY}\n"
        "  newName: registry.example.com/team/kaiwu-reconciler\n  newTag: \"0.1.0\"\n")
    printed = kaiwu_install(["--directory-mode", "--git-repo", GIT_REPO, "--image",
                             "registry.example.com/team/kaiwu-reconciler:0.1.0"], capsys)
    # The git-sync sidecar keeps its own image: the entry names the reconciler's only.
    assert_same(objects(kustomize(kubectl, mine)), objects(printed), "images:")


@pytest.mark.parametrize(("overlay", "example", "new", "flags"), [
    ("namespaced", "team-a", "payments", ["--scope", "namespaced", "--watch-namespace"]),
    ("shard", "emea", "apac-2", ["--shard"]),
    ("directory-mode", GIT_REPO, "ssh://git@git.example.org/ops/clusters.git",
     ["--directory-mode", "--git-repo"]),
])
def test_the_example_value_replaced_as_the_comments_say_builds_the_bundle_for_the_new_one(
        kubectl: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], overlay: str,
        example: str, new: str, flags: list[str]) -> None:
    copy = copy_deploy(tmp_path)
    directory = copy / "kustomize" / "overlays" / overlay
    # The comment's own command, `sed -i 's/EXAMPLE/NEW/g' overlays/NAME/*.yaml`.
    comment = (directory / "kustomization.yaml").read_text()
    assert re.search(rf"sed -i 's(.){re.escape(example)}\1NEW\1g' overlays/{overlay}/\*\.yaml",
                     comment), comment
    for path in directory.glob("*.yaml"):
        path.write_text(path.read_text().replace(example, new))
    assert_same(objects(kustomize(kubectl, directory)),
                objects(kaiwu_install([*flags, new], capsys)), f"{overlay} with {new}")
