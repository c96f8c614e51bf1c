"""The Job admin: list, filters, search; escaped detail pages; the retry action, its permission."""

import pytest
from django.contrib.messages import constants as message_levels
from django.db import connection
from django.urls import reverse
from django.utils import timezone

import django_outbox
from django_outbox.admin import error_search
from django_outbox.admin.job_admin import SEARCH_MAX_LENGTH, JobAdmin
from django_outbox.db.time_limits import query_time_limit
from django_outbox.models import Job, JobStatus
from tests.admin.helpers import (
    BIG_COLUMNS,
    CHANGELIST,
    listed,
    make_failed,
    make_running,
    make_succeeded,
    outside_path_reads,
    post_action,
    post_retry,
    queries_on_jobs,
    search,
    sent_messages,
    staff_with,
    where_clauses,
)
from tests.helpers import run_worker
from tests.testapp import tasks


@pytest.mark.django_db
class TestChangelist:
    def test_lists_jobs_with_their_last_error_and_offers_the_retry_action(self, admin_client):
        failed = make_failed(tasks.always_fails.enqueue(), error="RuntimeError: disk full")
        ready = tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST))
        assert response.status_code == 200
        assert listed(response) == {failed.pk, ready.pk}
        assert "RuntimeError: disk full" in response.text
        assert 'value="retry_selected"' in response.text

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ({"status__exact": "failed"}, {"failed"}),
            ({"queue__exact": "emails"}, {"note"}),
            ({"task_name__exact": "tests.testapp.tasks.noop"}, {"ready"}),
        ],
    )
    def test_filters_by_status_queue_and_task(self, admin_client, query, expected):
        jobs = {
            "failed": make_failed(tasks.always_fails.enqueue()),
            "note": tasks.write_note.enqueue({"text": "hi"}),
            "ready": tasks.noop.enqueue(),
        }
        response = admin_client.get(reverse(CHANGELIST), query)
        assert response.status_code == 200
        assert listed(response) == {jobs[name].pk for name in expected}

    def test_search_by_error_text_finds_only_the_jobs_with_that_error(self, admin_client):
        disk = make_failed(tasks.always_fails.enqueue(), error="OSError: disk full on /var")
        make_failed(tasks.always_fails.enqueue(), error="ValueError: bad address")
        tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST), {"q": "error:disk full"})
        assert response.status_code == 200
        assert listed(response) == {disk.pk}

    def test_escapes_html_in_the_last_error(self, admin_client):
        make_failed(tasks.always_fails.enqueue(), error="<script>alert(1)</script>")
        response = admin_client.get(reverse(CHANGELIST))
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
        assert "<script>alert(1)</script>" not in response.text


@pytest.mark.django_db
class TestChangeView:
    def test_shows_payload_error_traceback_and_history_all_escaped(self, admin_client):
        job = make_failed(
            tasks.always_fails.enqueue({"note": "<script>alert(1)</script>"}),
            error="<script>alert(2)</script>",
            traceback='Traceback:\n  File "<script>alert(3)</script>"',
        )
        history = [{"attempt": 1, "at": "now", "worker": "<script>alert(4)</script>", "error": "e"}]
        Job.objects.filter(pk=job.pk).update(
            errors=[*history, {**history[0], "worker": "w", "error": "<script>alert(5)</script>"}]
        )
        response = admin_client.get(reverse("admin:django_outbox_job_change", args=[job.pk]))
        assert response.status_code == 200
        for n in range(1, 6):
            assert f"&lt;script&gt;alert({n})&lt;/script&gt;" in response.text
            assert f"<script>alert({n})</script>" not in response.text
        assert "&quot;note&quot;" in response.text
        assert "Traceback:" in response.text

    def test_adding_a_job_is_forbidden(self, admin_client):
        response = admin_client.get(reverse("admin:django_outbox_job_add"))
        assert response.status_code == 403
        assert not Job.objects.exists()


