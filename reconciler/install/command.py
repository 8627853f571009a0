"""The command lines `kaiwu install` and `kaiwu uninstall`: their flags, checked into an Options,
and the bundle or the removal list printed, or one line naming every problem (exit 2).

Called by `reconciler.cli.main` through reconciler.install (main, uninstall_main).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from reconciler.install.documents import render
from reconciler.install.options import DEFAULT_NAMESPACE, NAME, SCOPES, Options, default_image
from reconciler.install.removal import render_removal
from reconciler.settings import SHARD_LABEL
from renderer.settings import DEFAULT_KUBE_VERSION, KubeVersion, supported_version

EXIT_OK, EXIT_INVALID = 0, 2


def uninstall_parser() -> argparse.ArgumentParser:
    result = _Parser(prog="kaiwu uninstall", description=(
        "Print what removing the reconciler deletes (its Deployment, RBAC, Services, webhook "
        "registration, Lease; never the CRDs, the namespace or anything of a KaiwuCluster), "
        "for: kaiwu uninstall | kubectl delete --ignore-not-found -f -. Give the flags the "
        "install was made with."))
    result.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                        help="where the reconciler runs (default: %(default)s)")
    result.add_argument("--scope", default="cluster", choices=SCOPES,
                        help="the install's scope (default: %(default)s)")
    result.add_argument("--watch-namespace", default="", metavar="NS",
                        help="with --scope namespaced: the namespace it reconciled")
    result.add_argument("--kube-version", type=_kube_version, default=DEFAULT_KUBE_VERSION,
                        help="your cluster's Kubernetes version (default: %(default)s; 1.20 "
                        "names the PodDisruptionBudget policy/v1beta1)")
    result.add_argument("--shard", default="", metavar="NAME",
                        help="remove one shard's own objects only")
    return result


def uninstall_main(argv: Sequence[str]) -> int:
    """`kaiwu uninstall ...`: print the removal list; exit 2 with one line for bad flags."""
    args = uninstall_parser().parse_args(list(argv))
    options = Options(namespace=args.namespace, scope=args.scope,
                      watch_namespace=args.watch_namespace, kube_version=args.kube_version,
                      shard=args.shard)
    return _print("kaiwu uninstall", options, render_removal)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr (exit 2), not usage and a traceback."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INVALID, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _kube_version(text: str) -> KubeVersion:
    try:
        return supported_version(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def parser() -> argparse.ArgumentParser:
    result = _Parser(prog="kaiwu install", description=(
        "Print the reconciler's install bundle (CRDs, Namespace, ServiceAccount, RBAC, "
        "Services, webhook registration, NetworkPolicy, PodDisruptionBudget, Deployment) as "
        "YAML: kaiwu install | kubectl apply -f -"))
    result.add_argument("--image", default="", metavar="REF", help=(
        f"the reconciler's image (default: {default_image()}, not published yet: build it with "
        "`make image`, copy it to your registry with `make push IMAGE=REF` and give that REF "
        "here)"))
    result.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                        help="where the reconciler runs (default: %(default)s)")
    result.add_argument("--scope", default="cluster", choices=SCOPES,
                        help="cluster: reconcile every namespace (default); namespaced: only "
                        "--watch-namespace, with Roles there and no cluster-wide writes")
    result.add_argument("--watch-namespace", action="append", default=[], metavar="NS",
                        help="with --scope namespaced: the one namespace to reconcile")
    result.add_argument("--directory-mode", action="store_true",
                        help="GitOps pull: a git-sync sidecar (example image) and the rights to "
                        "create, apply and delete KaiwuClusters from its checkout")
    result.add_argument("--git-repo", default="", metavar="URL",
                        help="with --directory-mode: the repository holding KaiwuCluster files")
    result.add_argument("--source-namespace", action="append", default=[], metavar="NS",
                        help="with --directory-mode: a namespace its files may put "
                        "KaiwuClusters in (repeatable; * for any; default: --namespace, or "
                        "the watched namespace)")
    result.add_argument("--kube-version", type=_kube_version, default=DEFAULT_KUBE_VERSION,
                        help="your cluster's Kubernetes version (default: %(default)s, which "
                        "installs on 1.28 and every later release; give yours for its extra "
                        "CEL rules, e.g. 1.29 refuses a smaller volume; 1.20 to 1.24 must be "
                        "given: their API servers lack policy/v1 or CEL)")
    result.add_argument("--shard", default="", metavar="NAME",
                        help=f"a bundle for one shard: its Deployment ({NAME}-NAME), Lease and "
                        f"metrics Service reconcile only KaiwuClusters labelled "
                        f"{SHARD_LABEL}=NAME (default: the unnamed shard, the clusters without "
                        "the label)")
    result.add_argument("--backup-volume-claim", action="append", default=[], metavar="NAME",
                        help="a ReadWriteMany claim in --namespace to mount for KaiwuBackups "
                        "with a volume target (repeatable; docs/backup.md)")
    result.add_argument("--crds-only", action="store_true",
                        help="print only the CRDs (KaiwuCluster, KaiwuBackup, "
                        "KaiwuBackupSchedule), for whoever manages CRDs apart; no other flag "
                        "but --kube-version")
    result.add_argument("--skip-crds", action="store_true",
                        help="print everything but the CRDs (apply `kaiwu install --crds-only` "
                        "first)")
    return result


def main(argv: Sequence[str]) -> int:
    """`kaiwu install ...`: print the bundle; exit 2 with one line on stderr for bad flags."""
    args = parser().parse_args(list(argv))
    if len(args.watch_namespace) > 1:
        # The reconciler's caches watch one namespace or all of them.
        print("kaiwu install: --watch-namespace: a namespaced install watches one namespace; "
              "install once per namespace (each with its own --namespace) or use --scope "
              "cluster", file=sys.stderr)
        return EXIT_INVALID
    options = Options(image=args.image, namespace=args.namespace, scope=args.scope,
                      watch_namespace="".join(args.watch_namespace),
                      directory_mode=args.directory_mode,
                      git_repo=args.git_repo, kube_version=args.kube_version,
                      source_namespaces=tuple(args.source_namespace),
                      shard=args.shard,
                      backup_volume_claims=tuple(args.backup_volume_claim),
                      crds_only=args.crds_only, skip_crds=args.skip_crds)
    return _print("kaiwu install", options, render)


def _print(command: str, options: Options, text_of: Callable[[Options], str]) -> int:
    """The YAML `text_of(options)` on stdout, or one line naming every problem of the flags on
    stderr and exit 2 (nothing printed)."""
    problems = options.problems()
    if problems:
        print(f"{command}: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(text_of(options))
    return EXIT_OK
