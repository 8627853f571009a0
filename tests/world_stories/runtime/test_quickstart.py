"""Story: a newcomer follows the README's "Run it on your cluster", command by command.

The commands come from README.md itself (tests/support/quickstart.py reads them), in its order,
run by bash as a user types them: Debian's kubectl (the test world's, `make world`) and this
checkout's `kaiwu` first on PATH, the kubeconfig of a control plane of the story's own (no CRD
installed: the README's install installs it) with three simulated nodes, and the checkout as
the working directory (`kubectl apply -f clusters/dev.yaml`, unchanged).

What the test world changes, each named with its reason in tests/support/quickstart.py: it runs
Kubernetes 1.20, so `kaiwu install` and `kaiwu uninstall` get `--kube-version 1.20`; no kubelet
runs the reconciler's image, so where the README waits for the Deployment's rollout the story
starts the reconciler as that Deployment would (its variables, its ServiceAccount's token) and
waits for its webhook; and no Service routes the API server to that process, so the install
pipeline's webhook registration names the URL the reconciler serves. The image commands (build,
kind, k3d, a registry) are named with why they cannot run here.

Then it checks what the README promises: the cluster Ready and `kaiwu status` saying so (exit 0);
the upgrade (the bundle applied again and the reconciler replaced) restarts no KaiwuDB pod; the
removal leaves every KaiwuDB pod running (same uid, Ready), every claim and the cluster's
objects, with the operator's Deployment and webhook registration gone.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from reconciler import install
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.runtime.webhook import PATH
from renderer.settings import DEFAULT_KUBE_VERSION
from tests.support import quickstart
from tests.support.bundle import run_as_deployed, stop
from tests.support.harness import REPO, wait_for
from tests.support.lifecycle import report
from tests.support.world_kube import VERSION
from tests.world.build import locate_kubectl
from tests.world.controlplane import ControlPlane, ControlPlaneSettings, free_port
from tests.world.kube_rest import KubeAccess
from tests.world.kubelet import default_nodes
from tests.world.simworld import SimWorld, WorldSettings

NAMESPACE = "kaiwu-dev"  # clusters/dev.yaml's
CLUSTER = "dev"
OPERATOR_NAMESPACE = "kaiwu-system"  # kaiwu install's default


def user_shell(tmp: Path, kubeconfig: Path) -> dict[str, str]:
    """The environment of the user's shell: kubectl and kaiwu first on PATH. Debian's kubectl
    1.20.2 on every tier (on the 1.36 tier beyond kubectl's supported skew of one minor release;
    the commands the README uses work there)."""
    kubectl = locate_kubectl()
    if kubectl is None:
        pytest.fail("no kubectl in the test world's cache: run `make world` (it fetches "
                    "Debian's kubectl beside the control plane)")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(kubectl)
    # This checkout's kaiwu (the story's cwd is the checkout, so `-m` imports its code).
    kaiwu = bin_dir / "kaiwu"
    kaiwu.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m reconciler.cli "$@"\n')
    kaiwu.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "KUBECONFIG": str(kubeconfig)}


def pods(api: Kube) -> dict[str, tuple[str, bool]]:
    """The cluster's pods: name -> (uid, ready)."""
    found, _ = api.list_objects(kk.POD, NAMESPACE)
    return {pod["metadata"]["name"]: (pod["metadata"]["uid"], any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", []))) for pod in found}


@pytest.mark.world  # a world of its own: no session fixture marks it
def test_a_newcomer_runs_the_readme_quickstart_as_written(tmp_path: Path) -> None:
    steps = quickstart.steps()
    kubeconfig = tmp_path / "kubeconfig"
    env = user_shell(tmp_path, kubeconfig)
    # The README's --kube-version is for a release before the bundle's default only.
    kube_version = "" if VERSION >= DEFAULT_KUBE_VERSION else str(VERSION)
    started = time.monotonic()
    with ControlPlane(ControlPlaneSettings(crd_paths=())) as plane:
        admin = plane.api_client()
        api = Kube(admin, "test")
        kubeconfig.write_text(yaml.safe_dump(plane.kubeconfig()))
        world = SimWorld(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token),
                         WorldSettings(nodes=default_nodes(3, prefix="quickstart-node")))
        reconcilers: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []
        webhook_port = free_port()
        outputs: dict[str, str] = {}
        try:
            world.start()
            for number, step in enumerate(steps, 1):
                if step.not_here is not None:
                    print(f"[{number}] not here: {step.shown}\n      ({step.not_here.why})")
                    if step.not_here.stand_in == quickstart.START_RECONCILER:
                        if reconcilers:  # the upgrade's rollout: the old replica goes first
                            stop(reconcilers[-1])
                        popen, log = start_reconciler(plane, admin, tmp_path, len(reconcilers),
                                                      webhook_port)
                        reconcilers.append(popen)
                        logs.append(log)
                        try:
                            # The new reconciler leads (an upgrade: not the one before it),
                            # and the registration holds a CA.
                            wait_for("the reconciler to lead and register its webhook",
                                     functools.partial(registered, api, popen, log,
                                                       f"quickstart-{len(reconcilers) - 1}"),
                                     60, 0.2)
                        except BaseException:
                            print(log.read_text(errors="replace")[-3000:])
                            raise
                    continue
                command = step.command(kube_version=kube_version,
                                       webhook_url=f"https://127.0.0.1:{webhook_port}{PATH}",
                                       python=sys.executable)
                ran = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=REPO,
                                     env=env, capture_output=True, text=True, timeout=900,
                                     check=False)
                print(f"[{number}] $ {command}\n{ran.stdout}{ran.stderr}")
                assert ran.returncode == 0, (
                    f"README quickstart step {number} failed: {step.shown}\n(ran: {command})\n"
                    f"exit {ran.returncode}\n{ran.stdout}\n{ran.stderr}\n"
                    + "".join(log.read_text(errors="replace")[-2000:] for log in logs))
                outputs[step.shown] = ran.stdout
                if step.shown.startswith("kubectl -n kaiwu-dev wait"):
                    report("README: operator installed, cluster Ready", time.monotonic() - started)
                    ready = pods(api)
                    assert len(ready) == 3 and all(r for _, r in ready.values()), ready
                if "rollout restart" in step.shown:
                    # The Deployment's template changed, so a real rollout replaces its pods.
                    template = k8s.AppsV1Api(admin).read_namespaced_deployment(
                        install.NAME, OPERATOR_NAMESPACE).spec.template
                    annotations = template.metadata.annotations if template.metadata else None
                    assert "kubectl.kubernetes.io/restartedAt" in (annotations or {})
                if step.shown.startswith("kaiwu uninstall"):
                    assert reconcilers[-1].poll() is None, "the reconciler ran until the removal"
                    for popen in reconcilers:  # deleting the Deployment stops its pods
                        stop(popen)
            report("README: upgraded, then removed", time.monotonic() - started)
            time.sleep(2.0)  # time for anything the removal would have taken with it to go
            after = pods(api)
            left, _ = api.list_objects(kk.VALIDATING_WEBHOOK)
            deployments = k8s.AppsV1Api(admin).list_namespaced_deployment(OPERATOR_NAMESPACE)
            claims, _ = api.list_objects(kk.PVC, NAMESPACE)
            statefulsets, _ = api.list_objects(kk.STATEFUL_SET, NAMESPACE)
        finally:
            for popen in reconcilers:
                stop(popen)
            world.stop(delete_nodes=True)

    assert len(reconcilers) == 2, "installed, then upgraded: the reconciler replaced once"
    status = outputs["kaiwu status -n kaiwu-dev"]
    assert CLUSTER in status and "Ready" in status, status
    # The upgrade restarted no KaiwuDB pod, and the removal took nothing of the database's.
    assert after == ready, "every KaiwuDB pod runs on, same uid, Ready"
    assert len(claims) == 3 and [s["metadata"]["name"] for s in statefulsets] == [CLUSTER]
    assert not left, "the webhook registration goes first, with the operator"
    assert not deployments.items, "the operator's Deployment is gone"


