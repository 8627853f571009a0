"""The kwbase admin adapter against the simulated KaiwuDB's model (no Kubernetes in between).

Stories: the reconciler initialises a fresh cluster exactly once however often it asks; reads
node status in every column set and maps node ids to pods; waits for replication to heal;
decommissions a node and watches its replicas drain away; drains a node; and every failure
(uninitialised cluster, unknown node, node out of reach, wrong security mode, a container that is
not running, a broken exec connection, a command that never returns) arrives as a typed error
that says what ran where. The pods run the exact command line the renderer writes. kwbase's
output is read strictly: the parser stories (node status, decommission, snapshots, jobs, status
times) are also those of reconciler.kaiwudb.kwbase.answers, which reads every table they parse.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client.exceptions import ApiException

from reconciler.kaiwudb.backup.export import EXTERN_DIR  # the rendered --store's extern dir
from reconciler.kaiwudb.kwbase.admin import InitOutcome, KwbaseAdmin, KwbaseSettings
from reconciler.kaiwudb.kwbase.errors import (
    CommandFailed,
    DecommissionRefused,
    ExecFailed,
    KwbaseError,
    NodeUnreachable,
    NotInitialized,
    NotOneStatement,
    UnexpectedOutput,
    UnknownNode,
    error_text,
)
from reconciler.kaiwudb.kwbase.jobs import BACKUP_RUN_MARK
from reconciler.kaiwudb.kwbase.nodes import (
    DecommissionStatus,
    NodeStatus,
    parse_decommission,
    parse_node_status,
)
from reconciler.kaiwudb.kwbase.replication import (
    StatusTimes,
    parse_replica_sets,
    parse_snapshots,
    parse_status_times,
    parse_store_nodes,
    ranges_without_quorum,
    replication_health_of,
    stale_records,
)
from reconciler.kaiwudb.kwbase.sql import statement_problem
from renderer.render import build_objects, read_live
from renderer.settings import RenderSettings
from tests.support.sim_exec import SimExec
from tests.support.waiting import eventually
from tests.world.kwdb.world import KwdbWorld
from tests.world.pod_runtime import rendered_argv

NAMESPACE, NAME = "shop", "orders"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # KwdbSettings.epoch_unix_s: simulated time 0


def rendered_command(replicas: int, tls: bool, mode: str = "multi-replica") -> list[str]:
    spec = {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"version": "3.2.1", "replicas": replicas, "tls": {"enabled": tls},
                     "startMode": mode}}
    sts = next(o for o in build_objects(read_live(spec), RenderSettings())
               if o["kind"] == "StatefulSet")
    command: list[str] = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    return command


@dataclass
class Deployment:
    world: KwdbWorld
    runner: SimExec
    admin: KwbaseAdmin

    def at(self, seconds: float) -> None:
        self.runner.now = seconds


def start_pods(replicas: int = 3, tls: bool = True,
               localities: dict[int, str] | None = None,
               mode: str = "multi-replica") -> Deployment:
    """Pods of the rendered StatefulSet running kwbase, waiting for init (as the kubelet starts
    them: $(POD_NAME) expanded, the start-flags ConfigMap saying "false", one store per
    claim)."""
    world = KwdbWorld()
    command = rendered_command(replicas, tls, mode)
    for ordinal in range(replicas):
        pod = f"{NAME}-{ordinal}"
        argv = rendered_argv(command, pod)
        if localities and ordinal in localities:
            argv.append(f"--locality={localities[ordinal]}")
        started = world.start_process((NAMESPACE, NAME), pod, f"claim-uid-{ordinal}", argv, 0.0,
                                      image="kwdb/kwdb:3.2.1")
        assert started.ok, started.stderr
    runner = SimExec(world)
    return Deployment(world, runner, KwbaseAdmin(runner, NAMESPACE, NAME, secure=tls))


def initialised(replicas: int, at: float) -> Deployment:
    """`replicas` pods of the rendered StatefulSet, `kwbase init` run at t=1 s, the clock at
    `at`."""
    deployment = start_pods(replicas=replicas)
    deployment.at(1.0)
    deployment.admin.init("orders-0")
    deployment.at(at)
    return deployment


@pytest.fixture
def cluster() -> Iterator[Deployment]:
    """A three-node secure cluster, initialised and fully replicated at t=30 s."""
    deployment = start_pods()
    deployment.at(1.0)
    assert deployment.admin.init("orders-0") is InitOutcome.INITIALIZED
    deployment.at(30.0)
    yield deployment


def test_commands_are_plain_argv_with_the_connection_flags() -> None:
    secure = KwbaseAdmin(SimExec(KwdbWorld()), NAMESPACE, NAME, secure=True)
    assert secure.argv("orders-1", "node", "status") == [
        "/kaiwudb/bin/kwbase", "node", "status", "--host=localhost:26257",
        "--certs-dir=/kaiwudb/certs"]
    dns = KwbaseAdmin(SimExec(KwdbWorld()), NAMESPACE, NAME, secure=False,
                      settings=KwbaseSettings(connect_via="pod-dns", cluster_domain="corp"))
    assert dns.argv("orders-1", "init") == [
        "/kaiwudb/bin/kwbase", "init", "--host=orders-1.orders.shop.svc.corp:26257",
        "--insecure"]


def test_init_runs_once_and_every_later_init_is_success() -> None:
    deployment = start_pods()
    deployment.at(1.0)

    assert deployment.admin.init("orders-0") is InitOutcome.INITIALIZED
    assert deployment.admin.init("orders-0") is InitOutcome.ALREADY_INITIALIZED
    deployment.at(5.0)
    assert deployment.admin.init("orders-2") is InitOutcome.ALREADY_INITIALIZED
    assert deployment.world.replication((NAMESPACE, NAME), 5.0).initialized


def test_before_init_status_times_out_and_node_commands_say_not_initialized() -> None:
    deployment = start_pods()
    deployment.at(1.0)

    # A SQL client cannot tell a node waiting for init from one that hangs.
    with pytest.raises(NodeUnreachable) as unreachable:
        deployment.admin.node_status("orders-0")
    assert "i/o timeout" in str(unreachable.value)
    with pytest.raises(NotInitialized) as waiting:
        deployment.admin.decommission("orders-0", [3])
    assert "node waiting for init" in str(waiting.value)
    assert waiting.value.exit_code == 1
    with pytest.raises(NotInitialized):
        deployment.admin.drain("orders-1")


def test_node_status_maps_every_node_id_to_its_pod(cluster: Deployment) -> None:
    nodes = cluster.admin.node_status("orders-1")

    assert [(n.id, n.pod_name) for n in nodes] == [
        (1, "orders-0"), (2, "orders-1"), (3, "orders-2")]
    first = nodes[0]
    assert first.address == "orders-0.orders.shop.svc.cluster.local:26257"
    assert first.build == "V3.2.1"
    assert first.start_mode == "start"
    # Its start counts from `init` at t=1 s, when it got its node id (server/node.go:418),
    # not from the launch of its process at t=0.
    assert first.started_at == EPOCH + timedelta(seconds=1)
    assert first.updated_at is not None and first.updated_at > EPOCH
    assert all(n.healthy for n in nodes)
    # Without the flags, their column groups are absent, not zero.
    assert first.ranges is None and first.is_decommissioning is None
    assert first.live_bytes is None


def test_ranges_decommission_and_all_add_their_columns(cluster: Deployment) -> None:
    with_ranges = cluster.admin.node_status("orders-0", ranges=True)
    assert all(n.ranges is not None and n.ranges_unavailable == 0 for n in with_ranges)
    assert all(n.is_draining is None for n in with_ranges)

    with_decommission = cluster.admin.node_status("orders-0", decommission=True)
    assert [n.is_decommissioning for n in with_decommission] == [False, False, False]
    assert all(n.gossiped_replicas and n.gossiped_replicas > 0 for n in with_decommission)
    assert all(n.ranges is None for n in with_decommission)

    everything = cluster.admin.node_status("orders-0", all_columns=True)
    assert all(n.live_bytes is not None and n.is_draining is False for n in everything)
    assert [n.id for n in cluster.admin.node_status("orders-0", node_id=2)] == [2]


def test_a_locality_with_commas_survives_csv_quoting() -> None:
    deployment = start_pods(localities={1: "region=east,zone=b"})
    deployment.at(1.0)
    deployment.admin.init("orders-0")
    deployment.at(5.0)

    nodes = {n.pod_name: n for n in deployment.admin.node_status("orders-0")}
    assert nodes["orders-1"].locality == "region=east,zone=b"


def test_replication_heals_after_init() -> None:
    deployment = start_pods()
    deployment.at(1.0)
    deployment.admin.init("orders-0")
    deployment.world.tune((NAMESPACE, NAME), 1.0, snapshot_rate_per_s=2.0)  # 40 s to heal
    deployment.at(2.0)

    # Every node's first record was written at start, before it computed anything: zeros,
    # which say nothing yet (server/node.go:821-827).
    early = deployment.admin.replication_health("orders-2")
    assert (early.unavailable, early.underreplicated) == (0, 0)
    assert not early.healthy and "not known yet" in early.describe()
    assert "less than 20 s after" in early.describe()
    assert any("kv_node_status" in arg for arg in deployment.runner.calls[-3][1])
    assert "--ranges" in deployment.runner.calls[-1][1], "the times read first, then the sums"

    # Ten seconds on, the records carry the first computation: the ranges still healing.
    deployment.at(21.0)
    healing = deployment.admin.replication_health("orders-2")
    assert healing.underreplicated and not healing.healthy
    assert "under-replicated" in healing.describe()

    deployment.at(60.0)
    healed = deployment.admin.replication_health("orders-2")
    assert healed.healthy, healed.describe()


def test_every_cluster_runs_the_ts_txn_job_for_ever_and_it_never_holds_a_scale_in() -> None:
    """KWDB 3.2.1 starts a `TS TXN` job on every server start that never ends
    (kwbase/pkg/sql/handle_ts_txn.go:36-56): a gate on every running job would never open."""
    deployment = start_pods()
    deployment.at(1.0)
    deployment.admin.init("orders-0")
    deployment.at(60.0)
    jobs = deployment.admin.running_jobs("orders-0")
    assert jobs.by_type == (("TS TXN", 1),)
    assert jobs.describe_conflicting() == ""
    deployment.world.set_running_jobs((NAMESPACE, NAME), 2, 60.0, job_type="IMPORT")
    deployment.world.set_running_jobs((NAMESPACE, NAME), 1, 60.0, job_type="CHANGEFEED")
    jobs = deployment.admin.running_jobs("orders-0")
    assert jobs.by_type == (("CHANGEFEED", 1), ("IMPORT", 2), ("TS TXN", 1))
    assert jobs.describe_conflicting() == "jobs running (SHOW JOBS): 2 IMPORT"


def test_an_export_whose_node_restarted_runs_for_ever_and_only_a_backups_holds_no_scale_in(
        cluster: Deployment) -> None:
    """KWDB gives an EXPORT's job row no lease (sql/conn_executor_exec.go:719-723): when the
    gateway dies with the session, nothing ever ends the row (jobs/registry.go:1321-1326). The
    reconciler's own backup EXPORTs are left out of the scale-in gate (it waits for running
    backups itself); anybody else's still counts, as it must while it really runs."""
    key = (NAMESPACE, NAME)
    cluster.world.load(key, 30.0, database="shop", table="orders", columns=[("id", "INT8")],
                       rows=[("1",), ("2",)])
    cluster.world.set_bulk_rate(key, 30.0, 0.01)  # 200 s for two rows
    answers: list[BaseException] = []

    def export(destination: str) -> None:
        try:
            cluster.admin.sql("orders-1", f'EXPORT INTO CSV "nodelocal://2/{destination}" '
                              "FROM SELECT * FROM shop.public.orders", bulk=True)
        except KwbaseError as err:
            answers.append(err)

    clients = [threading.Thread(target=export, args=(d,))
               for d in (f"kaiwu-backup-{'0' * 8}/d0.t0", "nightly")]
    for client in clients:
        client.start()
    eventually(lambda: len([j for j in cluster.world.jobs(key, 30.0)
                            if j.job_type == "EXPORT"]) == 2, 10.0, "both EXPORTs started")
    cluster.at(40.0)
    cluster.world.stop_process(key, "orders-1", 40.0)  # the sessions die with the node
    cluster.at(40.0 + 14400)  # the clients' time-outs pass: no answer
    for client in clients:
        client.join(timeout=30)
    assert [type(a).__name__ for a in answers] == ["ExecTimedOut", "ExecTimedOut"]

    rows = [j for j in cluster.world.jobs(key, cluster.runner.now) if j.job_type == "EXPORT"]
    assert [j.status for j in rows] == ["running", "running"], "never ended, never adopted"
    jobs = cluster.admin.running_jobs("orders-0")
    assert jobs.describe_conflicting() == "jobs running (SHOW JOBS): 1 EXPORT"
    assert BACKUP_RUN_MARK in rows[0].statement


