"""Backup targets (reconciler/kaiwudb/backup/targets.py): a volume directory and S3 (moto's
in-process mock of the S3 API) store, list and delete a backup's files the same way, and a
target that cannot be used is named in one line with its fix.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from reconciler.kaiwudb.backup.targets import Target, TargetError, target_for

SECRET: dict[str, Any] = {
    "metadata": {"labels": {"kaiwu.inspur.com/backup-credentials": "true"}},
    "data": {"AWS_ACCESS_KEY_ID": base64.b64encode(b"id").decode(),
             "AWS_SECRET_ACCESS_KEY": base64.b64encode(b"key").decode()}}


def exercise(target: Target) -> None:
    target.put("plan.json", b"{}")
    target.put("shop/public/orders/n1.0.csv", b"1,tea\n")
    assert target.get("shop/public/orders/n1.0.csv") == b"1,tea\n"
    assert target.get("manifest.json") is None
    assert target.list("") == {"plan.json": 2, "shop/public/orders/n1.0.csv": 6}
    assert target.list() == target.list(""), "no prefix: the whole backup"
    assert target.list("shop") == {"shop/public/orders/n1.0.csv": 6}
    assert target.list("shop/") == target.list("shop"), "a directory's trailing / changes nothing"
    assert target.list("sho") == {}, "a prefix is a directory, not the start of a name"
    assert target.delete() == 2, "no prefix: the whole backup"
    assert target.list("") == {}


def test_a_volume_target_writes_under_the_mounted_claim(tmp_path: Path) -> None:
    (tmp_path / "dumps").mkdir()
    target = target_for({"volume": {"claimName": "dumps"}}, "ns", "dev", "b1",
                        volumes_dir=str(tmp_path), secrets=lambda ns, name: None)
    assert target.location == "volume://dumps/ns/dev/b1"
    target.put("users/users.sql", b"CREATE USER app;\n")
    assert (tmp_path / "dumps/ns/dev/b1/users/users.sql").read_bytes() == b"CREATE USER app;\n"
    assert not list(tmp_path.rglob("*.partial"))
    target.delete("")
    exercise(target)


def test_an_s3_target_keeps_files_under_prefix_namespace_cluster_backup() -> None:
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="backups")
        target = target_for({"s3": {"bucket": "backups", "prefix": "nightly/",
                                    "credentialsSecret": {"name": "creds"}}}, "ns", "dev", "b1",
                            volumes_dir="/nowhere", secrets=lambda ns, name: SECRET)
        assert target.location == "s3://backups/nightly/ns/dev/b1"
        exercise(target)
        slashes = target_for({"s3": {"bucket": "backups", "prefix": "/archive/TAX/",
                                     "credentialsSecret": {"name": "creds"}}}, "ns", "dev", "b1",
                             volumes_dir="/nowhere", secrets=lambda ns, name: SECRET)
        assert slashes.location == "s3://backups/archive/TAX/ns/dev/b1"


@pytest.mark.parametrize(("spec", "secret", "message"), [
    ({"volume": {"claimName": "dumps"}}, None,
     "spec.target.volume.claimName 'dumps': not mounted in the reconciler at /nowhere/dumps; "
     "install with `kaiwu install --backup-volume-claim dumps` (a ReadWriteMany claim in the "
     "reconciler's namespace)"),
    ({"s3": {"bucket": "backups", "credentialsSecret": {"name": "creds"}}}, None,
     "spec.target.s3.credentialsSecret 'creds': no such Secret in namespace ns; create it with "
     "the access key id and secret access key"),
    ({"s3": {"bucket": "backups", "credentialsSecret": {"name": "creds"}}},
     {"metadata": SECRET["metadata"], "data": {}},
     "spec.target.s3.credentialsSecret 'creds': the Secret has no key 'AWS_ACCESS_KEY_ID'; "
     "add it or set accessKeyIdKey"),
    ({"s3": {"bucket": "backups", "credentialsSecret": {"name": "creds"}}},
     {"metadata": SECRET["metadata"], "data": {"AWS_ACCESS_KEY_ID": "aWQ="}},
     "spec.target.s3.credentialsSecret 'creds': the Secret has no key 'AWS_SECRET_ACCESS_KEY'; "
     "add it or set secretAccessKeyKey"),
    ({"volume": {"claimName": ""}}, None,
     "spec.target.volume.claimName '': not mounted in the reconciler at /nowhere; install with "
     "`kaiwu install --backup-volume-claim ` (a ReadWriteMany claim in the reconciler's "
     "namespace)"),
    ({}, None, "spec.target: set exactly one of s3 and volume"),
    ({"s3": {"bucket": "backups"}, "volume": {"claimName": "dumps"}}, None,
     "spec.target: set exactly one of s3 and volume"),
])
def test_an_unusable_target_says_which_field_and_the_fix(spec: dict[str, object],
                                                          secret: object, message: str) -> None:
    with pytest.raises(TargetError) as caught:
        target_for(spec, "ns", "dev", "b1", volumes_dir="/nowhere",
                   secrets=lambda ns, name: secret)  # type: ignore[arg-type,return-value]
    assert str(caught.value) == message


def test_a_volume_that_refuses_a_write_is_a_target_error_naming_the_file(tmp_path: Path) -> None:
    """A full or read-only claim, or a file where the backup's directory belongs: the backup
    fails with the target's reason (a bare OSError would fail every pass of the cluster)."""
    (tmp_path / "dumps" / "ns" / "dev").mkdir(parents=True)
    (tmp_path / "dumps" / "ns" / "dev" / "b1").write_text("a file, not a directory")
    target = target_for({"volume": {"claimName": "dumps"}}, "ns", "dev", "b1",
                        volumes_dir=str(tmp_path), secrets=lambda ns, name: None)

    with pytest.raises(TargetError) as refused:
        target.put("plan.json", b"{}")
    assert str(refused.value).startswith("volume://dumps/ns/dev/b1/plan.json: ")
    assert target.get("plan.json") is None
    assert target.list("") == {}