def start_reconciler(plane: ControlPlane, admin: k8s.ApiClient, tmp: Path, number: int,
                     webhook_port: int) -> tuple[subprocess.Popen[bytes], Path]:
    """The reconciler as the bundle's Deployment runs it (the bundle `kaiwu install` printed),
    its webhook on 127.0.0.1:`webhook_port`, the URL the install pipeline's registration names."""
    docs = [d.obj for d in install.bundle(install.Options(kube_version=VERSION))]
    popen, log, _ = run_as_deployed(plane, admin, OPERATOR_NAMESPACE, docs, tmp,
                                    identity=f"quickstart-{number}", webhook_port=webhook_port)
    return popen, log


def registered(api: Kube, popen: subprocess.Popen[bytes], log: Path, identity: str) -> bool:
    """The reconciler `identity` holds the leader Lease and a webhook registration holds a CA
    (until then KaiwuCluster writes are refused)."""
    assert popen.poll() is None, log.read_text(errors="replace")[-3000:]
    lease = api.get(kk.LEASE, OPERATOR_NAMESPACE, install.NAME)
    if (lease or {}).get("spec", {}).get("holderIdentity") != identity:
        return False
    registrations, _ = api.list_objects(kk.VALIDATING_WEBHOOK)
    return any(webhook.get("clientConfig", {}).get("caBundle")
               for item in registrations for webhook in item.get("webhooks", []))