def test_a_decommissioned_node_drains_its_replicas_and_can_be_recommissioned() -> None:
    deployment = initialised(4, 30.0)
    admin = deployment.admin

    (marked,) = admin.decommission("orders-0", [4])
    assert marked.id == 4 and marked.is_decommissioning and marked.replicas > 0
    assert not marked.drained_of_replicas

    deployment.at(90.0)
    (done,) = admin.decommission("orders-0", [4])  # asking again is harmless
    assert done.drained_of_replicas
    node4 = admin.node_status("orders-0", node_id=4, decommission=True)[0]
    assert node4.is_decommissioning and node4.gossiped_replicas == 0

    (back,) = admin.recommission("orders-0", [4])
    assert back == DecommissionStatus(id=4, is_live=True, replicas=0, is_decommissioning=False,
                                      is_draining=False)


def test_a_node_that_died_while_ranges_were_under_replicated_stops_counting_once_decommissioned(
        ) -> None:
    """Node 1 dies while replication is still healing: its persisted status, frozen then,
    counts those ranges as under-replicated for ever. Once it is decommissioned (its store was
    lost and replaced, say) KaiwuDB no longer lists it, the others re-replicate its ranges, and
    replication is healthy again: a scale-in waiting for health does not wait for ever."""
    deployment = initialised(4, 2.0)
    world, admin = deployment.world, deployment.admin
    world.tune((NAMESPACE, NAME), 2.0, snapshot_rate_per_s=5.0)
    # Its record of t=20 carries the metrics it computed at t=10 (node.go:763-846): still
    # healing then (80 moves at 5 a second), healed by t=20. It dies right after writing it,
    # leaving every range two replicas of three: a quorum.
    world.stop_process((NAMESPACE, NAME), "orders-0", 21.0, graceful=False)

    deployment.at(120.0)
    assert not admin.replication_health("orders-1").healthy, \
        "a dead node's stale status still counts: better to wait"
    admin.decommission("orders-1", [1])
    deployment.at(400.0)
    assert admin.replication_health("orders-1").healthy
    (gone,) = admin.node_status("orders-1", node_id=1, ranges=True, decommission=True)
    assert gone.ranges_underreplicated, "its frozen status still says so; it is not listed"


