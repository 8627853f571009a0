"""Story: a newcomer reads a docstring or a page of docs/ that names `reconciler.kube.cache` or
`renderer.render.Builder`, and finds it there. Every dotted name of this project's packages in the
docs (README.md, docs/, bench/RESULTS.md excepted: it records history) and in the docstrings and
comments of its Python files must resolve to a module, or to an attribute of one; a name that
drifted (a module split or renamed) fails here, naming the file and the fix.

Code is left to the type checker: only docstrings and comments are read (a local variable
called `reconciler` in a test is not a module name).

Likewise every section a text sends the reader to (a page of docs/ or the README, then the
heading in double quotes; several headings in one parenthesis) must be a heading of that page,
or the start of one: a section renamed or moved fails here, naming where it was cited.
"""

from __future__ import annotations

import ast
import functools
import importlib
import io
import os
import re
import tokenize
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reconciler", "renderer", "bench", "tests")
NAME = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)")
SKIPPED_DIRS = {".venv", ".git", "build", "dist", "out", "node_modules", "__pycache__",
                ".testworld"}
HISTORY = {"bench/RESULTS.md"}  # what was measured then, under the names of then


def sources() -> list[Path]:
    found = []
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = sorted(d for d in subdirectories
                                   if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = Path(directory, name)
            if path.suffix in (".py", ".md") and \
                    str(path.relative_to(ROOT)) not in HISTORY:
                found.append(path)
    return found


def prose_of(path: Path) -> str:
    """A Markdown file's text; a Python file's docstrings and comments."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return text
    parts = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                parts.append(docstring)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            parts.append(token.string)
    return "\n".join(parts)


@functools.cache
def resolves(name: str) -> bool:
    """Whether `name` is a module, or an attribute (chain) of the longest module it starts
    with."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: ModuleType | object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[end:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def unresolved() -> dict[str, list[str]]:
    missing: dict[str, list[str]] = {}
    for path in sources():
        for match in NAME.finditer(prose_of(path)):
            name = match.group(1)
            if name.endswith((".py", ".md", ".yaml", ".yml", ".json", ".txt", ".toml")):
                continue  # a file, not a module
            if not resolves(name):
                missing.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return missing


def test_every_dotted_name_in_the_docs_and_docstrings_resolves() -> None:
    missing = unresolved()
    assert not missing, "names that do not resolve (rename them to where the code is now):\n" \
        + "\n".join(f"  {name}: {', '.join(sorted(set(files)))}"
                    for name, files in sorted(missing.items()))


@pytest.mark.parametrize("name", ["reconciler.kube.cache", "renderer.render.Builder.name",
                                  "tests.world.controlplane.ControlPlane"])
def test_names_that_exist_resolve(name: str) -> None:
    assert resolves(name)


@pytest.mark.parametrize("name", ["reconciler.kube.nothing", "renderer.render.render_live",
                                  "reconciler.kwbase"])
def test_names_that_do_not_exist_are_caught(name: str) -> None:
    assert not resolves(name)


# A page (in backticks or not), then the quoted headings that follow it directly, in a
# parenthesis or not.
# A heading may wrap onto the next line of a paragraph or a comment ("# " continues it).
SECTION_CITE = re.compile(r'`?(README\.md|docs/[\w.-]+\.md)`?,?\s*\(?((?:"[^"]{2,90}"'
                          r'(?:,\s*|\s*\)|(?=\W)))+)')
QUOTED = re.compile(r'"([^"]+)"')
# Besides the docs and the Python files' prose: files whose comments and messages send users
# to a section (the Makefile, the manifests), read whole, and the string literals of Python
# files (messages such as kaiwu install's).
CITING_FILES = ("Makefile", "crd", "deploy", "renderer/crd")


def citing_files() -> list[Path]:
    found = sources()
    for name in CITING_FILES:
        where = ROOT / name
        found += [where] if where.is_file() else sorted(
            p for p in where.rglob("*") if p.suffix in (".yaml", ".yml", ".lua"))
    return found


def cited_text(path: Path) -> str:
    """Where a file cites sections: a Markdown, YAML or Makefile's whole text; a Python
    file's docstrings, comments and string literals."""
    if path.suffix != ".py":
        return path.read_text(encoding="utf-8")
    text = path.read_text(encoding="utf-8")
    strings = [node.value for node in ast.walk(ast.parse(text))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return prose_of(path) + "\n" + "\n".join(strings)


@functools.cache
def headings(page: str) -> list[str]:
    """The page's headings as a reader sees them (no backticks or emphasis)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [re.sub(r"[`*]", "", heading).strip()
            for heading in re.findall(r"^#{1,6}\s+(.*)$", text, flags=re.MULTILINE)]


def unresolved_sections(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        for cite in SECTION_CITE.finditer(cited_text(path)):
            page = cite.group(1)
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            if not (ROOT / page).exists():
                problems.append(f"{where}: {page} does not exist")
                continue
            for wanted in QUOTED.findall(cite.group(2)):
                wanted = re.sub(r"\s+(#\s+)?", " ", wanted).strip()
                if not any(h.startswith(wanted) for h in headings(page)):
                    problems.append(f"{where}: {page} has no section "
                                    f"{wanted!r} (renamed or moved? cite the heading as it is)")
    return problems


def test_every_section_a_text_cites_is_a_heading_of_that_page() -> None:
    problems = unresolved_sections(citing_files())
    assert not problems, "\n".join(problems)


def test_a_cited_section_that_is_gone_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "cites.md"
    install, sharding = "docs/install.md", "docs/sharding.md"  # apart: this file's own check
    page.write_text(f'See (`{install}`, "Deploying it") and {sharding} '  # skips the example
                    f'("Sharding", "Scaling by hand"), and README.md, "The renderer in\n'
                    f'CI".\n')
    problems = unresolved_sections([page])
    assert [p.split(": ", 1)[1] for p in problems] == [
        "docs/sharding.md has no section 'Scaling by hand' (renamed or moved? cite the "
        "heading as it is)"]
