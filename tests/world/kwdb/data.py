"""SQL data in the simulated KaiwuDB: databases, tables, rows, users, cluster settings; EXPORT
and IMPORT; the external-I/O directory on each node's disk.

Called by tests/world/kwdb/sql.py (statements; EXPORT and IMPORT DATABASE through
tests/world/kwdb/bulk.py, which adds their job rows and run time) and tests/world/kwdb/world.py
(the file commands `find`, `sha256sum`, `cat`, `rm` exec'd in a kwbase container, and the test
hooks that load and read data). The data model is deliberately small: a database is relational
or time-series, a table has named columns and rows, each row remembers the simulated time it
was written (so `AS OF SYSTEM TIME` sees the table as it was; no updates or deletes are
modelled), users have option text, cluster settings are name = value.

Statements (KWDB V3.2.1 kwbase/pkg/sql/export.go, importer/, delegate/):
- `SHOW DATABASES` (`database_name, engine_type`: RELATIONAL or TIME SERIES), `SHOW USERS`
  (`username, options, member_of`, admin and root included),
  `SHOW TABLES FROM <db>` (`table_name, table_type`: BASE TABLE or TIME SERIES TABLE),
  `SELECT cluster_logical_timestamp()` (a decimal HLC timestamp `<ns>.0000000000`),
  `SHOW CLUSTER SETTING <name>`, `SET CLUSTER SETTING <name> = '<text>' | DEFAULT`,
  `RESET CLUSTER SETTING <name>` (only settings with a value, and cloudstorage.http.custom_ca).
- `EXPORT INTO CSV "nodelocal://<n>/<dir>" FROM DATABASE <db> [WITH meta_only]`: relational
  databases write `<dir>/meta.sql` and `<dir>/public/<table>/meta.sql` (and, without meta_only,
  `<dir>/public/<table>/n<node>.0.csv`), answering `filename | rows | node_id | file_num`
  (a `meta.sql` row, then `TABLE <t>` rows); time-series databases write `<dir>/meta.sql` (every
  CREATE) and `<dir>/<table>/n<node>.0.csv`, answering one column `result`: `succeed`, or
  `fail` when a table could not be exported (its error becomes a NOTICE).
- `EXPORT INTO CSV "<url>" FROM SELECT * FROM <db>.public.<t> [AS OF SYSTEM TIME '<ts>']`:
  data only (no meta.sql), one `n<node>.0.csv`.
- `SELECT count(*) FROM <db>.<schema>.<table> [AS OF SYSTEM TIME '<ts>']` (`count`).
- Views and sequences: `kwdb_internal.create_statements` (with `descriptor_id` and
  `create_statement`), `CREATE VIEW`, `CREATE SEQUENCE`, `SELECT last_value FROM <seq>`,
  `SELECT setval(...)`, `CREATE SCHEMA IF NOT EXISTS` (show_create_clauses.go, sequence.go).
- `EXPORT USERS TO SQL "<url>"` -> users.sql (`USERS | n | node | 1`); `EXPORT CLUSTER SETTING
  TO SQL "<url>"` -> clustersetting.sql (`CLUSTER SETTING | n | node | 1`).
- `IMPORT CLUSTER SETTING SQL DATA ("<url>/clustersetting.sql")` (`prompt_information`),
  `IMPORT USERS SQL DATA ("<url>/users.sql")` and `IMPORT DATABASE CSV DATA ("<url>")`
  (`job_id | status | fraction_completed | rows | abandon_rows | reject_rows | note`; a row that
  does not fit its table is rejected into `reject.txt` beside the data, status still
  `succeeded`, note `There is a REJECT FILE, please read and resolve it`). An IMPORT into a
  database that exists fails (`database "<db>" already exists`).
EXPORT writes only to `nodelocal://<node id>/<path>` (other schemes fail as KWDB answers for
them: `... does not support additional writing`); IMPORT also reads `http(s)://` URLs for real
(urllib), a directory through its HTML index page as KWDB's http storage lists it (reject.txt
is then not written back). Files land under the
node's external-I/O directory, `<store>/extern`, on that node's store: they go with the store.

Faults a test can inject (`SqlData.export_faults`): a table name whose export fails (a
relational table: a NOTICE and no data file, rows still returned; a time-series table:
`result = fail` and a NOTICE).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import html
import io
import itertools
import json
import math
import posixpath
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

RELATIONAL = "RELATIONAL"
TIME_SERIES = "TIME SERIES"
EXTERN = "extern"
REJECT_NOTE = "There is a REJECT FILE, please read and resolve it"
IMPORT_HEADERS = ["job_id", "status", "fraction_completed", "rows", "abandon_rows",
                  "reject_rows", "note"]
EXPORT_HEADERS = ["filename", "rows", "node_id", "file_num"]
_SYSTEM_DATABASES = ("defaultdb", "postgres", "system")


class SqlError(Exception):
    """A statement's error: becomes `ERROR: ...` (with its SQLSTATE) and exit code 1."""

    def __init__(self, message: str, sqlstate: str = "XXUUU") -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class ForeignKeyDef:
    """An outbound foreign key (sqlbase.ForeignKeyConstraint): the referencing columns, the
    referenced table (by database, schema and name: the simulator's stand-in for its
    descriptor id) and columns, the match type as information_schema shows it (NONE for MATCH
    SIMPLE, FULL) and the actions (NO ACTION, RESTRICT, SET NULL, SET DEFAULT, CASCADE)."""

    columns: tuple[str, ...]
    ref: tuple[str, str, str]  # database, schema, table
    ref_columns: tuple[str, ...]
    match: str = "NONE"
    on_update: str = "NO ACTION"
    on_delete: str = "NO ACTION"
    validated: bool = True  # False: added NOT VALID


@dataclass(frozen=True)
class SequenceOptions:
    """CREATE SEQUENCE's options as the descriptor keeps them (sqlbase SequenceOpts)."""

    minvalue: int = 1
    maxvalue: int = 2**63 - 1
    increment: int = 1
    start: int = 1
    virtual: bool = False


_DESCRIPTOR_IDS = itertools.count(53)


@dataclass
class Table:
    """A table, view or sequence of a schema (kind: kwdb_internal.create_statements'
    descriptor_type, kwbase/pkg/sql/kwdb_internal.go:1411-1440): a table's columns (name, type)
    and rows, each (written at, values as text), its primary key and unique indexes (name ->
    columns in order; "primary" is the primary key; none: the hidden rowid), its other
    indexes, its outbound foreign keys by name. Views and sequences hold no rows here."""

    name: str
    columns: tuple[tuple[str, str], ...]
    rows: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    schema: str = "public"
    kind: str = "table"  # table, view, sequence
    # Grantee -> privileges beyond root's and admin's ALL (the descriptor's privileges).
    grants: dict[str, set[str]] = field(default_factory=dict)
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    foreign_keys: dict[str, ForeignKeyDef] = field(default_factory=dict)
    indexes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # not unique
    # Its comments (system.comments rows of types 1, 2, 3: keys/constants.go:428-433); None:
    # no row ('' is a row, as `IS ''` leaves one).
    comment: str | None = None
    column_comments: dict[str, str] = field(default_factory=dict)
    index_comments: dict[str, str] = field(default_factory=dict)
    # Its descriptor id: given by add_table, from one counter, so ids only grow
    # (GenerateUniqueDescID; create_view.go:111, create_sequence.go:101).
    descriptor_id: int = 0
    # A view's text after its name, "(<columns>) AS <query>" (ShowCreateView,
    # show_create_clauses.go:91-114; the query's table names fully qualified,
    # optbuilder/create_view.go:53, 93).
    definition: str = ""
    # A sequence's MINVALUE, MAXVALUE, INCREMENT, START, VIRTUAL and stored value (a new one
    # stores START - INCREMENT, create_sequence.go:152; SELECT last_value reads it).
    sequence: SequenceOptions | None = None
    value: int = 0

    def create_statement(self, db: str, engine: str) -> str:
        """kwdb_internal.create_statements' create_statement: the name bare where it may be
        (kwdb_internal.go:1510-1515; ShowCreateView, ShowCreateSequence,
        show_create_clauses.go:91-114, 233-252; a table's CREATE without its `;`)."""
        if self.kind == "view":
            return f"CREATE VIEW {quoted(self.name)} {self.definition}"
        if self.kind == "sequence" and self.sequence is not None:
            o = self.sequence
            virtual = " VIRTUAL" if o.virtual else ""
            return (f"CREATE SEQUENCE {quoted(self.name)} MINVALUE {o.minvalue} MAXVALUE "
                    f"{o.maxvalue} INCREMENT {o.increment} START {o.start}{virtual}")
        return self.create_sql(db, engine).removesuffix(";")

    def rows_at(self, t: float | None) -> list[tuple[str, ...]]:
        return [values for written, values in self.rows if t is None or written <= t]

    def column_index(self, name: str) -> int:
        names = [n for n, _ in self.columns]
        if name not in names:
            raise SqlError(f'column "{name}" does not exist', sqlstate="42703")
        return names.index(name)

    def create_sql(self, db: str, engine: str) -> str:
        """The table's CREATE as KWDB formats it: names quoted where they need it
        (kwbase/pkg/sql/lex/encode.go:164-170), its primary key and unique indexes, and no
        foreign key: EXPORT without `foreign_key` omits them (kwbase/pkg/sql/export.go:
        376-381, OmitFKClausesFromCreate). On one line here; KWDB's spans lines."""
        cols = ", ".join(f"{n} {ty}" for n, ty in self.columns)
        if engine == TIME_SERIES:
            return f"CREATE TABLE {quoted(db)}.{quoted(self.name)} ({cols}) TAGS (site INT4 " \
                   "NOT NULL) PRIMARY TAGS(site);"
        for name, columns in [*self.keys.items(), *self.indexes.items()]:
            listed = ", ".join(f"{quoted(c)} ASC" for c in columns)
            cols += (f", CONSTRAINT {quoted(name)} PRIMARY KEY ({listed})" if name == "primary"
                     else f", UNIQUE INDEX {quoted(name)} ({listed})" if name in self.keys
                     else f", INDEX {quoted(name)} ({listed})")
        return f"CREATE TABLE {quoted(self.name)} ({cols});"


