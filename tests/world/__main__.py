"""Start the test world by hand: ``python -m tests.world up`` (for a developer or a demo).

It starts the real control plane (tests/world/controlplane.py) and the simulated nodes
(tests/world/simworld.py: kubelet, storage, KaiwuDB), writes an admin kubeconfig to
``<repo>/.testworld/kubeconfig``, prints how to use it and runs until Ctrl-C (or SIGTERM), then
stops every process it started. The nodes are four simulated ones (kw-node-1..4, with storage
and KaiwuDB), so a KaiwuCluster applied there comes up as in the tests once a reconciler runs.
For the guided tour (operator installed, a cluster brought up, failures) see
``python -m tests.world.demo`` (``make demo``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import yaml

from tests.world.build import locate_kubectl
from tests.world.controlplane import REPO_ROOT, ControlPlane, ControlPlaneError
from tests.world.kube_rest import KubeAccess
from tests.world.simworld import SimWorld

DEFAULT_KUBECONFIG = REPO_ROOT / ".testworld" / "kubeconfig"


def _write_kubeconfig(plane: ControlPlane, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The directory ignores itself, so nothing in it is ever committed by accident.
    (path.parent / ".gitignore").write_text("*\n")
    path.write_text(yaml.safe_dump(plane.kubeconfig()))
    path.chmod(0o600)


def _report(plane: ControlPlane, kubeconfig: Path, nodes: Sequence[str]) -> str:
    mib = sum(plane.rss_bytes().values()) / 2**20
    lines = [
        f"test world up in {plane.startup_seconds:.1f} s ({mib:.0f} MiB resident)",
        f"  apiserver:   {plane.server}",
        f"  kubeconfig:  {kubeconfig}",
        f"  admin token: {plane.admin_token}",
        f"  CA bundle:   {plane.ca_path}",
        f"  audit log:   {plane.audit_log_path}",
        f"  logs:        {plane.log_dir}",
        f"  processes:   {', '.join(f'{n}={p}' for n, p in plane.pids().items())}",
        f"  nodes:       {', '.join(nodes)} (simulated: kubelet, storage, KaiwuDB)",
        "",
        "Use it:",
        f"  export KUBECONFIG={kubeconfig}",
        f"  {locate_kubectl() or 'kubectl'} get kaiwuclusters -A   # Debian's kubectl 1.20",
        "  .venv/bin/python -c 'import kubernetes as k; k.config.load_kube_config(); "
        "print(k.client.CoreV1Api().list_namespace().items[0].metadata.name)'",
        "",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


def _up(args: argparse.Namespace) -> int:
    try:
        plane = ControlPlane()
        plane.start()
    except ControlPlaneError as err:
        print(f"cannot start the test world: {err}", file=sys.stderr)
        return 1

    def _terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # Both explicitly: a shell script that starts us in the background ignores SIGINT for us.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    world = SimWorld(KubeAccess(plane.server, str(plane.ca_path), plane.admin_token))
    try:
        world.start()
        _write_kubeconfig(plane, args.kubeconfig)
        print(_report(plane, args.kubeconfig, world.kubelet.node_names), flush=True)
        while not plane.exited():
            time.sleep(1)
        print(f"{', '.join(plane.exited())} exited on its own; logs: {plane.log_dir}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping the test world", flush=True)
        return 0
    finally:
        world.stop()
        plane.stop(keep_logs=True)
        # A kubeconfig for a stopped apiserver only misleads whoever finds it next.
        args.kubeconfig.unlink(missing_ok=True)
        print(f"logs kept in {plane.log_dir}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.world", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the control plane and run until Ctrl-C")
    up.add_argument("--kubeconfig", type=Path, default=DEFAULT_KUBECONFIG,
                    help=f"where to write the admin kubeconfig (default: {DEFAULT_KUBECONFIG})")
    args = parser.parse_args(argv)
    if args.command == "up":
        return _up(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