def test_an_s3_client_is_made_for_the_endpoint_region_and_keys_of_the_spec() -> None:
    made: list[dict[str, Any]] = []
    asked: list[tuple[str, str]] = []

    def factory(service: str, **kwargs: Any) -> object:
        made.append({"service": service, **kwargs})
        return object()

    def secrets(namespace: str, name: str) -> dict[str, Any]:
        asked.append((namespace, name))
        return SECRET

    target = target_for({"s3": {"bucket": "backups", "endpoint": "https://minio.store:9000",
                                "region": "eu-west-1", "credentialsSecret": {"name": "creds"}}},
                        "ns", "dev", "b1", volumes_dir="/nowhere", secrets=secrets,
                        s3_factory=factory)
    assert made == [{"service": "s3", "endpoint_url": "https://minio.store:9000",
                     "region_name": "eu-west-1", "aws_access_key_id": "id",
                     "aws_secret_access_key": "key"}]
    assert target.location == "s3://backups/ns/dev/b1"
    target_for({"s3": {"bucket": "backups", "credentialsSecret": {"name": "creds"}}},
               "ns", "dev", "b1", volumes_dir="/nowhere", secrets=secrets, s3_factory=factory)
    assert (made[1]["endpoint_url"], made[1]["region_name"]) == (None, "us-east-1")
    with pytest.raises(TargetError, match="credentialsSecret None: no such Secret"):
        target_for({"s3": {"bucket": "backups"}}, "ns", "dev", "b1", volumes_dir="/nowhere",
                   secrets=lambda ns, name: None if name == "" else SECRET, s3_factory=factory)
    assert asked == [("ns", "creds"), ("ns", "creds")]