def quoted(name: str) -> str:
    """EncodeRestrictedSQLIdent: bare when a bare identifier reads back as the same name, else
    double-quoted with `"` doubled (kwbase/pkg/sql/lex/encode.go:164-194; reserved words are
    not modelled)."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def db_create_name(name: str) -> str:
    """How EXPORT writes a database's name into meta.sql: quoted only when it holds an upper
    case letter, and then without doubling a `"` (kwbase/pkg/sql/export_details.go:151-154)."""
    return f'"{name}"' if any(c.isupper() for c in name) else name


@dataclass
class Database:
    name: str
    engine: str
    tables: dict[tuple[str, str], Table] = field(default_factory=dict)  # (schema, name)
    # The database descriptor's privileges and each user-defined schema's (grantee ->
    # privileges), root's and admin's ALL left implicit.
    grants: dict[str, set[str]] = field(default_factory=dict)
    schema_grants: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    comment: str | None = None  # system.comments of type 0 (None: no row)

    def of_kind(self, kind: str) -> list[Table]:
        return sorted((t for t in self.tables.values() if t.kind == kind),
                      key=lambda t: (t.schema, t.name))

    def user_schemas(self) -> list[str]:
        return sorted({t.schema for t in self.tables.values()} - set(VIRTUAL_SCHEMAS)
                      | set(self.schema_grants))

    def add_table(self, table: Table) -> Table:
        """CREATE TABLE/VIEW/SEQUENCE: a new descriptor copies the database's privileges
        (kwbase/pkg/sql/create_table.go:447), a new user-defined schema too
        (create_schema.go:112-113)."""
        if table.schema not in VIRTUAL_SCHEMAS:
            self.schema_grants.setdefault(table.schema, _copy(self.grants))
        table.grants = _copy(self.grants)
        table.descriptor_id = table.descriptor_id or next(_DESCRIPTOR_IDS)
        self.tables[(table.schema, table.name)] = table
        return table


PRIVILEGES = ("ALL", "CREATE", "DROP", "GRANT", "SELECT", "INSERT", "DELETE", "UPDATE",
              "ZONECONFIG", "EXECUTE")  # privilege/privilege.go:41-75, in ByValue order
VIRTUAL_SCHEMAS = ("information_schema", "kwdb_internal", "pg_catalog", "public")
# A few of the virtual tables every database shows, whose SELECT the `public` role holds
# (sql/virtual_schema.go:383: publicSelectPrivileges); the rest are not listed here.
VIRTUAL_TABLES = (("information_schema", "schema_privileges"),
                  ("information_schema", "table_privileges"), ("pg_catalog", "pg_class"))


def _copy(grants: dict[str, set[str]]) -> dict[str, set[str]]:
    return {user: set(privs) for user, privs in grants.items()}


def shown_privileges(grants: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(grantee, privilege) as PrivilegeDescriptor.Show lists them: users sorted, admin and
    root with ALL, a user holding ALL shown with ALL alone, others in KWDB's privilege order
    (sqlbase/privilege.go Show; privilege.ListFromBitField)."""
    held = {"admin": {"ALL"}, "root": {"ALL"}, **grants}
    return [(user, priv) for user in sorted(held)
            for priv in (["ALL"] if "ALL" in held[user] else
                         [p for p in PRIVILEGES if p in held[user]])]


@dataclass
class SqlData:
    """One cluster's SQL contents (kept by LogicalCluster.data)."""

    databases: dict[str, Database] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)  # name -> options text ("" for none)
    settings: dict[str, str] = field(default_factory=dict)
    export_faults: set[str] = field(default_factory=set)
    next_job: int = 900000000000000000
    role_members: set[tuple[str, str]] = field(default_factory=set)  # (role, member)
    export_chunk_rows: int = 100_000
    # How fast EXPORT and IMPORT move rows a simulated second (tests/world/kwdb/bulk.py): at
    # once unless a test says (real speed depends on the hardware, not on KWDB's source).
    bulk_rows_per_s: float = math.inf

    def is_empty(self) -> bool:
        return not self.databases and not self.users


Disk = Callable[[int], dict[str, bytes] | None]
"""A node id -> that node's external-I/O directory (relative path -> bytes), None when the node
cannot be reached."""


@dataclass(frozen=True)
class Session:
    """What a statement runs with: the data, the sim clock, the epoch, the node it runs on."""

    data: SqlData
    now: float
    epoch_unix_s: float
    node_id: int
    disk: Disk
    database: str = ""  # the session's current database (`kwbase sql --database`)


Result = tuple[list[str], list[list[str]], list[str]]  # headers, rows, notices


def hlc_text(sim_seconds: float, epoch_unix_s: float) -> str:
    return f"{round((epoch_unix_s + sim_seconds) * 1e9)}.0000000000"


