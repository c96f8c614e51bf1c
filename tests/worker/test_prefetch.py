"""Prefetch: a worker claims ahead of its free threads, and hands what it did not start back."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from django_outbox.claimed import ClaimedJob
from django_outbox.db import queries_for
from django_outbox.models import Job, JobStatus
from django_outbox.worker.auto_prefetch import (
    SHORT_JOB_SECONDS,
    WARM_UP_ATTEMPTS,
    AdaptivePrefetch,
)
from django_outbox.worker.loop import Worker
from django_outbox.worker.runner import Outcome
from tests.helpers import run_worker
from tests.processes import runs_per_job, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_claims_its_threads_plus_prefetch_in_one_claim(claims, log):
    jobs = tasks.record_run.enqueue_many([{"log": str(log)} for _ in range(25)])

    stats = run_worker(concurrency=1, prefetch=9)

    assert claims[0] == (10, 10)
    assert all(limit <= 10 for limit, _ in claims)
    assert stats.claimed == 25
    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 25})
    assert runs_per_job(log) == Counter({job.pk: 1 for job in jobs})


def test_without_prefetch_a_worker_claims_only_for_its_free_threads(claims):
    tasks.noop.enqueue_many([{} for _ in range(6)])

    run_worker(concurrency=2, prefetch=0)

    assert claims[0] == (2, 2)
    assert all(limit <= 2 for limit, _ in claims)


def test_prefetched_jobs_are_held_under_lease_and_handed_back_unstarted_at_shutdown(
    handler_gate, worker_thread, settings
):
    settings.OUTBOX = {**settings.OUTBOX, "HEARTBEAT_SECONDS": 0.2}
    # It writes nothing while it waits, so that on SQLite the hand-back can write meanwhile.
    running = tasks.waits_for_test_without_writing.enqueue({})
    prefetched = tasks.noop.enqueue_many([{"n": n} for n in range(9)])
    left = tasks.noop.enqueue_many([{"n": n} for n in range(3)])

    worker = worker_thread(concurrency=1, prefetch=9)
    assert tasks.handler_started.wait(10)
    # One running, nine claimed ahead; the rest wait for another claim.
    assert set(Job.objects.running().values_list("pk", flat=True)) == {
        job.pk for job in [running, *prefetched]
    }
    assert set(
        Job.objects.filter(status=JobStatus.READY, attempts=0).values_list("pk", flat=True)
    ) == {job.pk for job in left}
    # Waiting for a thread, they are leased like running jobs: heartbeats extend them too.
    claimed_ahead = Job.objects.filter(pk__in=[job.pk for job in prefetched])
    first_expiry = max(
        expiry
        for expiry in claimed_ahead.values_list("lease_expires_at", flat=True)
        if expiry is not None
    )
    wait_until(
        lambda: not claimed_ahead.filter(lease_expires_at__lte=first_expiry).exists(),
        what="heartbeats to extend the leases of the prefetched jobs",
    )

    worker.request_stop()
    # The unstarted ones go back at once, while the handler still runs.
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.READY).count() == 12,
        what="prefetched jobs to be handed back",
    )
    assert Job.objects.running().get().pk == running.pk
    tasks.handler_may_finish.set()
    wait_until(lambda: Job.objects.get(pk=running.pk).status == JobStatus.SUCCEEDED)

    handed_back = Job.objects.filter(pk__in=[job.pk for job in prefetched])
    assert set(
        handed_back.values_list("status", "attempts", "lease_token", "worker_id", "started_at")
    ) == {(JobStatus.READY, 0, None, "", None)}
    assert worker.stats.claimed == 10
    assert tasks.lease_lost_seen == [False]


def test_a_negative_prefetch_is_refused():
    with pytest.raises(ValueError, match="prefetch"):
        Worker(prefetch=-1)


def test_prefetch_defaults_to_the_setting(settings, claims):
    settings.OUTBOX = {**settings.OUTBOX, "PREFETCH": 3}
    tasks.noop.enqueue_many([{} for _ in range(10)])

    run_worker(concurrency=2)

    assert claims[0] == (5, 5)


# PREFETCH "auto": claim ahead while the jobs run short, not otherwise.


@pytest.mark.parametrize(
    ("durations", "prefetch"),
    [
        pytest.param([], 0, id="nothing-ran-yet"),
        # Until a few jobs finished, nothing says they are short: no claiming ahead.
        pytest.param([0.001] * (WARM_UP_ATTEMPTS - 1), 0, id="short-but-warming-up"),
        pytest.param([0.001] * WARM_UP_ATTEMPTS, 8, id="short"),
        pytest.param([0.3] * 50, 0, id="long"),
        pytest.param([SHORT_JOB_SECONDS] * 10, 0, id="at-the-threshold"),
        # The average follows a change of workload both ways, within a few dozen jobs.
        pytest.param([0.001] * 20 + [1.0] * 10, 0, id="short-then-long"),
        pytest.param([1.0] * 20 + [0.001] * 60, 8, id="long-then-short"),
        # A lone slow job among short ones does not stop the claiming ahead.
        pytest.param([0.001] * 20 + [0.5] + [0.001] * 5, 8, id="one-slow-among-short"),
    ],
)
def test_auto_prefetch_claims_concurrency_ahead_only_while_recent_jobs_are_short(
    durations, prefetch
):
    adaptive = AdaptivePrefetch(concurrency=8)
    for seconds in durations:
        adaptive.record(seconds)
    assert adaptive.prefetch() == prefetch


def most_held_by(worker: Worker) -> Callable[[], int]:
    """Record the most jobs ``worker`` held waiting for a thread or running, after each claim;
    return what reads it."""
    most = 0
    real_add = worker.held.add

    def add(jobs: list[ClaimedJob]) -> None:
        nonlocal most
        real_add(jobs)
        with worker.held.lock:
            most = max(most, worker.held.waiting_or_running())

    worker.held.add = add  # type: ignore[method-assign]
    return lambda: most


def test_with_auto_prefetch_a_worker_of_long_jobs_claims_no_more_than_its_threads(claims, log):
    jobs = tasks.record_run.enqueue_many([{"log": str(log), "sleep": 0.3} for _ in range(10)])

    worker = Worker(burst=True, concurrency=2, prefetch="auto")
    most_held = most_held_by(worker)
    stats = worker.run()

    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 10})
    assert runs_per_job(log) == Counter({job.pk: 1 for job in jobs})
    # Every claim asked for free threads only: the worker never held a job no thread ran.
    assert all(limit <= 2 for limit, _ in claims)
    assert most_held() == 2
    assert worker.prefetch == 0
    assert worker.capacity == worker.held.capacity == 2


def test_with_auto_prefetch_a_worker_of_short_jobs_claims_ahead_in_batches(claims):
    tasks.noop.enqueue_many([{"n": n} for n in range(200)])

    worker = Worker(burst=True, concurrency=2, prefetch="auto")
    most_held = most_held_by(worker)
    stats = worker.run()

    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 200})
    # It starts as a worker without prefetch; once a few jobs ran short, it claims up to its
    # threads' worth ahead.
    assert claims[0] == (2, 2)
    assert all(limit <= 4 for limit, _ in claims)
    assert most_held() > 2
    assert worker.prefetch == 2
    assert worker.capacity == worker.held.capacity == 4
    assert worker.claim_threshold == 1


def test_auto_prefetch_is_the_default(settings, claims):
    settings.OUTBOX = {key: value for key, value in settings.OUTBOX.items() if key != "PREFETCH"}

    worker = Worker(concurrency=3)

    assert worker.auto_prefetch is not None
    assert (worker.prefetch, worker.capacity, worker.held.capacity) == (0, 3, 3)


def test_a_prefetch_other_than_auto_or_a_count_is_refused():
    with pytest.raises(ValueError, match='prefetch must be "auto" or an integer >= 0'):
        Worker(prefetch="fast")  # type: ignore[arg-type]


def slow_claims(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Make every claim of this process's workers take ``seconds`` more, as a loaded
    database's do (after ``claims``, which then still records them)."""
    queries = queries_for(connection)
    claim = queries.claim

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return claim(*args, **kwargs)

    monkeypatch.setattr(queries, "claim", slow_claim)


