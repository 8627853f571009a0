"""The `kaiwu` command: specs (render, validate, diff), the reconciler, status, backups, restores.

Entry point of the console script. Exit codes: 0 success (or no difference), 1 differences found
(`diff` only), 2 invalid input or a change the reconciler would refuse, with one
`file:line: path: problem (fix)` line per mistake on stderr and nothing written. For `render`
and `validate`, a source `-` reads standard input (once). The `kaiwu` console script starts in
reconciler.cli, which runs `kaiwu reconcile` itself and hands every other subcommand here: the
renderer imports nothing from the reconciler.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from renderer.errors import OutputDirectoryError, Problem, RenderError
from renderer.settings import CEL_SINCE, KubeVersion, RenderSettings, supported_version
from renderer.versions import ALLOW_FLAG, KNOWN_VERSIONS, unknown_versions

if TYPE_CHECKING:
    from renderer.loader import ParseCache

# Each command imports what it uses when it runs (jsonschema, the YAML libraries, the diff
# path): `kaiwu --help` and `kaiwu validate` start in a fraction of the time (bench/cli_start.py;
# tests/unit/test_cli_imports.py keeps the heavy modules out of the start-up path).

EXIT_OK, EXIT_CHANGES, EXIT_INVALID = 0, 1, 2
DEFAULT_SOURCE = "clusters"
DEFAULT_OUT = "out"


def _kube_version(text: str) -> KubeVersion:
    try:
        return supported_version(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _version() -> str:
    """The installed distribution's version (pyproject.toml's), so the image and a wheel say
    which release they are."""
    from importlib import metadata  # 35 ms: only for --version

    try:
        return metadata.version("kaiwu-operator")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """--version, looking the version up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help or "show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        sys.stdout.write(f"kaiwu {_version()}\n")  # as argparse's own version action does
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kaiwu", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    defaults = RenderSettings()

    def add_render_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--kube-version", type=_kube_version, default=defaults.kube_version,
                         help=f"your cluster's Kubernetes version (default "
                         f"{defaults.kube_version}: its manifests suit every release from it on)")
        sub.add_argument("--cluster-domain", default=defaults.cluster_domain,
                         help=f"cluster DNS domain (default {defaults.cluster_domain})")
        sub.add_argument(ALLOW_FLAG, action="store_true", dest="allow_unknown_version",
                         help="accept a spec.version this kaiwu does not know (a newer "
                         f"KaiwuDB release), with a warning; known: {', '.join(KNOWN_VERSIONS)}")

    render = commands.add_parser("render", help="render KaiwuCluster files to manifests")
    render.add_argument("source", nargs="?", default=DEFAULT_SOURCE,
                        help="directory or file of KaiwuCluster specs, - for standard input "
                        f"(default {DEFAULT_SOURCE})")
    where = render.add_mutually_exclusive_group()
    where.add_argument("-o", "--out", type=Path, default=Path(DEFAULT_OUT),
                       help=f"output directory, replaced as a whole (default {DEFAULT_OUT})")
    where.add_argument("--stdout", action="store_true", help="print one YAML stream instead")
    add_render_options(render)

    validate = commands.add_parser("validate", help="check KaiwuCluster files, write nothing")
    validate.add_argument("sources", nargs="*", default=[DEFAULT_SOURCE],
                          help="directories or files, - for standard input (default "
                          f"{DEFAULT_SOURCE})")
    add_render_options(validate)

    compare = commands.add_parser(
        "diff", help="show how rendered objects change (exit 0 none, 1 changes, 2 error)",
        description="kaiwu diff OLD NEW (two directories), or kaiwu diff PATH --base REV "
                    "[--head REV] (one path at two git revisions; head defaults to the "
                    "working tree)")
    compare.add_argument("paths", nargs="+", metavar="PATH")
    compare.add_argument("--base", help="git revision of the old side, e.g. origin/main")
    compare.add_argument("--head", help="git revision of the new side (default: working tree)")
    compare.add_argument("--repo", type=Path, default=Path("."),
                         help="git repository for --base/--head (default: current directory)")
    compare.add_argument("--format", choices=("text", "markdown"), default="text")
    add_render_options(compare)

    crd = commands.add_parser(
        "crd", help="print the KaiwuCluster CRD for a Kubernetes version",
        description="Print the KaiwuCluster CRD: the schema, plus the CEL validation rules "
                    f"(x-kubernetes-validations) from Kubernetes {CEL_SINCE} on.")
    crd.add_argument("--kube-version", type=_kube_version, default=defaults.kube_version,
                     help=f"your cluster's Kubernetes version (default {defaults.kube_version}: "
                     "its CEL rules suit every release from it on; give yours for more)")

    commands.add_parser("reconcile", help="run the reconciler (see kaiwu reconcile --help)",
                        add_help=False)
    commands.add_parser("install", help="print the operator's install bundle (see kaiwu "
                        "install --help)", add_help=False)
    commands.add_parser("uninstall", help="print what removing the operator deletes, never a "
                        "KaiwuCluster's pods, claims or Secrets (see kaiwu uninstall --help)",
                        add_help=False)
    commands.add_parser("status", help="show the clusters as the reconciler reports them (see "
                        "kaiwu status --help)", add_help=False)
    commands.add_parser("backup", help="create, list and describe KaiwuBackups (see kaiwu "
                        "backup --help)", add_help=False)
    commands.add_parser("restore", help="a new cluster from a completed backup (see kaiwu "
                        "restore --help)", add_help=False)
    return parser


