"""A restore in the fast tier (the step reconciler.kaiwudb.backup.restore with its parts
reconciler.kaiwudb.backup.restore_import and reconciler.kaiwudb.backup.restore_steps, and
reconciler.kaiwudb.backup.file_server) against the simulated KaiwuDB, which reads the backup
over http from the reconciler's file server, as KWDB's IMPORT does;
tests/support/backup_world.py.

Stories: a new cluster made with spec.bootstrap.fromBackup waits for its backup to complete,
then imports settings, users and each database one pass at a time, is not Ready until then, and
ends with the same data as the cluster backed up; the file server stops serving the backup when
the restore is over. A cluster that already holds data is refused untouched; a damaged backup
fails before anything is imported; a database found although its import was never recorded
stops the restore; a reconciler that lost its record of the users' import does not import them
twice; a lagging cache does not make an import run twice.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from reconciler.kaiwudb.backup import plan as bp
from reconciler.kaiwudb.backup import restore_plan as rp
from reconciler.kaiwudb.backup.file_server import (
    CUSTOM_CA_MAX_CHARS,
    RESTORE_CA_NAME,
    BackupFileServer,
    custom_ca_with,
    default_advertise_host,
    pem_certificates,
)
from reconciler.kaiwudb.backup.restore import Restore
from reconciler.kaiwudb.backup.targets import TargetError, VolumeTarget
from reconciler.kaiwudb.certs.authority import new_ca
from reconciler.kaiwudb.kwbase.admin import KwbaseSettings
from reconciler.kaiwudb.kwbase.sql import SqlAnswer
from reconciler.kaiwudb.statements import BulkStatements
from reconciler.kube import kinds as k
from reconciler.model import Pass
from renderer.render import read_live
from tests.support.backup_world import NS, Site, a_site, load_shop
from tests.world.kwdb.data import SequenceOptions


def fetch(server: BackupFileServer, url: str | urllib.request.Request, *,
          check_hostname: bool = True) -> Any:
    """urlopen, as KWDB's https storage connects once the restore trusts the file server: its
    CA added to the system's, the host checked against the certificate's names."""
    context = ssl.create_default_context(cadata=server.ca_pem())
    context.check_hostname = check_hostname
    return urllib.request.urlopen(url, timeout=5, context=context)


# How long a pass waits for an IMPORT it started: the file server answers over TLS, so even a
# small database's IMPORT takes a good part of a second on a busy machine.
IMPORT_WAIT_S = 2.0


@pytest.fixture
def server() -> Iterator[BackupFileServer]:
    found = BackupFileServer("127.0.0.1:0", "127.0.0.1", poll_s=0.01)
    try:
        yield found
    finally:
        found.stop()


def backed_up(tmp_path: Path, kwbase: KwbaseSettings | None = None) -> Site:
    """The shop cluster "dev", backed up completely as KaiwuBackup "first"."""
    site = a_site(tmp_path, kwbase=kwbase, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    site.backup("first")
    site.run_backup()
    assert site.status(k.KAIWU_BACKUP, "first")["phase"] == "completed"
    return site


def record(site: Site, name: str = "fresh") -> dict[str, object] | None:
    obj = site.api.get(k.KAIWU_CLUSTER, NS, name) or {}
    return rp.restore_record((obj.get("metadata") or {}).get("annotations") or {})


def restore_passes(site: Site, restore: Restore, name: str = "fresh",
                   passes: int = 10) -> list[Pass]:
    done = []
    for _ in range(passes):
        p = site.a_pass(name)
        restore.run(p)
        done.append(p)
        site.at(site.now + 1)
        found = record(site, name) or {}
        if found.get("completedAt") or found.get("failed") or p.stalled:
            break
    return done


def sql_run(site: Site, pod_prefix: str) -> list[str]:
    """The statements run through `kwbase sql -e` in a cluster's pods, in order."""
    return [command[command.index("-e") + 1] for pod, command in site.runner.calls
            if pod.startswith(pod_prefix) and "-e" in command]