def restart(deployment: Deployment, pod: str, stopped: float, started: float) -> None:
    """Stop `pod`'s kwbase at `stopped` and start it again at `started` (same store)."""
    key = (NAMESPACE, NAME)
    deployment.world.stop_process(key, pod, stopped, graceful=True)
    ordinal = int(pod.rsplit("-", 1)[1])
    back = deployment.world.start_process(
        key, pod, f"claim-uid-{ordinal}", rendered_argv(rendered_command(3, True), pod), started,
        image="kwdb/kwdb:3.2.1")
    assert back.ok, back.stderr


def test_a_node_back_after_ten_seconds_is_not_healthy_until_its_raft_snapshots_are_applied(
        cluster: Deployment) -> None:
    """A follower gone 10 s or more is no longer recently active, and busy ranges truncate
    their raft logs past it (kv/kvserver/raft_log_queue.go:442-478): back, each of its replicas
    needs a raft snapshot before it can acknowledge a write. KWDB's range metrics count it as
    up to date all along (calcRangeCounter reads liveness only); the raft snapshot gauges do
    not. A gate that trusted the range metrics would restart the next node into lost quorum."""
    world, admin = cluster.world, cluster.admin
    world.tune((NAMESPACE, NAME), 30.0, recovery_snapshot_rate_per_s=0.5)  # big ranges
    restart(cluster, "orders-2", 30.0, 50.0)

    cluster.at(75.0)  # node 3's records are 20 s newer than its start: the metrics are current
    health = admin.replication_health("orders-0")
    assert (health.unavailable, health.underreplicated, health.stale) == (0, 0, "")
    assert health.catching_up and not health.healthy
    assert "raft snapshot" in health.describe()
    assert any("queue.raftsnapshot.pending" in arg for arg in cluster.runner.calls[-2][1])

    # What the gate protects: node 2 stopping now would leave ranges without a quorum of
    # replicas able to acknowledge writes.
    world.stop_process((NAMESPACE, NAME), "orders-1", 75.0, graceful=True)
    assert world.replication((NAMESPACE, NAME), 75.5).unavailable > 0
    restart(cluster, "orders-1", 75.5, 76.0)  # back at once: its own log was kept

    cluster.at(75.0 + 2 * 40 / 0.5 + 20)
    healed = admin.replication_health("orders-0")
    assert healed.healthy, healed.describe()


