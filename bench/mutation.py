"""Mutation testing over chosen modules against the fast tier: `make mutation` runs it.

For each module named in pyproject.toml's `[tool.kaiwu-mutation.modules]` (module path -> the
fast test files that guard it) this script copies the work tree into a scratch directory, points
mutmut (https://mutmut.readthedocs.io, 3.x; its base settings are `[tool.mutmut]`) at that one
module and those tests, lets it generate every mutant, draws a seeded sample of them
(`sample` per module, `seed`), runs the sample and prints the kill rate per module and each
surviving mutant as a diff. Mutants listed in `[tool.kaiwu-mutation.accepted]` (equivalent
mutants, each with the reason) are reported apart and not counted as survivors. The latest
figures and the notes on accepted survivors live in docs/mutation.md.

    python -m bench.mutation                      # every configured module
    python -m bench.mutation reconciler/kaiwudb/  # modules under a prefix
    python -m bench.mutation --sample 0 ...       # every mutant, no sampling
    python -m bench.mutation --accepted ...       # each accepted mutant's diff and reason

Exit status 1 when a module is below `target` (percent killed). Not part of `make test`: a full
run takes minutes. tests/unit/test_mutation_config.py checks the configured paths exist.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = Path(sys.executable).parent / "mutmut"
KILLED_CODES = {1, 3, 36, 24, -24, 152, 255, -9, -11}  # a failing test, or a timeout / crash
NO_TESTS_CODES = {5, 33}
# The fast Hypothesis profile of tests/support/hypothesis_profiles.py: few derandomized examples,
# no shrinking (every mutant pays for every property test it reaches).
HYPOTHESIS_ENV = {"KAIWU_HYPOTHESIS_PROFILE": "mutation"}


@dataclass(frozen=True)
class Settings:
    """`[tool.kaiwu-mutation]`: which modules, their tests, sampling and the target."""

    modules: dict[str, list[str]]
    accepted: dict[str, str]
    sample: int
    seed: int
    target: float


@dataclass(frozen=True)
class Outcome:
    """One module's run: sampled mutants by verdict and how long it took."""

    module: str
    total_mutants: int
    killed: list[str]
    survived: list[str]
    no_tests: list[str]
    accepted: list[str]
    seconds: float

    @property
    def tried(self) -> int:
        return len(self.killed) + len(self.survived) + len(self.no_tests)

    @property
    def rate(self) -> float:
        """Percent of sampled mutants killed; an accepted (equivalent) mutant is not counted."""
        return 100.0 * len(self.killed) / self.tried if self.tried else 100.0


def load_settings(pyproject: Path = ROOT / "pyproject.toml") -> Settings:
    data: dict[str, Any] = tomllib.loads(pyproject.read_text())
    section = data["tool"]["kaiwu-mutation"]
    return Settings(
        modules={str(key): [str(t) for t in value] for key, value in section["modules"].items()},
        accepted={str(key): str(value) for key, value in section.get("accepted", {}).items()},
        sample=int(section.get("sample", 60)),
        seed=int(section.get("seed", 18)),
        target=float(section.get("target", 90)),
    )


def mutant_prefix(module: str) -> str:
    """The prefix of mutmut's names for a module's mutants: reconciler/kaiwudb/loss.py ->
    reconciler.kaiwudb.loss."""
    return module.removesuffix(".py").replace("/", ".") + "."