def test_the_secret_keys_holding_the_s3_credentials_can_be_named_in_the_spec() -> None:
    made: list[dict[str, Any]] = []

    def factory(service: str, **kwargs: Any) -> object:
        made.append(kwargs)
        return object()

    minio = {"metadata": SECRET["metadata"],
             "data": {"user": base64.b64encode(b"minio-user").decode(),
                      "password": base64.b64encode(b"minio-password").decode(),
                      **SECRET["data"]}}
    target_for({"s3": {"bucket": "backups", "credentialsSecret": {
        "name": "creds", "accessKeyIdKey": "user", "secretAccessKeyKey": "password"}}},
        "ns", "dev", "b1", volumes_dir="/nowhere", secrets=lambda ns, name: minio,
        s3_factory=factory)
    assert (made[0]["aws_access_key_id"], made[0]["aws_secret_access_key"]) == (
        "minio-user", "minio-password")

    # A key the spec names and the Secret lacks: the fix names the field that chose it.
    for field, other, missing in (("accessKeyIdKey", "secretAccessKeyKey", "user"),
                                  ("secretAccessKeyKey", "accessKeyIdKey", "password")):
        without: dict[str, Any] = {
            "metadata": SECRET["metadata"],
            "data": {k: v for k, v in minio["data"].items() if k != missing}}

        def secret(namespace: str, name: str, found: dict[str, Any] = without) -> Any:
            return found
        with pytest.raises(TargetError) as refused:
            target_for({"s3": {"bucket": "backups", "credentialsSecret": {
                "name": "creds", field: missing, other: "AWS_ACCESS_KEY_ID"}}},
                "ns", "dev", "b1", volumes_dir="/nowhere", secrets=secret, s3_factory=factory)
        assert str(refused.value) == (f"spec.target.s3.credentialsSecret 'creds': the Secret "
                                      f"has no key {missing!r}; add it or set {field}")


def test_an_s3_endpoint_that_fails_is_a_target_error_naming_the_location_and_the_error() -> None:
    class EndpointConnectionError(Exception):
        pass

    class Client:
        def put_object(self, **_: Any) -> None:
            raise EndpointConnectionError("Could not connect to http://minio.store:9000")

    from reconciler.kaiwudb.backup.targets import S3Target
    with pytest.raises(TargetError) as failed:
        S3Target(Client(), "backups", "ns/dev/b1").put("plan.json", b"{}")
    assert str(failed.value) == ("s3://backups/ns/dev/b1: EndpointConnectionError: Could not "
                                 "connect to http://minio.store:9000")


def test_an_s3_key_that_is_not_there_reads_as_missing_and_other_errors_fail() -> None:
    """S3 answers a missing key with NoSuchKey; some S3-compatible stores answer 404."""
    from botocore.exceptions import ClientError

    from reconciler.kaiwudb.backup.targets import S3Target

    class Client:
        code = ""

        def get_object(self, **_: Any) -> None:
            raise ClientError({"Error": {"Code": self.code, "Message": "..."}}, "GetObject")

    client = Client()
    target = S3Target(client, "backups", "ns/dev/b1")
    for code in ("NoSuchKey", "404"):
        client.code = code
        assert target.get("manifest.json") is None, code
    client.code = "AccessDenied"
    with pytest.raises(TargetError,
                       match=r"^s3://backups/ns/dev/b1/manifest\.json: .*AccessDenied"):
        target.get("manifest.json")

    class Bare:
        def get_object(self, **_: Any) -> None:
            raise ClientError({}, "GetObject")  # an answer without an Error part
    with pytest.raises(TargetError, match=r"^s3://backups/ns/dev/b1/manifest\.json: "):
        S3Target(Bare(), "backups", "ns/dev/b1").get("manifest.json")

    class Unreachable:
        def get_object(self, **_: Any) -> None:
            raise ConnectionRefusedError("connection refused")
    with pytest.raises(TargetError) as failed:
        S3Target(Unreachable(), "backups", "ns/dev/b1").get("manifest.json")
    assert str(failed.value) == ("s3://backups/ns/dev/b1/manifest.json: ConnectionRefusedError: "
                                 "connection refused")


def test_s3_lists_exactly_the_directory_asked_for() -> None:
    """A prefix is a directory: <base>/<prefix>/, whatever its name ends in (KWDB keeps the case
    of a quoted database name), with or without a trailing /."""
    asked: list[str] = []

    class Client:
        def get_paginator(self, name: str) -> Any:
            class Pages:
                def paginate(self, Bucket: str, Prefix: str) -> list[dict[str, Any]]:
                    asked.append(Prefix)
                    return [{"Contents": [{"Key": Prefix + "meta.sql", "Size": 3}]}]
            return Pages()

    from reconciler.kaiwudb.backup.targets import S3Target
    target = S3Target(Client(), "backups", "ns/dev/b1")
    assert target.list("TAX") == {"TAX/meta.sql": 3}
    assert target.list("TAX/") == {"TAX/meta.sql": 3}
    assert target.list("") == {"meta.sql": 3}
    assert asked == ["ns/dev/b1/TAX/", "ns/dev/b1/TAX/", "ns/dev/b1/"]