def test_a_node_back_within_ten_seconds_catches_up_from_the_raft_log(
        cluster: Deployment) -> None:
    """Still recently active, the follower's log position is protected
    (raft_log_queue.go:463-470): no snapshot is needed."""
    cluster.world.tune((NAMESPACE, NAME), 30.0, recovery_snapshot_rate_per_s=0.5)
    restart(cluster, "orders-2", 30.0, 35.0)

    cluster.at(61.0)  # every record written 20 s after the restart at least
    health = cluster.admin.replication_health("orders-0")
    assert health.healthy, health.describe()
    assert health.catching_up == 0


def test_a_dead_nodes_gossiped_count_expires_but_the_decommission_count_does_not() -> None:
    deployment = initialised(4, 30.0)
    world, admin = deployment.world, deployment.admin
    world.tune((NAMESPACE, NAME), 30.0, snapshot_rate_per_s=0.01)  # a drain of big ranges
    (marked,) = admin.decommission("orders-0", [4])
    assert marked.replicas > 0
    world.stop_process((NAMESPACE, NAME), "orders-3", 30.0, graceful=False)

    deployment.at(30.0 + world.settings.store_gossip_ttl_s + 1)
    (gossiped,) = admin.node_status("orders-0", node_id=4, decommission=True)
    assert not gossiped.is_live and gossiped.gossiped_replicas == 0
    (exact,) = admin.decommission("orders-0", [4])
    assert exact.replicas > 0 and not exact.drained_of_replicas, \
        "the meta scan still counts the replicas descriptors list on node 4"


def test_a_single_replica_cluster_refuses_decommission_for_good() -> None:
    deployment = start_pods(mode="single-replica")
    deployment.at(1.0)
    deployment.admin.init("orders-0")
    deployment.at(5.0)
    for verb in (deployment.admin.decommission, deployment.admin.recommission):
        with pytest.raises(DecommissionRefused) as refused:
            verb("orders-0", [3])
        assert "node cannot be decommissioned in mpp mode" in str(refused.value)
        assert not isinstance(refused.value, (NodeUnreachable, UnknownNode))


def test_a_drained_node_reports_draining(cluster: Deployment) -> None:
    cluster.admin.drain("orders-2")

    status = {n.pod_name: n for n in cluster.admin.node_status("orders-0", decommission=True)}
    assert status["orders-2"].is_draining
    assert not status["orders-0"].is_draining


def test_an_unknown_node_id_is_its_own_error(cluster: Deployment) -> None:
    with pytest.raises(UnknownNode) as status:
        cluster.admin.node_status("orders-0", node_id=9)
    assert "node 9 doesn't exist" in str(status.value)
    with pytest.raises(UnknownNode) as decommission:
        cluster.admin.decommission("orders-0", [9])
    assert "liveness table" in str(decommission.value)
    assert decommission.value.argv[:3] == ("/kaiwudb/bin/kwbase", "node", "decommission")


def test_the_wrong_security_mode_is_a_command_failure_not_an_unreachable_node(
        cluster: Deployment) -> None:
    insecure = KwbaseAdmin(cluster.runner, NAMESPACE, NAME, secure=False)

    with pytest.raises(CommandFailed) as failed:
        insecure.node_status("orders-0")
    assert type(failed.value) is CommandFailed
    assert "secure" in str(failed.value)
    assert "Failed running" not in str(failed.value)


def test_a_node_that_cannot_be_reached_is_unreachable(cluster: Deployment) -> None:
    cluster.world.stop_process((NAMESPACE, NAME), "orders-2", 30.0)

    # From orders-0, orders-2's advertised name no longer answers.
    stopped = KwbaseAdmin(_Redirect(cluster.runner, "orders-0"), NAMESPACE, NAME, secure=True,
                          settings=KwbaseSettings(connect_via="pod-dns"))
    with pytest.raises(NodeUnreachable) as unreachable:
        stopped.node_status("orders-2")
    assert "orders-2.orders.shop.svc.cluster.local" in str(unreachable.value)


