"""The fakes' label selectors (tests/support/selectors.py) answer as kube-apiserver 1.20's
labels.Parse does, for every form the reconciler sends: a fake that matched more or less than
the real server would hide a wrong selector in the fast tier."""

from __future__ import annotations

import pytest

from tests.support.selectors import requirements, selector_matches


def test_every_requirement_must_hold_and_commas_inside_a_set_do_not_split_it() -> None:
    selector = "app=kaiwu,tier in (a, b),!legacy"
    assert requirements(selector) == ["app=kaiwu", "tier in (a, b)", "!legacy"]
    assert selector_matches(selector, {"app": "kaiwu", "tier": "b"})
    assert not selector_matches(selector, {"app": "kaiwu", "tier": "c"})
    assert not selector_matches(selector, {"app": "kaiwu", "tier": "a", "legacy": ""})
    assert not selector_matches(selector, {"tier": "a"})


def test_negative_requirements_hold_for_an_object_without_the_label() -> None:
    assert selector_matches("tier!=a", {}) and not selector_matches("tier!=a", {"tier": "a"})
    assert selector_matches("tier notin (a,b)", {})
    assert not selector_matches("tier notin (a,b)", {"tier": "b"})
    assert selector_matches("tier==a", {"tier": "a"}) and selector_matches("", {})


def test_an_empty_set_is_refused_as_the_server_refuses_it() -> None:
    with pytest.raises(ValueError, match="can't be empty"):
        selector_matches("tier in ()", {"tier": "a"})
