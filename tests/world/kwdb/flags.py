"""The simulated `kwbase` command tree and its flag parsing (cobra + pflag behaviour).

Used by tests/world/kwdb/world.py (container start lines) and tests/world/kwdb/commands.py (exec'd
client commands). Flag names and which command takes which flag come from
kwbase/pkg/cli/flags.go and cliflags/flags.go (KWDB/KWDB); parsing rules and messages are
spf13/pflag's and spf13/cobra's as kwbase uses them:

- `--name=value`, `--name value`, `-s value`, `-svalue`; bool flags take no separate value.
- unknown flag: `unknown flag: --name`; unknown shorthand: `unknown shorthand flag: 'x' in -x`;
  missing value: `flag needs an argument: --name`; a value a flag rejects:
  `invalid argument "v" for "--name" flag: <reason>` (`-s, --name` when the flag has one).
- positional argument checks: cobra.NoArgs `unknown command "x" for "kwbase start"`,
  MaximumNArgs(1) `accepts at most 1 arg(s), received 2`, MinimumNArgs(1)
  `requires at least 1 arg(s), only received 0`.
- an unknown top-level command: `unknown command "x" for "kwbase"`; `kwbase node <unknown>`:
  `unknown sub-command: "x"` (kwbase/pkg/cli/cli.go usageAndErr).
- flag errors print the command's usage first (cli.go SetFlagErrorFunc). The simulation prints
  only the `Usage:` line of that text, not cobra's flag list.

Value checks that are modelled: booleans (strconv.ParseBool), Go durations, `--format`
(context.go tableDisplayFormat), `--wait` (nodeDecommissionWaitType), and the percentage form
of `--cache` / `--max-sql-memory` (flags_util.go bytesOrPercentageValue: `.25` or `25%`, read
as a float32, truncated to a whole percent, refused outside 1 - 99 with `percentage 0% out of
range 1% - 99%`; so `.005` and even `.01` are refused). Byte sizes are accepted unchecked.
Cobra's "Did you mean" suggestions are not modelled.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.world.kwdb.render import TABLE_FORMATS


class CliError(Exception):
    """A failed invocation: `message` goes after `ERROR: `; usage is printed first if set."""

    def __init__(self, message: str, command: str, usage: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.command = command
        self.usage = usage


@dataclass(frozen=True)
class FlagSpec:
    """One flag: `kind` is bool, string, duration, choice or bytes_or_percent."""

    name: str
    kind: str = "string"
    shorthand: str = ""
    no_opt_default: str | None = None
    choices: tuple[str, ...] = ()
    choice_error: str = ""


@dataclass(frozen=True)
class CommandSpec:
    """A leaf (or group) command: its path under `kwbase`, cobra Use text, flags, arg rule."""

    path: tuple[str, ...]
    use: str
    flags: tuple[FlagSpec, ...] = ()
    args: str = "none"  # none | max1 | min1 | any
    modelled: bool = True
    group: bool = False

    @property
    def name(self) -> str:
        """What cli.go commandName() reports: the path without the root."""
        return " ".join(self.path) if self.path else "kwbase"

    def usage(self) -> str:
        parents = " ".join(("kwbase", *self.path[:-1]))
        line = f"{parents} {self.use}" if self.path else "kwbase [command]"
        if self.flags or self.path:
            line += " [flags]"
        return f"Usage:\n  {line}\n"


@dataclass(frozen=True)
class Invocation:
    """A parsed command line: the command, flag values in order given, positional args."""

    command: CommandSpec
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    args: tuple[str, ...] = ()

    def has(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default: str = "") -> str:
        got = self.values.get(name)
        return got[-1] if got else default

    def all(self, name: str) -> tuple[str, ...]:
        return self.values.get(name, ())

    def flag_true(self, name: str) -> bool:
        return self.has(name) and parse_go_bool(self.get(name)) is True


def _bool(name: str, short: str = "") -> FlagSpec:
    return FlagSpec(name, "bool", short, "true")


def _str(name: str, short: str = "") -> FlagSpec:
    return FlagSpec(name, "string", short)


def _dur(name: str) -> FlagSpec:
    return FlagSpec(name, "duration")


# Registered from Go's flag package onto the root command (flags.go init), so every command
# accepts them.
GLOBAL_FLAGS = (
    FlagSpec("logtostderr", "string", "", "DEFAULT"),
    _bool("no-color"),
    _str("vmodule"),
    _bool("no-redirect-stderr"),
    _bool("show-logs"),
    _bool("help", "h"),
)

FORMAT_FLAG = FlagSpec(
    "format",
    "choice",
    choices=TABLE_FORMATS,
    choice_error="invalid table display format: {v} "
    "(possible values: tsv, csv, table, records, sql, html, raw)",
)

CLIENT_FLAGS = (
    _str("host"),
    _str("port", "p"),
    _bool("insecure"),
    _str("certs-dir"),
    _str("cert-principal-map"),
    _str("url"),
    _str("cluster-name"),
    _bool("disable-cluster-name-verification"),
)

def _memory(name: str) -> FlagSpec:
    return FlagSpec(name, "bytes_or_percent")


# String-valued flags of the start commands (flags.go StartCmds loop, cliflags names).
_START_STRING_FLAGS = (
    "listen-addr",
    "advertise-addr",
    "brpc-addr",
    "sql-addr",
    "advertise-sql-addr",
    "http-addr",
    "socket-dir",
    "socket",
    "host",
    "port",
    "advertise-host",
    "advertise-port",
    "http-host",
    "http-port",
    "locality-advertise-addr",
    "attrs",
    "locality",
    "ts-store",
    "storage-engine",
    "max-offset",
    "clock-device",
    "listening-url-file",
    "pid-file",
    "extra-startup-item",
    "import-path",
    "import-password",
    "import-filename",
    "thread-pool-size",
    "task-queue-size",
    "buffer-pool-size",
    "cgroup-user",
    "restful-port",
    "restful-timeout",
    "certs-dir",
    "cert-principal-map",
    "cluster-name",
    "max-disk-temp-storage",
    "temp-dir",
    "external-io-dir",
    "sql-audit-dir",
    "log-dir",
    "log-dir-max-size",
    "log-file-max-size",
    "log-file-verbosity",
)

START_FLAGS = (
    *(_str(n) for n in _START_STRING_FLAGS),
    _memory("cache"),
    _memory("max-sql-memory"),
    _str("store", "s"),
    _str("join", "j"),
    _bool("insecure"),
    _bool("unencrypted-localhost-http"),
    _bool("upgrade-complete"),
    _bool("external-io-disable-http"),
    _bool("external-io-disable-implicit-credentials"),
    _bool("experimental-dns-srv"),
    _bool("disable-cluster-name-verification"),
    _bool("background"),
)

_NODE = (*CLIENT_FLAGS, FORMAT_FLAG)

COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec(("start",), "start", START_FLAGS),
    CommandSpec(("start-single-replica",), "start-single-replica", START_FLAGS),
    CommandSpec(("start-single-node",), "start-single-node", START_FLAGS),
    CommandSpec(("init",), "init", CLIENT_FLAGS),
    CommandSpec(("quit",), "quit", (*CLIENT_FLAGS, _dur("drain-wait"), _bool("decommission"))),
    CommandSpec(
        ("sql",),
        "sql [options]",
        (
            *CLIENT_FLAGS,
            FORMAT_FLAG,
            _str("execute", "e"),
            _str("set"),
            _dur("watch"),
            _bool("safe-updates"),
            _bool("debug-sql-cli"),
            _bool("echo-sql"),
            _str("user", "u"),
            _str("database", "d"),
        ),
        args="any",
    ),
    CommandSpec(("node",), "node [command]", group=True),
    CommandSpec(("node", "ls"), "ls", (*_NODE, _dur("timeout"))),
    CommandSpec(
        ("node", "status"),
        "status [<node id>]",
        (
            *_NODE,
            _dur("timeout"),
            _bool("ranges"),
            _bool("stats"),
            _bool("all"),
            _bool("decommission"),
        ),
        args="max1",
    ),
    CommandSpec(
        ("node", "decommission"),
        "decommission <node id 1> [<node id 2> ...]",
        (
            *_NODE,
            FlagSpec(
                "wait",
                "choice",
                choices=("all", "none", "live"),
                choice_error="invalid node decommission parameter: {v} "
                "(possible values: all, none)",
            ),
        ),
        args="min1",
    ),
    CommandSpec(
        ("node", "recommission"), "recommission <node id 1> [<node id 2> ...]", _NODE, "min1"
    ),
    CommandSpec(("node", "drain"), "drain", (*_NODE, _dur("drain-wait"))),
    CommandSpec(
        ("node", "upgrade"), "upgrade <node id 1> [<node id 2> ...]", _NODE, "min1"
    ),
    CommandSpec(("node", "set-status"), "set-status", _NODE, modelled=False, group=True),
    CommandSpec(("version",), "version"),
    *(
        CommandSpec((name,), name, args="any", modelled=False, group=True)
        for name in (
            "cert",
            "statement-diag",
            "auth-session",
            "nodelocal",
            "demo",
            "gen",
            "debug",
            "sqlfmt",
            "workload",
            "systembench",
        )
    ),
)

_BY_PATH = {c.path: c for c in COMMANDS}
ROOT = CommandSpec((), "kwbase [command]", group=True)

_FRACTION = re.compile(r"^0?\.[0-9]+$")  # flags_util.go fractionRE
_DURATION = re.compile(r"[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")


def parse_go_bool(value: str) -> bool | None:
    """strconv.ParseBool: None when the text is none of Go's spellings (flags, environment
    variables and query parameters are read with it)."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def _percent(value: str) -> int | None:
    """bytesOrPercentageValue.Set's whole percent for `25%` / `.25`; None for other forms.

    Go parses with strconv.ParseFloat(s, 32) (a float32 value in a float64) and truncates
    frac * multiplier to an int: `.01` is 0.0099999997..., so 0%.
    """
    if not (value.endswith("%") or _FRACTION.match(value)):
        return None
    text, multiplier = (value[:-1], 1.0) if value.endswith("%") else (value, 100.0)
    try:
        as_float32 = struct.unpack("f", struct.pack("f", float(text)))[0]
        return int(as_float32 * multiplier)
    except (ValueError, OverflowError):
        return None  # the real message (a ParseFloat error) is not modelled