@dataclass
class _Redirect:
    """Run every command in one pod, whatever pod the --host names (tests a remote --host)."""

    runner: SimExec
    pod: str

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        return self.runner.exec(namespace, self.pod, container, command, timeout)


def test_a_container_that_is_not_running_cannot_run_commands(cluster: Deployment) -> None:
    cluster.world.stop_process((NAMESPACE, NAME), "orders-1", 30.0)

    with pytest.raises(ExecFailed) as failed:
        cluster.admin.node_status("orders-1")
    assert "could not run in pod shop/orders-1" in str(failed.value)
    assert not isinstance(failed.value, CommandFailed)


def test_an_exec_transport_error_is_exec_failed(cluster: Deployment) -> None:
    with pytest.raises(ExecFailed) as failed:
        cluster.admin.init("orders-7")
    assert "could not exec" in str(failed.value)
    assert "ApiException" in str(failed.value)
    assert isinstance(failed.value.__cause__, ApiException)


def test_init_against_a_node_off_the_network_times_out_as_unreachable() -> None:
    deployment = start_pods()
    deployment.world.set_pod_host_alive((NAMESPACE, NAME), "orders-0", False, 0.5)
    deployment.at(1.0)
    dns = KwbaseAdmin(_Redirect(deployment.runner, "orders-1"), NAMESPACE, NAME, secure=True,
                      settings=KwbaseSettings(connect_via="pod-dns", timeout_s=20))

    with pytest.raises(NodeUnreachable) as unreachable:
        dns.init("orders-0")
    assert "did not accept init within 20 s" in str(unreachable.value)
    assert unreachable.value.exit_code == -1


def test_parsers_refuse_output_they_do_not_understand() -> None:
    with pytest.raises(ValueError, match="missing columns"):
        parse_node_status("id,address\n1,x:26257\n")
    with pytest.raises(ValueError, match="not a boolean"):
        parse_decommission("id,is_live,replicas,is_decommissioning,is_draining\n"
                           "1,yes,0,false,false\n")
    # No rows, or rows without range metrics, are unknown, never healthy.
    for statuses in ((), parse_node_status("id,address,sql_address,build,started_at,"
                                           "updated_at,locality,start_mode,is_available,"
                                           "is_live\n1,x:26257,x:26257,V3.2.1,,,,start,"
                                           "true,true\n")):
        unknown = replication_health_of(statuses, {1: 0})
        assert not unknown.healthy and "unknown" in unknown.describe()
    # A live node whose store reported no snapshot gauges is not known to send none.
    header = "node_id,snapshots_queued,snapshots_applying\n"
    assert parse_snapshots(header + "1,0,0\n2,3,1\n3,NULL,0\n") == {1: 0, 2: 4, 3: None}
    with pytest.raises(ValueError, match="expected columns"):
        parse_snapshots("node_id,pending\n1,0\n")
    with pytest.raises(ValueError, match="negative"):
        parse_snapshots(header + "1,-1,0\n")
    with pytest.raises(ValueError, match="not an integer"):
        parse_snapshots(header + "1,1e99,0\n")


def test_unreadable_output_of_a_successful_command_is_unexpected_output() -> None:
    @dataclass
    class Garbled:
        def exec(self, namespace: str, pod: str, container: str, command: list[str],
                 timeout: float = 60.0) -> tuple[str, str, int]:
            return "id\tstatus\n1\tok\n", "", 0

    admin = KwbaseAdmin(Garbled(), NAMESPACE, NAME, secure=True)
    with pytest.raises(UnexpectedOutput) as unexpected:
        admin.node_status("orders-0")
    assert "unreadable node status output" in str(unexpected.value)


def test_error_text_keeps_the_message_and_drops_the_trailer() -> None:
    stderr = ('warning: something first\nERROR: node 9 doesn\'t exist\n'
              'HINT: check the id\nFailed running "node status"\n')
    assert error_text(stderr) == "ERROR: node 9 doesn't exist HINT: check the id"


def test_exports_are_read_with_their_notices_and_the_files_found_where_the_store_is(
        cluster: Deployment) -> None:
    key = (NAMESPACE, NAME)
    cluster.world.load(key, 30.0, database="shop", table="orders",
                       columns=[("id", "INT8")], rows=[("1",), ("2",)])
    answer = cluster.admin.sql("orders-0", 'EXPORT INTO CSV "nodelocal://1/b/shop" '
                                           "FROM DATABASE shop")
    assert answer.headers == ("filename", "rows", "node_id", "file_num")
    assert [(r["filename"], r["rows"]) for r in answer.rows] == [("meta.sql", "1"),
                                                                  ("TABLE orders", "2")]
    assert answer.notices == ()
    sums = cluster.admin.file_sums("orders-0", f"{EXTERN_DIR}/b")
    assert sorted(sums) == ["shop/meta.sql", "shop/public/orders/meta.sql",
                            "shop/public/orders/n1.0.csv"]
    data = cluster.admin.read_file("orders-0", f"{EXTERN_DIR}/b/shop/public/orders/n1.0.csv")
    assert data == b"1\n2\n"
    cluster.world.fail_export(key, 30.0, "orders")
    noticed = cluster.admin.sql("orders-0", 'EXPORT INTO CSV "nodelocal://1/c" FROM DATABASE shop')
    assert noticed.notices == ("export table shop.public.orders failed: simulated storage error",)
    cluster.admin.remove_dir("orders-0", f"{EXTERN_DIR}/b")
    assert cluster.admin.file_sums("orders-0", f"{EXTERN_DIR}/b") == {}
    with pytest.raises(CommandFailed, match="does not exist"):
        cluster.admin.sql("orders-0", 'EXPORT INTO CSV "nodelocal://1/x" FROM DATABASE nope')


