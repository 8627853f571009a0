"""Backup targets (reconciler/kaiwudb/backup_target.py): a volume directory and S3 (moto's
in-process mock of the S3 API) store, list and delete a backup's files the same way, and a
target that cannot be used is named in one line with its fix.
"""

from __future__ import annotations

import base64
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from reconciler.kaiwudb.backup_target import Target, TargetError, target_for

SECRET = {"data": {"AWS_ACCESS_KEY_ID": base64.b64encode(b"id").decode(),
                   "AWS_SECRET_ACCESS_KEY": base64.b64encode(b"key").decode()}}


def exercise(target: Target) -> None:
    target.put("plan.json", b"{}")
    target.put("shop/public/orders/n1.0.csv", b"1,tea\n")
    assert target.get("shop/public/orders/n1.0.csv") == b"1,tea\n"
    assert target.get("manifest.json") is None
    assert target.list("") == {"plan.json": 2, "shop/public/orders/n1.0.csv": 6}
    assert target.list("shop") == {"shop/public/orders/n1.0.csv": 6}
    assert target.delete("") == 2
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


@pytest.mark.parametrize(("spec", "secret", "message"), [
    ({"volume": {"claimName": "dumps"}}, None,
     "not mounted in the reconciler at /nowhere/dumps; install with `kaiwu install "
     "--backup-volume-claim dumps`"),
    ({"s3": {"bucket": "backups", "credentialsSecret": {"name": "creds"}}}, None,
     "spec.target.s3.credentialsSecret 'creds': no such Secret in namespace ns"),
    ({"s3": {"bucket": "backups", "credentialsSecret": {"name": "creds"}}}, {"data": {}},
     "the Secret has no key 'AWS_ACCESS_KEY_ID'"),
    ({}, None, "spec.target: set exactly one of s3 and volume"),
])
def test_an_unusable_target_says_which_field_and_the_fix(spec: dict[str, object],
                                                          secret: object, message: str) -> None:
    with pytest.raises(TargetError) as caught:
        target_for(spec, "ns", "dev", "b1", volumes_dir="/nowhere",
                   secrets=lambda ns, name: secret)  # type: ignore[arg-type,return-value]
    assert message in str(caught.value)


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
