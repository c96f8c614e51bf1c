"""The job admin at scale: filters without table scans, a bounded count, lists
along indexes, and what the admin refuses (adding, saving, deleting running jobs)."""

import json
from urllib.parse import parse_qs

import pytest
from django.contrib.messages import constants as message_levels
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_outbox.admin import error_search
from django_outbox.admin.filters import queue_choices, task_choices
from django_outbox.admin.job_admin import JobAdmin
from django_outbox.admin.paging import Cursor, JobPaginator, Ordering, estimated_rows
from django_outbox.models import Job, JobStatus
from django_outbox.tasks.registry import registered_names
from tests.admin.helpers import (
    CHANGELIST,
    listed,
    make_failed,
    make_running,
    make_succeeded,
    post_action,
    sent_messages,
    staff_with,
)
from tests.testapp import tasks

CHANGE = "admin:django_outbox_job_change"


def queries_on_jobs(captured):
    return [q["sql"] for q in captured.captured_queries if "django_outbox_job" in q["sql"]]


@pytest.mark.django_db
class TestFilters:
    def test_no_list_request_reads_distinct_values_or_dates_from_the_table(self, admin_client):
        make_failed(tasks.always_fails.enqueue())
        tasks.write_note.enqueue({"text": "hi"})
        for params in ({}, {"status__exact": "failed"}, {"queue": "emails"}, {"q": "noop"}):
            with CaptureQueriesContext(connection) as captured:
                response = admin_client.get(reverse(CHANGELIST), params)
            assert response.status_code == 200
            assert response.context["cl"].date_hierarchy is None
            for sql in queries_on_jobs(captured):
                # Filter choices by DISTINCT; the date hierarchy's span and days.
                for scan in ("DISTINCT", "MIN(", "MAX(", "TRUNC"):
                    assert scan not in sql.upper(), sql

    def test_queue_choices_are_the_default_the_configured_and_the_tasks_queues(self, settings):
        settings.OUTBOX = {**settings.OUTBOX, "QUEUES": {"reports": {}, "billing": {}}}
        choices = queue_choices()
        assert {"default", "emails", "reports", "billing"} <= set(choices)
        assert choices == sorted(choices)
        # Nothing read from the table: a queue no task or setting names is not offered.
        Job.objects.create(task_name="x", queue="only-in-a-row", max_attempts=1)
        assert "only-in-a-row" not in queue_choices()

    def test_task_choices_are_the_registered_tasks_first(self):
        # Then the Django tasks declared for the outbox backend (test_admin_django_tasks).
        assert task_choices()[: len(registered_names())] == registered_names()
        assert "tests.testapp.tasks.sends_invoice" in task_choices()

    def test_the_filters_offer_configured_choices_and_filter_by_them(self, admin_client):
        note = tasks.write_note.enqueue({"text": "hi"})
        noop = tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST), {"queue": "emails"})
        assert listed(response) == {note.pk}
        assert "?queue=emails" in response.text
        response = admin_client.get(reverse(CHANGELIST), {"task_name": "tests.testapp.tasks.noop"})
        assert listed(response) == {noop.pk}
        assert "?task_name=tests.testapp.tasks.charges" in response.text

    def test_a_queue_nobody_configures_still_filters_and_shows_selected_escaped(self, admin_client):
        job = tasks.noop.enqueue(queue="<b>gone</b>")
        tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST), {"queue": "<b>gone</b>"})
        assert listed(response) == {job.pk}
        assert "&lt;b&gt;gone&lt;/b&gt;" in response.text
        assert "<b>gone</b>" not in response.text

    def test_the_list_is_sorted_by_id_only(self, admin_client):
        jobs = [tasks.noop.enqueue(), tasks.always_fails.enqueue()]
        # An order by another column (?o=2: the task) would sort the table: ignored.
        response = admin_client.get(reverse(CHANGELIST), {"o": "2"})
        assert [job.pk for job in response.context["cl"].result_list] == [
            job.pk for job in reversed(jobs)
        ]
        assert "sortable column-task_display" not in response.text
        assert "column-task_display" in response.text
        # By id, both ways.
        response = admin_client.get(reverse(CHANGELIST), {"o": "1"})
        assert [job.pk for job in response.context["cl"].result_list] == [job.pk for job in jobs]


