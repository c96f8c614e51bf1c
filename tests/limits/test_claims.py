"""The limited claim: caps and rates across workers, kept by the database at claim time."""

import datetime

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_outbox.db import queries_for
from django_outbox.db.base import ClaimKind
from django_outbox.jobs.transitions import mark_succeeded
from django_outbox.limits.claims import claim_limited
from django_outbox.models import Job, JobStatus, LimitState
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def claim(count=50, worker="w", queues=None):
    return claim_limited("default", worker, queues, count, 30)


def keys_of(jobs, column="limit_key"):
    """The limit (or fair) keys of claimed ``jobs``, sorted."""
    ids = [job.id for job in jobs]
    return sorted(str(key) for key in Job.objects.filter(pk__in=ids).values_list(column, flat=True))


def running(task):
    return Job.objects.filter(task_name=task.name, status=JobStatus.RUNNING).count()


def test_a_cap_of_3_claims_3_and_holds_the_rest_back_without_using_attempts():
    tasks.capped.enqueue_many([{"n": n} for n in range(10)])
    first = claim()
    assert len(first.jobs) == 3
    assert first.held_back
    second = claim(worker="other")
    assert second.jobs == []
    assert second.held_back
    assert running(tasks.capped) == 3
    waiting = Job.objects.filter(task_name=tasks.capped.name, status=JobStatus.READY)
    assert set(waiting.values_list("attempts", flat=True)) == {0}


def test_a_finished_job_frees_its_place():
    tasks.capped.enqueue_many([{"n": n} for n in range(5)])
    jobs = claim().jobs
    assert mark_succeeded(jobs[0], "default")
    assert len(claim().jobs) == 1
    assert running(tasks.capped) == 3


def test_a_dead_workers_place_frees_when_its_lease_expires_and_not_before():
    tasks.capped.enqueue_many([{"n": n} for n in range(5)])
    dead = claim(worker="dead").jobs
    # Its lease still runs: the place is taken.
    assert claim().jobs == []
    Job.objects.filter(pk=dead[0].id).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert len(claim().jobs) == 1


def test_other_claims_never_take_limited_jobs():
    tasks.capped.enqueue_many([{"n": n} for n in range(5)])
    queries = queries_for(connection)
    for kind in (ClaimKind.PLAIN, ClaimKind.FULL, ClaimKind.FAIR):
        assert queries.claim(connection, "w", None, 10, 30, kind=kind) == []
    assert ClaimKind.LIMITED in queries.waiting_kinds(connection, None)


def test_a_cap_per_key_applies_to_each_key_and_not_to_jobs_without_one():
    for key in ("a", "b"):
        tasks.capped_per_key.enqueue_many([{"key": key}] * 5, limit_key=key)
    tasks.capped_per_key.enqueue_many([{}] * 3)
    assert keys_of(claim().jobs) == ["", "", "", "a", "a", "b", "b"]


def test_under_a_fair_key_a_capped_tenant_does_not_hold_up_the_others():
    tasks.capped_per_key.enqueue_many([{"key": "big"}] * 200, fair_key="big")
    newcomers = [
        tasks.capped_per_key.enqueue({"key": f"t{n}"}, fair_key=f"t{n}").pk for n in range(20)
    ]
    claimed = claim(count=30).jobs
    ids = {job.id for job in claimed}
    assert set(newcomers) <= ids
    assert len(ids) == 22


def test_under_a_fair_key_keys_still_take_turns():
    for key in ("a", "b", "c"):
        tasks.capped_per_key.enqueue_many([{"key": key}] * 3, fair_key=key)
    assert keys_of(claim(count=3).jobs, "fair_key") == ["a", "b", "c"]


def test_a_rate_takes_a_bucket_of_starts_then_waits_for_tokens():
    tasks.rated.enqueue_many([{"n": n} for n in range(20)])
    first = claim()
    assert len(first.jobs) == 5
    empty = claim()
    assert empty.jobs == []
    assert empty.held_back
    # One token every 12 s.
    assert empty.retry_in is not None
    assert 11 < empty.retry_in <= 12
    # A minute later, the bucket holds 5 tokens again, and no more.
    LimitState.objects.filter(name=tasks.rated.name).update(refilled_at=0)
    assert len(claim().jobs) == 5
    assert [job.attempts for job in claim().jobs] == []


def test_rate_limited_jobs_never_use_an_attempt_while_they_wait():
    tasks.rated.enqueue_many([{"n": n} for n in range(8)])
    claim()
    claim()
    waiting = Job.objects.filter(task_name=tasks.rated.name, status=JobStatus.READY)
    assert waiting.count() == 3
    assert set(waiting.values_list("attempts", flat=True)) == {0}


@override_settings(OUTBOX={"QUEUES": {"crm": {"CONCURRENCY": 2}}})
def test_a_queues_cap_counts_every_task_of_the_queue():
    tasks.noop.using(queue="crm").enqueue_many([{}] * 3)
    tasks.records_order.using(queue="crm").enqueue_many([{"label": "x"}] * 3)
    tasks.noop.enqueue_many([{}] * 3)
    assert len(claim().jobs) == 2
    # Jobs of other queues are not limited, and go to the other claims.
    assert Job.objects.filter(queue="default", limit_key__isnull=True).count() == 3


@override_settings(OUTBOX={"QUEUES": {"mail": {"RATE_LIMIT_PER_KEY": "2/m"}}})
def test_a_queues_rate_per_key():
    for account in ("a", "b"):
        tasks.noop.using(queue="mail").enqueue_many([{}] * 4, limit_key=account)
    assert keys_of(claim().jobs) == ["a", "a", "b", "b"]


def test_the_claim_honours_its_queues():
    tasks.capped.using(queue="elsewhere").enqueue_many([{}] * 2)
    assert claim(queues=["default"]).jobs == []
    assert len(claim(queues=["elsewhere"]).jobs) == 2
