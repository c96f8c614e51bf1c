"""Caps across worker processes: never exceeded, and a killed worker's places come back only
when its leases expire."""

import signal

import pytest

from django_outbox.models import Job, JobStatus
from tests.limits.test_workers import most_at_once, spans
from tests.processes import SHORT_LEASE, wait_until
from tests.testapp import tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]


def test_a_cap_of_3_holds_across_2_processes_of_8_threads(workers):
    first = workers("--concurrency", "8")
    second = workers("--concurrency", "8")
    first.wait_for_output("worker started")
    second.wait_for_output("worker started")
    tasks.capped.enqueue_many([{"seconds": 0.05}] * 60)
    wait_until(
        lambda: Job.objects.succeeded().count() == 60, timeout=90, what="60 capped jobs to succeed"
    )
    first.send(signal.SIGTERM)
    second.send(signal.SIGTERM)
    assert first.wait(timeout=15) == 0, first.stderr
    assert second.wait(timeout=15) == 0, second.stderr
    runs = spans()
    assert len(runs) == 60
    # By the handlers' own clocks (one host, one clock), and by the rows they saw.
    assert most_at_once(runs) == 3
    assert max(running for _, _, running, _ in runs) <= 3
    # Either process may have run most of them: the one whose job ends claims the freed place
    # first (it is woken by its own completion, the other at its next poll).


def test_a_killed_workers_places_are_taken_again_only_once_its_leases_expire(workers):
    tasks.capped.enqueue_many([{"seconds": 30}] * 3)
    doomed = workers("--concurrency", "8", **SHORT_LEASE)
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.RUNNING).count() == 3,
        what="the doomed worker to hold the cap",
    )
    quick = tasks.capped.enqueue_many([{"seconds": 0}] * 3)
    survivor = workers("--concurrency", "8", **SHORT_LEASE)
    survivor.wait_for_output("worker started")
    doomed.send(signal.SIGKILL)
    doomed.wait(timeout=15)
    # No heartbeat extends them now: the first place frees when the first of them expires.
    leases = Job.objects.filter(status=JobStatus.RUNNING).values_list("lease_expires_at", flat=True)
    first_expiry = min(lease.timestamp() for lease in leases if lease is not None)
    wait_until(
        lambda: Job.objects.filter(pk__in=quick.ids, status=JobStatus.SUCCEEDED).count() == 3,
        timeout=30,
        what="the quick jobs to run once the dead worker's leases expired",
    )
    survivor.send(signal.SIGKILL)
    quick_starts = [start for start, _, _, _ in spans()]
    assert min(quick_starts) >= first_expiry
    assert max(running for _, _, running, _ in spans()) <= 3


def test_a_cap_claimed_in_one_trip_while_it_has_room_holds_across_4_processes(workers):
    # Claims of one or two jobs find room to spare under a cap of 8 until 4 run (one trip on
    # PostgreSQL), then go the careful way: both kinds of claim race each other.
    started = [workers("--concurrency", "2", "--prefetch", "0") for _ in range(4)]
    for worker in started:
        worker.wait_for_output("worker started")
    tasks.capped_at_8.enqueue_many([{"seconds": 0.05}] * 120)
    wait_until(
        lambda: Job.objects.succeeded().count() == 120,
        timeout=90,
        what="120 capped jobs to succeed",
    )
    for worker in started:
        worker.send(signal.SIGTERM)
    for worker in started:
        assert worker.wait(timeout=15) == 0, worker.stderr
    runs = spans()
    assert len(runs) == 120
    assert most_at_once(runs) <= 8
    assert max(running for _, _, running, _ in runs) <= 8


def test_places_taken_in_one_trip_by_killed_workers_come_back_only_once_their_leases_expire(
    workers,
):
    # The first worker's claim of 4 fits in a cap of 8 with half to spare (one trip on
    # PostgreSQL); the second's 4 fill the cap (carefully).
    tasks.capped_at_8.enqueue_many([{"seconds": 30}] * 8)
    doomed = [workers("--concurrency", "4", "--prefetch", "0", **SHORT_LEASE)]
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.RUNNING).count() == 4,
        what="the first doomed worker to run 4",
    )
    doomed.append(workers("--concurrency", "4", "--prefetch", "0", **SHORT_LEASE))
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.RUNNING).count() == 8,
        what="the doomed workers to hold the cap",
    )
    quick = tasks.capped_at_8.enqueue_many([{"seconds": 0}] * 4)
    survivor = workers("--concurrency", "8", **SHORT_LEASE)
    survivor.wait_for_output("worker started")
    for worker in doomed:
        worker.send(signal.SIGKILL)
        worker.wait(timeout=15)
    leases = Job.objects.filter(status=JobStatus.RUNNING).values_list("lease_expires_at", flat=True)
    first_expiry = min(lease.timestamp() for lease in leases if lease is not None)
    wait_until(
        lambda: Job.objects.filter(pk__in=quick.ids, status=JobStatus.SUCCEEDED).count() == 4,
        timeout=30,
        what="the quick jobs to run once the dead workers' leases expired",
    )
    survivor.send(signal.SIGKILL)
    runs = spans()
    # Only the quick jobs ended: the long ones were killed, or taken again after expiry.
    assert len(runs) == 4
    assert min(start for start, _, _, _ in runs) >= first_expiry
    assert max(running for _, _, running, _ in runs) <= 8
