"""The admin's dashboard: its figures, its page (permissions, escaping, links), and its queries
(a fixed number, each along an index)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.db import DatabaseError, connection
from django.db.models import Sum
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_outbox.admin.times import duration_text
from django_outbox.models import Job, JobStatus, QueueActivity, WorkerProcess
from django_outbox.stats.overview import dashboard
from django_outbox.tasks.enqueue import build_job
from django_outbox.worker.activity import ActivityCounter, forget_old_activity
from django_outbox.worker.registration import STALE_MIN_SECONDS
from django_outbox.worker.runner import Outcome
from tests.db.plans import mariadb_plan
from tests.helpers import run_worker
from tests.testapp import tasks

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:django_outbox_dashboard_changelist"


def jobs(count: int, queue: str = "emails", **fields: object) -> list[Job]:
    """Write ``count`` jobs of ``queue`` with ``fields`` (a status, a finished_at...)."""
    built = [build_job(tasks.noop, {}, queue=queue) for _ in range(count)]
    for job in built:
        for name, value in fields.items():
            setattr(job, name, value)
    return Job.objects.bulk_create(built, batch_size=5000)


RECURSIVE_NUMBERS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s) "


def many_finished(count: int, status: str, finished_at: datetime.datetime) -> None:
    """Write ``count`` finished jobs in one statement (bulk_create of 40,000 takes a minute)."""
    empty_list = "'[]'::jsonb" if connection.vendor == "postgresql" else "'[]'"
    at = connection.ops.adapt_datetimefield_value(finished_at)
    rows = "n"
    if connection.vendor == "mysql":
        # MariaDB puts WITH after INSERT; its sequence tables need none.
        rows = f"seq_1_to_{int(count)} WHERE %s > 0"
    with connection.cursor() as cursor:
        cursor.execute(
            (
                ""
                if connection.vendor == "mysql"
                else "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s) "
            )
            + "INSERT INTO django_outbox_job (task_name, queue, status, priority, attempts, "
            "max_attempts, worker_id, last_error, last_traceback, errors, run_at, enqueued_at, "
            f"finished_at) SELECT 'tests.testapp.tasks.noop', 'emails', %s, 0, 1, 1, '', '', '', "
            f"{empty_list}, %s, %s, %s FROM {rows}",
            [count, status, at, at, at] if rows == "n" else [status, at, at, at, count],
        )


def ago(**delta: float) -> datetime.datetime:
    return timezone.now() - datetime.timedelta(**delta)


def running(count: int, queue: str) -> None:
    jobs(
        count,
        queue,
        status=JobStatus.RUNNING,
        lease_token=uuid.uuid4(),
        lease_expires_at=ago(seconds=-60),
        attempts=1,
    )


def test_the_counts_of_each_queue_and_task_and_the_oldest_due_job():
    jobs(2, run_at=ago(minutes=2))
    jobs(1, run_at=ago(seconds=-600))  # scheduled: ready, not due
    jobs(1, status=JobStatus.RETRYING, run_at=ago(minutes=1), attempts=1)
    jobs(1, status=JobStatus.RETRYING, run_at=ago(seconds=-60), attempts=1)  # retries later
    running(1, "emails")
    jobs(1, status=JobStatus.HALTED, attempts=1)
    jobs(2, "bulk", fair_key="tenant-1", fair_round=1, run_at=ago(seconds=30))
    jobs(3, status=JobStatus.SUCCEEDED, finished_at=ago(minutes=5), attempts=1)
    jobs(2, status=JobStatus.FAILED, finished_at=ago(minutes=5), attempts=1)
    other_task = build_job(tasks.always_fails, {}, queue="bulk")
    other_task.status, other_task.attempts = JobStatus.FAILED, 1
    other_task.save()

    figures = dashboard()

    bulk, emails = figures.queues
    assert (bulk.name, emails.name) == ("bulk", "emails")
    # A delayed job is scheduled, not due (nor "ready" to an operator's eye).
    assert emails.counts == {"failed": 2, "due": 3, "scheduled": 2, "running": 1, "halted": 1}
    assert bulk.counts == {"failed": 1, "due": 2, "scheduled": 0, "running": 0, "halted": 0}
    always_fails, noop = figures.tasks
    assert (always_fails.name, noop.name) == (tasks.always_fails.name, tasks.noop.name)
    assert always_fails.counts == {"failed": 1, "due": 0, "scheduled": 0, "running": 0, "halted": 0}
    assert noop.counts == {"failed": 2, "due": 5, "scheduled": 2, "running": 1, "halted": 1}
    # The longest-waiting due job: the ready ones due two minutes ago, not the scheduled one.
    assert emails.oldest_due_age is not None
    assert 118 <= emails.oldest_due_age < 150
    assert bulk.oldest_due_age is not None
    assert 28 <= bulk.oldest_due_age < 60


@pytest.mark.django_db(transaction=True)
def test_the_charts_count_the_attempts_workers_ran_by_queue_and_minute():
    for _ in range(3):
        tasks.noop.enqueue({})
    tasks.always_fails.enqueue({})  # three attempts: two to be retried, one failed for good
    tasks.write_note.enqueue({"text": "x"})  # the "emails" queue
    run_worker()  # its counts are written when it stops

    figures = dashboard()
    default, emails = figures.queues
    hour, day = default.activity["hour"], default.activity["day"]
    assert (sum(hour.succeeded), sum(hour.retried), sum(hour.failed)) == (3, 2, 1)
    assert (sum(day.succeeded), sum(day.retried), sum(day.failed)) == (3, 2, 1)
    assert hour.attempts == 6
    assert hour.failure_rate == pytest.approx(3 / 6)
    # In the bucket of this minute (or the one before, if the minute turned meanwhile).
    assert sum(hour.succeeded[-2:]) == 3
    assert sum(emails.activity["hour"].succeeded) == 1
    assert emails.activity["hour"].failure_rate == 0


def test_each_minute_is_charted_in_its_bucket():
    now = timezone.now()
    minute = now.replace(second=0, microsecond=0)
    for minutes_ago, succeeded in ((0, 5), (10, 7), (59, 1), (60, 100), (3 * 60, 11)):
        QueueActivity.objects.create(
            queue="emails",
            minute=minute - datetime.timedelta(minutes=minutes_ago),
            succeeded=succeeded,
            retried=1,
        )
    QueueActivity.objects.create(
        queue="emails", minute=minute - datetime.timedelta(days=1, hours=1), succeeded=1000
    )

    [emails] = dashboard().queues
    hour, day = emails.activity["hour"], emails.activity["day"]
    assert (hour.succeeded[-1], hour.succeeded[-11], hour.succeeded[-60]) == (5, 7, 1)
    assert sum(hour.succeeded) == 13  # an hour ago is outside the last 60 minutes
    assert sum(day.succeeded) == 124
    assert sum(day.retried) == 5
    # Fifteen-minute buckets: three hours ago is 12 buckets before this one.
    assert day.succeeded[-13] == 11
    assert emails.counts == {"failed": 0, "due": 0, "scheduled": 0, "running": 0, "halted": 0}
    assert emails.oldest_due_age is None


@pytest.mark.django_db(transaction=True)
def test_counts_that_could_not_be_written_are_kept_for_the_next_heartbeat():
    counter = ActivityCounter()
    counter.add("emails", Outcome.SUCCEEDED)
    counter.add("emails", Outcome.FAILED)
    counter.add("emails", Outcome.SNOOZED)  # not charted
    with connection.schema_editor() as editor:
        editor.delete_model(QueueActivity)
    try:
        with pytest.raises(DatabaseError):
            counter.write("default")
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(QueueActivity)
    counter.add("emails", Outcome.SUCCEEDED)
    assert counter.write("default") >= 1
    # A second worker's counts of the same minute add up in the same row.
    other = ActivityCounter()
    other.add("emails", Outcome.RETRYING)
    other.write("default")
    totals = QueueActivity.objects.aggregate(
        succeeded=Sum("succeeded"), retried=Sum("retried"), failed=Sum("failed")
    )
    assert totals == {"succeeded": 2, "retried": 1, "failed": 1}
    assert counter.write("default") == 0  # nothing new


def test_activity_older_than_two_days_is_forgotten():
    now = timezone.now()
    QueueActivity.objects.create(queue="q", minute=now - datetime.timedelta(days=2, minutes=1))
    QueueActivity.objects.create(queue="q", minute=now - datetime.timedelta(days=1))
    assert forget_old_activity("default") == 1
    assert QueueActivity.objects.count() == 1


def test_the_figures_take_four_queries_however_many_queues_and_workers(
    django_assert_num_queries,
):
    for number in range(20):
        jobs(2, f"queue-{number}")
        QueueActivity.objects.create(queue=f"queue-{number}", minute=ago(minutes=3), succeeded=1)
    with django_assert_num_queries(4):
        figures = dashboard()
    assert len(figures.queues) == 20


def test_live_and_stale_workers():
    now = timezone.now()
    for worker_id, heartbeat_age in (("live", 1), ("dead", STALE_MIN_SECONDS + 5)):
        WorkerProcess.objects.create(
            worker_id=worker_id,
            instance=uuid.uuid4(),
            host="h",
            pid=1,
            concurrency=1,
            started_at=now - datetime.timedelta(hours=1),
            heartbeat_seconds=1.0,
            last_heartbeat_at=now - datetime.timedelta(seconds=heartbeat_age),
        )
    figures = dashboard()
    assert [worker.row.worker_id for worker in figures.live_workers] == ["live"]
    assert [worker.row.worker_id for worker in figures.stale_workers] == ["dead"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (0.4, "0 s"),
        (119, "119 s"),
        (120, "2 min"),
        (7199, "119 min"),
        (7200, "2 h 0 min"),
        (3 * 86400 + 3600, "3 d 1 h"),
    ],
)
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text


def staff(*permissions: str, username: str = "staff") -> Client:
    user = User.objects.create_user(username, password="x", is_staff=True)
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def test_staff_who_may_view_jobs_see_the_dashboard_with_everything_escaped():
    jobs(1, "<script>alert('queue')</script>")
    QueueActivity.objects.create(queue="emails", minute=ago(minutes=1), succeeded=3)
    WorkerProcess.objects.create(
        worker_id="<img src=x onerror=alert(1)>",
        instance=uuid.uuid4(),
        host="<b>host</b>",
        pid=4242,
        queues=["<i>q</i>"],
        concurrency=4,
        started_at=timezone.now(),
        heartbeat_seconds=1.0,
        jobs_done=1234,
    )
    response = staff("view_job").get(reverse(DASHBOARD))
    assert response.status_code == 200
    page = response.content.decode()
    assert "&lt;script&gt;alert(&#x27;queue&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;b&gt;host&lt;/b&gt;" in page
    assert "<i>q</i>" not in page
    assert "4242" in page
    assert "<svg" in page
    assert 'fill="#3d9a50"' in page  # the jobs that succeeded a minute ago
    # Nothing is loaded from elsewhere.
    assert "https://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_staff_without_the_view_permission_are_refused_and_do_not_see_the_link():
    client = staff()
    assert client.get(reverse(DASHBOARD)).status_code == 403
    assert reverse(DASHBOARD) not in client.get(reverse("admin:index")).content.decode()


def test_anonymous_visitors_are_sent_to_the_login_page():
    response = Client().get(reverse(DASHBOARD))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_the_dashboard_is_linked_from_the_admin_index_and_the_job_list():
    client = staff("view_job")
    assert reverse(DASHBOARD) in client.get(reverse("admin:index")).content.decode()
    changelist = client.get(reverse("admin:django_outbox_job_changelist")).content.decode()
    assert reverse(DASHBOARD) in changelist
    # Nothing else of a model admin: no change or delete pages.
    assert client.get(reverse(DASHBOARD) + "1/change/").status_code == 404


def _explain(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN " + sql)
            return "\n".join(row[0] for row in cursor.fetchall())
        if connection.vendor == "mysql":
            return mariadb_plan(cursor, sql)
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


@pytest.mark.django_db(transaction=True)
def test_every_query_on_the_job_table_reads_an_index_not_the_finished_jobs():
    # Many finished jobs before the windows, a few waiting, running, halted and recent ones.
    # The failed ones are counted (the dashboard's first column), along their own indexes: a
    # few among many, as where failures are looked after.
    many_finished(38_000, JobStatus.SUCCEEDED, ago(days=3))
    many_finished(2_000, JobStatus.FAILED, ago(days=3))
    jobs(20)
    jobs(5, "bulk", fair_key="k", fair_round=1)
    running(3, "emails")
    jobs(2, status=JobStatus.HALTED, attempts=1)
    jobs(10, status=JobStatus.SUCCEEDED, finished_at=ago(minutes=3), attempts=1)
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE TABLE django_outbox_job" if connection.vendor == "mysql" else "ANALYZE"
        )

    with CaptureQueriesContext(connection) as captured:
        dashboard()
    on_jobs = [query for query in captured if "django_outbox_job" in query["sql"]]
    assert len(on_jobs) == 1
    assert Job.objects.count() == 40_040
    for query in on_jobs:
        sql = query["sql"]  # the parameters inlined
        plan = _explain(sql)
        if connection.vendor == "postgresql":
            assert "Seq Scan on django_outbox_job" not in plan, plan
        elif connection.vendor == "mysql":
            assert "SCAN django_outbox_job" not in plan, plan
        else:
            scans = [line for line in plan.splitlines() if "django_outbox_job" in line]
            assert scans, plan
            assert all("INDEX" in line for line in scans), plan


def test_the_dashboard_lists_cron_entries_with_their_next_run_and_last_job():
    from django.conf import settings
    from django.test import override_settings

    from django_outbox.cron import declared_entries
    from django_outbox.cron.scheduler import enqueue_due

    cron = {
        "<b>nightly</b>": {"TASK": "tests.testapp.tasks.note_cron_tick", "SCHEDULE": "0 3 * * *"},
        "often": {"TASK": "tests.testapp.tasks.note_cron_tick", "SCHEDULE": "*/5 * * * *"},
    }
    with override_settings(OUTBOX={**settings.OUTBOX, "CRON": cron}):
        now = timezone.now()
        # Only "often" is enqueued (nightly's tick may fall between the two moments).
        often = [entry for entry in declared_entries() if entry.name == "often"]
        enqueue_due(often, now=now - datetime.timedelta(minutes=5), using="default")
        (job,) = enqueue_due(often, now=now, using="default")
        Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
        page = staff("view_job").get(reverse(DASHBOARD)).content.decode()
    assert "Periodic tasks" in page
    assert "&lt;b&gt;nightly&lt;/b&gt;" in page
    assert "<b>nightly</b>" not in page
    assert "<code>*/5 * * * *</code> (UTC)" in page
    assert reverse("admin:django_outbox_job_change", args=[job.pk]) in page
    assert '<span class="state-bad">Failed</span>' in page
    assert "not yet" in page  # nightly has not run


def test_without_cron_entries_the_dashboard_has_no_periodic_tasks_section():
    page = staff("view_job").get(reverse(DASHBOARD)).content.decode()
    assert "Periodic tasks" not in page


LIVE = "admin:django_outbox_dashboard_live"
CHANGELIST = "admin:django_outbox_job_changelist"


def test_each_count_links_to_the_list_it_stands_for():
    jobs(2, run_at=ago(minutes=1))  # due
    delayed = jobs(1, run_at=ago(seconds=-3600))  # scheduled: not due, not counted as ready
    jobs(3, status=JobStatus.FAILED, finished_at=ago(minutes=2), attempts=1)
    client = staff("view_job")
    page = client.get(reverse(DASHBOARD)).content.decode()
    counts = {
        "failed": ("status__exact=failed", 3),
        "due": ("waiting=due", 2),
        "scheduled": ("waiting=scheduled", 1),
    }
    for name, (query, value) in counts.items():
        for filters in ("queue=emails", f"task_name={tasks.noop.name}"):
            link = f'href="{reverse(CHANGELIST)}?{filters}&amp;{query}"'
            assert link in page, (name, filters)
            # The list behind the link has as many jobs as the count says.
            listing = client.get(f"{reverse(CHANGELIST)}?{filters}&{query}")
            assert len(listing.context["cl"].result_list) == value, (name, filters)
    scheduled = client.get(reverse(CHANGELIST), {"waiting": "scheduled"})
    assert [job.pk for job in scheduled.context["cl"].result_list] == [delayed[0].pk]


def test_the_live_view_serves_the_figures_alone_fresh_and_to_viewers_only():
    jobs(1, run_at=ago(minutes=1))
    viewer = staff("view_job")
    response = viewer.get(reverse(LIVE))
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    assert 'id="outbox-queues"' in page
    assert "<html" not in page
    assert staff(username="other").get(reverse(LIVE)).status_code == 403
    # The page loads the script that fetches it, from this site, with the URL to fetch.
    full = viewer.get(reverse(DASHBOARD)).content.decode()
    assert f'data-refresh-url="{reverse(LIVE)}"' in full
    assert 'src="/static/django_outbox/dashboard.js"' in full


def test_a_stale_or_erroring_worker_is_a_warning_at_the_top():
    now = timezone.now()
    for worker_id, in_error in (("dead", False), ("failing", True), ("fine", False)):
        WorkerProcess.objects.create(
            worker_id=worker_id,
            instance=uuid.uuid4(),
            host="h",
            pid=1,
            queues=[],
            concurrency=1,
            started_at=now,
            heartbeat_seconds=1.0,
            in_error_since=now - datetime.timedelta(seconds=30) if in_error else None,
            last_error="OperationalError: <b>the database is locked</b>" if in_error else "",
        )
    WorkerProcess.objects.filter(worker_id="dead").update(
        last_heartbeat_at=now - datetime.timedelta(seconds=STALE_MIN_SECONDS + 5)
    )
    page = staff("view_job").get(reverse(DASHBOARD)).content.decode()
    warning = page.index('class="outbox-warnings" role="alert"')
    assert warning < page.index('id="outbox-queues"')
    assert "Worker dead on h stopped heartbeating" in page
    assert "Worker failing: in error for" in page
    assert "&lt;b&gt;the database is locked&lt;/b&gt;" in page
    assert "Worker fine" not in page


def test_without_a_troubled_worker_there_is_no_warning():
    page = staff("view_job").get(reverse(DASHBOARD)).content.decode()
    assert 'class="outbox-warnings"' not in page