def test_s3_deletes_at_most_a_thousand_keys_per_request() -> None:
    """DeleteObjects takes up to 1000 keys (the S3 API's limit)."""
    keys = [f"base/f{i}" for i in range(2500)]
    chunks: list[int] = []

    class Client:
        def get_paginator(self, name: str) -> Any:
            class Pages:
                def paginate(self, **_: Any) -> list[dict[str, Any]]:
                    return [{"Contents": [{"Key": key, "Size": 1} for key in keys]}]
            return Pages()

        def delete_objects(self, Bucket: str, Delete: dict[str, Any]) -> None:
            chunks.append(len(Delete["Objects"]))

    from reconciler.kaiwudb.backup.targets import S3Target
    assert S3Target(Client(), "backups", "base").delete("") == 2500
    assert chunks == [1000, 1000, 500]


def test_deleting_one_items_files_leaves_the_rest_of_the_backup(tmp_path: Path) -> None:
    (tmp_path / "dumps").mkdir()
    target = target_for({"volume": {"claimName": "dumps"}}, "ns", "dev", "b1",
                        volumes_dir=str(tmp_path), secrets=lambda ns, name: None)
    target.put("plan.json", b"{}")
    target.put("shop/public/orders/n1.0.csv", b"1,tea\n")
    target.put("shop/meta.sql", b"CREATE TABLE orders ();\n")
    (tmp_path / "dumps/ns/dev/b1/sensors").mkdir()  # an export that wrote no file yet

    assert target.delete("shop") == 2

    assert target.list("") == {"plan.json": 2}
    assert not (tmp_path / "dumps/ns/dev/b1/shop").exists()
    assert (tmp_path / "dumps/ns/dev/b1/sensors").is_dir()


def test_a_write_that_fails_midway_leaves_nothing_under_a_listed_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dumps").mkdir()
    target = target_for({"volume": {"claimName": "dumps"}}, "ns", "dev", "b1",
                        volumes_dir=str(tmp_path), secrets=lambda ns, name: None)

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(TargetError, match=r"plan\.json: No space left on device"):
        target.put("plan.json", b"{}")

    assert target.get("plan.json") is None
    assert target.list("") == {}
    assert [p.name for p in (tmp_path / "dumps/ns/dev/b1").iterdir()] == ["plan.json.partial"]

    # Deleting the backup (its retention ran out) leaves nothing of it, the leftover included.
    monkeypatch.undo()
    assert target.delete("") == 0
    assert not (tmp_path / "dumps/ns/dev/b1").exists()


def test_a_volume_that_cannot_be_read_is_a_target_error_naming_what_was_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dumps").mkdir()
    target = target_for({"volume": {"claimName": "dumps"}}, "ns", "dev", "b1",
                        volumes_dir=str(tmp_path), secrets=lambda ns, name: None)
    target.put("shop/meta.sql", b"CREATE TABLE orders ();\n")

    def failing(self: Path, *args: Any) -> Any:
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(Path, "rglob", failing)
    monkeypatch.setattr(Path, "read_bytes", failing)
    with pytest.raises(TargetError) as failed:
        target.list("shop")
    assert str(failed.value) == "volume://dumps/ns/dev/b1/shop: Input/output error"
    with pytest.raises(TargetError) as failed:
        target.get("shop/meta.sql")
    assert str(failed.value) == "volume://dumps/ns/dev/b1/shop/meta.sql: Input/output error"


