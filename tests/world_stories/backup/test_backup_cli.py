"""Story: an operator backs a cluster up from the command line before a risky change, checks
it, and restores a copy from it, as `kaiwu backup` and `kaiwu restore` (and `kubectl kaiwu`) run:
each command a process of its own with the admin kubeconfig, against the real API server; the
reconciler runs the backup and the restore (simulated kubelets and KaiwuDB, a temporary
directory standing in for the ReadWriteMany claim). Timings are printed (pytest -s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client as k8s

from tests.support.backup import load_shop
from tests.support.harness import Reconciler, condition, wait_for
from tests.support.lifecycle import NAME, bring_up, report, small_cluster
from tests.world.controlplane import REPO_ROOT, ControlPlane
from tests.world.simworld import SimWorld

CLAIM = "shared-dumps"


def kaiwu(plane: ControlPlane, *args: str, timeout_s: float = 120) -> tuple[int, str, str]:
    """`kubectl kaiwu ARGS` as kubectl runs the plugin: its own process, the admin kubeconfig."""
    done = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import kubectl_plugin; "
         "raise SystemExit(kubectl_plugin())", *args, "--kubeconfig",
         str(plane.kubeconfig_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
    return done.returncode, done.stdout, done.stderr


def test_a_backup_made_waited_for_listed_and_restored_from_the_command_line(
        sim_world: SimWorld, reconciler_factory: Callable[..., Reconciler],
        kube: k8s.ApiClient, namespace: str, control_plane: ControlPlane,
        tmp_path: Path) -> None:
    (tmp_path / CLAIM).mkdir()
    factory = lambda: reconciler_factory(  # noqa: E731
        backup_volumes_dir=str(tmp_path), backup_poll_s=0.2,
        restore_http_address="127.0.0.1:0", restore_advertise_host="127.0.0.1")
    reconciler, _, took = bring_up(factory, kube, namespace, small_cluster(namespace))
    report("apply -> Ready (3 nodes)", took)
    load_shop(sim_world, namespace)
    before = sim_world.kwdb.contents((namespace, NAME), sim_world.clock.now())

    # No target named and none to reuse: refused, naming the flags; nothing is made.
    code, out, err = kaiwu(control_plane, "backup", "create", NAME, "-n", namespace)
    assert code == 2 and out == ""
    assert "give --volume-claim CLAIM, or --s3-bucket BUCKET --s3-secret SECRET" in err

    started = time.monotonic()
    code, out, err = kaiwu(control_plane, "backup", "create", NAME, "-n", namespace,
                           "--volume-claim", CLAIM, "--name", "before-upgrade", "--wait",
                           "--timeout", "90")
    report("kaiwu backup create --wait -> completed", time.monotonic() - started)
    assert (code, err) == (0, ""), out + err
    assert out.splitlines()[0] == (f"kaiwubackup/before-upgrade created in {namespace} "
                                   f"(volume {CLAIM})")
    assert "kaiwubackup/before-upgrade: completed" in out
    assert (f"Restore:     kaiwu restore --from before-upgrade --into NEW -n {namespace} "
            "--apply") in out

    # The next one goes where the last one went, with no target named.
    code, out, err = kaiwu(control_plane, "backup", "create", NAME, "-n", namespace,
                           "--name", "again")
    assert (code, err) == (0, ""), out + err
    assert f"(volume {CLAIM})" in out

    code, out, err = kaiwu(control_plane, "backup", "list", NAME, "-n", namespace, "-o",
                           "json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == {"before-upgrade", "again"}
    assert rows["before-upgrade"]["phase"] == "completed"
    assert rows["before-upgrade"]["target"] == f"volume {CLAIM}"
    code, out, _ = kaiwu(control_plane, "backup", "describe", "before-upgrade", "-n",
                         namespace)
    assert code == 0 and "Phase:       completed" in out

    # kaiwu status shows the backups beside the cluster.
    def second_ended() -> bool:
        code, out, err = kaiwu(control_plane, "backup", "list", "-n", namespace, "-o", "json")
        assert code == 0, err
        print(repr(out[:300]))
        ended = {r["name"]: r["phase"] for r in json.loads(out)}
        return ended.get("again") in ("completed", "failed")
    wait_for("the second backup to end", second_ended, 90, 0.5)
    code, out, err = kaiwu(control_plane, "status", NAME, "-n", namespace, "-o", "json")
    assert err == "", err
    [shown] = json.loads(out)["clusters"]
    assert shown["backups"]["lastSuccess"]["name"] in ("before-upgrade", "again")

    # A copy restored from the first backup: the spec written first, then created.
    spec_file = tmp_path / "copy.yaml"
    code, out, err = kaiwu(control_plane, "restore", "--from", "before-upgrade", "--into",
                           "copy", "-n", namespace, "-f", str(spec_file))
    assert (code, err) == (0, ""), out + err
    written = yaml.safe_load(spec_file.read_text())
    assert written["spec"]["bootstrap"] == {"fromBackup": {"name": "before-upgrade"}}
    validated = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; raise SystemExit(main())",
         "validate", str(spec_file)], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=60)
    assert validated.returncode == 0, validated.stdout + validated.stderr

    started = time.monotonic()
    code, out, err = kaiwu(control_plane, "restore", "--from", "before-upgrade", "--into",
                           "copy", "-n", namespace, "--apply")
    assert (code, err) == (0, ""), out + err
    wait_for("the restored copy to be Ready", lambda: condition(
        reconciler.cluster("copy"), "Ready").get("status") == "True", 150, 0.2)
    report("kaiwu restore --apply -> copy Ready", time.monotonic() - started)
    after = sim_world.kwdb.contents((namespace, "copy"), sim_world.clock.now())
    assert after["databases"] == before["databases"]

    # Restoring over a cluster that exists is refused before anything is written.
    code, _, err = kaiwu(control_plane, "restore", "--from", "before-upgrade", "--into", "copy",
                         "-n", namespace, "--apply")
    assert code == 2 and "KaiwuCluster copy exists" in err