@pytest.mark.django_db
class TestRetryAction:
    def test_makes_failed_jobs_ready_now_with_one_more_attempt(self, client):
        client.force_login(staff_with("view_job", "change_job"))
        used_up = make_failed(tasks.always_fails.enqueue())
        gave_up = make_failed(tasks.gives_up_on_key_error.enqueue(), attempts=1)
        response = post_retry(client, [used_up, gave_up])
        assert response.status_code == 200
        now = timezone.now()
        used_up.refresh_from_db()
        gave_up.refresh_from_db()
        for job in (used_up, gave_up):
            assert job.status == JobStatus.READY
            assert job.run_at <= now
            assert job.finished_at is None
            assert job.max_attempts > job.attempts
        assert (used_up.attempts, used_up.max_attempts) == (3, 4)
        # Attempts remained: the limit stays as it was.
        assert (gave_up.attempts, gave_up.max_attempts) == (1, 5)
        assert sent_messages(response) == [
            (message_levels.SUCCESS, "2 jobs are ready to run again.")
        ]

    def test_leaves_jobs_that_are_not_failed_alone_and_says_how_many(self, admin_client):
        failed = make_failed(tasks.always_fails.enqueue())
        succeeded = make_succeeded(tasks.noop.enqueue())
        running = make_running(tasks.noop.enqueue())
        response = post_retry(admin_client, [failed, succeeded, running])
        assert response.status_code == 200
        assert Job.objects.get(pk=failed.pk).status == JobStatus.READY
        for job in (succeeded, running):
            after = Job.objects.get(pk=job.pk)
            assert (after.status, after.max_attempts, after.run_at, after.finished_at) == (
                job.status,
                job.max_attempts,
                job.run_at,
                job.finished_at,
            )
        assert sent_messages(response) == [
            (message_levels.SUCCESS, "1 job is ready to run again."),
            (
                message_levels.WARNING,
                "2 selected jobs were not retried: only failed or cancelled jobs can be.",
            ),
        ]

    def test_with_no_failed_job_selected_only_warns(self, admin_client):
        succeeded = make_succeeded(tasks.noop.enqueue())
        response = post_retry(admin_client, [succeeded])
        assert Job.objects.get(pk=succeeded.pk).status == JobStatus.SUCCEEDED
        assert sent_messages(response) == [
            (
                message_levels.WARNING,
                "1 selected job was not retried: only failed or cancelled jobs can be.",
            )
        ]


@pytest.mark.django_db
class TestViewOnlyUser:
    def test_sees_the_list_but_is_not_offered_the_action(self, client):
        client.force_login(staff_with("view_job"))
        failed = make_failed(tasks.always_fails.enqueue())
        response = client.get(reverse(CHANGELIST))
        assert response.status_code == 200
        assert listed(response) == {failed.pk}
        assert "retry_selected" not in response.text

    def test_posting_the_action_anyway_changes_nothing(self, client):
        client.force_login(staff_with("view_job"))
        failed = make_failed(tasks.always_fails.enqueue())
        post_retry(client, [failed])
        after = Job.objects.get(pk=failed.pk)
        assert (after.status, after.max_attempts, after.run_at) == (
            JobStatus.FAILED,
            failed.max_attempts,
            failed.run_at,
        )

    def test_staff_without_permissions_cannot_see_jobs(self, client):
        client.force_login(staff_with())
        assert client.get(reverse(CHANGELIST)).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_a_retried_job_really_runs_once_more(admin_client):
    """A job that failed for real, retried from the admin, makes exactly one more attempt."""
    job = tasks.always_fails.enqueue({"message": "still broken"})
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.max_attempts) == (JobStatus.FAILED, 3, 3)

    post_retry(admin_client, [job])
    stats = run_worker()

    job.refresh_from_db()
    assert stats.claimed == 1
    assert (job.status, job.attempts, job.max_attempts) == (JobStatus.FAILED, 4, 4)
    assert [entry["attempt"] for entry in job.errors] == [1, 2, 3, 4]
    assert job.last_error == "RuntimeError: still broken"


@pytest.mark.django_db(transaction=True)
def test_a_retried_job_can_succeed(admin_client):
    job = django_outbox.enqueue("tests.testapp.tasks.fails_once")
    make_failed(job, attempts=1, error="ConnectionError: first attempt fails")
    post_retry(admin_client, [job])
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)


