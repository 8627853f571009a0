"""`kaiwu restore --from BACKUP --into NEW`: a new KaiwuCluster restored from a completed
KaiwuBackup.

`reconciler.cli.main` hands `kaiwu restore ...` here (and `kubectl kaiwu restore ...`). It writes
a KaiwuCluster NEW with the source cluster's spec and `spec.bootstrap.fromBackup` (checked by the
renderer as `kaiwu validate` checks it), to standard output or -f FILE, or creates it with
--apply; the reconciler then restores it (docs/backup.md). A backup that has not completed, a
NEW that exists, or a source cluster that is gone is refused. It reads the API, refuses and
exits as `kaiwu backup` does (reconciler.backupcmd: the connection flags, `Refused`, the exit
codes). `restore_spec`, the spec of the copy, needs no API and is tested alone.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Sequence
from typing import TextIO

import yaml

from reconciler.backupcmd import (
    EXIT_OK,
    Parser,
    Refused,
    as_dict,
    check_name,
    cluster_of,
    connect,
    guarded,
    phase_of,
)
from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube, add_connection_flags, connection_flags_last
from reconciler.model import Obj, meta
from renderer import schema


def restore_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kaiwu restore", description="Write (or, with --apply, create) a new "
                "KaiwuCluster restored from a completed KaiwuBackup: the source cluster's spec "
                "with spec.bootstrap.fromBackup (docs/backup.md).")
    p.add_argument("--from", dest="source", required=True, metavar="BACKUP",
                   help="the completed KaiwuBackup")
    p.add_argument("--into", required=True, metavar="NEW", help="the new cluster's name")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-f", "--file", help="write the spec to this file (default: stdout)")
    where.add_argument("--apply", action="store_true", help="create the cluster now")
    add_connection_flags(p)
    return p


# Labels a tool sets to own an object (GitOps): a copy carrying them would look like the
# source's app to that tool.
OWNER_LABEL_PREFIXES = ("app.kubernetes.io/", "argocd.argoproj.io/", "kustomize.toolkit.fluxcd.io/",
                        "helm.toolkit.fluxcd.io/")



def restore_spec(source: Obj, backup: str, new: str) -> tuple[Obj, list[str]]:
    """The source cluster's spec under a new name, started from `backup`, and what was not
    copied (said on stderr). Left out: what names the source's identity or address: the Secret
    names and layout of its own certificates (they name the source's hosts: the copy gets its
    own), its client Service settings (a LoadBalancer address or DNS annotation would be claimed
    twice), labels a GitOps tool owns it by; and spec.paused and any earlier bootstrap."""
    spec = copy.deepcopy(as_dict(source.get("spec")))
    dropped = []  # only what differs from what the CRD defaults it to: the rest is no news
    if spec.pop("paused", None):
        dropped.append("spec.paused")
    tls = spec.get("tls")
    if isinstance(tls, dict) and (tls.get("nodeSecretName") or tls.get("clientSecretName")):
        for key in ("nodeSecretName", "clientSecretName", "secretLayout"):
            value = tls.pop(key, None)
            if value and not (key == "secretLayout" and value == "kwbase"):
                dropped.append(f"spec.tls.{key} (the copy gets certificates of its own)")
    service = as_dict(spec.get("service"))
    if service.get("type", "ClusterIP") != "ClusterIP" or service.get("annotations"):
        del spec["service"]
        dropped.append("spec.service (the source's Service type and annotations: its address "
                       "would be claimed twice; set them when the copy replaces it)")
    spec["bootstrap"] = {"fromBackup": {"name": backup}}
    md = meta(source)
    labels = {}
    for key, value in as_dict(md.get("labels")).items():
        if str(key).startswith(OWNER_LABEL_PREFIXES):
            if not str(key).startswith("app.kubernetes.io/"):
                dropped.append(f"label {key} (a tool's ownership of the source)")
        else:
            labels[key] = value
    metadata: Obj = {"name": new, "namespace": md.get("namespace")}
    if labels:
        metadata["labels"] = labels
    return ({"apiVersion": source.get("apiVersion", schema.API_VERSION), "kind": schema.KIND,
             "metadata": metadata, "spec": spec}, dropped)


def restore(kube: Kube, namespace: str, args: argparse.Namespace, out: TextIO,
            err: TextIO | None = None) -> int:
    from renderer.errors import RenderError
    from renderer.render import read_live

    check_name(args.source, "--from")
    check_name(args.into, "--into")
    backup = kube.get(kk.KAIWU_BACKUP, namespace, args.source)
    if backup is None:
        raise Refused(f"no KaiwuBackup {args.source} in namespace {namespace} (kaiwu backup "
                      "list)")
    if phase_of(backup) != "completed":
        raise Refused(f"KaiwuBackup {args.source} is {phase_of(backup)}: only a completed backup "
                      "can be restored (kaiwu backup list)")
    cluster = cluster_of(backup)
    source = kube.get(kk.KAIWU_CLUSTER, namespace, cluster) if cluster else None
    if source is None:
        raise Refused(f"the backup's cluster {cluster} is gone, so there is no spec to copy: "
                      f"write a KaiwuCluster with spec.bootstrap.fromBackup.name: {args.source}")
    if kube.get(kk.KAIWU_CLUSTER, namespace, args.into) is not None:
        raise Refused(f"KaiwuCluster {args.into} exists in {namespace}: a restore makes a new "
                      "cluster (choose another --into)")
    spec, dropped = restore_spec(source, args.source, args.into)
    try:
        read_live(copy.deepcopy(spec))  # the renderer's verdict, as kaiwu validate gives it
    except RenderError as error:
        raise Refused(f"the restored spec is refused: {error}") from error
    for what in dropped:
        print(f"kaiwu restore: not copied from {cluster}: {what}", file=err or sys.stderr)
    if args.apply:
        kube.create(spec)
        out.write(f"kaiwucluster/{args.into} created in {namespace}, restoring from "
                  f"{args.source} (kaiwu status {args.into} -n {namespace})\n")
        return EXIT_OK
    text = str(yaml.safe_dump(spec, sort_keys=False))
    if not args.file:
        out.write(text)
        return EXIT_OK
    written = f"{args.file}.kaiwu-tmp"
    try:
        with open(written, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(written, args.file)  # whole or not at all
    except OSError as error:
        raise Refused(f"cannot write {args.file}: {error.strerror or error}") from error
    out.write(f"wrote {args.file}: kubectl apply -f {args.file} creates {args.into}\n")
    return EXIT_OK



def main(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`kaiwu restore ...`."""
    out = out or sys.stdout
    err = err or sys.stderr

    def run() -> int:
        assert out is not None
        args = restore_parser().parse_args(connection_flags_last(argv))
        kube, namespace = connect(args)
        return restore(kube, namespace, args, out, err)

    return guarded("kaiwu restore", err, run)
