"""Read KaiwuCluster documents from files, keeping the line of every node for error messages.

Called by `renderer.render` (a directory or single files) and by `renderer.diff` (trees at two git
revisions). ruamel.yaml's round-trip loader records the line of every mapping key and sequence
item; `Document.line_of` turns a spec path into that line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from renderer.errors import Problem, RenderError

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Document:
    """One YAML document: its file (as the user named it), position and parsed content."""

    file: str
    index: int
    line: int
    content: Any

    def line_of(self, path: Sequence[str | int]) -> int:
        """The 1-based line of the deepest node of `path` that exists (the document's otherwise)."""
        node, line = self.content, self.line
        for key in path:
            if isinstance(node, CommentedMap) and key in node:
                line = node.lc.key(key)[0] + 1
                node = node[key]
            elif isinstance(node, CommentedSeq) and isinstance(key, int) and key < len(node):
                line = node.lc.item(key)[0] + 1
                node = node[key]
            else:
                break
        return line


def find_files(root: Path) -> list[Path]:
    """Every YAML file under `root` (or `root` itself), in a stable order; hidden dirs skipped."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise RenderError([Problem(str(root), 0, "", "no such file or directory",
                                   "pass a directory of KaiwuCluster files, e.g. clusters/")])
    return sorted(
        path for path in root.rglob("*")
        if path.suffix in YAML_SUFFIXES and path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )


def parse_text(text: str, file: str) -> list[Document]:
    """Parse every document of one file; empty documents are dropped."""
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        raw = list(yaml.load_all(text))
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else 0
        what = (error.problem or "invalid YAML").strip()
        raise RenderError([Problem(file, line, "", f"invalid YAML: {what}",
                                   "fix the YAML syntax at this line")]) from error
    except YAMLError as error:
        raise RenderError([Problem(file, 0, "", f"invalid YAML: {error}",
                                   "fix the YAML syntax")]) from error
    documents = []
    for index, content in enumerate(raw):
        if content is None:
            continue
        line = content.lc.line + 1 if isinstance(content, CommentedMap | CommentedSeq) else 1
        documents.append(Document(file=file, index=index, line=line, content=content))
    return documents


def load_documents(paths: Iterable[Path], display_root: Path | None = None) -> list[Document]:
    """Parse every file, collecting the problems of all of them before raising."""
    documents: list[Document] = []
    problems: list[Problem] = []
    for path in paths:
        shown = str(path.relative_to(display_root)) if display_root else str(path)
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except OSError as error:
            problems.append(Problem(shown, 0, "", f"cannot read file: {error}",
                                    "make it a readable UTF-8 text file"))
            continue
        except UnicodeDecodeError as error:
            line = data.count(b"\n", 0, error.start) + 1  # where an editor shows the bad byte
            problems.append(Problem(shown, line, "", f"cannot read file: {error}",
                                    "make it a readable UTF-8 text file"))
            continue
        try:
            documents.extend(parse_text(text, shown))
        except RenderError as error:
            problems.extend(error.problems)
    if problems:
        raise RenderError(problems)
    return documents


def to_plain(node: Any) -> Any:
    """A copy made of plain dicts, lists and scalars (what builders and jsonschema expect)."""
    if isinstance(node, dict):
        return {str(key): to_plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [to_plain(item) for item in node]
    if isinstance(node, str):
        return str(node)  # ruamel's ScalarString subclasses become plain str
    if isinstance(node, bool | int | float) or node is None:
        return _plain_scalar(node)
    return str(node)


def _plain_scalar(node: Any) -> Any:
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    return float(node)