def test_a_new_cluster_is_filled_from_the_backup_one_import_per_pass(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    passes = restore_passes(site, restore)

    assert site.kwdb.contents((NS, "fresh"), site.now) == site.kwdb.contents((NS, "dev"),
                                                                               site.now)
    found = record(site) or {}
    assert found["backup"] == "first"
    assert found["done"] == ["settings", "users", "database sensors", "database shop"]
    assert found["completedAt"]
    assert [p.not_ready for p in passes[:-1]] == [
        [("Restoring", f"restoring KaiwuBackup first: {i}/4 imports done ({step})")]
        for i, step in enumerate(found["done"], start=1)]
    assert passes[-1].not_ready == [] and passes[-1].stalled == []
    # The record, as the annotation holds it (keys sorted), and as later steps of the same
    # pass see it (the backup step waits for a restore to complete).
    text = json.dumps({"backup": "first", "begunAt": found["begunAt"],
                       "completedAt": found["completedAt"], "done": found["done"]},
                      sort_keys=False)
    assert (site.api.get(k.KAIWU_CLUSTER, NS, "fresh") or {})["metadata"]["annotations"][
        rp.RESTORE_ANNOTATION] == text
    assert passes[-1].obj["metadata"]["annotations"][rp.RESTORE_ANNOTATION] == text
    assert not rp.restore_pending(passes[-1].obj["metadata"]["annotations"], "first")
    assert site.backups.metrics.value("kaiwu_writes_total", {
        "verb": "patch", "kind": "KaiwuCluster"}) == 6, "the record: begun, 4 imports, done"
    assert [e[:2] for p in passes for e in p.events] == [("Normal", "RestoreStep")] * 4 + [
        ("Normal", "RestoreCompleted")]
    manifest = json.loads((site.files("dev", "first") / bp.MANIFEST_FILE).read_text())
    assert passes[-1].events[-1][2] == (f"KaiwuBackup/first: 4 imports done; relational tables "
                                        f"as of {manifest['consistentToTime']}")
    run = sql_run(site, "fresh-")
    imports = [s for s in run if s.startswith("IMPORT")]
    assert len(imports) == 4 and all("https://127.0.0.1:" in s for s in imports)
    # KaiwuDB trusted the file server's CA for the imports, and no longer does.
    writes = [s for s in run if s.startswith(("SET CLUSTER SETTING cloudstorage",
                                              "RESET CLUSTER SETTING cloudstorage"))]
    assert writes == [f"SET CLUSTER SETTING cloudstorage.http.custom_ca = '{server.ca_pem()}'",
                      "RESET CLUSTER SETTING cloudstorage.http.custom_ca"]
    assert run.index(writes[0]) < run.index(imports[0])
    assert run.index(writes[1]) > run.index(imports[-1])
    assert setting(site) == ""
    # The backup is no longer served.
    url = imports[0].split('("')[1].split('")')[0]
    with pytest.raises(urllib.error.HTTPError) as gone:
        fetch(server, url)
    assert gone.value.code == 404
    # A completed restore does nothing more; a file server still publishing the backup (an
    # earlier leader's, say) stops.
    p = site.a_pass("fresh")
    calls = len(site.runner.calls)
    dev = read_live(site.api.get(k.KAIWU_CLUSTER, NS, "dev") or {})
    url = server.publish(f"{NS}/fresh", site.backups.target(
        dev, site.api.get(k.KAIWU_BACKUP, NS, "first") or {}))
    restore.run(p)
    assert len(site.runner.calls) == calls and p.not_ready == [] and p.events == []
    with pytest.raises(urllib.error.HTTPError) as gone:
        fetch(server, url + "/manifest.json")
    assert gone.value.code == 404


def test_the_restore_is_recorded_as_begun_before_its_first_import_and_checked_only_then(
        tmp_path: Path, server: BackupFileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record says a restore began before anything is imported (a reconciler that dies
    during that import finds it); the backup's files are read for their checksums once, before
    that import, not again on every pass (on S3, every pass would download the whole backup)."""
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    seen_at_import: list[dict[str, object] | None] = []
    run = site.runner.exec

    def exec_pod(namespace: str, pod: str, container: str, command: list[str],
                 timeout: float = 60.0) -> tuple[str, str, int]:
        if any(arg.startswith("IMPORT") for arg in command):
            seen_at_import.append(record(site))
        return run(namespace, pod, container, command, timeout)
    monkeypatch.setattr(site.runner, "exec", exec_pod)
    reads: list[str] = []
    target_get = VolumeTarget.get

    def get(self: VolumeTarget, key: str) -> bytes | None:
        reads.append(key)
        return target_get(self, key)
    monkeypatch.setattr(VolumeTarget, "get", get)

    restore_passes(site, restore)

    first = seen_at_import[0] or {}
    assert {key: first.get(key) for key in ("backup", "done")} == {"backup": "first", "done": []}
    assert first.get("begunAt"), "when this attempt began: older KWDB jobs are not its"
    assert len(seen_at_import) == 4 and (record(site) or {}).get("completedAt")
    assert reads.count("d1/public/orders/n1.0.csv") == 3, \
        "its checksum, then the HEAD and the ranged GET of its IMPORT"


def test_the_restore_waits_for_its_backup_to_complete(tmp_path: Path,
                                                      server: BackupFileServer) -> None:
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    slower = replace(site.backups.ctx.settings, backup_poll_s=2.5)
    restore = Restore(replace(site.backups.ctx, settings=slower), site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    p = site.a_pass("fresh")
    p.not_ready.append(("WaitingForPods", "fresh-2 is not Ready"))  # found by an earlier step
    restore.run(p)
    assert p.not_ready == [("Restoring", "KaiwuBackup first does not exist; the restore waits "
                                         "for it to complete"),
                           ("WaitingForPods", "fresh-2 is not Ready")], "Ready says Restoring"
    p.not_ready.pop()
    assert p.progressing == p.not_ready and min(p.requeue) == pytest.approx(2.5)

    site.backup("first")
    p = site.a_pass("fresh")
    restore.run(p)
    assert p.not_ready == [("Restoring", "KaiwuBackup first is new; the restore waits for it "
                                         "to complete")]
    site.backups.run(site.a_pass("dev"))
    p = site.a_pass("fresh")
    restore.run(p)
    assert p.not_ready[0][1].startswith("KaiwuBackup first is running;")
    assert record(site) is None and sql_run(site, "fresh-") == []


def test_a_cluster_that_holds_data_is_refused_and_left_untouched(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    for database in ("crm", "billing"):
        site.kwdb.load((NS, "fresh"), site.now, database=database, table="leads",
                       columns=[("id", "INT8")], rows=[("1",)])
    for user in ("sales", "audit"):
        site.kwdb.set_user((NS, "fresh"), site.now, user)
    before = site.kwdb.contents((NS, "fresh"), site.now)

    p = site.a_pass("fresh")
    restore.run(p)

    assert p.stalled == [("RestoreRefused", "spec.bootstrap.fromBackup: the cluster already "
                          "holds data (databases billing, crm; users audit, sales); a backup is "
                          "restored only into a new, empty cluster")]
    assert record(site) is None
    assert site.kwdb.contents((NS, "fresh"), site.now) == before
    assert not [s for s in sql_run(site, "fresh-") if s.startswith("IMPORT")]


def test_a_damaged_backup_fails_the_restore_before_anything_is_imported(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    orders = site.files("dev", "first") / "d1/public/orders/n1.0.csv"
    orders.write_text(orders.read_text().replace("tea", "tee"))

    passes = restore_passes(site, restore)

    (reason, message), = passes[-1].stalled
    assert reason == "RestoreFailed"
    assert message.startswith("restore from KaiwuBackup first: the backup is not intact: "
                              "d1/public/orders/n1.0.csv: checksum ")
    assert passes[-1].events == [("Warning", "RestoreFailed", message)]
    assert (record(site) or {})["failed"] == message
    assert not [s for s in sql_run(site, "fresh-") if s.startswith("IMPORT")]
    # Later passes report it again and import nothing; the Warning was sent once, the record
    # written once. The first of them makes sure no file server's CA is left trusted (this
    # restore never got so far: nothing to change); after that, nothing runs at all.
    writes = len(site.api.writes)
    for expected_calls in (1, 0):
        p = site.a_pass("fresh")
        calls = len(site.runner.calls)
        restore.run(p)
        assert p.stalled == [("RestoreFailed", message)] and p.events == []
        assert len(site.runner.calls) == calls + expected_calls
    assert sql_run(site, "fresh-")[-1] == "SHOW CLUSTER SETTING cloudstorage.http.custom_ca"
    assert len(site.api.writes) == writes


def test_a_database_there_although_its_import_was_not_recorded_stops_the_restore(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    for _ in range(3):  # settings, users, database sensors
        restore.run(site.a_pass("fresh"))
    # Somebody made a database shop meanwhile: no IMPORT job of KaiwuDB's made it.
    site.kwdb.load((NS, "fresh"), site.now, database="shop", table="orders",
                   columns=[("id", "INT8")], rows=[("1",)])

    p = site.a_pass("fresh")
    restore.run(p)

    assert p.stalled == [("RestoreFailed", (
        "restore from KaiwuBackup first: database shop: exists although no import of it is "
        "recorded or known to KWDB; drop it and delete the annotation kaiwu.inspur.com/restore "
        "to restart"))]


def test_users_imported_before_a_crash_are_not_imported_again(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    restore.run(site.a_pass("fresh"))  # settings
    site.kwdb.set_user((NS, "fresh"), site.now, "app")  # imported, never recorded

    p = site.a_pass("fresh")
    restore.run(p)

    assert (record(site) or {})["done"] == ["settings", "users"]
    assert p.events == [("Normal", "RestoreStep", "KaiwuBackup/first: users imported")]
    assert not [s for s in sql_run(site, "fresh-") if s.startswith("IMPORT USERS")]
    restore_passes(site, restore)
    assert site.kwdb.contents((NS, "fresh"), site.now) == site.kwdb.contents((NS, "dev"),
                                                                               site.now)


def test_users_count_as_imported_when_every_user_of_the_backup_exists(tmp_path: Path) -> None:
    class Admin:
        def __init__(self, *users: str) -> None:
            self.users = users

        def sql(self, pod: str, statement: str) -> SqlAnswer:
            assert statement == "SHOW USERS"
            return SqlAnswer(("username",), tuple({"username": u} for u in self.users), ())

    target = VolumeTarget(tmp_path, "dumps", "shop/dev/first")
    target.put("users/users.sql", b"CREATE USER app;\nCREATE USER audit WITH CREATEROLE;\n")

    assert Restore.users_there(Admin("app", "audit"), "fresh-0", target), "exactly those"
    assert Restore.users_there(Admin("root", "admin", "app", "audit"), "fresh-0", target)
    assert not Restore.users_there(Admin("root", "admin", "app"), "fresh-0", target)
    target.put("users/users.sql", b"")
    assert not Restore.users_there(Admin("root", "admin"), "fresh-0", target), "no user: import"


def test_a_lagging_cache_does_not_run_an_import_twice(tmp_path: Path,
                                                      server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    stale = site.a_pass("fresh")  # the cluster as the cache shows it: no record yet
    restore.run(site.a_pass("fresh"))  # settings imported and recorded

    restore.run(stale)  # a pass on the stale object
    assert stale.events == [("Normal", "RestoreStep", "KaiwuBackup/first: users imported")]
    assert [s.split(" ")[1] for s in sql_run(site, "fresh-") if s.startswith("IMPORT")] == [
        "CLUSTER", "USERS"]

    # Forgotten (the cluster was deleted): the annotation is all there is.
    restore.forget(NS, "fresh")
    assert restore.recall(stale.cluster, None) is None  # type: ignore[arg-type]


def test_no_ready_pod_with_a_live_node_keeps_the_restore_waiting(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    for ordinal in range(3):
        site.api.objects[("Pod", NS, f"fresh-{ordinal}")]["status"]["conditions"] = [
            {"type": "Ready", "status": "False"}]

    p = site.a_pass("fresh")
    restore.run(p)

    assert p.not_ready == [("Restoring", "no Ready pod with a live KaiwuDB node to import "
                                         "through")]
    assert record(site) is None


def test_the_file_server_lists_directories_and_serves_only_what_is_published(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    dev = read_live(site.api.get(k.KAIWU_CLUSTER, NS, "dev") or {})
    target = site.backups.target(dev, site.api.get(k.KAIWU_BACKUP, NS, "first") or {})
    url = server.publish("shop/fresh", target)
    assert server.publish("shop/fresh", target) == url, "the same key keeps its token"

    def get(path: str) -> tuple[int, bytes]:
        try:
            with fetch(server, url + path) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as err:
            return err.code, b""

    status, index = get("/d1/")
    assert status == 200
    assert index.decode() == ('<html><body><pre>\n<a href="meta.sql">meta.sql</a>\n'
                              '<a href="public/">public/</a>\n</pre></body></html>\n')
    assert get("/d1/public/orders/n1.0.csv") == (200, b"1,tea\n2,rice\n3,salt\n")
    assert get("/d1/public/nothing.csv")[0] == 404
    assert get("/../dev/first/plan.json")[0] == 404
    assert get("/d1/../plan.json")[0] == 404
    root = get("/")[1].decode()
    assert '<a href="manifest.json">manifest.json</a>' in root and '<a href="d1/">' in root
    other = url.rsplit("/", 1)[0] + "/not-a-token/plan.json"
    with pytest.raises(urllib.error.HTTPError):
        fetch(server, other)
    server.withdraw("shop/fresh")
    assert get("/d1/public/orders/n1.0.csv")[0] == 404


def test_what_this_process_wrote_wins_over_a_lagging_cache_unless_the_cache_went_further(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    restore = Restore(site.backups.ctx, site.backups, server)
    cluster = site.start_cluster("fresh", restore_from="first")
    p = site.a_pass("fresh")
    restore.annotate(p, cluster, {"backup": "first", "done": ["settings", "users", "db"]})

    assert restore.recall(cluster, None) == {"backup": "first",
                                             "done": ["settings", "users", "db"]}
    behind = {"backup": "first", "done": ["settings"]}
    assert restore.recall(cluster, behind)["done"] == ["settings", "users", "db"]  # type: ignore
    failed = {"backup": "first", "done": ["settings"], "failed": "the backup is not intact"}
    assert restore.recall(cluster, failed) == failed, "a finished record outranks more imports"
    completed = {"backup": "first", "done": ["settings"], "completedAt": "2026-01-01T00:00:00Z"}
    assert restore.recall(cluster, completed) == completed, "so does a completed one"
    other = {"backup": "second", "done": []}
    assert restore.recall(cluster, other) == other, "a record of another backup is not ours"

    restore.annotate(p, cluster, {"backup": "first", "done": ["settings"], "failed": "boom"})
    ahead = {"backup": "first", "done": ["settings", "users"]}
    assert restore.recall(cluster, ahead)["failed"] == "boom"  # type: ignore[index]

    restore.forget(NS, "fresh")
    restore.forget(NS, "never-restored")
    assert restore.recall(cluster, ahead) == ahead


def test_a_backup_without_its_manifest_fails_the_restore(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    (site.files("dev", "first") / bp.MANIFEST_FILE).unlink()

    p = site.a_pass("fresh")
    restore.run(p)

    assert p.stalled == [("RestoreFailed", "restore from KaiwuBackup first: the backup is not "
                                           "intact: manifest.json is missing or lists no files")]


def test_a_pod_that_stopped_answering_fails_the_restore_before_it_began(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    p = site.a_pass("fresh")  # the cache still shows every pod Ready
    for ordinal in range(3):
        site.kwdb.stop_process((NS, "fresh"), f"fresh-{ordinal}", site.now)

    restore.run(p)

    (reason, message), = p.stalled
    assert reason == "RestoreFailed"
    assert message.startswith("restore from KaiwuBackup first: ")
    assert record(site) == {"backup": "first", "failed": message}


def test_the_restore_step_runs_for_an_initialised_cluster_made_from_a_backup(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("dev")
    site.start_cluster("fresh", restore_from="first")

    assert restore.wanted(site.a_pass("fresh"))
    assert not restore.wanted(site.a_pass("dev")), "no spec.bootstrap.fromBackup"
    assert not restore.wanted(site.a_pass("fresh", initialized=False))
    halted = site.a_pass("fresh")
    halted.halted = True
    assert not restore.wanted(halted)
    site.api.objects[("KaiwuCluster", NS, "fresh")]["metadata"]["annotations"] = {
        "kaiwu.inspur.com/paused": "true"}
    assert not restore.wanted(site.a_pass("fresh"))


def test_the_file_server_serves_nothing_outside_the_backup(
        tmp_path: Path, server: BackupFileServer) -> None:
    """KaiwuDB's SQL users can see an IMPORT's URL in SHOW JOBS: a path that joins to an absolute
    one (an empty segment) or climbs out must not reach the reconciler's own files."""
    site = backed_up(tmp_path)
    dev = read_live(site.api.get(k.KAIWU_CLUSTER, NS, "dev") or {})
    url = server.publish("shop/fresh", site.backups.target(
        dev, site.api.get(k.KAIWU_BACKUP, NS, "first") or {}))
    secret = tmp_path / "token"
    secret.write_text("the reconciler's service account token")

    for path in (f"/{secret}", f"//{secret}", f"/d1//{secret}", "/d1/../../../x", "/d1//"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            fetch(server, url + path)
        assert refused.value.code == 404, path
    with fetch(server, url + "/d1/meta.sql") as answer:
        assert answer.status == 200


def test_the_file_server_says_what_it_sends_and_logs_what_fails(
        tmp_path: Path, server: BackupFileServer, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    site = backed_up(tmp_path)
    dev = read_live(site.api.get(k.KAIWU_CLUSTER, NS, "dev") or {})
    target = site.backups.target(dev, site.api.get(k.KAIWU_BACKUP, NS, "first") or {})
    monkeypatch.setattr("secrets.token_urlsafe", lambda n: "X-token-starting-with-X")
    caplog.set_level(logging.DEBUG, logger="reconciler.kaiwudb.backup.file_server")
    url = server.publish("shop/fresh", target)
    assert url.endswith("/X-token-starting-with-X")
    assert [t.daemon for t in threading.enumerate() if t.name == "restore-files"] == [True]

    with fetch(server, url + "/d1/") as index:
        assert index.headers["Content-Type"] == "text/html; charset=utf-8"
        assert int(index.headers["Content-Length"]) == len(index.read())
    with fetch(server, url + "/users/users.sql") as file:
        assert file.headers["Content-Type"] == "application/octet-stream"
        assert file.headers["Content-Length"] == "17" and file.read() == b"CREATE USER app;\n"
    assert any(r.getMessage().startswith('restore server: "GET /X-token-starting-with-X/d1/ ')
               for r in caplog.records)

    def broken(key: str) -> bytes:
        raise TargetError("s3://backups/x: ConnectionError: refused")
    monkeypatch.setattr(target, "get", broken)
    with pytest.raises(urllib.error.HTTPError) as failed:
        fetch(server, url + "/users/users.sql")
    assert failed.value.code == 502
    assert "restore server: s3://backups/x: ConnectionError: refused" in [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    # Withdrawn, the token is dead for good: publishing again gives a new one.
    monkeypatch.setattr("secrets.token_urlsafe", lambda n: "another-token")
    server.withdraw("shop/fresh")
    assert server.publish("shop/fresh", target).endswith("/another-token")
    assert ipaddress.ip_address(default_advertise_host())


def test_the_file_server_listens_where_it_is_told_and_says_where_pods_reach_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings.restore_http_address is host:port: an empty host is every interface, an empty
    port any free one; the URLs name the advertised host and the port listened on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    target = VolumeTarget(tmp_path, "dumps", "shop/dev/first")
    target.put("users/users.sql", b"CREATE USER app;\n")
    for address, bound in ((f"127.0.0.1:{free}", ("127.0.0.1", free)),
                           (":0", ("0.0.0.0", None)), ("127.0.0.1:", ("127.0.0.1", None))):
        server = BackupFileServer(address, "10.1.2.3", poll_s=0.01)
        try:
            url = server.publish("shop/fresh", target)
            host, port = server._server.server_address[:2]  # type: ignore[union-attr]
            assert (host, port if bound[1] else None) == bound, address
            assert port >= 1024, "no fixed port unless one is given"
            assert url.startswith(f"https://10.1.2.3:{port}/")
            local = url.replace("10.1.2.3", "127.0.0.1")
            with fetch(server, local + "/users/users.sql", check_hostname=False) as answer:
                assert answer.read() == b"CREATE USER app;\n"
        finally:
            server.stop()

    def unknown(name: str) -> str:
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(socket, "gethostbyname", unknown)
    assert default_advertise_host() == "127.0.0.1"


def test_a_stopped_file_server_starts_again_when_a_restore_needs_it(
        tmp_path: Path, server: BackupFileServer) -> None:
    target = VolumeTarget(tmp_path, "dumps", "shop/dev/first")
    target.put("users/users.sql", b"CREATE USER app;\n")
    server.publish("shop/fresh", target)
    server.stop()
    server.stop()  # stopping twice is harmless

    url = server.publish("shop/fresh", target)

    with fetch(server, url + "/users/users.sql") as answer:
        assert answer.read() == b"CREATE USER app;\n"


def test_an_import_that_does_not_succeed_fails_the_restore_naming_the_step(
        tmp_path: Path, server: BackupFileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    run = site.runner.exec

    def users_import_fails(namespace: str, pod: str, container: str, command: list[str],
                           timeout: float = 60.0) -> tuple[str, str, int]:
        if any(arg.startswith("IMPORT USERS") for arg in command):
            return ("job_id,status,fraction_completed,rows,abandon_rows,reject_rows,note\n"
                    "7,failed,0,0,0,0,None\n", "", 0)
        return run(namespace, pod, container, command, timeout)
    monkeypatch.setattr(site.runner, "exec", users_import_fails)

    passes = restore_passes(site, restore)

    assert passes[-1].stalled == [("RestoreFailed", "restore from KaiwuBackup first: users: "
                                                    "IMPORT job 7 ended failed")]
    assert (record(site) or {})["done"] == ["settings"]


def test_an_import_that_reports_a_notice_fails_the_restore(
        tmp_path: Path, server: BackupFileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    run = site.runner.exec

    def settings_import_warns(namespace: str, pod: str, container: str, command: list[str],
                              timeout: float = 60.0) -> tuple[str, str, int]:
        stdout, stderr, code = run(namespace, pod, container, command, timeout)
        if any(arg.startswith("IMPORT CLUSTER SETTING") for arg in command):
            stderr += "NOTICE: setting sql.defaults.idle_timeout skipped\n"
        return stdout, stderr, code
    monkeypatch.setattr(site.runner, "exec", settings_import_warns)

    p = site.a_pass("fresh")
    restore.run(p)

    assert p.stalled == [("RestoreFailed", "restore from KaiwuBackup first: settings: IMPORT "
                                           "reported: setting sql.defaults.idle_timeout skipped")]


def test_a_restarted_reconciler_carries_on_from_the_record_on_the_cluster(
        tmp_path: Path, server: BackupFileServer) -> None:
    """The annotation is the memory: a new process (nothing in memory) sees settings and users
    imported, does not refuse the cluster for holding the users it imported, and goes on."""
    site = backed_up(tmp_path)
    site.start_cluster("fresh", restore_from="first")
    first = Restore(site.backups.ctx, site.backups, server)
    for _ in range(2):  # settings, users
        first.run(site.a_pass("fresh"))

    restarted = Restore(site.backups.ctx, site.backups, server)
    p = site.a_pass("fresh")
    restarted.run(p)

    assert p.stalled == []
    assert (record(site) or {})["done"] == ["settings", "users", "database sensors"]


def test_the_restore_imports_through_a_ready_pod_whose_node_is_live(
        tmp_path: Path, server: BackupFileServer) -> None:
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    nodes = site.nodes("fresh")
    nodes[0] = {**nodes[0], "state": "not-live"}  # fresh-0: Ready, its node not live

    restore.run(site.a_pass("fresh", nodes=nodes))

    assert {pod for pod, command in site.runner.calls
            if pod.startswith("fresh-") and any(a.startswith("IMPORT") for a in command)} == {
        "fresh-1"}


def test_an_empty_database_and_names_that_need_quotes_come_back_as_they_were(
        tmp_path: Path, server: BackupFileServer) -> None:
    """A database without tables, a mixed-case database and a table whose name would end a
    statement survive the round trip exactly."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    key = (NS, "dev")
    site.kwdb.create_database(key, site.now, "staging")
    site.kwdb.load(key, site.now, database="Sales Q1", table="t; GRANT admin TO app; --",
                   columns=[("id", "INT8")], rows=[("1",), ("2",)])
    site.backup("first")
    site.run_backup()
    assert site.status(k.KAIWU_BACKUP, "first")["phase"] == "completed"
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    restore_passes(site, restore)

    assert (record(site) or {}).get("completedAt"), record(site)
    assert site.kwdb.contents((NS, "fresh"), site.now) == site.kwdb.contents(key, site.now)
    assert "staging" in str(site.kwdb.contents((NS, "fresh"), site.now)["databases"])


def test_tables_of_every_schema_come_back_not_only_public(
        tmp_path: Path, server: BackupFileServer) -> None:
    """`SHOW TABLES FROM db` lists the public schema only (delegate/show_tables.go:82-90): a
    backup built on it restored a database without its other schemas and said it succeeded.
    Tables are now read from kwdb_internal.create_statements, every schema."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    key = (NS, "dev")
    site.kwdb.load(key, site.now, database="shop", schema="sales", table="orders",
                   columns=[("id", "INT8"), ("total", "DECIMAL")], rows=[("1", "9.50")])
    site.backup("first")
    site.run_backup()
    status = site.status(k.KAIWU_BACKUP, "first")
    assert status["phase"] == "completed", status.get("message")
    assert {d["name"]: d["tables"] for d in status["databases"]}["shop"] == 3
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    restore_passes(site, restore)

    restored = site.kwdb.contents((NS, "fresh"), site.now)
    assert restored == site.kwdb.contents(key, site.now)
    assert "'sales.orders': [('1', '9.50')]" in str(restored["databases"])


def test_the_file_server_answers_what_kwdbs_http_storage_asks(
        tmp_path: Path, server: BackupFileServer) -> None:
    """KWDB's HTTP storage (storage/cloud/http_storage.go) lists a directory at its path
    without the trailing slash (path.Join drops it), sizes a file with HEAD and reads it by
    byte ranges; names go into links as they are, HTML-escaped, never percent-encoded."""
    target = VolumeTarget(tmp_path, "dumps", "shop/dev/first")
    target.put("d0/public/my table & co/n1.0.csv", b"1,tea\n2,rice\n")
    target.put("d0/public/my table & co/n1.1.csv", b"3,salt\n")
    url = server.publish("shop/fresh", target)

    def ask(path: str, method: str = "GET", headers: dict[str, str] | None = None
            ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(url + path, method=method, headers=headers or {})
        try:
            with fetch(server, request) as answer:
                return answer.status, dict(answer.headers.items()), answer.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers.items()), b""

    status, _, page = ask("/d0/public")
    assert status == 200, "a directory without its trailing slash"
    assert '<a href="my table &amp; co/">' in page.decode()
    status, _, page = ask("/d0/public/my%20table%20%26%20co")
    assert '<a href="n1.0.csv">' in page.decode() and '<a href="n1.1.csv">' in page.decode()
    status, headers, body = ask("/d0/public/my%20table%20%26%20co/n1.0.csv", "HEAD")
    assert (status, headers["Content-Length"], headers["Accept-Ranges"], body) == (
        200, "13", "bytes", b"")
    status, headers, body = ask("/d0/public/my%20table%20%26%20co/n1.0.csv",
                                headers={"Range": "bytes=6-"})
    assert (status, headers["Content-Range"], body) == (206, "bytes 6-12/13", b"2,rice\n")
    status, headers, body = ask("/d0/public/my%20table%20%26%20co/n1.0.csv",
                                headers={"Range": "bytes=0-13"})
    assert (status, body) == (206, b"1,tea\n2,rice\n"), "an end past the file is clamped"
    assert ask("/d0/public/my%20table%20%26%20co/n1.0.csv",
               headers={"Range": "bytes=99-"})[0] == 416
    target.put("d0/public/empty/n1.0.csv", b"")
    assert ask("/d0/public/empty/n1.0.csv", headers={"Range": "bytes=0-0"})[:3:2] == (
        200, b""), "an empty file is sent whole: KWDB reads one as the range 0-0"
    assert ask("/d0/nothing")[0] == 404
    assert ask("/d0/./public")[0] == 404


def test_a_table_exported_in_several_files_is_restored_whole(
        tmp_path: Path, server: BackupFileServer) -> None:
    """KWDB writes a new data file every chunk_rows rows (export.go:113); IMPORT reads each
    file of a table's folder through the file server, as KWDB's HTTP client asks."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    key = (NS, "dev")
    site.kwdb.set_export_chunk_rows(key, site.now, 2)
    site.backup("first")
    site.run_backup()
    assert site.status(k.KAIWU_BACKUP, "first")["phase"] == "completed"
    orders = sorted(p.name for p in (site.files("dev", "first") / "d1/public/orders").iterdir())
    assert orders == ["meta.sql", "n1.0.csv", "n1.1.csv"]
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    restore_passes(site, restore)

    assert site.kwdb.contents((NS, "fresh"), site.now) == site.kwdb.contents(key, site.now)


def test_an_empty_table_and_a_cluster_without_settings_are_restored(
        tmp_path: Path, server: BackupFileServer) -> None:
    """An empty table exports no data file at all (exportcsv.go:476-478, 493-496), and a
    cluster with no setting of its own an empty clustersetting.sql, which IMPORT reads with
    one plain GET (ReadFile): both come back."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    key = (NS, "dev")
    site.kwdb.load(key, site.now, database="shop", table="returns",
                   columns=[("id", "INT8")], rows=[])
    site.kwdb.load(key, site.now, database="shop", table="orders",
                   columns=[("id", "INT8")], rows=[("1",)])
    site.backup("first")
    site.run_backup()
    assert site.status(k.KAIWU_BACKUP, "first")["phase"] == "completed"
    assert [p.name for p in (site.files("dev", "first") / "d0/public/returns").iterdir()] \
        == ["meta.sql"]
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    passes = restore_passes(site, restore, passes=12)

    assert (record(site) or {}).get("completedAt"), passes[-1].stalled
    assert site.kwdb.contents((NS, "fresh"), site.now) == site.kwdb.contents(key, site.now)


def test_a_failed_import_never_shows_the_file_servers_url_and_withdraws_it(
        tmp_path: Path, server: BackupFileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The URL's token lets anyone who can reach the server read the whole backup. A failing
    IMPORT's error quotes its statement, URL included: the condition, the Event and the
    annotation say where it failed without it, and the token stops working."""
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    run = site.runner.exec
    urls: list[str] = []

    def database_import_errors(namespace: str, pod: str, container: str, command: list[str],
                               timeout: float = 60.0) -> tuple[str, str, int]:
        statement = next((a for a in command if a.startswith("IMPORT DATABASE")), None)
        if statement is not None:
            urls.append(statement.split('"')[1])
            return "", "ERROR: disk full\nFailed running \"sql\"\n", 1
        return run(namespace, pod, container, command, timeout)
    monkeypatch.setattr(site.runner, "exec", database_import_errors)

    passes = restore_passes(site, restore)

    token = urls[0].split("/")[3]
    (reason, message), = passes[-1].stalled
    assert reason == "RestoreFailed" and "disk full" in message
    assert "<restore file server>" in message
    said = [message, *(text for p in passes for _, _, text in p.events),
            json.dumps(record(site))]
    assert not [text for text in said if token in text]
    with pytest.raises(urllib.error.HTTPError) as gone:
        fetch(server, urls[0] + "/meta.sql")
    assert gone.value.code == 404


# ---- the file server speaks TLS, trusted by KaiwuDB only while a restore needs it -------------

CUSTOM_CA = "cloudstorage.http.custom_ca"


def setting(site: Site, name: str = "fresh") -> str:
    settings = site.kwdb.contents((NS, name), site.now)["settings"]
    assert isinstance(settings, dict)
    return str(settings.get(CUSTOM_CA, ""))


def test_kaiwudb_reads_the_file_server_only_once_it_is_told_to_trust_its_ca(
        tmp_path: Path, server: BackupFileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """KWDB's https storage trusts the system's roots and cloudstorage.http.custom_ca, nothing
    else (storage/cloud/http_storage.go:76-87). A restore that did not tell it fails on its
    first import, with Go's words, and without the file server's URL."""
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    monkeypatch.setattr(Restore, "trust", lambda self, *args: True)  # never writes the setting

    passes = restore_passes(site, restore)

    (reason, message), = passes[-1].stalled
    assert reason == "RestoreFailed"
    assert ("Get <restore file server>/settings/clustersetting.sql: x509: certificate signed "
            "by unknown authority") in message
    assert (record(site) or {})["done"] == []


def test_a_restore_resumed_by_another_process_trusts_only_its_file_server_and_keeps_the_users(
        tmp_path: Path, server: BackupFileServer) -> None:
    """A user's own CA in the setting stays; a file server CA of a reconciler that is gone is
    taken out when the next one puts its own in; a database's import waits a moment after that
    write (the other nodes hear of the setting by gossip); at the end only the user's is left."""
    site = backed_up(tmp_path)
    users = new_ca("the user's own CA", datetime.now(UTC)).cert_pem.decode()
    site.start_cluster("fresh", restore_from="first")
    site.kwdb.set_setting((NS, "fresh"), site.now, CUSTOM_CA, users)
    first = Restore(site.backups.ctx, site.backups, server)
    for _ in range(2):  # settings, users
        first.run(site.a_pass("fresh"))
        site.at(site.now + 1)
    assert setting(site) == users + server.ca_pem()
    assert (record(site) or {})["done"] == ["settings", "users"]
    later = BackupFileServer("127.0.0.1:0", "127.0.0.1", poll_s=0.01)
    try:
        second = Restore(site.backups.ctx, site.backups, later)
        p = site.a_pass("fresh")
        second.run(p)
        assert setting(site) == users + later.ca_pem(), "the gone process's CA is out"
        assert p.not_ready == [("Restoring", (
            "restoring KaiwuBackup first: KaiwuDB is told to trust the reconciler's file server "
            "(cloudstorage.http.custom_ca); the import goes on once every node has heard"))]
        assert min(p.requeue) == pytest.approx(5.0)
        assert (record(site) or {})["done"] == ["settings", "users"], "nothing imported yet"

        restore_passes(site, second)
    finally:
        later.stop()

    assert (record(site) or {}).get("completedAt")
    assert setting(site) == users


def test_only_the_file_servers_own_cas_are_taken_out_of_the_setting() -> None:
    """The setting is anyone's with admin rights: text that is no certificate, a certificate
    that does not parse and a user's CA are kept as they are unless a file server's CA must
    go in or out; every certificate named as a file server's CA goes."""
    now = datetime.now(UTC)
    ours = new_ca(RESTORE_CA_NAME, now).cert_pem.decode()
    gone = new_ca(RESTORE_CA_NAME, now).cert_pem.decode()
    users = new_ca("the user's own CA", now).cert_pem.decode()
    broken = "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----"
    hostile = f"'; DROP DATABASE shop; --\n{users}{broken}\n"

    assert custom_ca_with("", None) == ""
    assert custom_ca_with(hostile, None) == hostile, "nothing of ours: left as it is"
    assert custom_ca_with("", ours) == ours
    assert custom_ca_with(hostile, ours) == users + broken + "\n" + ours
    assert custom_ca_with(users + ours, ours) == users + ours, "already trusted: unchanged"
    assert custom_ca_with(users + gone, ours) == users + ours
    assert custom_ca_with(ours + gone + users, None) == users


def test_a_hostile_setting_is_read_in_one_pass_and_a_huge_one_is_refused() -> None:
    """BEGIN lines without an END are no certificate (a lazy pattern took minutes on a few
    hundred KiB of them); a value past CUSTOM_CA_MAX_CHARS is not read at all."""
    ours = new_ca(RESTORE_CA_NAME, datetime.now(UTC)).cert_pem.decode()
    begins = "-----BEGIN CERTIFICATE-----\n" * 8000  # 224 KB
    assert pem_certificates(begins) == []
    assert pem_certificates(begins + ours) == [ours.strip()]
    assert custom_ca_with(begins + ours, None) == ""
    with pytest.raises(ValueError, match=r"RESET CLUSTER SETTING cloudstorage\.http\.custom_ca"):
        custom_ca_with("x" * (CUSTOM_CA_MAX_CHARS + 1), ours)
    # A control character makes kwbase print the whole value Go-quoted: not rewritten.
    quoted = (ours + "\x01").replace("\n", "\\n")
    with pytest.raises(ValueError, match="prints escaped"):
        custom_ca_with(quoted, None)


def test_the_file_servers_ca_signs_only_for_its_own_address(tmp_path: Path) -> None:
    """While KWDB trusts it, the CA must not vouch for any other https server KWDB may reach."""
    server = BackupFileServer("127.0.0.1:0", "10.1.2.3", poll_s=0.01)
    try:
        ca = x509.load_pem_x509_certificate(server.ca_pem().encode())
    finally:
        server.stop()
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.permitted_subtrees == [
        x509.IPAddress(ipaddress.ip_network("10.1.2.3/32"))]


def test_the_file_servers_certificate_names_the_host_kaiwudb_is_given(tmp_path: Path) -> None:
    """KWDB checks the certificate against the host of the URL (Go's crypto/tls): the
    advertised host is its name; the port speaks nothing but TLS."""
    target = VolumeTarget(tmp_path, "dumps", "shop/dev/first")
    target.put("users/users.sql", b"CREATE USER app;\n")
    server = BackupFileServer("127.0.0.1:0", "10.1.2.3", poll_s=0.01)
    try:
        url = server.publish("shop/fresh", target).replace("10.1.2.3", "127.0.0.1")
        with pytest.raises(urllib.error.URLError) as wrong_name:
            fetch(server, url + "/users/users.sql")
        assert isinstance(wrong_name.value.reason, ssl.SSLCertVerificationError)
        assert "IP address mismatch" in str(wrong_name.value.reason)
        with pytest.raises(urllib.error.URLError) as untrusted:
            urllib.request.urlopen(url + "/users/users.sql", timeout=5)
        assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            urllib.request.urlopen(url.replace("https://", "http://") + "/users/users.sql",
                                   timeout=5)
    finally:
        server.stop()


# ---- imports that outlive their exec (issue 24 item 5) ----------------------------------------


def slow_shop_import(tmp_path: Path, server: BackupFileServer,
                     kwbase: KwbaseSettings | None = None) -> tuple[Site, Restore]:
    """The backup "first" restored into "fresh" up to its last step, database shop, which
    takes 400 simulated seconds (4 rows at 0.01 rows/s) and has just started."""
    site = backed_up(tmp_path, kwbase)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    for _ in range(3):  # settings, users, database sensors
        restore.run(site.a_pass("fresh"))
        site.at(site.now + 1)
    site.kwdb.set_bulk_rate((NS, "fresh"), site.now, 0.01)
    p = site.a_pass("fresh")
    restore.run(p)
    assert p.not_ready[0][1].startswith(
        "restoring KaiwuBackup first: 3/4 imports done; importing database shop ("), p.not_ready
    return site, restore


def imports_of_shop(site: Site) -> int:
    return sum(1 for s in sql_run(site, "fresh-") if s.startswith("IMPORT DATABASE")
               and s.endswith('/d1")'))


def test_an_import_that_outlives_its_exec_is_waited_for_through_kwdbs_job(
        tmp_path: Path, server: BackupFileServer) -> None:
    site, restore = slow_shop_import(tmp_path, server, KwbaseSettings(long_timeout_s=60.0))
    site.at(site.now + 61)  # the exec gave up; the job goes on without its client
    p = site.a_pass("fresh")
    restore.run(p)
    assert "importing database shop (KWDB job " in p.not_ready[0][1], p.not_ready

    passes = []
    for _ in range(8):
        site.at(site.now + 60)
        p = site.a_pass("fresh")
        restore.run(p)
        passes.append(p)
    found = record(site) or {}
    assert found.get("completedAt"), (found, passes[-1].not_ready, passes[-1].stalled)
    assert imports_of_shop(site) == 1
    assert site.kwdb.contents((NS, "fresh"), site.now) == site.kwdb.contents((NS, "dev"),
                                                                               site.now)


def test_a_reconciler_restarted_during_an_import_checks_the_rows_instead_of_importing_twice(
        tmp_path: Path, server: BackupFileServer) -> None:
    site, _ = slow_shop_import(tmp_path, server)
    # A new reconciler: nothing in memory. The old one's client waits on; the job goes on.
    restarted = Restore(site.backups.ctx, site.backups, server)
    site.backups.statements = BulkStatements(wait_s=0.2)
    site.at(site.now + 5)
    p = site.a_pass("fresh")
    restarted.run(p)
    assert "importing database shop (KWDB job " in p.not_ready[0][1], p.not_ready

    for _ in range(8):
        site.at(site.now + 60)
        restarted.run(site.a_pass("fresh"))
    found = record(site) or {}
    assert found.get("completedAt"), found
    assert imports_of_shop(site) == 1
    counted = [s for s in sql_run(site, "fresh-") if s.startswith("SELECT count(*)")]
    assert counted == ['SELECT count(*) FROM "shop"."public"."customers"',
                       'SELECT count(*) FROM "shop"."public"."orders"']


def test_an_import_whose_files_stopped_answering_fails_the_restore_with_kwdbs_error(
        tmp_path: Path, server: BackupFileServer) -> None:
    site, _ = slow_shop_import(tmp_path, server, KwbaseSettings(long_timeout_s=60.0))
    # The reconciler restarts: its file server, and the token the running IMPORT reads, go.
    server.withdraw(f"{NS}/fresh")
    restarted = Restore(site.backups.ctx, site.backups, server)
    site.backups.statements = BulkStatements(wait_s=0.2)
    for _ in range(8):
        site.at(site.now + 60)
        p = site.a_pass("fresh")
        restarted.run(p)
        if p.stalled:
            break
    (reason, message), = p.stalled
    assert reason == "RestoreFailed"
    assert message.startswith("restore from KaiwuBackup first: database shop: KWDB job ")
    assert "error response from server: 404" in message
    assert "a reconciler that restarted meanwhile no longer serves it" in message
    assert imports_of_shop(site) == 1



def test_a_failed_import_of_an_earlier_attempt_is_not_this_restores(
        tmp_path: Path, server: BackupFileServer) -> None:
    """The cluster "fresh" once ran an IMPORT of this backup's shop directory that failed
    (an attempt wiped by hand since): KWDB keeps that job for seven days. It began before this
    restore did, so it is not this restore's, and the restore imports shop itself."""
    site = backed_up(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    site.kwdb.add_finished_job((NS, "fresh"), site.now - 600, "IMPORT",
                               "IMPORT DATABASE CSV DATA ('http://10.0.0.9:8091/old/d1')",
                               "error response from server: 404 Not Found")
    passes = restore_passes(site, restore)
    assert (record(site) or {}).get("completedAt"), passes[-1].stalled
    assert imports_of_shop(site) == 1


def test_privileges_on_databases_schemas_and_tables_come_back_after_the_import(
        tmp_path: Path, server: BackupFileServer) -> None:
    """KWDB's IMPORT brings no privileges back unless asked, and asked it fails on a database
    without a GRANT and overwrites the database's own (import_database_details.go:186-209):
    the backup reads them itself and the restore grants them again, names quoted, after each
    database's import. A table created after a GRANT ON DATABASE holds a copy of it
    (create_table.go:447), and `public` is a grantee like any role."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    key = (NS, "dev")
    site.kwdb.set_user(key, site.now, "auditor")
    site.kwdb.set_user(key, site.now, "ops_team")
    site.kwdb.grant(key, site.now, "GRANT SELECT ON DATABASE shop TO auditor")
    site.kwdb.load(key, site.now, database="shop", schema="Sales", table='2024 "Q1"',
                   columns=[("id", "INT8")], rows=[("1",)])
    site.kwdb.grant(key, site.now, 'GRANT INSERT, UPDATE ON TABLE shop.public.orders TO app, '
                    '"ops_team"')
    site.kwdb.grant(key, site.now, "GRANT SELECT ON TABLE shop.public.customers TO public")
    site.kwdb.grant(key, site.now, 'GRANT CREATE ON SCHEMA "Sales" TO app', database="shop")
    site.kwdb.grant(key, site.now, "GRANT ALL ON DATABASE sensors TO app")
    held = site.kwdb.contents(key, site.now)["grants"]
    assert isinstance(held, dict)
    assert ("table Sales.2024 \"Q1\"", "auditor", "SELECT") in held["shop"], "inherited"
    assert ("schema Sales", "app", "CREATE") in held["shop"]
    site.backup("first")
    site.run_backup()
    status = site.status(k.KAIWU_BACKUP, "first")
    assert status["phase"] == "completed", status.get("message")
    assert "privileges" not in status["message"], "no longer said to be lost"
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    restore_passes(site, restore, passes=12)

    found = record(site) or {}
    assert found.get("completedAt"), found
    assert found["done"] == ["settings", "users", "database sensors", "database shop",
                             "grants sensors", "grants shop"]
    restored = site.kwdb.contents((NS, "fresh"), site.now)
    assert restored["grants"] == held
    assert restored == site.kwdb.contents(key, site.now)


def keyed_site(tmp_path: Path) -> Site:
    """The cluster "dev" holding `keyed_shop`."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    keyed_shop(site)
    return site


def back_up(site: Site) -> dict[str, Any]:
    """KaiwuBackup "first" of "dev", run to its end; its status."""
    site.backup("first")
    site.run_backup()
    status: dict[str, Any] = site.status(k.KAIWU_BACKUP, "first")
    return status


def restore_fresh(site: Site, server: BackupFileServer, passes: int = 12
                  ) -> tuple[Restore, list[Pass]]:
    """A new cluster "fresh" restored from "first", `passes` restore passes at most."""
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    return restore, restore_passes(site, restore, passes=passes)


def keyed_shop(site: Site, name: str = "dev") -> None:
    """The shop with keys: customers and orders in public, a product catalogue in the schema
    "Catalog" whose table "items" has a two-column key, and a table of another database that
    shop's orders point at."""
    key, now = (NS, name), site.now
    site.kwdb.load(key, now, database="shop", table="customers", keys={"primary": ["id"]},
                   columns=[("id", "INT8"), ("name", "STRING")], rows=[("7", "Ada")])
    site.kwdb.load(key, now, database="shop", schema="Catalog", table="items",
                   keys={"primary": ["sku", "size"]},
                   columns=[("sku", "STRING"), ("size", "STRING"), ("price", "INT8")],
                   rows=[("tea", "S", "3"), ("tea", "L", "5")])
    # The same name in public: KWDB's own foreign key text would point here instead.
    site.kwdb.load(key, now, database="shop", table="items", keys={"primary": ["sku"]},
                   columns=[("sku", "STRING")], rows=[("salt",)])
    site.kwdb.load(key, now, database="crm", table="people", keys={"primary": ["id"]},
                   columns=[("id", "INT8")], rows=[("7",)])
    site.kwdb.load(key, now, database="shop", table="orders", keys={"primary": ["id"]},
                   indexes={"by_customer": ["customer"], "by_item": ["sku", "size"]},
                   columns=[("id", "INT8"), ("customer", "INT8"), ("sku", "STRING"),
                            ("size", "STRING")],
                   rows=[("1", "7", "tea", "S"), ("2", "7", "tea", "L"), ("3", "", "", "")])
    site.kwdb.execute(key, now, "ALTER TABLE shop.public.orders ADD CONSTRAINT fk_customer "
                      "FOREIGN KEY (customer) REFERENCES shop.public.customers (id) "
                      "ON DELETE CASCADE")
    site.kwdb.execute(key, now, 'ALTER TABLE shop.public.orders ADD CONSTRAINT "Item of" '
                      'FOREIGN KEY (sku, size) REFERENCES shop."Catalog".items (sku, size) '
                      "MATCH FULL ON UPDATE SET NULL")
    site.kwdb.execute(key, now, "ALTER TABLE shop.public.orders ADD CONSTRAINT fk_person "
                      "FOREIGN KEY (customer) REFERENCES crm.public.people (id)")


def test_foreign_keys_come_back_after_the_import_onto_the_tables_they_pointed_at(
        tmp_path: Path, server: BackupFileServer) -> None:
    """The backup's schema export leaves foreign keys out (EXPORT without foreign_key), and
    KWDB's own foreign key text names every referenced table's schema `public`: the backup
    reads each key with its referenced table's schema by descriptor id, and the restore adds
    it after the database's import, so a key onto "Catalog".items points there again, with
    its match type and actions. A key onto another database is left out, and said so."""
    site = keyed_site(tmp_path)
    status = back_up(site)
    assert status["phase"] == "completed", status.get("message")
    assert 'foreign key "fk_person" of "public"."orders" in database "shop", onto "crm".' \
        '"public"."people" in another database' in status["message"]

    restore_fresh(site, server)

    found = record(site) or {}
    assert found.get("completedAt"), found
    assert found["done"] == ["settings", "users", "database crm", "database shop",
                             "foreign keys shop"]
    keys = site.kwdb.contents((NS, "fresh"), site.now)["foreign_keys"]
    assert isinstance(keys, dict)
    before = site.kwdb.contents((NS, "dev"), site.now)["foreign_keys"]
    assert isinstance(before, dict)
    assert keys["shop"] == [k for k in before["shop"] if k[2] != "fk_person"]
    item_of = next(fk for *_, name, fk in keys["shop"] if name == "Item of")
    assert (item_of.ref, item_of.match, item_of.on_update) == (
        ("shop", "Catalog", "items"), "FULL", "SET NULL")


def test_a_foreign_keys_step_run_again_after_a_crash_adds_only_what_is_missing(
        tmp_path: Path, server: BackupFileServer) -> None:
    """The reconciler died after adding one of shop's keys, before recording the step: KWDB
    refuses a constraint name the table has (create_table.go:1140-1150), so the step reads
    what is there and adds the rest."""
    site = keyed_site(tmp_path)
    back_up(site)
    restore, _ = restore_fresh(site, server, passes=0)
    for _ in range(12):
        restore_passes(site, restore, passes=1)
        done = (record(site) or {}).get("done")
        if isinstance(done, list) and "database shop" in done:
            break
    site.kwdb.execute((NS, "fresh"), site.now, "ALTER TABLE shop.public.orders ADD CONSTRAINT "
                      "fk_customer FOREIGN KEY (customer) REFERENCES shop.public.customers (id) "
                      "ON DELETE CASCADE")

    restore_passes(site, restore, passes=4)

    found = record(site) or {}
    assert found.get("completedAt"), found
    adds = [s for s in sql_run(site, "fresh-") if s.startswith("ALTER TABLE")]
    assert len(adds) == 1 and '"Item of"' in adds[0], adds



def test_a_key_added_not_valid_comes_back_not_valid_with_the_rows_that_break_it(
        tmp_path: Path, server: BackupFileServer) -> None:
    """A key added NOT VALID was never checked against the rows it had (parser/sql.y:
    2201-2209): re-added with a check, a row that breaks it would fail every restore of a
    backup that said it completed. It comes back NOT VALID."""
    site = keyed_site(tmp_path)
    key = (NS, "dev")
    site.kwdb.load(key, site.now, database="shop", table="notes", keys={"primary": ["id"]},
                   indexes={"by_customer": ["customer"]},
                   columns=[("id", "INT8"), ("customer", "INT8")], rows=[("1", "99")])
    site.kwdb.execute(key, site.now, "ALTER TABLE shop.public.notes ADD CONSTRAINT fk_note "
                      "FOREIGN KEY (customer) REFERENCES shop.public.customers (id) NOT VALID")
    assert back_up(site)["phase"] == "completed"

    _, passes = restore_fresh(site, server)

    assert (record(site) or {}).get("completedAt"), passes[-1].stalled
    keys = site.kwdb.contents((NS, "fresh"), site.now)["foreign_keys"]
    assert isinstance(keys, dict)
    note = next(fk for *_, name, fk in keys["shop"] if name == "fk_note")
    assert note.validated is False
    assert any(s.endswith("NOT VALID") for s in sql_run(site, "fresh-")
               if s.startswith("ALTER TABLE"))


def test_comments_on_the_database_its_tables_columns_and_indexes_come_back(
        tmp_path: Path, server: BackupFileServer) -> None:
    """KWDB's EXPORT writes comments only WITH comment, which fails on a database with none
    (export.go:401-405): the backup reads them from system.comments and the restore sets them
    again after the import, text quoted whatever it holds; a comment holding a backslash is
    left out and named."""
    site = keyed_site(tmp_path)
    key = (NS, "dev")
    for statement in (
            "COMMENT ON DATABASE shop IS 'the shop'",
            "COMMENT ON TABLE shop.\"Catalog\".items IS 'what we sell; it''s all here\n二行'",
            "COMMENT ON COLUMN shop.public.orders.customer IS 'who ordered'",
            "COMMENT ON INDEX shop.public.orders@by_customer IS 'for the CRM'",
            "COMMENT ON COLUMN shop.public.orders.sku IS 'C:\\skus'"):
        site.kwdb.execute(key, site.now, statement)
    status = back_up(site)
    assert status["phase"] == "completed", status.get("message")
    assert 'the comment on column "public"."orders"."sku" in database "shop" (it or its name ' \
        "holds a backslash)" in status["message"]

    restore_fresh(site, server, passes=14)

    found = record(site) or {}
    assert found.get("completedAt"), found
    assert found["done"] == ["settings", "users", "database crm", "database shop",
                             "foreign keys shop", "comments shop"]
    before = site.kwdb.contents(key, site.now)["comments"]
    after = site.kwdb.contents((NS, "fresh"), site.now)["comments"]
    assert isinstance(before, dict) and isinstance(after, dict)
    assert after["shop"] == [c for c in before["shop"] if c[1] != "sku"]
    assert len(after["shop"]) == 4


def test_a_kwdb_that_refuses_the_catalogue_queries_still_gets_a_backup_that_says_so(
        tmp_path: Path, server: BackupFileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queries that read foreign keys and comments were written from KWDB's source and
    never run on a real KWDB. Should one refuse them, the backup goes on without what they
    read and names it, rather than no backup at all; a node that cannot be reached still
    fails the backup's start (it is tried again)."""
    site = keyed_site(tmp_path)
    run = site.runner.exec

    def refusing(namespace: str, pod: str, container: str, command: list[str],
                 timeout: float = 60.0) -> tuple[str, str, int]:
        if any("backward_dependencies" in a or "system.comments" in a for a in command):
            return "", ('ERROR: relation "system.comments" does not exist\nSQLSTATE: 42P01\n'
                        'Failed running "sql"\n'), 1
        return run(namespace, pod, container, command, timeout)
    monkeypatch.setattr(site.runner, "exec", refusing)

    status = back_up(site)

    assert status["phase"] == "completed", status.get("message")
    assert 'every foreign key of database "shop" (KaiwuDB refused the query that reads ' \
        'them: ERROR: relation "system.comments" does not exist' in status["message"]
    assert 'every comment in database "shop"' in status["message"]
    restore_fresh(site, server)
    assert (record(site) or {}).get("done") == ["settings", "users", "database crm",
                                                "database shop"]


def test_views_and_sequences_come_back_with_their_values_grants_and_order(
        tmp_path: Path, server: BackupFileServer) -> None:
    """KWDB's EXPORT leaves views and sequences out (export_details.go:333-338): the backup
    reads their definitions and each sequence's value, and the restore makes them again after
    the tables, views in the order KWDB made them (one reads another database's table and
    another view; a schema holds views only, so no IMPORT made it), and grants on them after
    that. A used sequence goes on after its value, one never used starts where it would have,
    a used-up one stays used up, a virtual one has no value to set. The sequences and views
    steps run again after a crash make nothing twice."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    key, now = (NS, "dev"), site.now
    kwdb = site.kwdb
    kwdb.create_object(key, now, database="shop", name="cheap", kind="view",
                       definition="(id, item) AS SELECT id, item FROM shop.public.orders "
                                  "WHERE id < 3")
    kwdb.create_object(key, now, database="shop", schema="Reports", name="Daily", kind="view",
                       definition="(n) AS SELECT count(*) FROM shop.public.cheap")
    kwdb.load(key, now, database="crm", table="people", columns=[("id", "INT8")],
              rows=[("7",)])
    kwdb.create_object(key, now, database="crm", name="buyers", kind="view",
                       definition="(id) AS SELECT o.id FROM shop.public.orders AS o JOIN "
                                  "crm.public.people AS p ON o.id = p.id")
    kwdb.create_object(key, now, database="shop", name="order_ids", kind="sequence", value=41)
    kwdb.create_object(key, now, database="shop", schema="Reports", name="unused",
                       kind="sequence", sequence=SequenceOptions(start=100, increment=10))
    kwdb.create_object(key, now, database="shop", name="countdown", kind="sequence",
                       sequence=SequenceOptions(minvalue=1, maxvalue=5, increment=-1, start=5),
                       value=0)
    kwdb.create_object(key, now, database="shop", name="ticks", kind="sequence",
                       sequence=SequenceOptions(virtual=True))
    kwdb.set_user(key, now, "clerk")
    kwdb.grant(key, now, "GRANT SELECT ON TABLE shop.public.cheap TO clerk")
    kwdb.grant(key, now, "GRANT UPDATE ON TABLE shop.public.order_ids TO clerk")
    site.backup("first")
    site.run_backup()
    status = site.status(k.KAIWU_BACKUP, "first")
    assert status["phase"] == "completed", status.get("message")
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    before = kwdb.contents(key, site.now)
    # nextval adds before it checks the bound (sequence.go:69-80), so a used-up sequence may
    # store one step beyond it, which setval refuses (sequence.go:176-181): the restored one
    # holds the bound itself, and its next nextval fails just the same.
    shop = before["databases"]["shop"][1]  # type: ignore[index]
    shop["countdown"] = (*shop["countdown"][:2], 1)

    restore_passes(site, restore, passes=16)

    found = record(site) or {}
    assert found.get("completedAt"), found
    assert found["done"] == ["settings", "users", "database crm", "database sensors",
                             "database shop", "sequences shop", "views", "grants shop"]
    assert kwdb.contents((NS, "fresh"), site.now) == before
    made = [text for text in sql_run(site, "fresh-") if text.startswith("CREATE VIEW")]
    assert made == [
        'CREATE VIEW "shop"."public"."cheap" (id, item) AS SELECT id, item FROM '
        "shop.public.orders WHERE id < 3",
        'CREATE VIEW "shop"."Reports"."Daily" (n) AS SELECT count(*) FROM shop.public.cheap',
        'CREATE VIEW "crm"."public"."buyers" (id) AS SELECT o.id FROM shop.public.orders AS o '
        "JOIN crm.public.people AS p ON o.id = p.id"]

    site.api.patch(k.KAIWU_CLUSTER, NS, "fresh", {"metadata": {"annotations": {
        rp.RESTORE_ANNOTATION: json.dumps({**found, "completedAt": None,
                                           "done": found["done"][:5]})}}})
    restore.forget(NS, "fresh")
    restore_passes(site, restore, passes=8)
    assert (record(site) or {}).get("completedAt")
    again = sql_run(site, "fresh-")
    assert len([t for t in again if t.startswith("CREATE VIEW")]) == 3, "made once"
    assert len([t for t in again if t.startswith("CREATE SEQUENCE")]) == 4, "made once"
    assert kwdb.contents((NS, "fresh"), site.now) == before


def viewed_site(tmp_path: Path) -> Site:
    """The shop cluster "dev" with a view and a used sequence, backed up as "first"."""
    site = a_site(tmp_path, statements_wait_s=IMPORT_WAIT_S)
    site.start_cluster("dev")
    load_shop(site)
    key = (NS, "dev")
    site.kwdb.create_object(key, site.now, database="shop", name="cheap", kind="view",
                            definition="(id) AS SELECT id FROM shop.public.orders")
    site.kwdb.create_object(key, site.now, database="shop", name="order_ids", kind="sequence",
                            value=41)
    site.backup("first")
    site.run_backup()
    assert site.status(k.KAIWU_BACKUP, "first")["phase"] == "completed"
    return site


def test_a_view_definition_changed_in_the_target_is_refused_not_run(
        tmp_path: Path, server: BackupFileServer) -> None:
    """The plan is read back from the target, which is not the reconciler's to trust: a
    definition that would run a second statement fails the restore, and nothing of it runs."""
    site = viewed_site(tmp_path)
    path = site.files("dev", "first") / bp.MANIFEST_FILE
    manifest = json.loads(path.read_text())
    shop = next(d for d in manifest["plan"]["databases"] if d["name"] == "shop")
    shop["views"][0]["definition"] = "(id) AS SELECT 1; DROP DATABASE shop CASCADE"
    path.write_text(json.dumps(manifest))
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")

    passes = restore_passes(site, restore, passes=12)

    assert "holds a ';'" in str((record(site) or {}).get("failed")), passes[-1].stalled
    assert not any("DROP" in text for text in sql_run(site, "fresh-"))


def test_a_sequence_used_after_its_value_was_set_is_not_set_back_by_a_step_run_again(
        tmp_path: Path, server: BackupFileServer) -> None:
    """setval runs only while the sequence holds what a new one holds: a sequences step run
    again after a crash (and after the sequence handed out values) never rewinds it; an
    object of another kind under a sequence's name fails the restore, naming it."""
    site = viewed_site(tmp_path)
    restore = Restore(site.backups.ctx, site.backups, server)
    site.start_cluster("fresh", restore_from="first")
    restore_passes(site, restore, passes=16)
    found = record(site) or {}
    assert found.get("completedAt"), found
    done: list[str] = json.loads(json.dumps(found["done"]))
    fresh = (NS, "fresh")
    site.kwdb.execute(fresh, site.now, """SELECT setval('"shop"."public"."order_ids"', 50, true)""")

    site.api.patch(k.KAIWU_CLUSTER, NS, "fresh", {"metadata": {"annotations": {
        rp.RESTORE_ANNOTATION: json.dumps({**found, "completedAt": None, "done": [
            step for step in done if not step.startswith("sequences")]})}}})
    restore.forget(NS, "fresh")
    restore_passes(site, restore, passes=8)
    assert (record(site) or {}).get("completedAt")
    shop = site.kwdb.contents(fresh, site.now)["databases"]["shop"][1]  # type: ignore[index]
    assert shop["order_ids"][2] == 50, "not set back to 41"

    site.kwdb.create_object(fresh, site.now, database="shop", name="ids", kind="view")
    manifest_path = site.files("dev", "first") / bp.MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text())
    shop_plan = next(d for d in manifest["plan"]["databases"] if d["name"] == "shop")
    shop_plan["sequences"].append({**shop_plan["sequences"][0], "name": "ids"})
    manifest_path.write_text(json.dumps(manifest))
    site.api.patch(k.KAIWU_CLUSTER, NS, "fresh", {"metadata": {"annotations": {
        rp.RESTORE_ANNOTATION: json.dumps({**found, "completedAt": None, "done": [
            step for step in done if not step.startswith("sequences")]})}}})
    restore.forget(NS, "fresh")
    restore_passes(site, restore, passes=8)
    assert 'holds a view "public"."ids" that is not the backup\'s sequence' in str(
        (record(site) or {}).get("failed"))
