"""Workers under limits: caps never exceeded, RateLimited pauses a whole limit."""

import time

import pytest
from django.conf import settings
from django.db.models import F
from django.test import override_settings

from django_outbox.limits.claims import claim_limited
from django_outbox.models import Job, JobStatus, LimitState
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def spans(prefix="span"):
    """(start, end, running at start, label) of each run the handlers noted."""
    found = []
    for text in Note.objects.filter(text__startswith=prefix).values_list("text", flat=True):
        _, start, end, running, *label = text.split(" ")
        found.append((float(start), float(end), int(running), " ".join(label)))
    return found


def most_at_once(runs):
    """The most runs that overlapped at any moment."""
    events = sorted([(start, 1) for start, *_ in runs] + [(end, -1) for _, end, *_ in runs])
    at_once = most = 0
    for _, change in events:
        at_once += change
        most = max(most, at_once)
    return most


def test_a_worker_of_8_threads_runs_a_capped_task_3_at_a_time():
    tasks.capped.enqueue_many([{"seconds": 0.05}] * 15)
    run_worker(concurrency=8)
    runs = spans()
    assert len(runs) == 15
    assert most_at_once(runs) == 3
    assert max(running for _, _, running, _ in runs) <= 3


def test_rate_limited_pauses_the_key_and_snoozes_the_job_without_using_an_attempt():
    limited = tasks.throttled_by_service.enqueue({"limited": True, "after": 30}, limit_key="acct")
    same_key = tasks.throttled_by_service.enqueue({"n": 1}, limit_key="acct")
    other_key = tasks.throttled_by_service.enqueue({"n": 2}, limit_key="other")
    # One thread: the throttled job runs first, and pauses its key before the next claim.
    run_worker(concurrency=1)
    limited.refresh_from_db()
    assert limited.status == JobStatus.READY
    assert limited.attempts == 0
    assert Job.objects.get(pk=same_key.pk).status == JobStatus.READY
    assert Job.objects.get(pk=other_key.pk).status == JobStatus.SUCCEEDED
    pause = LimitState.objects.get(name=tasks.throttled_by_service.name, key="acct")
    claim = claim_limited("default", "w", None, 10, 30)
    assert claim.jobs == []
    assert claim.retry_in is not None
    assert 25 < claim.retry_in <= 30
    assert pause.paused_until is not None


def test_rate_limited_per_task_pauses_every_key():
    tasks.throttled_by_service.enqueue({"limited": True, "per": "task"}, limit_key="a")
    waiting = tasks.throttled_by_service.enqueue({"n": 1}, limit_key="b")
    run_worker(concurrency=1)
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.READY
    assert LimitState.objects.filter(key="", paused_until__isnull=False).count() == 1


def test_a_pause_ends_and_the_jobs_run():
    tasks.throttled_by_service.enqueue({"limited": True, "after": 60}, limit_key="a")
    waiting = tasks.throttled_by_service.enqueue({"n": 1}, limit_key="a")
    run_worker(concurrency=1)
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.READY
    # The minute has passed.
    LimitState.objects.filter(key="a").update(paused_until=F("paused_until") - 61)
    run_worker(concurrency=1, max_jobs=1)
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.SUCCEEDED


def test_a_burst_worker_waits_out_a_pause_shorter_than_a_poll():
    tasks.throttled_by_service.enqueue({"limited": True, "after": 0.3}, limit_key="a")
    waiting = tasks.throttled_by_service.enqueue({"n": 1}, limit_key="a")
    started = time.monotonic()
    with override_settings(OUTBOX={**settings.OUTBOX, "POLL_SECONDS": 1.0}):
        run_worker(concurrency=1)
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.SUCCEEDED
    assert time.monotonic() - started >= 0.3


def test_a_bad_retry_after_fails_the_attempt_with_the_reason():
    job = tasks.throttled_by_service.enqueue({"limited": True, "after": -1}, limit_key="a")
    run_worker(concurrency=1)
    job.refresh_from_db()
    # Each attempt failed (a retry, then for good): nothing paused.
    assert (job.status, job.attempts) == (JobStatus.FAILED, 2)
    assert "RateLimited(-1)" in job.last_error
    assert not LimitState.objects.filter(paused_until__isnull=False).exists()
