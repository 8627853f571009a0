"""The fast tier's fake API (tests/support/fake_api.py) agrees with kube-apiserver: every case of
tests/support/fake_api_cases.py, run here on the test world's real server through the
reconciler's own client (`reconciler.kube.client.Kube`), as tests/unit/reconciler/kube/
test_fake_api.py runs them on the fake. A case that fails here and passes there is a place where
the fake tells the fast tier's stories something the real server would not.
"""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from reconciler.kube.client import Kube
from tests.support.fake_api_cases import CASES, Case


@pytest.mark.world
@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_the_api_server_answers_as_the_fake_api(case: Case, kube: k8s.ApiClient,
                                                namespace: str) -> None:
    case(Kube(kube, "kaiwu-reconciler"), Kube(kube, "someone-else"), namespace)