def _settings(args: argparse.Namespace) -> RenderSettings:
    return RenderSettings(kube_version=args.kube_version, cluster_domain=args.cluster_domain)


def _nothing_found(source: str) -> Problem:
    """No KaiwuCluster where `validate` looked: an error, never "0 specs are valid" (a CI step
    pointed at the wrong directory would pass for ever)."""
    return Problem(source, 0, "", "no KaiwuCluster found (searched the *.yaml and *.yml files "
                   "there, hidden ones skipped)",
                   "pass the directory or file that holds your KaiwuCluster specs, e.g. "
                   "clusters/")


def _known_versions(args: argparse.Namespace, unknown: list[Problem]) -> list[Problem]:
    """The problems of versions this kaiwu does not know: errors, or with
    --allow-unknown-version warnings on stderr and none."""
    if not args.allow_unknown_version:
        return unknown
    for problem in unknown:
        print(f"warning: {problem}", file=sys.stderr)
    return []


def _render(args: argparse.Namespace) -> int:
    from renderer.emit import manifest_for, to_stream, write_tree
    from renderer.render import build_objects, load_sources

    # No spec found renders an empty kustomization (every cluster removed from the repository
    # is a preview too); `validate` is where finding none is an error.
    settings = _settings(args)
    sources = load_sources(Path(args.source))
    problems = _known_versions(args, unknown_versions(sources.clusters))
    if problems:
        raise RenderError(problems)
    manifests = [manifest_for(obj, source.cluster.name) for source in sources.clusters
                 for obj in build_objects(source.cluster, settings)]
    # Backups and schedules kept beside the clusters go out as written, in their cluster's
    # directory.
    manifests += [manifest_for(companion.manifest(), companion.cluster)
                  for companion in sources.companions]
    if args.stdout:
        sys.stdout.write(to_stream(manifests))
        return EXIT_OK
    write_tree(manifests, args.out)
    clusters = len(sources.clusters)
    print(f"rendered {len(manifests)} objects of {clusters} clusters into {args.out}/ "
          f"(Kubernetes {args.kube_version}): a preview of what the reconciler creates; "
          "commit the specs, not these files (README, \"GitOps, end to end\")")
    return EXIT_OK