@pytest.mark.django_db
class TestSearch:
    @pytest.mark.parametrize("length", [SEARCH_MAX_LENGTH + 1, 10_000])
    def test_a_search_longer_than_the_limit_is_refused_with_a_message_and_no_query(
        self, admin_client, length
    ):
        tasks.noop.enqueue()
        response, captured = search(admin_client, "x" * length)
        assert response.status_code == 200
        assert listed(response) == set()
        assert sent_messages(response) == [
            (
                message_levels.WARNING,
                f"Searches are limited to {SEARCH_MAX_LENGTH} characters; this one has "
                f"{length}. Nothing was searched.",
            )
        ]
        # Only the list filters' choices read the table; no search, no result list.
        assert not any("LIKE" in sql.upper() for sql in queries_on_jobs(captured))

    def test_a_search_of_the_longest_length_allowed_runs(self, admin_client):
        name = "t" * SEARCH_MAX_LENGTH
        job = django_outbox.enqueue("tests.testapp.tasks.noop")
        Job.objects.filter(pk=job.pk).update(task_name=name)
        response, _ = search(admin_client, name)
        assert listed(response) == {job.pk}
        assert sent_messages(response) == []

    def test_an_integer_finds_the_job_with_that_id_by_primary_key(self, admin_client):
        jobs = [tasks.noop.enqueue() for _ in range(3)]
        response, captured = search(admin_client, f" {jobs[1].pk} ")
        assert response.status_code == 200
        assert listed(response) == {jobs[1].pk}
        assert not any("LIKE" in where.upper() for where in where_clauses(captured))

    def test_an_integer_too_large_for_an_id_finds_nothing_and_does_not_fail(self, admin_client):
        tasks.noop.enqueue()
        response, _ = search(admin_client, "9" * 30)
        assert response.status_code == 200
        assert listed(response) == set()

    @pytest.mark.parametrize(
        ("term", "expected"),
        [
            pytest.param("write_note", {"note"}, id="part-of-the-task"),
            pytest.param("TESTAPP.TASKS.NOOP", {"worked"}, id="task-any-case"),
            pytest.param("emails", {"note"}, id="queue"),
            pytest.param("ema", {"note"}, id="start-of-the-queue"),
            pytest.param("mails", set(), id="not-the-middle-of-a-queue"),
            pytest.param("host-a", {"worked"}, id="start-of-the-worker"),
            pytest.param("pid-7", set(), id="not-the-middle-of-a-worker"),
            pytest.param("nothing-like-it", set(), id="no-match"),
        ],
    )
    def test_text_matches_the_task_or_the_start_of_the_queue_or_worker(
        self, admin_client, term, expected
    ):
        jobs = {
            "note": tasks.write_note.enqueue({"text": "hi"}),
            "worked": make_running(tasks.noop.enqueue()),
        }
        Job.objects.filter(pk=jobs["worked"].pk).update(worker_id="host-a:pid-7")
        response, _ = search(admin_client, term)
        assert response.status_code == 200
        assert listed(response) == {jobs[name].pk for name in expected}

    def test_error_text_is_searched_only_with_the_error_prefix(self, admin_client):
        disk = make_failed(tasks.always_fails.enqueue(), error="OSError: disk full on /var")
        make_failed(tasks.always_fails.enqueue(), error="ValueError: bad address")
        assert listed(search(admin_client, "disk full")[0]) == set()
        assert listed(search(admin_client, "error:disk full")[0]) == {disk.pk}
        assert listed(search(admin_client, "ERROR:  Disk Full ")[0]) == {disk.pk}
        # The prefix alone searches nothing.
        assert len(listed(search(admin_client, "error:")[0])) == 2

    @pytest.mark.parametrize(("quick", "few_matches"), [(True, 1_000), (False, 1_000), (False, 0)])
    def test_an_error_search_finds_the_same_jobs_along_any_index(
        self, admin_client, monkeypatch, quick, few_matches
    ):
        """In the list's order (its first page quick, or many matches) or along the trigram
        index (few matches), on every database: the jobs whose error holds the text, past
        errors included."""
        monkeypatch.setattr(error_search, "first_page_is_quick", lambda *arguments: quick)
        monkeypatch.setattr(error_search, "FEW_MATCHES", few_matches)
        disk = make_failed(tasks.always_fails.enqueue(), error="OSError: Disk full on /var")
        fixed = make_succeeded(tasks.noop.enqueue())
        Job.objects.filter(pk=fixed.pk).update(last_error="OSError: disk FULL")
        make_failed(tasks.always_fails.enqueue(), error="ValueError: bad address")
        tasks.noop.enqueue()
        assert listed(search(admin_client, "error:disk full")[0]) == {disk.pk, fixed.pk}
        assert listed(search(admin_client, "error:no such error")[0]) == set()
        assert listed(search(admin_client, "error:disk full", status__exact="failed")[0]) == {
            disk.pk
        }

    def test_a_key_search_finds_the_jobs_of_a_lock_fair_or_unique_key(self, admin_client):
        locked = tasks.noop.enqueue(lock="tenant-7")
        fair = tasks.noop.enqueue(fair_key="tenant-7")
        unique = tasks.noop.enqueue(unique_key="tenant-7")
        tasks.noop.enqueue(fair_key="tenant-8")
        tasks.noop.enqueue()
        assert listed(search(admin_client, "key:tenant-7")[0]) == {locked.pk, fair.pk, unique.pk}
        assert listed(search(admin_client, "KEY: tenant-8 ")[0]) == {
            Job.objects.get(fair_key="tenant-8").pk
        }
        # Exactly the key: not a part of it.
        assert listed(search(admin_client, "key:tenant")[0]) == set()

    def test_the_scheduling_filter_lists_jobs_by_what_their_enqueue_asked(self, admin_client):
        parent = tasks.noop.enqueue(delay=60)
        jobs = {
            "lock": tasks.noop.enqueue(lock="k"),
            "fair": tasks.noop.enqueue(fair_key="k"),
            "dependencies": tasks.noop.enqueue(depends_on=parent),
            "dependents": parent,
            "unique": tasks.noop.enqueue(unique_key="k"),
        }
        tasks.noop.enqueue()
        for value, job in jobs.items():
            response = admin_client.get(reverse(CHANGELIST), {"scheduling": value})
            assert response.status_code == 200
            assert listed(response) == {job.pk}, value

    def test_the_default_search_reads_no_payload_or_error_column(self, admin_client):
        """A job with megabytes of payload and error is not scanned by an ordinary search."""
        # Written past enqueue's payload limit, as rows from before it (or raw SQL) can be.
        big = make_failed(tasks.noop.enqueue(), error="E" * 1_000_000 + " noop")
        Job.objects.filter(pk=big.pk).update(payload={"blob": "p" * 3_000_000})
        for term in ("noop", str(big.pk)):
            response, captured = search(admin_client, term)
            assert response.status_code == 200
            assert big.pk in listed(response)
            wheres = where_clauses(captured)
            assert wheres
            for where in wheres:
                # A search by text reads one key of Django tasks' payloads, no other payload.
                where = outside_path_reads(where) if "payload" in where else where
                for column in BIG_COLUMNS:
                    assert column not in where, (term, where)
        # The same check sees it when the search does read the error column.
        response, captured = search(admin_client, "error:noop")
        assert listed(response) == {big.pk}
        assert any("last_error" in where for where in where_clauses(captured))

    def test_the_list_fetches_no_payload_traceback_or_error_history(self, admin_client):
        job = make_failed(tasks.noop.enqueue({"note": "small"}))
        response, captured = search(admin_client, "noop")
        assert listed(response) == {job.pk}
        # The result list's query: the one that selects the jobs' rows.
        selects = [sql.partition(" FROM ")[0] for sql in queries_on_jobs(captured)]
        [page] = [select for select in selects if '"django_outbox_job"."status"' in select]
        # Of the payload, the list reads the "task" key of Django tasks' rows only.
        page = outside_path_reads(page)
        for column in ("payload", "last_traceback", '"errors"', "return_value", "resume_data"):
            assert column not in page
        # The detail page still shows them.
        detail = admin_client.get(reverse("admin:django_outbox_job_change", args=[job.pk]))
        assert "&quot;note&quot;: &quot;small&quot;" in detail.text

    def test_the_detail_page_shows_what_a_job_returned_escaped(self, admin_client):
        job = make_succeeded(tasks.noop.enqueue())
        Job.objects.filter(pk=job.pk).update(return_value={"html": "<b>bold</b>"})
        detail = admin_client.get(reverse("admin:django_outbox_job_change", args=[job.pk]))
        assert "&lt;b&gt;bold&lt;/b&gt;" in detail.text
        assert "<b>bold</b>" not in detail.text

    def test_a_search_that_runs_too_long_is_stopped_with_a_message_not_an_error_page(
        self, admin_client, monkeypatch
    ):
        tasks.noop.enqueue()
        searches = JobAdmin.get_search_results

        def slow_search(self, request, queryset, term):
            queryset, duplicates = searches(self, request, queryset, term)
            if term:
                queryset = queryset.extra(where=[SLOW_CONDITION[connection.vendor]])
            return queryset, duplicates

        monkeypatch.setattr(JobAdmin, "get_search_results", slow_search)
        monkeypatch.setattr(JobAdmin, "search_time_limit", 0.2)
        response = admin_client.get(reverse(CHANGELIST), {"q": "noop", "status__exact": "ready"})
        # Had the query run to its end, the list would show (200).
        assert response.status_code == 302
        assert response["Location"] == (
            f"{reverse(CHANGELIST)}?status__exact=ready&stopped_search=noop"
        )
        page = admin_client.get(response["Location"])
        # The search is back in its box, not run; the filter kept.
        assert 'value="noop" id="searchbar"' in page.text
        assert page.context["cl"].query == ""
        assert page.context["cl"].get_query_string() == "?status__exact=ready"
        assert sent_messages(page) == [
            (
                message_levels.ERROR,
                "The search was stopped after 0.2 seconds. Search by id, task, queue or worker, "
                "or filter by status first.",
            )
        ]
        assert statement_timeout() == "0"

    def test_a_search_leaves_the_connection_without_a_time_limit(self, admin_client):
        tasks.noop.enqueue()
        response, _ = search(admin_client, "noop")
        assert response.status_code == 200
        assert statement_timeout() == "0"
        # A slow query after the request runs to its end.
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 WHERE {SLOW_CONDITION[connection.vendor]}")
            assert list(cursor.fetchall()) == [(1,)]

    @pytest.mark.postgresql
    def test_a_serial_time_limit_runs_without_parallel_workers_and_puts_them_back(self):
        def setting(name):
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting(%s)", [name])
                return cursor.fetchone()[0]

        before = setting("max_parallel_workers_per_gather")
        with query_time_limit(connection.alias, 0.5, serial=True):
            assert setting("max_parallel_workers_per_gather") == "0"
            assert setting("statement_timeout") == "500ms"
        assert setting("max_parallel_workers_per_gather") == before
        assert statement_timeout() == "0"


