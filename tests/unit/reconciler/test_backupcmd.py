"""Stories of `kaiwu backup` and `kaiwu restore` (reconciler.backupcmd, reconciler.restorecmd)
on the fast tier's fake API: an operator backs a cluster up to where its schedule already sends
backups, or names a target; waits for it; lists and describes backups; writes or creates a
cluster restored from one. Every refusal is one line, exit 2. The same commands against the
real API server: tests/world_stories/backup/test_backup_cli.py.
"""

from __future__ import annotations

import argparse
import copy
import io
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from reconciler import backupcmd, restorecmd
from reconciler.kube.client import ApiError, connection_flags_last
from reconciler.kube.kinds import Kind
from reconciler.model import Obj
from renderer.render import read_live
from tests.support.fake_api import FakeApi

NS = "shop"
VOLUME = {"volume": {"claimName": "dumps"}}


class BackupApi(FakeApi):
    """The fake API holding `objects`, with what `kaiwu backup create` sent (`created`) and a
    backup controller whose answers are scripted: `phases`, the phases a KaiwuBackup is moved
    to (its status written, as the reconciler writes it) before each read of it."""

    def __init__(self, *objects: Obj) -> None:
        super().__init__()
        for obj in objects:
            self.put(obj)
        self.created: list[Obj] = []
        self.phases: list[str] = []

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        if kind.kind == "KaiwuBackup" and self.phases and super().get(kind, namespace, name):
            phase = self.phases.pop(0)
            failed = {"reason": "NodeLost", "message": "node 2 went away"} \
                if phase == "failed" else {}
            self.edit(kind, namespace, name, lambda backup: backup.setdefault(
                "status", {}).update(phase=phase, **failed), manager="kaiwu-reconciler",
                status=True)
        return super().get(kind, namespace, name)

    def create(self, obj: Obj) -> Obj:
        created = super().create(obj)
        self.created.append(copy.deepcopy(obj))
        return created


def kaiwu_cluster(name: str = "orders", **spec: Any) -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuCluster",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"team": "payments", "app.kubernetes.io/instance": name}},
            "spec": {"replicas": 3, "version": "3.2.1", **spec}}


def schedule(name: str, target: Obj, cluster: str = "orders") -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackupSchedule",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"cluster": {"name": cluster}, "schedule": "0 0 3 * * *",
                     "template": {"target": target}}}


def a_backup(name: str, phase: str = "completed", created: str = "2026-12-01T03:00:00Z",
             target: Obj = VOLUME) -> Obj:
    return {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackup",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
            "spec": {"cluster": {"name": "orders"}, "target": target},
            "status": {"phase": phase, "sizeBytes": 3 * 1024 * 1024,
                       "completedAt": "2026-12-01T03:01:00Z"}}


def create_args(*argv: str) -> argparse.Namespace:
    return backupcmd.backup_parser().parse_args(["create", *argv])


