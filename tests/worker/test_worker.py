"""The worker runs jobs through their statuses: succeeded, retrying, failed."""

import datetime
import uuid

import pytest
from django.utils import timezone

from django_outbox import current_job, signals
from django_outbox.models import Job, JobStatus
from django_outbox.worker.runner import Outcome
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_that_returns_succeeds_and_its_writes_commit():
    job = tasks.write_note.enqueue({"text": "hello"})
    stats = run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.attempts == 1
    assert job.started_at is not None
    assert job.finished_at is not None
    assert job.finished_at >= job.started_at
    assert job.worker_id
    assert job.lease_token is None
    assert stats.outcomes[Outcome.SUCCEEDED] == 1
    # The handler read its own job id through current_job().
    assert Note.objects.get().job_id == job.pk


def test_a_job_that_raises_retries_then_fails_with_every_error_kept(settings):
    settings.OUTBOX = {**settings.OUTBOX, "RETRY": {"BASE_DELAY": 0, "MAX_DELAY": 0}}
    job = tasks.always_fails.enqueue({"message": "smtp down"})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == job.max_attempts == 3
    assert job.last_error == "RuntimeError: smtp down"
    assert "Traceback" in job.last_traceback
    assert "raise RuntimeError" in job.last_traceback
    assert [entry["attempt"] for entry in job.errors] == [1, 2, 3]
    assert all(entry["error"] == "RuntimeError: smtp down" for entry in job.errors)
    assert all(entry["worker"] == job.worker_id for entry in job.errors)
    assert job.finished_at is not None
    # atomic=True: the note the handler wrote before raising was rolled back each time.
    assert not Note.objects.exists()


def test_a_failed_attempt_waits_for_its_backoff(settings):
    settings.OUTBOX = {
        **settings.OUTBOX,
        "RETRY": {"BASE_DELAY": 60, "MAX_DELAY": 600, "JITTER": 0},
    }
    job = tasks.always_fails.enqueue({})
    before = timezone.now()
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.RETRYING
    assert job.attempts == 1
    assert before + datetime.timedelta(seconds=55) < job.run_at
    assert job.run_at < timezone.now() + datetime.timedelta(seconds=65)
    assert job.lease_token is None
    assert job.finished_at is None


def test_retry_succeeds_on_a_later_attempt():
    job = tasks.fails_once.enqueue(None)
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.attempts == 2
    assert job.errors[0]["error"] == "ConnectionError: first attempt fails"
    assert list(Note.objects.values_list("text", flat=True)) == ["second attempt"]


def test_error_history_is_capped_to_the_newest(settings):
    settings.OUTBOX = {**settings.OUTBOX, "ERROR_HISTORY": 2}
    job = tasks.always_fails.enqueue({})
    run_worker()
    job.refresh_from_db()
    assert [entry["attempt"] for entry in job.errors] == [2, 3]


def test_retry_strategy_can_honour_retry_after():
    job = tasks.calls_api.enqueue({"error": "rate", "retry_after": 120})
    before = timezone.now()
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.RETRYING
    assert before + datetime.timedelta(seconds=115) < job.run_at
    assert job.run_at < timezone.now() + datetime.timedelta(seconds=125)


def test_retry_strategy_can_give_up():
    job = tasks.calls_api.enqueue({"error": "bad"})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 1
    assert "gave up" in job.last_error


def test_retry_strategy_returning_none_falls_back_to_the_backoff():
    job = tasks.calls_api.enqueue({"error": "other"})
    run_worker()
    job.refresh_from_db()
    # The task's policy has no delay: every attempt ran in the same burst.
    assert job.status == JobStatus.FAILED
    assert job.attempts == 5


def test_exceptions_in_give_up_on_are_never_retried():
    job = tasks.gives_up_on_key_error.enqueue({})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 1
    assert "give_up_on" in job.last_error


def test_non_atomic_jobs_keep_their_writes_when_they_fail():
    job = tasks.non_atomic_fails.enqueue({})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert Note.objects.filter(text="kept although the job failed").count() == 2


def test_a_job_of_an_unknown_task_fails_clearly_and_the_worker_goes_on():
    stranger = Job.objects.create(
        task_name="billing.tasks.renamed", queue="default", max_attempts=2
    )
    good = tasks.write_note.enqueue({"text": "still runs"})
    run_worker()
    stranger.refresh_from_db()
    good.refresh_from_db()
    assert good.status == JobStatus.SUCCEEDED
    assert stranger.status == JobStatus.FAILED
    assert stranger.attempts == 2
    assert "No task named 'billing.tasks.renamed' is registered" in stranger.last_error