def test_liveness_and_availability_are_read_from_their_own_columns() -> None:
    """KWDB prints is_available false while is_live is true when a node's liveness record
    expired or it upgrades (kwbase/pkg/cli/node.go), and the reverse is possible in between:
    each flag comes from its own column, and healthy needs both."""
    header = ("id,address,sql_address,build,started_at,updated_at,locality,start_mode,"
              "is_available,is_live\n")
    row = ("{id},dev-{i}.dev.db.svc.cluster.local:26257,dev-{i}:26257,V3.2.1,"
           "2027-01-15 08:00:00,2027-01-15 08:01:00,,start,{available},{live}\n")
    text = header + "".join(row.format(id=i + 1, i=i, available=a, live=live_) for i, (a, live_) in
                            enumerate([("true", "true"), ("false", "true"), ("true", "false"),
                                       ("false", "false")]))
    nodes = parse_node_status(text)
    assert [(n.is_available, n.is_live) for n in nodes] == [
        (True, True), (False, True), (True, False), (False, False)]
    assert [n.healthy for n in nodes] == [True, False, False, False]


@dataclass
class Scripted:
    """A pod whose exec answers are given by the test: (stdout, stderr, exit code) in turn."""

    answers: list[tuple[str, str, int]]
    calls: list[list[str]] = field(default_factory=list)

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        self.calls.append(command)
        return self.answers.pop(0)


def test_every_column_of_node_status_all_lands_in_the_field_of_its_name() -> None:
    """`node status --all` prints four column groups (kwbase/pkg/cli/node.go); each count must
    come from its own column, or a byte count would be read as a range count."""
    counts = ("replicas_leaders", "replicas_leaseholders", "ranges", "ranges_unavailable",
              "ranges_underreplicated", "live_bytes", "key_bytes", "value_bytes",
              "intent_bytes", "system_bytes", "gossiped_replicas")
    header = ("id,address,sql_address,build,started_at,updated_at,locality,start_mode,"
              "is_available,is_live," + ",".join(counts) + ",is_decommissioning,is_draining\n")
    row = ("7,orders-6.orders.shop.svc.cluster.local:26257,orders-6:26257,V3.2.1,"
           "2026-01-01 00:00:05.25,2026-01-01 00:10:00+00:00,region=east,start,true,true,"
           + ",".join(str(100 + i) for i in range(len(counts))) + ",true,false\n")

    (node,) = parse_node_status(header + row)

    assert {column: getattr(node, column) for column in counts} == {
        column: 100 + i for i, column in enumerate(counts)}
    assert (node.is_decommissioning, node.is_draining) == (True, False)
    assert node.started_at == datetime(2026, 1, 1, 0, 0, 5, 250000, tzinfo=UTC)
    assert node.updated_at == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    assert (node.locality, node.sql_address, node.pod_name) == (
        "region=east", "orders-6:26257", "orders-6")


def test_a_table_between_blank_lines_and_a_trailing_note_is_read() -> None:
    text = ("\nid,is_live,replicas,is_decommissioning,is_draining\n4,true,12,true,false\n\n"
            "No more data reported on target nodes. Please verify cluster health before "
            "removing the nodes.\n")
    assert parse_decommission(text) == (DecommissionStatus(
        id=4, is_live=True, replicas=12, is_decommissioning=True, is_draining=False),)


def test_a_command_that_never_returns_says_what_it_printed_or_that_it_printed_nothing() -> None:
    silent = KwbaseAdmin(Scripted([("", "", -1)]), NAMESPACE, NAME, secure=True,
                         settings=KwbaseSettings(timeout_s=20))
    with pytest.raises(ExecFailed) as failed:
        silent.drain("orders-0")
    assert str(failed.value).endswith(
        "gave no exit status (its stream was cut, or it ran past 20 s) (no output)")

    talking = KwbaseAdmin(Scripted([("", "W: slow\nERROR: context deadline exceeded\n", -1)]),
                          NAMESPACE, NAME, secure=True)
    with pytest.raises(ExecFailed) as talked:
        talking.drain("orders-0")
    assert str(talked.value).endswith("ran past 60 s) (ERROR: context deadline exceeded)")


def test_a_failed_init_names_the_command_and_the_pod() -> None:
    runner = Scripted([("", "ERROR: problem using security settings: no certificates found\n"
                        'Failed running "init"\n', 1)])
    admin = KwbaseAdmin(runner, NAMESPACE, NAME, secure=True)

    with pytest.raises(CommandFailed) as failed:
        admin.init("orders-0")
    assert failed.value.argv == tuple(runner.calls[0])
    assert failed.value.pod == "orders-0"
    assert "no certificates found" in str(failed.value)


def test_running_jobs_without_their_columns_are_unexpected_output() -> None:
    admin = KwbaseAdmin(Scripted([("count\n3\n", "", 0)]), NAMESPACE, NAME, secure=True)
    with pytest.raises(UnexpectedOutput, match="expected columns job_type, running"):
        admin.running_jobs("orders-0")


