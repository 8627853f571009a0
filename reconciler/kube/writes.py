"""The reconciler's writes counted once: `CountedKube` wraps the API client every writer uses.

The runtime (reconciler.runtime.process) wraps its one leader-guarded client in a `CountedKube`
and hands that to everything that writes in the reconciler's name: the controller and its
steps, the Event recorder, the source directory, the webhook's certificate and configuration.
Each write is counted there, by verb and kind, in `writes_total{verb,kind}`, so no caller
counts by hand and none can forget to. The verbs:

  apply     server-side apply (Kube.apply)
  dry_run   server-side apply with dryRun=All: nothing is stored, the server still works
  create    POST (Kube.create)
  update    PUT of a whole object (Kube.replace)
  patch     merge or JSON patch (Kube.patch, Kube.json_patch)
  status    a write to the status subresource (Kube.replace_status, Kube.patch(subresource=
            "status"))
  delete    DELETE (Kube.delete), already gone (404) included

A write is counted once the API server answered it, accepted or refused (an ApiError): a write
this replica may not send (reconciler.kube.leader.GuardedKube's refusal: not the leader, or the
cluster left the shard) never reached the server and is not counted. The Lease's own writes
(leader election) go through a client of their own and are not counted.

Tests wrap their fake API (tests/support/fake_api.FakeApi) the same way, so a step writes
through the very counting the runtime uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reconciler.kube.client import ApiError, Kube, Watch
from reconciler.kube.kinds import Kind
from reconciler.metrics import Metrics
from reconciler.model import Obj

T = TypeVar("T")


class CountedKube(Kube):
    """`inner`'s calls, each write counted in `metrics.writes_total` (see the module
    docstring). A Kube by type so that every caller takes it as one; every public method of
    Kube is passed on here (tests/unit/reconciler/kube/test_writes.py checks that none is
    left to Kube's own implementation), anything else (field_manager, api) is `inner`'s."""

    def __init__(self, inner: Kube, metrics: Metrics) -> None:
        # Kube.__init__ is not called: this object holds no connection, `inner` does.
        self.inner = inner
        self.metrics = metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _counted(self, verb: str, kind: str, write: Callable[[], T]) -> T:
        sent = True
        try:
            return write()
        except ApiError:
            raise  # refused by the server: a write all the same
        except BaseException:
            sent = False  # refused before it was sent (GuardedKube): not counted
            raise
        finally:
            if sent:
                self.metrics.writes_total.labels(verb=verb, kind=kind).inc()

    # ---- reads: passed on ------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        return self.inner.get(kind, namespace, name)

    def list_objects(self, kind: Kind, namespace: str | None = None,
                     label_selector: str | None = None, *,
                     keep: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
        return self.inner.list_objects(kind, namespace, label_selector, keep=keep)

    def watch(self, kind: Kind, resource_version: str, namespace: str | None = None,
              label_selector: str | None = None, timeout_seconds: int = 300) -> Watch:
        return self.inner.watch(kind, resource_version, namespace, label_selector,
                                timeout_seconds)

    def server_version(self) -> str:
        return self.inner.server_version()

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float = 60.0) -> tuple[str, str, int]:
        return self.inner.exec(namespace, pod, container, command, timeout)

    # ---- writes: counted -------------------------------------------------------------------

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        return self._counted("dry_run" if dry_run else "apply", str(obj.get("kind")),
                             lambda: self.inner.apply(obj, dry_run=dry_run, force=force))

    def replace(self, obj: Obj) -> Obj:
        return self._counted("update", str(obj.get("kind")), lambda: self.inner.replace(obj))

    def create(self, obj: Obj) -> Obj:
        return self._counted("create", str(obj.get("kind")), lambda: self.inner.create(obj))

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Obj,
              subresource: str = "") -> Obj:
        return self._counted("status" if subresource == "status" else "patch", kind.kind,
                             lambda: self.inner.patch(kind, namespace, name, patch, subresource))

    def json_patch(self, kind: Kind, namespace: str | None, name: str,
                   operations: list[Obj]) -> Obj:
        return self._counted("patch", kind.kind,
                             lambda: self.inner.json_patch(kind, namespace, name, operations))

    def replace_status(self, obj: Obj) -> Obj:
        return self._counted("status", str(obj.get("kind")),
                             lambda: self.inner.replace_status(obj))

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               grace_period_seconds: int | None = None,
               propagation: str | None = None) -> bool:
        return self._counted("delete", kind.kind, lambda: self.inner.delete(
            kind, namespace, name, uid=uid, grace_period_seconds=grace_period_seconds,
            propagation=propagation))