def _csv_text(rows: list[tuple[str, ...]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        writer.writerow(row)
    return buf.getvalue().encode()


def _nodelocal(url: str, s: Session, *, writing: bool) -> tuple[dict[str, bytes], str]:
    m = re.fullmatch(r"nodelocal://(\d+)/(.*)", url)
    if m is None:
        scheme = url.split("://", 1)[0] if "://" in url else "file"
        if writing:
            raise SqlError(f"{scheme} does not support additional writing")
        raise SqlError(f"kwdb-sim: only nodelocal:// URLs are modelled, not {url!r}")
    node_id, path = int(m.group(1)), m.group(2).strip("/")
    target = node_id if node_id != 0 else s.node_id
    disk = s.disk(target)
    if disk is None:
        raise SqlError(f"failed to dial n{target}: node unavailable; try another node",
                       sqlstate="08006")
    return disk, path


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def _extern_path(*parts: str) -> str:
    """A path under the external-I/O directory as KWDB builds one from names: Go's
    path.Join, which cleans `..` (kwbase/pkg/sql/export_details.go:256, 287), then refused when
    it leaves the directory (kwbase/pkg/blobs/local_storage.go:103)."""
    joined = posixpath.normpath("/".join(p for p in parts if p))
    if joined == ".." or joined.startswith(("../", "/")):
        raise SqlError("local file access to paths outside of external-io-dir is not allowed: "
                       f"{joined}")
    return "" if joined == "." else joined


IDENT = r'(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")+")'
"""An identifier as KWDB's lexer reads one: bare (folded to lower case) or double-quoted with
`"` doubled (kept exactly; kwbase/pkg/sql/lex/encode.go:175-194 writes them so)."""


def ident(text: str) -> str:
    """The name an IDENT match stands for."""
    if text.startswith('"'):
        return text[1:-1].replace('""', '"')
    return text.lower()


def _database(s: Session, name: str) -> Database:
    db = s.data.databases.get(name)
    if db is None:
        raise SqlError(f'database "{name}" does not exist', sqlstate="3D000")
    return db


def _as_of(text: str | None, s: Session) -> float | None:
    if text is None:
        return None
    try:
        ns = float(text)
    except ValueError as err:
        raise SqlError(f"AS OF SYSTEM TIME: kwdb-sim models only decimal timestamps, not "
                       f"{text!r}") from err
    t = ns / 1e9 - s.epoch_unix_s
    if t > s.now + 1e-6:
        raise SqlError("AS OF SYSTEM TIME: cannot specify timestamp in the future")
    return t


# ----- EXPORT ------------------------------------------------------------------------------------
def export_database(s: Session, url: str, name: str, options: str) -> Result:
    db = _database(s, name)
    disk, path = _nodelocal(url, s, writing=True)
    meta_only = "meta_only" in options.lower()
    notices: list[str] = []
    if db.engine == TIME_SERIES:
        if meta_only:
            raise SqlError("kwdb-sim: meta_only is not modelled for time-series databases")
        creates = [f"CREATE TS DATABASE {db_create_name(db.name)};"]
        failed = False
        for table in db.of_kind("table"):
            creates.append(table.create_sql(db.name, db.engine))
            if table.name in s.data.export_faults:
                notices.append(f"export table {db.name}.{table.name} failed: "
                               "simulated storage error")
                failed = True
                continue
            disk[_extern_path(path, table.name, f"n{s.node_id}.0.csv")] = _csv_text(
                table.rows_at(None))
        disk[_join(path, "meta.sql")] = ("\n".join(creates) + "\n").encode()
        return ["result"], [["fail" if failed else "succeed"]], notices
    disk[_join(path, "meta.sql")] = f"CREATE DATABASE {db_create_name(db.name)};\n".encode()
    if not db.of_kind("table"):
        # meta.sql is written before the table loop, and only a table's export sets result
        # columns (kwbase/pkg/sql/export_details.go:229-236, 286-317; conn_executor_exec.go:
        # 1389-1410): with no table the statement sets none and the CLI prints its tag.
        return [], [], notices
    rows = [["meta.sql", "1", str(s.node_id), "1"]]
    # Tables only, of every schema (descriptor_type = 'table': export_details.go:333-338);
    # a schema other than public gets its CREATE SCHEMA in <schema>/meta.sql (:248-280).
    for table in db.of_kind("table"):
        if table.schema != "public":
            disk[_extern_path(path, table.schema, "meta.sql")] = \
                f"CREATE SCHEMA {quoted(table.schema)};\n".encode()
        base = _extern_path(path, table.schema, table.name)
        disk[_join(base, "meta.sql")] = (table.create_sql(db.name, db.engine) + "\n").encode()
        if meta_only:
            continue
        if table.name in s.data.export_faults:
            notices.append(f"export table {db.name}.public.{table.name} failed: "
                           "simulated storage error")
            continue
        data = table.rows_at(None)
        files = _write_chunks(disk, base, s, data)
        if files:
            rows.append([f"TABLE {table.name}", str(len(data)), str(s.node_id), str(files)])
    return EXPORT_HEADERS, rows, notices


def _write_chunks(disk: dict[str, bytes], directory: str, s: Session,
                  rows: list[tuple[str, ...]]) -> int:
    """The data files of one export on one node: n<node>.<chunk>.csv, a new chunk every
    `export_chunk_rows` rows (KWDB's chunk_rows, default 100000: kwbase/pkg/sql/export.go:113,
    importer/exportcsv.go:420-505); none for no rows (a chunk of no row is never sent, :476-478,
    and a processor that read none returns before writing, :493-496). Returns how many
    (file_num)."""
    size = max(s.data.export_chunk_rows, 1)
    chunks = [rows[i:i + size] for i in range(0, len(rows), size)]
    for number, chunk in enumerate(chunks):
        disk[_join(directory, f"n{s.node_id}.{number}.csv")] = _csv_text(chunk)
    return len(chunks)


def export_select(s: Session, url: str, db_name: str, schema: str, table_name: str,
                  as_of: str | None) -> Result:
    db = _database(s, db_name)
    table = db.tables.get((schema, table_name))
    if table is None or table.kind == "sequence":
        raise SqlError(f'relation "{db_name}.{schema}.{table_name}" does not exist',
                       sqlstate="42P01")
    if table.kind == "view":
        raise SqlError("kwdb-sim: EXPORT FROM SELECT of a view is not modelled")
    if db.engine == TIME_SERIES and as_of is not None:
        raise SqlError("AS OF SYSTEM TIME is not supported on time series tables")
    t = _as_of(as_of, s)
    disk, path = _nodelocal(url, s, writing=True)
    if table.name in s.data.export_faults:
        raise SqlError(f"export table {db_name}.{schema}.{table_name} failed: "
                       "simulated storage error")
    data = table.rows_at(t)
    files = _write_chunks(disk, path, s, data)
    if not files:
        return EXPORT_HEADERS, [], []  # no processor wrote, so none answered a row
    return EXPORT_HEADERS, [[f"TABLE {table.name}", str(len(data)), str(s.node_id),
                             str(files)]], []


def export_users(s: Session, url: str) -> Result:
    disk, path = _nodelocal(url, s, writing=True)
    lines = [f"CREATE USER {name}{' WITH ' + opts if opts else ''};"
             for name, opts in sorted(s.data.users.items())]
    disk[_join(path, "users.sql")] = "".join(line + "\n" for line in lines).encode()
    return EXPORT_HEADERS, [["USERS", str(len(lines)), str(s.node_id), "1"]], []


def _sql_string(value: str) -> str:
    """A string as lex.EncodeSQLStringWithFlags writes it (sql/lex/encode.go:102-147): `'...'`
    when every character is printable ASCII other than `'` and `\\`, else `e'...'` with those
    escaped (util/stringencoding: \\b \\f \\n \\r \\t \\\\ and \\', `_escaped` for the rest)."""
    named = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
             "\\": "\\\\", "'": "\\'"}
    if all(0x20 <= ord(c) < 0x7F and c not in named for c in value):
        return f"'{value}'"
    return "e'" + "".join(named.get(c) or _escaped(c) for c in value) + "'"


def _escaped(c: str) -> str:
    """stringencoding.EncodeEscapedChar (util/stringencoding/string_encoding.go) for a
    character without a named escape: printable ASCII as it is, other bytes `\\xnn`, a
    character of two UTF-8 bytes `\\uNNNN`, of three or four `\\UNNNNNNNN` (Chinese text
    included)."""
    code = ord(c)
    if 0x20 <= code < 0x7F:
        return c
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04X}" if len(c.encode()) == 2 else f"\\U{code:08X}"


def export_settings(s: Session, url: str) -> Result:
    """clustersetting.sql as getClusterSettingSQL writes it (sql/export.go:555-600): every row
    of system.settings but cluster.secret, diagnostics.reporting.enabled and version, its value
    the SQL string with its quotes trimmed (strings.Trim(..., "'")) between new ones: a value
    that needed an escape comes out as `'e'...'`, which nothing can parse back."""
    disk, path = _nodelocal(url, s, writing=True)
    skipped = {"cluster.secret", "diagnostics.reporting.enabled", "version"}
    lines = [f"SET CLUSTER SETTING {k} = '{_sql_string(v).strip(chr(39))}';"
             for k, v in sorted(s.data.settings.items()) if k not in skipped]
    disk[_join(path, "clustersetting.sql")] = "".join(line + "\n" for line in lines).encode()
    return EXPORT_HEADERS, [["CLUSTER SETTING", str(len(lines)), str(s.node_id), "1"]], []


# ----- IMPORT ------------------------------------------------------------------------------------
CUSTOM_CA = "cloudstorage.http.custom_ca"
_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----",
                              re.DOTALL)


def custom_ca(s: Session) -> str:
    """The cluster setting an https storage reads its extra roots from (storage/cloud/
    external_storage.go:367-371; default empty)."""
    return s.data.settings.get(CUSTOM_CA, "")


@functools.lru_cache(maxsize=8)
def _tls(ca: str) -> ssl.SSLContext:
    """The client's TLS as makeHTTPClient builds it (storage/cloud/http_storage.go:76-87): the
    system's roots plus every certificate of `ca` that parses (AppendCertsFromPEM skips the
    others), an error when `ca` is set and none does; the host checked against the SANs. One
    context per value (loading the system's roots takes tens of milliseconds)."""
    context = ssl.create_default_context()
    if not ca:
        return context
    added = 0
    for block in _PEM_CERTIFICATE.findall(ca):
        try:
            context.load_verify_locations(cadata=block)
            added += 1
        except (ssl.SSLError, ValueError):
            continue
    if not added:
        raise SqlError(f"failed to parse root CA certificate from {json.dumps(ca)}")
    return context