def test_file_sums_keep_names_with_double_spaces_and_report_a_failed_find() -> None:
    """sha256sum prints `<digest>  <path>`: the path is everything after the first two
    spaces, even when a table name holds two spaces itself."""
    listing = f"{EXTERN_DIR}/b/shop/public/my  table/n1.0.csv\n"
    sums = f"{'ab' * 32}  {EXTERN_DIR}/b/shop/public/my  table/n1.0.csv\n"
    admin = KwbaseAdmin(Scripted([(listing, "", 0), (sums, "", 0)]), NAMESPACE, NAME,
                        secure=True)
    assert admin.file_sums("orders-0", f"{EXTERN_DIR}/b/") == {
        "shop/public/my  table/n1.0.csv": "ab" * 32}

    denied = KwbaseAdmin(Scripted([("", f"find: '{EXTERN_DIR}/b': Permission denied\n", 1)]),
                         NAMESPACE, NAME, secure=True)
    with pytest.raises(CommandFailed) as failed:
        denied.file_sums("orders-1", f"{EXTERN_DIR}/b")
    assert failed.value.pod == "orders-1"
    assert failed.value.argv == ("find", f"{EXTERN_DIR}/b", "-type", "f")
    assert "Permission denied" in str(failed.value)


@pytest.mark.parametrize(("statement", "why"), [
    ("SELECT * FROM shop.public.t; GRANT admin TO mallory", "would end it and start another"),
    ("SELECT * FROM shop.public.t -- AS OF SYSTEM TIME '1'", "a comment starts"),
    ("SELECT * FROM t /* x */", "a comment starts"),
    ('SELECT * FROM "t', "unterminated"),
    ("SELECT 'a\x00b'", "NUL"),
])
def test_the_adapter_sends_one_statement_or_none(statement: str, why: str) -> None:
    """Whatever builds a statement, the adapter is the last line: text that KWDB would run as
    several statements never leaves the reconciler."""
    runner = Scripted([])
    admin = KwbaseAdmin(runner, NAMESPACE, NAME, secure=True)
    with pytest.raises(NotOneStatement, match=why):
        admin.sql("orders-0", statement)
    assert runner.calls == [], "nothing was exec'd"


def test_quoted_semicolons_and_dashes_are_one_statement() -> None:
    for text in ('SELECT * FROM "shop"."public"."t; GRANT admin TO mallory; --"',
                 "SELECT 'it''s; -- fine'", "SELECT 1;", 'SELECT "a""b"'):
        assert statement_problem(text) == "", text


def test_a_node_down_for_two_hours_loses_its_address_and_is_long_gone() -> None:
    """KWDB forgets a node's descriptor two hours after it last gossiped it (hourly while it
    runs: gossip.go:133-140) and `node status` prints NULL for its address and is_live false
    (cli/node.go:165-179). No pod can be paired with it any more; `long_gone` names it."""
    deployment = initialised(4, 30.0)
    world, admin = deployment.world, deployment.admin
    world.stop_process((NAMESPACE, NAME), "orders-3", 30.0, graceful=False)
    epoch = world.settings.epoch_unix_s

    deployment.at(30.0 + 3600)
    (hour,) = admin.node_status("orders-0", node_id=4)
    assert hour.pod_name == "orders-3" and hour.address_known, "gossiped at its start: 2 h TTL"
    assert not hour.long_gone(epoch + 30.0 + 3600)

    deployment.at(30.0 + 7201)
    (gone,) = admin.node_status("orders-0", node_id=4, decommission=True)
    assert (gone.address, gone.pod_name, gone.build, gone.is_live) == ("NULL", None, "NULL",
                                                                       False)
    assert gone.started_at is None and gone.updated_at is not None
    assert gone.long_gone(epoch + 30.0 + 7201)
    assert not gone.long_gone(epoch + 30.0 + 7201, after_s=8000), "liveness gossiped since"
    live = admin.node_status("orders-0", node_id=1)[0]
    assert live.address_known and not live.long_gone(epoch + 30.0 + 7201)


def at(seconds: float) -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def node(node_id: int, live: bool = True) -> NodeStatus:
    return NodeStatus(node_id, f"orders-{node_id - 1}.orders:26257", "", "V3.2.1", None, None,
                      "", "start", live, live, ranges_unavailable=0, ranges_underreplicated=0)


def test_range_metrics_count_only_once_every_live_record_was_written_20_s_after_the_last_start(
        ) -> None:
    """Node 2 restarted at t=100. Its first records claim zeros (nothing computed yet), and the
    others' carry metrics computed before it came back: KWDB computes and writes every 10 s,
    on two tickers. Only records written 20 s after the start are evidence."""
    nodes = [node(1), node(2), node(3)]
    times = {1: StatusTimes(at(0), at(115)), 2: StatusTimes(at(100), at(110)),
             3: StatusTimes(at(0), at(118))}
    problem = stale_records(nodes, times)
    assert problem.startswith("node 2 started at 00:01:40 and the store metrics of node 1, 2, 3 ")
    assert "written less than 20 s after that" in problem
    times = {1: StatusTimes(at(0), at(125)), 2: StatusTimes(at(100), at(120)),
             3: StatusTimes(at(0), at(119.9))}
    assert "of node 3 were" in stale_records(nodes, times)
    times[3] = StatusTimes(at(0), at(128))
    assert stale_records(nodes, times) == ""

    # A dead node's record is never rewritten: not waited for (its stale sums still count).
    dead = [node(1), node(2), node(3, live=False)]
    times[3] = StatusTimes(at(0), at(50))
    assert stale_records(dead, times) == ""
    # A live node with no record at all: nothing is known about it yet.
    assert "no status record yet from the running process of KaiwuDB node 3" in stale_records(
        nodes, {1: times[1], 2: times[2]})
    # Nor when its record was written by the process before its restart (SQL serves before
    # the new process writes its first record).
    restarted = [node(1), node(2), replace(node(3), started_at=at(200))]
    assert "running process of KaiwuDB node 3" in stale_records(restarted, times)


