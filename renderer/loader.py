"""Read KaiwuCluster documents from files, keeping the line of every node for error messages.

Called by `renderer.render` (a directory or single files), by `renderer.diff` (trees at two git
revisions) and by the reconciler's directory source. The text is parsed by libyaml (PyYAML's C
parser) into a stream of events, and this module builds plain dicts, lists and scalars from them
with an explicit stack: no recursion a spec could drive past the interpreter's limit, and every
limit of `renderer.settings.InputLimits` (file size, documents, nesting depth, aliases, nodes
and bytes with aliases expanded) checked as each event arrives, so a hostile file is refused
before it costs memory or time. Each refusal is one line naming the file, the line and the limit.

Scalars are read as YAML 1.2 (core schema), as ruamel.yaml read them before: `yes`, `on`, `no`
are strings, `true`/`false` booleans, `~`/`null` null; ints in decimal, 0o, 0x, 0b; merge keys
(`<<: *base`) are honoured; timestamps stay strings as written. The line of every mapping key and
sequence item is kept beside the content; `Document.line_of` turns a spec path into that line.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from renderer.errors import Problem, RenderError
from renderer.settings import INPUT_LIMITS, InputLimits

try:
    from yaml import CSafeLoader as _EventSource
except ImportError:  # PyYAML built without libyaml (its wheels include it): same events, slower
    from yaml import SafeLoader as _EventSource  # type: ignore[assignment]

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Document:
    """One YAML document: its file (as the user named it), first line and parsed content (plain
    dicts, lists and scalars); `lines` maps id() of each mapping to {key: line} and of each
    sequence to [line of each item] (1-based)."""

    file: str
    line: int
    content: Any
    lines: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)

    def line_of(self, path: Sequence[str | int]) -> int:
        """The 1-based line of the deepest node of `path` that exists (the document's otherwise)."""
        node, line = self.content, self.line
        for key in path:
            where = self.lines.get(id(node))
            found = where is not None and (
                (isinstance(node, dict) and key in node and key in where)
                or (isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)))
            if not found:
                break
            assert where is not None
            line = where[key]
            node = node[key]
        return line