def mutated_functions(module: str, root: Path = ROOT) -> set[str]:
    """The names mutmut 3 gives the functions of `module` it mutates, read from the source
    (mutmut/mutation/trampoline_templates.py mangle_function_name, file_mutation.py): `x_<name>`
    for a function of the module, `xǁ<Class>ǁ<name>` for a method of one of its classes;
    functions nested in either are mutated as part of them; decorated ones (but for
    @staticmethod and @classmethod) and __getattribute__, __setattr__, __new__ are not mutated.
    A mutant's name is the module's `mutant_prefix`, one of these, `__mutmut_` and a number."""
    tree = ast.parse((root / module).read_text())

    def mutated(node: ast.stmt) -> str | None:
        """The function's name if mutmut mutates it."""
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name in (
                "__getattribute__", "__setattr__", "__new__"):
            return None
        decorators = node.decorator_list
        if decorators and not (len(decorators) == 1 and isinstance(decorators[0], ast.Name)
                               and decorators[0].id in ("staticmethod", "classmethod")):
            return None
        return node.name

    names = {f"x_{name}" for name in map(mutated, tree.body) if name}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        names |= {f"xǁ{cls.name}ǁ{name}" for name in map(mutated, cls.body) if name}
    return names


def _copy_tree(scratch: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
        capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        else:
            shutil.copy2(source, target)


def _write_config(scratch: Path, module: str, tests: list[str]) -> None:
    """The scratch copy's pyproject: mutmut's base settings plus this module and its tests."""
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r"(?ms)^\[tool\.kaiwu-mutation.*?(?=^\[(?!tool\.kaiwu-mutation))", "", text)
    text = text.replace(
        "[tool.mutmut]\n",
        "[tool.mutmut]\n"
        f"only_mutate = {json.dumps([module])}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n", 1)
    (scratch / "pyproject.toml").write_text(text)


def _mutmut(scratch: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MUTMUT), *args], cwd=scratch, capture_output=True, text=True,
                          check=False, env={**os.environ, **HYPOTHESIS_ENV})


def _exit_codes(scratch: Path, module: str) -> dict[str, int | None]:
    meta = scratch / "mutants" / (module + ".meta")
    if not meta.exists():
        return {}
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    return codes


def generate(scratch: Path, module: str, tests: list[str]) -> list[str]:
    """Every mutant of `module`, by name, generated in the scratch copy; no mutant runs yet."""
    shutil.rmtree(scratch / "mutants", ignore_errors=True)
    _write_config(scratch, module, tests)
    # Generate the mutants and record which test reaches which function; the filter matches
    # nothing on purpose.
    _mutmut(scratch, "run", "--max-children", "2", mutant_prefix(module) + "__none__")
    names = sorted(_exit_codes(scratch, module))
    if not names:
        raise SystemExit(f"{module}: mutmut generated no mutants (is it under source_paths?)")
    return names


def run_module(scratch: Path, module: str, tests: list[str], settings: Settings,
               sample: int) -> Outcome:
    started = time.monotonic()
    names = generate(scratch, module, tests)
    accepted = [name for name in names if name in settings.accepted]
    candidates = [name for name in names if name not in settings.accepted]
    chosen = candidates
    if sample and len(candidates) > sample:
        chosen = sorted(random.Random(f"{settings.seed}:{module}").sample(candidates, sample))
    result = _mutmut(scratch, "run", "--max-children", "2", *chosen)
    codes = _exit_codes(scratch, module)
    killed = [n for n in chosen if codes.get(n) in KILLED_CODES]
    no_tests = [n for n in chosen if codes.get(n) in NO_TESTS_CODES]
    survived = [n for n in chosen if n not in killed and n not in no_tests]
    if survived and all(codes.get(n) is None for n in survived):
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        raise SystemExit(f"{module}: mutmut ran no mutant (see its output above)")
    return Outcome(module, len(names), killed, survived, no_tests, accepted,
                   time.monotonic() - started)


def functions_of(scratch: Path, module: str) -> dict[str, list[str]]:
    """Every function in mutmut's copy of `module` (originals and mutants), name -> body lines."""
    source = (scratch / "mutants" / module).read_text()
    lines = source.splitlines()
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            # The signature too (a default can be mutated), with the name made neutral.
            body = lines[node.lineno - 1:node.end_lineno]
            body[0] = body[0].replace(node.name, re.sub(r"__mutmut_\w+$", "", node.name), 1)
            found[node.name] = body
    return found