def _http(url: str, ca: str, method: str = "GET", headers: dict[str, str] | None = None
          ) -> tuple[int, dict[str, str], bytes]:
    """One request as KWDB's httpStorage.req makes it (storage/cloud/http_storage.go:396-440):
    any status but 200, 201, 204 and 206 is an error with the server's answer. https is
    verified against the system's roots and `ca` (the setting CUSTOM_CA)."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    context = _tls(ca) if url.startswith("https://") else None
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            body: bytes = answer.read()
            return answer.status, dict(answer.headers.items()), body
    except urllib.error.HTTPError as err:
        raise SqlError(f"error response from server: {err.code} {err.reason} for {url}") \
            from err
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, ssl.SSLCertVerificationError):
            # Go's words for a server no trusted root signed (crypto/x509 UnknownAuthorityError).
            raise SqlError(f"Get {url}: x509: certificate signed by unknown authority",
                           sqlstate="08006") from err
        raise SqlError(f"Get {url}: {err}", sqlstate="08006") from err


def _http_join(base: str, name: str) -> str:
    """`req`'s URL: Go's path.Join of the base path and a name (dropping a trailing slash),
    the path percent-encoded as url.URL.String does (http_storage.go:406-410)."""
    parts = urllib.parse.urlsplit(base)
    joined = posixpath.join(urllib.parse.unquote(parts.path), name).rstrip("/") or "/"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, urllib.parse.quote(joined), "",
                                    ""))


def _http_read_file(url: str, ca: str) -> bytes:
    """A whole file as ReadFile reads one: a GET without a range (http_storage.go:147-164,
    270-273), as IMPORT reads meta.sql (importer/import_database_details.go:50, 320), users.sql
    and clustersetting.sql (import_stmt.go:1518-1560)."""
    return _http(url, ca, "GET")[2]


def _http_get(url: str, ca: str) -> bytes:
    """A whole data file as IMPORT reads one: HEAD for its size (Size, http_storage.go:365-379;
    importer/import_csv.go:96), then the bytes by range (Seek, :286-303; import_csv.go:244).
    A size of 0, or one it cannot learn, makes IMPORT read the range 0-0
    (import_csv.go:97-101)."""
    try:
        _, head, _ = _http(url, ca, "HEAD")
        size = int(head.get("Content-Length", "-1"))
    except (SqlError, ValueError):
        size = -1
    end = size if size > 0 else 0
    _, _, body = _http(url, ca, "GET", {"Range": f"bytes=0-{end}"})
    return body


def http_listing(url: str, ca: str) -> bytes:
    """The index page of a directory over http, asked for as ListFiles asks (no trailing
    slash); SqlError when it does not answer."""
    return _http(_http_join(url, ""), ca)[2]


def _http_tree(url: str, ca: str) -> dict[str, bytes]:
    """A directory over http as KWDB's http storage reads it (ListFiles, http_storage.go:
    332-355): a GET of the directory's URL *without* a trailing slash, the <a href> links of the
    page (their text, entities decoded as html.Parse does), `../` skipped, a trailing `/` naming
    a subdirectory; crawled into relative path -> contents."""
    found: dict[str, bytes] = {}
    page = http_listing(url, ca)
    for raw in re.findall(r'<a href="([^"]*)"', page.decode()):
        link = html.unescape(raw)
        if link in ("../", ""):
            continue
        if link.endswith("/"):
            for sub, data in _http_tree(_http_join(url, link[:-1]), ca).items():
                found[_join(link, sub)] = data
        else:
            read = _http_read_file if link == "meta.sql" else _http_get
            found[link] = read(_http_join(url, link), ca)
    return found


def _read(s: Session, url: str) -> bytes:
    if url.startswith(("http://", "https://")):
        return _http_read_file(url, custom_ca(s))
    disk, path = _nodelocal(url, s, writing=False)
    if path not in disk:
        raise SqlError(f"open {EXTERN}/{path}: no such file or directory")
    return disk[path]


def _job_row(s: Session, rows: int, rejected: int) -> list[str]:
    s.data.next_job += 1
    return [str(s.data.next_job), "succeeded", "1", str(rows), "0", str(rejected),
            REJECT_NOTE if rejected else "None"]


_SET_SETTING = re.compile(r"SET CLUSTER SETTING (\S+) = '((?:[^']|'')*)'")
_CREATE_USER = re.compile(r"CREATE USER ([a-z_][a-z0-9_$]*)(?: WITH (.*))?;")
_CREATE_TABLE = re.compile(r"CREATE TABLE (?:" + IDENT + r"\.)?(" + IDENT + r") \((.*?)\)"
                           r"(?: TAGS .*)?;")
_CREATE_RELATIONAL_TABLE = re.compile(r"CREATE TABLE (" + IDENT + r") \((.*)\);")


def import_settings(s: Session, url: str) -> Result:
    """execClusterSettingSQL (importer/import_stmt.go:1518-1550): the whole file is parsed
    first, statements split and `--` comments dropped as KWDB's scanner does (a statement that
    does not parse fails it, nothing set), then each SET runs. So `= 'e'-----BEGIN...'` fails,
    unless it is the last statement: then it reads `= 'e'` (the rest is a comment)."""
    found = []
    for statement in split_statements(_read(s, url).decode()):
        m = _SET_SETTING.fullmatch(" ".join(statement.split()))
        if m is None:
            raise SqlError(f"at or near {json.dumps(statement[:60])}: syntax error",
                           sqlstate="42601")
        found.append((m.group(1), m.group(2).replace("''", "'")))
    s.data.settings.update(found)
    return ["prompt_information"], [["import cluster setting success"]], []


def split_statements(text: str) -> list[str]:
    """The statements of one `-e` text, as KWDB's parser splits them: at each `;` outside
    string literals ('...', '' inside; e'...' with backslash escapes) and quoted identifiers
    ("...", "" inside; dollar quotes are not modelled), with `--`
    comments dropped (kwbase/pkg/sql/parser/lexer.go, scan.go). The CLI runs them all, one
    after another, and prints each result (kwbase/pkg/cli/sql.go runQueryAndFormatResults):
    a name holding `;` is one statement only when it is quoted."""
    statements, current, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            # e'...' and b'...' take backslash escapes (scan.go:249-279, 1025-1031).
            escapes = ch == "'" and i > 0 and text[i - 1] in "eEbB" and not (
                i >= 2 and re.match(r"[\w$]", text[i - 2]))
            end = i + 1
            while end < len(text):
                if escapes and text[end] == "\\":
                    end += 2
                    continue
                if text[end] == ch:
                    if text[end + 1 : end + 2] == ch:
                        end += 2
                        continue
                    break
                end += 1
            current += text[i : end + 1]
            i = end + 1
            continue
        if text.startswith("--", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        if ch == ";":
            statements.append(current)
            current = ""
        else:
            current += ch
        i += 1
    statements.append(current)
    return [stmt.strip() for stmt in statements if stmt.strip()]


def import_users(s: Session, url: str) -> Result:
    """IMPORT USERS (importer/import_stmt.go:1557-1609): the whole file is parsed before any of
    it runs (:1573-1576), so one name EXPORT USERS wrote unquoted that is no bare identifier
    (export.go:634-660 writes `CREATE USER ` + the name as it is: `ops-team.eu`) fails the
    whole import, nobody created."""
    found = []
    for statement in split_statements(_read(s, url).decode()):
        text = " ".join(statement.split())
        if not text.upper().startswith("CREATE USER "):
            continue
        m = _CREATE_USER.fullmatch(text + ";")
        if m is None:
            near = re.sub(r"^[a-z_][a-z0-9_$]*", "", text.removeprefix("CREATE USER "))
            raise SqlError(f"at or near {json.dumps(near[:1] or 'EOF')}: syntax error",
                           sqlstate="42601")
        found.append((m.group(1), m.group(2) or ""))
    for name, options in found:
        if name in s.data.users:
            raise SqlError(f'a role/user named {name} already exists', sqlstate="42710")
        s.data.users[name] = options
    return IMPORT_HEADERS, [_job_row(s, len(found), 0)], []


_KEY_DEF = re.compile(r"(?:CONSTRAINT (" + IDENT + r") PRIMARY KEY|UNIQUE INDEX (" + IDENT
                      + r")|INDEX (" + IDENT + r")) \((.*)\)")


def _table_body(text: str) -> tuple[tuple[tuple[str, str], ...], dict[str, tuple[str, ...]],
                                    dict[str, tuple[str, ...]]]:
    """The columns, keys and other indexes of a CREATE TABLE's body as `Table.create_sql`
    writes it."""
    cols, keys, indexes, depth, item = [], {}, {}, 0, ""
    for c in text + ",":
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            part, item = item.strip(), ""
            km = _KEY_DEF.fullmatch(part)
            if km is not None:
                columns = tuple(ident(col.strip().removesuffix(" ASC"))
                                for col in km.group(4).split(","))
                if km.group(3):
                    indexes[ident(km.group(3))] = columns
                else:
                    keys[ident(km.group(1) or km.group(2))] = columns
            else:
                name, _, ty = part.partition(" ")
                cols.append((name, ty))
            continue
        item += c
    return tuple(cols), keys, indexes


def import_database(s: Session, url: str) -> Result:
    if url.startswith(("http://", "https://")):
        disk, path = _http_tree(url, custom_ca(s)), ""
    else:
        disk, path = _nodelocal(url, s, writing=False)
    meta = disk.get(_join(path, "meta.sql"))
    if meta is None:
        raise SqlError(f"open {EXTERN}/{_join(path, 'meta.sql')}: no such file or directory")
    first = meta.decode().splitlines()[0]
    m = re.fullmatch(r"CREATE (TS )?DATABASE (" + IDENT + ");", first)
    if m is None:
        raise SqlError(f"kwdb-sim: unreadable meta.sql: {first!r}")
    engine, name = (TIME_SERIES if m.group(1) else RELATIONAL), ident(m.group(2))
    if name in s.data.databases:
        raise SqlError(f'database "{name}" already exists', sqlstate="42P04")
    db = Database(name, engine)
    if engine == TIME_SERIES:
        for line in meta.decode().splitlines()[1:]:
            tm = _CREATE_TABLE.fullmatch(line.strip())
            if tm is not None:
                found = Table(ident(tm.group(1)), _table_body(tm.group(2))[0])
                db.tables[("public", found.name)] = found
        locations = {key: _join(path, key[1]) for key in db.tables}
    else:
        # Each folder is a schema named by the folder, each of its folders a table named by its
        # meta.sql (kwbase/pkg/sql/importer/import_database_details.go:266-330).
        locations = {}
        prefix = _join(path) + "/" if path else ""
        schemas = sorted({p[len(prefix):].split("/")[0] for p in disk if p.startswith(prefix)
                          and "/" in p[len(prefix):]})
        for schema in schemas:
            sprefix = _join(path, schema) + "/"
            names = sorted({p[len(sprefix):].split("/")[0] for p in disk
                            if p.startswith(sprefix) and "/" in p[len(sprefix):]})
            for each in names:
                tmeta = disk.get(_join(sprefix, each, "meta.sql"), b"").decode().strip()
                tm = _CREATE_RELATIONAL_TABLE.fullmatch(tmeta)
                if tm is None:
                    raise SqlError("expected CREATE TABLE statement in database file")
                table_name = ident(tm.group(1))  # the name is in meta.sql; the folder is any
                columns, keys, indexes = _table_body(tm.group(2))
                db.tables[(schema, table_name)] = Table(table_name, columns, schema=schema,
                                                        keys=keys, indexes=indexes)
                locations[(schema, table_name)] = _join(sprefix, each)
    total = rejected = 0
    for key, location in sorted(locations.items()):
        table = db.tables[key]
        bad: list[str] = []
        for file_path in sorted(p for p in disk if p.startswith(location + "/")
                                and p.endswith(".csv")):
            for row in csv.reader(io.StringIO(disk[file_path].decode())):
                if len(row) != len(table.columns):
                    bad.append(",".join(row))
                    continue
                table.rows.append((s.now, tuple(row)))
                total += 1
        if bad:
            rejected += len(bad)
            disk[_join(location, "reject.txt")] = "".join(b + "\n" for b in bad).encode()
    s.data.databases[name] = db
    return IMPORT_HEADERS, [_job_row(s, total, rejected)], []


# ----- statements --------------------------------------------------------------------------------
_Q = r"[\"'](?P<url>[^\"']+)[\"']"
_PATTERNS: list[tuple[re.Pattern[str], Callable[[Session, re.Match[str]], Result]]] = []


def _pattern(regex: str) -> Callable[[Callable[[Session, re.Match[str]], Result]],
                                     Callable[[Session, re.Match[str]], Result]]:
    def register(fn: Callable[[Session, re.Match[str]], Result]
                 ) -> Callable[[Session, re.Match[str]], Result]:
        _PATTERNS.append((re.compile(regex, re.IGNORECASE), fn))
        return fn
    return register


@_pattern(r"show databases")
def _show_databases(s: Session, m: re.Match[str]) -> Result:
    names = [[n, RELATIONAL] for n in _SYSTEM_DATABASES]
    names += [[d.name, d.engine] for d in s.data.databases.values()]
    return ["database_name", "engine_type"], sorted(names), []


@_pattern(r"show tables from (?P<db>" + IDENT + ")")
def _show_tables(s: Session, m: re.Match[str]) -> Result:
    """The public schema only, views included, sequences left out: information_schema.tables
    of the schema (kwbase/pkg/sql/delegate/show_tables.go:82-90, information_schema.go)."""
    db = _database(s, ident(m.group("db")))
    kind = "TIME SERIES TABLE" if db.engine == TIME_SERIES else "BASE TABLE"
    rows = [[t.name, kind if t.kind == "table" else "VIEW"]
            for t in sorted(db.tables.values(), key=lambda t: t.name)
            if t.schema == "public" and t.kind in ("table", "view")]
    return ["table_name", "table_type"], rows, []


_HEX_STATEMENT = r"encode\(convert_to\(create_statement, 'utf8'\), 'hex'\) as create_statement_hex"
"""create_statement as hex digits of its UTF-8 (builtins.go:366-385 convert_to, 877-893
encode)."""


def _statement_rows(s: Session, m: re.Match[str], with_id: bool) -> Result:
    """kwdb_internal.create_statements of a database (kwdb_internal.go:1411-1440;
    descriptor_type is table, view or sequence; create_statement as Table.create_statement)."""
    db = _database(s, ident(m.group("db")))
    headers = ["schema_name", "descriptor_name", "descriptor_type",
               *(["descriptor_id"] if with_id else []), "create_statement_hex"]
    if m.group("lit")[1:-1].replace("''", "'") != db.name:
        return headers, [], []
    rows = [[t.schema, t.name, t.kind, *([str(t.descriptor_id)] if with_id else []),
             t.create_statement(db.name, db.engine).encode().hex()]
            for t in sorted(db.tables.values(), key=lambda t: (t.schema, t.name))]
    return headers, rows, []


@_pattern(r"select schema_name, descriptor_name, descriptor_type, descriptor_id, "
          + _HEX_STATEMENT + r" from (?P<db>" + IDENT + r")\.kwdb_internal\.create_statements "
          r"where database_name = (?P<lit>'(?:[^']|'')*') order by schema_name, descriptor_name")
def _create_statements(s: Session, m: re.Match[str]) -> Result:
    return _statement_rows(s, m, with_id=True)


@_pattern(r"select schema_name, descriptor_name, descriptor_type, " + _HEX_STATEMENT
          + r" from (?P<db>" + IDENT + r")\.kwdb_internal\.create_statements where "
          r"database_name = (?P<lit>'(?:[^']|'')*')")
def _objects_there(s: Session, m: re.Match[str]) -> Result:
    return _statement_rows(s, m, with_id=False)


@_pattern(r"show users")
def _show_users(s: Session, m: re.Match[str]) -> Result:
    rows = [["admin", "CREATEROLE", "{}"], ["root", "", "{admin}"]]
    for name, opts in s.data.users.items():
        roles = sorted(role for role, member in s.data.role_members if member == name)
        rows.append([name, opts, "{" + ",".join(roles) + "}"])
    return ["username", "options", "member_of"], sorted(rows), []


@_pattern(r"grant (?P<role>" + IDENT + r") to (?P<member>" + IDENT + ")")
def _grant_role(s: Session, m: re.Match[str]) -> Result:
    """GRANT <role> TO <user>: role membership (kwbase/pkg/sql/grant_role.go)."""
    role, member = ident(m.group("role")), ident(m.group("member"))
    if role != "admin" and role not in s.data.users:
        raise SqlError(f"role {role} does not exist", sqlstate="42704")
    if member not in s.data.users:
        raise SqlError(f"role {member} does not exist", sqlstate="42704")
    s.data.role_members.add((role, member))
    return [], [], []


_PRIVILEGE_LIST = r"(?P<privs>[a-z]+(?:, ?[a-z]+)*)"


_QUALIFIED = IDENT + r"(?:\." + IDENT + r"){0,2}"


@_pattern(r"grant " + _PRIVILEGE_LIST + r" on (?P<on>database|schema|table) (?P<targets>"
          + _QUALIFIED + r"(?:, ?" + _QUALIFIED + r")*) to (?P<grantees>" + IDENT + r"(?:, ?"
          + IDENT + r")*)")
def _grant(s: Session, m: re.Match[str]) -> Result:
    """GRANT <privileges> ON DATABASE d | SCHEMA s | TABLE d.s.t TO <grantees> (sql.y:3716-3720,
    5239-5306; grant_revoke.go:113-170): every grantee must be a user or role, or `public`;
    a schema is named in the session's database; the privileges are added to what each
    grantee holds."""
    privileges = [p.strip().upper() for p in m.group("privs").split(",")]
    unknown = [p for p in privileges if p not in PRIVILEGES]
    if unknown:
        raise SqlError(f'at or near "{unknown[0].lower()}": syntax error', sqlstate="42601")
    grantees = [ident(g.strip()) for g in re.findall(IDENT, m.group("grantees"))]
    for grantee in grantees:
        if grantee not in s.data.users and grantee not in ("admin", "root", "public"):
            raise SqlError(f"user or role {grantee} does not exist")
    on = m.group("on").lower()
    targets = [[ident(p) for p in re.findall(IDENT, target)]
               for target in re.findall(_QUALIFIED, m.group("targets"))]
    found: list[dict[str, set[str]]] = []  # every target resolved before any changes
    for parts in targets:
        if on == "database" and len(parts) == 1:
            found.append(_database(s, parts[0]).grants)
        elif on == "schema" and len(parts) == 1:
            if not s.database:
                raise SqlError("kwdb-sim: GRANT ON SCHEMA without a current database is not "
                               "modelled")
            db = _database(s, s.database)
            if parts[0] not in db.user_schemas():
                raise SqlError(f'schema "{parts[0]}" does not exist', sqlstate="3F000")
            found.append(db.schema_grants.setdefault(parts[0], {}))
        elif on == "table" and len(parts) == 3:
            table = _database(s, parts[0]).tables.get((parts[1], parts[2]))
            if table is None:
                raise SqlError(f'relation "{".".join(parts)}" does not exist',
                               sqlstate="42P01")
            found.append(table.grants)
        else:
            raise SqlError(f"kwdb-sim: GRANT ON {on.upper()} {'.'.join(parts)} is not modelled")
    for held in found:
        for grantee in grantees:
            if grantee not in ("admin", "root"):
                held.setdefault(grantee, set()).update(privileges)
    return [], [], []


@_pattern(r"select table_schema, grantee, privilege_type from (?P<db>" + IDENT + r")"
          r"\.information_schema\.schema_privileges where grantee not in \('admin', 'root'\)"
          r" order by table_schema, grantee, privilege_type")
def _schema_privileges(s: Session, m: re.Match[str]) -> Result:
    """information_schema.schema_privileges (information_schema.go:1023-1066): every schema
    of the database, the user-defined ones with their own privileges, the others with the
    database's."""
    db = _database(s, ident(m.group("db")))
    rows = [[schema, user, priv]
            for schema in sorted({*VIRTUAL_SCHEMAS, *db.user_schemas()})
            for user, priv in shown_privileges(
                db.schema_grants.get(schema, {}) if schema not in VIRTUAL_SCHEMAS else db.grants)
            if user not in ("admin", "root")]
    return ["table_schema", "grantee", "privilege_type"], sorted(rows), []


