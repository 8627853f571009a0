"""Unit tests of renderer/: rendering, the CLI, quantities, semantics, diffs. No test world."""