def find_files(root: Path) -> list[Path]:
    """Every YAML file under `root` (or `root` itself), in a stable order; hidden dirs skipped.

    A directory that cannot be listed or entered is a problem naming it, not a traceback: a
    cluster file skipped silently would be a cluster deleted by the next sync."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise RenderError([Problem(str(root), 0, "", "no such file or directory",
                                   "pass a directory of KaiwuCluster files, e.g. clusters/")])
    problems: list[Problem] = []

    def unreadable(error: OSError) -> None:
        problems.append(Problem(str(error.filename), 0, "",
                                f"cannot read directory: {error.strerror}",
                                "make it readable and traversable (chmod u+rx), or move it "
                                "out of the source directory"))

    found = []
    for directory, subdirectories, names in os.walk(root, onerror=unreadable):
        subdirectories[:] = sorted(name for name in subdirectories if not name.startswith("."))
        for name in names:
            path = Path(directory, name)
            if name.startswith(".") or path.suffix not in YAML_SUFFIXES:
                continue
            try:
                if stat.S_ISREG(path.stat().st_mode):
                    found.append(path)
            except FileNotFoundError:
                continue  # removed while listed, or a dangling link: nothing to read
            except OSError as error:
                unreadable(OSError(error.errno, error.strerror, directory))
    if problems:
        raise RenderError(problems)
    return sorted(found)


_NULL = frozenset({"~", "null", "Null", "NULL", ""})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_FLOAT = re.compile(r"""[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?""", re.X)
_SPECIAL_FLOAT = {".inf": math.inf, ".Inf": math.inf, ".INF": math.inf, "+.inf": math.inf,
                  "+.Inf": math.inf, "+.INF": math.inf, "-.inf": -math.inf,
                  "-.Inf": -math.inf, "-.INF": -math.inf, ".nan": math.nan, ".NaN": math.nan,
                  ".NAN": math.nan}
_INT = re.compile(r"[-+]?(?:0b[01_]+|0o?[0-7_]+|[0-9_]+|0x[0-9a-fA-F_]+)")
_STR_TAG = "tag:yaml.org,2002:str"
_CORE_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("int", "float", "bool", "null")}
_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq",
                    "tag:yaml.org,2002:omap"}


def _plain(text: str) -> Any:
    """A plain (unquoted, untagged) scalar as YAML 1.2's core schema reads it."""
    if not text or text[0] in "-+.0123456789":
        if text in _NULL:
            return None
        if text in _SPECIAL_FLOAT:
            return _SPECIAL_FLOAT[text]
        if _FLOAT.fullmatch(text):
            try:
                return float(text.replace("_", ""))
            except ValueError:  # `._`: a float by the pattern, no digits in it
                return text
        if _INT.fullmatch(text):
            return _integer(text)
        return text
    if text in _NULL:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return text


def _integer(text: str) -> Any:
    sign = -1 if text[0] == "-" else 1
    body = text.lstrip("+-").replace("_", "")
    for prefix, base in (("0b", 2), ("0x", 16), ("0o", 8)):
        if body.startswith(prefix):
            return sign * int(body[2:], base) if body[2:] else text
    return sign * int(body) if body else text


def _tagged(tag: str, text: str) -> Any:
    """A scalar with an explicit core tag (`!!int "3"`); None when the text does not fit it."""
    value = _plain(text)
    expected = {"tag:yaml.org,2002:int": int, "tag:yaml.org,2002:float": float,
                "tag:yaml.org,2002:bool": bool, "tag:yaml.org,2002:null": type(None)}[tag]
    if expected is float and type(value) is int:
        return float(value)
    return value if type(value) is expected else _NOT_FITTING


_NOT_FITTING = object()


class _Refused(Exception):
    """A limit or rule broken while reading: (line, message, fix)."""

    def __init__(self, line: int, message: str, fix: str) -> None:
        super().__init__(message)
        self.line, self.message, self.fix = line, message, fix


class _Container:
    """A mapping or sequence being read: its value, the lines of its children, and for a
    mapping the key waiting for its value and the merge sources (`<<`) met so far."""

    __slots__ = ("anchor", "key", "key_line", "line", "lines", "merges", "start", "start_bytes",
                 "value")

    def __init__(self, value: Any, lines: Any, anchor: str | None, start: int,
                 line: int, start_bytes: int = 0) -> None:
        self.value, self.lines, self.anchor, self.start = value, lines, anchor, start
        self.line, self.start_bytes = line, start_bytes
        self.key: Any = _NO_KEY
        self.key_line = 0
        self.merges: list[Any] = []


_NO_KEY = object()
_MERGE = object()


def _limit(line: int, what: str, name: str, limits: InputLimits) -> _Refused:
    return _Refused(line, f"{what}, the limit of renderer.settings.InputLimits.{name}",
                    "a KaiwuCluster spec needs nothing near this; split the file or remove what "
                    "is repeated")


ParseCache = dict[str, list["Document"]]
"""Documents already read, by file text: `kaiwu diff` reads the files the two sides share once
(their documents then share content objects, which nobody modifies)."""


def parse_text(text: str, file: str, limits: InputLimits = INPUT_LIMITS,
               cache: ParseCache | None = None) -> list[Document]:
    """Parse every document of one file; empty documents are dropped. Raises RenderError (one
    problem) for invalid YAML or a broken limit."""
    if len(text) > limits.max_file_bytes:
        raise RenderError([too_large(file, limits)])
    if cache is not None and text in cache:
        return [dataclasses.replace(document, file=file) for document in cache[text]]
    try:
        documents = _read(text, file, limits)
        if cache is not None:
            cache[text] = documents
        return documents
    except _Refused as refused:
        raise RenderError([Problem(file, refused.line, "", refused.message, refused.fix)]) \
            from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else 0
        what = (error.problem or "invalid YAML").strip()
        fix = "fix the YAML syntax at this line"
        if "invalid Unicode character escape code" in what:
            # libyaml refuses a \ud800-\udfff escape: a lone UTF-16 surrogate is not text
            # (Kubernetes would refuse it too).
            what += " (a \\uD800-\\uDFFF escape is a lone UTF-16 surrogate, not text)"
            fix = "write the character itself, or a \\U00XXXXXX escape for it"
        raise RenderError([Problem(file, line, "", f"invalid YAML: {what}", fix)]) from None
    except yaml.reader.ReaderError as error:
        # A character YAML allows nowhere (a control character): the reader stops at its first
        # occurrence, and says where as an offset (libyaml's counts UTF-8 bytes), so the line is
        # found from the character.
        line = text.count("\n", 0, text.find(chr(error.character))) + 1
        raise RenderError([Problem(
            file, line, "", f"invalid YAML: character U+{error.character:04X} is not allowed",
            "remove it, or write it as an escape such as \\x07 in a double-quoted string")]) \
            from None


def too_large(file: str, limits: InputLimits = INPUT_LIMITS) -> Problem:
    """The problem of a file over the size limit (read no further: renderer.diff refuses a
    revision's file by the size git lists, before reading it)."""
    return Problem(file, 0, "", f"file is larger than {limits.max_file_bytes} bytes, the limit "
                   "of renderer.settings.InputLimits.max_file_bytes",
                   "a KaiwuCluster spec is a few KB; split the file, keep large data out of it")


def _read(text: str, file: str, limits: InputLimits) -> list[Document]:
    """Build the documents from libyaml's events, one at a time, with an explicit stack."""
    source = _EventSource(text)
    documents: list[Document] = []
    # name -> (value, expanded node count, expanded bytes)
    anchors: dict[str, tuple[Any, int, int]] = {}
    open_anchors: set[str] = set()
    stack: list[_Container] = []
    lines: dict[int, Any] = {}
    nodes = aliases = count = 0
    expanded = 0  # bytes of content with every alias expanded: each node 1, a scalar its text
    root: Any = None
    root_line = 1
    try:
        while True:
            event: Any = source.get_event()
            kind = type(event)
            line = event.start_mark.line + 1
            if kind is yaml.ScalarEvent or kind is yaml.AliasEvent \
                    or kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                if not stack:
                    root_line = line
                if kind is yaml.AliasEvent:
                    aliases += 1
                    if aliases > limits.max_aliases:
                        raise _limit(line, f"more than {limits.max_aliases} aliases",
                                     "max_aliases", limits)
                    name = event.anchor
                    if name in open_anchors:
                        raise _Refused(line, f"invalid YAML: alias *{name} refers to a node "
                                       "that contains it", "remove the recursive alias")
                    if name not in anchors:
                        raise _Refused(line, f"invalid YAML: found undefined alias *{name}",
                                       "define the anchor (&name) before using it")
                    value, size, weight = anchors[name]
                    nodes += size
                    expanded += weight
                elif kind is yaml.ScalarEvent:
                    nodes += 1
                    tag, text_value = event.tag, event.value
                    expanded += 1 + len(text_value)
                    if event.implicit[0]:
                        value = _plain(text_value)
                    elif tag is None or tag == "!" or tag == _STR_TAG:
                        value = text_value
                    elif tag in _CORE_TAGS:
                        value = _tagged(tag, text_value)
                        if value is _NOT_FITTING:
                            raise _Refused(line, f"invalid YAML: {text_value!r} is not a "
                                           f"{tag.rsplit(':', 1)[1]}", "fix the value or its tag")
                    else:
                        raise _Refused(line, f"invalid YAML: unsupported tag {tag}",
                                       "remove the tag; KaiwuCluster specs use plain values")
                    if event.anchor is not None:
                        anchors[event.anchor] = (value, 1, 1 + len(text_value))
                else:
                    nodes += 1
                    expanded += 1
                    if len(stack) >= limits.max_depth:
                        raise _limit(line, f"nesting deeper than {limits.max_depth} levels",
                                     "max_depth", limits)
                    if event.tag not in _COLLECTION_TAGS:
                        raise _Refused(line, f"invalid YAML: unsupported tag {event.tag}",
                                       "remove the tag; KaiwuCluster specs use plain values")
                    mapping = kind is yaml.MappingStartEvent
                    container = _Container({} if mapping else [], {} if mapping else [],
                                           event.anchor, nodes, line, expanded)
                    lines[id(container.value)] = container.lines
                    if event.anchor is not None:
                        open_anchors.add(event.anchor)
                    stack.append(container)
                    if nodes > limits.max_nodes:
                        raise _limit(line, f"more than {limits.max_nodes} nodes with aliases "
                                     "expanded", "max_nodes", limits)
                    continue
                if nodes > limits.max_nodes:
                    raise _limit(line, f"more than {limits.max_nodes} nodes with aliases "
                                 "expanded", "max_nodes", limits)
                if expanded > limits.max_expanded_bytes:
                    raise _limit(line, f"more than {limits.max_expanded_bytes} bytes of content "
                                 "with aliases expanded", "max_expanded_bytes", limits)
                _add(stack, value, line, kind is yaml.ScalarEvent and event.implicit[0]
                     and event.value == "<<")
                if not stack:
                    root = value
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                container = stack.pop()
                if container.merges:
                    _merge(container, lines)
                if container.anchor is not None:
                    open_anchors.discard(container.anchor)
                    anchors[container.anchor] = (container.value, nodes - container.start + 1,
                                                 expanded - container.start_bytes + 1)
                if stack:
                    _add(stack, container.value, container.line, False)
                else:
                    root = container.value
            elif kind is yaml.DocumentStartEvent:
                count += 1
                if count > limits.max_documents:
                    raise _limit(line, f"more than {limits.max_documents} documents",
                                 "max_documents", limits)
                root, root_line = None, line
                anchors.clear()
            elif kind is yaml.DocumentEndEvent:
                if root is not None:
                    documents.append(Document(file, root_line, root, lines))
                lines = {}
            elif kind is yaml.StreamEndEvent:
                return documents
    finally:
        source.dispose()


def _add(stack: list[_Container], value: Any, line: int, merge_key: bool) -> None:
    """Put a finished node into the container being read (as a key, a value or an item)."""
    if not stack:
        return
    top = stack[-1]
    if isinstance(top.value, list):
        top.value.append(value)
        top.lines.append(line)
        return
    if top.key is _NO_KEY:
        if merge_key:
            top.key, top.key_line = _MERGE, line
            return
        if isinstance(value, dict | list):
            raise _Refused(line, "invalid YAML: a mapping key must be a "
                           "scalar", "use a plain name as key")
        key = value if isinstance(value, str) else str(value)  # as the earlier reader did
        if key in top.value:
            raise _Refused(line, f"invalid YAML: found duplicate key {key!r}",
                           "remove one of the two")
        top.key, top.key_line = key, line
        return
    if top.key is _MERGE:
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise _Refused(top.key_line, "invalid YAML: a merge key (<<) needs a mapping or a "
                           "list of mappings", "merge an anchored mapping: <<: *name")
        top.merges.extend(sources)
    else:
        top.value[top.key] = value
        top.lines[top.key] = top.key_line
    top.key = _NO_KEY


def _merge(container: _Container, lines: dict[int, Any]) -> None:
    """`<<` merges: keys written in the mapping win, then earlier sources over later ones."""
    mapping, where = container.value, container.lines
    for source in container.merges:
        source_lines = lines.get(id(source), {})
        for key, value in source.items():
            if key not in mapping:
                mapping[key] = value
                where[key] = source_lines.get(key, container.key_line)


STDIN = "-"
"""The source name that means standard input (`kaiwu validate -`); shown as <stdin>."""


def _read_limited(stream: BinaryIO, shown: str, size: int | None = None) -> str:
    """A stream's text, at most the input limit (even if it grows while read); RenderError
    (one problem) when it is larger or not UTF-8. `size`: what stat said the file holds."""
    limit = INPUT_LIMITS.max_file_bytes
    # A read of limit + 1 bytes allocates them (4 MiB) for every file, most of the cost of
    # reading a small one: the stated size first, the rest only if the file grew meanwhile.
    data = stream.read(size + 1) if size is not None and size < limit else b""
    if size is None or len(data) > size:
        data += stream.read(limit + 1 - len(data))
    if len(data) > limit:
        raise RenderError([too_large(shown)])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1  # where an editor shows the bad byte
        raise RenderError([Problem(shown, line, "", f"cannot read file: {error}",
                                   "make it a readable UTF-8 text file")]) from None


def load_stdin(stream: BinaryIO | None = None) -> list[Document]:
    """Every document of standard input (or `stream`), as `load_documents` reads a file."""
    text = _read_limited(stream if stream is not None else sys.stdin.buffer, "<stdin>")
    return parse_text(text, "<stdin>")


def load_documents(paths: Iterable[Path], display_root: Path | None = None,
                   cache: ParseCache | None = None) -> list[Document]:
    """Parse every file, collecting the problems of all of them before raising."""
    documents: list[Document] = []
    problems: list[Problem] = []
    for path in paths:
        shown = str(path.relative_to(display_root)) if display_root else str(path)
        try:
            size = path.stat().st_size
            if size > INPUT_LIMITS.max_file_bytes:
                problems.append(too_large(shown))
                continue
            with path.open("rb") as stream:
                text = _read_limited(stream, shown, size)
            documents.extend(parse_text(text, shown, cache=cache))
        except OSError as error:
            problems.append(Problem(shown, 0, "", f"cannot read file: {error}",
                                    "make it a readable UTF-8 text file"))
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
        return str(node)  # str subclasses (e.g. from other YAML readers) become plain str
    if isinstance(node, bool | int | float) or node is None:
        return _plain_scalar(node)
    return str(node)


def _plain_scalar(node: Any) -> Any:
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    return float(node)
