"""Pytest fixtures and hooks for the test world; tests/conftest.py imports them.

``control_plane`` (session): one real control plane for the whole run, started on first use.
``kube`` (session): an admin ``kubernetes.client.ApiClient`` for it.
``namespace`` (function): a fresh namespace per test, deleted afterwards.
Tests that use them are marked ``world`` automatically (``-m "not world"`` deselects them).
When a world test fails, its report names every component's log file, and the logs are kept.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from tests.world.controlplane import ControlPlane, ControlPlaneError

WORLD_FIXTURES = frozenset({"control_plane", "kube", "namespace"})
PLANE_KEY = pytest.StashKey[ControlPlane]()
# Lines for the end of the run: the session's teardown runs while output is captured.
SUMMARY_KEY = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """The real control plane; a missing build fails the tests loudly (never a silent skip)."""
    problem = ""
    try:
        plane = ControlPlane()
        plane.start()
    except ControlPlaneError as err:
        problem = str(err)
    if problem:
        # Outside the except block, so the report shows the message alone, not a traceback.
        pytest.fail(f"test world unavailable: {problem}", pytrace=False)
    request.config.stash[PLANE_KEY] = plane
    yield plane
    summary = request.config.stash.setdefault(SUMMARY_KEY, [])
    if plane.audit_log_path.exists():
        size = plane.audit_log_path.stat().st_size
        summary.append(f"test world audit log: {size / 2**20:.0f} MiB")
    failed = request.session.testsfailed > 0
    try:
        plane.check_audit_log_whole()  # a rotated log would have hidden requests from stories
    finally:
        plane.stop(keep_logs=failed)
        if failed:
            summary.append(f"test world logs kept in {plane.log_dir}")


def write_summary(config: pytest.Config, reporter: pytest.TerminalReporter) -> None:
    """The control plane's closing lines (audit log size, kept logs), after the results."""
    for line in config.stash.get(SUMMARY_KEY, []):
        reporter.write_line(line)


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    """An admin API client (``system:masters``) for the test world's apiserver."""
    api = control_plane.api_client()
    yield api
    api.close()  # type: ignore[no-untyped-call,unused-ignore]  # the client leaves close() unannotated


def _namespace_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:50].strip("-")
    return f"{base or 't'}-{secrets.token_hex(3)}"


def make_namespace(core: k8s.CoreV1Api, name: str) -> None:
    """Create namespace `name` and wait until its default ServiceAccount is in place."""
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    # Pods are rejected until the serviceaccount controller has made the default account.
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return
        except k8s.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def namespace(kube: k8s.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, with its default ServiceAccount in place."""
    core = k8s.CoreV1Api(kube)
    name = _namespace_name(request.node.name)
    make_namespace(core, name)
    yield name
    try:
        core.delete_namespace(name)
    except k8s.ApiException as err:
        if err.status != 404:
            raise


def world_fixtures_of(item: pytest.Item) -> frozenset[str]:
    """The world fixtures a test uses, itself or through other fixtures.

    A test argument parametrized directly (``@pytest.mark.parametrize("namespace", ...)``) takes
    its values from the parametrization, not from the fixture of that name: it does not count.
    """
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        names -= set(callspec.params)
    return WORLD_FIXTURES & names


def mark_world_tests(items: list[pytest.Item]) -> None:
    """Mark every test that uses a world fixture as ``world``."""
    for item in items:
        if world_fixtures_of(item):
            item.add_marker(pytest.mark.world)


def add_log_paths(item: pytest.Item, report: pytest.TestReport) -> None:
    """On a failed world test, list the control plane's log files in the test's report."""
    plane = item.config.stash.get(PLANE_KEY, None)
    if not report.failed or plane is None:
        return
    if not world_fixtures_of(item):
        return
    lines = [f"{name}: {path}" for name, path in plane.log_paths.items()]
    report.sections.append(("test world logs", "\n".join(lines)))
