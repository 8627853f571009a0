"""`kaiwu backup create|list|describe` and `kaiwu restore`: backups from the command line.

`reconciler.cli.main` hands `kaiwu backup ...` and `kaiwu restore ...` here (and `kubectl kaiwu
...`, the same entry point). Like `kaiwu status` it reads the API as kubectl does (a kubeconfig
and context, or the pod's service account) through `reconciler.kube.client.Kube`, with kubectl's
--kubeconfig, --context and -n/--namespace flags.

- `backup create CLUSTER` makes a KaiwuBackup (the reconciler runs it: docs/backup.md). Its
  target is given with --s3-bucket/--s3-secret or --volume-claim, or taken from the cluster's
  KaiwuBackupSchedule when it has exactly one (the place its backups already go), else from its
  newest KaiwuBackup; with none of those it is refused, naming the flags. --wait follows it:
  exit 0 completed, 1 failed (its reason) or timed out.
- `backup list [CLUSTER]` and `backup describe NAME`: phase, times, size, target, failure, and
  for a completed one the restore command.
- `restore --from BACKUP --into NEW` writes a KaiwuCluster NEW with the source cluster's spec
  and `spec.bootstrap.fromBackup` (checked by the renderer as `kaiwu validate` checks it), to
  standard output or -f FILE, or creates it with --apply. A backup that has not completed, a
  NEW that exists, or a source cluster that is gone is refused.

Exit codes as the CLI's: 0 done, 1 not done (a backup failed or a wait timed out), 2 an error
or a refusal (one line on stderr naming the fix, no traceback). The pure parts (`target_of`,
`backup_object`, `restore_spec`, `backup_rows`, `describe_text`) need no API and are tested
alone.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn, TextIO

import urllib3
import yaml

from reconciler.kube import kinds as kk
from reconciler.kube.client import (
    ApiError,
    ConnectionSetupError,
    Kube,
    check_reachable,
    context_namespace,
    load_api_client,
)
from reconciler.model import Obj, meta
from renderer import schema

EXIT_OK, EXIT_NOT_DONE, EXIT_ERROR = 0, 1, 2
FIELD_MANAGER = "kaiwu-cli"
WAIT_POLL_S = 2.0
DEFAULT_TIMEOUT_S = 3600.0


class Refused(Exception):
    """A request the command will not carry out: one line naming the fix (exit 2)."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage block and exits; the CLI's rule is one line, exit 2.
    def error(self, message: str) -> NoReturn:
        raise Refused(f"{message} (see {self.prog} --help)")


def _connection_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namespace", help="the namespace (default: the context's, else "
                   "'default')")
    p.add_argument("--kubeconfig", default=os.environ.get("KAIWU_KUBECONFIG"),
                   help="kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")


def backup_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kaiwu backup", description="Create, list and describe KaiwuBackups "
                "(docs/backup.md).")
    commands = p.add_subparsers(dest="action", required=True, metavar="ACTION",
                                parser_class=_Parser)
    create = commands.add_parser("create", help="back a cluster up now")
    create.add_argument("cluster", help="the KaiwuCluster to back up")
    create.add_argument("--name", help="the KaiwuBackup's name (default: "
                        "CLUSTER-YYYYMMDD-HHMMSS, UTC)")
    create.add_argument("--database", action="append", default=[], metavar="DB",
                        help="a database to export (repeat; default: every user database)")
    create.add_argument("--volume-claim", metavar="CLAIM",
                        help="target: the ReadWriteMany claim mounted into the reconciler "
                        "(kaiwu install --backup-volume-claim)")
    create.add_argument("--s3-bucket", help="target: an S3 bucket (with --s3-secret)")
    create.add_argument("--s3-secret", help="the Secret with the S3 keys (labelled "
                        "kaiwu.inspur.com/backup-credentials=true)")
    create.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS)")
    create.add_argument("--s3-prefix", help="key prefix in the bucket")
    create.add_argument("--s3-region", help="the bucket's region")
    create.add_argument("--wait", action="store_true",
                        help="follow the backup until it completes (exit 0) or fails (exit 1)")
    create.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds --wait waits (default {DEFAULT_TIMEOUT_S:g})")
    _connection_flags(create)
    listing = commands.add_parser("list", help="the backups of one cluster or all")
    listing.add_argument("cluster", nargs="?", help="only this cluster's backups")
    listing.add_argument("-A", "--all-namespaces", action="store_true",
                         help="backups in every namespace")
    listing.add_argument("-o", "--output", default="table", choices=("table", "json", "yaml"))
    _connection_flags(listing)
    describe = commands.add_parser("describe", help="one backup, and how to restore it")
    describe.add_argument("name", help="the KaiwuBackup's name")
    describe.add_argument("-o", "--output", default="text", choices=("text", "json", "yaml"))
    _connection_flags(describe)
    return p


