"""Helpers of the backup stories (tests/world_stories/backup/): an S3 stand-in, data in the
simulated KaiwuDB, and the KaiwuBackup objects read back.

The S3 stand-in is moto's server mode (`ThreadedMotoServer` on 127.0.0.1, a port the OS
chooses): a real HTTP S3 API that boto3 talks to exactly as to any S3-compatible endpoint; no
real S3 server is installable in the test world (docs/testworld.md).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from kubernetes import client as k8s
from moto.server import ThreadedMotoServer

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.support.lifecycle import NAME
from tests.world.simworld import SimWorld

KEY_ID, SECRET_KEY = "kaiwu-test", "kaiwu-test-secret"
BUCKET = "kaiwu-backups"
CREDENTIALS = "backup-s3"


@dataclass(frozen=True)
class S3:
    endpoint: str

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET_KEY)

    def keys(self, prefix: str = "") -> list[str]:
        found: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(
                Bucket=BUCKET, Prefix=prefix):
            found += [str(o["Key"]) for o in page.get("Contents") or ()]
        return sorted(found)

    def target(self, prefix: str = "nightly") -> Obj:
        # moto serves plain http on 127.0.0.1: the spec accepts that risk in so many words.
        return {"s3": {"endpoint": self.endpoint, "allowPlainHttp": True, "bucket": BUCKET,
                       "prefix": prefix, "credentialsSecret": {"name": CREDENTIALS}}}


@pytest.fixture
def s3() -> Iterator[S3]:
    """A fresh moto S3 server with the bucket made."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    found = S3(f"http://{host}:{port}")
    found.client().create_bucket(Bucket=BUCKET)
    try:
        yield found
    finally:
        server.stop()


def credentials_secret(kube: k8s.ApiClient, namespace: str) -> None:
    """What a person does: `kubectl create secret generic backup-s3 --from-literal=...`, then
    `kubectl label secret backup-s3 kaiwu.inspur.com/backup-credentials=true`."""
    Kube(kube, "kubectl").create({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": CREDENTIALS, "namespace": namespace,
                     "labels": {"kaiwu.inspur.com/backup-credentials": "true"}},
        "data": {"AWS_ACCESS_KEY_ID": base64.b64encode(KEY_ID.encode()).decode(),
                 "AWS_SECRET_ACCESS_KEY": base64.b64encode(SECRET_KEY.encode()).decode()}})


def schedule(namespace: str, name: str, cron: str, target: Obj, *, keep: int = 7,
             immediate: bool = False) -> Obj:
    return {"apiVersion": kk.KAIWU_BACKUP_SCHEDULE.api_version,
            "kind": kk.KAIWU_BACKUP_SCHEDULE.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"cluster": {"name": NAME}, "schedule": cron, "immediate": immediate,
                     "retention": {"keep": keep}, "template": {"target": target}}}


def backup(namespace: str, name: str, target: Obj) -> Obj:
    return {"apiVersion": kk.KAIWU_BACKUP.api_version, "kind": kk.KAIWU_BACKUP.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"cluster": {"name": NAME}, "target": target}}


def backups(kube: k8s.ApiClient, namespace: str) -> dict[str, Obj]:
    items, _ = Kube(kube, "test").list_objects(kk.KAIWU_BACKUP, namespace)
    return {str(b["metadata"]["name"]): b for b in items}


def phase(obj: Obj | None) -> str:
    return str(((obj or {}).get("status") or {}).get("phase") or "")


def load_shop(world: SimWorld, namespace: str, t: float | None = None) -> None:
    """A relational database with two tables, a time-series one, a user with privileges on
    the first and one of its tables, and a setting."""
    key = (namespace, NAME)
    now = world.clock.now() if t is None else t
    world.kwdb.load(key, now, database="shop", table="orders",
                    columns=[("id", "INT8"), ("item", "STRING")],
                    rows=[("1", "tea"), ("2", "rice"), ("3", "salt")])
    world.kwdb.load(key, now, database="shop", table="customers",
                    columns=[("id", "INT8"), ("name", "STRING")], rows=[("7", "Ada")])
    world.kwdb.load(key, now, database="sensors", table="temps",
                    columns=[("ts", "TIMESTAMPTZ"), ("v", "FLOAT8")],
                    rows=[("2026-01-01 00:00:00", "20.5"), ("2026-01-01 00:01:00", "20.7")],
                    time_series=True)
    world.kwdb.set_user(key, now, "app")
    world.kwdb.grant(key, now, "GRANT SELECT ON DATABASE shop TO app")
    world.kwdb.grant(key, now, "GRANT INSERT, UPDATE ON TABLE shop.public.orders TO app")
    world.kwdb.set_setting(key, now, "sql.defaults.idle_timeout", "10m")
