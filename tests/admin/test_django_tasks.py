"""Django tasks' jobs in the admin: listed, shown, searched and filtered by the Django task's path
(a key of the payload), while the list still reads no payload."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_outbox.admin.filters import task_choices
from django_outbox.admin.job_admin import JobAdmin
from django_outbox.apps import uses_task_backend
from django_outbox.db.time_limits import query_time_limit
from django_outbox.django_task_jobs import NON_ATOMIC_TASK_NAME, TASK_NAME
from django_outbox.models import Job
from django_outbox.tasks.registry import registered_names
from tests.admin.helpers import (
    CHANGELIST,
    listed,
    make_failed,
    outside_path_reads,
    queries_on_jobs,
    search,
    where_clauses,
)
from tests.testapp import tasks

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not uses_task_backend(), reason="neither django.tasks nor its backport is installed"
    ),
]

if uses_task_backend():
    from tests.testapp import django_tasks

CHANGE = "admin:django_outbox_job_change"
ADD = "tests.testapp.django_tasks.add"
NOTE = "tests.testapp.django_tasks.note"


def django_job(path, *, task_name=TASK_NAME, **payload):
    """A Django task's job as the backend stores it, naming ``path`` (declared or not)."""
    return Job.objects.create(
        task_name=task_name,
        queue="default",
        max_attempts=1,
        payload={"task": path, "args": [], "kwargs": {}, **payload},
    )


def task_cell(response, job):
    """The text of ``job``'s row's task column in the list."""
    match = re.search(
        rf'value="{job.pk}".*?<td class="field-task_display">(.*?)</td>', response.text, re.S
    )
    assert match, f"no row for job {job.pk}"
    # Inside the span that clips it to the column, with the whole in its tooltip.
    clipped = re.fullmatch(
        r'<span class="outbox-clip outbox-task" title="([^"]*)">(.*)</span>', match.group(1), re.S
    )
    assert clipped, match.group(1)
    return clipped.group(2)


def page_select(captured):
    """The SELECT list of the list's page query (the one reading the jobs' status)."""
    selects = [sql.partition(" FROM ")[0] for sql in queries_on_jobs(captured)]
    [page] = [select for select in selects if '"django_outbox_job"."status"' in select]
    return page


class TestList:
    def test_the_task_column_shows_the_django_task_s_path_marked(self, admin_client):
        result = django_tasks.add.enqueue(1, 2)
        non_atomic = django_tasks.note_then_fail.enqueue("x")
        plain = tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST))
        assert response.status_code == 200
        assert task_cell(response, Job.objects.get(pk=result.id)).startswith(
            f'{ADD} <span class="outbox-django-task" title="{TASK_NAME}">(Django task)</span>'
        )
        assert task_cell(response, Job.objects.get(pk=non_atomic.id)).startswith(
            "tests.testapp.django_tasks.note_then_fail "
            f'<span class="outbox-django-task" title="{NON_ATOMIC_TASK_NAME}">'
        )
        assert task_cell(response, plain) == "tests.testapp.tasks.noop"

    def test_a_path_in_the_payload_is_shown_escaped(self, admin_client):
        job = django_job("<script>alert(1)</script>")
        response = admin_client.get(reverse(CHANGELIST))
        assert task_cell(response, job).startswith("&lt;script&gt;alert(1)&lt;/script&gt; <span")
        assert "<script>alert(1)" not in response.text

    def test_another_task_s_payload_key_named_task_is_not_taken_for_a_path(self, admin_client):
        job = tasks.write_note.enqueue({"task": "looks.like.a.path", "text": "hi"})
        response = admin_client.get(reverse(CHANGELIST))
        assert task_cell(response, job) == "tests.testapp.tasks.write_note"

    def test_the_list_reads_the_path_key_not_the_payload_column(self, admin_client):
        jobs = [Job.objects.get(pk=django_tasks.add.enqueue(1, 2).id), tasks.noop.enqueue()]
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(reverse(CHANGELIST))
        assert listed(response) == {job.pk for job in jobs}
        for job in response.context["cl"].result_list:
            assert "payload" in job.get_deferred_fields()
        # The payload is read only by the CASE that extracts its "task" key for Django
        # tasks' rows: never fetched as a column.
        assert "payload" not in outside_path_reads(page_select(captured))

    def test_django_tasks_jobs_add_no_query_to_the_list(self, admin_client):
        tasks.noop.enqueue()
        with CaptureQueriesContext(connection) as captured:
            admin_client.get(reverse(CHANGELIST))
        without = len(queries_on_jobs(captured))
        for number in range(5):
            django_tasks.add.enqueue(number, 1)
        django_tasks.note_then_fail.enqueue("x")
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(reverse(CHANGELIST))
        assert len(listed(response)) == 7
        assert len(queries_on_jobs(captured)) == without


