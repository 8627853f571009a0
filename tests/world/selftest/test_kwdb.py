"""Stories about the simulated KaiwuDB (tests/world/kwdb): what an operator sees through kwbase.

Pure Python, no Kubernetes: each test plays the simulated kubelet (starting and stopping
containers, losing hosts and volumes) and the admin adapter (exec'ing kwbase), with explicit
simulated times, and reads the answers with the csv module as the reconciler will.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tests.support.kwdb_operator import FAST, KEY, KWBASE, NS, STS, Operator, fqdn, rows, start_line
from tests.world.kwdb import (
    DRAIN_BEGUN,
    DRAIN_DONE,
    NO_MORE_DATA,
    RUNNING_JOB_TYPES_QUERY,
    RUNNING_JOBS_QUERY,
    KwdbSettings,
    KwdbWorld,
)
from tests.world.kwdb.render import render_table
from tests.world.pod_runtime import mounted_file_modes


def test_three_nodes_start_init_once_and_report_live_in_csv() -> None:
    op = Operator()
    for i in range(3):
        started = op.start(i, 0.0)
        assert started.ok and started.node_id is None
        assert "wait for `kwbase init`" in started.stderr
    assert not op.world.is_ready(KEY, "kw-0", 1.0)
    assert op.world.is_live(KEY, "kw-0", 1.0)

    before = op.kwbase(0, 2.0, "node", "status", "--format=csv")
    assert before.exit_code == 1 and "cannot dial server" in before.stderr
    assert before.duration_s == FAST.connect_timeout_s

    first = op.kwbase(0, 3.0, "init", f"--host={fqdn(0)}:26257")
    assert (first.exit_code, first.stdout) == (0, "Cluster successfully initialized\n")
    again = op.kwbase(1, 4.0, "init")
    assert again.exit_code == 1
    assert "cluster has already been initialized" in again.stderr
    assert again.stderr.endswith('Failed running "init"\n')

    assert all(op.world.is_ready(KEY, f"kw-{i}", 5.0) for i in range(3))
    out = op.kwbase(2, 5.0, "node", "status", "--format=csv")
    header = out.stdout.splitlines()[0]
    assert header == (
        "id,address,sql_address,build,started_at,updated_at,locality,start_mode,"
        "is_available,is_live"
    )
    nodes = rows(out)
    assert [n["id"] for n in nodes] == ["1", "2", "3"]
    assert [n["address"] for n in nodes] == [f"{fqdn(i)}:26257" for i in range(3)]
    assert {n["is_live"] for n in nodes} == {"true"}
    assert {n["is_available"] for n in nodes} == {"true"}
    assert {n["build"] for n in nodes} == {"V3.2.1"}
    assert {n["start_mode"] for n in nodes} == {"start"}
    assert nodes[0]["updated_at"] == "2026-01-01 00:00:05"


def test_replicas_spread_after_init_and_the_health_query_turns_green() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    assert t < 60, "40 ranges up-replicate in seconds at the default snapshot rate"
    ranges = op.status(t, "--ranges")
    assert [int(n["ranges"]) for n in ranges] == [40, 40, 40]
    assert {n["ranges_underreplicated"] for n in ranges} == {"0"}
    jobs = rows(op.kwbase(0, t, "sql", "-e", RUNNING_JOBS_QUERY, "--format=csv"))
    assert jobs == [{"count": "1"}], "the TS TXN job runs on every cluster, for ever"
    op.world.set_running_jobs(KEY, 2, t)
    jobs = rows(op.kwbase(0, t, "sql", "-e", RUNNING_JOBS_QUERY, "--format=csv"))
    assert jobs == [{"count": "3"}]
    by_type = rows(op.kwbase(0, t, "sql", "-e", RUNNING_JOB_TYPES_QUERY, "--format=csv"))
    assert by_type == [{"job_type": "IMPORT", "running": "2"},
                       {"job_type": "TS TXN", "running": "1"}]
    shown = rows(op.kwbase(0, t, "sql", "-e", "SHOW JOBS", "--format=csv"))
    assert list(shown[0])[-4:] == ["total_num_of_ex", "total_num_of_success",
                                   "total_num_of_fail", "time_of_last_success"]
    assert [j["description"] for j in shown if j["job_type"] == "TS TXN"] == [
        "handle ts txn record"]


def test_scale_out_to_five_then_decommission_node_five_drains_its_replicas() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    for i in (3, 4):
        assert op.start(i, t).ok
    t += 1
    assert [n["id"] for n in op.status(t)] == ["1", "2", "3", "4", "5"]
    t += 60  # rebalancing moves replicas onto the new nodes
    fifth = op.status(t, "5", "--decommission")[0]
    assert int(fifth["gossiped_replicas"]) > 0

    marked = op.kwbase(0, t, "node", "decommission", "5", "--wait=none", "--format=csv")
    assert marked.exit_code == 0 and marked.duration_s == 0.0
    table = rows(marked)
    assert table[0]["id"] == "5" and table[0]["is_decommissioning"] == "true"
    assert NO_MORE_DATA not in marked.stdout

    seen = []
    for _ in range(30):
        t += 1
        seen.append(int(op.status(t, "5", "--decommission")[0]["gossiped_replicas"]))
        if seen[-1] == 0:
            break
    assert seen[-1] == 0 and seen == sorted(seen, reverse=True) and len(set(seen)) > 2
    done = op.kwbase(0, t, "node", "decommission", "5", "--wait=none")
    assert done.stdout.endswith("\n" + NO_MORE_DATA + "\n")
    assert "already decommissioning" in done.stderr
    assert op.health(t) == (0, 0)

    op.world.stop_process(KEY, "kw-4", t)
    t += FAST.liveness_ttl_s + 1
    assert [n["id"] for n in op.status(t)] == ["1", "2", "3", "4"]
    hidden = op.kwbase(0, t, "node", "status", "5", "--format=csv")
    assert hidden.exit_code == 1 and "node 5 doesn't exist" in hidden.stderr
    assert op.status(t, "--decommission")[-1]["is_decommissioning"] == "true"


def test_dead_node_is_under_replicated_until_declared_dead_then_heals() -> None:
    op = Operator()
    t = op.healthy_cluster(4)
    killed_at = t
    op.world.stop_process(KEY, "kw-3", killed_at, graceful=False)
    assert op.health(killed_at + 1) == (0, 0), "still live until its liveness record expires"
    t = killed_at + FAST.liveness_ttl_s + 1
    assert op.status(t)[3]["is_live"] == "false"
    # The records say so once the others have computed and then written their metrics: within
    # two sampling intervals (server/node.go:763-846).
    t += 2 * FAST.metrics_sample_interval_s
    unavailable, under = op.health(t)
    assert unavailable == 0 and under > 0, "a replica of every range the node held is not live"

    # Declared dead once the liveness record has been expired for time_until_store_dead.
    dead_at = killed_at + FAST.liveness_ttl_s + FAST.time_until_store_dead_s
    assert op.health(dead_at - 1)[1] == under, "no repair before time_until_store_dead"
    t = dead_at + 30
    assert op.health(t) == (0, 0)
    assert op.status(t, "4", "--decommission")[0]["gossiped_replicas"] == "0"
    assert [int(n["ranges"]) for n in op.status(t, "--ranges")[:3]] == [40, 40, 40]


def test_a_bad_flag_makes_the_container_exit_with_the_real_message() -> None:
    op = Operator()
    bad = op.start(0, 0.0, "--bogus-flag=1")
    assert (bad.ok, bad.exit_code) == (False, 1)
    assert bad.stderr.startswith("Usage:\n  kwbase start [flags]\n")
    assert bad.stderr.endswith('ERROR: unknown flag: --bogus-flag\nFailed running "start"\n')
    assert not op.world.process_running(KEY, "kw-0")

    no_brpc = [a for a in start_line(0) if not a.startswith("--brpc-addr")]
    missing = op.world.start_process(KEY, "kw-0", "pvc-0", no_brpc, 0.0)
    assert "ERROR: failed to start server: --brpc-addr's port not specified" in missing.stderr
    no_port = op.world.start_process(KEY, "kw-0", "pvc-0", [*no_brpc, "--brpc-addr=kw-0"], 0.0)
    assert "ERROR: failed to start server: --brpc-addr's port not specified" in no_port.stderr


def test_a_memory_fraction_below_one_percent_is_refused_as_kwbase_refuses_it() -> None:
    op = Operator()
    tiny = op.start(0, 0.0, "--cache=.005")
    assert (tiny.ok, tiny.exit_code) == (False, 1)
    assert (
        'ERROR: invalid argument ".005" for "--cache" flag: percentage 0% out of range 1% - 99%\n'
    ) in tiny.stderr
    # kwbase reads the fraction as a float32 and truncates: .01 is 0.99999...% -> 0%.
    edge = op.start(0, 0.0, "--max-sql-memory=.01")
    assert "percentage 0% out of range 1% - 99%" in edge.stderr
    assert "percentage 100% out of range" in op.start(0, 0.0, "--cache=100%").stderr
    assert op.start(0, 0.0, "--cache=1%", "--max-sql-memory=2Gi").ok


def test_single_node_mode_rejects_join_and_initialises_itself() -> None:
    op = Operator()
    joined = op.world.start_process(
        KEY, "kw-0", "pvc-0", [*start_line(0, "start-single-node"), f"--join={fqdn(0)}"], 0.0
    )
    assert not joined.ok
    assert (
        "ERROR: cannot use --join with 'kaiwudb start-single-node', use 'kaiwudb start' or "
        "'kaiwudb start-single-replica' instead.\n"
    ) in joined.stderr

    alone = op.start(0, 1.0, mode="start-single-node")
    assert alone.ok and alone.node_id == 1
    assert op.world.is_ready(KEY, "kw-0", 2.0)
    assert "already been initialized" in op.kwbase(0, 2.0, "init").stderr
    assert op.health(2.0) == (0, 0), "replication factor 1: healthy at once"
    assert op.status(2.0)[0]["start_mode"] == "start-single-node"


def test_a_recreated_volume_joins_as_a_new_node_id() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    op.world.stop_process(KEY, "kw-2", t)
    op.world.delete_store(KEY, op.pvc["kw-2"], t)
    op.pvc["kw-2"] = "pvc-uid-kw-2-recreated"
    again = op.start(2, t + 5)
    assert again.ok and again.node_id == 4
    t += FAST.liveness_ttl_s + 10
    nodes = op.status(t)
    assert [(n["id"], n["is_live"]) for n in nodes] == [
        ("1", "true"),
        ("2", "true"),
        ("3", "false"),
        ("4", "true"),
    ]
    assert nodes[3]["address"] == f"{fqdn(2)}:26257"
    truth = op.world.describe(KEY, t)  # what a failing story prints of the simulator's state
    assert "node 3 at kw-2: store pvc-uid- (gone), heartbeating False, live False, " \
        "decommissioning False" in truth
    assert "process kw-2: store pvc-uid-, node 4, running True, host alive True, " \
        "waiting None" in truth


def test_a_store_keeps_its_start_mode() -> None:
    op = Operator()
    op.healthy_cluster(3)
    op.world.stop_process(KEY, "kw-1", 100.0)
    other = op.start(1, 101.0, mode="start-single-replica")
    assert (other.ok, other.exit_code) == (False, 1)
    assert "start mode" in other.stderr and 'Failed running "start-single-replica"' in other.stderr
    assert op.start(1, 102.0).ok


def test_a_decommissioned_store_comes_back_live_and_still_decommissioning() -> None:
    # KWDB V3.2.1 has no "permanently removed" check (CockroachDB 20.2 added it).
    op = Operator()
    t = op.healthy_cluster(4)
    assert op.kwbase(0, t, "node", "decommission", "4", "--wait=none").exit_code == 0
    t += 60
    op.world.stop_process(KEY, "kw-3", t)
    back = op.start(3, t + 1)
    assert back.ok and back.node_id == 4
    fourth = op.status(t + 2, "4", "--decommission")[0]
    assert (fourth["is_live"], fourth["is_decommissioning"]) == ("true", "true")
    assert fourth["gossiped_replicas"] == "0"
    again = rows(op.kwbase(0, t + 2, "node", "recommission", "4", "--format=csv"))
    assert again[0]["is_decommissioning"] == "false"


def test_decommissioning_an_unknown_node_id_fails_like_kwbase() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    got = op.kwbase(0, t, "node", "decommission", "9", "--wait=none")
    assert got.exit_code == 1
    assert got.stderr.startswith("warning: cannot find status of node 9\n")
    assert "during liveness update 9 -> true: node not in the liveness table" in got.stderr
    assert got.stderr.endswith('Failed running "node decommission"\n')
    bad = op.kwbase(0, t, "node", "decommission", "x")
    assert 'unable to parse x: strconv.ParseInt: parsing "x": invalid syntax' in bad.stderr


def test_waiting_for_all_replicas_blocks_while_replicas_remain() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    stuck = op.kwbase(0, t, "node", "decommission", "3", "--format=csv")  # nowhere to move
    assert stuck.exit_code == 0 and stuck.duration_s == math.inf
    assert rows(stuck)[0]["replicas"] == "40"


def test_exec_refuses_shells_and_reports_unknown_flags() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    shell = op.world.exec(KEY, "kw-0", ["sh", "-c", "kwbase node status --insecure"], t)
    assert shell.exit_code == 126 and "never through a shell" in shell.stderr
    flag = op.kwbase(0, t, "node", "status", "--bogus")
    assert flag.exit_code == 1
    assert flag.stderr.endswith('ERROR: unknown flag: --bogus\nFailed running "node status"\n')
    fmt = op.kwbase(0, t, "node", "status", "--format=yaml")
    assert (
        'invalid argument "yaml" for "--format" flag: invalid table display format: yaml'
        in fmt.stderr
    )
    sub = op.world.exec(KEY, "kw-0", [KWBASE, "node", "frobnicate"], t)
    assert sub.stderr == (
        'Usage:\n  kwbase node [command] [flags]\nERROR: unknown sub-command: "frobnicate"\n'
        'Failed running "node"\n'
    )
    # Client flags belong to node's sub-commands, not to `node` itself (flags.go clientCmds).
    group_flag = op.kwbase(0, t, "node", "frobnicate")
    assert "ERROR: unknown flag: --insecure" in group_flag.stderr
    top = op.world.exec(KEY, "kw-0", ["kwbase", "frobnicate"], t)
    assert 'ERROR: unknown command "frobnicate" for "kwbase"' in top.stderr


def test_a_stopped_node_cannot_be_dialled() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    op.world.stop_process(KEY, "kw-2", t)
    got = op.kwbase(0, t + 1, "node", "status", f"--host={fqdn(2)}:26257")
    assert got.exit_code == 1
    assert "ERROR: cannot dial server.\nIs the server running?" in got.stderr
    assert f"dial tcp {fqdn(2)}:26257: connect: connection refused" in got.stderr
    drain = op.kwbase(0, t + 1, "node", "drain", f"--host={fqdn(2)}")
    assert "Failed to connect to the node" in drain.stderr and drain.exit_code == 1


def test_secure_client_against_insecure_node_gets_the_hint() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    got = op.world.exec(KEY, "kw-0", [KWBASE, "node", "status", "--certs-dir=/kaiwudb/certs"], t)
    assert "cannot establish secure connection to insecure server.\nMaybe use --insecure?" in (
        got.stderr
    )
    neither = op.world.exec(KEY, "kw-0", [KWBASE, "node", "status"], t)
    assert "cannot load certificates." in neither.stderr


def test_drain_makes_a_node_unready_and_quit_stops_it() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    drained = op.kwbase(1, t, "node", "drain")
    assert (drained.exit_code, drained.stdout) == (0, "ok\n")
    assert drained.stderr.endswith("node is draining... remaining: 0 (complete)\n")
    assert not op.world.is_ready(KEY, "kw-1", t)
    assert op.status(t, "--decommission")[1]["is_draining"] == "true"
    refused = op.kwbase(1, t, "node", "status")
    assert "server is not accepting clients\nSQLSTATE: 57P01" in refused.stderr

    quit_ = op.kwbase(2, t, "quit")
    assert quit_.stdout == "ok\n"
    assert [e.pod_name for e in quit_.exited] == ["kw-2"]
    assert not op.world.process_running(KEY, "kw-2")
    restarted = op.start(2, t + 5)
    assert restarted.ok and restarted.node_id == 3
    assert op.world.is_ready(KEY, "kw-2", t + 5)


def test_locality_with_commas_is_quoted_in_csv() -> None:
    op = Operator()
    for i in range(3):
        assert op.start(i, 0.0, f"--locality=region=cn-east,zone=z{i}").ok
    op.kwbase(0, 1.0, "init")
    out = op.kwbase(0, 2.0, "node", "status", "--format=csv")
    assert ',"region=cn-east,zone=z0",' in out.stdout
    assert [n["locality"] for n in rows(out)] == [f"region=cn-east,zone=z{i}" for i in range(3)]
    tsv = op.kwbase(0, 2.0, "node", "status")  # exec has no terminal: tsv by default
    assert tsv.stdout.splitlines()[1].split("\t")[6] == "region=cn-east,zone=z0"


def test_table_format_matches_the_documented_layout() -> None:
    # The decommission status table as CockroachDB's v20.2 docs print it (same code in kwbase).
    expected = (
        "  id | is_live | replicas | is_decommissioning | is_draining\n"
        "-----+---------+----------+--------------------+--------------\n"
        "   6 |  true   |       21 |        true        |    false\n"
        "(1 row)\n"
    )
    got = render_table(
        ["id", "is_live", "replicas", "is_decommissioning", "is_draining"],
        [["6", "true", "21", "true", "false"]],
        "rcrcc",
    )
    assert got == expected


@pytest.mark.parametrize("mode", ["start", "start-single-replica"])
def test_modes_that_need_init_wait_for_it(mode: str) -> None:
    op = Operator()
    started = op.start(0, 0.0, mode=mode)
    assert started.ok and started.node_id is None
    assert not op.world.is_ready(KEY, "kw-0", 10.0)
    assert op.kwbase(0, 10.0, "init").exit_code == 0
    assert op.world.is_ready(KEY, "kw-0", 10.0)
    assert op.world.replication(KEY, 10.0).replication_factor == (3 if mode == "start" else 1)


def test_a_lost_host_times_out_and_its_node_turns_dead() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    op.world.set_pod_host_alive(KEY, "kw-1", False, t)
    assert not op.world.is_live(KEY, "kw-1", t)
    slow = op.kwbase(0, t, "node", "status", f"--host={fqdn(1)}")
    assert slow.duration_s == FAST.connect_timeout_s
    assert f"dial tcp {fqdn(1)}:26257: i/o timeout" in slow.stderr
    t += FAST.liveness_ttl_s + FAST.time_until_store_dead_s + 1
    assert op.world.nodes(KEY, t)[1].liveness == "DEAD"
    # Three nodes, one dead: no spare node to heal onto, so ranges stay under-replicated.
    assert op.health(t) == (0, 40)
    op.world.set_pod_host_alive(KEY, "kw-1", True, t)
    assert op.world.is_ready(KEY, "kw-1", t + 1)
    # Away longer than follower_inactive_s: each of its replicas needs a raft snapshot, and
    # they arrive at recovery_snapshot_rate_per_s (raft_log_queue.go:442-478,
    # store_snapshot.go:1247-1266); until then its ranges are truly under-replicated.
    assert op.world.replication(KEY, t + 1).underreplicated > 0
    assert op.health(t + 1) == (0, 40), "the records lag behind: written every 10 s"
    caught_up = t + 2 + 40 / FAST.recovery_snapshot_rate_per_s
    assert op.world.replication(KEY, caught_up).underreplicated == 0
    assert op.health(caught_up + 2 * FAST.metrics_sample_interval_s) == (0, 0)


def test_after_a_whole_cluster_outage_only_a_node_the_others_went_on_without_is_behind(
        ) -> None:
    """Only committed entries are truncated (raft_log_queue.go:442-478): a range whose every
    replica was down committed nothing and truncated nothing, so the first two nodes back need
    no raft snapshot; the third, back after the other two went on for longer than
    follower_inactive_s, needs one per replica."""
    op = Operator()
    t = op.healthy_cluster(3)
    for ordinal in range(3):
        op.world.set_pod_host_alive(KEY, f"kw-{ordinal}", False, t)
    t += 60
    for ordinal in range(2):
        op.world.set_pod_host_alive(KEY, f"kw-{ordinal}", True, t)
    assert op.world.replication(KEY, t + 1).unavailable == 0, "no snapshot needed"
    t += 2 * FAST.follower_inactive_s
    op.world.set_pod_host_alive(KEY, "kw-2", True, t)
    assert op.world.replication(KEY, t).underreplicated > 0, "the third waits for snapshots"
    caught_up = t + 2 + 40 / FAST.recovery_snapshot_rate_per_s
    assert op.world.replication(KEY, caught_up).underreplicated == 0


RANGE_REPLICA_SETS = ("SELECT array_to_string(replicas, ',') AS stores, count(*) AS ranges "
                      "FROM kwdb_internal.ranges_no_leases GROUP BY stores ORDER BY stores")
STORE_NODES = "SELECT node_id, store_id FROM kwdb_internal.kv_store_status ORDER BY store_id"


def test_range_descriptors_list_the_ranges_a_lost_node_held_alone_which_the_metrics_miss(
        ) -> None:
    """The bootstrap node is lost while the cluster still up-replicates: ranges on it alone
    have no live replica. KWDB's range metrics count each range by its first live replica
    (replica_metrics.go:170-201), so no one counts those, and they read as available; the range
    descriptors (kwdb_internal.ranges_no_leases, a meta scan) list every range."""
    op = Operator()
    for ordinal in range(3):
        assert op.start(ordinal, 0.0).ok
    assert op.kwbase(0, 1.0, "init").exit_code == 0
    t = 1.5  # five moves at FAST's 10 per second: the liveness range has its three copies
    op.world.set_pod_host_alive(KEY, "kw-0", False, t)
    t += FAST.liveness_ttl_s + 2 * FAST.metrics_sample_interval_s + 1
    sets = {row["stores"]: int(row["ranges"]) for row in rows(
        op.kwbase(1, t, "sql", "--format=csv", "-e", RANGE_REPLICA_SETS))}
    assert sum(sets.values()) == 40 and list(sets) == sorted(sets)
    assert sets["1"] > 30 and sets["1,2,3"] >= 1
    assert [(row["node_id"], row["store_id"]) for row in rows(
        op.kwbase(1, t, "sql", "--format=csv", "-e", STORE_NODES))] == [
        ("1", "1"), ("2", "2"), ("3", "3")]
    unavailable, _ = op.truth(t)
    assert unavailable >= sets["1"]
    reported, _ = op.health(t, via=1)
    assert reported < sets["1"], "the metrics count a range with no live replica nowhere"


def test_recommissioning_brings_replicas_back() -> None:
    op = Operator()
    t = op.healthy_cluster(4)
    op.kwbase(0, t, "node", "decommission", "2", "--wait=none")
    t += 60
    assert op.world.nodes(KEY, t)[1].replicas == 0
    back = op.kwbase(0, t, "node", "recommission", "2", "--format=csv")
    assert rows(back)[0] == {
        "id": "2",
        "is_live": "true",
        "replicas": "0",
        "is_decommissioning": "false",
        "is_draining": "false",
    }
    t += 120  # past the rebalancer's reach
    assert op.world.nodes(KEY, t)[1].replicas >= 29
    assert op.health(t) == (0, 0)


def test_pod_ip_and_client_service_resolve_from_inside_a_pod() -> None:
    op = Operator()
    for i in range(3):
        pod = f"kw-{i}"
        assert op.world.start_process(
            KEY, pod, f"pvc-{pod}", start_line(i), 0.0, pod_ip=f"10.1.0.{i + 1}"
        ).ok
    via_ip = op.kwbase(0, 1.0, "init", "--host=10.1.0.3:26257")
    assert via_ip.exit_code == 0
    assert op.world.nodes(KEY, 1.0)[0].pod_name == "kw-2", "the init target bootstraps as n1"
    public = op.kwbase(0, 2.0, "node", "status", f"--host={STS}-public.{NS}", "--format=csv")
    assert len(rows(public)) == 3


def test_a_node_of_another_start_mode_cannot_join() -> None:
    op = Operator()
    for i in range(3):
        assert op.start(i, 0.0, mode="start-single-replica").ok
    assert op.kwbase(0, 1.0, "init").exit_code == 0
    assert op.world.replication(KEY, 1.0).replication_factor == 1
    stranger = op.start(3, 2.0)  # `kwbase start` against a single-replica cluster
    assert not stranger.ok and "start mode" in stranger.stderr
    assert op.start(3, 3.0, mode="start-single-replica").node_id == 4


def test_gossiped_replicas_of_a_dead_node_expire_to_zero_while_replicas_remain() -> None:
    # A slow drain (big ranges): the node being decommissioned dies before it is empty.
    op = Operator(KwdbWorld(KwdbSettings(time_until_store_dead_s=1800.0)))
    t = op.healthy_cluster(4)
    op.world.tune(KEY, t, snapshot_rate_per_s=0.05)
    marked = rows(op.kwbase(0, t, "node", "decommission", "4", "--wait=none", "--format=csv"))
    before = int(marked[0]["replicas"])
    assert before > 20
    assert int(op.status(t, "4", "--decommission")[0]["gossiped_replicas"]) == before

    op.world.stop_process(KEY, "kw-3", t, graceful=False)
    ttl = op.world.settings.store_gossip_ttl_s
    # It last gossiped within an interval before it stopped: visible until ttl after that.
    last_visible = t + ttl - op.world.settings.gossip_stores_interval_s - 1
    frozen = int(op.status(last_visible, "4", "--decommission")[0]["gossiped_replicas"])
    assert frozen == before, "a stopped store gossips nothing: the last count stays"
    t += ttl + 1
    gossiped = op.status(t, "4", "--decommission")[0]
    assert (gossiped["is_live"], gossiped["gossiped_replicas"]) == ("false", "0")

    # The meta scan behind `node decommission` still counts what descriptors list there.
    exact = rows(op.kwbase(0, t, "node", "decommission", "4", "--wait=none", "--format=csv"))
    assert 0 < int(exact[0]["replicas"]) == op.world.nodes(KEY, t)[3].replicas < before

    op.world.tune(KEY, t, snapshot_rate_per_s=10.0)
    t += 30
    done = op.kwbase(0, t, "node", "decommission", "4", "--wait=none", "--format=csv")
    assert rows(done)[0]["replicas"] == "0" and done.stdout.endswith(NO_MORE_DATA + "\n")


def test_a_live_node_gossips_its_replica_count_on_changes_and_every_interval() -> None:
    op = Operator()
    t = op.healthy_cluster(3)
    assert [n["gossiped_replicas"] for n in op.status(t, "--decommission")] == ["40"] * 3
    assert op.start(3, t).ok
    t += 60  # rebalancing onto the new node, gossiped as it changes
    exact = [n.replicas for n in op.world.nodes(KEY, t)]
    assert [int(n["gossiped_replicas"]) for n in op.status(t, "--decommission")] == exact
    assert exact[3] > 0


@pytest.mark.parametrize("command", ["decommission", "recommission"])
def test_a_single_replica_cluster_refuses_to_decommission_like_kwdb(command: str) -> None:
    op = Operator()
    for i in range(3):
        assert op.start(i, 0.0, mode="start-single-replica").ok
    assert op.kwbase(0, 1.0, "init").exit_code == 0
    got = op.kwbase(0, 2.0, "node", command, "3")
    assert got.exit_code == 1 and got.stdout == ""
    refusal = "rpc error: code = Unknown desc = node cannot be decommissioned in mpp mode"
    prefix = "while trying to mark as decommissioning: " if command == "decommission" else ""
    assert f"ERROR: {prefix}{refusal}\n" in got.stderr
    assert got.stderr.endswith(f'Failed running "node {command}"\n')
    assert not any(n.decommissioning for n in op.world.nodes(KEY, 2.0))


def test_a_cluster_that_lost_quorum_shows_live_nodes_that_are_not_available() -> None:
    """As kwbase's own roachtest (pkg/cmd/roachtest/cli.go) shows: with two of three nodes
    stopped, the liveness range has no quorum, so the running node stays is_live but its
    liveness record cannot be renewed: is_available false."""
    op = Operator()
    t = op.healthy_cluster(3)
    op.world.stop_process(KEY, "kw-1", t, graceful=False)
    t += FAST.liveness_ttl_s + 1
    assert [(n["is_available"], n["is_live"]) for n in op.status(t)] == [
        ("true", "true"), ("false", "false"), ("true", "true")]
    op.world.stop_process(KEY, "kw-2", t, graceful=False)
    t += FAST.liveness_ttl_s + 1
    assert [(n["is_available"], n["is_live"]) for n in op.status(t)] == [
        ("false", "true"), ("false", "false"), ("false", "false")]


def test_sql_values_print_as_kwbase_prints_them() -> None:
    """kwbase/pkg/cli/sql_util.go formatVal with showMoreChars: graphic text, tabs and
    newlines as they are; anything else Go-quoted in ASCII. A name holding a control character
    reaches the reconciler escaped, never raw."""
    from tests.world.kwdb.render import format_value

    assert format_value('say "hi"') == 'say "hi"'
    assert format_value("Ä\tx\ny") == "Ä\tx\ny"
    assert format_value("a\x01b") == "a\\x01b"
    assert format_value("a\u200bb") == "a\\u200bb", "a zero-width space is no graphic"
    assert format_value("q\"\x7f") == 'q\\"\\x7f'


def test_a_single_replica_cluster_keeps_every_range_on_its_bootstrap_node_and_falls_with_it(
) -> None:
    """start-single-replica is KWDB's "mpp" mode: its replicate queue never queues a range
    (kv/kvserver/replicate_queue.go:248-250), so the liveness range, like every range, stays on
    the bootstrap node. With that node down no heartbeat is recorded: every node is unavailable,
    the cluster as a whole is down."""
    op = Operator()
    t = 0.0
    for i in range(3):
        assert op.start(i, t, mode="start-single-replica").ok
    assert op.kwbase(0, t + 1, "init").exit_code == 0
    t += 30
    ranges = {n["id"]: int(n["ranges"]) for n in op.status(t + 60, "--ranges")}
    assert ranges["1"] == op.world.settings.range_count and ranges["2"] == ranges["3"] == 0
    op.world.stop_process(KEY, "kw-0", t + 60, graceful=False)
    later = t + 60 + op.world.settings.liveness_ttl_s + 1
    nodes = op.status(later, via=1)
    assert {n["id"]: n["is_available"] for n in nodes if n["id"] != "1"} == {
        "2": "false", "3": "false"}
    assert {n["is_live"] for n in nodes if n["id"] != "1"} == {"true"}, "still gossiping"


UPGRADING_QUERY = (
    "SELECT node_id FROM kwdb_internal.gossip_liveness WHERE upgrading ORDER BY node_id")


def test_node_upgrade_marks_a_node_upgrading_until_it_restarts_with_upgrade_complete() -> None:
    """KWDB's upgrade (cli/node.go:548-636, server/server.go:2764-2874): the node marked stays
    live but unavailable, blocks every decommission and a second upgrade, keeps the flag across
    a plain restart, and only a start with --upgrade-complete clears it."""
    op = Operator()
    t = op.healthy_cluster(3)

    unknown = op.kwbase(0, t, "node", "upgrade", "9")
    assert unknown.exit_code == 1
    assert unknown.stdout == "Upgrade ternimated. Hint: cannot find status of node 9\n"
    assert "ERROR: Upgrade ternimated. Hint: cannot find status of node 9\n" in unknown.stderr

    marked = op.kwbase(0, t, "node", "upgrade", "3")
    assert (marked.exit_code, marked.stdout, marked.stderr) == (0, "", "")
    assert [(n["id"], n["is_available"], n["is_live"]) for n in op.status(t)] == [
        ("1", "true", "true"), ("2", "true", "true"), ("3", "false", "true")]
    assert rows(op.kwbase(0, t, "sql", "--format=csv", "-e", UPGRADING_QUERY)) == [
        {"node_id": "3"}]

    again = op.kwbase(0, t, "node", "upgrade", "3")  # the CLI's own check refuses first
    assert again.exit_code == 1
    assert again.stdout == ("Upgrade ternimated. Hint: node 3 is not eligible to upgrade, check "
                            "the node status and upgrader later.\n")
    other = op.kwbase(0, t, "node", "upgrade", "2")  # the server refuses any second one
    assert other.exit_code == 1
    assert ("ERROR: rpc error: code = Unknown desc = can not upgrade nodes when cluster has "
            "node UPGRADING\n") in other.stderr
    refused = op.kwbase(0, t, "node", "decommission", "1", "--wait=none")
    assert refused.exit_code == 1
    assert ("ERROR: while trying to mark as decommissioning: rpc error: code = Unknown desc = "
            "can not run node decommission when cluster has node UPGRADING\n") in refused.stderr
    assert not any(n.decommissioning for n in op.world.nodes(KEY, t))

    # Stopped, an upgrading node is not dead to the allocator for 3 h (server.go:2845-2846):
    # its replicas stay under-replicated well past the usual store-dead time.
    op.world.stop_process(KEY, "kw-2", t)
    t += FAST.liveness_ttl_s + FAST.time_until_store_dead_s + 60
    assert op.health(t)[1] > 0
    assert op.start(2, t).ok  # a plain restart keeps the flag
    t += 1
    assert op.status(t)[2]["is_available"] == "false"
    op.world.stop_process(KEY, "kw-2", t)
    assert op.start(2, t + 1, "--upgrade-complete").ok
    t += 2
    assert {n["is_available"] for n in op.status(t)} == {"true"}
    assert rows(op.kwbase(0, t, "sql", "--format=csv", "-e", UPGRADING_QUERY)) == []
    assert op.kwbase(0, t, "node", "decommission", "1", "--wait=none").exit_code == 0


def test_upgrade_is_refused_while_a_node_is_down_and_complete_is_a_no_op_otherwise() -> None:
    """server/server.go:2832-2837: every node LIVE or DECOMMISSIONED, or no upgrade at all; a
    start with --upgrade-complete on a node that is not upgrading changes nothing."""
    op = Operator()
    t = op.healthy_cluster(3)
    op.world.stop_process(KEY, "kw-2", t, graceful=False)
    t += FAST.liveness_ttl_s + 1
    refused = op.kwbase(0, t, "node", "upgrade", "1")
    assert refused.exit_code == 1
    assert ("can not upgrade nodes when cluster has node UNAVAILABLE") in refused.stderr
    assert op.start(2, t, "--upgrade-complete").ok
    t += 1
    assert {n["is_available"] for n in op.status(t)} == {"true"}


def test_a_secure_start_refuses_a_node_key_the_group_may_read_unless_told_not_to_check() -> None:
    """security/certificate_loader.go: a key file beyond 0700 fails the node certificate, and
    with it the start (server/server.go:405-411), unless KWBASE_SKIP_KEY_PERMISSION_CHECK is a
    true Go bool; a value Go cannot parse panics when the package loads (envutil/env.go:183)."""
    op = Operator()
    secure = [a for a in start_line(0) if a != "--insecure"] + ["--certs-dir=/kaiwudb/certs"]
    keys = {"/kaiwudb/certs/node.key": 0o440, "/kaiwudb/certs/ca.crt": 0o440}

    refused = op.world.start_process(KEY, "kw-0", "pvc-0", secure, 0.0, files=keys, env={})
    assert (refused.ok, refused.exit_code) == (False, 1)
    assert ("ERROR: failed to start server: problem with node certificate: key file "
            "/kaiwudb/certs/node.key has permissions -r--r-----, exceeds -rwx------"
            ) in refused.stderr
    bad_flag = op.world.start_process(KEY, "kw-0", "pvc-0", secure, 0.0, files=keys,
                                      env={"KWBASE_SKIP_KEY_PERMISSION_CHECK": "yes"})
    assert (bad_flag.ok, bad_flag.exit_code) == (False, 2)
    assert bad_flag.stderr.startswith("panic: error parsing KWBASE_SKIP_KEY_PERMISSION_CHECK")
    private = op.world.start_process(KEY, "kw-0", "pvc-0", secure, 0.0,
                                     files={"/kaiwudb/certs/node.key": 0o400}, env={})
    assert private.ok, private.stderr
    op.world.stop_process(KEY, "kw-0", 1.0, graceful=False)
    skipped = op.world.start_process(KEY, "kw-0", "pvc-0", secure, 2.0, files=keys,
                                     env={"KWBASE_SKIP_KEY_PERMISSION_CHECK": "true"})
    assert skipped.ok, skipped.stderr


def test_the_kubelet_gives_mounted_keys_to_the_pods_group_as_kubernetes_does() -> None:
    """Kubernetes v1.20.2 pkg/volume/volume_linux.go:91-128: with fsGroup, each file of a
    read-only (secret, projected) volume gets mode | 0440; the mode is the item's or the
    volume's defaultMode (0644 when unset)."""
    container = {"volumeMounts": [{"name": "certs", "mountPath": "/kaiwudb/certs/"},
                                  {"name": "data", "mountPath": "/kaiwudb/deploy"}]}
    volumes = [{"name": "certs", "projected": {"defaultMode": 0o400, "sources": [
        {"secret": {"name": "node", "items": [{"key": "tls.key", "path": "node.key"},
                                              {"key": "ca.crt", "path": "ca.crt",
                                               "mode": 0o444}]}}]}},
               {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
    pod = {"spec": {"volumes": volumes}}
    assert mounted_file_modes(container, pod) == {"/kaiwudb/certs/node.key": 0o400,
                                                  "/kaiwudb/certs/ca.crt": 0o444}
    grouped = {"spec": {"volumes": volumes, "securityContext": {"fsGroup": 1000}}}
    assert mounted_file_modes(container, grouped) == {"/kaiwudb/certs/node.key": 0o440,
                                                      "/kaiwudb/certs/ca.crt": 0o444}
    secret = {"spec": {"volumes": [{"name": "certs", "secret": {"secretName": "s", "items": [
        {"key": "k", "path": "node.key"}]}}]}}
    assert mounted_file_modes(container, secret) == {"/kaiwudb/certs/node.key": 0o644}


def test_a_probe_is_answered_only_at_the_http_port_with_the_scheme_and_path_kwbase_serves(
        ) -> None:
    """kwbase serves HTTP on --http-addr's port only (server/server.go:2600-2670): a probe at
    another port, over TLS to an insecure node, or asking `?ready=` what Go cannot parse as a
    bool (the gateway's 400) fails, so a renderer that names the wrong port or scheme fails
    the stories that wait for Ready. `/health` answers before init, `?ready=1` after."""
    op = Operator()
    for i in range(3):
        op.start(i, 0.0)

    def get(port: int | None, scheme: str = "HTTP", path: str = "/health?ready=1",
            t: float = 5.0) -> bool:
        return op.world.http_get(KEY, "kw-0", t, port, scheme, path)

    assert get(8080, path="/health", t=1.0) and not get(8080, t=1.0), "before init"
    assert op.kwbase(0, 3.0, "init", f"--host={fqdn(0)}:26257").exit_code == 0
    assert get(8080) and get(8080, path="/health?ready=true")
    assert not get(26257) and not get(None), "not the HTTP port, or a name no port has"
    assert not get(8080, "HTTPS"), "a TLS handshake with an insecure node"
    assert not get(8080, path="/health?ready=yes"), "the gateway's 400"
    assert not get(8080, path="/healthz") and not get(8080, path="/health/")
    assert not get(8080, path="/"), "no UI handler at / in KWDB V3.2.1: ServeMux's 404"
    assert get(8080, path="/_admin/v1/health?ready=1") and get(8080, path="/_status/vars")
    assert op.world.tcp_open(KEY, "kw-0", 5.0, 26257)
    assert not op.world.tcp_open(KEY, "kw-0", 5.0, 9999)


def test_a_secure_node_serves_health_in_plain_http_too_and_redirects_the_rest_to_https() -> None:
    """kwbase/pkg/server/server.go:2621-2658: a secure node takes TLS and plain HTTP on its HTTP
    port; plain HTTP gets /health served and a 307 to https://<same host> for anything else,
    which a kubelet follows (same host), so the HTTPS answer decides."""
    op = Operator()
    secure = [a for a in start_line(0, "start-single-node") if a != "--insecure"] + [
        "--certs-dir=/kaiwudb/certs"]
    started = op.world.start_process(KEY, "kw-0", "pvc-0", secure, 0.0,
                                     files={"/kaiwudb/certs/node.key": 0o400}, env={})
    assert started.ok, started.stderr

    def get(scheme: str, path: str) -> bool:
        return op.world.http_get(KEY, "kw-0", 2.0, 8080, scheme, path)

    assert get("HTTPS", "/health?ready=1") and get("HTTP", "/health?ready=1")
    assert get("HTTP", "/_status/vars"), "307 to https, followed"
    assert not get("HTTP", "/healthz") and not get("HTTPS", "/healthz"), "404 after the 307"


def test_sigterm_drains_for_a_while_and_a_kill_before_the_end_is_an_unclean_stop() -> None:
    """cli/start.go:857-999: SIGTERM starts the drain (readiness fails at once, drain.go:229-235)
    and the process exits when it is done, the log saying so and the liveness record marked
    draining; a SIGKILL before then leaves neither. A node waiting for init has no server to
    drain: hard shutdown at once."""
    op = Operator(KwdbWorld(replace(FAST, drain_s=7.0)))
    t = op.healthy_cluster(3)
    assert op.world.begin_drain(KEY, "kw-1", t) == 7.0
    assert op.world.process_running(KEY, "kw-1") and not op.world.is_ready(KEY, "kw-1", t)
    op.world.stop_process(KEY, "kw-1", t + 7.0, graceful=True)
    assert op.world.logs(KEY, "kw-1").endswith(f"{DRAIN_BEGUN}\n{DRAIN_DONE}\n")
    assert [n.draining for n in op.world.nodes(KEY, t + 7.0)] == [False, True, False]

    assert op.world.begin_drain(KEY, "kw-2", t + 8.0) == 7.0
    op.world.stop_process(KEY, "kw-2", t + 10.0, graceful=False)  # the grace period ran out
    assert DRAIN_DONE not in op.world.logs(KEY, "kw-2")
    assert not op.world.nodes(KEY, t + 10.0)[2].draining

    waiting = Operator()
    waiting.start(0, 0.0)
    assert waiting.world.begin_drain(KEY, "kw-0", 1.0) == 0.0
    assert not waiting.world.process_running(KEY, "kw-0")
    assert "too early to drain; used hard shutdown instead" in waiting.world.logs(KEY, "kw-0")
