"""Hypothesis profiles for the fast tier: the gate's, a random one, and the fast one of mutation
runs.

GATE (the default, what `make test` and CI run): derandomized, no example database, so the same
examples are drawn on every machine and every run: a red gate is red again when replayed, and a
green one does not turn red by luck. RANDOM (`make test-random`, KAIWU_HYPOTHESIS_PROFILE=random):
Hypothesis's own random draws, to find new failing examples; Hypothesis prints the seed and the
falsifying example of a failure (`@reproduce_failure`) so it replays.

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
GATE = "gate"
RANDOM = "random"
MUTATION = "mutation"
MUTATION_EXAMPLES = 20

settings.register_profile(GATE, derandomize=True, database=None, print_blob=True)
settings.register_profile(RANDOM, print_blob=True)

settings.register_profile(MUTATION, max_examples=MUTATION_EXAMPLES, derandomize=True,
                          database=None, deadline=None,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate))


def load() -> str:
    """Load the profile PROFILE_ENV names (none: GATE); returns its name."""
    name = os.environ.get(PROFILE_ENV) or GATE
    settings.load_profile(name)
    return name


def examples(n: int) -> int:
    """A test's own example count, capped in mutation runs."""
    if os.environ.get(PROFILE_ENV) == MUTATION:
        return min(n, MUTATION_EXAMPLES)
    return n