def _check_value(spec: FlagSpec, value: str) -> str | None:
    """The reason a value is rejected, or None when it is accepted."""
    if spec.kind == "bytes_or_percent":
        percent = _percent(value)
        if percent is not None and not 1 <= percent <= 99:
            return f"percentage {percent}% out of range 1% - 99%"
        return None
    if spec.kind == "bool" and parse_go_bool(value) is None:
        return f'strconv.ParseBool: parsing "{value}": invalid syntax'
    if (
        spec.kind == "duration"
        and value not in ("0", "+0", "-0")
        and not _DURATION.fullmatch(value)
    ):
        if _NUMBER.fullmatch(value):
            return f'time: missing unit in duration "{value}"'
        return f'time: invalid duration "{value}"'
    if spec.kind == "choice" and value not in spec.choices:
        return spec.choice_error.format(v=value)
    return None


def _flag_label(spec: FlagSpec) -> str:
    return f"-{spec.shorthand}, --{spec.name}" if spec.shorthand else f"--{spec.name}"


def find_command(tokens: Sequence[str]) -> tuple[CommandSpec, list[str]]:
    """cobra's Command.Find: walk sub-command names, skipping flags; return the rest."""
    current: tuple[str, ...] = ()
    rest: list[str] = []
    i = 0
    descending = True
    while i < len(tokens):
        token = tokens[i]
        if descending and not token.startswith("-") and (*current, token) in _BY_PATH:
            current = (*current, token)
            i += 1
            continue
        if not token.startswith("-"):
            descending = False
        rest.append(token)
        i += 1
    return (_BY_PATH[current] if current else ROOT), rest


