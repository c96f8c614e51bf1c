"""System checks: each reports problems with a stable id (``django_outbox.E001``) and a hint.

The rules live with what they check: the ``OUTBOX`` setting in ``validation.setting`` (cron
entries' fields in ``validation.schedules``), what needs the tasks or the JSON rules in
``cron.checks``, what the database must be in ``db`` (``compatibility_problems``). This module
only registers them with Django (``apps.ready`` imports it); no other module imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.checks import CheckMessage, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

from .conf import get_settings, user_settings
from .cron.checks import entry_errors, payload_errors
from .db import queries_for
from .django_task_jobs import backend_queues
from .validation.setting import setting_errors
from .worker.registration import registered_workers


@register(Tags.compatibility)
def check_outbox_setting(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Validate ``settings.OUTBOX``, its cron entries' fields included."""
    user = user_settings()
    return setting_errors(user) + payload_errors(user)


@register(Tags.database)
def check_outbox_database(
    app_configs: Iterable[Any] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """The outbox's database: a version the queue supports, and the isolation level and time
    zone it needs. Run where Django checks databases (``migrate``, ``check --database``) and
    by ``run_outbox_worker`` before it starts."""
    try:
        alias = get_settings().database
    except ImproperlyConfigured:
        return []  # check_outbox_setting reports it.
    if not databases or alias not in databases:
        return []
    connection = connections[alias]
    return queries_for(connection).compatibility_problems(connection)


@register(Tags.compatibility)
def check_cron_entries(
    app_configs: Iterable[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Validate cron entries against the registered tasks."""
    return entry_errors()


@register(Tags.database)
def check_task_queues_served(
    app_configs: Iterable[Any] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Warn about queues of a Django tasks backend that no live worker serves, when the live
    workers registered in the database say so (``manage.py check --database ...`` only)."""
    if setting_errors(user_settings()):
        return []  # Reported by check_outbox_setting; the database may not even be known.
    using = get_settings().database
    if not databases or using not in databases:
        return []
    try:
        workers = [worker for worker in registered_workers(using=using) if not worker.stale]
    except DatabaseError:
        return []  # Not migrated yet: nothing is known of the workers.
    # A worker of every queue (or of every queue but some: it registers no list) serves them all.
    if not workers or any(not worker.row.queues for worker in workers):
        return []
    served = {queue for worker in workers for queue in worker.row.queues}
    return [
        Warning(
            f"TASKS[{alias!r}] lists the queue {queue!r}, which none of the {len(workers)} live "
            f"worker(s) serves: they run only {', '.join(sorted(served))}.",
            hint=f"Start a worker for it (run_outbox_worker --queue {queue}), or remove it from "
            "QUEUES.",
            id="django_outbox.W060",
        )
        for alias, queues in backend_queues().items()
        for queue in queues
        if queue not in served
    ]
