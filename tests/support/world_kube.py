"""The Kubernetes release the test world runs (tests/world/kube_versions.py,
KAIWU_TESTWORLD_KUBE), as the stories need it: the release objects are rendered for, the
PodDisruptionBudget's API, and whether the CRD's CEL rules refuse at the API's door.

Used by the drift and lifecycle stories that run on both 1.20 and 1.36.
"""

from __future__ import annotations

import pytest

from reconciler.kube import kinds as kk
from renderer.settings import CEL_SINCE, KubeVersion
from tests.world import kube_versions

VERSION = KubeVersion.parse(kube_versions.selected())
# policy/v1 from 1.21; policy/v1beta1 is gone from 1.25.
PDB = kk.PDB_V1 if KubeVersion(1, 21) <= VERSION else kk.PDB_V1BETA1

# A story whose premise is a spec the API server stores although the renderer refuses it (the
# webhook down, or no webhook) has none from 1.25: the CRD's CEL rules refuse such a spec there.
STORED_ONLY_WITHOUT_CEL = pytest.mark.skipif(
    VERSION >= CEL_SINCE, reason=(
        f"on Kubernetes {VERSION} the CRD's CEL rules refuse this spec at the API server, so "
        "it is never stored: tests/world_stories/admission/test_cel_on_current_kubernetes.py "
        "tells that story"))
