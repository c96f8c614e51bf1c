"""The limited claim of limits with room to spare, in one transaction: the limits' rows
locked first, the running jobs counted under the locks, the jobs claimed and their tokens
taken. One round trip on PostgreSQL (sent at once); a few statements elsewhere, nothing but
them while the locks (SQLite's write lock) are held. Limits near their end, paused keys and
missing rows are left to the careful claim."""

import datetime
import threading

import pytest
from django.db import connection, connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.limits import claims
from django_outbox.limits.claims import claim_limited
from django_outbox.limits.pauses import pause
from django_outbox.models import Job, JobStatus, LimitState
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

#: What the one-trip claim sends, by database: PostgreSQL's one round trip; SQLite's BEGIN
#: IMMEDIATE (the write lock stands for the rows' locks), the read, the claim, the tokens,
#: COMMIT; MariaDB's START TRANSACTION, the wholes' rows locked, the read, the jobs picked and
#: claimed, the tokens, COMMIT.
ONE_TRIP_STATEMENTS = {
    "postgresql": ["FOR UPDATE"],
    "sqlite": [
        "BEGIN IMMEDIATE",
        "task_name, queue, NULL",
        "UPDATE django_outbox_job",
        "tokens = CASE id",
        "COMMIT",
    ],
    "mysql": [
        "START TRANSACTION",
        "FOR UPDATE",
        "task_name, queue, NULL",
        "FOR UPDATE SKIP LOCKED",
        "UPDATE django_outbox_job",
        "tokens = CASE id",
        "COMMIT",
    ],
}
#: What tells a one-trip claim's statements apart from the careful claim's.
ONE_TRIP_MARK = (
    "clock_timestamp()" if connection.vendor == "postgresql" else "task_name, queue, NULL"
)


def one_trip(captured):
    return any(ONE_TRIP_MARK in query["sql"] for query in captured.captured_queries)


ROOMY = {"QUEUES": {"crm": {"CONCURRENCY": 1000, "RATE_LIMIT": "100000/s"}}}


def claim(count=50, worker="w"):
    return claim_limited("default", worker, None, count, 30)


def running(task=None):
    jobs = Job.objects.filter(status=JobStatus.RUNNING)
    return (jobs.filter(task_name=task.name) if task else jobs).count()


@override_settings(OUTBOX=ROOMY)
def test_under_limits_with_room_a_claim_is_one_round_trip_and_takes_its_tokens():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 120)
    claim(count=1)  # Creates the limits' rows: once per process.
    with CaptureQueriesContext(connection) as captured:
        first = claim()
    sent = [query["sql"] for query in captured.captured_queries]
    expected = ONE_TRIP_STATEMENTS[connection.vendor]
    assert len(sent) == len(expected)
    assert all(part in sql for part, sql in zip(expected, sent, strict=True))
    assert len(first.jobs) == 50
    assert not first.held_back
    second = claim(worker="other")
    assert len(second.jobs) == 50
    assert not {job.id for job in first.jobs} & {job.id for job in second.jobs}
    bucket = LimitState.objects.get(kind="queue", name="crm", key="")
    assert bucket.tokens is not None
    # The 101 taken from a bucket refilled since (100 tokens a millisecond), never above it.
    assert bucket.tokens <= 100_000 - 50
    held = Job.objects.filter(pk__in=[job.id for job in first.jobs])
    assert set(held.values_list("worker_id", flat=True)) == {"w"}
    leases = held.values_list("lease_expires_at", flat=True)
    assert all(lease is not None and lease > timezone.now() for lease in leases)


@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 120}}})
def test_a_cap_near_its_end_is_claimed_carefully_up_to_it():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 200)
    assert len(claim().jobs) == 50
    # Room for 70, not for 50 with half the cap to spare: the careful claim takes the 50.
    assert len(claim().jobs) == 50
    last = claim()
    assert len(last.jobs) == 20
    assert last.held_back
    assert running() == 120
    assert claim().jobs == []


@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 100}}})
def test_a_dead_workers_jobs_count_until_their_leases_expire_and_not_after():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 140)
    # A worker that claimed 40, then died: its jobs stay running until their leases expire.
    dead = claim(count=40, worker="dead").jobs
    assert len(dead) == 40
    # 50 - 40 running: room for 10 with half the cap to spare.
    assert len(claim(count=10).jobs) == 10
    assert len(claim(count=60).jobs) == 50
    assert claim(count=60).jobs == []
    assert running() == 100
    Job.objects.filter(pk__in=[job.id for job in dead]).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert len(claim(count=60).jobs) == 40


@override_settings(OUTBOX=ROOMY)
def test_a_paused_keys_jobs_wait_and_the_others_are_claimed():
    paused = tasks.noop.using(queue="crm").enqueue_many([{}] * 3, limit_key="acct")
    others = tasks.noop.using(queue="crm").enqueue_many([{}] * 3, limit_key="other")
    first = claim(count=1)
    pause("default", first.jobs[0], 30, per="key")
    paused_key = Job.objects.get(pk=first.jobs[0].id).limit_key
    rest = claim()
    assert {Job.objects.get(pk=job.id).limit_key for job in rest.jobs} == (
        {"acct", "other"} - {paused_key}
    )
    assert rest.held_back
    assert rest.retry_in is not None
    assert 29 < rest.retry_in <= 30
    waiting = Job.objects.filter(status=JobStatus.READY)
    assert set(waiting.values_list("limit_key", flat=True)) == {paused_key}
    assert set(waiting.values_list("attempts", flat=True)) == {0}
    assert len(paused.ids) + len(others.ids) == 6