@_pattern(r"select table_schema, table_name, grantee, privilege_type from (?P<db>" + IDENT
          + r")\.information_schema\.table_privileges where grantee not in \('admin', 'root'\)"
          r" order by table_schema, table_name, grantee, privilege_type")
def _table_privileges(s: Session, m: re.Match[str]) -> Result:
    """information_schema.table_privileges (information_schema.go:1358-1400): every table,
    view and sequence with its descriptor's privileges, and the virtual tables, whose SELECT
    the `public` role holds (a few of them here)."""
    db = _database(s, ident(m.group("db")))
    rows = [[t.schema, t.name, user, priv] for t in db.tables.values()
            for user, priv in shown_privileges(t.grants) if user not in ("admin", "root")]
    rows += [[schema, name, "public", "SELECT"] for schema, name in VIRTUAL_TABLES]
    return ["table_schema", "table_name", "grantee", "privilege_type"], sorted(rows), []


_NAMES = r"(?P<{0}>" + IDENT + r"(?:, ?" + IDENT + r")*)"
_ACTION = r"(NO ACTION|RESTRICT|SET NULL|SET DEFAULT|CASCADE)"


def _table_of(s: Session, qualified: str) -> tuple[tuple[str, str, str], Table]:
    """A table named `db.schema.table` (the only form the reconciler writes), or its error
    (kwbase/pkg/sql/resolver.go: relation "..." does not exist)."""
    parts = [ident(p) for p in re.findall(IDENT, qualified)]
    if len(parts) != 3:
        raise SqlError(f"kwdb-sim: table {qualified} is not named db.schema.table")
    db = _database(s, parts[0])
    table = db.tables.get((parts[1], parts[2]))
    if table is None or table.kind != "table":
        raise SqlError(f'relation "{qualified}" does not exist', sqlstate="42P01")
    return (parts[0], parts[1], parts[2]), table


