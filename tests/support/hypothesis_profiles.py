"""Hypothesis profiles for the fast tier: the normal one, and the fast one of mutation runs.

`make mutation` (bench/mutation.py) runs a module's fast tests once per mutant, so every
property test's examples are paid for hundreds of times; the drift normaliser's mutants each
reach most of tests/unit/reconciler/drift/test_compare.py. bench/mutation.py therefore sets
PROFILE_ENV to MUTATION, and tests/unit/conftest.py loads the profile it names: a few
derandomized examples (every mutant meets the same ones, so its verdict is reproducible), no
example database and no shrinking (a mutant only needs to fail, not to fail minimally).

A test that sets its own `max_examples` writes `examples(n)`: n normally, at most the mutation
profile's count in a mutation run (an explicit setting would otherwise win over the profile).
"""

from __future__ import annotations

import os

from hypothesis import Phase, settings

PROFILE_ENV = "KAIWU_HYPOTHESIS_PROFILE"
MUTATION = "mutation"
MUTATION_EXAMPLES = 20

settings.register_profile(MUTATION, max_examples=MUTATION_EXAMPLES, derandomize=True,
                          database=None, deadline=None,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate))


def load() -> str:
    """Load the profile PROFILE_ENV names (none: Hypothesis's default); returns its name."""
    name = os.environ.get(PROFILE_ENV, "default")
    settings.load_profile(name)
    return name


def examples(n: int) -> int:
    """A test's own example count, capped in mutation runs."""
    if os.environ.get(PROFILE_ENV) == MUTATION:
        return min(n, MUTATION_EXAMPLES)
    return n