def parse(tokens: Sequence[str]) -> Invocation:
    """Parse `kwbase` arguments (without the binary) the way cobra and pflag do."""
    command, rest = find_command(tokens)
    if not command.modelled:
        # Real commands this simulation does not answer: the caller reports that plainly.
        return Invocation(command, {}, tuple(rest))
    if command is ROOT:
        positional = [t for t in rest if not t.startswith("-")]
        if positional:
            raise CliError(f'unknown command "{positional[0]}" for "kwbase"', "kwbase")
    specs = {s.name: s for s in (*GLOBAL_FLAGS, *command.flags)}
    shorts = {s.shorthand: s for s in specs.values() if s.shorthand}
    values: dict[str, list[str]] = {}
    args: list[str] = []

    def fail(message: str) -> CliError:
        # cli.go SetFlagErrorFunc: usage, then an empty line, then the error.
        return CliError(message, command.name, usage=command.usage() + "\n")

    def store(spec: FlagSpec, value: str) -> None:
        reason = _check_value(spec, value)
        if reason is not None:
            raise fail(f'invalid argument "{value}" for "{_flag_label(spec)}" flag: {reason}')
        values.setdefault(spec.name, []).append(value)

    i = 0
    while i < len(rest):
        token = rest[i]
        i += 1
        if token == "--":
            args.extend(rest[i:])
            break
        if token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            spec = specs.get(name)
            if spec is None:
                raise fail(f"unknown flag: --{name}")
            if eq:
                store(spec, value)
            elif spec.no_opt_default is not None:
                store(spec, spec.no_opt_default)
            elif i < len(rest):
                store(spec, rest[i])
                i += 1
            else:
                raise fail(f"flag needs an argument: --{name}")
        elif token.startswith("-") and token != "-":
            shorthands = token[1:]
            j = 0
            while j < len(shorthands):
                c = shorthands[j]
                spec = shorts.get(c)
                if spec is None:
                    raise fail(f"unknown shorthand flag: '{c}' in -{shorthands}")
                remainder = shorthands[j + 1 :]
                if remainder.startswith("="):
                    store(spec, remainder[1:])
                    break
                if spec.no_opt_default is not None:
                    store(spec, spec.no_opt_default)
                    j += 1
                    continue
                if remainder:
                    store(spec, remainder)
                elif i < len(rest):
                    store(spec, rest[i])
                    i += 1
                else:
                    raise fail(f"flag needs an argument: '{c}' in -{shorthands}")
                break
        else:
            args.append(token)
    inv = Invocation(command, {k: tuple(v) for k, v in values.items()}, tuple(args))
    if inv.flag_true("help"):
        return inv
    if command.group and command is not ROOT:
        raise CliError(
            f'unknown sub-command: "{" ".join(args)}"', command.name, usage=command.usage()
        )
    if command.args == "none" and args:
        raise CliError(f'unknown command "{args[0]}" for "kwbase {command.name}"', command.name)
    if command.args == "max1" and len(args) > 1:
        raise CliError(f"accepts at most 1 arg(s), received {len(args)}", command.name)
    if command.args == "min1" and not args:
        raise CliError("requires at least 1 arg(s), only received 0", command.name)
    return inv