def test_range_metrics_count_only_once_written_20_s_after_a_lost_nodes_liveness_expired(
        ) -> None:
    """Node 3 wrote its last record at t=100 and then stopped. Its replicas count as up to date
    until its liveness expires, at most one record interval and the 15 s TTL later (t=125):
    a range that lost its quorum with it reads as available until then, so a gate waits for
    records written 20 s after that (the failover gate would otherwise give up a store that
    holds a range's last copies)."""
    nodes = [node(1), node(2), node(3, live=False)]
    times = {1: StatusTimes(at(0), at(138)), 2: StatusTimes(at(0), at(146)),
             3: StatusTimes(at(0), at(100))}
    problem = stale_records(nodes, times)
    assert problem.startswith("node 3 stopped counting as live by 00:02:05 at the latest")
    assert "the store metrics of node 1 were written less than 20 s after that" in problem
    times[1] = StatusTimes(at(0), at(145))
    assert stale_records(nodes, times) == ""


def test_ranges_whose_only_copies_were_on_a_lost_node_are_found_in_the_descriptors() -> None:
    # The bootstrap node is lost while 40 ranges still up-replicate (two moves a second).
    deployment = start_pods()
    deployment.at(1.0)
    deployment.admin.init("orders-0")
    deployment.world.tune((NAMESPACE, NAME), 1.0, snapshot_rate_per_s=2.0)
    deployment.at(4.0)
    deployment.world.set_pod_host_alive((NAMESPACE, NAME), "orders-0", False, 4.0)
    deployment.at(60.0)
    live = [n.id for n in deployment.admin.node_status("orders-1") if n.is_live]
    assert live == [2, 3]
    stranded = deployment.admin.ranges_without_quorum("orders-1", live)
    health = deployment.admin.replication_health("orders-1")
    # The metrics count each range by its first live replica: those on node 1 alone by none.
    assert stranded > 30 and (health.unavailable or 0) < stranded
    assert deployment.admin.ranges_without_quorum("orders-1", [1, 2, 3]) == 0


def test_replica_sets_and_store_nodes_are_read_strictly_and_unknown_stores_count_as_down(
        ) -> None:
    sets = parse_replica_sets("stores,ranges\n\"1,2,3\",30\n\"1,2\",2\n1,8\n")
    assert sets == {(1, 2, 3): 30, (1, 2): 2, (1,): 8}
    assert parse_store_nodes("node_id,store_id\n1,1\n2,7\n") == {1: 1, 7: 2}
    # Node 2 lost: the two-copy ranges lose their quorum, the three-copy ones keep it, and a
    # store of no known node counts as not live. Store ids are not node ids: here node 2 runs
    # store 3 and node 3 store 2, so losing node 2 is losing store 3.
    assert ranges_without_quorum(sets, {1: 1, 2: 2, 3: 3}, {1, 3}) == 2
    assert ranges_without_quorum(sets, {1: 1, 2: 3, 3: 2}, {1, 3}) == 0
    assert ranges_without_quorum({(1, 3): 5}, {1: 1, 2: 3, 3: 2}, {1, 3}) == 5
    assert ranges_without_quorum({(1, 9): 4}, {1: 1}, {1}) == 4
    assert ranges_without_quorum({(): 1}, {}, {1}) == 1, "a range without voters has no quorum"
    for bad in ("stores\n1\n", "stores,ranges\n\"1,x\",3\n", "stores,ranges\n1,-3\n",
                "stores,ranges\n\"0,1\",3\n"):
        with pytest.raises(ValueError, match="unreadable range replica sets"):
            parse_replica_sets(bad)
    with pytest.raises(ValueError, match="unreadable store nodes"):
        parse_store_nodes("node_id,store\n1,1\n")


def test_status_record_times_are_read_as_utc_and_refused_when_unreadable() -> None:
    text = ("node_id,started_at,updated_at\n"
            "1,2026-01-01 00:00:00,2026-01-01 00:02:05.5\n"
            "2,2026-01-01 00:01:40+00:00,2026-01-01 00:02:00\n")
    assert parse_status_times(text) == {1: StatusTimes(at(0), at(125.5)),
                                        2: StatusTimes(at(100), at(120))}
    for bad in ("node_id,updated_at\n1,2026-01-01 00:00:00\n",
                "node_id,started_at,updated_at\n1,NULL,2026-01-01 00:00:00\n",
                "node_id,started_at,updated_at\nx,2026-01-01 00:00:00,2026-01-01 00:00:00\n",
                "node_id,started_at,updated_at\n1,yesterday,2026-01-01 00:00:00\n"):
        with pytest.raises(ValueError, match="unreadable status record times"):
            parse_status_times(bad)
