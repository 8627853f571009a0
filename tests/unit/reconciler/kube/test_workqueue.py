"""The work queue: however many events arrive for a cluster, it is reconciled once at a time,
once more if something changed meanwhile, and no more often than the rate limit allows.

A fake clock drives time; `get(timeout_s=0)` asks "is anything ready right now?".
"""

from __future__ import annotations

import threading
import time

from reconciler.keys import ClusterKey
from reconciler.kube.ratelimit import Limiter, Limits, TokenBucket
from reconciler.kube.workqueue import WorkQueue
from reconciler.metrics import Metrics
from reconciler.settings import Settings

A = ClusterKey("shop", "orders")
B = ClusterKey("shop", "payments")
LIMITS = Limits(cluster_burst=3, cluster_rate_per_s=1.0)  # the defaults per cluster


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def drain(queue: WorkQueue[ClusterKey]) -> list[ClusterKey]:
    """Take and finish everything ready right now."""
    taken = []
    while (key := queue.get(timeout_s=0)) is not None:
        taken.append(key)
        queue.done(key)
    return taken


def drain_without_done(queue: WorkQueue[ClusterKey]) -> list[ClusterKey]:
    """Take everything ready right now, leaving it being processed."""
    taken = []
    while (key := queue.get(timeout_s=0)) is not None:
        taken.append(key)
    return taken


def storm(queue: WorkQueue[ClusterKey], clock: FakeClock, key: ClusterKey, *, events: int,
          spacing_s: float, pass_s: float) -> list[float]:
    """Add key `events` times, `spacing_s` apart, while a worker takes it whenever it is
    ready and works `pass_s` on it; then let time run until it is quiet. Returns when each
    reconcile started."""
    served: list[float] = []
    next_event, sent, busy_until = clock.now, 0, None
    while sent < events or queue.depth or busy_until is not None:
        if busy_until is not None and clock.now >= busy_until:
            queue.done(key)
            busy_until = None
        if sent < events and clock.now >= next_event:
            queue.add(key)
            sent += 1
            next_event += spacing_s
        if busy_until is None and queue.get(timeout_s=0) == key:
            served.append(clock.now)
            busy_until = clock.now + pass_s
        clock.advance(0.005)
    return served


def test_a_burst_of_events_for_one_cluster_is_one_entry() -> None:
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=FakeClock())
    for _ in range(50):
        queue.add(A)
    queue.add(B)

    assert queue.depth == 2
    assert drain(queue) == [A, B]
    assert queue.depth == 0


def test_a_cluster_changed_while_being_reconciled_is_reconciled_once_more_afterwards() -> None:
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=FakeClock())
    queue.add(A)
    first = queue.get(timeout_s=0)
    assert first == A

    # Events arrive while a worker holds A: no second worker may take it now...
    queue.add(A)
    queue.add(A)
    assert queue.get(timeout_s=0) is None
    assert queue.depth == 1

    # ...but once the first reconcile is done, it runs once more (it may have missed them).
    queue.done(A)
    assert drain(queue) == [A]


def test_the_old_fixed_interval_merges_events_after_a_reconcile_into_the_next_one() -> None:
    clock = FakeClock()
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=Limits.fixed_interval(1.0), clock=clock)
    queue.add(A)
    assert drain(queue) == [A]

    for _ in range(20):  # a storm right after the reconcile
        clock.advance(0.01)
        queue.add(A)
    assert queue.get(timeout_s=0) is None, "held back until a second has passed"
    assert queue.depth == 1

    clock.advance(1.0)
    assert drain(queue) == [A]
    assert drain(queue) == []


def test_the_first_event_after_quiet_is_served_at_once_even_right_after_a_reconcile() -> None:
    clock = FakeClock()
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=LIMITS, clock=clock)
    queue.add(A)
    assert drain(queue) == [A]
    clock.advance(0.2)  # a second edit soon after: the bucket still has tokens

    queue.add(A)
    assert drain(queue) == [A], "not held back as the fixed interval would"


def test_a_storm_of_50_events_costs_a_handful_of_reconciles_and_the_last_is_served() -> None:
    clock = FakeClock()
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=LIMITS, clock=clock)
    served = storm(queue, clock, A, events=50, spacing_s=0.02, pass_s=0.02)

    # 50 events in 1 s: the 3 tokens of the burst, about one per second after, and the one
    # that serves the events that came while the last token was awaited.
    assert 2 <= len(served) <= 6, served
    assert served[-1] >= 1000.0 + 49 * 0.02 + 0.02, "a reconcile after the last event"


