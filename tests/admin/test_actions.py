"""The list's actions: destructive ones and those on every job the list matches ask first; each
changed job, bulk included, is written to the admin log; log entries of pruned jobs go with them.
"""

import datetime

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse
from django.utils import timezone

from django_outbox.admin import bulk
from django_outbox.jobs.housekeeping import prune
from django_outbox.models import Job, JobStatus
from tests.admin.helpers import CHANGELIST, make_failed, make_running, make_succeeded, post_action
from tests.testapp import tasks


def log_of(job):
    return list(
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(Job), object_id=str(job.pk)
        ).values_list("change_message", flat=True)
    )


@pytest.mark.django_db
class TestConfirmation:
    def test_cancel_asks_first_and_changes_nothing_until_confirmed(self, admin_client):
        jobs = [tasks.noop.enqueue() for _ in range(2)]
        response = post_action(admin_client, "cancel_selected", jobs)
        assert response.status_code == 200
        assert "This acts on 2 jobs." in response.text
        assert 'value="Yes, cancel them"' in response.text
        assert {job.status for job in Job.objects.all()} == {JobStatus.READY}
        # The page posts the selection back, confirmed.
        for job in jobs:
            assert f'name="_selected_action" value="{job.pk}"' in response.text
        assert 'name="outbox_confirmed" value="yes"' in response.text
        post_action(admin_client, "cancel_selected", jobs, outbox_confirmed="yes")
        assert {job.status for job in Job.objects.all()} == {JobStatus.CANCELLED}

    def test_retry_of_every_matching_job_asks_first_and_keeps_the_search(self, admin_client):
        failed = [make_failed(tasks.always_fails.enqueue()) for _ in range(3)]
        other = make_failed(tasks.noop.enqueue())
        url = reverse(CHANGELIST) + "?q=always_fails&status__exact=failed"
        data = {"action": "retry_selected", "_selected_action": [failed[0].pk], "index": 0}
        response = admin_client.post(url, {**data, "select_across": "1"})
        assert "This acts on 3 jobs." in response.text
        assert "Every job the list's search and filters match" in response.text
        assert Job.objects.filter(status=JobStatus.FAILED).count() == 4
        assert f'action="{url.replace("&", "&amp;")}"' in response.text
        admin_client.post(url, {**data, "select_across": "1", bulk.CONFIRMED: "yes"})
        assert {job.pk for job in Job.objects.filter(status=JobStatus.READY)} == {
            job.pk for job in failed
        }
        assert Job.objects.get(pk=other.pk).status == JobStatus.FAILED

    def test_retry_of_selected_jobs_needs_no_confirmation(self, admin_client):
        job = make_failed(tasks.always_fails.enqueue())
        post_action(admin_client, "retry_selected", [job])
        assert Job.objects.get(pk=job.pk).status == JobStatus.READY


@pytest.mark.django_db
class TestAdminLog:
    def test_every_job_a_bulk_action_changed_is_logged_and_no_other(
        self, admin_client, monkeypatch
    ):
        monkeypatch.setattr(bulk, "CHUNK_SIZE", 2)  # Several chunks.
        failed = [make_failed(tasks.always_fails.enqueue()) for _ in range(5)]
        succeeded = make_succeeded(tasks.noop.enqueue())
        post_action(admin_client, "retry_selected", [*failed, succeeded])
        for job in failed:
            assert log_of(job) == ["Retried."]
        assert log_of(succeeded) == []
        entry = LogEntry.objects.filter(object_id=str(failed[0].pk)).get()
        assert (entry.action_flag, entry.user.username) == (CHANGE, "admin")

    def test_cancel_logs_cancelled_and_stop_requests_apart(self, admin_client):
        ready, running = tasks.noop.enqueue(), make_running(tasks.noop.enqueue())
        post_action(admin_client, "cancel_selected", [ready, running], outbox_confirmed="yes")
        assert log_of(ready) == ["Cancelled."]
        assert log_of(running) == ["Asked the running job to stop."]

    def test_log_entries_of_pruned_jobs_are_pruned_with_them(self, admin_client):
        old, kept = (make_failed(tasks.always_fails.enqueue()) for _ in range(2))
        post_action(admin_client, "retry_selected", [old, kept])
        for job in (old, kept):
            make_failed(job)
        Job.objects.filter(pk=old.pk).update(
            finished_at=timezone.now() - datetime.timedelta(days=30)
        )
        assert prune(older_than=7 * 86400, pause=0) == 1
        assert not Job.objects.filter(pk=old.pk).exists()
        assert log_of(old) == []
        assert log_of(kept) == ["Retried."]


@pytest.mark.django_db
def test_the_delete_action_logs_each_deleted_job(admin_client):
    from django.contrib.admin.models import DELETION

    jobs = [make_succeeded(tasks.noop.enqueue()) for _ in range(3)]
    post_action(admin_client, "delete_selected", jobs, post="yes")
    assert not Job.objects.exists()
    entries = LogEntry.objects.filter(action_flag=DELETION)
    assert {entry.object_id for entry in entries} == {str(job.pk) for job in jobs}
    assert {entry.object_repr for entry in entries} == {str(job) for job in jobs}
