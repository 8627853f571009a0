"""The `kaiwu` command (the console script's entry point), and `kaiwu reconcile`: run the
reconciler until SIGTERM.

`main` hands `kaiwu render|validate|diff` to the renderer's CLI (renderer.cli, which knows
nothing of the reconciler), `kaiwu install` and `kaiwu status` to their modules
(reconciler.install, reconciler.statuscmd) and `kaiwu reconcile ...` (also `python -m
reconciler`) to `reconcile`. Settings come from flags and KAIWU_* variables
(`reconciler.settings`); logs are structured (reconciler.logs: one JSON object per line by
default, with the fields each call passes as `extra`, e.g. cluster, kind, error). Each command
imports what it uses when it runs (`kaiwu --help` pays for none of it: bench/cli_start.py).
SIGTERM and SIGINT start a clean shutdown: workers stop, the leader Lease is released so a
standby takes over at once, and the process exits 0. Exit code 2: invalid settings or no usable
kubeconfig; 1: the API server did not answer at start, or the reconciler failed. Each is one
line on stderr, no traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from renderer import cli as renderer_cli

if TYPE_CHECKING:
    from types import FrameType

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    """`kaiwu ...`: the reconciler for `reconcile`, the renderer for everything else."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] and arguments[0].startswith("-") and arguments[0] not in (
            "-h", "--help", "--version"):
        # kubectl's habit, `kubectl kaiwu -n prod status`: connection flags before the
        # command go after it (status, backup and restore take them).
        from reconciler.kube.client import connection_flags_last
        arguments = connection_flags_last(arguments)
    if arguments[:1] == ["reconcile"]:
        return reconcile(arguments[1:])
    if arguments[:1] == ["install"]:
        from reconciler import install  # only `kaiwu install` needs it
        return install.main(arguments[1:])
    if arguments[:1] == ["uninstall"]:
        from reconciler import install
        return install.uninstall_main(arguments[1:])
    if arguments[:1] == ["status"]:
        from reconciler import statuscmd  # only `kaiwu status` needs it
        return statuscmd.main(arguments[1:])
    if arguments[:1] == ["backup"]:
        from reconciler import backupcmd  # only `kaiwu backup` needs it
        return backupcmd.main(arguments[1:])
    if arguments[:1] == ["restore"]:
        from reconciler import restorecmd  # only `kaiwu restore` needs it
        return restorecmd.main(arguments[1:])
    code: int = renderer_cli.main(arguments)
    return code


def kubectl_plugin(argv: Sequence[str] | None = None) -> int:
    """`kubectl kaiwu ...`: kubectl runs an executable named kubectl-kaiwu found on PATH with
    the arguments after `kaiwu` (kubectl's plugin mechanism, since 1.12), so every `kaiwu`
    command works as a kubectl plugin; `status`, `backup` and `restore` take kubectl's
    --kubeconfig, --context and -n/--namespace. Installed beside `kaiwu` by pip (pyproject.toml's
    scripts); deploy/krew/ holds its krew manifest and launcher (make krew)."""
    return main(argv)


def reconcile(argv: Sequence[str] | None = None) -> int:
    """`kaiwu reconcile ...`: run the reconciler until SIGTERM or SIGINT."""
    import logging
    import signal
    import threading

    from reconciler.logs import configure_logging
    from reconciler.settings import SettingsError, from_args  # only `kaiwu reconcile` needs it

    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = from_args(arguments)
    except SettingsError as error:
        print(f"kaiwu reconcile: {error}", file=sys.stderr)
        return EXIT_INVALID
    configure_logging(settings.log_format, settings.log_level)
    from reconciler.kube.client import ConnectionSetupError, check_reachable, load_api_client
    from reconciler.runtime.process import Runtime  # after logging is set up

    # Connect once before anything starts: a missing kubeconfig or a server that does not answer
    # is one line naming the cause and the fix, not a traceback or endless watch retries.
    try:
        api = load_api_client(settings.kubeconfig, settings.context)
        check_reachable(api, settings.api_timeout_s)
    except ConnectionSetupError as error:
        print(f"kaiwu reconcile: {error}", file=sys.stderr)
        return EXIT_INVALID if error.invalid else EXIT_FAILED

    stop = threading.Event()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        logging.getLogger(__name__).info(
            "signal received, shutting down", extra={"signal": signal.Signals(number).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return Runtime(settings, api_client=api).run(stop)
    except Exception as error:
        # One log line with the cause; the traceback only when asked for (--log-level debug).
        log = logging.getLogger(__name__)
        log.error("the reconciler failed", extra={"error": f"{type(error).__name__}: {error}"},
                  exc_info=log.isEnabledFor(logging.DEBUG))
        return EXIT_FAILED


if __name__ == "__main__":  # `python -m reconciler.cli ...`: the same as `kaiwu ...`
    sys.exit(main())
