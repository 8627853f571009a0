"""A backup's start: whether it may start now (`start_blocker`: one at a time, and never during
a scale-in, a rolling upgrade, a failover or a restore), and its plan (`Planner.make_plan`),
read from KaiwuDB's catalogue through one Ready pod with a live node, which the step writes to
the target before anything is exported.

Called by reconciler.kaiwudb.backup.step when a pending backup is looked at.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from reconciler.kaiwudb.backup.catalog import (
    comments_queries,
    foreign_keys_queries,
    grants_queries,
    read_comments,
    read_foreign_keys,
    read_grants,
    unsettled_foreign_keys,
)
from reconciler.kaiwudb.backup.database import (
    RELATIONAL,
    DatabasePlan,
    ForeignKey,
    choose_databases,
    objects_query,
    split_objects,
)
from reconciler.kaiwudb.backup.names import users_problem
from reconciler.kaiwudb.backup.objects import SequenceDef, sequence_value, sequence_value_query
from reconciler.kaiwudb.backup.plan import Plan
from reconciler.kaiwudb.backup.restore_plan import restore_pending
from reconciler.kaiwudb.backup.status import BackupFailed
from reconciler.kaiwudb.kwbase.admin import KwbaseAdmin
from reconciler.kaiwudb.kwbase.errors import CommandFailed, KwbaseError, error_text
from reconciler.kaiwudb.pods import cluster_pods, pod_ready, rolling
from reconciler.kube import kinds as k
from reconciler.kube.cache import CacheView
from reconciler.model import Obj, Pass, meta
from renderer.spec import Cluster


@dataclass(frozen=True)
class ClusterState:
    """What the start predicate looks at, read from the pass and the caches."""

    initialized: bool
    scale_in: bool  # an operation in status, or the spec asking for fewer replicas than run
    rolling: bool  # the StatefulSet's rollout is under way
    not_ready: tuple[str, ...]  # pods that should run and are not Ready
    failing: tuple[str, ...]  # pods failover is looking after
    restoring: bool = False


def start_blocker(state: ClusterState) -> str:
    """Why a backup may not start now ("" when it may): one at a time (checked by the
    caller), and never during a scale-in, a rolling upgrade, a failover or a restore."""
    if not state.initialized:
        return "the cluster is not initialised"
    if state.restoring:
        return "the cluster is being restored from a backup"
    if state.scale_in:
        return "a scale-in is in progress"
    if state.rolling:
        return "a rolling update is in progress"
    if state.failing:
        return f"failover is looking after {', '.join(state.failing)}"
    if state.not_ready:
        return f"pods are not Ready: {', '.join(state.not_ready)}"
    return ""


def _refused(err: CommandFailed) -> bool:
    """KaiwuDB ran the statement and refused it (an `ERROR:` of its SQL), as opposed to a node
    that could not be reached or was not ready (CommandFailed's subclasses): only that is
    worth going on without."""
    return type(err) is CommandFailed and "ERROR:" in err.stderr


def _short(err: CommandFailed) -> str:
    """KaiwuDB's error, on one line and short (it goes into a status)."""
    text = " ".join((error_text(err.stderr) or str(err)).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _ordinal(pod: str) -> tuple[int, str]:
    tail = pod.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else 1 << 30, pod)


class Planner:
    """What a backup starts from: the cluster's state for `start_blocker`, and the plan read from
    KaiwuDB's catalogue through one Ready pod with a live node (its databases, tables, views,
    sequences with their values, grants, foreign keys, comments, and the timestamp)."""

    def __init__(self, view: CacheView, admin: Callable[[Cluster], KwbaseAdmin]) -> None:
        self.view = view
        self.admin = admin

    def cluster_state(self, p: Pass, cluster: Cluster) -> ClusterState:
        pods = cluster_pods(self.view, cluster)
        sts = self.view.peek(k.STATEFUL_SET, cluster.namespace, cluster.name)
        replicas = int(((sts or {}).get("spec") or {}).get("replicas") or 0) \
            if sts is not None else cluster.replicas
        names = [cluster.pod_name(i) for i in range(replicas)]
        return ClusterState(
            initialized=p.kaiwu.initialized,
            scale_in=p.kaiwu.operation is not None or cluster.replicas < replicas,
            rolling=rolling(sts),
            not_ready=tuple(n for n in names if not pod_ready(pods.get(n))),
            failing=tuple(sorted(p.kaiwu.failures or {})),
            restoring=restore_pending(meta(p.obj).get("annotations") or {},
                                         cluster.restore_from))

    def make_plan(self, p: Pass, cluster: Cluster, obj: Obj) -> Plan:
        live = {n.pod: n.node_id for n in p.kaiwu.nodes or () if n.state == "live" and n.pod}
        pods = cluster_pods(self.view, cluster)
        chosen = next((pod for pod in sorted(live, key=_ordinal) if pod_ready(pods.get(pod))),
                      None)
        if chosen is None:
            raise BackupFailed("NoNode", "no Ready pod with a live KaiwuDB node to export from")
        admin = self.admin(cluster)
        try:
            shown = admin.sql(chosen, "SHOW DATABASES")
            wanted = [str(d) for d in (obj.get("spec") or {}).get("databases") or ()]
            chosen_dbs, missing = choose_databases(
                [(r["database_name"], r["engine_type"]) for r in shown.rows], wanted)
            if missing:
                raise BackupFailed("DatabaseNotFound", f"spec.databases: {', '.join(missing)} "
                                   "do(es) not exist in the cluster")
            refused = users_problem([str(r.get("username") or "")
                                        for r in admin.sql(chosen, "SHOW USERS").rows])
            if refused:
                raise BackupFailed("NotExportable", refused)
            dbs = []
            for db_name, engine in chosen_dbs:
                objects = split_objects(db_name,
                                           admin.sql(chosen, objects_query(db_name)).rows)
                if objects.problem:
                    raise BackupFailed("NotExportable", objects.problem)
                tables = objects.tables
                db = DatabasePlan(db_name, engine, tables, left_out=objects.left_out,
                                     views=objects.views, sequences=objects.sequences)
                on_schemas, on_tables = grants_queries(db_name)
                grants, refused = read_grants(db, admin.sql(chosen, on_schemas).rows,
                                                 admin.sql(chosen, on_tables).rows)
                if refused:
                    raise BackupFailed("NotExportable", refused)
                db = replace(db, grants=grants)
                if engine == RELATIONAL and tables:
                    keys, left_out = self.foreign_keys(admin, chosen, db)
                    db = replace(db, foreign_keys=keys, left_out=left_out)
                if engine == RELATIONAL:
                    db = self.comments(admin, chosen, db)
                dbs.append(db)
            ts = admin.sql(chosen, "SELECT cluster_logical_timestamp()")
            consistent_to = ts.rows[0]["cluster_logical_timestamp"]
            for i, db in enumerate(dbs):
                if db.sequences:
                    dbs[i] = db = replace(db, sequences=self.sequence_values(admin, chosen, db))
                if db.foreign_keys:
                    # Read again: only a key that held before and after the timestamp surely
                    # fits the rows exported as of it.
                    again, _ = self.foreign_keys(admin, chosen, db)
                    kept, changed = unsettled_foreign_keys(db.foreign_keys, again)
                    dbs[i] = replace(db, foreign_keys=kept, left_out=(*db.left_out, *changed))
        except KwbaseError as err:
            raise BackupFailed("ExportFailed", str(err)) from err
        plan = Plan(str(meta(obj).get("name")), str(meta(obj).get("uid")), chosen,
                       live[chosen], consistent_to, tuple(dbs))
        problem = plan.problem()
        if problem:
            raise BackupFailed("NotExportable", problem)
        return plan

    @staticmethod
    def sequence_values(admin: KwbaseAdmin, pod: str, db: DatabasePlan
                        ) -> tuple[SequenceDef, ...]:
        """`db`'s sequences with their values, read after the backup's timestamp (so at least
        every value its exported rows hold: values move only in INCREMENT's direction); a
        virtual one has none."""
        found = []
        for sequence in db.sequences:
            if sequence.virtual:
                found.append(sequence)
                continue
            rows = admin.sql(pod, sequence_value_query(db.name, sequence)).rows
            value = sequence_value(sequence, rows)
            if isinstance(value, str):
                raise BackupFailed("NotExportable", f"database {json.dumps(db.name)}: {value}")
            found.append(replace(sequence, value=value))
        return tuple(found)

    @staticmethod
    def foreign_keys(admin: KwbaseAdmin, pod: str, db: DatabasePlan
                     ) -> tuple[tuple[ForeignKey, ...], tuple[str, ...]]:
        """The foreign keys of a relational database and what of them is left out, said in
        words (read_foreign_keys); BackupFailed when they cannot be carried. A query KWDB
        refuses leaves every key out, said so, and the backup goes on: the catalogue queries
        were written from KWDB's source, not run on a real KWDB, and a backup without the
        keys, saying so, is worth more than none."""
        on_keys, on_columns = foreign_keys_queries(db.name)
        try:
            keys, left_out, refused = read_foreign_keys(
                db, admin.sql(pod, on_keys).rows, admin.sql(pod, on_columns).rows)
        except CommandFailed as err:
            if not _refused(err):
                raise
            return (), (f"every foreign key of database {json.dumps(db.name)} (KaiwuDB "
                        f"refused the query that reads them: {_short(err)})",)
        if refused:
            raise BackupFailed("NotExportable", refused)
        return keys, left_out

    @staticmethod
    def comments(admin: KwbaseAdmin, pod: str, db: DatabasePlan) -> DatabasePlan:
        """`db` with its comments and what of them is left out (read_comments); a query
        KWDB refuses leaves them all out, said so, as for foreign keys."""
        on_database, on_tables = comments_queries(db.name)
        try:
            comments, left_out = read_comments(
                db, admin.sql(pod, on_database).rows, admin.sql(pod, on_tables).rows)
        except CommandFailed as err:
            if not _refused(err):
                raise
            comments, left_out = (), (f"every comment in database {json.dumps(db.name)} "
                                      f"(KaiwuDB refused the query that reads them: "
                                      f"{_short(err)})",)
        return replace(db, comments=comments, left_out=(*db.left_out, *left_out))
