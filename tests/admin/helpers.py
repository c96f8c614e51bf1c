"""Helpers of the admin's tests: jobs in each status, staff users, the list's queries."""

import datetime
import re
import uuid

from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_outbox.django_task_jobs import NON_ATOMIC_TASK_NAME, TASK_NAME
from django_outbox.models import Job, JobStatus

CHANGELIST = "admin:django_outbox_job_changelist"


def make_failed(job, *, error="RuntimeError: boom", traceback="Traceback: boom", **changes):
    """Turn ``job`` into one that failed for good after all its attempts."""
    changes.setdefault("attempts", job.max_attempts)
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.FAILED,
        # A day ahead (a failed job keeps its last attempt's run_at): a retry visibly moves it.
        run_at=timezone.now() + datetime.timedelta(days=1),
        finished_at=timezone.now(),
        last_error=error,
        last_traceback=traceback,
        errors=[{"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "worker": "w1", "error": error}],
        **changes,
    )
    job.refresh_from_db()
    return job


def make_succeeded(job):
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.SUCCEEDED, attempts=1, finished_at=timezone.now()
    )
    job.refresh_from_db()
    return job


def make_running(job):
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.RUNNING,
        attempts=1,
        lease_token=uuid.uuid4(),
        lease_expires_at=timezone.now() + datetime.timedelta(minutes=1),
        worker_id="w1",
    )
    job.refresh_from_db()
    return job


def staff_with(*codenames):
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_outbox", codename__in=codenames)
    )
    return user


def listed(response):
    return {job.pk for job in response.context["cl"].result_list}


def post_retry(client, jobs):
    return client.post(
        reverse(CHANGELIST),
        {"action": "retry_selected", "_selected_action": [job.pk for job in jobs], "index": 0},
        follow=True,
    )


def sent_messages(response):
    return [(message.level, message.message) for message in response.context["messages"]]


def queries_on_jobs(captured):
    """Return the SQL of the captured queries that read the job table, names in double
    quotes (as PostgreSQL and SQLite quote them; MariaDB's backticks replaced)."""
    return [
        query["sql"].replace("`", '"')
        for query in captured.captured_queries
        if "django_outbox_job" in query["sql"]
    ]


def where_clauses(captured):
    return [sql.partition(" WHERE ")[2] for sql in queries_on_jobs(captured) if " WHERE " in sql]


def search(client, term, **params):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse(CHANGELIST), {"q": term, **params})
    return response, captured


BIG_COLUMNS = ("payload", "last_error", "last_traceback", '"errors"')


#: The expression that reads a Django task's path: a CASE on the task name, then the key.
PATH_READ = re.compile(
    r'CASE WHEN \(?"django_outbox_job"\."task_name" IN \((?P<names>[^)]*)\)\)? '
    r"THEN (?P<read>.*?) ELSE NULL END"
)


def outside_path_reads(sql):
    """``sql`` without its reads of Django tasks' paths (the list shows them), after checking
    each reads the "task" key of Django tasks' rows only."""
    reads = list(PATH_READ.finditer(sql))
    assert reads, sql
    for read in reads:
        assert TASK_NAME in read["names"]
        assert NON_ATOMIC_TASK_NAME in read["names"]
        assert "payload" in read["read"]
        assert "task" in read["read"]
    return PATH_READ.sub("", sql)


def post_action(client, action, jobs, **fields):
    """Post the list's ``action`` on ``jobs``; ``fields`` are posted too (``outbox_confirmed=
    "yes"``: as from the confirmation page of an action that asks)."""
    return client.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [job.pk for job in jobs], "index": 0, **fields},
        follow=True,
    )
