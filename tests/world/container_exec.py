"""What running a command inside a simulated container does.

Called by the simulated kubelet (tests/world/kubelet.py) for `pods/exec` requests and exec probes.
A KaiwuDB container has the `kwbase` binary (bare, `/kaiwudb/bin/kwbase` or `./kwbase`, since the
image's working directory is /kaiwudb/bin): its commands, and shells, go to the simulated
KaiwuDB, which refuses shells on purpose (callers must run kwbase with its arguments, never
through a shell); `find`, `sha256sum`, `cat` and `rm` there work on the store's
external-I/O directory (KWDB_FILE_COMMANDS). Every container has `true`, `false`, `echo` and
`hostname`; other images also have `sh -c`/`bash -c` running one simple command. Anything else
is a binary the image lacks, reported as containerd and a shell report it (exit 126 from the
runtime when exec'd directly, 127 from `sh -c`).

Not modelled: pipes, redirections, `&&`, variables and globbing inside `sh -c` (reported as a
simulation limit, exit 2), stdin, TTYs.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable, Sequence

from tests.world.exec_server import CommandResult
from tests.world.kwdb_port import ExecOutput

KWDB_FILE_COMMANDS = frozenset({"find", "sha256sum", "cat", "rm"})
"""Coreutils of the KaiwuDB image the operator uses on the external-I/O directory: answered by
the simulated KaiwuDB, which keeps that directory on the store (tests/world/kwdb/data.py)."""
SHELLS = frozenset({"sh", "bash", "ash", "dash"})
SHELL_SPECIALS = frozenset("|&;<>()$`\\\"'*?[]#~=%{}\n")

KwbaseRunner = Callable[[Sequence[str]], ExecOutput]


def _runtime_not_found(program: str) -> CommandResult:
    # containerd/runc's wording when the binary is missing; the message comes out on stdout.
    message = (
        "OCI runtime exec failed: exec failed: container_linux.go:367: starting container "
        f'process caused: exec: "{program}": executable file not found in $PATH: unknown\r\n'
    )
    return CommandResult(stdout=message.encode(), stderr=b"", exit_code=126)


def _simple(
    argv: Sequence[str], hostname: str, kwbase: KwbaseRunner | None
) -> CommandResult | None:
    """Commands every image here has; None when argv[0] is none of them."""
    name = posixpath.basename(argv[0])
    if name == "kwbase" or (name in KWDB_FILE_COMMANDS and kwbase is not None):
        if kwbase is None:
            return None
        out = kwbase(argv)
        concluding = out.conclude
        conclude = None
        if concluding is not None:
            def conclude() -> CommandResult:
                ended = concluding()
                return CommandResult(ended.stdout.encode(), ended.stderr.encode(),
                                     ended.exit_code)
        return CommandResult(out.stdout.encode(), out.stderr.encode(), out.exit_code,
                             out.duration_s, out.answers_at_end, conclude=conclude)
    if name == "true":
        return CommandResult(b"", b"", 0)
    if name == "false":
        return CommandResult(b"", b"", 1)
    if name == "echo":
        return CommandResult((" ".join(argv[1:]) + "\n").encode(), b"", 0)
    if name == "hostname":
        return CommandResult(f"{hostname}\n".encode(), b"", 0)
    return None


def run_in_container(
    argv: Sequence[str], *, hostname: str, kwbase: KwbaseRunner | None
) -> CommandResult:
    """Run argv in a container whose hostname is the pod name; kwbase None: not a KaiwuDB image."""
    if not argv:
        return _runtime_not_found("")
    shell = posixpath.basename(argv[0]) in SHELLS
    if shell and kwbase is not None:
        out = kwbase(argv)
        return CommandResult(out.stdout.encode(), out.stderr.encode(), out.exit_code)
    if shell and len(argv) >= 3 and argv[1] == "-c":
        script = argv[2]
        if any(ch in SHELL_SPECIALS for ch in script):
            return CommandResult(
                b"",
                f"simulated shell: only one simple command is supported, got {script!r}\n".encode(),
                2,
            )
        words = shlex.split(script)
        if not words:
            return CommandResult(b"", b"", 0)
        result = _simple(words, hostname, kwbase)
        if result is None:
            name = posixpath.basename(argv[0])
            prefix = "sh: 1: " if name in ("sh", "dash") else f"{name}: line 1: "
            suffix = "not found" if name in ("sh", "dash") else "command not found"
            return CommandResult(b"", f"{prefix}{words[0]}: {suffix}\n".encode(), 127)
        return result
    result = _simple(argv, hostname, kwbase)
    return result if result is not None else _runtime_not_found(argv[0])