#: A condition that takes about a second (PostgreSQL) or several (SQLite) to evaluate.
SLOW_CONDITION = {
    "postgresql": "(SELECT true FROM pg_sleep(1))",
    "sqlite": "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 3000000) "
    "SELECT count(*) FROM c) > 0",
    "mysql": "(SELECT SLEEP(1)) = 0",
}


def statement_timeout():
    """Return PostgreSQL's statement_timeout (MariaDB's max_statement_time) on the test
    connection ("0" for none, and on SQLite)."""
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@SESSION.max_statement_time")
            return f"{float(cursor.fetchone()[0]):g}"
    if connection.vendor != "postgresql":
        return "0"
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def make_halted(job, reason="waiting for <b>approval</b>"):
    Job.objects.filter(pk=job.pk).update(status=JobStatus.HALTED, halt_reason=reason)
    job.refresh_from_db()
    return job


@pytest.mark.django_db
class TestCancelAction:
    def test_cancels_pending_jobs_asks_running_ones_to_stop_and_leaves_finished_ones(
        self, admin_client
    ):
        ready = tasks.noop.enqueue()
        halted = make_halted(tasks.noop.enqueue())
        running = make_running(tasks.noop.enqueue())
        succeeded = make_succeeded(tasks.noop.enqueue())
        response = post_action(
            admin_client,
            "cancel_selected",
            [ready, halted, running, succeeded],
            outbox_confirmed="yes",
        )
        statuses = dict(Job.objects.values_list("pk", "status"))
        assert statuses == {
            ready.pk: JobStatus.CANCELLED,
            halted.pk: JobStatus.CANCELLED,
            running.pk: JobStatus.RUNNING,
            succeeded.pk: JobStatus.SUCCEEDED,
        }
        assert Job.objects.get(pk=running.pk).cancel_requested
        assert sent_messages(response) == [
            (message_levels.SUCCESS, "2 jobs were cancelled: they will not run."),
            (
                message_levels.SUCCESS,
                "1 running job was asked to stop; it ends as cancelled when its worker sees "
                "the request (at its next heartbeat).",
            ),
            (
                message_levels.WARNING,
                "1 selected job was not cancelled: it had finished, or was already asked to stop.",
            ),
        ]
        # The list says which running job was asked to stop.
        page = admin_client.get(reverse(CHANGELIST))
        assert "Running (cancel requested)" in page.text

    def test_needs_the_change_permission(self, client):
        client.force_login(staff_with("view_job"))
        ready = tasks.noop.enqueue()
        assert "cancel_selected" not in client.get(reverse(CHANGELIST)).text
        post_action(client, "cancel_selected", [ready], outbox_confirmed="yes")
        assert Job.objects.get(pk=ready.pk).status == JobStatus.READY