@_pattern(r"alter table (?P<table>" + _QUALIFIED + r") add constraint (?P<name>" + IDENT
          + r") foreign key \(" + _NAMES.format("cols") + r"\) references (?P<ref>" + _QUALIFIED
          + r") \(" + _NAMES.format("refcols") + r"\)(?P<full> match full)?"
          + r"(?: on delete " + _ACTION.replace("(", "(?P<delete>", 1) + r")?"
          + r"(?: on update " + _ACTION.replace("(", "(?P<update>", 1) + r")?"
          + r"(?P<notvalid> not valid)?")
def _add_foreign_key(s: Session, m: re.Match[str]) -> Result:
    """ALTER TABLE t ADD CONSTRAINT name FOREIGN KEY (cols) REFERENCES r (cols) [MATCH FULL]
    [ON DELETE a] [ON UPDATE a] [NOT VALID], as ResolveFK checks it (kwbase/pkg/sql/
    create_table.go:1018-1218; alter_table.go:466-480): the columns exist and pair up, the
    name is new on the table, an index of the table starts with the columns (one is made,
    <table>_auto_index_<name>, when the table is empty; create_table.go:1176-1205, 1250-1270),
    the referenced columns are a unique index's in its order (sqlbase/table.go:843-869); then,
    unless NOT VALID, every row is checked (check.go:280-337: a row whose columns are all set
    needs a match; MATCH FULL also refuses some set and some NULL; NULL is the empty text
    here). Not modelled: column types, SET NULL on NOT NULL columns, the schema change that
    checks the rows after the statement (here it is all done at once)."""
    _, table = _table_of(s, m.group("table"))
    ref_where, ref = _table_of(s, m.group("ref"))
    name = ident(m.group("name"))
    cols = tuple(ident(c) for c in re.findall(IDENT, m.group("cols")))
    ref_cols = tuple(ident(c) for c in re.findall(IDENT, m.group("refcols")))
    at = [table.column_index(c) for c in cols]
    ref_at = [ref.column_index(c) for c in ref_cols]
    if len(cols) != len(ref_cols):
        raise SqlError(f"{len(cols)} columns must reference exactly {len(cols)} columns in "
                       f"referenced table (found {len(ref_cols)})", sqlstate="42601")
    if name in table.keys or name in table.foreign_keys:
        raise SqlError(f'duplicate constraint name: "{name}"', sqlstate="42710")
    origin = [c for c in [*table.keys.values(), *table.indexes.values()]
              if c[:len(cols)] == cols]
    if not origin and table.rows:
        listed = '", "'.join(cols)
        raise SqlError(f'foreign key requires an existing index on columns ("{listed}")',
                       sqlstate="23503")
    if ref_cols not in ref.keys.values():
        raise SqlError("there is no unique constraint matching given keys for referenced "
                       f"table {ref.name}", sqlstate="23503")
    full = m.group("full") is not None
    present = {tuple(row[i] for i in ref_at) for row in ref.rows_at(None)}
    for row in table.rows_at(None) if m.group("notvalid") is None else ():
        values = tuple(row[i] for i in at)
        shown = ", ".join(f"{c}={_datum(table, c, v)}" for c, v in zip(cols, values, strict=True))
        if full and any(values) and not all(values):
            raise SqlError("foreign key violation: MATCH FULL does not allow mixing of null "
                           f"and nonnull values {shown} for {name}", sqlstate="23503")
        if all(values) and values not in present:
            raise SqlError(f'foreign key violation: "{table.name}" row {shown} has no match in '
                           f'"{ref.name}"', sqlstate="23503")
    if not origin:
        table.indexes[f"{table.name}_auto_index_{name}"] = cols
    table.foreign_keys[name] = ForeignKeyDef(
        cols, ref_where, ref_cols, "FULL" if full else "NONE",
        (m.group("update") or "NO ACTION").upper(), (m.group("delete") or "NO ACTION").upper(),
        m.group("notvalid") is None)
    return [], [], []


def _datum(table: Table, column: str, value: str) -> str:
    """A value as `%v` prints a datum (check.go:328-337): strings quoted, NULL as NULL."""
    if not value:
        return "NULL"
    kind = dict(table.columns).get(column, "").upper()
    return f"'{value}'" if kind.startswith(("STRING", "VARCHAR", "CHAR", "TEXT")) else value


FOREIGN_KEY_HEADERS = ["schema_name", "table_name", "constraint_name", "referenced_database",
                       "referenced_schema", "referenced_table", "unique_constraint_name",
                       "match_option", "update_rule", "delete_rule", "convalidated"]


@_pattern(r"select t\.schema_name, t\.name as table_name, d\.dependson_name as constraint_name, "
          r"r\.database_name as referenced_database, r\.schema_name as referenced_schema, "
          r"r\.name as referenced_table, c\.unique_constraint_name, c\.match_option, "
          r"c\.update_rule, c\.delete_rule, k\.convalidated from (?P<db>" + IDENT
          + r")\.kwdb_internal\."
          r"backward_dependencies as d join (?P=db)\.kwdb_internal\.tables as t on t\.table_id "
          r"= d\.descriptor_id join (?P=db)\.kwdb_internal\.tables as r on r\.table_id = "
          r"d\.dependson_id join (?P=db)\.information_schema\.referential_constraints as c on "
          r"c\.constraint_schema = t\.schema_name and c\.table_name = t\.name and "
          r"c\.constraint_name = d\.dependson_name join (?P=db)\.pg_catalog\.pg_constraint as "
          r"k on k\.conrelid::int8 = d\.descriptor_id and k\.conname = d\.dependson_name and "
          r"k\.contype = 'f' where d\.dependson_type = 'fk' order by 1, 2, 3")
def _foreign_keys(s: Session, m: re.Match[str]) -> Result:
    """One row per outbound foreign key of the database's tables: backward_dependencies'
    `fk` rows (kwdb_internal.go:1924-1985) joined by descriptor id to kwdb_internal.tables
    (:233-300, every database's) for both tables, and to referential_constraints
    (information_schema.go:812-870) for the referenced index's name, the match type and the
    rules, and to pg_constraint (pg_catalog.go:925-1040) for convalidated. The referenced index
    is the first unique one with the referenced columns in order, the primary key first
    (sqlbase/table.go:849-869)."""
    db = _database(s, ident(m.group("db")))
    rows = []
    for table in db.of_kind("table"):
        for name, fk in table.foreign_keys.items():
            ref_db = s.data.databases.get(fk.ref[0])
            ref = ref_db.tables.get(fk.ref[1:]) if ref_db is not None else None
            if ref is None:
                continue  # dropped with its references in KWDB; not modelled
            index = next(n for n, cols in sorted(ref.keys.items(), key=lambda kv: (
                kv[0] != "primary", kv[0])) if cols == fk.ref_columns)
            rows.append([table.schema, table.name, name, *fk.ref, index, fk.match,
                         fk.on_update, fk.on_delete, "true" if fk.validated else "false"])
    return FOREIGN_KEY_HEADERS, sorted(rows), []


@_pattern(r"select table_schema, table_name, constraint_name, column_name from (?P<db>" + IDENT
          + r")\.information_schema\.key_column_usage order by table_schema, table_name, "
          r"constraint_name, ordinal_position")
def _key_columns(s: Session, m: re.Match[str]) -> Result:
    """information_schema.key_column_usage (information_schema.go:664-725): the columns of
    every primary key (not the hidden rowid's), unique index and foreign key, in order."""
    db = _database(s, ident(m.group("db")))
    rows = []
    for table in db.of_kind("table"):
        named = {**table.keys, **{n: fk.columns for n, fk in table.foreign_keys.items()}}
        for name, columns in sorted(named.items()):
            rows += [[table.schema, table.name, name, column] for column in columns]
    return ["table_schema", "table_name", "constraint_name", "column_name"], rows, []


_LITERAL = r"'(?:[^']|'')*'"


def _literal(text: str) -> str:
    return text[1:-1].replace("''", "'")


