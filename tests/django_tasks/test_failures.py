"""A Django task's failures read as Django's backends report them; retries are opt-in."""

from typing import TYPE_CHECKING

import django
import pytest
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured

from django_outbox.apps import uses_task_backend
from django_outbox.models import Job, JobStatus
from tests.helpers import run_worker

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
    ),
]

if TYPE_CHECKING or uses_task_backend():
    if TYPE_CHECKING or django.VERSION >= (6, 0):
        from django.tasks import TaskResultStatus, task_backends
        from django.tasks.exceptions import InvalidTask
    else:
        from django_tasks import TaskResultStatus, task_backends
        from django_tasks.exceptions import InvalidTaskError as InvalidTask

    from django_outbox.backends import OutboxBackend, max_attempts, options_errors
    from tests.testapp import django_tasks


def test_retries_opted_in_for_a_backend_run_the_task_again_until_it_succeeds():
    result = django_tasks.fails_until_third_attempt.enqueue()
    assert Job.objects.get(pk=result.id).max_attempts == 3
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 3
    # Every failed attempt's error, oldest first.
    assert [error.traceback.splitlines()[-1] for error in result.errors] == [
        "ValueError: attempt 1",
        "ValueError: attempt 2",
    ]
    assert len(result.worker_ids) == 3
    assert all(result.worker_ids)


def test_a_retried_task_that_keeps_failing_ends_failed_with_every_error_and_worker():
    result = django_tasks.always_fails_retried.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    assert len(result.errors) == 3
    assert len(result.worker_ids) == 3
    assert all(result.worker_ids)


def test_a_task_s_own_max_attempts_keeps_every_error_beyond_the_error_history():
    # OUTBOX["ERROR_HISTORY"] keeps 10; a Django task's result lists all its attempts.
    result = django_tasks.fails_twelve_times.enqueue()
    assert Job.objects.get(pk=result.id).max_attempts == 12
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 12
    assert len(result.errors) == 12
    assert len(result.worker_ids) == 12
    assert all(result.worker_ids)


def test_a_return_value_json_cannot_hold_is_not_retried_even_with_retries_on():
    result = django_tasks.returns_a_set_retried.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert [error.exception_class for error in result.errors] == [TypeError]
    assert Job.objects.get(pk=result.id).status == JobStatus.FAILED


def test_max_attempts_refuses_a_count_out_of_range():
    for bad in (0, -1, True, 1.5, "3", 1001):
        with pytest.raises(InvalidTask, match="max_attempts"):
            max_attempts(bad)  # type: ignore[arg-type]


def test_max_attempts_above_task_works_too():
    decorated = max_attempts(4)(django_tasks.noop)
    backend = task_backends["default"]
    assert isinstance(backend, OutboxBackend)
    try:
        assert decorated is django_tasks.noop
        assert backend.max_attempts_of(django_tasks.noop) == 4
    finally:
        del django_tasks.noop.func.outbox_max_attempts  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"ATOMC": False}, "unknown key 'ATOMC'. Did you mean 'ATOMIC'?"),
        ({"MAX_ATTEMPT": 3}, "unknown key 'MAX_ATTEMPT'. Did you mean 'MAX_ATTEMPTS'?"),
        ({"COLOUR": "red"}, "unknown key 'COLOUR'. The keys are ATOMIC, MAX_ATTEMPTS."),
        ({"ATOMIC": "no"}, "OPTIONS['ATOMIC'] must be True or False, not 'no'."),
        ({"MAX_ATTEMPTS": 0}, "OPTIONS['MAX_ATTEMPTS']: max_attempts must be an integer"),
        ({"MAX_ATTEMPTS": 5000}, "must be at most 1000"),
        ([], "OPTIONS must be a dict, not list."),
    ],
)
def test_options_errors_name_the_problem(options, problem):
    (found,) = options_errors(options)
    assert problem in found


def test_the_checks_report_a_misconfigured_backend_and_enqueue_refuses_it():
    backend = OutboxBackend("typo", {"OPTIONS": {"ATOMC": False}, "QUEUES": ["default", ""]})
    errors = list(backend.check())
    assert [error.id for error in errors] == ["django_outbox.E061", "django_outbox.E062"]
    assert all(isinstance(error, Error) for error in errors)
    assert "Did you mean 'ATOMIC'?" in errors[0].msg
    with pytest.raises(ImproperlyConfigured, match=r"misconfigured.*ATOMC"):
        backend.enqueue(django_tasks.noop, [], {})
    assert not Job.objects.exists()


def test_the_checks_report_the_app_missing_from_installed_apps(settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "django_outbox"]
    errors = list(OutboxBackend("default", {}).check())
    assert [error.id for error in errors] == ["django_outbox.E060"]
    assert "'django_outbox' to INSTALLED_APPS" in errors[0].hint


def test_the_configured_backends_pass_the_checks():
    for backend in task_backends.all():
        assert list(backend.check()) == []


def live_worker(worker_id, queues):
    from django.utils import timezone

    from django_outbox.models import WorkerProcess

    WorkerProcess.objects.create(
        worker_id=worker_id,
        instance="00000000-0000-0000-0000-000000000001",
        host="test",
        pid=1,
        queues=queues,
        concurrency=1,
        started_at=timezone.now(),
        heartbeat_seconds=10,
    )


def test_a_queue_no_live_worker_serves_is_a_warning_with_the_database_checks():
    from django_outbox.checks import check_task_queues_served

    live_worker("w-1", ["default"])
    (warning,) = check_task_queues_served(databases=["default"])
    assert warning.id == "django_outbox.W060"
    assert "TASKS['default'] lists the queue 'emails'" in warning.msg
    assert "run_outbox_worker --queue emails" in str(warning.hint)
    # Without the database checks nothing is read, nor known.
    assert check_task_queues_served(databases=None) == []
    # A worker of every queue serves it.
    live_worker("w-2", [])
    assert check_task_queues_served(databases=["default"]) == []


def test_no_live_worker_is_no_warning():
    from django_outbox.checks import check_task_queues_served

    assert check_task_queues_served(databases=["default"]) == []


def test_get_result_of_a_row_naming_an_undeclared_task_raises_django_s_invalid_task():
    from django_outbox.backends import TASK_NAME, UnknownDjangoTask

    job = Job.objects.create(
        task_name=TASK_NAME,
        queue="default",
        max_attempts=1,
        payload={"task": "os.remove", "args": [], "kwargs": {}},
    )
    with pytest.raises(InvalidTask, match=r"No Django task 'os\.remove' is declared") as raised:
        task_backends["default"].get_result(str(job.pk))
    assert isinstance(raised.value, UnknownDjangoTask)
