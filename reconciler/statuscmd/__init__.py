"""`kaiwu status`: what each KaiwuCluster is doing, for a person on call (or a script).

`reconciler.cli.main` hands `kaiwu status ...` here. It reads the API like kubectl (a kubeconfig
and context, or the pod's service account in a pod) through `reconciler.kube.client.Kube`, and
prints per cluster: conditions with reasons and since when, the version and the StatefulSet's
rollout (partition, revisions), each pod (Kubernetes node, KaiwuDB node id from status.nodes,
liveness, ready, restarts), the operation in progress (a scale-in from status.operation, an
upgrade from the rollout, a failover from status.failures), the drift state (the Drifted
condition), when the node certificate expires (read from its Secret) and the last actions.

Cost: one list per kind (KaiwuClusters, StatefulSets, Pods, Secrets, KaiwuBackups,
KaiwuBackupSchedules) per namespace shown, or one cluster-wide list each with -A, never one
request per pod; everything else is computed. So 50 clusters cost six requests. Per cluster it
also shows its backups: the last success, one running, the next scheduled run, failures since
the last success (an install without the backup CRDs shows none).

`gather` (reconciler.statuscmd.reading) reads the API into plain data built by
reconciler.statuscmd.report (what `-o json|yaml` print); `table` (reconciler.statuscmd.formatting)
formats it for people; report and formatting are pure, so the unit tests need no API. This
package's entry point holds the command (its flags, the watch loop, the exit codes) and names
what callers use. Exit codes: 0 every cluster shown is Ready, 1 some are not, 2 an error (one
line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TextIO

import urllib3

from reconciler.kube.client import (
    ApiError,
    ConnectionSetupError,
    Kube,
    add_connection_flags,
    check_reachable,
    context_namespace,
    load_api_client,
)
from reconciler.statuscmd.formatting import render, table, use_colour
from reconciler.statuscmd.reading import gather
from reconciler.statuscmd.report import ago, backups_summary, cluster_report, node_cert_expiry

__all__ = ["UsageError", "ago", "backups_summary", "cluster_report", "exit_code", "gather",
           "main", "node_cert_expiry", "parser", "render", "table", "use_colour"]

EXIT_READY, EXIT_NOT_READY, EXIT_ERROR = 0, 1, 2
WATCH_INTERVAL_S = 3.0
FIELD_MANAGER = "kaiwu-status"  # never writes; named so an audit log tells its reads apart


class UsageError(Exception):
    """Bad flags: one line naming the flag and the fix."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage block and exits; the CLI's rule is one line, exit 2.
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see kaiwu status --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kaiwu status", description="Show what each KaiwuCluster is doing. "
                "Exit 0: every cluster shown is Ready; 1: some are not; 2: error.")
    p.add_argument("cluster", nargs="?", help="one cluster's name (default: every cluster)")
    p.add_argument("-A", "--all-namespaces", action="store_true",
                   help="clusters in every namespace")
    p.add_argument("-o", "--output", default="table", choices=("table", "json", "yaml"))
    p.add_argument("--watch", action="store_true",
                   help=f"redraw every {WATCH_INTERVAL_S:g} s until Ctrl-C")
    add_connection_flags(p)
    return p


def exit_code(reports: Sequence[Mapping[str, Any]]) -> int:
    """0 when every cluster shown is Ready, else 1."""
    return EXIT_READY if all(r["ready"] for r in reports) else EXIT_NOT_READY


def main(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None,
         sleep: Callable[[float], None] = time.sleep) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = parser().parse_args(list(argv))
        if args.all_namespaces and args.cluster:
            raise UsageError("a cluster name needs one namespace: drop -A or the name")
        if args.all_namespaces and args.namespace:
            raise UsageError("-A and -n exclude each other: drop one")
        api = load_api_client(args.kubeconfig, args.context)
        check_reachable(api, 10.0)
    except UsageError as error:
        print(f"kaiwu status: {error}", file=err)
        return EXIT_ERROR
    except ConnectionSetupError as error:
        print(f"kaiwu status: {error}", file=err)
        return EXIT_ERROR
    kube = Kube(api, FIELD_MANAGER, timeout=15.0)
    namespace = None if args.all_namespaces else context_namespace(
        args.namespace, args.kubeconfig, args.context)
    colour = args.output == "table" and use_colour(out)
    code = EXIT_ERROR
    try:
        while True:
            try:
                reports = gather(kube, namespace, args.cluster)
            except ApiError as error:
                if error.not_found:
                    print("kaiwu status: the KaiwuCluster CRD is not installed here (kaiwu "
                          "install | kubectl apply -f -, or check --context)", file=err)
                else:
                    print(f"kaiwu status: reading the API failed: {error}", file=err)
                return EXIT_ERROR
            except (urllib3.exceptions.HTTPError, OSError) as error:
                print(f"kaiwu status: lost the API server: {' '.join(str(error).split())} "
                      "(check that it is running, and --context)", file=err)
                return EXIT_ERROR
            except LookupError as error:
                print(f"kaiwu status: {error.args[0]}", file=err)
                return EXIT_ERROR
            text = render(reports, args.output, colour)
            code = exit_code(reports)
            if args.watch and out.isatty():
                out.write("\033[H\033[2J")  # redraw in place, as `watch` does
            if args.watch and args.output == "table":
                text = time.strftime("%Y-%m-%d %H:%M:%S  ") + "(Ctrl-C to stop)\n" + text
            out.write(text)
            out.flush()
            if not args.watch:
                return code
            sleep(WATCH_INTERVAL_S)
    except KeyboardInterrupt:
        # Ctrl-C is how --watch ends: exit with the last view's code, no traceback.
        return code
