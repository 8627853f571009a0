"""`kaiwu diff`: what a change to cluster files does to the rendered objects.

Called by the CLI. Renders two trees (two directories, or one path at two git revisions), pairs
objects by kind/namespace/name and reports added, removed and changed objects with a unified diff
per object, secrets masked. Changes between the two specs of one cluster are also checked against
the transition rules (start mode is immutable, volumes never shrink, ...).
"""

from __future__ import annotations

import difflib
import hashlib
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from renderer import semantics
from renderer.companions import SourceObject
from renderer.emit import Manifest, manifest_for, to_yaml
from renderer.errors import Problem, RenderError
from renderer.loader import (
    YAML_SUFFIXES,
    Document,
    ParseCache,
    find_files,
    load_documents,
    parse_text,
    too_large,
)
from renderer.redact import redact
from renderer.render import SourceCluster, Sources, build_objects, read_sources, rendered_names
from renderer.settings import INPUT_LIMITS, RenderSettings
from renderer.versions import unknown_versions

# GitHub refuses comments above 65536 characters; leave room for the summary.
MARKDOWN_BUDGET = 60000


@dataclass(frozen=True)
class ObjectChange:
    """One object that differs: `added`, `removed` or `changed`, with its unified diff."""

    key: str
    change: str
    diff: str