def show(functions: dict[str, list[str]], name: str) -> str:
    """The mutant as the lines it changes (`-` original, `+` mutant)."""
    short = name.rsplit(".", 1)[-1]
    original = functions.get(re.sub(r"__mutmut_\d+$", "__mutmut_orig", short), [])
    mutant = functions.get(short, [])
    changed = [line for line in difflib.unified_diff(original, mutant, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return "\n".join("        " + line.rstrip() for line in changed)


def check_accepted(scratch: Path, module: str, tests: list[str], settings: Settings) -> int:
    """Print each accepted mutant of `module` as its diff beside the reason it was accepted, so
    a reader can see the reason still fits (mutmut numbers mutants per function: an edit to a
    function renumbers its mutants); the count of accepted names mutmut no longer makes."""
    prefix = mutant_prefix(module)
    accepted = {name: why for name, why in settings.accepted.items() if name.startswith(prefix)}
    if not accepted:
        return 0
    names = set(generate(scratch, module, tests))
    functions = functions_of(scratch, module)
    gone = 0
    for name, why in sorted(accepted.items()):
        if name not in names:
            gone += 1
            print(f"    GONE: {name} (mutmut makes no such mutant now)\n        reason: {why}")
            continue
        print(f"    {name}\n        reason: {why}\n{show(functions, name)}", flush=True)
    return gone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="*", help="only modules whose path starts with these")
    parser.add_argument("--sample", type=int, help="mutants per module (0: all)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument("--accepted", action="store_true",
                        help="run nothing: print each accepted mutant's diff beside its reason")
    args = parser.parse_args(argv)
    settings = load_settings()
    sample = settings.sample if args.sample is None else args.sample
    modules = {module: tests for module, tests in settings.modules.items()
               if not args.prefixes or module.startswith(tuple(args.prefixes))}
    if not MUTMUT.exists():
        raise SystemExit(f"{MUTMUT} missing: pip install -e '.[dev]' installs mutmut")
    scratch = Path(tempfile.mkdtemp(prefix="kaiwu-mutation-"))
    outcomes: list[Outcome] = []
    failed: list[str] = []
    try:
        _copy_tree(scratch)
        if args.accepted:
            gone = 0
            for module, tests in modules.items():
                print(module, flush=True)
                gone += check_accepted(scratch, module, tests, settings)
            print(f"\n{gone} accepted names match no mutant")
            return 1 if gone else 0
        print(f"mutation testing: {len(modules)} modules, sample {sample or 'all'} per module, "
              f"seed {settings.seed}, scratch {scratch}")
        for module, tests in modules.items():
            try:
                outcome = run_module(scratch, module, tests, settings, sample)
            except SystemExit as error:  # this module could not run: say so, go on
                print(f"  FAILED {module}: {error}", flush=True)
                failed.append(module)
                continue
            outcomes.append(outcome)
            print(f"{outcome.rate:5.1f}%  {module}: {len(outcome.killed)}/{outcome.tried} killed "
                  f"of {outcome.total_mutants} mutants ({len(outcome.accepted)} accepted as "
                  f"equivalent) in {outcome.seconds:.0f} s", flush=True)
            functions = functions_of(scratch, module)
            for name in outcome.survived + outcome.no_tests:
                why = "no test reaches it" if name in outcome.no_tests else "survived"
                print(f"    {why}: {name}\n{show(functions, name)}", flush=True)
    finally:
        if args.keep:
            print(f"scratch copy kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    killed = sum(len(o.killed) for o in outcomes)
    tried = sum(o.tried for o in outcomes)
    below = [o.module for o in outcomes if o.rate < settings.target] + failed
    print(f"\ntotal: {killed}/{tried} killed ({100.0 * killed / max(tried, 1):.1f}%); "
          f"{len(below)} modules below {settings.target:.0f}%: {', '.join(below) or 'none'}")
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
