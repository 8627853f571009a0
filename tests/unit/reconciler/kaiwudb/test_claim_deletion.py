"""Stories of the one claim deletion (reconciler.kaiwudb.pods.delete_claim) that scale-in, a
stray node's claim and failover's volume replacement all make: the claim judged goes, a claim
made since under the same name stays, a claim already gone is no error."""

from __future__ import annotations

import pytest

from reconciler.kaiwudb.pods import delete_claim
from reconciler.kube import kinds as k
from reconciler.kube.client import ApiError
from reconciler.metrics import Metrics
from reconciler.model import Obj
from tests.support.fake_api import FakeApi, counted

NS = "db"


def claim(uid: str) -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-dev-3", "namespace": NS, "uid": uid},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}}}


def test_the_claim_judged_is_deleted_and_a_second_delete_finds_it_gone() -> None:
    api, metrics = FakeApi(), Metrics()
    judged = api.create(claim("old"))
    assert delete_claim(counted(api, metrics), NS, judged)
    assert api.get(k.PVC, NS, "data-dev-3") is None
    assert not delete_claim(counted(api, metrics), NS, judged), "already gone"
    assert metrics.value("kaiwu_writes_total",
                         {"verb": "delete", "kind": "PersistentVolumeClaim"}) == 2


def test_a_claim_made_since_under_the_same_name_is_left_alone() -> None:
    api = FakeApi()
    judged = api.create(claim("old"))
    api.delete(k.PVC, NS, "data-dev-3")
    api.create(claim("new"))  # the StatefulSet's claim for a new pod
    assert not delete_claim(api, NS, judged)  # type: ignore[arg-type]
    found = api.get(k.PVC, NS, "data-dev-3")
    assert found is not None and found["metadata"]["uid"] != judged["metadata"]["uid"]


def test_any_other_refusal_fails_the_pass() -> None:
    class Forbidding(FakeApi):
        def delete(self, *args: object, **kwargs: object) -> bool:
            raise ApiError(403, "Forbidden", "persistentvolumeclaims is forbidden")

    with pytest.raises(ApiError):
        delete_claim(Forbidding(), NS, claim("old"))  # type: ignore[arg-type]