@pytest.mark.django_db
class TestBoundedCount:
    def test_a_short_list_shows_its_exact_count(self, admin_client):
        for _ in range(3):
            tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST))
        cl = response.context["cl"]
        assert (cl.paginator.exact, cl.paginator.count, str(cl.result_count)) == (True, 3, "3")
        assert not cl.by_key
        assert "3 jobs" in response.text

    def test_past_the_limit_the_list_says_more_than_the_limit_never_an_estimate(
        self, admin_client, monkeypatch
    ):
        monkeypatch.setattr(JobPaginator, "count_limit", 4)
        monkeypatch.setattr(JobAdmin, "list_per_page", 3)
        jobs = [tasks.noop.enqueue() for _ in range(7)]
        response = admin_client.get(reverse(CHANGELIST))
        cl = response.context["cl"]
        assert not cl.paginator.exact
        assert cl.by_key
        assert str(cl.result_count) == "more than 4"
        assert "more than 4 jobs" in response.text
        assert "about" not in response.text.split('id="changelist"')[1]
        # "Select all" says what it acts on: every job, as many as the list says.
        assert "Select every job (more than 4)" in response.text
        assert listed(response) == {job.pk for job in jobs[4:]}

    def test_pages_by_key_reach_every_job_keeping_the_search_and_filters(
        self, admin_client, monkeypatch
    ):
        monkeypatch.setattr(JobPaginator, "count_limit", 2)
        monkeypatch.setattr(JobAdmin, "list_per_page", 3)
        jobs = [make_failed(tasks.always_fails.enqueue()) for _ in range(8)]
        tasks.noop.enqueue()  # Neither failed nor found by the search.
        url: str | None = reverse(CHANGELIST) + "?q=always&status__exact=failed"
        seen, pages = [], 0
        while url:
            response = admin_client.get(url)
            assert response.status_code == 200
            cl = response.context["cl"]
            assert cl.query == "always"
            assert cl.by_key
            seen += [job.pk for job in cl.result_list]
            pages += 1
            next_page = cl.next_page_query
            if next_page:
                assert "q=always" in next_page
                assert "status__exact=failed" in next_page
                assert 'class="outbox-next-page"' in response.text
            url = reverse(CHANGELIST) + next_page if next_page else None
        # Failed lists go by failure time, newest first (these failed one after another).
        assert seen == [job.pk for job in reversed(jobs)]
        assert pages == 3
        assert str(cl.result_count) == "more than 2"
        assert 'class="outbox-first-page"' in response.text

    def test_a_cursor_that_is_not_one_shows_the_first_page(self, admin_client, monkeypatch):
        monkeypatch.setattr(JobPaginator, "count_limit", 1)
        jobs = [tasks.noop.enqueue() for _ in range(3)]
        for cursor in ("x", "1_not-a-date", "99999999999999999999", ""):
            response = admin_client.get(reverse(CHANGELIST), {"after": cursor})
            assert response.status_code == 200
            assert listed(response) == {job.pk for job in jobs}

    def test_a_page_number_past_the_last_shows_the_last_with_the_search(
        self, admin_client, monkeypatch
    ):
        monkeypatch.setattr(JobAdmin, "list_per_page", 2)
        jobs = [tasks.noop.enqueue() for _ in range(3)]
        response = admin_client.get(reverse(CHANGELIST), {"q": "noop", "p": "9"})
        assert response.status_code == 200
        assert response.context["cl"].query == "noop"
        assert listed(response) == {jobs[0].pk}

    def test_a_search_without_a_match_shows_an_empty_state(self, admin_client):
        tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST), {"q": "error:<nothing like it>"})
        assert str(response.context["cl"].result_count) == "0"
        assert "No job matches this search and these filters." in response.text
        assert "Searched for: error:&lt;nothing like it&gt;" in response.text
        assert 'id="result_list"' not in response.text

    def test_the_count_stops_at_its_limit(self, monkeypatch):
        monkeypatch.setattr(JobPaginator, "count_limit", 2)
        for _ in range(5):
            tasks.noop.enqueue()
        paginator = JobPaginator(Job.objects.order_by("-id"), 1)
        with CaptureQueriesContext(connection) as captured:
            assert paginator.counted == 3
        [count] = [q for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
        assert "LIMIT 3" in count["sql"]
        assert "ORDER BY" not in count["sql"]

    @pytest.mark.postgresql
    def test_a_count_that_runs_too_long_is_stopped_and_the_list_pages_by_key(self, monkeypatch):
        for _ in range(3):
            tasks.noop.enqueue()
        monkeypatch.setattr(JobPaginator, "count_time_limit", 0.001)
        slow = Job.objects.extra(where=["(SELECT true FROM pg_sleep(0.05))"]).order_by("-id")
        paginator = JobPaginator(slow, 50)
        assert paginator.counted is None
        assert not paginator.exact
        # The connection is usable and without the limit afterwards.
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "0"

    def test_the_estimate_is_postgresqls_planner_estimate(self):
        estimate = estimated_rows(Job.objects.filter(status=JobStatus.FAILED))
        if connection.vendor == "postgresql":
            assert isinstance(estimate, int)
            assert estimate >= 1
        else:
            assert estimate is None


def plan(queryset):
    """PostgreSQL's plan for ``queryset`` as JSON text, with sequential scans ruled out where
    an index can serve (the test table is small: the planner would scan it anyway)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        text = queryset.explain(format="json")
    return json.dumps(json.loads(text))


def changelist(client, params):
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response.context["cl"]


@pytest.mark.postgresql
@pytest.mark.django_db
class TestIndexes:
    """Each list query can run along an index (checked on PostgreSQL with EXPLAIN)."""

    @pytest.mark.parametrize(
        ("params", "index"),
        [
            ({}, "django_outbox_job_pkey"),
            ({"status__exact": "ready"}, "outbox_job_pending"),
            ({"status__exact": "halted"}, "outbox_job_pending"),
            ({"status__exact": "running"}, "outbox_job_lease"),
            # Failed jobs are in three partial indexes; the planner takes any.
            ({"status__exact": "failed"}, "outbox_job_f"),
            ({"status__exact": "succeeded"}, "outbox_job_finished"),
            (
                {"status__exact": "failed", "task_name": "tests.testapp.tasks.always_fails"},
                "outbox_job_failed_task",
            ),
            ({"status__exact": "failed", "queue": "default"}, "outbox_job_failed_queue"),
        ],
    )
    def test_the_page_and_count_of_a_filter_use_an_index(self, admin_client, params, index):
        from django.db import transaction

        make_failed(tasks.always_fails.enqueue())
        make_running(tasks.noop.enqueue())
        tasks.noop.enqueue()
        cl = changelist(admin_client, params)
        with transaction.atomic():
            page = plan(cl.queryset[:50])
            # Unfiltered, the count reads the first rows it finds, in any order: a scan that
            # its LIMIT bounds.
            count = plan(cl.queryset.order_by()[:10_001]) if params else ""
        for explained in (page, count):
            assert "Seq Scan" not in explained, explained
        assert index in page + count, (page, count)


@pytest.mark.django_db
class TestRefusals:
    def test_the_job_page_offers_no_save_and_a_post_saves_nothing(self, admin_client):
        job = make_failed(tasks.always_fails.enqueue())
        url = reverse(CHANGE, args=[job.pk])
        page = admin_client.get(url)
        assert 'name="_save"' not in page.text
        response = admin_client.post(
            url, {"task_name": "other", "status": "ready", "lease_token": ""}, follow=True
        )
        after = Job.objects.get(pk=job.pk)
        assert (after.task_name, after.status, after.lease_token) == (
            job.task_name,
            JobStatus.FAILED,
            None,
        )
        assert sent_messages(response) == [
            (
                message_levels.ERROR,
                "Jobs are not edited on this page: use its actions (retry, cancel, edit payload "
                "and retry). Nothing was saved.",
            )
        ]

    def test_deleting_needs_the_delete_permission(self, client):
        client.force_login(staff_with("view_job", "change_job"))
        job = make_failed(tasks.always_fails.enqueue())
        assert "delete_selected" not in client.get(reverse(CHANGELIST)).text
        post_action(client, "delete_selected", [job])
        assert client.post(reverse("admin:django_outbox_job_delete", args=[job.pk])).status_code
        assert Job.objects.filter(pk=job.pk).exists()

    def test_the_delete_action_deletes_finished_jobs_and_refuses_running_ones(self, admin_client):
        failed = make_failed(tasks.always_fails.enqueue())
        running = make_running(tasks.noop.enqueue())
        response = admin_client.post(
            reverse(CHANGELIST),
            {
                "action": "delete_selected",
                "_selected_action": [failed.pk, running.pk],
                "index": 0,
                "post": "yes",
            },
            follow=True,
        )
        assert not Job.objects.filter(pk=failed.pk).exists()
        assert Job.objects.get(pk=running.pk).status == JobStatus.RUNNING
        messages = sent_messages(response)
        assert (
            message_levels.WARNING,
            "1 running job was not deleted: its worker holds it. Cancel it first, then delete "
            "it once it has ended.",
        ) in messages
        assert (message_levels.SUCCESS, "Successfully deleted 1 job.") in messages

    def test_the_delete_page_of_a_running_job_refuses_with_a_message(self, admin_client):
        running = make_running(tasks.noop.enqueue())
        url = reverse("admin:django_outbox_job_delete", args=[running.pk])
        for response in (admin_client.get(url, follow=True), admin_client.post(url, follow=True)):
            assert sent_messages(response) == [
                (
                    message_levels.ERROR,
                    "1 running job was not deleted: its worker holds it. Cancel it first, then "
                    "delete it once it has ended.",
                )
            ]
        assert Job.objects.filter(pk=running.pk).exists()
        # Not offered on its page either.
        page = admin_client.get(reverse(CHANGE, args=[running.pk]))
        assert "deletelink" not in page.text

    def test_the_delete_confirmation_names_the_first_jobs_and_counts_them_all(
        self, admin_client, monkeypatch
    ):
        from django_outbox.admin import job_admin as job_admin

        monkeypatch.setattr(job_admin, "DELETE_LISTED", 2)
        jobs = [make_succeeded(tasks.noop.enqueue()) for _ in range(3)]
        page = admin_client.post(
            reverse(CHANGELIST),
            {"action": "delete_selected", "_selected_action": [j.pk for j in jobs], "index": 0},
        )
        assert page.status_code == 200
        assert "Jobs: 3" in page.text
        assert "... and 1 more" in page.text
        assert Job.objects.count() == 3

    def test_a_finished_job_is_deleted_from_its_page(self, admin_client):
        done = make_succeeded(tasks.noop.enqueue())
        url = reverse("admin:django_outbox_job_delete", args=[done.pk])
        admin_client.post(url, {"post": "yes"})
        assert not Job.objects.filter(pk=done.pk).exists()


def load_finished_jobs(count):
    """``count`` finished jobs on PostgreSQL, one a second back from now: every tenth failed
    (of two tasks, in two queues), the others succeeded."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {Job._meta.db_table}
              (task_name, queue, payload, status, priority, attempts, max_attempts, worker_id,
               last_error, last_traceback, errors, run_at, enqueued_at, finished_at)
            SELECT
              CASE WHEN g %% 20 = 0 THEN 'tests.testapp.tasks.always_fails'
                   ELSE 'tests.testapp.tasks.noop' END,
              CASE WHEN g %% 30 = 0 THEN 'emails' ELSE 'default' END,
              '{{}}'::jsonb,
              CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END,
              0, 1, 1, '', CASE WHEN g %% 10 = 0 THEN 'boom' ELSE '' END, '', '[]'::jsonb,
              now() - g * interval '1 second', now() - g * interval '1 second',
              now() - g * interval '1 second'
            FROM generate_series(1, %s) AS g
            """,
            [count],
        )
        cursor.execute(f"ANALYZE {Job._meta.db_table}")


def plan_nodes(queryset):
    """The plan's nodes (type and index) as PostgreSQL would run ``queryset``, seq scans
    allowed: the table is large enough for the planner to choose."""
    text = queryset.explain(format="json")

    def walk(node):
        yield node["Node Type"], node.get("Index Name")
        for child in node.get("Plans", []):
            yield from walk(child)

    return list(walk(json.loads(text)[0]["Plan"]))


@pytest.mark.postgresql
@pytest.mark.django_db
class TestPlansAtScale:
    """With 60,000 finished jobs, each list an operator starts from reads one index in the list's
    order: no scan of the table, no sort of its rows; so too the pages by key after it."""

    @pytest.mark.parametrize(
        ("params", "index"),
        [
            ({"status__exact": "failed"}, "outbox_job_finished"),
            ({"status__exact": "failed", "o": "7"}, "outbox_job_finished"),
            ({"status__exact": "succeeded", "o": "-7"}, "outbox_job_finished"),
            (
                {"status__exact": "failed", "task_name": "tests.testapp.tasks.always_fails"},
                "outbox_job_failed_task",
            ),
            ({"status__exact": "failed", "queue": "emails"}, "outbox_job_failed_queue"),
            ({}, "django_outbox_job_pkey"),
        ],
    )
    def test_each_list_and_its_next_page_by_key_read_one_index_in_order(
        self, admin_client, monkeypatch, params, index
    ):
        # Past the count: pages by key (the count's own plan is TestIndexes').
        monkeypatch.setattr(JobPaginator, "count_limit", 100)
        load_finished_jobs(60_000)
        cl = changelist(admin_client, params)
        assert cl.by_key
        [after] = parse_qs(cl.next_page_query.lstrip("?"))["after"]
        ordering = Ordering.of(cl.queryset)
        assert ordering is not None
        first = cl.queryset
        cursor = Cursor.decode(after)
        assert cursor is not None
        following = cl.queryset.filter(ordering.after(cursor))
        for queryset in (first, following):
            nodes = plan_nodes(queryset[: JobAdmin.list_per_page + 1])
            kinds = [kind for kind, _ in nodes]
            assert "Seq Scan" not in kinds, nodes
            assert "Sort" not in kinds, nodes
            assert index in [name for _, name in nodes], nodes
        # The page after really follows the first.
        response = admin_client.get(reverse(CHANGELIST) + cl.next_page_query)
        assert response.context["cl"].result_list[0].pk not in {job.pk for job in cl.result_list}

    @pytest.mark.parametrize(
        ("field", "value", "index"),
        [("queue", "rare", "outbox_job_queue"), ("task_name", "shop.renamed", "outbox_job_task")],
        ids=["queue", "task"],
    )
    def test_a_queue_or_task_of_a_few_old_jobs_is_read_along_its_own_index(
        self, admin_client, field, value, index
    ):
        """Its list and count read (queue, id) or (task_name, id), not the table from the
        newest job back."""
        old = [make_succeeded(tasks.noop.enqueue()) for _ in range(3)]
        Job.objects.filter(pk__in=[job.pk for job in old]).update(**{field: value})
        load_finished_jobs(60_000)
        cl = changelist(admin_client, {field: value})
        assert {job.pk for job in cl.result_list} == {job.pk for job in old}
        assert str(cl.result_count) == "3"
        for queryset in (cl.queryset[: JobAdmin.list_per_page + 1], cl.queryset.order_by()):
            nodes = plan_nodes(queryset)
            kinds = [kind for kind, _ in nodes]
            assert "Seq Scan" not in kinds, nodes
            assert index in [name for _, name in nodes], nodes

    def test_an_error_search_that_matches_nothing_reads_the_trigram_index(
        self, admin_client, monkeypatch
    ):
        """Not every job's error: the trigram index (migration 0021) rules them all out, once
        the list's order did not find a first page in time (1 ms: at 60,000 jobs, a few ms)."""
        monkeypatch.setattr(error_search, "LIST_ORDER_TIME_LIMIT", 0.001)
        # The count along the index is the step under test, not its time: on a loaded machine
        # it took more than its 50 ms, and the search then read the list's order, as it must.
        monkeypatch.setattr(error_search, "COUNT_TIME_LIMIT", 10.0)
        load_finished_jobs(60_000)
        cl = changelist(admin_client, {"q": "error:no such error"})
        assert list(cl.result_list) == []
        assert str(cl.result_count) == "0"
        for queryset in (cl.queryset[: JobAdmin.list_per_page + 1], cl.queryset.order_by()):
            nodes = plan_nodes(queryset)
            kinds = [kind for kind, _ in nodes]
            assert "Seq Scan" not in kinds, nodes
            assert "outbox_job_error_trigrams" in [name for _, name in nodes], nodes

    def test_an_error_search_that_many_jobs_match_is_read_in_the_lists_order(self, admin_client):
        """Not along the trigram index: its first page is near along the primary key."""
        load_finished_jobs(60_000)
        cl = changelist(admin_client, {"q": "error:boom"})
        assert len(cl.result_list) == JobAdmin.list_per_page
        nodes = plan_nodes(cl.queryset[: JobAdmin.list_per_page + 1])
        names = [name for _, name in nodes]
        assert "outbox_job_error_trigrams" not in names, nodes
        assert "django_outbox_job_pkey" in names, nodes