def test_deleting_what_is_not_there_or_is_deleted_meanwhile_is_no_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two reconcilers (a leader that lost its lease and the next) may delete the same backup."""
    (tmp_path / "dumps").mkdir()
    target = target_for({"volume": {"claimName": "dumps"}}, "ns", "dev", "b1",
                        volumes_dir=str(tmp_path), secrets=lambda ns, name: None)
    assert target.delete("") == 0
    target.put("plan.json", b"{}")
    target.put("shop/meta.sql", b"CREATE TABLE orders ();\n")
    assert target.delete("sensors") == 0

    listed = target.list

    def listed_then_deleted_elsewhere(prefix: str = "") -> dict[str, int]:
        found = listed(prefix)
        (tmp_path / "dumps/ns/dev/b1/plan.json").unlink()
        return found
    monkeypatch.setattr(target, "list", listed_then_deleted_elsewhere)
    assert target.delete("") == 2
    assert not (tmp_path / "dumps/ns/dev/b1").exists()


def test_a_volume_that_refuses_a_delete_is_a_target_error_naming_what_was_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dumps").mkdir()
    target = target_for({"volume": {"claimName": "dumps"}}, "ns", "dev", "b1",
                        volumes_dir=str(tmp_path), secrets=lambda ns, name: None)
    target.put("shop/meta.sql", b"CREATE TABLE orders ();\n")

    def read_only(self: Path, missing_ok: bool = False) -> None:
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(TargetError) as refused:
        target.delete("shop")
    assert str(refused.value) == "volume://dumps/ns/dev/b1/shop: Read-only file system"


def test_a_backup_may_name_only_a_secret_marked_for_backups() -> None:
    """Anyone who may create a KaiwuBackup could otherwise have the reconciler read any Secret
    of the namespace (a TLS key, a database password) and send it to an endpoint of theirs."""
    for labels in ({}, {"kaiwu.inspur.com/backup-credentials": "yes"}):
        unmarked = {"data": SECRET["data"], "metadata": {"labels": labels}}
        with pytest.raises(TargetError) as refused:
            target_for({"s3": {"bucket": "backups", "credentialsSecret": {"name": "tls"}}},
                       "ns", "dev", "b1", volumes_dir="/nowhere",
                       secrets=lambda ns, name, found=unmarked: found,  # type: ignore[misc]
                       s3_factory=lambda *a, **k: object())
        assert "not marked for backups; label it kaiwu.inspur.com/backup-credentials=true" in (
            str(refused.value))


@pytest.mark.parametrize(("endpoint", "allowed", "refused"), [
    ("http://minio.store:9000", False, "plain http sends the access key"),
    ("http://minio.store:9000", True, ""),
    ("https://minio.store", False, ""),
    ("ftp://minio.store", True, r"not an http\(s\) URL"),
    ("minio.store:9000", False, r"not an http\(s\) URL"),
])
def test_an_s3_endpoint_is_https_unless_plain_http_is_allowed_in_so_many_words(
        endpoint: str, allowed: bool, refused: str) -> None:
    spec = {"s3": {"bucket": "backups", "endpoint": endpoint, "allowPlainHttp": allowed,
                   "credentialsSecret": {"name": "creds"}}}
    if refused:
        with pytest.raises(TargetError, match=refused):
            target_for(spec, "ns", "dev", "b1", volumes_dir="/nowhere",
                       secrets=lambda ns, name: SECRET, s3_factory=lambda *a, **k: object())
    else:
        target_for(spec, "ns", "dev", "b1", volumes_dir="/nowhere",
                   secrets=lambda ns, name: SECRET, s3_factory=lambda *a, **k: object())


def test_no_text_of_a_secret_value_comes_back_in_a_target_error() -> None:
    """A private key pasted as the access key id: the S3 server answers with it, line by line;
    the error the backup reports carries none of it."""
    private = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
               "-----END PRIVATE KEY-----\n")
    marked = {"metadata": SECRET["metadata"], "data": {
        "AWS_ACCESS_KEY_ID": base64.b64encode(private.encode()).decode(),
        "AWS_SECRET_ACCESS_KEY": base64.b64encode(b"s3cr3t-value").decode()}}

    class Echoing:
        def put_object(self, **_: Any) -> None:
            raise RuntimeError(f"InvalidAccessKeyId: the key {private!r} ({private}) with "
                               "secret s3cr3t-value is unknown")

    target = target_for({"s3": {"bucket": "backups", "credentialsSecret": {"name": "c"}}},
                        "ns", "dev", "b1", volumes_dir="/nowhere",
                        secrets=lambda ns, name: marked, s3_factory=lambda *a, **k: Echoing())
    with pytest.raises(TargetError) as failed:
        target.put("plan.json", b"{}")
    said = str(failed.value)
    assert "InvalidAccessKeyId" in said and "<redacted>" in said
    for line in [*private.splitlines(), "s3cr3t-value", "MIIEvQIBADANBgkq"]:
        assert line not in said, line
    assert failed.value.__cause__ is None, "no chained error carries the text to a log"