@dataclass(frozen=True)
class TreeDiff:
    """The object changes, and what a reviewer must read before them: why the base could not be
    rendered (`base_problems`: the head is then shown in full, as added) and version changes the
    reconciler will refuse (`refusals`), and what accepted changes do that the manifests do
    not show (`notices`: renderer.semantics.transition_notes)."""

    changes: tuple[ObjectChange, ...]
    unchanged: int
    base_problems: tuple[Problem, ...] = ()
    refusals: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()
    # The head's clusters whose version this kaiwu does not know (renderer.versions).
    unknown_versions: tuple[Problem, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.changes


@dataclass(frozen=True)
class _Listed:
    """One YAML file of a revision's listing: its name (for people: git's bytes decoded, with
    replacement characters where they are not UTF-8), how `git cat-file --batch` is asked for
    it, and the object it names (None for a symbolic link, whose object is the link's text)."""

    name: str
    request: bytes
    obj: str | None


# `git ls-tree` modes: a symbolic link's blob is the link's text (a path), not a spec.
_SYMLINK_MODE = b"120000"


def documents_at_revision(path: str, revision: str, repo: Path,
                          cache: ParseCache | None = None) -> list[Document]:
    """The YAML documents under `path` as they were at git `revision` (no checkout needed).

    A file whose text `cache` holds already (the other side of the diff read it: the working
    tree, or the other revision) is not asked of git: its object is known by its name, the
    hash git gives that text (`blob_ids`). A symbolic link is followed inside the revision, as
    the working tree's files are followed (renderer.loader.find_files); one that leaves the
    repository, or leads nowhere, is a problem naming it."""
    listed, problems = _yaml_files(_listing(path, revision, repo), revision)
    known = blob_ids(cache or {})
    wanted = [entry for entry in listed if entry.obj not in known]
    try:
        read = dict(zip((entry.request for entry in wanted), _blobs(repo, revision, wanted),
                        strict=True))
    except RenderError as error:
        raise RenderError([*problems, *error.problems]) from None
    documents: list[Document] = []
    for entry in listed:
        text = known[entry.obj] if entry.obj in known else read[entry.request]
        try:
            documents.extend(parse_text(text, f"{revision}:{entry.name}", cache=cache))
        except RenderError as error:
            problems.extend(error.problems)
    if problems:
        raise RenderError(problems)
    return documents


def _yaml_files(listing: bytes, revision: str) -> tuple[list[_Listed], list[Problem]]:
    """The YAML files of a `git ls-tree -r -l -z` listing (NUL-terminated records, names as git
    stores them: no quoting, so a name in any script or with a tab is read as it is), sorted by
    name; a file over the size limit is a problem, never read."""
    files: list[_Listed] = []
    problems: list[Problem] = []
    for record in listing.split(b"\0"):
        about, _, raw = record.partition(b"\t")  # "<mode> <type> <object> <size>\t<name>"
        fields = about.split()
        if len(fields) != 4 or fields[1] != b"blob":
            continue  # the empty tail, a submodule (commit), a tree git listed anyway
        name = raw.decode("utf-8", errors="replace")
        if (not name.endswith(YAML_SUFFIXES)
                or any(part.startswith(".") for part in PurePosixPath(name).parts)):
            continue
        if fields[0] == _SYMLINK_MODE:
            if b"\n" in raw:  # cat-file --batch reads one request a line
                problems.append(Problem(f"{revision}:{name}", 0, "",
                                        "a symbolic link with a newline in its name",
                                        "rename it, or make it a regular file"))
                continue
            # Followed by git inside the revision (cat-file --follow-symlinks).
            files.append(_Listed(name, revision.encode() + b":" + raw, None))
        # A size that is no number: git could not read the object, and cat-file says why.
        elif fields[3].isdigit() and int(fields[3]) > INPUT_LIMITS.max_file_bytes:
            problems.append(too_large(f"{revision}:{name}", INPUT_LIMITS))
        else:
            files.append(_Listed(name, fields[2], fields[2].decode()))
    return sorted(files, key=lambda entry: entry.name), problems


def blob_ids(texts: Iterable[str]) -> dict[str, str]:
    """Each text by the object name git gives it as a file (SHA-1 of `blob <size>\\0` and the
    UTF-8 bytes). A text that is not what git holds byte for byte (a SHA-256 repository, a
    file git stores with other line ends) has another name, and is then read from git."""
    return {_blob_id(text.encode("utf-8")): text for text in texts}


def _blob_id(data: bytes) -> str:
    # Git names objects by SHA-1 here; not a security use.
    return hashlib.sha1(b"blob %d\0%s" % (len(data), data), usedforsecurity=False).hexdigest()


def _listing(path: str, revision: str, repo: Path) -> bytes:
    """The files under `path` at `revision`, one `git ls-tree` line each (their names from the
    repository's top, and their objects): `git ls-tree` given the absolute path (git makes it
    relative to the top), with no `git rev-parse` before it to check the revision and find the
    top. Only when it fails are those asked, to say why in kaiwu's words (a missing revision,
    a shallow clone, a path outside the repository, not a repository)."""
    where = str((Path.cwd() / path).resolve())
    # `^{commit}`: a revision must name a commit, as _check_revision requires (not a tree).
    args = ["ls-tree", "-r", "-l", "-z", "--full-name", f"{revision}^{{commit}}", "--", where]
    if (listed := _git_process(repo, args)).returncode == 0:
        return listed.stdout
    _repo_relative(path, _check_revision(revision, repo))
    return _git(repo, *args).encode()  # git's own words, when kaiwu has none


# What `git cat-file --batch --follow-symlinks` answers for a link it cannot follow inside the
# revision, in place of an object.
_UNFOLLOWED = {
    b"symlink": "a symbolic link out of the repository",
    b"dangling": "a symbolic link to nothing",
    b"loop": "a symbolic link in a loop",
    b"notdir": "a symbolic link through a file",
}


def _blobs(repo: Path, revision: str, files: list[_Listed]) -> list[str]:
    """Each file's text at `revision`, in order, read by one `git cat-file --batch` (a `git
    show` per file cost a process each: most of a `kaiwu diff --base` over a hundred files).
    Asked by object, not as `revision:name`: git then finds no path through the trees, which
    cost it more than reading the files (14 ms against 6 for a hundred small ones); only a
    symbolic link is asked by name, for git to follow it inside the revision. A file that is
    not UTF-8 is read with replacement characters, as `git show` text was."""
    if not files:
        return []
    request = b"".join(entry.request + b"\n" for entry in files)
    result = _git_process(repo, ["cat-file", "--batch", "--follow-symlinks"], request)
    out, at, found, problems = result.stdout, 0, [], []
    for entry in files:
        end = out.find(b"\n", at)
        header = out[at:end].split() if end >= 0 else []
        if result.returncode == 0 and len(header) == 2 and header[0] in _UNFOLLOWED:
            size = int(header[1])
            problems.append(Problem(
                f"{revision}:{entry.name}", 0, "", _UNFOLLOWED[header[0]],
                "point it at a file inside the repository, or make it a regular file"))
            at = end + 1 + size + 1
            continue
        if result.returncode != 0 or len(header) != 3 or header[1] != b"blob":
            # Git's own last word (a lost object, a broken clone), and the command that said it.
            said = result.stderr.decode(errors="replace").strip().splitlines()
            detail = said[-1] if said else (out[at:end].decode(errors="replace") or "failed")
            raise RenderError([Problem(f"git cat-file {revision}:{entry.name}", 0, "", detail,
                                       "check the revision name (e.g. origin/main) and the "
                                       "path")])
        size = int(header[2])
        if size > INPUT_LIMITS.max_file_bytes:  # a link's target: its size known only now
            problems.append(too_large(f"{revision}:{entry.name}", INPUT_LIMITS))
        else:
            found.append(out[end + 1:end + 1 + size].decode("utf-8", errors="replace"))
        at = end + 1 + size + 1  # the blob, then a newline
    if problems:
        raise RenderError(problems)
    return found


def _check_revision(revision: str, repo: Path) -> Path:
    """The repository's top directory, once the revision is known to be there (one `git
    rev-parse` says both, and whether the clone is shallow); a missing revision is said with
    its likely cause: CI checkouts are shallow by default and hold neither the base branch nor
    the history to find it."""
    found = _git_process(repo, ["rev-parse", "--show-toplevel", "--is-shallow-repository",
                                "--verify", "--quiet", f"{revision}^{{commit}}"])
    lines = found.stdout.decode(errors="replace").splitlines()
    if found.returncode not in (0, 1) or len(lines) < 2:
        _git(repo, "rev-parse", "--show-toplevel")  # not a repository, or git's own error: said
        raise RenderError([Problem(f"git rev-parse {revision}", 0, "", "failed",
                                   "check the revision name (e.g. origin/main) and the path")])
    if found.returncode == 0:
        return Path(lines[0])
    if lines[1] == "true":
        raise RenderError([Problem(
            revision, 0, "", "is not in this clone, which is shallow",
            "check out the full history (actions/checkout with fetch-depth: 0, GitLab "
            "GIT_DEPTH: 0) or run git fetch --unshallow origin")])
    raise RenderError([Problem(
        revision, 0, "", "is not a revision of this repository",
        "check the revision name (e.g. origin/main), or fetch it first (git fetch origin main)")])


def _repo_relative(path: str, top: Path) -> str:
    absolute = (Path.cwd() / path).resolve()
    top = top.resolve()
    try:
        return str(absolute.relative_to(top)) or "."
    except ValueError as error:
        raise RenderError([Problem(path, 0, "", "is not inside the git repository",
                                   f"run kaiwu diff from inside {top}")]) from error


def _git_process(repo: Path, args: list[str], stdin: bytes = b""
                 ) -> subprocess.CompletedProcess[bytes]:
    """One git command in `repo`, its output as bytes, whatever its exit code."""
    try:
        return subprocess.run(["git", "-C", str(repo), *args], input=stdin,
                              capture_output=True, check=False)
    except FileNotFoundError as error:
        raise RenderError([Problem("git", 0, "", "git is not installed",
                                   "install git, or compare two directories")]) from error


def _git(repo: Path, *args: str) -> str:
    done = _git_process(repo, list(args))
    stderr = done.stderr.decode(errors="replace")
    if done.returncode != 0:
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else "failed"
        if "not a git repository" in stderr or "cannot change to" in stderr:
            raise RenderError([Problem(str(repo), 0, "", "is not a git repository",
                                       "run kaiwu diff inside the repository, name it with "
                                       "--repo DIR, or compare two directories")])
        raise RenderError([Problem(f"git {' '.join(args[:2])}", 0, "", detail,
                                   "check the revision name (e.g. origin/main) and the path")])
    return done.stdout.decode(errors="replace")


def documents_in(path: Path, cache: ParseCache | None = None) -> list[Document]:
    return load_documents(find_files(path), cache=cache)


def manifests_of(clusters: Sequence[SourceCluster], settings: RenderSettings) -> list[Manifest]:
    """Every object of `clusters`, as `kaiwu render` writes them."""
    return [manifest_for(obj, source.cluster.name) for source in clusters
            for obj in build_objects(source.cluster, settings)]


def companion_manifests(companions: Sequence[SourceObject]) -> list[Manifest]:
    """The backups and schedules kept beside the clusters, as `kaiwu render` writes them."""
    return [manifest_for(companion.manifest(), companion.cluster) for companion in companions]


def changed_pairs(old: Sequence[SourceCluster], new: Sequence[SourceCluster]
                  ) -> list[tuple[SourceCluster, SourceCluster]]:
    """(before, after) of each cluster on both sides whose spec is not the one both share: a
    file both sides hold alike is read once (renderer.render.read_sources, `checked`), its
    cluster is one spec object on both sides, and a spec changed to itself breaks no rule of a
    change and needs no note."""
    before = {(c.cluster.namespace, c.cluster.name): c for c in old}
    pairs = []
    for after in new:
        previous = before.get((after.cluster.namespace, after.cluster.name))
        if previous is not None and previous.obj is not after.obj:
            pairs.append((previous, after))
    return pairs


def transition_problems(old: Sequence[SourceCluster],
                        new: Sequence[SourceCluster]) -> list[Problem]:
    """Rule violations in changes of clusters that exist on both sides."""
    problems = []
    for previous, after in changed_pairs(old, new):
        for violation in semantics.check_transition(previous.obj["spec"], after.obj["spec"]):
            problems.append(Problem(after.document.file,
                                    after.document.line_of(list(violation.path)),
                                    ".".join(str(part) for part in violation.path),
                                    violation.message, violation.fix))
    return problems


def version_refusals(old: Sequence[SourceCluster], new: Sequence[SourceCluster]) -> list[str]:
    """Version changes the reconciler refuses (KaiwuDB documents no downgrade and no in-place
    major upgrade): not errors here, the spec is valid, but the change would stall the cluster."""
    refusals = []
    for before, after in changed_pairs(old, new):
        cluster, previous = after.cluster, before.cluster.version
        was = semantics.version_tuple(previous)
        wanted = semantics.version_tuple(cluster.version)
        if was is None or wanted is None:
            continue
        where = f"{cluster.namespace}/{cluster.name}: spec.version {previous} -> {cluster.version}"
        if wanted < was:
            refusals.append(f"{where} is a downgrade, which the reconciler refuses (KaiwuDB "
                            f"cannot be downgraded): no pod will move; keep {previous} or later")
        elif wanted[0] != was[0]:
            refusals.append(f"{where} changes the major version, which the reconciler refuses "
                            "(KaiwuDB needs an export and import into a new cluster): no pod "
                            f"will move; keep {was[0]}.x")
    return refusals


def transition_notices(old: Sequence[SourceCluster], new: Sequence[SourceCluster]) -> list[str]:
    """renderer.semantics.transition_notes for each cluster on both sides, named."""
    notices = []
    for previous, after in changed_pairs(old, new):
        cluster = after.cluster
        notices += [f"{cluster.namespace}/{cluster.name}: {note}" for note in
                    semantics.transition_notes(previous.obj["spec"], after.obj["spec"])]
    return notices


def compare(old_docs: Sequence[Document], new_docs: Sequence[Document],
            settings: RenderSettings, base_problems: Sequence[Problem] = ()) -> TreeDiff:
    """Render both sides and compare them object by object.

    An invalid head is an error. An invalid base is not: the change under review may be the one
    that fixes it, so the head is rendered in full (every object added) and the base's problems
    are reported beside it; `base_problems` carries those found while reading the base."""
    base_problems = list(base_problems)
    try:
        new_sources = read_sources(new_docs)
    except RenderError as error:
        raise RenderError(error.problems) from error
    new_clusters = new_sources.clusters
    old_sources = Sources([], [])
    if not base_problems:
        try:
            old_sources = read_sources(old_docs, checked=new_clusters)
        except RenderError as error:
            base_problems = list(error.problems)
    old_clusters = old_sources.clusters
    problems = transition_problems(old_clusters, new_clusters)
    if problems:
        raise RenderError(problems)
    refusals = version_refusals(old_clusters, new_clusters)
    # A cluster both sides share (one Cluster: its file is the same text on both) renders the
    # same objects on both, and no other cluster of either side renders one of their names
    # (read_sources refuses that): they are counted unchanged, never built.
    shared = {id(source.cluster) for source in old_clusters}.intersection(
        id(source.cluster) for source in new_clusters)
    unchanged = sum(len(rendered_names(source.cluster)) for source in new_clusters
                    if id(source.cluster) in shared)
    before = {m.key: m for m in manifests_of([source for source in old_clusters
                                               if id(source.cluster) not in shared], settings)
              + companion_manifests(old_sources.companions)}
    after = {m.key: m for m in manifests_of([source for source in new_clusters
                                              if id(source.cluster) not in shared], settings)
             + companion_manifests(new_sources.companions)}
    changes = []
    for key in sorted(before.keys() | after.keys()):
        # Objects are compared as data first; only the ones that differ are written as text.
        if key in before and key in after and before[key].body == after[key].body:
            unchanged += 1
            continue
        old_text = to_yaml(redact(before[key].body)) if key in before else ""
        new_text = to_yaml(redact(after[key].body)) if key in after else ""
        if old_text == new_text:  # e.g. only a masked secret value changed
            unchanged += 1
            continue
        change = "added" if not old_text else "removed" if not new_text else "changed"
        old_name = before[key].path if key in before else "/dev/null"
        new_name = after[key].path if key in after else "/dev/null"
        diff = "".join(difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
            fromfile=f"a/{old_name}" if key in before else old_name,
            tofile=f"b/{new_name}" if key in after else new_name))
        changes.append(ObjectChange(key, change, diff))
    return TreeDiff(tuple(changes), unchanged, tuple(base_problems), tuple(refusals),
                    tuple(transition_notices(old_clusters, new_clusters)),
                    tuple(unknown_versions(new_clusters)))