def _crd(args: argparse.Namespace) -> int:
    from renderer.cel import crd_for
    from renderer.emit import to_yaml

    sys.stdout.write(to_yaml(crd_for(args.kube_version)))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from renderer.render import load_sources

    problems: list[Problem] = []
    count = companions = 0
    if args.sources.count("-") > 1:
        raise _UsageError("standard input (-) can be read once")
    for source in args.sources:
        try:
            found = load_sources(Path(source))
        except RenderError as error:
            problems.extend(error.problems)
            continue
        if not found.clusters and not found.companions:
            problems.append(_nothing_found(source))
        problems.extend(_known_versions(args, unknown_versions(found.clusters)))
        count += len(found.clusters)
        companions += len(found.companions)
    if problems:
        raise RenderError(problems)
    beside = (f", and {companions} KaiwuBackup and KaiwuBackupSchedule object(s)"
              if companions else "")
    print(f"{count} KaiwuCluster specs are valid{beside}")
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from renderer import diff as tree_diff

    base_problems: list[Problem] = []
    shared: ParseCache = {}  # a file both sides hold alike is read and checked once
    if args.base is None:
        if args.head is not None or len(args.paths) != 2:
            raise _UsageError("diff takes two directories, or one path with --base REV")
        old_docs = tree_diff.documents_in(Path(args.paths[0]), shared)
        new_docs = tree_diff.documents_in(Path(args.paths[1]), shared)
    else:
        if len(args.paths) != 1:
            raise _UsageError("with --base, diff takes exactly one path")
        path = args.paths[0]
        head_problems: RenderError | None = None
        if args.head is None:
            # The working tree first: the base's files it holds alike are then not read from
            # git (tree_diff.documents_at_revision). Its problems are said after the base's own
            # failures (a revision that is not there), as when the base was read first.
            try:
                new_docs = tree_diff.documents_in(Path(path), shared)
            except RenderError as error:
                head_problems = error
        try:
            old_docs = tree_diff.documents_at_revision(path, args.base, args.repo, shared)
        except RenderError as error:
            # A base that does not parse is still a base: the change may be its fix.
            if not all(problem.file.startswith(f"{args.base}:") for problem in error.problems):
                raise
            old_docs, base_problems = [], list(error.problems)
        if head_problems is not None:
            raise head_problems
        if args.head is not None:
            new_docs = tree_diff.documents_at_revision(path, args.head, args.repo, shared)
    result = tree_diff.compare(old_docs, new_docs, _settings(args), base_problems)
    problems = _known_versions(args, list(result.unknown_versions))
    if problems:
        raise RenderError(problems)
    formatter = tree_diff.format_markdown if args.format == "markdown" else tree_diff.format_text
    sys.stdout.write(formatter(result))
    if result.refusals:
        # A change the reconciler will refuse fails the check, as every other refusal does.
        print(f"kaiwu diff: {len(result.refusals)} change(s) the reconciler refuses",
              file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK if result.empty else EXIT_CHANGES


class _UsageError(Exception):
    """Arguments that argparse accepts but that do not go together."""


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(arguments)
    if args.command in ("reconcile", "install", "uninstall", "status"):
        # Listed for `kaiwu --help`; run by reconciler.cli, which hands the rest here.
        print(f"kaiwu {args.command}: run it through the kaiwu command", file=sys.stderr)
        return EXIT_INVALID
    handlers = {"render": _render, "validate": _validate, "diff": _diff, "crd": _crd}
    try:
        return handlers[args.command](args)
    except RenderError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        print(f"kaiwu {args.command}: {len(error.problems)} problem(s), nothing written",
              file=sys.stderr)
    except (OutputDirectoryError, _UsageError) as error:
        print(f"kaiwu {args.command}: {error}", file=sys.stderr)
    except OSError as error:
        # A directory that cannot be written or read: say which, and no traceback.
        where = f": {error.filename}" if error.filename else ""
        print(f"kaiwu {args.command}: {error.strerror or error}{where}, nothing written (use a "
              "path that exists, that you may write, on a disk with space)", file=sys.stderr)
    return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
