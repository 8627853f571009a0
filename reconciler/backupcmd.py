"""`kaiwu backup create|list|describe`: backups from the command line.

`reconciler.cli.main` hands `kaiwu backup ...` here (and `kubectl kaiwu backup ...`, the same
entry point); `kaiwu restore` (reconciler.restorecmd) shares its connection, refusals and exit
codes (`connect`, `Refused`, `guarded`). Like `kaiwu status` it reads the API as kubectl does
(a kubeconfig and context, or the pod's service account) through `reconciler.kube.client.Kube`,
with kubectl's --kubeconfig, --context and -n/--namespace flags.

- `backup create CLUSTER` makes a KaiwuBackup (the reconciler runs it: docs/backup.md). Its
  target is given with --s3-bucket/--s3-secret or --volume-claim, or taken from the cluster's
  KaiwuBackupSchedule when it has exactly one (the place its backups already go), else from its
  newest KaiwuBackup; with none of those it is refused, naming the flags. --wait follows it:
  exit 0 completed, 1 failed (its reason) or timed out.
- `backup list [CLUSTER]` and `backup describe NAME`: phase, times, size, target, failure, and
  for a completed one the restore command.

Exit codes as the CLI's: 0 done, 1 not done (a backup failed or a wait timed out), 2 an error
or a refusal (one line on stderr naming the fix, no traceback). The pure parts (`target_of`,
`backup_object`, `backup_rows`, `describe_text`) need no API and are tested alone.
"""

from __future__ import annotations

import argparse
import json
import math
import re
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
    add_connection_flags,
    check_reachable,
    connection_flags_last,
    context_namespace,
    load_api_client,
)
from reconciler.model import Obj, meta
from reconciler.status import one_line
from renderer import schema

EXIT_OK, EXIT_NOT_DONE, EXIT_ERROR = 0, 1, 2
FIELD_MANAGER = "kaiwu-cli"
WAIT_POLL_S = 2.0
DEFAULT_TIMEOUT_S = 3600.0
NAME_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class Refused(Exception):
    """A request the command will not carry out: one line naming the fix (exit 2)."""


class Parser(argparse.ArgumentParser):
    # argparse prints the whole usage block and exits; the CLI's rule is one line, exit 2.
    def error(self, message: str) -> NoReturn:
        raise Refused(f"{message} (see {self.prog} --help)")


def backup_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kaiwu backup", description="Create, list and describe KaiwuBackups "
                "(docs/backup.md).")
    commands = p.add_subparsers(dest="action", required=True, metavar="ACTION",
                                parser_class=Parser)
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
    create.add_argument("--s3-allow-plain-http", action="store_true",
                        help="allow an http:// --s3-endpoint (keys and data cross the network "
                        "unencrypted)")
    create.add_argument("--wait", action="store_true",
                        help="follow the backup until it completes (exit 0) or fails (exit 1)")
    create.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds --wait waits (default {DEFAULT_TIMEOUT_S:g})")
    add_connection_flags(create)
    listing = commands.add_parser("list", help="the backups of one cluster or all")
    listing.add_argument("cluster", nargs="?", help="only this cluster's backups")
    listing.add_argument("-A", "--all-namespaces", action="store_true",
                         help="backups in every namespace")
    listing.add_argument("-o", "--output", default="table", choices=("table", "json", "yaml"))
    add_connection_flags(listing)
    describe = commands.add_parser("describe", help="one backup, and how to restore it")
    describe.add_argument("name", help="the KaiwuBackup's name")
    describe.add_argument("-o", "--output", default="text", choices=("text", "json", "yaml"))
    add_connection_flags(describe)
    return p



# ---- pure parts --------------------------------------------------------------------------------

def _s3_details(args: argparse.Namespace) -> list[str]:
    return [flag for flag, value in (("--s3-secret", args.s3_secret),
                                     ("--s3-endpoint", args.s3_endpoint),
                                     ("--s3-prefix", args.s3_prefix),
                                     ("--s3-region", args.s3_region),
                                     ("--s3-allow-plain-http", args.s3_allow_plain_http))
            if value]


def named_target(args: argparse.Namespace) -> Obj | None:
    """The target the flags name, None if they name none; Refused for flags that do not fit
    together (none is ever dropped without a word)."""
    details = _s3_details(args)
    if args.volume_claim:
        if args.s3_bucket or details:
            raise Refused("give one target: --volume-claim, or --s3-bucket with its --s3-* "
                          "flags, not both")
        return {"volume": {"claimName": args.volume_claim}}
    if not args.s3_bucket:
        if details:
            raise Refused(f"{', '.join(details)} describe an S3 target: give --s3-bucket too")
        return None
    if not args.s3_secret:
        raise Refused("an S3 target needs both --s3-bucket and --s3-secret")
    endpoint = args.s3_endpoint or ""
    if endpoint.startswith("http://") and not args.s3_allow_plain_http:
        raise Refused(f"--s3-endpoint {endpoint} is plain http: the keys and the data would "
                      "cross the network unencrypted; use https, or add --s3-allow-plain-http")
    s3: Obj = {"bucket": args.s3_bucket, "credentialsSecret": {"name": args.s3_secret}}
    for key, value in (("endpoint", args.s3_endpoint), ("prefix", args.s3_prefix),
                       ("region", args.s3_region)):
        if value:
            s3[key] = value
    if args.s3_allow_plain_http:
        s3["allowPlainHttp"] = True
    return {"s3": s3}


