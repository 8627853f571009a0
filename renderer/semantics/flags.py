"""kwbase's command line and environment as a spec extends them: extraArgs may not touch a flag
the renderer sets, --max-offset stays within what kwbase accepts, and extraEnv may not set a
variable the operator sets.

Called by renderer.semantics (check); renderer.semantics.change reads the clock offset bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from renderer.semantics.violation import Path, Violation
from renderer.spec import parse_duration

# kwbase flags the renderer sets itself; a user override would break the cluster's wiring.
MANAGED_FLAGS = {
    "--join": "the join list is derived from the cluster's pods",
    "--store": "the store is the volume from spec.storage",
    "--listen-addr": "addresses are fixed by the Services",
    "--advertise-addr": "each pod advertises its stable DNS name",
    "--brpc-addr": "the brpc port must match every Service (27257)",
    "--http-addr": "the HTTP port is fixed at 8080 (probes and metrics use it)",
    "--sql-addr": "SQL is served on the listen address",
    "--advertise-host": "each pod advertises its stable DNS name",
    "--insecure": "use spec.tls.enabled",
    "--certs-dir": "use spec.tls (certificates are mounted by the operator)",
    "--cache": "use spec.cache",
    "--max-sql-memory": "use spec.maxSQLMemory",
    "--background": "the container must run kwbase in the foreground",
    "--pid-file": "the container must run kwbase in the foreground",
    "--upgrade-complete": "upgrades are driven by the reconciler",
    # Aliases of the address flags: the last one given wins (kwbase/pkg/cli/flags.go:170-175),
    # so each would move a port the Services, probes and join list use.
    "--host": "addresses are fixed by the Services",
    "--port": "the SQL and RPC port is fixed at 26257 (Services, join list, probes)",
    "--http-host": "the HTTP address is fixed (probes and metrics use it)",
    "--http-port": "the HTTP port is fixed at 8080 (probes and metrics use it)",
    "--advertise-port": "each pod advertises its stable DNS name on 26257",
    "--advertise-sql-addr": "SQL is advertised on the pod's stable DNS name",
    "--locality-advertise-addr": "each pod advertises its stable DNS name",
    "--cluster-name": "the operator's kwbase commands carry no cluster name, and a node "
                      "refuses a peer whose name differs (kwbase/pkg/rpc/heartbeat.go:78-93)",
    "--cert-principal-map": "certificates are read as issued: users from the CN and DNS names",
    "--external-io-dir": "backups and restores use the store's extern directory",
    "--external-io-disable-http": "restores read the backup over https",
    "--ts-store": "the time-series store lives with the store, on the volume from spec.storage",
    "--logtostderr": "the operator sets it: a crashed node's last words are read from stderr",
}
MAX_OFFSET_FLAG = "--max-offset"
MAX_OFFSET_DEFAULT = "500ms"
MAX_OFFSET_LIMIT = timedelta(seconds=5)
"""KWDB's clock offset bound: 500ms unless set, at most 5s (kwbase/pkg/base/constants.go:31;
server/config.go:87, 119-129), the same on every node: a node whose peer's differs panics
(rpc/heartbeat.go:160-167), so it changes only with every node stopped at once
(cli/cliflags/flags.go:707-718), which a rolling restart is not."""
RESERVED_ENV = {"POD_NAME", "POD_NAMESPACE", "LD_LIBRARY_PATH", "KWBASE_CERTS_DIR",
                "KWBASE_SKIP_KEY_PERMISSION_CHECK", "KAIWU_UPGRADE_COMPLETE"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
SECRET_KEY = re.compile(r"^(?!\.\.?\Z)[-._a-zA-Z0-9]+\Z")
FLAG = re.compile(r"^--[a-z][a-z0-9-]*(=.*)?$", re.DOTALL)


def check_args(args: list[str]) -> Iterator[Violation]:
    """spec.extraArgs: kwbase flags, one per item, none the renderer sets, none twice."""
    seen: dict[str, int] = {}
    for index, arg in enumerate(args):
        path: Path = ("spec", "extraArgs", index)
        if not FLAG.match(arg):
            yield Violation(path, f"{arg!r} is not a kwbase flag",
                            "write one flag per item as --name=value or --name")
            continue
        name = arg.split("=", 1)[0]
        if name in MANAGED_FLAGS:
            yield Violation(path, f"{name} is managed by the operator", MANAGED_FLAGS[name])
        if name == MAX_OFFSET_FLAG:
            problem = _max_offset_problem(arg.partition("=")[2])
            if problem:
                yield Violation(path, problem, "write a duration such as 250ms or 1s, at most 5s")
        if "\n" in arg or "\x00" in arg:
            yield Violation(path, f"{name} contains a line break or NUL", "remove it")
        if name in seen:
            yield Violation(path, f"{name} is given twice (also item {seen[name]})",
                            "keep one")
        seen[name] = index


def _max_offset_problem(value: str) -> str:
    """Why `--max-offset=<value>` is refused ("" when it is not). KWDB reads a Go duration of
    at most 5s; the plain forms parse_duration reads are accepted (not 1.5s: write 1500ms)."""
    try:
        offset = parse_duration(value)
    except ValueError:
        return f"--max-offset={value} is not a duration"
    if offset > MAX_OFFSET_LIMIT:
        return f"--max-offset={value} is more than 5s, which kwbase refuses to start with"
    return ""


def same_offset(a: str, b: str) -> bool:
    """Whether two --max-offset values are the same duration (or the same text, unread)."""
    try:
        return parse_duration(a) == parse_duration(b)
    except ValueError:
        return a == b


def check_env(env: list[dict[str, Any]]) -> Iterator[Violation]:
    """spec.extraEnv: valid names, none the operator sets, none twice, one value each."""
    seen: set[str] = set()
    for index, item in enumerate(env):
        name = item["name"]
        path: Path = ("spec", "extraEnv", index)
        if not ENV_NAME.match(name):
            yield Violation((*path, "name"), f"{name!r} is not an environment variable name",
                            "use letters, digits and '_', not starting with a digit")
        if name in RESERVED_ENV:
            yield Violation((*path, "name"), f"{name} is set by the operator",
                            "choose another name")
        if name in seen:
            yield Violation((*path, "name"), f"{name} is defined twice", "keep one")
        seen.add(name)
        if ("value" in item) == ("secretKeyRef" in item):
            yield Violation(path, f"{name} needs exactly one of value and secretKeyRef",
                            "give either a value or a secretKeyRef")
        key = item.get("secretKeyRef", {}).get("key")
        if key is not None and not (len(key) <= 253 and SECRET_KEY.match(key)
                                    and not key.startswith("..")):
            yield Violation((*path, "secretKeyRef", "key"), f"{key!r} is not a Secret key",
                            "use letters, digits, '-', '_' and '.'")
