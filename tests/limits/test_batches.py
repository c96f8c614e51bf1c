"""The limited claim's batch: where every limit has room for a whole claim, the jobs are
claimed first and their limits checked under the locks; past a limit, it rolls back."""

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_outbox.db import queries_for
from django_outbox.db.base import HeldBack
from django_outbox.limits import claims as limited_claims
from django_outbox.limits.claims import claim_limited
from django_outbox.limits.pauses import pause
from django_outbox.models import Job, JobStatus, LimitState
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

ROOMY = {"QUEUES": {"crm": {"CONCURRENCY": 1000, "RATE_LIMIT": "100000/s"}}}


@pytest.fixture(autouse=True)
def batches_not_one_trip_claims(monkeypatch):
    """The batch as SQLite and MariaDB claim it, and PostgreSQL while its one-trip claim rests
    (test_one_trip.py tests the one-trip claim)."""
    monkeypatch.setattr(queries_for(connection), "supports_limited_claim_in_one_trip", False)


def claim(count=50, worker="w"):
    return claim_limited("default", worker, None, count, 30)


def statements(captured):
    return [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]


def reads_first(captured):
    """Whether the claim read its limits before anything else."""
    started = [sql for sql in statements(captured) if not sql.startswith(("BEGIN", "START"))]
    return "'clock'" in started[0]


@override_settings(OUTBOX=ROOMY)
def test_under_limits_with_room_a_claim_takes_a_whole_batch_and_its_tokens():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 120)
    first = claim()
    assert len(first.jobs) == 50
    assert not first.held_back
    second = claim(worker="other")
    assert len(second.jobs) == 50
    assert not {job.id for job in first.jobs} & {job.id for job in second.jobs}
    bucket = LimitState.objects.get(kind="queue", name="crm", key="")
    assert bucket.tokens is not None
    # The last batch's 50 taken from a bucket refilled since (100 tokens a millisecond).
    assert bucket.tokens <= 100_000 - 50


@override_settings(OUTBOX=ROOMY)
def test_the_next_batch_reads_no_limits_before_it_claims():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 150)
    claim()  # Creates the limit's row.
    limited_claims._room_known.clear()
    with CaptureQueriesContext(connection) as first:
        claim()
    with CaptureQueriesContext(connection) as second:
        claim()
    # The first batch left every limit with room for the next: it claims first, then reads
    # the limits under their locks, as every batch does (once in all, where the write lock
    # is taken at BEGIN and the first read would be exact).
    assert reads_first(first)
    assert not reads_first(second)
    if not queries_for(connection).one_writer:
        assert len(statements(second)) == len(statements(first)) - 1


def test_a_batch_past_a_cap_rolls_back_and_the_careful_claim_takes_what_fits():
    tasks.capped.enqueue_many([{"n": n} for n in range(10)])
    # As if the last batch had seen room for 50 (another worker filled it since).
    limited_claims._room_known["default"] = (50, HeldBack())
    claimed = claim()
    assert len(claimed.jobs) == 3
    assert claimed.held_back
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 3
    waiting = Job.objects.filter(task_name=tasks.capped.name, status=JobStatus.READY)
    assert waiting.count() == 7
    assert set(waiting.values_list("attempts", flat=True)) == {0}


@override_settings(OUTBOX=ROOMY)
def test_a_batch_of_a_paused_limit_rolls_back_and_its_jobs_wait():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 10)
    claim(count=2)
    job = claim(count=1).jobs[0]
    pause("default", job, 30, per="queue")
    assert "default" in limited_claims._room_known
    paused = claim()
    assert paused.jobs == []
    assert paused.held_back
    assert paused.retry_in is not None
    assert 29 < paused.retry_in <= 30
    assert Job.objects.filter(status=JobStatus.READY).count() == 7


@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 60}}})
def test_a_limit_with_room_for_part_of_a_batch_is_left_to_the_careful_claim():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 100)
    assert len(claim().jobs) == 50
    # Room for 10: the batch holds the queue back, the careful claim takes the 10.
    rest = claim()
    assert len(rest.jobs) == 10
    assert rest.held_back
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 60
