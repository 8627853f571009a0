"""No test module imports another test module (issue 28 item 4): what two test modules share lives
in tests/support/ (helpers) or tests/world/ (the test world), so a test module can be moved,
split or deleted without breaking another, and pytest collects each once. Checked by reading
the import statements (AST) of every Python file under tests/ and bench/: a test module is any
`test_*.py` or `conftest.py` under tests/.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def is_test_module(dotted: str) -> bool:
    """Whether a dotted module name is a test module of tests/ (or a name inside one)."""
    parts = dotted.split(".")
    return parts[0] == "tests" and any(
        part.startswith("test_") or part == "conftest" for part in parts[1:])


# The start of an import statement (at any indentation: a function may import too).
IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+\.*[\w.]*(?:[ \t]|\\\n)+import|import)[ \t(]", re.M)


def statements(text: str) -> list[tuple[int, ast.stmt]]:
    """(line, statement) of each import in `text`, parsed one by one (parsing whole files
    costs seconds): a statement runs to the end of its line, its parentheses or its
    backslashes. A line that only looks like one (in a docstring) does not parse and is left."""
    found = []
    for match in IMPORT.finditer(text):
        start = end = match.start()
        while True:
            end = text.find("\n", end + 1)
            end = len(text) if end < 0 else end
            source = text[start:end]
            if (source.count("(") <= source.count(")") and not source.endswith("\\")) \
                    or end == len(text):
                break
        try:
            tree = ast.parse(textwrap.dedent(source))
        except SyntaxError:
            continue
        found += [(text.count("\n", 0, start) + 1, node) for node in tree.body]
    return found


def imported(text: str, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every module the source `text` imports, relative imports
    resolved against `module` (the dotted name of the file itself)."""
    found: list[tuple[int, str]] = []
    package = module.rsplit(".", 1)[0]
    for line, node in statements(text):
        if isinstance(node, ast.Import):
            found += [(line, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            # `from tests.unit import test_cli` imports the module test_cli as well.
            found += [(line, f"{base}.{alias.name}") for alias in node.names]
    return found


def offences(files: list[Path], root: Path = ROOT) -> list[str]:
    """One line per import of a test module: file, line, module and the fix."""
    told = []
    for path in files:
        relative = path.relative_to(root)
        module = ".".join(relative.with_suffix("").parts)
        for line, name in imported(path.read_text(), module):
            if is_test_module(name):
                told.append(
                    f"{relative}:{line} imports from the test module {name.rsplit('.', 1)[0]}: "
                    "move what it takes into tests/support/ (or tests/world/) and import it "
                    "from there in both")
    return told


def test_no_test_module_imports_another_test_module() -> None:
    files = sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")])
    assert len(files) > 200, "the scan sees the test tree"
    told = offences(files)
    assert not told, "\n".join(told)


def test_the_check_names_the_file_the_line_and_the_fix(tmp_path: Path) -> None:
    """The scan itself: each form of import of a test module is caught, helpers are not."""
    cases = {
        "from tests.unit.reconciler.kube.test_informer import Informed": True,
        "import tests.world.selftest.test_kwdb": True,
        "from tests.unit.reconciler.kube import test_informer": True,
        "from .test_informer import pod": True,
        "from tests.conftest import world": True,
        "from tests.unit.reconciler.kube import (\n    test_informer,\n)": True,
        "def f() -> None:\n    from tests.unit.test_model import x": True,
        "from tests.unit \\\n    import test_model": True,
        "from tests.support.informing import Informed": False,
        '"""Docstring lines that read\nimport test_ as words are no import."""': False,
        "from tests.world.kwdb import KwdbWorld": False,
        "from reconciler.kube import informer": False,
    }
    for source, offends in cases.items():
        names = [name for _, name in imported(source, "tests.unit.reconciler.kube.test_cache")]
        assert any(map(is_test_module, names)) is offends, source
    offending = tmp_path / "tests" / "unit" / "test_cache.py"
    offending.parent.mkdir(parents=True)
    offending.write_text('"""A story."""\n\nfrom tests.unit.test_informer import pod\n')
    assert offences([offending], tmp_path) == [
        "tests/unit/test_cache.py:3 imports from the test module tests.unit.test_informer: "
        "move what it takes into tests/support/ (or tests/world/) and import it from there "
        "in both"]