def test_the_overall_bucket_caps_what_the_process_starts_per_second() -> None:
    clock = FakeClock()
    limits = Limits(cluster_burst=3, cluster_rate_per_s=1, overall_burst=4,
                    overall_rate_per_s=2)
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=limits, clock=clock)
    keys = [ClusterKey("fleet", f"c{i}") for i in range(10)]
    for key in keys:
        queue.add(key)

    assert len(drain(queue)) == 4, "the overall burst"
    clock.advance(0.5)
    assert len(drain(queue)) == 1, "then two per second"
    clock.advance(2.5)
    assert len(drain(queue)) == 5
    assert queue.depth == 0


def test_the_echo_of_our_own_write_does_not_delay_the_next_repair() -> None:
    def repairs_delayed(limits: Limits) -> int:
        clock = FakeClock()
        queue: WorkQueue[ClusterKey] = WorkQueue(limits=limits, clock=clock)
        delayed = 0
        for _ in range(20):  # a hand edit every 0.9 s, each repaired, each repair echoed
            queue.add(A)
            if queue.get(timeout_s=0) != A:
                delayed += 1
                while queue.get(timeout_s=0) != A:
                    clock.advance(0.05)
            clock.advance(0.05)
            queue.add(A, echo=True)  # our repair's watch event, while the pass still runs
            queue.done(A)
            drain(queue)  # the echo's (cheap) reconcile, when its bucket lets it
            clock.advance(0.85)
        return delayed

    assert repairs_delayed(LIMITS) == 0
    charged = Limits(cluster_burst=3, cluster_rate_per_s=1, free_echoes=False)
    assert repairs_delayed(charged) > 0, "were echoes paid for, repairs would wait"


def test_a_pass_that_keeps_echoing_itself_is_still_rate_limited() -> None:
    clock = FakeClock()
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=LIMITS, clock=clock)
    queue.add(A)
    passes = 0
    for _ in range(100):  # every pass writes and its echo queues the next
        if queue.get(timeout_s=0) != A:
            break
        passes += 1
        queue.add(A, echo=True)
        queue.done(A)
        clock.advance(0.01)
    assert passes <= 3 * 3 + 3, "two free passes per paid one, and the bucket empties"


def test_failures_back_off_exponentially_per_cluster_and_success_resets() -> None:
    clock = FakeClock()
    queue: WorkQueue[ClusterKey] = WorkQueue(backoff_base_s=1.0, backoff_max_s=5.0, clock=clock)

    delays = [queue.add_rate_limited(A) for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert queue.failures(A) == 5
    assert queue.get(timeout_s=0) is None
    clock.advance(1.0)
    assert drain(queue) == [A], "queued once, at the earliest of the requests"

    queue.forget(A)
    assert queue.add_rate_limited(A) == 1.0
    assert queue.failures(B) == 0


def test_a_later_request_does_not_postpone_an_earlier_one() -> None:
    clock = FakeClock()
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=clock)
    queue.add_after(A, 10)
    queue.add_after(A, 30)
    queue.add_after(A, 5)

    clock.advance(5)
    assert drain(queue) == [A]
    clock.advance(30)
    assert drain(queue) == [], "the superseded requests left nothing behind"


def test_a_waiting_worker_wakes_when_work_arrives_and_on_shutdown() -> None:
    queue: WorkQueue[ClusterKey] = WorkQueue()
    got: list[ClusterKey | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get(timeout_s=10)))
    worker.start()
    time.sleep(0.05)
    queue.add(A)
    worker.join(5)
    assert got == [A]

    idle = threading.Thread(target=lambda: got.append(queue.get(timeout_s=10)))
    idle.start()
    time.sleep(0.05)
    queue.shutdown()
    idle.join(5)
    assert got == [A, None]
    queue.add(B)
    assert queue.depth == 0, "a shut-down queue takes no more work"


def test_delayed_work_is_handed_out_when_due_with_real_time() -> None:
    # The wiring to the real clock; how exactly a waiter is woken is told with a fake clock.
    queue: WorkQueue[ClusterKey] = WorkQueue()
    started = time.monotonic()
    queue.add_after(B, 0.2)

    assert queue.get(timeout_s=10) == B
    took = time.monotonic() - started
    assert 0.15 <= took < 3.0, "woken when due: not before, not at the waiter's 10 s time-out"


