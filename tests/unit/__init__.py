"""The fast tier: tests that need nothing built and start no test world (`pytest tests/unit`).

Folders mirror the source: unit/renderer/ tests renderer/, unit/reconciler/<package>/ tests
reconciler/<package>/, leaf modules at unit/reconciler/. tests/unit/conftest.py refuses any test
here that asks for a test world fixture.
"""