@_pattern(r"comment on (?P<on>database|table|column|index) (?P<target>" + IDENT + r"(?:\."
          + IDENT + r"){0,3})(?:@(?P<index>" + IDENT + r"))? is (?P<text>" + _LITERAL
          + r"|null)")
def _comment_on(s: Session, m: re.Match[str]) -> Result:
    """COMMENT ON DATABASE d | TABLE d.s.t | COLUMN d.s.t.c | INDEX d.s.t@i IS '...' | NULL
    (parser/sql.y:2644-2686; comment_on_*.go: the comment replaces the one there, NULL
    removes it). Tables are named in full here, as the reconciler names them."""
    on = m.group("on").lower()
    parts = [ident(p) for p in re.findall(IDENT, m.group("target"))]
    text = None if m.group("text").lower() == "null" else _literal(m.group("text"))
    if on == "database" and len(parts) == 1 and m.group("index") is None:
        _database(s, parts[0]).comment = text
        return [], [], []
    wanted = 4 if on == "column" else 3
    if len(parts) != wanted or (on == "index") != (m.group("index") is not None):
        raise SqlError(f"kwdb-sim: COMMENT ON {on.upper()} {m.group('target')} is not modelled")
    _, table = _table_of(s, ".".join(quoted(p) for p in parts[:3]))
    if on == "table":
        table.comment = text
        return [], [], []
    if on == "column":
        table.column_index(parts[3])
        held, key = table.column_comments, parts[3]
    else:
        key = ident(m.group("index") or "")
        if key != "primary" and key not in table.keys and key not in table.indexes:
            raise SqlError(f'index "{key}" does not exist', sqlstate="42704")
        held = table.index_comments
    if text is None:
        held.pop(key, None)
    else:
        held[key] = text
    return [], [], []


@_pattern(r"select c\.comment from system\.comments as c join (?P<db>" + IDENT + r")\."
          r"pg_catalog\.pg_database as d on c\.object_id = d\.oid::int8 where c\.type = 0 and "
          r"d\.datname = (?P<lit>" + _LITERAL + ")")
def _database_comment(s: Session, m: re.Match[str]) -> Result:
    """The database's row of system.comments (sqlbase/system.go:300-308), found by
    pg_database's oid, its descriptor id (pg_catalog.go:1134-1141)."""
    db = s.data.databases.get(_literal(m.group("lit")))
    return ["comment"], [[db.comment]] if db is not None and db.comment is not None else [], []


@_pattern(r"select c\.type, t\.schema_name, t\.name as table_name, col\.column_name, "
          r"idx\.index_name, c\.comment from system\.comments as c join (?P<db>" + IDENT
          + r")\.kwdb_internal\.tables as t on t\.table_id = c\.object_id left join (?P=db)\."
          r"kwdb_internal\.table_columns as col on c\.type = 2 and col\.descriptor_id = "
          r"c\.object_id and col\.column_id = c\.sub_id left join (?P=db)\.kwdb_internal\."
          r"table_indexes as idx on c\.type = 3 and idx\.descriptor_id = c\.object_id and "
          r"idx\.index_id = c\.sub_id where c\.type in \(1, 2, 3\) and t\.database_name = "
          r"(?P<lit>" + _LITERAL + r") and t\.state = 'public' and \(\(c\.type = 1 and "
          r"c\.sub_id = 0\) or \(c\.type = 2 and col\.column_name is not null\) or "
          r"\(c\.type = 3 and idx\.index_name is not null\)\) order by 2, 3, 1, 4, 5")
def _comments(s: Session, m: re.Match[str]) -> Result:
    """Comments on the database's tables (type 1), columns (2) and indexes (3), named through
    kwdb_internal.tables, table_columns and table_indexes (kwdb_internal.go:233-300,
    1710-1790); a column's or an index's name is NULL on the other rows. Not modelled: the
    rows KWDB keeps for a dropped table or a replaced primary index (the query passes them
    over: its joins find no name, its table's state is DROP)."""
    db = s.data.databases.get(_literal(m.group("lit")))
    rows = []
    for table in db.of_kind("table") if db is not None else ():
        if table.comment is not None:
            rows.append(["1", table.schema, table.name, "NULL", "NULL", table.comment])
        rows += [["2", table.schema, table.name, c, "NULL", text]
                 for c, text in table.column_comments.items()]
        rows += [["3", table.schema, table.name, "NULL", i, text]
                 for i, text in table.index_comments.items()]
    rows.sort(key=lambda r: (r[1], r[2], r[0], r[3], r[4]))
    return ["type", "schema_name", "table_name", "column_name", "index_name", "comment"], \
        rows, []


# Settings SHOW CLUSTER SETTING knows without a row in system.settings, with their defaults
# (only those the reconciler reads are modelled; the others are refused as unknown).
SETTING_DEFAULTS = {CUSTOM_CA: ""}


def _setting_name(s: Session, name: str) -> str:
    name = name.lower()
    if name not in SETTING_DEFAULTS and name not in s.data.settings:
        raise SqlError(f"unknown setting: {name}")  # sql/show_cluster_setting.go:117-120
    return name


@_pattern(r"show cluster setting (?P<name>[a-z0-9_.]+)")
def _show_setting(s: Session, m: re.Match[str]) -> Result:
    """One column named for the setting (sql/show_cluster_setting.go:144)."""
    name = _setting_name(s, m.group("name"))
    return [name], [[s.data.settings.get(name, SETTING_DEFAULTS.get(name, ""))]], []


@_pattern(r"set cluster setting (?P<name>[a-z0-9_.]+) (?:=|to) "
          r"(?P<value>'(?:[^']|'')*'|default)")
def _set_setting(s: Session, m: re.Match[str]) -> Result:
    """A string setting's new value, or its row deleted for DEFAULT (sql/set_cluster_setting.go:
    106-110, 360-370)."""
    name = _setting_name(s, m.group("name"))
    value = m.group("value")
    if value.lower() == "default":
        s.data.settings.pop(name, None)
    else:
        s.data.settings[name] = value[1:-1].replace("''", "'")
    return [], [], []


@_pattern(r"reset cluster setting (?P<name>[a-z0-9_.]+)")
def _reset_setting(s: Session, m: re.Match[str]) -> Result:
    """SET CLUSTER SETTING name = DEFAULT (sql/parser/sql.y:3820-3824)."""
    s.data.settings.pop(_setting_name(s, m.group("name")), None)
    return [], [], []


@_pattern(r"select cluster_logical_timestamp\(\)")
def _logical_timestamp(s: Session, m: re.Match[str]) -> Result:
    return ["cluster_logical_timestamp"], [[hlc_text(s.now, s.epoch_unix_s)]], []


@_pattern(r"export into csv " + _Q + r" from database (?P<db>" + IDENT + r")"
          r"(?: with (?P<opts>.+))?")
def _export_db(s: Session, m: re.Match[str]) -> Result:
    return export_database(s, m.group("url"), ident(m.group("db")), m.group("opts") or "")


@_pattern(r"export into csv " + _Q + r" from select \* from (?P<db>" + IDENT + r")\."
          r"(?:(?P<schema>" + IDENT + r")\.)?(?P<table>" + IDENT + r")"
          r"(?: as of system time '(?P<ts>[^']+)')?")
def _export_select(s: Session, m: re.Match[str]) -> Result:
    schema = ident(m.group("schema")) if m.group("schema") else "public"
    return export_select(s, m.group("url"), ident(m.group("db")), schema,
                         ident(m.group("table")), m.group("ts"))


@_pattern(r"select count\(\*\) from (?P<db>" + IDENT + r")\.(?P<schema>" + IDENT + r")\."
          r"(?P<table>" + IDENT + r")(?: as of system time '(?P<ts>[^']+)')?")
def _count(s: Session, m: re.Match[str]) -> Result:
    db = _database(s, ident(m.group("db")))
    name = (ident(m.group("schema")), ident(m.group("table")))
    table = db.tables.get(name)
    if table is None or table.kind != "table":
        raise SqlError(f'relation "{db.name}.{name[0]}.{name[1]}" does not exist',
                       sqlstate="42P01")
    if db.engine == TIME_SERIES and m.group("ts") is not None:
        raise SqlError("AS OF SYSTEM TIME is not supported on time series tables")
    return ["count"], [[str(len(table.rows_at(_as_of(m.group("ts"), s))))]], []


# ----- views and sequences (what EXPORT leaves out; the restore makes them again) -------------
def _new_relation(s: Session, qualified: str) -> tuple[Database, str, str]:
    """Where `CREATE VIEW | SEQUENCE db.schema.name` puts it: the database and schema must
    exist, the name must be new among the schema's tables, views and sequences
    (sqlbase/errors.go: relation "..." already exists, 42P07)."""
    parts = [ident(p) for p in re.findall(IDENT, qualified)]
    if len(parts) != 3:
        raise SqlError(f"kwdb-sim: {qualified} is not named db.schema.name")
    db = _database(s, parts[0])
    if parts[1] not in VIRTUAL_SCHEMAS and parts[1] not in db.user_schemas():
        raise SqlError(f'cannot create "{qualified}" because the target database or schema '
                       "does not exist", sqlstate="3F000")
    if (parts[1], parts[2]) in db.tables:
        raise SqlError(f'relation "{parts[2]}" already exists', sqlstate="42P07")
    return db, parts[1], parts[2]


