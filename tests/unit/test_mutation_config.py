"""The mutation command's configuration (pyproject.toml [tool.kaiwu-mutation], read by
bench/mutation.py) names modules and fast tests that exist, and each test file reaches its
module, so `make mutation` does not rot when files move. The run itself takes minutes and is not
part of the test suite (docs/mutation.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bench.mutation import (
    ROOT,
    Outcome,
    load_settings,
    mutant_prefix,
    mutated_functions,
    show,
)

SETTINGS = load_settings()


def test_every_configured_module_and_test_file_exists_in_the_fast_tier() -> None:
    assert SETTINGS.modules, "no module configured"
    for module, tests in SETTINGS.modules.items():
        assert (ROOT / module).is_file(), module
        assert module.startswith(("renderer/", "reconciler/")) and module.endswith(".py"), module
        assert tests, f"{module}: no test mapped"
        for test in tests:
            assert (ROOT / test).is_file(), f"{module}: {test} is missing"
            assert test.startswith("tests/unit/"), f"{test}: only the fast tier is used"


def test_each_module_is_imported_by_one_of_its_test_files() -> None:
    for module, tests in SETTINGS.modules.items():
        # A package's __init__.py is imported as the package.
        dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        package, _, name = dotted.rpartition(".")
        texts = [(ROOT / test).read_text() for test in tests]
        assert any(dotted in text or (f"from {package} import" in text and name in text)
                   for text in texts), f"no test file of {module} imports it"


def test_every_accepted_survivor_names_a_function_mutmut_mutates_and_says_why() -> None:
    """An accepted name is `<module prefix><function as mutmut names it>__mutmut_<n>`
    (bench.mutation.mutated_functions): a function that moved or was renamed leaves a name that
    matches no mutant, and its mutant would be counted as a survivor again (or another mutant
    of a new function of that name taken as equivalent). Read from the source, in milliseconds;
    whether mutant <n> is still the one the reason describes, only mutmut can tell:
    `python -m bench.mutation --accepted <module>` prints each diff beside its reason."""
    by_length = sorted(SETTINGS.modules, key=lambda module: -len(mutant_prefix(module)))
    functions: dict[str, set[str]] = {}
    wrong = []
    for name, why in SETTINGS.accepted.items():
        module = next((m for m in by_length if name.startswith(mutant_prefix(m))), None)
        if module is None:
            wrong.append(f"{name}: names no configured module (pyproject.toml "
                         "[tool.kaiwu-mutation.modules]): configure its module or drop it")
            continue
        function, marker, number = name.removeprefix(mutant_prefix(module)).partition(
            "__mutmut_")
        if not marker or not number.isdigit():
            wrong.append(f"{name}: not a mutant's name (<module>.x_<function>__mutmut_<n> or "
                         "<module>.xǁ<Class>ǁ<method>__mutmut_<n>)")
        elif function not in (functions.get(module) or functions.setdefault(
                module, mutated_functions(module))):
            wrong.append(f"{name}: {module} has no function mutmut calls {function}: find where "
                         "it went (git log -S'def <name>'), rename the entry and check its diff "
                         "with `python -m bench.mutation --accepted <module>`, or drop it")
        if len(why) <= 20:
            wrong.append(f"{name}: say why it is equivalent")
    assert not wrong, "\n".join(wrong)


def test_mutmut_names_a_modules_functions_and_methods_and_leaves_decorated_ones(
        tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import functools\n"
        "def plain(): pass\n"
        "async def waits(): pass\n"
        "@functools.cache\n"
        "def cached(): pass\n"
        "class Box:\n"
        "    def __init__(self): pass\n"
        "    def __new__(cls): pass\n"
        "    @staticmethod\n"
        "    def made(): pass\n"
        "    @property\n"
        "    def size(self): pass\n"
        "    def outer(self):\n"
        "        def inner(): pass\n"
        "    class Lid:\n"
        "        def open(self): pass\n")
    assert mutated_functions("m.py", tmp_path) == {
        "x_plain", "x_waits", "xǁBoxǁ__init__", "xǁBoxǁmade", "xǁBoxǁouter"}


def test_mutmut_is_pointed_at_the_source_trees() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert all((ROOT / path).is_dir() for path in config["source_paths"])
    assert SETTINGS.sample > 0 and 0 < SETTINGS.target <= 100


def test_names_rates_and_diffs_of_mutants() -> None:
    assert mutant_prefix("reconciler/kaiwudb/loss.py") == "reconciler.kaiwudb.loss."
    outcome = Outcome("m.py", 100, killed=["a"] * 9, survived=["b"], no_tests=[],
                      accepted=["c"], seconds=1.0)
    assert (outcome.tried, outcome.rate) == (10, 90.0)
    assert Outcome("m.py", 0, [], [], [], [], 0.0).rate == 100.0
    functions = {"x_f__mutmut_orig": ["def x_f():", "    a = 1", "    return a"],
                 "x_f__mutmut_3": ["def x_f():", "    a = 2", "    return a"]}
    assert show(functions, "pkg.mod.x_f__mutmut_3") == "        -    a = 1\n        +    a = 2"


def test_the_make_target_runs_the_script() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "mutation:" in makefile and "-m bench.mutation" in makefile
    assert Path(ROOT / "bench" / "mutation.py").is_file()


def test_mutation_runs_ask_for_a_fast_hypothesis_profile_that_exists() -> None:
    from hypothesis import settings

    from bench.mutation import HYPOTHESIS_ENV
    from tests.support import hypothesis_profiles

    assert HYPOTHESIS_ENV == {hypothesis_profiles.PROFILE_ENV: hypothesis_profiles.MUTATION}
    profile = settings.get_profile(hypothesis_profiles.MUTATION)
    assert profile.max_examples <= 20 and profile.derandomize and profile.database is None
