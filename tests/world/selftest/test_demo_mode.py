"""`make demo` picks how the reconciler runs and says why (issue 30, item 4); this needs no
build: what the machine lacks is stood in for.

On a machine that cannot run a real node (CI has no containerd), the default runs a local
process and the reason names what is missing and its fix; asking for the Deployment there is an
error saying the same; asking for a local process needs nothing.
"""

from __future__ import annotations

import pytest

from tests.world import demo, image, real_node


def lacking(monkeypatch: pytest.MonkeyPatch, node: list[str], tools: list[str]) -> None:
    monkeypatch.setattr(real_node, "missing_prerequisites", lambda: node)
    monkeypatch.setattr(image, "missing_tools", lambda: tools)


def test_without_containerd_the_demo_runs_a_local_process_and_says_what_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lacking(monkeypatch, ["containerd (apt-get install containerd: make world-node)"], [])
    mode, why = demo.reconciler_mode("auto")
    assert mode == "process"
    assert why == ("this machine cannot run a real node; missing: containerd (apt-get install "
                   "containerd: make world-node)")


def test_asking_for_the_deployment_where_no_node_can_start_is_an_error_naming_the_lack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lacking(monkeypatch, [], ["podman"])
    with pytest.raises(demo.DemoError, match=r"--reconciler pod: .*missing: podman \(to build "
                                             r"the image: make image"):
        demo.reconciler_mode("pod")


def test_a_machine_that_can_run_a_node_gets_the_deployment_unless_a_process_is_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lacking(monkeypatch, [], [])
    assert demo.reconciler_mode("auto") == ("pod", "")
    assert demo.reconciler_mode("process") == ("process", "asked for (--reconciler process)")
    with pytest.raises(demo.DemoError, match="one of auto, pod, process"):
        demo.reconciler_mode("container")