def _notes(result: TreeDiff) -> list[str]:
    """The lines a reviewer must see first, in both formats."""
    notes = []
    if result.base_problems:
        notes.append(f"The base is invalid ({len(result.base_problems)} problem(s)), so this "
                     "shows the head's render in full:")
        notes += [f"  {problem}" for problem in result.base_problems]
    notes += [f"REFUSED by the reconciler: {refusal}" for refusal in result.refusals]
    notes += [f"NOTE: {notice}" for notice in result.notices]
    return notes


def format_text(result: TreeDiff) -> str:
    notes = "".join(f"{line}\n" for line in _notes(result))
    if result.empty:
        return notes + f"No changes ({result.unchanged} objects unchanged).\n"
    lines = [f"{change.change:>8}  {change.key}" for change in result.changes]
    body = "".join(change.diff for change in result.changes)
    return notes + "\n".join(lines) + f"\n{_summary(result)}\n\n" + body


def _markdown_notes(result: TreeDiff) -> str:
    text = ""
    if result.base_problems:
        text += (f"> **The base is invalid** ({len(result.base_problems)} problem(s)); this "
                 "shows the head's render in full.\n>\n")
        text += "".join(f"> - `{problem}`\n" for problem in result.base_problems[:20])
        text += "\n"
    text += "".join(f"> :warning: **Refused by the reconciler:** {refusal}\n\n"
                    for refusal in result.refusals)
    text += "".join(f"> **Note:** {notice}\n\n" for notice in result.notices)
    return text