@pytest.mark.django_db
class TestResumeAction:
    def test_resumes_halted_jobs_only(self, admin_client):
        halted = make_halted(tasks.noop.enqueue())
        ready = tasks.noop.enqueue()
        response = post_action(admin_client, "resume_selected", [halted, ready])
        after = Job.objects.get(pk=halted.pk)
        assert (after.status, after.halt_reason, after.resume_data) == (JobStatus.READY, "", None)
        assert sent_messages(response) == [
            (
                message_levels.SUCCESS,
                "1 halted job is ready to run again (resumed without data).",
            ),
            (message_levels.WARNING, "1 selected job was not resumed: only halted jobs can be."),
        ]

    def test_needs_the_change_permission(self, client):
        client.force_login(staff_with("view_job"))
        halted = make_halted(tasks.noop.enqueue())
        post_action(client, "resume_selected", [halted])
        assert Job.objects.get(pk=halted.pk).status == JobStatus.HALTED

    def test_the_detail_page_shows_the_halt_reason_and_resume_data_escaped(self, admin_client):
        halted = make_halted(tasks.noop.enqueue())
        Job.objects.filter(pk=halted.pk).update(resume_data={"note": "<script>x</script>"})
        page = admin_client.get(reverse("admin:django_outbox_job_change", args=[halted.pk]))
        assert "waiting for &lt;b&gt;approval&lt;/b&gt;" in page.text
        assert "&lt;script&gt;x&lt;/script&gt;" in page.text
        assert "<script>x</script>" not in page.text


@pytest.mark.parametrize(
    "param",
    ["queue", "queue__exact", "task_name", "task_name__exact", "worker_id", "status__exact", "q"],
)
@pytest.mark.parametrize("value", ["a\x00b", "\x00", "error:\x00"])
def test_a_nul_in_a_filter_or_search_is_a_bad_request_not_an_error(admin_client, param, value):
    """PostgreSQL's text refuses NUL: the list answers 400 rather than failing its query."""
    tasks.noop.enqueue()
    response = admin_client.get(reverse(CHANGELIST), {param: value})
    assert response.status_code == 400
    assert b"NUL character" in response.content


@pytest.mark.parametrize("param", ["queue", "task_name", "worker_id", "q"])
def test_other_control_characters_in_a_filter_find_nothing(admin_client, param):
    tasks.noop.enqueue()
    response = admin_client.get(reverse(CHANGELIST), {param: "a\x01\x1fb\x7f"})
    # Django's changelist sends an unknown lookup back with ?e=1; a known one lists nothing.
    assert response.status_code in (200, 302)
    if response.status_code == 200:
        assert listed(response) == set()