def test_max_jobs_stops_after_that_many():
    jobs = [tasks.noop.enqueue({"n": n}) for n in range(5)]
    stats = run_worker(max_jobs=2)
    assert stats.claimed == 2
    assert Job.objects.succeeded().count() == 2
    assert Job.objects.filter(pk__in=[job.pk for job in jobs], status=JobStatus.READY).count() == 3


def test_queues_limit_what_a_worker_runs():
    email = tasks.write_note.enqueue({"text": "email"})
    other = tasks.noop.enqueue({})
    run_worker(queues=["emails"])
    assert Job.objects.get(pk=email.pk).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=other.pk).status == JobStatus.READY


def test_higher_priority_runs_first_then_oldest():
    for label, priority in [("low", -5), ("normal-1", 0), ("urgent", 10), ("normal-2", 0)]:
        tasks.records_order.enqueue({"label": label}, priority=priority)
    run_worker(concurrency=1)
    order = list(Note.objects.order_by("pk").values_list("text", flat=True))
    assert order == ["urgent", "normal-1", "normal-2", "low"]


def test_burst_leaves_jobs_scheduled_for_later():
    later = tasks.noop.enqueue({}, delay=3600)
    now = tasks.noop.enqueue({})
    run_worker()
    assert Job.objects.get(pk=now.pk).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=later.pk).status == JobStatus.READY


def test_lifecycle_signals_are_sent():
    seen = []

    def record(signal_name):
        def receiver(sender, job, **kwargs):
            seen.append((signal_name, job.task_name.rsplit(".", 1)[-1], job.attempts))

        return receiver

    receivers = {
        name: record(name)
        for name in ("job_started", "job_succeeded", "job_retrying", "job_failed")
    }
    for name, receiver in receivers.items():
        getattr(signals, name).connect(receiver)
    try:
        tasks.fails_once.enqueue(None)
        tasks.gives_up_on_key_error.enqueue({})
        run_worker(concurrency=1)
    finally:
        for name, receiver in receivers.items():
            getattr(signals, name).disconnect(receiver)
    assert ("job_retrying", "fails_once", 1) in seen
    assert ("job_succeeded", "fails_once", 2) in seen
    assert ("job_failed", "gives_up_on_key_error", 1) in seen
    assert sum(1 for name, *_ in seen if name == "job_started") == 3


def test_current_job_outside_a_job_is_an_error():
    with pytest.raises(LookupError, match="only available inside a task"):
        current_job()


def test_handlers_see_a_lease_token_per_attempt():
    tokens = []
    original = tasks.fails_once.func

    def spy(payload):
        tokens.append(current_job().lease_token)
        return original(payload)

    tasks.fails_once.func = spy
    try:
        tasks.fails_once.enqueue(None)
        run_worker()
    finally:
        tasks.fails_once.func = original
    assert len(tokens) == 2
    assert all(isinstance(token, uuid.UUID) for token in tokens)
    assert tokens[0] != tokens[1]


def test_a_worker_refuses_to_run_inside_the_callers_transaction():
    from django.db import transaction

    from django_outbox.worker.loop import Worker

    with transaction.atomic(), pytest.raises(RuntimeError, match="inside an atomic block"):
        Worker(burst=True).run()


def test_finished_jobs_do_not_trigger_claims_when_the_last_claim_found_the_queue_empty(
    settings, monkeypatch
):
    import threading

    from django.db import connection

    from django_outbox.db import queries_for
    from django_outbox.worker.loop import Worker

    settings.OUTBOX = {**settings.OUTBOX, "POLL_SECONDS": 30}
    queries = queries_for(connection)
    claims = []
    real_claim = queries.claim

    def counting_claim(*args, **kwargs):
        jobs = real_claim(*args, **kwargs)
        claims.append(len(jobs))
        return jobs

    monkeypatch.setattr(queries, "claim", counting_claim)
    # No LISTEN on PostgreSQL: once connected, the listener wakes the loop to look for what
    # committed before it listened, which is a claim too (one that finds nothing, after the
    # first claim when the listener connects late), not one a completion made.
    monkeypatch.setattr(queries, "listens", False)
    jobs = [tasks.noop.enqueue({"n": n}) for n in range(3)]
    worker = Worker(concurrency=4)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: Job.objects.succeeded().count() == 3)
    finally:
        worker.request_stop()
        thread.join(10)
    # One claim found 3 jobs for 4 free threads; their completions claimed nothing more.
    assert claims == [3]
    assert {job.pk for job in jobs} == set(Job.objects.succeeded().values_list("pk", flat=True))
