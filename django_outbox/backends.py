"""A backend for Django's tasks framework (``django.tasks``, Django 6.0+; on Django 5.2 the
``django-tasks`` backport) on the outbox.

    TASKS = {"default": {"BACKEND": "django_outbox.backends.OutboxBackend"}}

``my_task.enqueue(*args, **kwargs)`` then writes a job in the caller's transaction, like
``django_outbox.enqueue``, and ``run_outbox_worker`` runs it with leases, retries and the
admin. Each enqueue is a job of one outbox task, ``django_outbox.django_task``, whose payload
names the Django task (its module path) and holds its arguments; ``get_result(id)`` reads the
job back as a ``TaskResult``.

Failures read as Django's own backends report them: by default a task is attempted once, and
one that raises is FAILED with the exception in ``errors``. Retries are opt-in, for a backend
(``OPTIONS={"MAX_ATTEMPTS": 5}``) or a task (``@max_attempts(5)`` under ``@task``); a return
value that is not JSON fails at once either way: running the task again cannot change it.

Workers run only Django tasks declared for an outbox backend in a module they imported (the
``tasks`` module of every installed app is imported at start-up): a task's path read from a row
is looked up among those, never imported.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import django
from django.apps import apps
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task as DjangoTask
    from django.tasks.base import TaskContext, TaskError, TaskResult
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:
    try:
        # Django 5.2: the backport, django-tasks (pip install "django-outbox-queue[tasks]").
        from django_tasks import TaskResultStatus
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task as DjangoTask
        from django_tasks.base import TaskContext, TaskError, TaskResult
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as error:
        raise ImproperlyConfigured(
            "django_outbox.backends is a backend for Django's tasks framework: django.tasks "
            "(Django 6.0+) or, on Django 5.2, the django-tasks backport (pip install "
            '"django-outbox-queue[tasks]").'
        ) from error

from . import signals
from .claimed import ClaimedJob, current_job
from .conf import get_settings
from .django_task_jobs import NON_ATOMIC_TASK_NAME as NON_ATOMIC_TASK_NAME  # re-exported
from .django_task_jobs import TASK_NAME as TASK_NAME  # re-exported
from .django_task_jobs import declared
from .exceptions import OutboxError
from .models import Job, JobStatus
from .retry import GIVE_UP, RetryDecision
from .tasks.enqueue import enqueue
from .tasks.registry import task
from .validation.bounds import ERROR_HISTORY_MAX, max_attempts_error
from .validation.text import queue_name_error

_P = ParamSpec("_P")
_R = TypeVar("_R")
if TYPE_CHECKING:
    # Generic in the type stubs only.
    AnyTask = DjangoTask[..., Any]
    AnyResult = TaskResult[..., Any]

#: The Django tasks declared for an outbox backend in this process, by module path (kept in
#: django_task_jobs, which the admin reads on any Django).
_declared: dict[str, AnyTask] = declared

STATUSES: dict[str, TaskResultStatus] = {
    JobStatus.READY: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,
    JobStatus.HALTED: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

# The exception's class on the last line of a formatted traceback: "pkg.module.Error: text",
# or a builtin's bare name.
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")

#: The ``OPTIONS`` the backend reads, with their defaults: a task's writes commit with its
#: job's success (``ATOMIC``); a task is attempted once, as with Django's own backends
#: (``MAX_ATTEMPTS``; more makes a task that raises run again with its queue's backoff).
DEFAULT_OPTIONS: dict[str, Any] = {"ATOMIC": True, "MAX_ATTEMPTS": 1}
#: The most attempts a Django task may be given: every attempt's error is kept, as
#: ``TaskResult.errors`` lists them all.
ATTEMPTS_MAX = ERROR_HISTORY_MAX
#: Where ``max_attempts`` leaves a task's own number: an attribute of its function.
_ATTEMPTS_ATTRIBUTE = "outbox_max_attempts"
#: Set on the exception of a return value that is not JSON: the attempt fails for good.
_NOT_RETRIED = "outbox_not_retried"

_F = TypeVar("_F")


class UnknownDjangoTask(OutboxError, InvalidTask):
    """A job names a Django task that this worker has not seen declared."""


def _attempts_error(value: object) -> str | None:
    if problem := max_attempts_error(value):
        return problem
    if isinstance(value, int) and value > ATTEMPTS_MAX:
        return (
            f"max_attempts of a Django task must be at most {ATTEMPTS_MAX}: every attempt's "
            f"error is kept for TaskResult.errors, not {value}."
        )
    return None


def max_attempts(attempts: int) -> Callable[[_F], _F]:
    """Attempt the jobs of a Django task up to ``attempts`` times (the first run counts).

    Put it under ``@task``::

        @task
        @max_attempts(5)
        def call_payment_provider(order_id): ...

    The task's own number wins over its backend's ``OPTIONS["MAX_ATTEMPTS"]``; the delay
    between attempts is its queue's backoff (``OUTBOX["QUEUES"]``, or ``OUTBOX["RETRY"]``).
    """
    if problem := _attempts_error(attempts):
        raise InvalidTask(problem)

    def decorate(func: _F) -> _F:
        # Above @task too: the Task is a frozen dataclass, but its function is not.
        target = func.func if isinstance(func, DjangoTask) else func
        setattr(target, _ATTEMPTS_ATTRIBUTE, attempts)
        return func

    return decorate


def options_errors(options: Any) -> list[str]:
    """Return what is wrong with a backend's ``OPTIONS``: each problem, as a sentence."""
    if not isinstance(options, dict):
        return [f"OPTIONS must be a dict, not {type(options).__name__}."]
    problems = []
    for key in options:
        if key in DEFAULT_OPTIONS:
            continue
        close = difflib.get_close_matches(str(key), DEFAULT_OPTIONS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        problems.append(
            f"OPTIONS has an unknown key {key!r}.{hint} The keys are "
            f"{', '.join(sorted(DEFAULT_OPTIONS))}."
        )
    if not isinstance(options.get("ATOMIC", True), bool):
        problems.append(f"OPTIONS['ATOMIC'] must be True or False, not {options['ATOMIC']!r}.")
    if "MAX_ATTEMPTS" in options and (problem := _attempts_error(options["MAX_ATTEMPTS"])):
        problems.append(f"OPTIONS['MAX_ATTEMPTS']: {problem}")
    return problems


class OutboxBackend(BaseTaskBackend):
    """Django tasks as outbox jobs: transactional enqueue, durable, retried, in the admin."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Reported by the system checks (check()); enqueue refuses to write with them.
        self.problems = options_errors(self.options)

    def check(self, **kwargs: Any) -> Any:
        """Django's checks of the backend, run by ``manage.py check`` and every command."""
        yield from super().check(**kwargs)
        where = f"TASKS[{self.alias!r}]"
        if not apps.is_installed("django_outbox"):
            yield Error(
                f"{where} uses django_outbox.backends.OutboxBackend, but django_outbox is not "
                "in INSTALLED_APPS: its jobs table, its workers and its admin are missing.",
                hint="Add 'django_outbox' to INSTALLED_APPS and run manage.py migrate.",
                id="django_outbox.E060",
            )
        for problem in self.problems:
            yield Error(
                f"{where}: {problem}",
                hint="OPTIONS takes ATOMIC (True or False, default True) and MAX_ATTEMPTS (a "
                f"whole number from 1 to {ATTEMPTS_MAX}, default 1); see docs/django-tasks.md.",
                id="django_outbox.E061",
            )
        for queue in sorted(self.queues, key=str):
            if queue_problem := queue_name_error(queue):
                yield Error(
                    f"{where}['QUEUES'] names a queue no outbox job can have: {queue_problem}",
                    hint="Every enqueue of a task on it would fail; rename the queue.",
                    id="django_outbox.E062",
                )

    def max_attempts_of(self, task: AnyTask) -> int:
        """How many times a job of ``task`` may be attempted: the task's own number
        (``@max_attempts``), else ``OPTIONS["MAX_ATTEMPTS"]``, else once."""
        own = getattr(task.func, _ATTEMPTS_ATTRIBUTE, None)
        if own is not None:
            return int(own)
        return int(self.options.get("MAX_ATTEMPTS", DEFAULT_OPTIONS["MAX_ATTEMPTS"]))

    def validate_task(self, task: AnyTask) -> None:
        if isinstance(task.run_after, datetime.timedelta):
            # A delay from enqueue (Django's own check wants an aware datetime).
            if task.run_after < datetime.timedelta(0):
                raise InvalidTask("run_after must not be a negative timedelta.")
            task = dataclasses.replace(task, run_after=None)
        super().validate_task(task)
        # Declared (decorated) for this backend: workers may run it.
        _declared[task.module_path] = task

    def enqueue(
        self, task: DjangoTask[_P, _R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[_P, _R]:
        if self.problems:
            raise InvalidTaskBackend(
                f"The task backend {self.alias!r} is misconfigured: {' '.join(self.problems)}"
            )
        self.validate_task(task)
        try:
            payload = {
                "task": task.module_path,
                "args": normalize_json(list(args)),
                "kwargs": normalize_json(dict(kwargs)),
            }
        except TypeError as error:
            # A TypeError, as Django's own backends raise (django.utils.json.normalize_json).
            raise TypeError(f"The arguments of {task.module_path} must be JSON: {error}") from error
        job = enqueue(
            django_task if self.options.get("ATOMIC", True) else django_task_non_atomic,
            payload,
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=self.max_attempts_of(task),
            run_at=task.run_after if isinstance(task.run_after, datetime.datetime) else None,
            delay=task.run_after if isinstance(task.run_after, datetime.timedelta) else None,
        )
        result = _result_of(job, task, self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result  # type: ignore[return-value]  # the result of ``task``, typed as any

    def get_result(self, result_id: str) -> AnyResult:
        job = None
        if isinstance(result_id, int | str) and str(result_id).isdecimal():
            job = (
                Job.objects.using(get_settings().database)
                .filter(pk=int(result_id), task_name__in=(TASK_NAME, NON_ATOMIC_TASK_NAME))
                .first()
            )
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return _result_of(job, _declared_task(job.payload), self.alias)


def _declared_task(payload: Any) -> AnyTask:
    path = payload.get("task") if isinstance(payload, dict) else None
    declared = _declared.get(path) if isinstance(path, str) else None
    if declared is None:
        raise UnknownDjangoTask(
            f"No Django task {path!r} is declared for the outbox backend in this process. "
            "Define it with @django.tasks.task in the tasks module of an installed app (workers "
            "import those), with a backend whose BACKEND is "
            "django_outbox.backends.OutboxBackend."
        )
    return declared


def _result_of(job: Job, declared: AnyTask, alias: str) -> AnyResult:
    """The TaskResult that ``job`` (of ``declared``) stands for."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    errors = job.errors if isinstance(job.errors, list) else []
    try:
        task_for_job = declared.using(queue_name=job.queue, priority=job.priority)
        if isinstance(job.run_at, datetime.datetime) and job.run_at > job.enqueued_at:
            task_for_job = task_for_job.using(run_after=job.run_at)
    except InvalidTask:
        # Moved by hand to a queue (or priority) the backend does not list.
        task_for_job = declared
    result: AnyResult = TaskResult(
        task=task_for_job,
        id=str(job.pk),
        # Every status is one of the outbox's (constraint outbox_job_status_valid).
        status=STATUSES[job.status],
        enqueued_at=job.enqueued_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=[
            TaskError(
                exception_class_path=_exception_path(entry.get("traceback", "")),
                traceback=entry.get("traceback", ""),
            )
            for entry in errors
            if isinstance(entry, dict)
        ],
        worker_ids=_worker_ids(job, errors),
    )
    if job.status == JobStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.return_value)
    return result


def _worker_ids(job: Job, errors: list[Any]) -> list[str]:
    """One worker id per attempt made (Django counts attempts so): those the error history
    kept (OUTBOX["ERROR_HISTORY"], the newest), the job's worker for its latest attempt, and
    "" for older attempts no longer kept."""
    workers = {
        entry.get("attempt"): str(entry.get("worker", ""))
        for entry in errors
        if isinstance(entry, dict)
    }
    if job.worker_id and job.attempts:
        workers.setdefault(job.attempts, job.worker_id)
    return [workers.get(attempt, "") for attempt in range(1, job.attempts + 1)]


def _exception_path(traceback: str) -> str:
    """The exception class's path from the last line of a formatted traceback."""
    for line in reversed(traceback.splitlines()):
        if match := _EXCEPTION_LINE.match(line):
            name = match.group(1)
            return name if "." in name else f"builtins.{name}"
    return "builtins.Exception"


def _run(payload: dict[str, Any]) -> None:
    """Run the Django task a job names, with its arguments; keep what it returns."""
    declared = _declared_task(payload)
    job = current_job()
    args = payload.get("args", [])
    kwargs = payload.get("kwargs", {})
    if declared.takes_context:
        row = Job.objects.using(get_settings().database).get(pk=job.id)
        context: TaskContext[..., Any] = TaskContext(
            task_result=_result_of(row, declared, declared.backend)
        )
        returned = declared.call(context, *args, **kwargs)
    else:
        returned = declared.call(*args, **kwargs)
    try:
        return_value = normalize_json(returned)
    except TypeError as error:
        # The class Django's backends record (TypeError), marked so that it is not retried.
        setattr(error, _NOT_RETRIED, True)
        raise
    # In an atomic job, inside the attempt's transaction: kept only if its success is.
    Job.objects.using(get_settings().database).filter(
        pk=job.id, lease_token=job.lease_token
    ).update(return_value=return_value)


def _retry_decision(job: ClaimedJob, exc: BaseException) -> RetryDecision:
    """Give up on a return value that is not JSON; otherwise the queue's backoff."""
    return GIVE_UP if getattr(exc, _NOT_RETRIED, False) else None


@task(name=TASK_NAME, retry_strategy=_retry_decision)
def django_task(payload: dict[str, Any]) -> None:
    """A Django task's job: its writes commit with the job's success."""
    _run(payload)


@task(name=NON_ATOMIC_TASK_NAME, atomic=False, retry_strategy=_retry_decision)
def django_task_non_atomic(payload: dict[str, Any]) -> None:
    """A Django task's job, outside a transaction (OPTIONS={"ATOMIC": False})."""
    _run(payload)


def _send_django_signal(signal: Any, job: ClaimedJob) -> None:
    """Send Django's task signal for ``job``, read back, if anything listens."""
    if not signal.has_listeners():
        return
    row = Job.objects.using(get_settings().database).filter(pk=job.id).first()
    if row is None:
        return
    declared = _declared_task(row.payload)
    signal.send(OutboxBackend, task_result=_result_of(row, declared, declared.backend))


def _started(sender: Any, job: ClaimedJob, **kwargs: Any) -> None:
    _send_django_signal(task_started, job)


def _finished(sender: Any, job: ClaimedJob, **kwargs: Any) -> None:
    _send_django_signal(task_finished, job)


for _task in (django_task, django_task_non_atomic):
    signals.job_started.connect(_started, sender=_task, weak=False)
    for _signal in (signals.job_succeeded, signals.job_failed, signals.job_cancelled):
        _signal.connect(_finished, sender=_task, weak=False)

__all__ = ["InvalidTask", "OutboxBackend", "UnknownDjangoTask", "max_attempts"]
