"""Helpers the tests import: no tests here. Importing them starts nothing.

render (write cluster files, run `kaiwu`, validate its output), specs (Hypothesis strategies for
specs), waiting (`eventually`), runtime (the reconciler runtime run in-process), harness (a real
Controller driven as the runtime drives it: `Reconciler`, the `reconciler_factory` fixture),
drift and lifecycle (the drift and cluster stories' clusters and user actions), pods (a plain
KaiwuDB StatefulSet and `kubectl exec`, the `cluster` fixture), fake_api (the fast tier's API
server) and informing (a watch cache run over it), kwdb_operator (the simulated KaiwuDB driven
without Kubernetes), webhook_client (an AdmissionReview POSTed over TLS). Fixtures defined here are
registered in a conftest.py (tests/conftest.py, tests/world_stories/conftest.py), never imported
into a test module.
"""
