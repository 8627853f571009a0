"""Names read from KaiwuDB, and paths: whether a backup can carry them.

Names read from KaiwuDB are data, never code or paths of ours: every identifier is quoted as
KWDB quotes one (`quote_ident`), the item ids and the directories the reconciler makes and
removes on a node come from indexes, and a name KWDB's own EXPORT would turn into a path or a
statement it cannot read back (`name_problem`) refuses the backup, naming it, before anything is
exported. Table folders (`d<i>/public/<t>`) are KWDB's own layout (export_details.go:287 joins
the table name into the path); `name_problem` makes sure every such name is one path component.

Called by reconciler.kaiwudb.backup.plan (a plan's checks), .start (the users), .export and
.step (paths on the node), .restore_plan (a manifest's directories). Pure functions.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence

_BARE_LOWER = re.compile(r"[a-z_][a-z0-9_$]*")
_HLC = re.compile(r"[0-9]{1,25}(\.[0-9]{1,12})?")




def name_problem(what: str, name: str) -> str:
    """Why a name read from KaiwuDB cannot be carried by a backup ("" when it can).

    KWDB's EXPORT joins schema and table names into the files' paths (kwbase/pkg/sql/
    export_details.go:256, 287: Go's path.Join, which resolves `..`), so each must be exactly
    one path component, printable. It writes a database's name into meta.sql quoted only when
    it holds an upper-case letter, without doubling a `"` (export_details.go:151-154), and IMPORT
    parses that file back (import_database_details.go:50): a database name must read back as
    itself there."""
    shown = json.dumps(name, ensure_ascii=True)
    if not name:
        return f"{what} with an empty name"
    if name in (".", "..") or "/" in name or "\\" in name or any(
            ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return (f"{what} {shown}: KWDB's EXPORT would make it a path of several components or "
                "none (a '/', '\\', '.', '..' or a control character)")
    if what == "database" and not (_BARE_LOWER.fullmatch(name) or (
            any(c.isupper() for c in name) and '"' not in name)):
        return (f"database {shown}: KWDB's EXPORT writes it into meta.sql in a form IMPORT would "
                "not read back as the same name (rename it to lower-case letters, digits and _)")
    return ""


def users_problem(names: Sequence[str]) -> str:
    """Why the cluster's users cannot be carried ("" when they can): KWDB's EXPORT USERS writes
    `CREATE USER <name>` with the name as it is, never quoted (kwbase/pkg/sql/export.go:
    634-690), and IMPORT USERS parses the whole file before it runs any of it
    (importer/import_stmt.go:1573-1576). A name KWDB allows (create_role.go:242: `-` and `.`
    too) that is no bare identifier would make every restore of the backup fail at its users
    step. Reserved words (a user named `select`) are not recognised here."""
    bad = [name for name in names if name not in ("admin", "root")
           and not _BARE_LOWER.fullmatch(name)]
    if not bad:
        return ""
    shown = ", ".join(json.dumps(name) for name in bad[:10])
    return (f"users {shown}: KWDB's EXPORT USERS writes user names unquoted, so its IMPORT "
            "USERS could not read these back and no restore of the backup could succeed; "
            "replace each with a user named with lower-case letters, digits and _ only "
            "(CREATE USER, the same GRANTs, DROP USER)")


def hlc_problem(text: str) -> str:
    """Why a timestamp read from KaiwuDB is not a decimal HLC timestamp ("" when it is)."""
    if _HLC.fullmatch(text):
        return ""
    return f"cluster_logical_timestamp() answered {json.dumps(text)}, not a decimal timestamp"


def safe_relative(path: str) -> bool:
    """A relative path of printable components, none of them '', '.' or '..' (for file names
    found on a node and keys written into a target)."""
    parts = path.split("/")
    return bool(path) and all(p not in ("", ".", "..") for p in parts) and not any(
        ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in path)


def inside(directory: str, path: str) -> bool:
    """`path` lies strictly inside `directory` (both absolute; `..` resolved lexically, and
    refused outright so nothing depends on how a shell or the kernel resolves it)."""
    if ".." in path.split("/") or not path.startswith("/"):
        return False
    return posixpath.normpath(path).startswith(posixpath.normpath(directory) + "/")


