"""What the outbox knows of Django tasks' jobs without importing Django's tasks framework.

Every Django task enqueued through ``django_outbox.backends.OutboxBackend`` is a job of one of two
outbox tasks; the Django task's own path is the payload's ``"task"`` key. The admin shows, searches
and filters by that path, and imports this module on any Django: ``backends`` itself needs
``django.tasks`` (Django 6.0+) or the backport.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Case, CharField, Q, QuerySet, When
from django.db.models.fields.json import KeyTextTransform

#: The outbox tasks every Django task's job is a job of: atomic (the default), or not
#: (``OPTIONS={"ATOMIC": False}``).
TASK_NAME = "django_outbox.django_task"
NON_ATOMIC_TASK_NAME = "django_outbox.django_task_non_atomic"
TASK_NAMES = (TASK_NAME, NON_ATOMIC_TASK_NAME)
#: The payload key that holds the Django task's module path.
PATH_KEY = "task"

#: The backend's path in ``settings.TASKS``.
BACKEND_PATH = "django_outbox.backends.OutboxBackend"

#: The Django tasks declared for an outbox backend in this process, by module path (filled by
#: ``OutboxBackend.validate_task``).
declared: dict[str, Any] = {}


def backend_queues() -> dict[str, list[str]]:
    """The queues each outbox backend of ``settings.TASKS`` lists, by alias (Django's default,
    ``["default"]``, where it lists none), read from the setting without loading Django's
    tasks framework."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, dict):
        return {}
    return {
        alias: list(params.get("QUEUES", ["default"]))
        for alias, params in backends.items()
        if isinstance(params, dict) and params.get("BACKEND") == BACKEND_PATH
    }


def declared_paths() -> list[str]:
    """The module paths of the Django tasks declared in this process, sorted."""
    return sorted(declared)


def path_expression() -> Case:
    """The Django task's path of a Django task's job, NULL for any other job.

    The CASE makes the database read the payload only of Django tasks' rows: another task's
    payload may be megabytes (PostgreSQL reads a whole jsonb value to extract one key), and a
    ``"task"`` key in it means nothing.
    """
    return Case(
        When(task_name__in=TASK_NAMES, then=KeyTextTransform(PATH_KEY, "payload")),
        default=None,
        output_field=CharField(),
    )


def with_path(jobs: QuerySet[Any], path: str) -> QuerySet[Any]:
    """The jobs of ``jobs`` that are jobs of the Django task whose module path is ``path``."""
    # The plain task_name condition lets the database use an index on the column; the CASE
    # keeps the payload of other tasks' rows unread.
    filtered: QuerySet[Any] = jobs.alias(django_task_filtered=path_expression()).filter(
        task_name__in=TASK_NAMES, django_task_filtered=path
    )
    return filtered


def of_task(name: str) -> Q:
    """The jobs of the outbox task named ``name``, or of the Django task whose module path
    ``name`` is: the two never meet, as a Django task's jobs are all of TASK_NAMES."""
    return Q(task_name=name) | Q(task_name__in=TASK_NAMES, **{f"payload__{PATH_KEY}": name})


def path_of(task_name: str, payload: Any) -> str | None:
    """The Django task's path of a job already read, or None if it is not a Django task's."""
    if task_name not in TASK_NAMES or not isinstance(payload, dict):
        return None
    path = payload.get(PATH_KEY)
    return path if isinstance(path, str) and path else None
