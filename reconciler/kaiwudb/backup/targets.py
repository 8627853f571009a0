"""Backup targets: where a backup's files end up, off the database's disks.

Called by reconciler/kaiwudb/backup/step.py. Two kinds, one small interface (`Target`): put a file,
read one back, list what is under a prefix with sizes, delete a prefix.
- `S3Target`: S3-compatible object storage through boto3 (endpoint, region, bucket, key
  prefix; the access key pair from a Secret in the backup's namespace).
- `VolumeTarget`: a directory on a ReadWriteMany claim mounted into the reconciler's pod
  (Settings.backup_volumes_dir/<claim>); files are written to a temporary name, flushed and
  renamed, so a crash never leaves a half-written file under its final name.
`target_for` builds one from a KaiwuBackup's spec.target, or says in one line what is wrong.
Keys are relative to the backup's location: `<namespace>/<cluster>/<backup>/...` under the
prefix or the claim's directory.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

SecretReader = Callable[[str, str], Mapping[str, Any] | None]
"""(namespace, name) -> the Secret object, None when it does not exist."""

CREDENTIALS_LABEL = "kaiwu.inspur.com/backup-credentials"
"""The label (value "true") a Secret needs before a KaiwuBackup may name it: anyone who may
create a KaiwuBackup would otherwise have the reconciler read any Secret of the namespace and
send its keys to an endpoint of their choosing (docs/security.md)."""


class Redactor:
    """Removes secret values from a text: each value as it is, as Python and JSON would quote
    it, and each of its lines of 6 characters or more (a private key pasted as a key id comes
    back from a server line by line). Used on every message built from what a target said."""

    def __init__(self, values: tuple[str, ...] = ()) -> None:
        found: set[str] = set()
        for value in values:
            if len(value) < 4:
                continue
            found |= {value, repr(value)[1:-1], json.dumps(value)[1:-1]}
            found |= {line.strip() for line in value.splitlines() if len(line.strip()) >= 6}
        self.values = tuple(sorted(found, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, "<redacted>")
        return text


class TargetError(Exception):
    """The target cannot be used or answered with an error; the message says which and why."""


class Target(Protocol):
    location: str  # for status: s3://bucket/prefix/... or volume://claim/...

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def list(self, prefix: str = "") -> dict[str, int]: ...

    def delete(self, prefix: str = "") -> int: ...


class VolumeTarget:
    """A directory on a mounted ReadWriteMany claim. The file system's errors (a full or
    read-only volume, a file where a directory belongs) become TargetError, as S3's do, so the
    backup fails with its reason instead of the pass failing over and over."""

    def __init__(self, root: Path, claim: str, base: str) -> None:
        self.root = root / base
        self.location = f"volume://{claim}/{base}"

    def _path(self, key: str) -> Path:
        """The file of a key, never outside the backup's directory: a key is built from what
        KaiwuDB and the target returned, and is refused when any part is '', '.' or '..'."""
        if key and not all(part not in ("", ".", "..") for part in key.rstrip("/").split("/")):
            raise TargetError(f"{self.location}/{key!r}: refusing a key that is not a plain "
                              "relative path")
        return self.root / key

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._errors(key):
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            with open(partial, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            partial.replace(path)

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        with self._errors(key):
            return path.read_bytes() if path.is_file() else None

    def list(self, prefix: str = "") -> dict[str, int]:
        base = self._path(prefix)  # an empty prefix: the root itself
        with self._errors(prefix):
            if not base.exists():
                return {}
            return {str(p.relative_to(self.root)): p.stat().st_size for p in base.rglob("*")
                    if p.is_file() and not p.name.endswith(".partial")}

    def delete(self, prefix: str = "") -> int:
        """Every file under the prefix, and what a write that failed midway left (`.partial`,
        not counted), so the directories go too."""
        found = [self.root / k for k in self.list(prefix)]
        base = self._path(prefix)
        with self._errors(prefix):
            leftovers = [p for p in base.rglob("*.partial") if p.is_file()]
            for path in found + leftovers:
                path.unlink(missing_ok=True)
            for directory in sorted((p for p in base.rglob("*") if p.is_dir()), reverse=True) \
                    if base.exists() else ():
                directory.rmdir() if not any(directory.iterdir()) else None
            if base.exists() and base.is_dir() and not any(base.iterdir()):
                base.rmdir()
        return len(found)

    @contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        try:
            yield
        except OSError as err:
            raise TargetError(f"{self.location}/{key}: {err.strerror or err}") from err


class S3Target:
    """A key prefix in an S3 bucket (boto3; any S3-compatible endpoint)."""

    def __init__(self, client: Any, bucket: str, base: str,
                 redact: Redactor | None = None) -> None:
        self.client = client
        self.bucket = bucket
        self.base = base.strip("/")
        self.location = f"s3://{bucket}/{self.base}"
        self.redact = redact or Redactor()

    def _key(self, key: str) -> str:
        return f"{self.base}/{key}"

    def put(self, key: str, data: bytes) -> None:
        self._call(lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(key),
                                                  Body=data))

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise TargetError(self.redact(f"{self.location}/{key}: {err}")) from None
        except Exception as err:
            raise TargetError(self.redact(f"{self.location}/{key}: {type(err).__name__}: "
                                          f"{err}")) from None
        body: bytes = answer["Body"].read()
        return body

    def list(self, prefix: str = "") -> dict[str, int]:
        found: dict[str, int] = {}
        start = self._key(prefix).rstrip("/") + "/"

        def page() -> None:
            paginator = self.client.get_paginator("list_objects_v2")
            for each in paginator.paginate(Bucket=self.bucket, Prefix=start):
                for obj in each.get("Contents") or ():
                    found[str(obj["Key"])[len(self.base) + 1:]] = int(obj["Size"])
        self._call(page)
        return found

    def delete(self, prefix: str = "") -> int:
        keys = list(self.list(prefix))
        for i in range(0, len(keys), 1000):
            chunk = keys[i:i + 1000]
            self._call(lambda chunk=chunk: self.client.delete_objects(  # type: ignore[misc]
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self._key(k)} for k in chunk], "Quiet": True}))
        return len(keys)

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except TargetError:
            raise
        except Exception as err:  # botocore's errors, connection errors: one kind here
            raise TargetError(self.redact(f"{self.location}: {type(err).__name__}: {err}")) \
                from None


def _secret_value(secret: Mapping[str, Any], ref: Mapping[str, Any], field: str, default: str,
                  where: str) -> str:
    """The value of the Secret's key that credentialsSecret.<field> names (else `default`)."""
    key = str(ref.get(field) or default)
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        raise TargetError(f"{where}: the Secret has no key {key[:64]!r}; add it or set {field}")
    try:
        return base64.b64decode(raw, validate=True).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError: the value is never shown
        raise TargetError(f"{where}: the value of key {key[:64]!r} is not base64 of UTF-8 "
                          "text") from None


