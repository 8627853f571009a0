"""The adapter's one entry point: KwbaseAdmin runs every `kwbase` command (and the few file
commands backups need) inside one of the cluster's pods, and hands back typed answers or typed
errors.

Called by the reconciler's lifecycle, failover, scale-in, upgrade, backup and restore code
(reconciler.kaiwudb.lifecycle, failover, scale, upgrade, backup, restore and the rest). Every
command runs through the Kubernetes exec API (`reconciler.kube.client.Kube.exec`: an argv, never
a shell), in the `kwbase` container, as
`/kaiwudb/bin/kwbase <command> --host=<node> --certs-dir=/kaiwudb/certs` (both the node and the
root client certificates are mounted there in secure mode) or `--insecure`. What an answer means
is read by the modules beside this one (nodes, replication, jobs, sql); how a failure is told,
by errors.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal, Protocol, TypeVar

from reconciler.kaiwudb.kwbase.errors import (
    ExecFailed,
    ExecTimedOut,
    KwbaseError,
    NodeUnreachable,
    NotOneStatement,
    UnexpectedOutput,
    classify_failure,
    error_text,
)
from reconciler.kaiwudb.kwbase.jobs import (
    RUNNING_JOB_TYPES_QUERY,
    JobRow,
    RunningJobs,
    parse_running_jobs,
    parse_statement_jobs,
    statement_jobs_query,
)
from reconciler.kaiwudb.kwbase.nodes import (
    UPGRADING_NODES_QUERY,
    DecommissionStatus,
    NodeStatus,
    parse_decommission,
    parse_node_status,
    parse_upgrading_nodes,
)
from reconciler.kaiwudb.kwbase.replication import (
    RANGE_REPLICA_SETS_QUERY,
    SNAPSHOTS_QUERY,
    STATUS_TIMES_QUERY,
    STORE_NODES_QUERY,
    ReplicationHealth,
    parse_replica_sets,
    parse_snapshots,
    parse_status_times,
    parse_store_nodes,
    ranges_without_quorum,
    replication_health_of,
    stale_records,
)
from reconciler.kaiwudb.kwbase.sql import SqlAnswer, statement_problem
from renderer.spec import Cluster

log = logging.getLogger(__name__)


T = TypeVar("T")


@dataclass(frozen=True)
class KwbaseSettings:
    """How the adapter reaches kwbase. Defaults match the renderer's StatefulSet.

    binary: the kwbase binary in the official image.
    container: the container in each pod that has it.
    certs_dir: where the pod mounts ca.crt, node.crt/key and client.root.crt/key (secure mode).
    sql_port: the node's RPC/SQL port (--listen-addr).
    cluster_domain: the cluster's DNS domain, for connect_via="pod-dns".
    connect_via: "localhost" (default): a command exec'd in pod P talks to P's own node, with no
        dependence on cluster DNS; "pod-dns": through P's advertised name
        <pod>.<headless>.<ns>.svc.<domain>, the path other nodes use.
    timeout_s: how long one exec may take before it counts as failed (Settings.exec_timeout_s).
    long_timeout_s: the same for a bulk statement, EXPORT or IMPORT, which runs for minutes to
        hours on real data (Settings.long_statement_timeout_s).
    """

    binary: str = "/kaiwudb/bin/kwbase"
    container: str = "kwbase"
    certs_dir: str = "/kaiwudb/certs"
    sql_port: int = 26257
    cluster_domain: str = "cluster.local"
    connect_via: Literal["localhost", "pod-dns"] = "localhost"
    timeout_s: float = 60.0
    long_timeout_s: float = 3 * 3600.0


class ExecRunner(Protocol):
    """What the adapter needs from the API: `reconciler.kube.client.Kube` fits."""

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]: ...


class InitOutcome(Enum):
    """What `init` found: it initialised the cluster now, or it already was."""

    INITIALIZED = "initialized"
    ALREADY_INITIALIZED = "already-initialized"


class KwbaseAdmin:
    """Admin commands for one KaiwuDB cluster, each exec'd in a pod the caller chooses (any pod
    whose kwbase container runs; cluster-wide commands work from any node)."""

    def __init__(self, runner: ExecRunner, namespace: str, headless_service: str, *,
                 secure: bool, settings: KwbaseSettings | None = None) -> None:
        self.runner = runner
        self.namespace = namespace
        self.headless_service = headless_service
        self.secure = secure
        self.settings = settings or KwbaseSettings()

    @classmethod
    def for_cluster(cls, runner: ExecRunner, cluster: Cluster,
                    settings: KwbaseSettings | None = None) -> KwbaseAdmin:
        return cls(runner, cluster.namespace, cluster.headless_service, secure=cluster.tls,
                   settings=settings)

    def host(self, pod: str) -> str:
        """The --host a command exec'd in pod uses (see KwbaseSettings.connect_via)."""
        s = self.settings
        if s.connect_via == "localhost":
            return f"localhost:{s.sql_port}"
        return (f"{pod}.{self.headless_service}.{self.namespace}.svc.{s.cluster_domain}:"
                f"{s.sql_port}")

    def argv(self, pod: str, *words: str) -> list[str]:
        """The full command line: binary, subcommand words and flags, connection flags."""
        security = (f"--certs-dir={self.settings.certs_dir}" if self.secure else "--insecure")
        return [self.settings.binary, *words, f"--host={self.host(pod)}", security]

    def _run(self, pod: str, argv: list[str], timeout_s: float | None = None
             ) -> tuple[str, str, int]:
        log.debug("kwbase in %s/%s: %s", self.namespace, pod, " ".join(argv))
        try:
            stdout, stderr, code = self.runner.exec(
                self.namespace, pod, self.settings.container, argv,
                timeout=self.settings.timeout_s if timeout_s is None else timeout_s)
        except Exception as err:
            # The exec path fails in many ways (ApiException for a missing pod or a stopped
            # container, websocket and TLS errors, socket time-outs); all mean the same here.
            raise ExecFailed(f"could not exec {' '.join(argv)} in pod {self.namespace}/{pod}: "
                             f"{type(err).__name__}: {err}", pod, argv) from err
        return stdout, stderr, code

    def _checked(self, pod: str, argv: list[str]) -> str:
        """Run argv; stdout on exit 0, else the typed error."""
        stdout, stderr, code = self._run(pod, argv)
        if code != 0:
            raise self._failure(pod, argv, stdout, stderr, code)
        return stdout

    def _failure(self, pod: str, argv: list[str], stdout: str, stderr: str,
                 code: int, timeout_s: float | None = None) -> KwbaseError:
        if code < 0:
            waited = self.settings.timeout_s if timeout_s is None else timeout_s
            return ExecTimedOut(f"{' '.join(argv)} in pod {self.namespace}/{pod} gave no exit "
                                f"status (its stream was cut, or it ran past {waited:g} s) "
                                f"({error_text(stderr) or 'no output'})", pod, argv)
        if code in (126, 127) and "ERROR:" not in stderr:
            # The runtime's answers for "cannot execute" and "not found": kwbase never ran.
            return ExecFailed(f"{' '.join(argv)} could not run in pod {self.namespace}/{pod}: "
                              f"{(stderr or stdout).strip()}", pod, argv)
        return classify_failure(pod, argv, code, stderr)

    def init(self, pod: str) -> InitOutcome:
        """`kwbase init` against pod's node. Idempotent: an already initialised cluster is
        success (ALREADY_INITIALIZED). A node that cannot be reached makes kwbase retry until
        the time-out: NodeUnreachable."""
        argv = self.argv(pod, "init")
        stdout, stderr, code = self._run(pod, argv)
        if code == 0:
            return InitOutcome.INITIALIZED
        if "cluster has already been initialized" in stderr:
            return InitOutcome.ALREADY_INITIALIZED
        if code < 0 and "node not ready to perform cluster initialization" in stderr:
            raise NodeUnreachable(pod, argv, code, stderr,
                                  summary=f"the node did not accept init within "
                                          f"{self.settings.timeout_s:g} s: "
                                          f"{error_text(stderr.splitlines()[-1])}")
        raise self._failure(pod, argv, stdout, stderr, code)

    def node_status(self, pod: str, node_id: int | None = None, *, ranges: bool = False,
                    decommission: bool = False, all_columns: bool = False
                    ) -> tuple[NodeStatus, ...]:
        """`kwbase node status [<id>] --format=csv [--ranges] [--decommission] [--all]`.
        Without --decommission/--all, kwbase hides decommissioned nodes that are not live."""
        words = ["node", "status"] + ([str(node_id)] if node_id is not None else [])
        words += ["--format=csv"]
        words += ["--ranges"] if ranges else []
        words += ["--decommission"] if decommission else []
        words += ["--all"] if all_columns else []
        argv = self.argv(pod, *words)
        return self._parsed(pod, argv, parse_node_status)

    def decommission(self, pod: str, node_ids: Sequence[int]) -> tuple[DecommissionStatus, ...]:
        """`kwbase node decommission <ids> --wait=none`: mark the nodes decommissioning and
        return at once with their status. Its `replicas` column is a meta scan of the range
        descriptors (server/admin.go DecommissionStatus), the authoritative count; call it
        again (idempotent while decommissioning) until every node is drained_of_replicas.
        Never poll node_status's gossiped_replicas for that: it reads 0 once a dead node's
        gossip expires, replicas or not. DecommissionRefused in single-replica mode."""
        argv = self.argv(pod, "node", "decommission", *map(str, node_ids), "--wait=none",
                         "--format=csv")
        return self._parsed(pod, argv, parse_decommission)

    def recommission(self, pod: str, node_ids: Sequence[int]) -> tuple[DecommissionStatus, ...]:
        """`kwbase node recommission <ids>`: clear the decommissioning flag
        (DecommissionRefused in single-replica mode)."""
        argv = self.argv(pod, "node", "recommission", *map(str, node_ids), "--format=csv")
        return self._parsed(pod, argv, parse_decommission)

    def drain(self, pod: str) -> None:
        """`kwbase node drain` of the node the command connects to (with connect_via=localhost,
        pod's own node): it stops taking clients and moves its leases away, but keeps running."""
        self._checked(pod, self.argv(pod, "node", "drain"))

    def upgrade(self, pod: str, node_id: int) -> None:
        """`kwbase node upgrade <id>` (cli/node.go:548-636): mark the node UPGRADING, the first
        step of KWDB's own version upgrade. Refused (CommandFailed) while any node of the
        cluster is neither LIVE nor DECOMMISSIONED, an UPGRADING one included
        (server/server.go:2824-2837): so never twice. Prints nothing on success."""
        self._checked(pod, self.argv(pod, "node", "upgrade", str(node_id)))

    def upgrading_nodes(self, pod: str) -> frozenset[int]:
        """The ids whose liveness record carries KWDB's Upgrading flag (UPGRADING_NODES_QUERY),
        as the gateway's gossip sees them."""
        argv = self.argv(pod, "sql", "--format=csv", "-e", UPGRADING_NODES_QUERY)
        return self._parsed(pod, argv, parse_upgrading_nodes)

    def ranges_without_quorum(self, pod: str, live: Collection[int]) -> int:
        """How many ranges lack a quorum of voters on the `live` node ids, by the range
        descriptors (`ranges_without_quorum`)."""
        argv = self.argv(pod, "sql", "--format=csv", "-e", STORE_NODES_QUERY)
        store_nodes = self._parsed(pod, argv, parse_store_nodes)
        argv = self.argv(pod, "sql", "--format=csv", "-e", RANGE_REPLICA_SETS_QUERY)
        replica_sets = self._parsed(pod, argv, parse_replica_sets)
        return ranges_without_quorum(replica_sets, store_nodes, frozenset(live))

    def replication_health(self, pod: str) -> ReplicationHealth:
        """`replication_health_of` the nodes `node status --ranges` lists, marked stale while
        their records may predate the newest start of a live node (`stale_records`)."""
        # The times first: a record rewritten between the two reads then makes the sums newer
        # than the times say, never older.
        argv = self.argv(pod, "sql", "--format=csv", "-e", STATUS_TIMES_QUERY)
        times = self._parsed(pod, argv, parse_status_times)
        argv = self.argv(pod, "sql", "--format=csv", "-e", SNAPSHOTS_QUERY)
        snapshots = self._parsed(pod, argv, parse_snapshots)
        statuses = self.node_status(pod, ranges=True)
        health = replication_health_of(statuses, snapshots)
        return replace(health, stale=stale_records(statuses, times))

    def running_jobs(self, pod: str) -> RunningJobs:
        """The running jobs by type (RUNNING_JOB_TYPES_QUERY)."""
        argv = self.argv(pod, "sql", "--format=csv", "-e", RUNNING_JOB_TYPES_QUERY)
        return self._parsed(pod, argv, parse_running_jobs)

    def _parsed(self, pod: str, argv: list[str], parse: Callable[[str], T]) -> T:
        stdout = self._checked(pod, argv)
        try:
            return parse(stdout)
        except ValueError as err:
            raise UnexpectedOutput(f"{' '.join(argv)} in pod {self.namespace}/{pod}: {err}",
                                   pod, argv) from err


    # --- SQL statements and the external-I/O directory (backups, reconciler.kaiwudb.backup) ---

    def sql(self, pod: str, statement: str, *, bulk: bool = False,
            database: str = "") -> SqlAnswer:
        """One statement through `kwbase sql --format=csv -e`: its columns, rows and the
        server's notices (the CLI prints each as `NOTICE: ...` on stderr, exit code 0).
        bulk: an EXPORT or IMPORT, given KwbaseSettings.long_timeout_s; ExecTimedOut when it
        outlives even that (the statement may run on: statement_jobs says). database: the
        session's current database (`--database`, kwbase/pkg/cli/flags.go), for statements
        that name objects in it unqualified; one argument of its own, never parsed as SQL."""
        chosen = (f"--database={database}",) if database else ()
        argv = self.argv(pod, "sql", "--format=csv", *chosen, "-e", statement)
        problem = statement_problem(statement)
        if problem:
            raise NotOneStatement(f"refusing to run {statement[:200]!r}: {problem}", pod, argv)
        timeout_s = self.settings.long_timeout_s if bulk else self.settings.timeout_s
        stdout, stderr, code = self._run(pod, argv, timeout_s)
        if code != 0:
            raise self._failure(pod, argv, stdout, stderr, code, timeout_s)
        notices = tuple(line[len("NOTICE: "):].strip() for line in stderr.splitlines()
                        if line.startswith("NOTICE: "))
        reader = csv.reader(io.StringIO(stdout))
        table = [row for row in reader]
        headers = tuple(table[0]) if table else ()
        rows = tuple(dict(zip(headers, row, strict=False)) for row in table[1:])
        return SqlAnswer(headers, rows, notices)

    def statement_jobs(self, pod: str, job_type: str, column: str, needle: str
                       ) -> tuple[JobRow, ...]:
        """The jobs of one statement, newest first (statement_jobs_query)."""
        argv = self.argv(pod, "sql", "--format=csv", "-e",
                         statement_jobs_query(job_type, column, needle))
        return self._parsed(pod, argv, parse_statement_jobs)

    def file_sums(self, pod: str, directory: str) -> dict[str, str]:
        """Every file under `directory` in pod's kwbase container, relative path -> sha256
        (`find DIR -type f`, then `sha256sum`); {} when the directory does not exist."""
        argv = ["find", directory, "-type", "f"]
        stdout, stderr, code = self._run(pod, argv)
        if code != 0:
            if "No such file or directory" in stderr:
                return {}
            raise self._failure(pod, argv, stdout, stderr, code)
        paths = [line for line in stdout.splitlines() if line]
        if not paths:
            return {}
        sums = self._checked(pod, ["sha256sum", *paths])
        root = directory.rstrip("/") + "/"
        found = {}
        for line in sums.splitlines():
            digest, _, path = line.partition("  ")
            if path.startswith(root):
                found[path[len(root):]] = digest
        return found

    def read_file(self, pod: str, path: str) -> bytes:
        """A file's contents through `cat` (text files: exec streams carry text)."""
        return self._checked(pod, ["cat", path]).encode()

    def remove_dir(self, pod: str, directory: str) -> None:
        """`rm -rf DIR` in pod's kwbase container."""
        self._checked(pod, ["rm", "-rf", directory])