def _sequence_of(s: Session, qualified: str) -> Table:
    parts = [ident(p) for p in re.findall(IDENT, qualified)]
    db = _database(s, parts[0]) if len(parts) == 3 else None
    found = db.tables.get((parts[1], parts[2])) if db is not None else None
    if found is None or found.kind != "sequence" or found.sequence is None:
        raise SqlError(f'relation "{qualified}" does not exist', sqlstate="42P01")
    return found


@_pattern(r"create sequence (?P<name>" + _QUALIFIED + r") minvalue (?P<min>-?[0-9]+) maxvalue "
          r"(?P<max>-?[0-9]+) increment (?P<inc>-?[0-9]+) start (?P<start>-?[0-9]+)"
          r"(?P<virtual> virtual)?")
def _create_sequence(s: Session, m: re.Match[str]) -> Result:
    """CREATE SEQUENCE with the options ShowCreateSequence writes (assignSequenceOptions,
    sequence.go:318-346: INCREMENT not 0, START within MINVALUE..MAXVALUE); it stores
    START - INCREMENT (create_sequence.go:152)."""
    low, high, inc, start = (int(m.group(g)) for g in ("min", "max", "inc", "start"))
    if inc == 0:
        raise SqlError("INCREMENT must not be zero", sqlstate="22023")
    if not low <= start <= high:
        raise SqlError(f"START value ({start}) cannot be less than MINVALUE ({low}) or "
                       f"greater than MAXVALUE ({high})", sqlstate="22023")
    db, schema, name = _new_relation(s, m.group("name"))
    db.add_table(Table(name, (("value", "INT8"),), schema=schema, kind="sequence",
                       sequence=SequenceOptions(low, high, inc, start,
                                                bool(m.group("virtual"))),
                       value=start - inc))
    return [], [], []


@_pattern(r"select last_value from (?P<name>" + _QUALIFIED + r")")
def _sequence_value(s: Session, m: re.Match[str]) -> Result:
    """A sequence's stored value (sequence_select.go:60-81, sequence.go:198)."""
    return ["last_value"], [[str(_sequence_of(s, m.group("name")).value)]], []


@_pattern(r"select setval\((?P<lit>'(?:[^']|'')*'), (?P<value>-?[0-9]+), "
          r"(?P<called>true|false)\)")
def _setval(s: Session, m: re.Match[str]) -> Result:
    """setval(name, value, is_called) (builtins.go:2073-2123; SetSequenceValue,
    sequence.go:128-181): the value must lie within the bounds; unless is_called, the value
    before it is stored."""
    sequence = _sequence_of(s, m.group("lit")[1:-1].replace("''", "'"))
    assert sequence.sequence is not None
    o, value = sequence.sequence, int(m.group("value"))
    if o.virtual:
        raise SqlError(f'cannot set the value of virtual sequence "{sequence.name}"')
    if not o.minvalue <= value <= o.maxvalue:
        raise SqlError(f'value {value} is out of bounds for sequence "{sequence.name}" '
                       f"({o.minvalue}..{o.maxvalue})", sqlstate="22003")
    sequence.value = value if m.group("called").lower() == "true" else value - o.increment
    return ["setval"], [[str(value)]], []


_VIEW_SOURCE = re.compile(r"\b(?:FROM|JOIN)\s+(" + IDENT + r"\." + IDENT + r"\." + IDENT
                          + r")", re.IGNORECASE)


@_pattern(r"create view (?P<name>" + _QUALIFIED + r") (?P<definition>\(.*\) AS .*)")
def _create_view(s: Session, m: re.Match[str]) -> Result:
    """CREATE VIEW db.schema.name (<columns>) AS <query>: every relation the query reads
    must exist (relation "..." does not exist, 42P01; logic_test/views:32-33); the
    definition is kept as written (the reconciler writes what KWDB showed)."""
    definition = m.group("definition")
    for source in _VIEW_SOURCE.findall(definition):
        parts = [ident(p) for p in re.findall(IDENT, source)]
        db = s.data.databases.get(parts[0])
        if db is None or (parts[1], parts[2]) not in db.tables:
            raise SqlError(f'relation "{source}" does not exist', sqlstate="42P01")
    db, schema, name = _new_relation(s, m.group("name"))
    db.add_table(Table(name, (), schema=schema, kind="view", definition=definition))
    return [], [], []


@_pattern(r"create schema if not exists (?P<schema>" + IDENT + r")")
def _create_schema(s: Session, m: re.Match[str]) -> Result:
    """CREATE SCHEMA IF NOT EXISTS in the session's database (parser/sql.y:5441-5454); a new
    schema copies the database's privileges (create_schema.go:112-113)."""
    db = _database(s, s.database)
    schema = ident(m.group("schema"))
    if db.engine == TIME_SERIES:  # create_schema.go:57-58
        raise SqlError(f'cannot create schema in timeseries database "{db.name}"',
                       sqlstate="42809")
    if schema.startswith("pg_"):  # sql/schema.go:49-56
        raise SqlError(f'unacceptable schema name "{schema}"', sqlstate="42939")
    if schema not in VIRTUAL_SCHEMAS:
        db.schema_grants.setdefault(schema, _copy(db.grants))
    return [], [], []


@_pattern(r"export users to sql " + _Q)
def _export_users(s: Session, m: re.Match[str]) -> Result:
    return export_users(s, m.group("url"))


@_pattern(r"export cluster setting to sql " + _Q)
def _export_settings(s: Session, m: re.Match[str]) -> Result:
    return export_settings(s, m.group("url"))


@_pattern(r"import cluster setting sql data \(" + _Q + r"\)")
def _import_settings(s: Session, m: re.Match[str]) -> Result:
    return import_settings(s, m.group("url"))


@_pattern(r"import users sql data \(" + _Q + r"\)")
def _import_users(s: Session, m: re.Match[str]) -> Result:
    return import_users(s, m.group("url"))


@_pattern(r"import database csv data \(" + _Q + r"\)(?: with .*)?")
def _import_database(s: Session, m: re.Match[str]) -> Result:
    return import_database(s, m.group("url"))


@_pattern(r"(?P<what>backup|restore) .*")
def _enterprise(s: Session, m: re.Match[str]) -> Result:
    raise SqlError(f"The {m.group('what').upper()} can only be used in the enterprise version")


def statement(s: Session, text: str) -> Result | None:
    """Run one statement on the data; None when it is not a data statement."""
    for regex, fn in _PATTERNS:
        m = regex.fullmatch(text)
        if m is not None:
            return fn(s, m)
    return None


# ----- the disk: file commands exec'd in a kwbase container ------------------------------------
def file_command(argv: list[str], extern_dir: str, disk: dict[str, bytes] | None,
                 removed_outside: list[str] | None = None) -> tuple[str, str, int]:
    """`find DIR -type f`, `sha256sum FILE...`, `cat FILE`, `rm -rf DIR` on the store's
    external-I/O directory (the only part of the disk modelled). Returns stdout, stderr, code.
    Paths resolve `..` as the kernel does (lexically here: every directory is taken to exist);
    an `rm -rf` that resolves outside the directory succeeds, as rm would, is recorded in
    `removed_outside`, and when it takes the directory itself with it, empties it."""
    name = argv[0].rsplit("/", 1)[-1]
    root = extern_dir.rstrip("/")

    def rel(path: str) -> str | None:
        p = posixpath.normpath(path) if path.startswith("/") else path.rstrip("/")
        if p == root:
            return ""
        return p[len(root) + 1:] if p.startswith(root + "/") else None

    files = disk if disk is not None else {}
    args = argv[1:]
    if name == "find" and len(args) == 3 and args[1:] == ["-type", "f"]:
        r = rel(args[0])
        if r is None:
            return "", f"kwdb-sim: only {root} is modelled on this disk\n", 1
        found = sorted(p for p in files if r == "" or p.startswith(r + "/"))
        if not found and r and not any(p.startswith(r + "/") for p in files):
            return "", f"find: '{args[0]}': No such file or directory\n", 1
        return "".join(f"{root}/{p}\n" for p in found), "", 0
    if name == "sha256sum" and args:
        out, err, code = "", "", 0
        for path in args:
            r = rel(path)
            if r is None or r not in files:
                err += f"sha256sum: {path}: No such file or directory\n"
                code = 1
                continue
            out += f"{hashlib.sha256(files[r]).hexdigest()}  {path}\n"
        return out, err, code
    if name == "cat" and len(args) == 1:
        r = rel(args[0])
        if r is None or r not in files:
            return "", f"cat: {args[0]}: No such file or directory\n", 1
        return files[r].decode(), "", 0
    if name == "rm" and len(args) == 2 and args[0] in ("-rf", "-fr"):
        r = rel(args[1])
        if r is None and args[1].startswith("/"):
            resolved = posixpath.normpath(args[1])
            if removed_outside is not None:
                removed_outside.append(resolved)
            if root.startswith(resolved.rstrip("/") + "/"):
                files.clear()  # the store, extern with it
            return "", "", 0
        if r is None or r == "":
            return "", f"kwdb-sim: refusing rm -rf {args[1]} (only directories under {root})\n", 1
        for p in [p for p in files if p == r or p.startswith(r + "/")]:
            del files[p]
        return "", "", 0
    return "", f"kwdb-sim: {' '.join(argv)!r} is not modelled (find DIR -type f, sha256sum, " \
               "cat FILE, rm -rf DIR are)\n", 2


FILE_COMMANDS = frozenset({"find", "sha256sum", "cat", "rm"})