def test_the_queue_feeds_controller_runtimes_workqueue_metrics() -> None:
    clock = FakeClock()
    metrics = Metrics()
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=clock, metrics=metrics, name="kaiwucluster")
    q = {"name": "kaiwucluster"}
    key = ClusterKey("ns", "a")
    for _ in range(5):
        queue.add(key)  # one add queues it, four merge into it
    queue.add(ClusterKey("ns", "b"))
    assert metrics.value("workqueue_adds_total", q) == 2
    assert metrics.value("workqueue_depth", q) == 2
    clock.advance(3.0)
    assert queue.get(timeout_s=0) == key
    assert metrics.value("workqueue_queue_duration_seconds_sum", q) == 3.0
    clock.advance(2.0)
    assert metrics.value("workqueue_longest_running_processor_seconds", q) == 2.0
    assert metrics.value("workqueue_unfinished_work_seconds", q) == 2.0
    queue.add_rate_limited(key)
    queue.done(key)
    assert metrics.value("workqueue_work_duration_seconds_sum", q) == 2.0
    assert metrics.value("workqueue_retries_total", q) == 1
    assert metrics.value("workqueue_longest_running_processor_seconds", q) == 0.0
    assert metrics.value("workqueue_depth", q) == 2, "b waiting, a due after its back-off"


def test_the_settings_choose_the_buckets_or_the_old_fixed_interval() -> None:
    assert Limits.of(Settings(cluster_burst=5, cluster_rate_per_s=0.5, overall_burst=50,
                              overall_rate_per_s=20.0, free_echoes=False)) == Limits(
        cluster_burst=5.0, cluster_rate_per_s=0.5, overall_burst=50.0, overall_rate_per_s=20.0,
        free_echoes=False, charge_requeues=False)
    assert Limits.of(Settings(min_reconcile_interval_s=4.0)) == Limits(
        cluster_burst=1.0, cluster_rate_per_s=0.25, overall_burst=1e9, overall_rate_per_s=1e9,
        free_echoes=False, charge_requeues=True)
    assert Limits.of(Settings(min_reconcile_interval_s=0.5)) == Limits.fixed_interval(0.5)


def test_a_bucket_refills_at_its_rate_up_to_its_burst_and_says_how_long_to_wait() -> None:
    bucket = TokenBucket(burst=2, rate_per_s=0.5, now=100.0)
    assert [bucket.reserve(100.0) for _ in range(3)] == [0.0, 0.0, 2.0]
    assert bucket.reserve(100.0) == 4.0, "each reservation waits behind the last"
    assert not bucket.full(100.0)
    assert bucket.reserve(99.0) == 6.0, "a clock that steps back refills nothing"
    assert bucket.full(100.0 + 100) and bucket.tokens == 2, "never more than the burst"
    assert bucket.reserve(200.0) == 0.0
    assert bucket.reserve(200.0) == 0.0
    assert bucket.reserve(201.0) == 1.0, "half a token came in a second: half a token short"
    assert TokenBucket(burst=1.5, rate_per_s=1.0, now=0.0).reserve(0.0) == 0.0, \
        "half a token left after it: no wait, and never a negative one"


def test_buckets_of_quiet_clusters_are_forgotten_and_start_full_again() -> None:
    limiter = Limiter(Limits(cluster_burst=2, cluster_rate_per_s=1.0, overall_burst=3,
                             overall_rate_per_s=1.0))
    assert limiter.reserve_overall(10.0) == 0.0, "an echo first: the overall bucket starts"
    assert limiter.reserve(A, 10.0) == 0.0 and limiter.reserve(B, 10.0) == 0.0
    assert limiter.reserve(A, 10.0) == 1.0, "the overall bucket is empty now"
    assert len(limiter) == 2
    limiter.forget_full(10.5)
    assert len(limiter) == 2, "both still refilling"
    limiter.forget_full(11.0)
    assert len(limiter) == 1, "B is full again, A (two reservations) is not"
    limiter.forget_full(12.0)
    assert len(limiter) == 0


def test_without_limits_nothing_is_ever_held_back() -> None:
    clock = FakeClock()
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=clock)
    fleet = [ClusterKey("fleet", f"c{i}") for i in range(300)]
    for _ in range(5):
        for key in fleet:
            queue.add(key)
        assert len(drain(queue)) == 300
        clock.advance(0.01)
    for _ in range(10):  # one cluster, again and again, at one instant
        queue.add(A)
        assert drain(queue) == [A]
    assert queue.throttled == 0


