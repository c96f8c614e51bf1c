"""Prefetch: a worker claims ahead of its free threads, and hands what it did not start back."""

from __future__ import annotations

from collections import Counter

import pytest

from django_outbox.models import Job, JobStatus
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
