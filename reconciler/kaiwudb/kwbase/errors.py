"""The adapter's typed errors, and how a failed command's exit status and stderr become one.

`ExecFailed` (the command could not be run or gave no exit status: pod gone, container not
running, exec transport error, time-out), and `CommandFailed` (kwbase ran and exited non-zero)
with the subclasses `NodeUnreachable`, `NotInitialized`, `UnknownNode` and `DecommissionRefused`
for the answers the lifecycle code acts upon. Messages carry the command line and the CLI's
`ERROR:` text; neither ever holds secrets (certificates stay files in the pod). Raised by
reconciler.kaiwudb.kwbase.admin; caught by every caller of KwbaseAdmin.
"""

from __future__ import annotations

from collections.abc import Sequence


class KwbaseError(Exception):
    """Any failure of an admin command; `pod` is where it was exec'd, `argv` what ran."""

    def __init__(self, message: str, pod: str, argv: Sequence[str]) -> None:
        super().__init__(message)
        self.pod = pod
        self.argv = tuple(argv)


class ExecFailed(KwbaseError):
    """The command could not be run, or gave no exit status: the pod or its kwbase container is
    not running, the exec connection failed, or the command outlived the time-out."""


class ExecTimedOut(ExecFailed):
    """The exec ended with no exit status: the command outlived the time-out, or its stream was
    cut (a streaming idle time-out on the way, a kubelet restarting, a node losing power). The
    command itself may still be running in the pod: a process
    started by exec is not killed when its exec session ends (kubernetes/kubernetes#73056,
    #89031: the kubelet logs "Exec session ... terminated but process still running!")."""


class CommandFailed(KwbaseError):
    """kwbase ran and exited non-zero; `stderr` is what it printed."""

    def __init__(self, pod: str, argv: Sequence[str], exit_code: int, stderr: str,
                 summary: str = "") -> None:
        self.exit_code = exit_code
        self.stderr = stderr
        detail = summary or error_text(stderr) or f"exit code {exit_code}"
        super().__init__(f"{' '.join(argv)} (in pod {pod}) failed: {detail}", pod, argv)


class NodeUnreachable(CommandFailed):
    """The CLI could not talk to the node: not running, not listening, draining, or (SQL
    commands) still waiting for `kwbase init`, which a SQL client cannot tell from a hang."""


class NotInitialized(CommandFailed):
    """The node answers but the cluster has not been initialised (`kwbase init` not yet run)."""


class UnknownNode(CommandFailed):
    """A node id the cluster does not know."""


class DecommissionRefused(CommandFailed):
    """The cluster refuses `node decommission` and `node recommission` for good: KWDB's
    start-single-replica ("mpp") mode cannot move a range's only replica (server/admin.go:
    `node cannot be decommissioned in mpp mode`). Retrying never helps."""


class UnexpectedOutput(KwbaseError):
    """kwbase succeeded but printed something this adapter cannot read (a format change)."""


class NotOneStatement(KwbaseError):
    """A statement the adapter refuses to send: it would run as several (a `;` or a comment
    outside quotes), or it holds a NUL. Names from KaiwuDB go in quoted (`quote_ident`,
    by the backup's modules); this is the last check that none slipped in unquoted."""


def error_text(stderr: str) -> str:
    """The CLI's error, without the `Failed running` trailer: `ERROR:` onwards, on one line."""
    lines = [line.strip() for line in stderr.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), None)
    chosen = lines[start:] if start is not None else lines
    kept = [line for line in chosen if line and not line.startswith("Failed running")]
    return " ".join(kept)


_DECOMMISSION_REFUSED = ("cannot be decommissioned in mpp mode",)


# Substrings of kwbase's decorated errors (kwbase/pkg/cli/error.go MaybeDecorateGRPCError and
# the server's gRPC statuses), checked in this order.
_NOT_INITIALIZED = ("node waiting for init", "before it has been initialized")


_UNKNOWN_NODE = ("doesn't exist", "not in the liveness table", "cannot find status of node")


_UNREACHABLE = ("cannot dial server", "initial connection heartbeat failed", "connection refused",
                "i/o timeout", "no such host", "server is not accepting clients",
                "node not ready to perform cluster initialization")


def classify_failure(pod: str, argv: Sequence[str], exit_code: int, stderr: str
                     ) -> CommandFailed:
    """The typed error for a non-zero exit (never ExecFailed: the command did run)."""
    text = stderr.lower()
    if any(marker in text for marker in _DECOMMISSION_REFUSED):
        return DecommissionRefused(pod, argv, exit_code, stderr)
    if any(marker in text for marker in _NOT_INITIALIZED):
        return NotInitialized(pod, argv, exit_code, stderr)
    if any(marker in text for marker in _UNKNOWN_NODE):
        return UnknownNode(pod, argv, exit_code, stderr)
    if any(marker in text for marker in _UNREACHABLE):
        return NodeUnreachable(pod, argv, exit_code, stderr)
    return CommandFailed(pod, argv, exit_code, stderr)