def target_for(spec_target: Mapping[str, Any], namespace: str, cluster: str, backup: str, *,
               volumes_dir: str, secrets: SecretReader,
               s3_factory: Callable[..., Any] | None = None) -> Target:
    """The target of one backup (TargetError with a one-line reason when it cannot be used)."""
    base = f"{namespace}/{cluster}/{backup}"
    s3 = spec_target.get("s3")
    volume = spec_target.get("volume")
    if bool(s3) == bool(volume):
        raise TargetError("spec.target: set exactly one of s3 and volume")
    if volume:
        claim = str(volume.get("claimName") or "")
        root = Path(volumes_dir) / claim
        if not claim or not root.is_dir():
            raise TargetError(
                f"spec.target.volume.claimName {claim!r}: not mounted in the reconciler at "
                f"{root}; install with `kaiwu install --backup-volume-claim {claim}` (a "
                "ReadWriteMany claim in the reconciler's namespace)")
        return VolumeTarget(root, claim, base)
    assert s3 is not None
    endpoint = str(s3.get("endpoint") or "")
    scheme = endpoint.split("://", 1)[0].lower() if "://" in endpoint else ""
    if endpoint and scheme not in ("https", "http"):
        raise TargetError(f"spec.target.s3.endpoint {endpoint[:80]!r}: not an http(s) URL; "
                          "write it as https://host[:port]")
    if scheme == "http" and not s3.get("allowPlainHttp"):
        raise TargetError(f"spec.target.s3.endpoint {endpoint[:80]!r}: plain http sends the "
                          "access key and the data unencrypted; use https, or set "
                          "spec.target.s3.allowPlainHttp: true to accept that")
    ref = s3.get("credentialsSecret") or {}
    where = f"spec.target.s3.credentialsSecret {ref.get('name')!r}"
    secret = secrets(namespace, str(ref.get("name") or ""))
    if secret is None:
        raise TargetError(f"{where}: no such Secret in namespace {namespace}; create it with "
                          "the access key id and secret access key")
    labels = (secret.get("metadata") or {}).get("labels") or {}
    if labels.get(CREDENTIALS_LABEL) != "true":
        raise TargetError(f"{where}: the Secret is not marked for backups; label it "
                          f"{CREDENTIALS_LABEL}=true (a KaiwuBackup may name only Secrets meant "
                          "for backups)")
    key_id = _secret_value(secret, ref, "accessKeyIdKey", "AWS_ACCESS_KEY_ID", where)
    secret_key = _secret_value(secret, ref, "secretAccessKeyKey", "AWS_SECRET_ACCESS_KEY", where)
    if s3_factory is None:
        import boto3  # imported here: only S3 targets need it
        s3_factory = boto3.client
    client = s3_factory("s3", endpoint_url=endpoint or None,
                        region_name=s3.get("region") or "us-east-1",
                        aws_access_key_id=key_id, aws_secret_access_key=secret_key)
    prefix = str(s3.get("prefix") or "").strip("/")
    return S3Target(client, str(s3["bucket"]), f"{prefix}/{base}" if prefix else base,
                    Redactor((key_id, secret_key)))
