"""Retry pacing: once a retried job fails again, the other due retries of its queue wait for the
worker's next poll; new jobs keep flowing."""

import datetime
import time

import pytest
from django.db import connection

from django_outbox.db import queries_for
from django_outbox.models import Job, JobStatus
from django_outbox.worker.pacing import RetryPacing
from tests.helpers import run_worker
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def attempt_times(job):
    """When each attempt of ``job`` failed, from its error history."""
    errors = Job.objects.get(pk=job.pk).errors
    return {entry["attempt"]: datetime.datetime.fromisoformat(entry["at"]) for entry in errors}


@pytest.fixture
def fast_retries(settings):
    settings.OUTBOX = {
        **settings.OUTBOX,
        "POLL_SECONDS": 0.6,
        "RETRY": {"BASE_DELAY": 0, "MAX_DELAY": 0, "JITTER": 0},
    }


@pytest.mark.parametrize("paced", [True, False])
def test_a_retry_that_fails_again_holds_back_the_queues_other_retries(
    settings, fast_retries, paced
):
    if not paced:
        settings.OUTBOX = {**settings.OUTBOX, "QUEUES": {"default": {"PACE_RETRIES": False}}}
    first = tasks.always_fails.enqueue()
    second = tasks.always_fails.enqueue()
    stats = run_worker(concurrency=1)
    assert stats.claimed == 6  # Both jobs, 3 attempts each, all failed.
    assert {Job.objects.get(pk=job.pk).status for job in (first, second)} == {JobStatus.FAILED}
    # The first job's second attempt (a retry) failed again: the second job's retry waited a
    # poll (0.6 s) when pacing, not when the queue opts out.
    gap = (attempt_times(second)[2] - attempt_times(first)[2]).total_seconds()
    if paced:
        assert gap >= 0.5, gap
    else:
        assert gap < 0.4, gap


def test_while_retries_are_held_back_new_jobs_and_other_queues_are_claimed():
    retrying = tasks.noop.enqueue()
    Job.objects.filter(pk=retrying.pk).update(status=JobStatus.RETRYING, attempts=1)
    ready = tasks.noop.enqueue()
    other_queue_retry = tasks.noop.enqueue(queue="other")
    Job.objects.filter(pk=other_queue_retry.pk).update(status=JobStatus.RETRYING, attempts=1)
    claimed = queries_for(connection).claim(connection, "w", None, 10, 30, ["default"])
    assert {job.id for job in claimed} == {ready.pk, other_queue_retry.pk}
    assert queries_for(connection).claim(connection, "w", None, 10, 30)[0].id == retrying.pk


def test_the_pause_lasts_one_poll_and_only_for_queues_that_pace(settings):
    settings.OUTBOX = {**settings.OUTBOX, "QUEUES": {"bulk": {"PACE_RETRIES": False}}}
    pacing = RetryPacing(pause_seconds=0.2)
    pacing.retry_failed_again("default")
    pacing.retry_failed_again("bulk")
    assert pacing.paused() == ["default"]
    resume = pacing.seconds_to_resume()
    assert resume is not None
    assert 0 < resume <= 0.2
    time.sleep(0.25)
    assert pacing.paused() == []
    assert pacing.seconds_to_resume() is None


def test_pace_retries_must_be_a_boolean(settings):
    from django_outbox.checks import check_outbox_setting

    settings.OUTBOX = {"QUEUES": {"emails": {"PACE_RETRIES": "yes"}}}
    errors = check_outbox_setting()
    assert [error.id for error in errors] == ["django_outbox.E008"]
    assert "PACE_RETRIES'] must be True or False" in errors[0].msg