def _summary(result: TreeDiff) -> str:
    counts = {kind: sum(1 for c in result.changes if c.change == kind)
              for kind in ("added", "changed", "removed")}
    return (f"{counts['added']} added, {counts['changed']} changed, {counts['removed']} removed, "
            f"{result.unchanged} unchanged")


def format_markdown(result: TreeDiff, budget: int = MARKDOWN_BUDGET) -> str:
    """A pull-request comment: a summary table, then one collapsible diff per object, cut off
    (with a note) so that the whole comment, note included, stays within `budget` characters.
    The table gets at most half of the budget: thousands of objects must not crowd out every
    diff, nor push the comment past the limit on their own."""
    notes = _markdown_notes(result)
    if result.empty:
        return (notes + f"**KaiwuDB manifests:** no changes ({result.unchanged} objects "
                "unchanged).\n")
    total = len(result.changes)
    text = "\n".join([f"### KaiwuDB manifests: {_summary(result)}", "", notes
                      + "| change | object |", "| --- | --- |"]) + "\n"
    table_end = budget // 2 - len(_more_rows(total))
    for index, change in enumerate(result.changes):
        row = f"| {change.change} | `{change.key}` |\n"
        if len(text) + len(row) > table_end:
            text += _more_rows(total - index)
            break
        text += row
    text += "\n"
    for index, change in enumerate(result.changes):
        block = (f"<details><summary>{change.change}: <code>{change.key}</code></summary>\n\n"
                 f"```diff\n{change.diff}```\n</details>\n\n")
        if len(text) + len(block) + len(_left_out(total)) > budget:
            text += _left_out(total - index)
            break
        text += block
    return text


def _more_rows(count: int) -> str:
    return f"| ... | _{count} more objects: run `kaiwu diff` locally for the full list_ |\n"


def _left_out(count: int) -> str:
    return (f"_{count} more object diffs left out to fit the comment; "
            "run `kaiwu diff` locally for all of them._\n")