def test_after_a_paid_reconcile_two_echoes_are_free_and_a_real_edit_pays_again() -> None:
    clock = FakeClock()
    limits = Limits(cluster_burst=1, cluster_rate_per_s=0.001)
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=limits, clock=clock)
    queue.add(A)
    assert drain(queue) == [A] and queue.throttled == 0
    for _ in range(2):
        queue.add(A, echo=True)
        assert drain(queue) == [A], "our own write coming back: free"
    queue.add(A, echo=True)
    assert drain(queue) == [], "a third echo pays, and the bucket is empty"
    assert queue.throttled == 1

    fresh: WorkQueue[ClusterKey] = WorkQueue(limits=limits, clock=clock)
    fresh.add(A, echo=True)  # the first event ever seen of a cluster, an echo
    assert drain(fresh) == [A]
    fresh.add(A, echo=True)
    assert drain(fresh) == [A], "still free: the first reconcile was paid for"
    fresh.add(A)
    assert drain(fresh) == [], "a real edit after the echo pays, and there is no token"


def test_an_echo_merged_with_a_real_edit_pays() -> None:
    clock = FakeClock()
    limits = Limits(cluster_burst=1, cluster_rate_per_s=0.001)
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=limits, clock=clock)
    queue.add(A)
    assert queue.get(timeout_s=0) == A
    queue.add(A, echo=True)  # while the pass runs
    queue.add(A)  # and someone edits it too
    queue.done(A)
    assert drain(queue) == [], "the edit is not free, and the token is spent"


def test_a_requeue_asked_for_now_is_queued_now() -> None:
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=FakeClock())
    queue.add_after(A, 0)
    queue.add_after(B, -1)
    assert drain(queue) == [A, B]


def test_the_limiter_forgets_the_buckets_of_clusters_gone_quiet() -> None:
    clock = FakeClock()
    limits = Limits(cluster_burst=3, cluster_rate_per_s=1.0, overall_burst=1e9,
                    overall_rate_per_s=1e9)
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=limits, clock=clock)
    for i in range(1500):
        queue.add(ClusterKey("fleet", f"c{i}"))
        assert queue.get(timeout_s=0) is not None
        queue.done(ClusterKey("fleet", f"c{i}"))
        clock.advance(0.01)
    assert len(queue._limiter) < 1100, "memory bounded by the clusters active lately"


def test_retries_are_exported_from_the_start_and_an_at_once_hand_out_waited_zero() -> None:
    clock = FakeClock()
    metrics = Metrics()
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=clock, metrics=metrics, name="kaiwucluster")
    q = {"name": "kaiwucluster"}
    assert metrics.registry.get_sample_value("workqueue_retries_total", q) == 0.0
    queue.add(A)
    assert queue.get(timeout_s=0) == A
    assert metrics.value("workqueue_queue_duration_seconds_sum", q) == 0.0


def test_a_worker_waiting_without_a_timeout_wakes_when_delayed_work_is_due() -> None:
    queue: WorkQueue[ClusterKey] = WorkQueue()
    queue.add_after(B, 0.1)
    got: list[ClusterKey | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()), daemon=True)
    worker.start()
    worker.join(timeout=5)
    queue.shutdown()  # a worker stuck by a bug is released rather than left behind
    assert got == [B]


def test_a_short_piece_of_work_is_timed_as_it_took() -> None:
    clock = FakeClock()
    metrics = Metrics()
    queue: WorkQueue[ClusterKey] = WorkQueue(clock=clock, metrics=metrics, name="kaiwucluster")
    queue.add(A)
    assert queue.get(timeout_s=0) == A
    clock.advance(0.25)
    queue.done(A)
    assert metrics.value("workqueue_work_duration_seconds_sum", {"name": "kaiwucluster"}) == 0.25


def test_the_limiter_forgets_quiet_buckets_only_past_twice_the_waiting_clusters_plus_1024(
        ) -> None:
    # 600 clusters are being reconciled (taken, not done) while 3,000 others come and go: the
    # limiter holds up to 2 x 600 + 1,024 buckets before it drops the full (quiet) ones.
    clock = FakeClock()
    limits = Limits(cluster_burst=3, cluster_rate_per_s=1.0, overall_burst=1e9,
                    overall_rate_per_s=1e9)
    queue: WorkQueue[ClusterKey] = WorkQueue(limits=limits, clock=clock)
    for i in range(600):
        queue.add(ClusterKey("held", f"w{i}"))
    assert len(drain_without_done(queue)) == 600
    sizes = []
    for i in range(3000):
        key = ClusterKey("fleet", f"c{i}")
        queue.add(key)
        sizes.append(len(queue._limiter))
        assert queue.get(timeout_s=0) == key
        queue.done(key)
        clock.advance(0.01)
    threshold = 2 * 600 + 1024
    assert threshold < max(sizes) <= threshold + 3
    assert min(sizes[2000:]) < 700, "dropped back to the buckets still refilling"
