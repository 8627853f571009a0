"""The status rules (reconciler.controller.conditions.RULES), one by one: for each rule a pass
where it decides its condition, a pass where it does not apply, and for rules that could both
apply, a pass showing which one wins (the earlier in RULES).

The passes are what a user's cluster goes through: Ready, a step stalled, the spec invalid,
objects drifting under each drift policy, a drift repaired, pods not ready, KaiwuDB nodes
joining, a scale-in under way, the cluster paused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from reconciler import status as st
from reconciler.controller.conditions import RULES, Facts, Rule, decide
from reconciler.controller.objects import ObjectPass
from tests.support.controller_world import ready_pass, report, service_state, sts_state

Make = Callable[[], ObjectPass]


def cluster(*changes: Callable[[ObjectPass], None], **spec: Any) -> Make:
    """A pass of a cluster of three ready pods, with each change made to it."""
    def make() -> ObjectPass:
        p = ready_pass(**spec)
        for change in changes:
            change(p)
        return p
    return make


def stalled(p: ObjectPass) -> None:
    p.stalled.append(("CrashLoop", "pod dev-2 keeps crashing"))


def halted(p: ObjectPass) -> None:
    p.halted = True


def spec_unreadable(p: ObjectPass) -> None:
    p.halted = True
    p.cluster = None


def drifted(p: ObjectPass) -> None:
    p.states.append(service_state("drifted", report=report(1)))


def fought(p: ObjectPass) -> None:
    p.states.append(service_state("drifted", report=report(1), blocked_s=30.0))


def rejected(p: ObjectPass) -> None:
    p.states.append(service_state("rejected"))


def repaired(p: ObjectPass) -> None:
    p.act("DriftRepaired", "Service/dev-public", "spec.ports[0].port put back")


def incomplete(p: ObjectPass) -> None:
    p.complete = False


def joining(p: ObjectPass) -> None:
    p.not_ready.append(("NodesJoining", "2/3 KaiwuDB nodes live"))


def scaling_in(p: ObjectPass) -> None:
    p.not_ready.append(("ScalingIn", "scaling in 4 -> 3"))
    p.progressing.append(("ScalingIn", "scaling in 4 -> 3"))


def pod_down(p: ObjectPass) -> None:
    p.states[:] = [sts_state(ready=2) if s.kind.kind == "StatefulSet" else s for s in p.states]


OFF, WARN, PAUSED = {"drift": {"policy": "off"}}, {"drift": {"policy": "warn"}}, {"paused": True}

# (condition, rule, a pass it decides with the reason it gives, a pass it does not apply to)
CASES: list[tuple[str, str, Make, str, Make]] = [
    (st.STALLED, "stalled", cluster(stalled), "CrashLoop", cluster()),
    (st.STALLED, "halted", cluster(halted), "Halted", cluster()),
    (st.STALLED, "not-stalled", cluster(), "Progressing", cluster()),
    (st.DRIFTED, "policy-off", cluster(**OFF), "PolicyOff", cluster(**OFF, **PAUSED)),
    (st.DRIFTED, "drifted-paused", cluster(drifted, **PAUSED), "Paused", cluster(drifted)),
    (st.DRIFTED, "drifted-warn-only", cluster(drifted, **WARN), "WarnOnly", cluster(**WARN)),
    (st.DRIFTED, "drifted-backing-off", cluster(fought), "BackingOff", cluster(drifted)),
    (st.DRIFTED, "drifted-pending", cluster(drifted), "Pending", cluster(rejected)),
    (st.DRIFTED, "repaired", cluster(repaired), "Repaired", cluster()),
    (st.DRIFTED, "in-sync", cluster(), "InSync", cluster()),
    (st.READY, "halted-invalid-spec", cluster(halted), "InvalidSpec", cluster(halted, stalled)),
    (st.READY, "halted-stalled", cluster(halted, stalled), "CrashLoop", cluster(stalled)),
    (st.READY, "stalled", cluster(stalled), "Stalled", cluster(joining)),
    (st.READY, "drifted", cluster(drifted), "Drifted", cluster(rejected)),
    (st.READY, "applying", cluster(rejected), "Applying", cluster(joining)),
    (st.READY, "kaiwudb-not-ready", cluster(joining), "NodesJoining", cluster(pod_down)),
    (st.READY, "waiting-for-pods", cluster(pod_down), "WaitingForPods", cluster()),
    (st.READY, "ready", cluster(), "Ready", cluster()),
    (st.RECONCILING, "paused", cluster(**PAUSED), "Paused", cluster()),
    (st.RECONCILING, "settled", cluster(), "Ready", cluster(joining)),
    (st.RECONCILING, "drift-reported-only", cluster(drifted, **WARN), "WarnOnly",
     cluster(drifted)),
    (st.RECONCILING, "progressing", cluster(scaling_in), "ScalingIn", cluster(joining)),
    (st.RECONCILING, "not-ready-yet", cluster(joining), "NodesJoining", cluster()),
]

# (condition, the earlier rule, the later rule, a pass both apply to): the earlier wins.
ORDERS: list[tuple[str, str, str, Make]] = [
    (st.STALLED, "stalled", "halted", cluster(halted, stalled)),
    (st.DRIFTED, "policy-off", "drifted-pending", cluster(drifted, **OFF)),
    (st.DRIFTED, "drifted-paused", "drifted-warn-only", cluster(drifted, **WARN, **PAUSED)),
    (st.DRIFTED, "drifted-warn-only", "drifted-backing-off", cluster(fought, **WARN)),
    (st.DRIFTED, "drifted-backing-off", "drifted-pending", cluster(fought)),
    (st.DRIFTED, "drifted-pending", "repaired", cluster(drifted, repaired)),
    (st.READY, "halted-invalid-spec", "halted-stalled", cluster(spec_unreadable, stalled)),
    (st.READY, "halted-stalled", "stalled", cluster(halted, stalled)),
    (st.READY, "stalled", "drifted", cluster(stalled, drifted)),
    (st.READY, "drifted", "applying", cluster(drifted, incomplete)),
    (st.READY, "applying", "kaiwudb-not-ready", cluster(incomplete, joining)),
    (st.READY, "kaiwudb-not-ready", "waiting-for-pods", cluster(joining, pod_down)),
    (st.RECONCILING, "paused", "settled", cluster(**PAUSED)),
    (st.RECONCILING, "settled", "drift-reported-only", cluster(stalled, drifted, **WARN)),
    (st.RECONCILING, "drift-reported-only", "progressing",
     cluster(drifted, scaling_in, **WARN)),
    (st.RECONCILING, "progressing", "not-ready-yet", cluster(scaling_in)),
]


def rule(condition: str, name: str) -> Rule:
    return next(r for r in RULES if (r.condition, r.name) == (condition, name))


def applies(condition: str, name: str, p: ObjectPass) -> bool:
    facts = Facts.of(p)
    decided = {c: cond for c, (_, cond) in decide(facts).items()}
    return rule(condition, name).when(facts, decided)


@pytest.mark.parametrize(("condition", "name", "make", "reason", "other"), CASES,
                         ids=[f"{c}:{n}" for c, n, *_ in CASES])
def test_a_rule_decides_its_condition_where_it_applies(condition: str, name: str, make: Make,
                                                       reason: str, other: Make) -> None:
    chosen, decided = decide(Facts.of(make()))[condition]
    assert chosen.name == name
    assert decided.reason == reason


@pytest.mark.parametrize(("condition", "name", "make", "reason", "other"),
                         [case for case in CASES if case[1] not in (
                             "not-stalled", "in-sync", "ready", "not-ready-yet")],
                         ids=[f"{c}:{n}" for c, n, *_ in CASES if n not in (
                             "not-stalled", "in-sync", "ready", "not-ready-yet")])
def test_a_rule_does_not_apply_where_its_case_is_absent(condition: str, name: str, make: Make,
                                                        reason: str, other: Make) -> None:
    assert applies(condition, name, make())
    assert not applies(condition, name, other())


@pytest.mark.parametrize(("condition", "first", "then", "make"), ORDERS,
                         ids=[f"{c}:{a}>{b}" for c, a, b, _ in ORDERS])
def test_where_two_rules_apply_the_earlier_one_decides(condition: str, first: str, then: str,
                                                       make: Make) -> None:
    p = make()
    assert applies(condition, first, p) and applies(condition, then, p)
    assert decide(Facts.of(p))[condition][0].name == first
    names = [r.name for r in RULES if r.condition == condition]
    assert names.index(first) < names.index(then)


def test_every_rule_is_tested_and_every_condition_ends_with_a_rule_that_always_applies() -> None:
    assert {(r.condition, r.name) for r in RULES} == {(c, n) for c, n, *_ in CASES}
    for condition in (st.STALLED, st.DRIFTED, st.READY, st.RECONCILING):
        last = [r for r in RULES if r.condition == condition][-1]
        for _, _, make, _, other in CASES:
            for p in (make(), other()):
                facts = Facts.of(p)
                decided = {c: cond for c, (_, cond) in decide(facts).items()}
                assert last.when(facts, decided), (condition, last.name)
