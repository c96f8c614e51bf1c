"""Log lines about jobs: loggers named by module, readable text, and structured fields."""

import logging
import re

import pytest

from django_outbox.claimed import ClaimedJob
from django_outbox.models import Job
from django_outbox.worker import job_logs as logs
from django_outbox.worker.job_logs import JOB_FIELDS, log_job
from tests.helpers import REPO, run_worker
from tests.testapp import tasks

#: What every line about a job carries, and a LogRecord never has of its own.
FIELDS = {*JOB_FIELDS, "event"}


def job_records(caplog, event):
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def assert_fields(record, job, *, attempt, worker_id, ran=True):
    assert record.job == job.pk
    assert record.task == job.task_name
    assert record.queue == job.queue
    assert record.attempt == attempt
    assert record.worker == worker_id
    if ran:
        assert isinstance(record.duration_ms, float)
        assert record.duration_ms >= 0
    else:
        # Logged as the handler starts: no duration yet.
        assert record.duration_ms is None
    # The same facts, readable, in the text.
    message = record.getMessage()
    assert message.startswith(f"job {record.event} job={job.pk} task={job.task_name} ")
    assert f" queue={job.queue} attempt={attempt} duration_ms=" in message
    assert f" worker={worker_id}" in message


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("task", [tasks.noop, tasks.noop_non_atomic], ids=["atomic", "batched"])
def test_a_success_is_logged_with_the_jobs_fields(caplog, task):
    job = task.enqueue({})
    with caplog.at_level(logging.DEBUG, logger="django_outbox"):
        run_worker(worker_id="logs-1")
    (started,) = job_records(caplog, "started")
    (succeeded,) = job_records(caplog, "succeeded")
    assert succeeded.levelno == logging.INFO
    assert succeeded.name == "django_outbox.worker.runner"
    assert_fields(started, job, attempt=1, worker_id="logs-1", ran=False)
    assert_fields(succeeded, job, attempt=1, worker_id="logs-1")


@pytest.mark.django_db(transaction=True)
def test_a_retry_and_a_failure_are_logged_with_the_jobs_fields_and_the_error(caplog):
    job = tasks.always_fails.enqueue({})
    Job.objects.filter(pk=job.pk).update(max_attempts=2)
    with caplog.at_level(logging.INFO, logger="django_outbox"):
        run_worker(worker_id="logs-2")
        Job.objects.filter(pk=job.pk).update(run_at=Job.objects.get(pk=job.pk).enqueued_at)
        run_worker(worker_id="logs-2")
    (retrying,) = job_records(caplog, "will retry")
    (failed,) = job_records(caplog, "failed")
    assert retrying.levelno == logging.WARNING
    assert failed.levelno == logging.ERROR
    assert_fields(retrying, job, attempt=1, worker_id="logs-2")
    assert_fields(failed, job, attempt=2, worker_id="logs-2")
    assert re.search(r" retry_in=\d+\.\ds error=\w+", retrying.getMessage())
    assert " error=" in failed.getMessage()
    # The caller's function, not the helper's.
    assert failed.funcName == "_fail"


def claimed_job() -> ClaimedJob:
    return ClaimedJob(
        id=7,
        task_name="t",
        queue="q",
        stored_payload="{}",
        attempts=1,
        max_attempts=1,
        priority=0,
        lease_token=None,  # type: ignore[arg-type]
        worker_id="w",
    )


def test_a_disabled_level_builds_and_formats_nothing(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("job_fields was called for a line no one logs")

    monkeypatch.setattr(logs, "job_fields", fail)
    logger = logging.getLogger("django_outbox.tests_disabled")
    logger.setLevel(logging.WARNING)
    log_job(logger, logging.INFO, claimed_job(), "succeeded")


def test_the_field_names_are_not_log_record_attributes():
    """``extra`` may not overwrite a LogRecord attribute: logging raises KeyError."""
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    assert not FIELDS & set(vars(record))
    assert not FIELDS & {"message", "asctime"}


def test_before_the_handler_starts_the_duration_is_none(caplog):
    logger = logging.getLogger("django_outbox.tests_fields")
    with caplog.at_level(logging.INFO, logger="django_outbox.tests_fields"):
        log_job(logger, logging.INFO, claimed_job(), "claimed", "extra=%s", 5)
    (record,) = caplog.records
    assert record.duration_ms is None
    assert record.getMessage() == (
        "job claimed job=7 task=t queue=q attempt=1 duration_ms=None worker=w extra=5"
    )


def test_every_module_logs_on_a_logger_named_after_itself():
    """Loggers are ``logging.getLogger(__name__)``: settings route and silence them by module."""
    offenders = []
    for path in sorted((REPO / "django_outbox").rglob("*.py")):
        for line in path.read_text().splitlines():
            match = re.match(r"\s*logger = logging\.getLogger\((.*)\)", line)
            if match and match.group(1) != "__name__":
                offenders.append(f"{path.relative_to(REPO)}: {line.strip()}")
    assert offenders == []