def restore_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kaiwu restore", description="Write (or, with --apply, create) a new "
                "KaiwuCluster restored from a completed KaiwuBackup: the source cluster's spec "
                "with spec.bootstrap.fromBackup (docs/backup.md).")
    p.add_argument("--from", dest="source", required=True, metavar="BACKUP",
                   help="the completed KaiwuBackup")
    p.add_argument("--into", required=True, metavar="NEW", help="the new cluster's name")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-f", "--file", help="write the spec to this file (default: stdout)")
    where.add_argument("--apply", action="store_true", help="create the cluster now")
    _connection_flags(p)
    return p


# ---- pure parts --------------------------------------------------------------------------------

def target_of(args: argparse.Namespace, schedules: Sequence[Obj], backups: Sequence[Obj],
              cluster: str) -> Obj:
    """The backup target: from the flags, else the cluster's one schedule, else its newest
    backup; Refused naming the flags when there is none."""
    if args.volume_claim and args.s3_bucket:
        raise Refused("give one target: --volume-claim or --s3-bucket, not both")
    if args.volume_claim:
        return {"volume": {"claimName": args.volume_claim}}
    if args.s3_bucket or args.s3_secret:
        if not (args.s3_bucket and args.s3_secret):
            raise Refused("an S3 target needs both --s3-bucket and --s3-secret")
        s3: Obj = {"bucket": args.s3_bucket, "credentialsSecret": {"name": args.s3_secret}}
        for key, value in (("endpoint", args.s3_endpoint), ("prefix", args.s3_prefix),
                           ("region", args.s3_region)):
            if value:
                s3[key] = value
        return {"s3": s3}
    own = [s for s in schedules if ((s.get("spec") or {}).get("cluster") or {}).get("name")
           == cluster]
    if len(own) == 1:
        target = ((own[0].get("spec") or {}).get("template") or {}).get("target")
        if isinstance(target, Mapping):
            return dict(target)
    mine = sorted((b for b in backups if ((b.get("spec") or {}).get("cluster") or {}).get(
        "name") == cluster), key=lambda b: str(meta(b).get("creationTimestamp") or ""))
    if mine and isinstance((mine[-1].get("spec") or {}).get("target"), Mapping):
        return dict(mine[-1]["spec"]["target"])
    why = (f"{len(own)} KaiwuBackupSchedules back it up" if own
           else "no KaiwuBackupSchedule or earlier KaiwuBackup names one")
    raise Refused(f"no target for a backup of {cluster} ({why}): give --volume-claim CLAIM, "
                  "or --s3-bucket BUCKET --s3-secret SECRET")


def backup_object(namespace: str, name: str, cluster: str, target: Obj,
                  databases: Sequence[str]) -> Obj:
    spec: Obj = {"cluster": {"name": cluster}, "target": target}
    if databases:
        spec["databases"] = list(databases)
    return {"apiVersion": schema.API_VERSION, "kind": schema.BACKUP_KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def default_name(cluster: str, now: float) -> str:
    return f"{cluster}-{datetime.fromtimestamp(now, UTC).strftime('%Y%m%d-%H%M%S')}"


def restore_spec(source: Obj, backup: str, new: str) -> Obj:
    """The source cluster's spec under a new name, started from `backup`. Secret names the
    user gave the source (its certificates name the source's hosts) are dropped: the new
    cluster gets its own; so are spec.paused and any earlier bootstrap."""
    spec = copy.deepcopy(source.get("spec") or {})
    spec.pop("paused", None)
    tls = spec.get("tls")
    if isinstance(tls, dict):
        for key in ("nodeSecretName", "clientSecretName"):
            tls.pop(key, None)
    spec["bootstrap"] = {"fromBackup": {"name": backup}}
    md = meta(source)
    labels = {key: value for key, value in (md.get("labels") or {}).items()
              if not key.startswith("app.kubernetes.io/")}
    metadata: Obj = {"name": new, "namespace": md.get("namespace")}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": source.get("apiVersion", schema.API_VERSION), "kind": schema.KIND,
            "metadata": metadata, "spec": spec}


def _phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "pending")


def _target_text(obj: Obj) -> str:
    target = (obj.get("spec") or {}).get("target") or {}
    if "volume" in target:
        return f"volume {(target['volume'] or {}).get('claimName', '?')}"
    if "s3" in target:
        s3 = target["s3"] or {}
        return f"s3://{s3.get('bucket', '?')}/{s3.get('prefix', '')}".rstrip("/")
    return "?"