def run_create(api: BackupApi, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = backupcmd.create(api, NS, create_args(*argv), out,  # type: ignore[arg-type]
                            clock=lambda: 1764558000.0, sleep=lambda _s: None)
    return code, out.getvalue()


def test_a_backup_goes_where_the_clusters_schedule_sends_its_backups() -> None:
    api = BackupApi(kaiwu_cluster(), schedule("nightly", VOLUME))
    code, out = run_create(api, "orders")
    assert code == 0
    [made] = api.created
    assert made == {"apiVersion": "kaiwu.inspur.com/v1", "kind": "KaiwuBackup",
                    "metadata": {"name": "orders-20251201-030000", "namespace": NS},
                    "spec": {"cluster": {"name": "orders"}, "target": VOLUME}}
    assert out == "kaiwubackup/orders-20251201-030000 created in shop (volume dumps)\n"


def test_named_targets_win_and_a_cluster_without_one_is_refused_naming_the_flags() -> None:
    api = BackupApi(kaiwu_cluster(), schedule("nightly", VOLUME))
    run_create(api, "orders", "--s3-bucket", "dumps", "--s3-secret", "s3-keys",
               "--s3-prefix", "kwdb", "--name", "before-upgrade", "--database", "shop")
    assert api.created[0]["spec"] == {
        "cluster": {"name": "orders"}, "databases": ["shop"],
        "target": {"s3": {"bucket": "dumps", "credentialsSecret": {"name": "s3-keys"},
                          "prefix": "kwdb"}}}

    # Two schedules: which one? The newest backup's target, if there is one...
    api = BackupApi(kaiwu_cluster(), schedule("a", VOLUME), schedule("b", {"volume": {
        "claimName": "other"}}), a_backup("old", created="2026-11-01T00:00:00Z",
                                          target={"volume": {"claimName": "older"}}),
        a_backup("new", created="2026-11-30T00:00:00Z"))
    run_create(api, "orders")
    assert api.created[0]["spec"]["target"] == VOLUME
    # ...and with none, a refusal that names the flags.
    api = BackupApi(kaiwu_cluster(), schedule("for-another", VOLUME, cluster="billing"))
    with pytest.raises(backupcmd.Refused, match="no target for a backup of orders \\(no "
                       "KaiwuBackupSchedule or completed KaiwuBackup names one\\): give "
                       "--volume-claim CLAIM, or --s3-bucket BUCKET --s3-secret SECRET"):
        run_create(api, "orders")
    with pytest.raises(backupcmd.Refused, match="needs both --s3-bucket and --s3-secret"):
        run_create(api, "orders", "--s3-bucket", "dumps")
    with pytest.raises(backupcmd.Refused, match="not both"):
        run_create(api, "orders", "--s3-bucket", "b", "--s3-secret", "s", "--volume-claim", "c")
    with pytest.raises(backupcmd.Refused, match="--s3-prefix describe an S3 target: give "
                       "--s3-bucket too"):
        run_create(api, "orders", "--s3-prefix", "kwdb")
    with pytest.raises(backupcmd.Refused, match=r"is plain http: .* add --s3-allow-plain-http"):
        run_create(api, "orders", "--s3-bucket", "b", "--s3-secret", "s", "--s3-endpoint",
                   "http://minio:9000")
    with pytest.raises(backupcmd.Refused, match="--timeout nan: give a number of seconds"):
        run_create(api, "orders", "--volume-claim", "c", "--timeout", "nan")
    with pytest.raises(backupcmd.Refused, match="CLUSTER 'Orders' is not a Kubernetes name"):
        run_create(api, "Orders", "--volume-claim", "c")
    assert api.created == []


def test_a_failed_backup_is_no_target_to_reuse_and_a_named_target_reads_no_lists() -> None:
    failed = a_backup("bad", phase="failed", target={"volume": {"claimName": "gone"}},
                      created="2026-12-02T00:00:00Z")
    api = BackupApi(kaiwu_cluster(), a_backup("good", created="2026-12-01T00:00:00Z"), failed)
    run_create(api, "orders")
    assert api.created[0]["spec"]["target"] == VOLUME

    class NoLists(BackupApi):
        def list_objects(self, kind: Kind, namespace: str | None = None,
                         label_selector: str | None = None, *,
                         keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
            raise ApiError(403, "Forbidden", "cannot list")
    lean = NoLists(kaiwu_cluster())
    assert run_create(lean, "orders", "--volume-claim", "dumps")[0] == 0


def test_a_backup_of_a_cluster_that_does_not_exist_or_a_name_taken_is_refused() -> None:
    with pytest.raises(backupcmd.Refused, match="no KaiwuCluster billing in namespace shop"):
        run_create(BackupApi(kaiwu_cluster()), "billing", "--volume-claim", "dumps")
    api = BackupApi(kaiwu_cluster(), a_backup("taken"))
    with pytest.raises(backupcmd.Refused, match="KaiwuBackup taken exists: give another --name"):
        run_create(api, "orders", "--name", "taken")


def test_wait_follows_the_backup_to_its_end_and_says_how_to_restore_it() -> None:
    api = BackupApi(kaiwu_cluster(), schedule("nightly", VOLUME))
    api.phases = ["pending", "running", "running", "completed"]
    code, out = run_create(api, "orders", "--wait")
    assert code == 0
    lines = out.splitlines()
    assert lines[1:4] == ["kaiwubackup/orders-20251201-030000: pending",
                          "kaiwubackup/orders-20251201-030000: running",
                          "kaiwubackup/orders-20251201-030000: completed"]
    assert "Restore:     kaiwu restore --from orders-20251201-030000 --into NEW -n shop " \
        "--apply" in lines

    api = BackupApi(kaiwu_cluster(), schedule("nightly", VOLUME))
    api.phases = ["running", "failed"]
    code, out = run_create(api, "orders", "--wait")
    assert code == 1
    assert "kaiwubackup/orders-20251201-030000: failed" in out.splitlines()
    assert out.splitlines()[-1] == "Failure:     NodeLost: node 2 went away"

    api = BackupApi(kaiwu_cluster(), schedule("nightly", VOLUME))
    api.phases = ["running"] * 10
    out_stream = io.StringIO()
    times = iter([0.0, 0.0, 5.0, 11.0])
    code = backupcmd.create(api, NS, create_args("orders", "--wait", "--timeout", "10"),  # type: ignore[arg-type]
                            out_stream, clock=lambda: next(times), sleep=lambda _s: None)
    assert code == 1
    assert "is still running after 10s (it runs on" in out_stream.getvalue()


def test_list_and_describe_show_phase_size_target_and_failure() -> None:
    failed = a_backup("broken", phase="failed", created="2026-12-02T03:00:00Z")
    failed["status"].update(reason="NodeLost", message="node 2 went away", sizeBytes=None)
    rows = backupcmd.backup_rows([failed, a_backup("nightly-1")])
    assert [r["name"] for r in rows] == ["nightly-1", "broken"], "oldest first"
    text = backupcmd.table(rows, all_namespaces=False)
    assert text.splitlines()[0].split() == ["NAME", "CLUSTER", "PHASE", "SIZE", "ENDED",
                                            "TARGET", "REASON"]
    assert text.splitlines()[1].split()[:5] == ["nightly-1", "orders", "completed", "3.0",
                                                "MiB"]
    assert text.splitlines()[2].split()[-3:] == ["volume", "dumps", "NodeLost"]
    described = backupcmd.describe_text(rows[1])
    assert "Failure:     NodeLost: node 2 went away" in described
    assert "Restore:" not in described, "a failed backup cannot be restored"
    assert backupcmd.table([], all_namespaces=True) == "No KaiwuBackups found.\n"

    # A completed backup's message is no failure; text from the cluster stays on one line.
    done = a_backup("ok")
    done["status"]["message"] = "4 file(s) verified\n\x1b[31mred"
    text = backupcmd.describe_text(backupcmd.backup_rows([done])[0])
    assert "Failure" not in text and "Message:     4 file(s) verified [31mred" in text


def test_hostile_backup_objects_are_listed_not_fatal() -> None:
    odd: list[Obj] = [{"metadata": {"name": "a", "namespace": NS}, "spec": "x", "status": ["y"]},
           {"metadata": {"name": "b", "namespace": NS},
            "spec": {"cluster": "orders", "target": {"volume": "x"}},
            "status": {"phase": "completed", "sizeBytes": "lots"}}]
    rows = backupcmd.backup_rows(odd)
    assert [(r["name"], r["cluster"], r["phase"], r["sizeBytes"]) for r in rows] == [
        ("a", None, "pending", None), ("b", None, "completed", None)]
    assert "volume ?" in backupcmd.table(rows, all_namespaces=False)


def test_restore_writes_a_valid_spec_of_the_source_cluster_started_from_the_backup() -> None:
    source = kaiwu_cluster(paused=True, tls={"enabled": True, "nodeSecretName": "orders-tls",
                                             "clientSecretName": "orders-root",
                                             "secretLayout": "cert-manager"},
                           storage={"size": "50Gi"},
                           service={"type": "LoadBalancer", "annotations": {
                               "external-dns.alpha.kubernetes.io/hostname": "db.shop"}})
    source["metadata"]["labels"]["argocd.argoproj.io/instance"] = "shop"
    api = BackupApi(source, a_backup("nightly-1"))
    out, err = io.StringIO(), io.StringIO()
    args = restorecmd.restore_parser().parse_args(["--from", "nightly-1", "--into", "orders2"])
    assert restorecmd.restore(api, NS, args, out, err) == 0  # type: ignore[arg-type]
    said = err.getvalue().splitlines()
    assert said[0] == "kaiwu restore: not copied from orders: spec.paused"
    assert len(said) == 6 and any("spec.service" in line for line in said)
    assert any("label argocd.argoproj.io/instance" in line for line in said)
    spec = yaml.safe_load(out.getvalue())
    assert spec["metadata"] == {"name": "orders2", "namespace": NS,
                                "labels": {"team": "payments"}}
    assert spec["spec"]["bootstrap"] == {"fromBackup": {"name": "nightly-1"}}
    assert spec["spec"]["tls"] == {"enabled": True}, "the source's certificates are its own"
    assert "paused" not in spec["spec"] and spec["spec"]["storage"] == {"size": "50Gi"}
    assert "service" not in spec["spec"], "the source's address is not claimed twice"

    # Values the CRD defaults them to are copied and not said (a live spec has them all).
    plain = kaiwu_cluster(paused=False, tls={"enabled": True, "secretLayout": "kwbase"},
                          service={"type": "ClusterIP"})
    api = BackupApi(plain, a_backup("nightly-1"))
    err = io.StringIO()
    assert restorecmd.restore(api, NS, args, io.StringIO(), err) == 0  # type: ignore[arg-type]
    assert err.getvalue() == ""
    assert read_live(spec).name == "orders2", "kaiwu validate accepts it"
    assert api.created == []

    args = restorecmd.restore_parser().parse_args(["--from", "nightly-1", "--into", "orders2",
                                                  "--apply"])
    assert restorecmd.restore(api, NS, args, io.StringIO()) == 0  # type: ignore[arg-type]
    assert [o["metadata"]["name"] for o in api.created] == ["orders2"]


@pytest.mark.parametrize(("objects", "into", "refusal"), [
    ([kaiwu_cluster()], "orders2", "no KaiwuBackup nightly-1 in namespace shop"),
    ([kaiwu_cluster(), a_backup("nightly-1", phase="running")], "orders2",
     "KaiwuBackup nightly-1 is running: only a completed backup can be restored"),
    ([a_backup("nightly-1")], "orders2", "the backup's cluster orders is gone"),
    ([kaiwu_cluster(), a_backup("nightly-1")], "orders",
     "KaiwuCluster orders exists in shop: a restore makes a new cluster"),
])
def test_a_restore_that_cannot_be_done_is_refused(objects: list[Obj], into: str,
                                                  refusal: str) -> None:
    api = BackupApi(*objects)
    args = restorecmd.restore_parser().parse_args(["--from", "nightly-1", "--into", into])
    with pytest.raises(backupcmd.Refused, match=refusal):
        restorecmd.restore(api, NS, args, io.StringIO())  # type: ignore[arg-type]


def test_restore_to_a_file_it_cannot_write_says_so(tmp_path: Any) -> None:
    api = BackupApi(kaiwu_cluster(), a_backup("nightly-1"))
    args = restorecmd.restore_parser().parse_args(["--from", "nightly-1", "--into", "orders2",
                                                  "-f", str(tmp_path / "no" / "x.yaml")])
    with pytest.raises(backupcmd.Refused, match=r"cannot write .*x\.yaml: No such file"):
        restorecmd.restore(api, NS, args, io.StringIO(), io.StringIO())  # type: ignore[arg-type]


def test_ctrl_c_while_waiting_leaves_the_backup_running_and_says_so() -> None:
    api = BackupApi(kaiwu_cluster(), schedule("nightly", VOLUME))
    api.phases = ["running"] * 3

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt
    out = io.StringIO()
    code = backupcmd.create(api, NS, create_args("orders", "--wait"), out,  # type: ignore[arg-type]
                            clock=lambda: 0.0, sleep=interrupted)
    assert code == 1
    assert out.getvalue().splitlines()[-1] == (
        "stopped waiting; kaiwubackup/orders-19700101-000000 runs on (kaiwu backup describe "
        "orders-19700101-000000)")


@pytest.mark.parametrize(("argv", "moved"), [
    (["-n", "prod", "list"], ["list", "-n", "prod"]),
    (["--namespace=prod", "--context", "k", "status", "x"],
     ["status", "--namespace=prod", "--context", "k", "x"]),
    (["-nprod", "backup", "list"], ["backup", "-nprod", "list"]),
    (["list", "-n", "prod"], ["list", "-n", "prod"]),
    (["--version"], ["--version"]),
])
def test_connection_flags_before_the_command_go_after_it(argv: list[str],
                                                         moved: list[str]) -> None:
    assert connection_flags_last(argv) == moved


def test_bad_flags_are_one_line_exit_2() -> None:
    err = io.StringIO()
    assert backupcmd.main(["create"], err=err) == 2
    assert err.getvalue().startswith("kaiwu backup: the following arguments are required: "
                                     "cluster (see kaiwu backup create --help)")
    err = io.StringIO()
    assert restorecmd.main(["--from", "x"], err=err) == 2
    assert "--into" in err.getvalue() and err.getvalue().count("\n") == 1
    err = io.StringIO()
    assert backupcmd.main(["list", "-A", "-n", "shop"], err=err) == 2
    assert err.getvalue() == "kaiwu backup: -A and -n exclude each other: drop one\n"
