"""OUTBOX["CONTEXT"]: context variables captured at enqueue, restored around the job's run."""

import logging

import pytest

from django_outbox import PayloadError
from django_outbox.checks import check_outbox_setting
from django_outbox.models import Job
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.logcontext import request_id
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "tests.testapp.logcontext.request_id"


@pytest.fixture
def captured(settings):
    settings.OUTBOX = {**settings.OUTBOX, "CONTEXT": [PATH]}


@pytest.fixture
def in_request():
    """Code that enqueues inside a request whose id is "req-42"."""
    token = request_id.set("req-42")
    yield
    request_id.reset(token)


def test_the_handler_sees_the_value_the_enqueuer_had(captured, in_request):
    job = tasks.notes_request_id.enqueue()
    assert Job.objects.get(pk=job.pk).context == {PATH: "req-42"}
    request_id.set("req-other")  # The worker's own context has nothing to do with it.
    run_worker()
    assert Note.objects.get().text == "request req-42"


def test_enqueue_many_captures_it_for_every_job(captured, in_request):
    jobs = tasks.notes_request_id.enqueue_many([{}, {}])
    assert [job.context for job in Job.objects.filter(pk__in=jobs.ids)] == [{PATH: "req-42"}] * 2
    run_worker()
    assert set(Note.objects.values_list("text", flat=True)) == {"request req-42"}


def test_the_workers_log_lines_for_the_job_carry_it(captured, caplog):
    class RequestIdFilter(logging.Filter):
        def filter(self, record):
            record.request_id = request_id.get("-")
            return True

    token = request_id.set("req-42")
    tasks.noop_non_atomic.enqueue()  # Its success is logged by the completer thread.
    tasks.noop.enqueue()
    request_id.reset(token)
    # On the handler: it sees the records of every django_outbox module's logger.
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.DEBUG, logger="django_outbox"):
        run_worker()
    job_lines = [r for r in caplog.records if r.getMessage().startswith("job ")]
    assert {r.getMessage().split(" job=")[0] for r in job_lines} >= {"job started", "job succeeded"}
    assert {r.request_id for r in job_lines} == {"req-42"}
    # And not beyond the job: the worker's own lines have no request id.
    other = [r for r in caplog.records if r.getMessage().startswith("worker ")]
    assert other
    assert {r.request_id for r in other} == {"-"}


def test_a_variable_without_a_value_is_not_captured(captured):
    job = tasks.notes_request_id.enqueue()
    assert Job.objects.get(pk=job.pk).context is None
    run_worker()
    assert Note.objects.get().text == "request none"


def test_nothing_is_captured_unless_configured(in_request):
    job = tasks.noop.enqueue()
    assert Job.objects.get(pk=job.pk).context is None


def test_a_value_json_cannot_hold_is_a_clear_error_at_enqueue(captured):
    token = request_id.set(object())  # type: ignore[arg-type]
    try:
        with pytest.raises(
            PayloadError, match=f"OUTBOX\\['CONTEXT'\\]: the context variable {PATH}"
        ):
            tasks.noop.enqueue()
    finally:
        request_id.reset(token)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ("tests.testapp.logcontext.request_id", "must be a list"),
        (["tests.testapp.logcontext.nothing"], "cannot be imported"),
        (["tests.testapp.tasks.noop"], "is not a contextvars.ContextVar"),
        ([42], "entries must be dotted paths"),
    ],
)
def test_bad_context_settings_are_system_check_errors(settings, context, message):
    settings.OUTBOX = {"CONTEXT": context}
    errors = check_outbox_setting()
    assert [error.id for error in errors] == ["django_outbox.E011"]
    assert message in errors[0].msg
