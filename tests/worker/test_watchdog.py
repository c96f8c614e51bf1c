"""The watchdog: stacks of jobs running past max_execute_time, and attempts past their timeout."""

import logging

import pytest

from django_outbox import InvalidTaskError, Task, signals
from django_outbox.models import Job, JobStatus
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fast_heartbeat(settings, handler_gate):
    settings.OUTBOX = {**settings.OUTBOX, "LEASE_SECONDS": 5, "HEARTBEAT_SECONDS": 0.1}


def test_a_job_past_max_execute_time_has_its_stack_logged_and_a_signal_sent(
    fast_heartbeat, worker_thread, caplog
):
    stuck = []

    def record(sender, job, seconds, stack, **kwargs):
        stuck.append((job.id, seconds, stack))

    signals.job_stuck.connect(record)
    try:
        with caplog.at_level(logging.ERROR, logger="django_outbox.worker.watchdog"):
            job = tasks.runs_long.enqueue({"seconds": 1.0})
            worker_thread(concurrency=1)
            wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    finally:
        signals.job_stuck.disconnect(record)
    # 1 s with a limit of 0.2 s: reported again after each further 0.2 s, not at every beat.
    assert 2 <= len(stuck) <= 5
    job_id, seconds, stack = stuck[0]
    assert job_id == job.pk
    assert seconds > 0.2
    # The stack is the handler's own thread's, down to where it waits.
    assert "_sleep_until_lease_lost" in stack
    assert "in runs_long" in stack
    logged = [r for r in caplog.records if "longer than max_execute_time" in r.getMessage()]
    assert logged
    assert "_sleep_until_lease_lost" in logged[0].getMessage()
    # Reported, not stopped: the job finished and succeeded.
    assert Job.objects.get(pk=job.pk).attempts == 1


def test_an_attempt_past_its_timeout_fails_and_its_writes_roll_back(fast_heartbeat, worker_thread):
    job = tasks.times_out.enqueue({})
    worker = worker_thread(concurrency=1)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.RETRYING)
    timed_out = Job.objects.get(pk=job.pk)
    assert timed_out.last_error.startswith("TimedOut: The attempt ran ")
    assert "longer than the task's timeout (0.3 s)" in timed_out.last_error
    assert "in times_out" in timed_out.last_traceback
    assert timed_out.lease_token is None
    # The handler saw lease_lost, returned, and its success was fenced: its note rolled back.
    wait_until(lambda: not worker.held.all())
    assert not Note.objects.exists()
    assert Job.objects.get(pk=job.pk).status == JobStatus.RETRYING


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), "10", True, 10**9])
def test_limits_must_be_positive_numbers_of_seconds(seconds):
    for option in ("max_execute_time", "timeout"):
        with pytest.raises(InvalidTaskError, match=f"{option} must be a number of seconds"):
            Task(lambda payload: None, name="tests.bad_limit", **{option: seconds})
