"""Story: exec never hijacks the requests other threads make on the same Kube.

The reconciler shares one `Kube` (one ApiClient) between its workers, its Lease renewals and its
status writes, while the lifecycle steps exec `kwbase` in the database pods. The `kubernetes`
client's exec helper swaps the request function of the ApiClient it is handed for a websocket
one while a command runs; on a shared client, a Lease renewal made at that moment went out as a
websocket GET and was lost. Here one thread execs in a loop while another patches a Lease, and
the apiserver's audit log must show every patch as the patch it was.
"""

from __future__ import annotations

import threading
import time

from reconciler.kube import kinds as kk
from reconciler.kube.client import Kube
from reconciler.model import Obj
from tests.world.controlplane import ControlPlane
from tests.world.simworld import SimWorld

LEASE = "exec-neighbour"


def test_writes_made_while_exec_runs_arrive_as_the_verb_they_were(
        sim_world: SimWorld, control_plane: ControlPlane, namespace: str,
        cluster: list[Obj]) -> None:
    shared = Kube(control_plane.api_client(), "exec-story")
    shared.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": LEASE, "namespace": namespace},
                   "spec": {"holderIdentity": "start"}})
    stop = threading.Event()
    execs: list[str] = []
    failures: list[str] = []

    def exec_loop() -> None:
        while not stop.is_set():
            stdout, _, code = shared.exec(namespace, "kdb-0", "kwbase", ["hostname"])
            execs.append(f"{code}:{stdout.strip()}")

    runner = threading.Thread(target=exec_loop, daemon=True)
    runner.start()
    patches = 0
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        try:
            shared.patch(kk.LEASE, namespace, LEASE, {"spec": {"holderIdentity": f"n{patches}"}})
            patches += 1
        except Exception as error:  # the bug: a websocket handshake answered 200 OK
            failures.append(f"{type(error).__name__}: {error}")
    stop.set()
    runner.join(30)

    assert len(execs) >= 10, "execs really ran alongside the writes"
    assert set(execs) == {"0:kdb-0"}
    assert failures == []
    seen = [e for e in control_plane.audit_events()
            if (e.get("objectRef") or {}).get("resource") == "leases"
            and (e.get("objectRef") or {}).get("name") == LEASE
            and (e.get("objectRef") or {}).get("namespace") == namespace]
    verbs = [e["verb"] for e in seen]
    assert verbs.count("patch") == patches and "get" not in verbs, verbs
    final = shared.get(kk.LEASE, namespace, LEASE)
    assert final is not None and final["spec"]["holderIdentity"] == f"n{patches - 1}"
    print(f"\n[exec] {len(execs)} execs and {patches} Lease patches side by side: "
          "every patch arrived as a patch")


def test_a_silent_command_that_outlives_its_time_out_comes_back_at_the_time_out(
        sim_world: SimWorld, control_plane: ControlPlane, namespace: str,
        cluster: list[Obj]) -> None:
    """A long EXPORT prints nothing until it ends. The exec's time-out must end the wait then,
    with no exit status: the client's read of stdout waited for data (timeout=None) and held the
    call until the statement ended, however long."""
    key = (namespace, "kdb")
    sim_world.kwdb.load(key, sim_world.clock.now(), database="shop", table="orders",
                        columns=[("id", "INT8")], rows=[("1",), ("2",), ("3",)])
    # Three rows in about 6 real seconds, whatever the world clock's speed.
    sim_world.kwdb.set_bulk_rate(key, sim_world.clock.now(), 3 / (6 * sim_world.clock.speed))
    shared = Kube(control_plane.api_client(), "exec-story")
    started = time.monotonic()
    stdout, stderr, code = shared.exec(
        namespace, "kdb-0", "kwbase",
        ["/kaiwudb/bin/kwbase", "sql", "--insecure", "--format=csv", "-e",
         'EXPORT INTO CSV "nodelocal://1/slow" FROM SELECT * FROM shop.public.orders'],
        timeout=1.5)
    took = time.monotonic() - started
    assert (stdout, stderr, code) == ("", "", -1)
    assert took < 4.0, f"the exec came back after {took:.1f} s, not at its 1.5 s time-out"
    exports = [j for j in sim_world.kwdb.jobs(key, sim_world.clock.now())
               if j.job_type == "EXPORT"]
    assert [j.status for j in exports] == ["running"], "the statement runs on in KaiwuDB"
    print(f"\n[exec] a silent 6 s EXPORT: the exec came back after {took:.2f} s (time-out 1.5 s)")