def target_of(args: argparse.Namespace, schedules: Sequence[Obj], backups: Sequence[Obj],
              cluster: str) -> Obj:
    """The backup target: from the flags, else the cluster's one schedule, else its newest
    completed backup; Refused naming the flags when there is none."""
    named = named_target(args)
    if named is not None:
        return named
    own = [sch for sch in schedules if cluster_of(sch) == cluster]
    if len(own) == 1:
        target = as_dict(as_dict(own[0].get("spec")).get("template")).get("target")
        if isinstance(target, Mapping):
            return dict(target)
    good = sorted((b for b in backups if cluster_of(b) == cluster and phase_of(b) == "completed"
                   and isinstance(as_dict(b.get("spec")).get("target"), Mapping)),
                  key=lambda b: str(meta(b).get("creationTimestamp") or ""))
    if good:
        return dict(good[-1]["spec"]["target"])
    why = (f"{len(own)} KaiwuBackupSchedules back it up" if own
           else "no KaiwuBackupSchedule or completed KaiwuBackup names one")
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




def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a mapping, else empty: objects from the API are read with care."""
    return dict(value) if isinstance(value, Mapping) else {}


def cluster_of(obj: Obj) -> str | None:
    name = as_dict(as_dict(obj.get("spec")).get("cluster")).get("name")
    return str(name) if name is not None else None


def phase_of(obj: Obj) -> str:
    return one_line(as_dict(obj.get("status")).get("phase") or "pending", 20)


def _target_text(obj: Obj) -> str:
    target = as_dict(as_dict(obj.get("spec")).get("target"))
    if "volume" in target:
        return one_line(f"volume {as_dict(target['volume']).get('claimName', '?')}", 300)
    if "s3" in target:
        s3 = as_dict(target["s3"])
        return one_line(f"s3://{s3.get('bucket', '?')}/{s3.get('prefix', '')}".rstrip("/"),
                        300)
    return "?"


def backup_rows(backups: Sequence[Obj]) -> list[dict[str, Any]]:
    """One plain row per backup, oldest first (what -o json|yaml print)."""
    rows = []
    for obj in sorted(backups, key=lambda b: (str(meta(b).get("creationTimestamp") or ""),
                                              str(meta(b).get("name")))):
        status = as_dict(obj.get("status"))
        size = status.get("sizeBytes")
        rows.append({"namespace": meta(obj).get("namespace"), "name": meta(obj).get("name"),
                     "cluster": cluster_of(obj), "phase": phase_of(obj),
                     "target": _target_text(obj),
                     "sizeBytes": size if isinstance(size, int) and not isinstance(size, bool)
                     else None,
                     "startedAt": status.get("startedAt"),
                     "completedAt": status.get("completedAt"),
                     "consistentTo": status.get("consistentToTime") or status.get("consistentTo"),
                     "reason": status.get("reason"), "message": status.get("message"),
                     "created": meta(obj).get("creationTimestamp")})
    return rows


def table(rows: Sequence[Mapping[str, Any]], all_namespaces: bool) -> str:
    if not rows:
        return "No KaiwuBackups found.\n"
    header = (["NAMESPACE"] if all_namespaces else []) + [
        "NAME", "CLUSTER", "PHASE", "SIZE", "ENDED", "TARGET", "REASON"]
    lines = [[one_line(cell, 80) for cell in (
        *([r["namespace"]] if all_namespaces else []), r["name"], r["cluster"], r["phase"],
        _bytes(r["sizeBytes"]), r["completedAt"] or "-", r["target"], r["reason"] or "")]
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
    lines = [f"{key + ':':<12} {one_line(value, 300)}" for key, value in (
        ("Name", f"{row['namespace']}/{row['name']}"), ("Cluster", row["cluster"]),
        ("Phase", row["phase"]), ("Target", row["target"]), ("Size", _bytes(row["sizeBytes"])),
        ("Created", row["created"] or "-"), ("Started", row["startedAt"] or "-"),
        ("Ended", row["completedAt"] or "-"), ("Consistent", row["consistentTo"]))
        if value is not None]
    if row["phase"] == "failed":
        lines.append(f"{'Failure:':<12} {one_line(row['reason'] or 'failed', 300)}: "
                     f"{one_line(row['message'] or '', 300)}")
    elif row["message"]:
        lines.append(f"{'Message:':<12} {one_line(row['message'], 300)}")
    if row["phase"] == "completed":
        lines.append(f"{'Restore:':<12} kaiwu restore --from {row['name']} --into NEW "
                     f"-n {row['namespace']} --apply")
    return "\n".join(lines) + "\n"


def _dump(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    return str(yaml.safe_dump(data, sort_keys=False))


# ---- the commands ------------------------------------------------------------------------------

def connect(args: argparse.Namespace) -> tuple[Kube, str]:
    api = load_api_client(args.kubeconfig, args.context)
    check_reachable(api, 10.0)
    namespace = context_namespace(args.namespace, args.kubeconfig, args.context)
    return Kube(api, FIELD_MANAGER, timeout=15.0), namespace


def create(kube: Kube, namespace: str, args: argparse.Namespace, out: TextIO,
           clock: Callable[[], float], sleep: Callable[[float], None]) -> int:
    check_name(args.cluster, "CLUSTER")
    if args.name:
        check_name(args.name, "--name")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise Refused(f"--timeout {args.timeout:g}: give a number of seconds above 0")
    cluster = kube.get(kk.KAIWU_CLUSTER, namespace, args.cluster)
    if cluster is None:
        raise Refused(f"no KaiwuCluster {args.cluster} in namespace {namespace} (check -n and "
                      "kubectl get kaiwuclusters)")
    target = named_target(args)
    if target is None:  # only then are the schedules and backups read (and `list` needed)
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
    paused = as_dict(cluster.get("spec")).get("paused") or as_dict(meta(cluster).get(
        "annotations")).get(f"{schema.GROUP}/paused") == "true"
    if paused:
        out.write(f"note: KaiwuCluster {args.cluster} is paused: the backup waits until it is "
                  "resumed\n")
    out.flush()
    if not args.wait:
        return EXIT_OK
    try:
        return _follow(kube, namespace, name, args.timeout, out, clock, sleep)
    except KeyboardInterrupt:
        out.write(f"\nstopped waiting; kaiwubackup/{name} runs on (kaiwu backup describe "
                  f"{name})\n")
        return EXIT_NOT_DONE


def _follow(kube: Kube, namespace: str, name: str, timeout: float, out: TextIO,
            clock: Callable[[], float], sleep: Callable[[float], None]) -> int:
    """Print each phase and message of the backup until it ends or `timeout` passes."""
    deadline = clock() + timeout
    last = ("", "")
    while True:
        obj = kube.get(kk.KAIWU_BACKUP, namespace, name)
        if obj is None:
            out.write(f"kaiwubackup/{name} was deleted while it ran\n")
            return EXIT_NOT_DONE
        row = backup_rows([obj])[0]
        phase, message = row["phase"], one_line(row["message"] or "", 200)
        if phase in ("completed", "failed"):
            out.write(f"kaiwubackup/{name}: {phase}\n")
            out.write(describe_text(row))
            return EXIT_OK if phase == "completed" else EXIT_NOT_DONE
        if (phase, message) != last:
            out.write(f"kaiwubackup/{name}: {phase}" + (f" ({message})" if message else "")
                      + "\n")
            out.flush()
            last = (phase, message)
        if clock() >= deadline:
            out.write(f"kaiwubackup/{name} is still {phase} after {timeout:g}s (it runs on: "
                      f"kaiwu backup describe {name})\n")
            return EXIT_NOT_DONE
        sleep(WAIT_POLL_S)


def check_name(name: str, what: str) -> None:
    """A Kubernetes object name (DNS-1123 subdomain), checked before it reaches a URL."""
    if not (0 < len(name) <= 253 and NAME_PATTERN.fullmatch(name)):
        raise Refused(f"{what} {name!r} is not a Kubernetes name (lower-case letters, digits, "
                      "'-' and '.', starting and ending with a letter or digit)")



def main(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None,
         clock: Callable[[], float] = time.time,
         sleep: Callable[[float], None] = time.sleep) -> int:
    """`kaiwu backup ...`."""
    out = out or sys.stdout

    def run() -> int:
        assert out is not None
        args = backup_parser().parse_args(connection_flags_last(argv))
        if getattr(args, "all_namespaces", False) and args.namespace:
            raise Refused("-A and -n exclude each other: drop one")
        kube, namespace = connect(args)
        if args.action == "create":
            return create(kube, namespace, args, out, clock, sleep)
        if args.action == "describe":
            check_name(args.name, "NAME")
            found = kube.get(kk.KAIWU_BACKUP, namespace, args.name)
            if found is None:
                raise Refused(f"no KaiwuBackup {args.name} in namespace {namespace} (kaiwu "
                              "backup list)")
            row = backup_rows([found])[0]
            out.write(describe_text(row) if args.output == "text" else _dump(row, args.output))
            return EXIT_OK
        everywhere = bool(args.all_namespaces)
        listed, _ = kube.list_objects(kk.KAIWU_BACKUP, None if everywhere else namespace)
        rows = [r for r in backup_rows(listed) if not args.cluster or r["cluster"] == args.cluster]
        out.write(table(rows, everywhere) if args.output == "table"
                  else _dump(rows, args.output))
        return EXIT_OK

    return guarded("kaiwu backup", err or sys.stderr, run)


def guarded(prog: str, err: TextIO, run: Callable[[], int]) -> int:
    """`run`'s exit code; a refusal or an API server that cannot be used said on one line of
    `err` (exit 2, no traceback). For `kaiwu backup` and `kaiwu restore` (reconciler.restorecmd)."""
    try:
        return run()
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
