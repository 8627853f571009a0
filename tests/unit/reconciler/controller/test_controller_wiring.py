"""What a replica's settings become in the controller's steps (reconciler.controller.controller):
each step gets the cluster API, the caches and the metrics it is given, and the timings and
places the operator set (--lifecycle-poll-s, --backup-volumes-dir, --restore-http-address...);
the steps run in the documented order; what they remember of a cluster is dropped when it goes.
How those settings then act on a cluster: the lifecycle, backup and drift stories.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

from reconciler.controller import controller as controller_module
from reconciler.controller.controller import Controller
from reconciler.drift.backoff import BackoffPolicy
from reconciler.kaiwudb.backup.file_server import default_advertise_host
from reconciler.kaiwudb.backup.step import BackupSettings
from reconciler.kaiwudb.failover import Failover
from reconciler.kaiwudb.tools import LifecycleSettings
from reconciler.keys import ClusterKey, ObjectRef
from reconciler.metrics import Metrics
from reconciler.model import KaiwuStatus
from reconciler.settings import Settings
from tests.support.fake_api import FakeApi, FakeView

KEY = ClusterKey("db", "dev")
ROOT = Path(__file__).resolve().parents[4]

SETTINGS = Settings(
    identity="replica-7", field_manager="kaiwu-test",
    fight_threshold=7, fight_window_s=90.0, drift_backoff_base_s=2.0, drift_backoff_max_s=200.0,
    lifecycle_poll_s=2.5, node_probe_every_s=77.0, exec_timeout_s=12.0,
    backup_poll_s=3.5, backup_volumes_dir="/vols", backup_remove_node_files=False,
    restore_http_address="127.0.0.1:18091", restore_advertise_host="10.1.2.3")


def clock() -> float:
    return 1_800_000_000.0


def controller(settings: Settings = SETTINGS) -> tuple[Controller, Any, Any, Metrics]:
    kube = FakeApi()
    view, metrics = FakeView(kube), Metrics()
    return Controller(cast(Any, kube), cast(Any, view), settings, metrics, clock), kube, view, \
        metrics


def documented_steps() -> dict[str, list[str]]:
    """The step lists the docs give: controller.py's docstring (one step a line, two-space
    indent) and docs/architecture.md's pipeline (`  -> name`, `a / b / c` on one line)."""
    docstring = controller_module.__doc__ or ""
    in_code = re.findall(r"^  ([a-z]+)\s{2,}\S", docstring, flags=re.MULTILINE)
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    pipeline = [name for line in re.findall(r"^  -> (\S+(?: / \S+)*)", architecture,
                                            flags=re.MULTILINE)
                for name in line.split(" / ")]
    return {"reconciler/controller/controller.py": in_code, "docs/architecture.md": pipeline}


def test_the_passes_steps_run_in_the_documented_order() -> None:
    made, *_ = controller()
    steps = [step.name for step in made.steps]
    assert steps == [
        "spec", "certificates", "lifecycle", "render", "observe", "repair", "recreate",
        "prune", "volumes", "failover", "restore", "backup", "report"]
    for where, documented in documented_steps().items():
        assert documented == steps, f"{where} lists the steps as {documented}"


def test_every_step_is_given_the_one_context_of_the_settings() -> None:
    made, kube, view, metrics = controller()
    ctx = made.ctx
    assert (ctx.kube, ctx.view, ctx.settings, ctx.metrics, ctx.clock) == (
        kube, view, SETTINGS, metrics, clock)
    assert ctx.events.kube is kube and ctx.events.metrics is metrics
    assert ctx.events.instance == "replica-7", "Events name the replica"
    assert ctx.events.clock is clock and made.clock is clock
    assert [step.name for step in made.steps if step.ctx is not ctx] == []
    lifecycle_parts = [made.lifecycle.nodes, made.lifecycle.upgrades, made.lifecycle.rollouts,
                       made.lifecycle.scaling, made.lifecycle.strays]
    assert all(part.ctx is ctx for part in lifecycle_parts)


def test_the_controllers_memories_follow_the_settings() -> None:
    made, kube, view, _ = controller()
    memory = made.memory
    assert memory.repairer.kube is kube
    assert memory.dry_runs.repairer is memory.repairer
    assert (memory.served.kube, memory.served.view, memory.served.settings) == (
        kube, view, SETTINGS)
    assert memory.fights.policy == BackoffPolicy(threshold=7, window_s=90.0, base_s=2.0,
                                                 max_s=200.0)
    assert memory.fights.clock is clock
    assert memory.drift.field_manager == "kaiwu-test"


def test_the_kaiwudb_steps_get_their_timings_and_places_from_the_settings() -> None:
    made, kube, view, metrics = controller()
    assert made.lifecycle.settings == LifecycleSettings(poll_s=2.5, probe_every_s=77.0,
                                                        exec_timeout_s=12.0)
    assert made.lifecycle.nodes.settings == made.lifecycle.settings
    backups = made.backups
    assert (backups.kube, backups.view, backups.metrics) == (kube, view, metrics)
    assert backups.settings == BackupSettings(poll_s=3.5, volumes_dir="/vols",
                                              remove_node_files=False)
    assert backups.admin == made.ctx.admin, "backups run kwbase as every step does"
    restore = made.restore
    assert restore.backups is backups and restore.poll_s == 3.5
    assert restore.server._bind == ("127.0.0.1", 18091)
    assert restore.server.advertise_host == "10.1.2.3"
    [failover] = [step for step in made.steps if isinstance(step, Failover)]
    assert (failover.kube, failover.view, failover.metrics, failover.lifecycle) == (
        kube, view, metrics, made.lifecycle)
    assert made.steps.count(made.restore) == made.steps.count(made.backups) == 1
    assert made.steps.count(made.lifecycle) == 1


def test_without_an_advertised_host_the_restore_server_names_this_host() -> None:
    made, *_ = controller(Settings())
    assert made.restore.server.advertise_host == default_advertise_host()


def test_what_the_steps_remember_of_a_cluster_is_dropped_when_it_goes() -> None:
    made, *_ = controller()
    other = ClusterKey("db", "other")
    sts = ObjectRef("apps/v1", "StatefulSet", "db", "x")
    for key in (KEY, other):
        made.lifecycle.memory._last[(key.namespace, key.name)] = ("1", KaiwuStatus(), None)
        made.restore._written[(key.namespace, key.name)] = {"phase": "written"}
        made.memory.marks.wrote(key, "x", None)
        made.memory.fights.record_repair(key, sts, "drift")
    made.reconcile(KEY)  # not in the caches: deleted
    assert list(made.lifecycle.memory._last) == [("db", "other")]
    assert list(made.restore._written) == [("db", "other")]
    assert [key for key, _ in made.memory.marks._written] == [other]
    assert [key for key, _ in made.memory.fights._states] == [other]