def test_a_busy_worker_claims_a_batch_at_a_time_though_jobs_end_while_it_claims(
    claims, log, settings, monkeypatch
):
    # Jobs end while each claim runs: those ends wake the worker for places that the claim's
    # own jobs then take. Claimed at once, the few places left made claims of one or two
    # jobs, each costing a batch's round trip.
    settings.OUTBOX = {**settings.OUTBOX, "POLL_SECONDS": 5}
    slow_claims(monkeypatch, 0.05)
    jobs = tasks.record_run_non_atomic.enqueue_many(
        [{"log": str(log), "sleep": 0.03} for _ in range(40)]
    )

    worker = Worker(burst=True, concurrency=2, prefetch=8)
    stats = worker.run()

    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 40})
    assert runs_per_job(log) == Counter({job.pk: 1 for job in jobs})
    assert worker.claim_threshold == 4
    asked = [limit for limit, claimed in claims if claimed]
    assert len(asked) > 4
    assert min(asked) >= worker.claim_threshold, asked


def test_a_worker_whose_threads_outrun_its_claims_claims_every_place_at_once(
    claims, log, settings, monkeypatch
):
    # Claims take longer than the threads need to run a batch: half the places are free
    # again when a claim returns. Claimed at once, claims of half the places alternated for
    # good (4 and 6 of 10 here), the database doing twice the claims for the same jobs.
    settings.OUTBOX = {**settings.OUTBOX, "POLL_SECONDS": 5}
    slow_claims(monkeypatch, 0.1)
    jobs = tasks.record_run_non_atomic.enqueue_many([{"log": str(log)} for _ in range(60)])

    worker = Worker(burst=True, concurrency=2, prefetch=8)
    stats = worker.run()

    assert stats.outcomes == Counter({Outcome.SUCCEEDED: 60})
    assert runs_per_job(log) == Counter({job.pk: 1 for job in jobs})
    asked = [limit for limit, claimed in claims if claimed]
    assert len(asked) > 5
    # Once a claim (of a batch's worth: 4) returns to find half the places free again, every
    # later claim waits for the threads to hold no more than they run, and takes 8 or more.
    # One more claim of a batch may come where a job ran longer than a claim (a loaded
    # machine): the worker then claims as before, until a claim is outrun again.
    smaller = [limit for limit in asked if limit < worker.prefetch]
    assert len(smaller) <= 2, asked
