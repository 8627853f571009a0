"""`kaiwu diff`: what a change to cluster files does to the rendered objects.

Called by the CLI. Renders two trees (two directories, or one path at two git revisions), pairs
objects by kind/namespace/name and reports added, removed and changed objects with a unified diff
per object, secrets masked. Changes between the two specs of one cluster are also checked against
the transition rules (start mode is immutable, volumes never shrink, ...).
"""

from __future__ import annotations

import difflib
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from renderer import semantics
from renderer.emit import Manifest, manifest_for, to_yaml
from renderer.errors import Problem, RenderError
from renderer.loader import YAML_SUFFIXES, Document, find_files, load_documents, parse_text
from renderer.redact import redact
from renderer.render import SourceCluster, build_objects, read_clusters
from renderer.settings import RenderSettings

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
    changes: tuple[ObjectChange, ...]
    unchanged: int

    @property
    def empty(self) -> bool:
        return not self.changes


def documents_at_revision(path: str, revision: str, repo: Path) -> list[Document]:
    """The YAML documents under `path` as they were at git `revision` (no checkout needed)."""
    listed = _git(repo, "ls-tree", "-r", "--name-only", "--full-tree", revision, "--",
                  _repo_relative(path, repo))
    files = [name for name in listed.splitlines()
             if name.endswith(YAML_SUFFIXES)
             and not any(part.startswith(".") for part in PurePosixPath(name).parts)]
    documents: list[Document] = []
    problems: list[Problem] = []
    for name in sorted(files):
        text = _git(repo, "show", f"{revision}:{name}")
        try:
            documents.extend(parse_text(text, f"{revision}:{name}"))
        except RenderError as error:
            problems.extend(error.problems)
    if problems:
        raise RenderError(problems)
    return documents


def _repo_relative(path: str, repo: Path) -> str:
    absolute = (Path.cwd() / path).resolve()
    top = Path(_git(repo, "rev-parse", "--show-toplevel").strip()).resolve()
    try:
        return str(absolute.relative_to(top)) or "."
    except ValueError as error:
        raise RenderError([Problem(path, 0, "", "is not inside the git repository",
                                   f"run kaiwu diff from inside {top}")]) from error


def _git(repo: Path, *args: str) -> str:
    try:
        result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                                text=True, check=False)
    except FileNotFoundError as error:
        raise RenderError([Problem("git", 0, "", "git is not installed",
                                   "install git, or compare two directories")]) from error
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"
        raise RenderError([Problem(f"git {' '.join(args[:2])}", 0, "", detail,
                                   "check the revision name (e.g. origin/main) and the path")])
    return result.stdout


def documents_in(path: Path) -> list[Document]:
    return load_documents(find_files(path))


def manifests_of(clusters: Sequence[SourceCluster], settings: RenderSettings) -> list[Manifest]:
    return [manifest_for(obj, source.cluster.name) for source in clusters
            for obj in build_objects(source.cluster, settings)]


def transition_problems(old: Sequence[SourceCluster],
                        new: Sequence[SourceCluster]) -> list[Problem]:
    """Rule violations in changes of clusters that exist on both sides."""
    before = {(c.cluster.namespace, c.cluster.name): c for c in old}
    problems = []
    for after in new:
        previous = before.get((after.cluster.namespace, after.cluster.name))
        if previous is None:
            continue
        for violation in semantics.check_transition(previous.obj["spec"], after.obj["spec"]):
            problems.append(Problem(after.document.file,
                                    after.document.line_of(list(violation.path)),
                                    ".".join(str(part) for part in violation.path),
                                    violation.message, violation.fix))
    return problems


def compare(old_docs: Sequence[Document], new_docs: Sequence[Document],
            settings: RenderSettings) -> TreeDiff:
    """Render both sides and compare them object by object."""
    problems: list[Problem] = []
    sides = []
    for docs in (old_docs, new_docs):
        try:
            sides.append(read_clusters(docs))
        except RenderError as error:
            problems.extend(error.problems)
            sides.append([])
    if problems:
        raise RenderError(problems)
    old_clusters, new_clusters = sides
    problems = transition_problems(old_clusters, new_clusters)
    if problems:
        raise RenderError(problems)
    before = {m.key: m for m in manifests_of(old_clusters, settings)}
    after = {m.key: m for m in manifests_of(new_clusters, settings)}
    changes = []
    unchanged = 0
    for key in sorted(before.keys() | after.keys()):
        old_text = to_yaml(redact(before[key].body)) if key in before else ""
        new_text = to_yaml(redact(after[key].body)) if key in after else ""
        if old_text == new_text:
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
    return TreeDiff(tuple(changes), unchanged)


def format_text(result: TreeDiff) -> str:
    if result.empty:
        return f"No changes ({result.unchanged} objects unchanged).\n"
    lines = [f"{change.change:>8}  {change.key}" for change in result.changes]
    body = "".join(change.diff for change in result.changes)
    return "\n".join(lines) + f"\n{_summary(result)}\n\n" + body


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
    if result.empty:
        return f"**KaiwuDB manifests:** no changes ({result.unchanged} objects unchanged).\n"
    total = len(result.changes)
    text = "\n".join([f"### KaiwuDB manifests: {_summary(result)}", "",
                      "| change | object |", "| --- | --- |"]) + "\n"
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