class TestChangePage:
    def test_shows_the_django_task_s_path_marked_and_escaped(self, admin_client):
        result = django_tasks.add.enqueue(1, 2)
        page = admin_client.get(reverse(CHANGE, args=[result.id]))
        assert (
            f'{ADD} <span class="outbox-django-task" title="{TASK_NAME}">(Django task)</span>'
            in page.text
        )
        job = django_job("<b>x</b>")
        page = admin_client.get(reverse(CHANGE, args=[job.pk]))
        assert "&lt;b&gt;x&lt;/b&gt; <span" in page.text
        assert "<b>x</b>" not in page.text

    def test_an_outbox_task_s_page_shows_its_name(self, admin_client):
        job = tasks.write_note.enqueue({"task": "looks.like.a.path", "text": "hi"})
        page = admin_client.get(reverse(CHANGE, args=[job.pk]))
        assert (
            '<div class="readonly"><span class="outbox-clip outbox-task" '
            'title="tests.testapp.tasks.write_note">tests.testapp.tasks.write_note</span></div>'
        ) in page.text


class TestSearch:
    @pytest.mark.parametrize(
        ("term", "expected"),
        [
            pytest.param("django_tasks.add", {"add"}, id="part-of-the-path"),
            pytest.param("DJANGO_TASKS.NOTE", {"note"}, id="any-case"),
            pytest.param("django_tasks.", {"add", "note"}, id="both"),
            pytest.param("looks.like", set(), id="not-another-task-s-payload-key"),
            pytest.param("tests.testapp.tasks.write", {"plain"}, id="outbox-task-still"),
            pytest.param("django_outbox.django_task", {"add", "note"}, id="the-outbox-task"),
        ],
    )
    def test_part_of_a_django_task_s_path_finds_its_jobs(self, admin_client, term, expected):
        jobs = {
            "add": int(django_tasks.add.enqueue(1, 2).id),
            "note": int(django_tasks.note.enqueue("hi").id),
            "plain": tasks.write_note.enqueue({"task": "looks.like.a.path", "text": "hi"}).pk,
        }
        response, _ = search(admin_client, term)
        assert response.status_code == 200
        assert listed(response) == {jobs[name] for name in expected}

    def test_the_search_reads_the_payload_of_django_tasks_rows_only(self, admin_client):
        # Written past enqueue's payload limit, as rows from before it (or raw SQL) can be.
        big = make_failed(tasks.noop.enqueue())
        Job.objects.filter(pk=big.pk).update(payload={"task": "django_tasks", "b": "p" * 3_000_000})
        found = django_tasks.add.enqueue(1, 2)
        response, captured = search(admin_client, "django_tasks")
        assert listed(response) == {int(found.id)}
        wheres = [where for where in where_clauses(captured) if "payload" in where]
        assert wheres
        for where in wheres:
            assert "payload" not in outside_path_reads(where)

    def test_runs_under_the_search_time_limit(self, admin_client, monkeypatch):
        limits = []

        def recorded(using, seconds):
            limits.append(seconds)
            return query_time_limit(using, seconds)

        monkeypatch.setattr("django_outbox.admin.job_admin.query_time_limit", recorded)
        django_tasks.add.enqueue(1, 2)
        response, _ = search(admin_client, "django_tasks.add")
        assert len(listed(response)) == 1
        assert limits == [JobAdmin.search_time_limit]


class TestFilter:
    def test_offers_the_declared_django_tasks_after_the_registered_tasks(self):
        choices = task_choices()
        names = registered_names()
        assert choices[: len(names)] == names
        assert {ADD, NOTE} <= set(choices[len(names) :])
        assert choices[len(names) :] == sorted(choices[len(names) :])

    def test_filters_by_a_django_task_s_path_and_shows_it_marked(self, admin_client):
        add = django_tasks.add.enqueue(1, 2)
        django_tasks.note.enqueue("hi")
        tasks.write_note.enqueue({"task": ADD, "text": "hi"})
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(reverse(CHANGELIST), {"task_name": ADD})
        assert listed(response) == {int(add.id)}
        # Other tasks' payloads are not read: the key only behind the CASE on the task name.
        for where in where_clauses(captured):
            assert "payload" not in outside_path_reads(where)
        assert f"?task_name={ADD}" in response.text
        assert f"{ADD} (Django task)" in response.text

    def test_the_outbox_task_of_all_django_tasks_still_filters_by_its_name(self, admin_client):
        jobs = {django_tasks.add.enqueue(1, 2).id, django_tasks.note.enqueue("hi").id}
        tasks.noop.enqueue()
        response = admin_client.get(reverse(CHANGELIST), {"task_name": TASK_NAME})
        assert listed(response) == {int(pk) for pk in jobs}

    def test_an_undeclared_path_filters_by_the_task_name_column(self, admin_client):
        # Not declared here: no job has it as its task name, so none is listed.
        django_job("gone.tasks.old")
        response = admin_client.get(reverse(CHANGELIST), {"task_name": "gone.tasks.old"})
        assert response.status_code == 200
        assert listed(response) == set()
