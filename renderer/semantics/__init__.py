"""Rules a schema cannot express (Kubernetes 1.20 has no CEL): names, modes, sizes, flags.

Called by `renderer.render` after schema validation, on the object with defaults applied, and by
the reconciler before it acts on a live object. `check_change` holds the rules about a change
from one spec to the next (`check_transition`: start mode is immutable, volumes never shrink,
single-replica never scales in; `check_version_change`: no downgrade, no major jump), used by
`kaiwu diff`, by the reconciler's admission webhook and by the reconciler itself, which keeps
the `transition_facts` of the last spec it applied to judge the next one
(reconciler.controller.admission).

This package's entry point is `check` (and what callers use, named below); each rule lives with
its concern: renderer.semantics.names (names, labels, annotations, text),
renderer.semantics.flags (kwbase's flags and environment), renderer.semantics.resources (memory,
resources, storage), renderer.semantics.cluster (mode, budget, scheduling, durations, security,
exposure), renderer.semantics.tls (certificates and client users) and renderer.semantics.change
(from one spec to the next), each Violation made with renderer.semantics.violation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from renderer.semantics.change import (
    FACT_KEYS,
    check_change,
    check_transition,
    check_version_change,
    transition_facts,
    transition_notes,
    version_tuple,
)
from renderer.semantics.cluster import (
    check_disruption_budget,
    check_durations,
    check_exposure,
    check_mode,
    check_pod_security,
    check_scheduling,
)
from renderer.semantics.flags import check_args, check_env
from renderer.semantics.names import (
    check_allowed_namespaces,
    check_metadata,
    check_object_names,
    check_spec_metadata,
    check_text,
)
from renderer.semantics.resources import check_memory, check_resources
from renderer.semantics.tls import check_tls
from renderer.semantics.violation import Violation

__all__ = ["FACT_KEYS", "Violation", "check", "check_change", "check_metadata", "check_text",
           "check_transition", "check_version_change", "transition_facts", "transition_notes",
           "version_tuple"]


def check(obj: dict[str, Any]) -> list[Violation]:
    """Every semantic problem of one KaiwuCluster (schema-valid, defaults applied)."""
    return (check_metadata(obj.get("metadata", {})) + list(_check_spec(obj["spec"]))
            + check_text(obj.get("spec", {}), ("spec",)))


def _check_spec(spec: dict[str, Any]) -> Iterator[Violation]:
    """The spec's rules, in the order their problems are reported."""
    yield from check_mode(spec)
    yield from check_memory(spec)
    yield from check_resources(spec)
    yield from check_args(spec.get("extraArgs", []))
    yield from check_env(spec.get("extraEnv", []))
    yield from check_spec_metadata(spec)
    yield from check_object_names(spec)
    yield from check_tls(spec["tls"])
    yield from check_allowed_namespaces(spec)
    yield from check_disruption_budget(spec)
    yield from check_scheduling(spec)
    yield from check_durations(spec)
    yield from check_pod_security(spec["podSecurity"])
    yield from check_exposure(spec)