def backup_rows(backups: Sequence[Obj]) -> list[dict[str, Any]]:
    """One plain row per backup, oldest first (what -o json|yaml print)."""
    rows = []
    for obj in sorted(backups, key=lambda b: (str(meta(b).get("creationTimestamp") or ""),
                                              str(meta(b).get("name")))):
        status = obj.get("status") or {}
        rows.append({"namespace": meta(obj).get("namespace"), "name": meta(obj).get("name"),
                     "cluster": ((obj.get("spec") or {}).get("cluster") or {}).get("name"),
                     "phase": _phase(obj), "target": _target_text(obj),
                     "sizeBytes": status.get("sizeBytes"), "startedAt": status.get("startedAt"),
                     "completedAt": status.get("completedAt"), "reason": status.get("reason"),
                     "message": status.get("message"),
                     "created": meta(obj).get("creationTimestamp")})
    return rows


def table(rows: Sequence[Mapping[str, Any]], all_namespaces: bool) -> str:
    if not rows:
        return "No KaiwuBackups found.\n"
    header = (["NAMESPACE"] if all_namespaces else []) + [
        "NAME", "CLUSTER", "PHASE", "SIZE", "COMPLETED", "TARGET", "REASON"]
    lines = [[*([str(r["namespace"])] if all_namespaces else []), str(r["name"]),
              str(r["cluster"]), str(r["phase"]), _bytes(r["sizeBytes"]),
              str(r["completedAt"] or "-"), str(r["target"]), str(r["reason"] or "")]
             for r in rows]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                        strict=True)).rstrip()
                   + "\n" for row in [header, *lines])


def _bytes(value: Any) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "-"  # pragma: no cover - the loop always returns


def describe_text(row: Mapping[str, Any]) -> str:
    lines = [f"{key + ':':<12} {value}" for key, value in (
        ("Name", f"{row['namespace']}/{row['name']}"), ("Cluster", row["cluster"]),
        ("Phase", row["phase"]), ("Target", row["target"]), ("Size", _bytes(row["sizeBytes"])),
        ("Created", row["created"] or "-"), ("Started", row["startedAt"] or "-"),
        ("Completed", row["completedAt"] or "-")) if value is not None]
    if row["reason"] or row["message"]:
        lines.append(f"{'Failure:':<12} {row['reason'] or ''}: {row['message'] or ''}")
    if row["phase"] == "completed":
        lines.append(f"{'Restore:':<12} kaiwu restore --from {row['name']} --into NEW "
                     f"-n {row['namespace']} --apply")
    return "\n".join(lines) + "\n"