@override_settings(OUTBOX=ROOMY)
def test_a_limits_row_deleted_holds_its_jobs_back_until_the_careful_claim_makes_it_again():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 20)
    claim(count=1)
    LimitState.objects.all().delete()
    claimed = claim(count=5)
    assert len(claimed.jobs) == 5
    bucket = LimitState.objects.get(kind="queue", name="crm", key="")
    assert bucket.tokens is not None
    assert bucket.tokens <= 100_000 - 5


@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 10}}})
def test_concurrent_claims_of_a_few_jobs_never_take_more_than_the_cap():
    # Claims of 2 fit in the cap with half to spare until 3 run: one-trip and careful claims
    # race each other from 8 connections.
    tasks.noop.using(queue="crm").enqueue_many([{}] * 100)
    claimed: list[int] = []
    errors: list[BaseException] = []

    def claimer(number: int) -> None:
        try:
            for _ in range(10):
                claimed.extend(job.id for job in claim(count=2, worker=f"w{number}").jobs)
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(claimed) == len(set(claimed)) == 10
    assert running() == 10


#: Another claim's UPDATE of the jobs ``{ids}``: running, leased for a minute.
CLAIMED_ELSEWHERE = {
    "postgresql": (
        "UPDATE django_outbox_job SET status = 'running', attempts = 1, worker_id = 'other', "
        "lease_token = gen_random_uuid(), started_at = now(), "
        "lease_expires_at = now() + interval '1 minute' WHERE id IN ({ids})"
    ),
    "mysql": (
        "UPDATE django_outbox_job SET status = 'running', attempts = 1, worker_id = 'other', "
        "lease_token = REPLACE(UUID(), '-', ''), started_at = UTC_TIMESTAMP(6), "
        "lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE id IN ({ids})"
    ),
}


@pytest.mark.row_locks
@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 100}}})
def test_a_claim_counts_what_the_claim_holding_the_limits_lock_committed(second_connection):
    jobs = tasks.noop.using(queue="crm").enqueue_many([{}] * 120)
    claim(count=1)
    Job.objects.filter(status=JobStatus.RUNNING).update(status=JobStatus.READY, attempts=0)
    # Another claim holds the limit's row and takes 95 jobs; it has not committed yet.
    second_connection.set_autocommit(False)
    with second_connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM django_outbox_limitstate WHERE kind = 'queue' AND name = 'crm' "
            "FOR UPDATE"
        )
        cursor.execute(
            CLAIMED_ELSEWHERE[connection.vendor].format(
                ids=", ".join(str(job_id) for job_id in jobs.ids[:95])
            )
        )
    claimed = []

    def claimer() -> None:
        try:
            claimed.append(claim(count=10))
        finally:
            connections.close_all()

    thread = threading.Thread(target=claimer)
    thread.start()
    thread.join(0.5)
    # The claim waits for the limit's row, then counts the 95 as running.
    assert thread.is_alive()
    second_connection.commit()
    thread.join(10)
    assert len(claimed[0].jobs) == 5
    assert running() == 100


def test_once_only_limits_at_work_hold_jobs_the_one_trip_claim_rests_for_a_while():
    tasks.capped.enqueue_many([{"n": n} for n in range(10)])
    # A cap of 3 has no room to spare for a claim of 8: the careful claim takes 3.
    assert len(claim(count=8).jobs) == 3
    claims._one_trip_resumes.clear()
    claims._one_trip_pauses.clear()
    with CaptureQueriesContext(connection) as full:
        held = claim(count=8)
    assert held.jobs == []
    assert held.held_back
    with CaptureQueriesContext(connection) as next_claim:
        assert claim(count=8).jobs == []

    # A claim that found the cap full rests the one-trip claim: the next claims (at every
    # completion, while the cap is full) go the careful way alone.
    assert one_trip(full)
    assert not one_trip(next_claim)
    # Found nothing again once the pause is over: a pause twice as long.
    assert claims._one_trip_pauses["default"] == 1.0
    claims._one_trip_resumes.clear()
    assert claim(count=8).jobs == []
    assert claims._one_trip_pauses["default"] == 2.0


@override_settings(OUTBOX=ROOMY)
def test_a_batch_with_room_while_the_one_trip_claim_rests_brings_it_back():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 20)
    claims._one_trip_resumes["default"] = float("inf")
    claims._one_trip_pauses["default"] = 16.0
    assert len(claim(count=5).jobs) == 5
    assert "default" not in claims._one_trip_resumes
    with CaptureQueriesContext(connection) as captured:
        assert len(claim(count=5).jobs) == 5
    assert one_trip(captured)
    if connection.vendor == "postgresql":
        # One round trip (after the rows this process had not seen yet are created).
        # (Sent as one simple query, "BEGIN;...;COMMIT", where statements are not prepared.)
        statements = [query["sql"] for query in captured.captured_queries]
        assert "clock_timestamp()" in statements[-1]
        assert not any("FOR UPDATE" in sql for sql in statements[:-1])