def _dump(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    return str(yaml.safe_dump(data, sort_keys=False))


# ---- the commands ------------------------------------------------------------------------------

def _connect(args: argparse.Namespace) -> tuple[Kube, str]:
    api = load_api_client(args.kubeconfig, args.context)
    check_reachable(api, 10.0)
    namespace = context_namespace(args.namespace, args.kubeconfig, args.context)
    return Kube(api, FIELD_MANAGER, timeout=15.0), namespace


def create(kube: Kube, namespace: str, args: argparse.Namespace, out: TextIO,
           clock: Callable[[], float], sleep: Callable[[float], None]) -> int:
    if kube.get(kk.KAIWU_CLUSTER, namespace, args.cluster) is None:
        raise Refused(f"no KaiwuCluster {args.cluster} in namespace {namespace} (check -n and "
                      "kubectl get kaiwuclusters)")
    schedules, _ = kube.list_objects(kk.KAIWU_BACKUP_SCHEDULE, namespace)
    backups, _ = kube.list_objects(kk.KAIWU_BACKUP, namespace)
    target = target_of(args, schedules, backups, args.cluster)
    name = args.name or default_name(args.cluster, clock())
    try:
        kube.create(backup_object(namespace, name, args.cluster, target, args.database))
    except ApiError as error:
        if error.conflict:
            raise Refused(f"KaiwuBackup {name} exists: give another --name") from error
        raise Refused(f"the API server refused KaiwuBackup {name}: {error.message}") from error
    where = _target_text({"spec": {"target": target}})
    out.write(f"kaiwubackup/{name} created in {namespace} ({where})\n")
    out.flush()
    if not args.wait:
        return EXIT_OK
    deadline = clock() + args.timeout
    last = ""
    while True:
        obj = kube.get(kk.KAIWU_BACKUP, namespace, name)
        if obj is None:
            out.write(f"kaiwubackup/{name} was deleted while it ran\n")
            return EXIT_NOT_DONE
        phase = _phase(obj)
        if phase != last:
            out.write(f"kaiwubackup/{name}: {phase}\n")
            out.flush()
            last = phase
        if phase == "completed":
            row = backup_rows([obj])[0]
            out.write(describe_text(row))
            return EXIT_OK
        if phase == "failed":
            status = obj.get("status") or {}
            out.write(f"kaiwubackup/{name} failed: {status.get('reason') or ''}: "
                      f"{status.get('message') or ''}\n")
            return EXIT_NOT_DONE
        if clock() >= deadline:
            out.write(f"kaiwubackup/{name} is still {phase} after {args.timeout:g}s (it runs "
                      f"on: kaiwu backup describe {name})\n")
            return EXIT_NOT_DONE
        sleep(WAIT_POLL_S)


def restore(kube: Kube, namespace: str, args: argparse.Namespace, out: TextIO) -> int:
    from renderer.errors import RenderError
    from renderer.render import read_live

    backup = kube.get(kk.KAIWU_BACKUP, namespace, args.source)
    if backup is None:
        raise Refused(f"no KaiwuBackup {args.source} in namespace {namespace} (kaiwu backup "
                      "list)")
    if _phase(backup) != "completed":
        raise Refused(f"KaiwuBackup {args.source} is {_phase(backup)}: only a completed backup "
                      "can be restored (kaiwu backup list)")
    cluster = ((backup.get("spec") or {}).get("cluster") or {}).get("name")
    source = kube.get(kk.KAIWU_CLUSTER, namespace, str(cluster))
    if source is None:
        raise Refused(f"the backup's cluster {cluster} is gone, so there is no spec to copy: "
                      f"write a KaiwuCluster with spec.bootstrap.fromBackup.name: {args.source}")
    if kube.get(kk.KAIWU_CLUSTER, namespace, args.into) is not None:
        raise Refused(f"KaiwuCluster {args.into} exists in {namespace}: a restore makes a new "
                      "cluster (choose another --into)")
    spec = restore_spec(source, args.source, args.into)
    try:
        read_live(copy.deepcopy(spec))  # the renderer's verdict, as kaiwu validate gives it
    except RenderError as error:
        raise Refused(f"the restored spec is refused: {error}") from error
    if args.apply:
        kube.create(spec)
        out.write(f"kaiwucluster/{args.into} created in {namespace}, restoring from "
                  f"{args.source} (kaiwu status {args.into} -n {namespace})\n")
        return EXIT_OK
    text = str(yaml.safe_dump(spec, sort_keys=False))
    if args.file:
        with open(args.file, "w", encoding="utf-8") as f:
            f.write(text)
        out.write(f"wrote {args.file}: kubectl apply -f {args.file} creates {args.into}\n")
    else:
        out.write(text)
    return EXIT_OK


def main(argv: Sequence[str], command: str = "backup", out: TextIO | None = None,
         err: TextIO | None = None, clock: Callable[[], float] = time.time,
         sleep: Callable[[float], None] = time.sleep) -> int:
    """`kaiwu backup ...` (command "backup") or `kaiwu restore ...` (command "restore")."""
    out = out or sys.stdout
    err = err or sys.stderr
    prog = f"kaiwu {command}"
    try:
        args = (backup_parser() if command == "backup" else restore_parser()).parse_args(
            list(argv))
        if getattr(args, "all_namespaces", False) and args.namespace:
            raise Refused("-A and -n exclude each other: drop one")
        kube, namespace = _connect(args)
        if command == "restore":
            return restore(kube, namespace, args, out)
        if args.action == "create":
            return create(kube, namespace, args, out, clock, sleep)
        everywhere = getattr(args, "all_namespaces", False)
        found, _ = kube.list_objects(kk.KAIWU_BACKUP, None if everywhere else namespace)
        if args.action == "list":
            rows = [r for r in backup_rows(found)
                    if not args.cluster or r["cluster"] == args.cluster]
            out.write(table(rows, args.all_namespaces) if args.output == "table"
                      else _dump(rows, args.output))
            return EXIT_OK
        rows = [r for r in backup_rows(found) if r["name"] == args.name]
        if not rows:
            raise Refused(f"no KaiwuBackup {args.name} in namespace {namespace} (kaiwu backup "
                          "list)")
        out.write(describe_text(rows[0]) if args.output == "text" else _dump(rows[0],
                                                                            args.output))
        return EXIT_OK
    except (Refused, ConnectionSetupError) as error:
        print(f"{prog}: {error}", file=err)
        return EXIT_ERROR
    except ApiError as error:
        if error.not_found:
            print(f"{prog}: the KaiwuBackup CRD is not installed here (kaiwu install | kubectl "
                  "apply -f -, or check --context)", file=err)
        else:
            print(f"{prog}: the API server refused: {error}", file=err)
        return EXIT_ERROR
    except (urllib3.exceptions.HTTPError, OSError) as error:
        print(f"{prog}: lost the API server: {' '.join(str(error).split())} (check that it is "
              "running, and --context)", file=err)
        return EXIT_ERROR
