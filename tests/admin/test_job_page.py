"""A job's page opens on what happened and what can be done: the summary line, the current error
(a past one labelled so), the traceback and a long error folded, the actions; payloads and
tracebacks only for users with the payload permission."""

import datetime
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from django_outbox.models import Job, JobStatus
from tests.admin.helpers import CHANGELIST, make_failed, staff_with
from tests.testapp import tasks

CHANGE = "admin:django_outbox_job_change"


def page(client, job):
    response = client.get(reverse(CHANGE, args=[job.pk]))
    assert response.status_code == 200
    return response.text


def text_of(html):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def summary(html):
    match = re.search(r'<p class="outbox-summary">(.*?)</p>', html, re.S)
    assert match, "no summary line"
    return text_of(match.group(1))


def failed_minutes_ago(job, minutes, **changes):
    Job.objects.filter(pk=job.pk).update(
        finished_at=timezone.now() - datetime.timedelta(minutes=minutes, seconds=5), **changes
    )
    job.refresh_from_db()
    return job


@pytest.mark.django_db
class TestFirstScreen:
    def test_a_failed_job_opens_on_its_summary_error_and_actions_before_its_fields(
        self, admin_client
    ):
        job = make_failed(tasks.always_fails.enqueue({"email": "ada@example.com"}))
        failed_minutes_ago(job, 4, worker_id="host-1:42")
        html = page(admin_client, job)
        assert summary(html) == "Failed attempt 3 of 3 · worker host-1:42 · failed 4 min ago " + (
            f"{timezone.localtime(job.finished_at):%H:%M:%S}"
        )
        assert '<h2 id="outbox-error-label">Error of attempt 1</h2>' in html
        assert '<pre class="outbox-error-text">RuntimeError: boom</pre>' in html
        # The traceback folded: a <details> without "open".
        assert '<details class="outbox-traceback"><summary>Traceback (1 line)</summary>' in html
        # Summary, error and actions come before the fields, the history and the payload.
        order = [
            html.index('class="outbox-summary"'),
            html.index('class="outbox-error-panel"'),
            html.index('class="outbox-retry"'),
            html.index('id="job_form"'),
            html.index('class="outbox-history"'),
            html.index("ada@example.com"),
        ]
        assert order == sorted(order)

    def test_a_long_error_is_folded_below_its_first_line(self, admin_client):
        error = "ValueError: the first line\n" + "\n".join(f"line {n}" for n in range(60))
        job = make_failed(tasks.always_fails.enqueue(), error=error)
        html = page(admin_client, job)
        assert '<pre class="outbox-error-text">ValueError: the first line</pre>' in html
        assert '<details class="outbox-whole-error"><summary>The whole error (61 lines)' in html
        # A short one is shown whole.
        short = make_failed(tasks.always_fails.enqueue(), error="KeyError: 'a'\nin row 7")
        html = page(admin_client, short)
        assert '<pre class="outbox-error-text">KeyError: &#x27;a&#x27;\nin row 7</pre>' in html
        assert 'class="outbox-whole-error"' not in html

    def test_a_job_that_succeeded_after_failures_shows_its_old_error_as_past(self, admin_client):
        job = make_failed(tasks.always_fails.enqueue())
        errors = [
            {"attempt": n, "at": "2026-01-01T00:00:00+00:00", "worker": "w1", "error": "boom"}
            for n in (1, 2)
        ]
        Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, errors=errors)
        html = page(admin_client, job)
        assert "succeeded after 2 failures" in summary(html)
        assert '<h2 id="outbox-error-label">Past error, of attempt 2</h2>' in html
        assert 'class="outbox-error-panel outbox-past-error"' in html
        assert 'class="outbox-retry"' not in html

    def test_a_delayed_job_says_when_it_runs(self, admin_client):
        job = tasks.noop.enqueue(delay=58 * 60 + 30)
        html = page(admin_client, job)
        assert summary(html).startswith("Ready not run yet, 20 attempts allowed · runs in 58 min")
        assert 'class="outbox-error-panel' not in html

    def test_cancel_asks_for_confirmation_and_looks_destructive(self, admin_client):
        job = tasks.noop.enqueue(delay=60)
        html = page(admin_client, job)
        assert re.search(r'<a href="[^"]*/cancel/" class="[^"]*outbox-destructive', html)
        confirmation = admin_client.get(reverse("admin:django_outbox_job_cancel", args=[job.pk]))
        assert confirmation.status_code == 200
        assert "Cancel job" in confirmation.text
        job.refresh_from_db()
        assert job.status == JobStatus.READY  # Asking is not doing.
        admin_client.post(reverse("admin:django_outbox_job_cancel", args=[job.pk]))
        job.refresh_from_db()
        assert job.status == JobStatus.CANCELLED


@pytest.mark.django_db
class TestPayloadPermission:
    def failed_job(self):
        return make_failed(
            tasks.always_fails.enqueue({"email": "ada@example.com"}),
            error="SMTPError: refused ada@example.com\nwhile sending to Ada Lovelace",
            traceback="Traceback (most recent call last):\n  secret frame",
        )

    def test_without_it_a_user_sees_metadata_and_the_error_s_first_line_only(self, client):
        job = self.failed_job()
        client.force_login(staff_with("view_job"))
        html = page(client, job)
        assert "SMTPError: refused ada@example.com" in html
        for hidden in ("Ada Lovelace", "secret frame", '"email"', "&quot;email&quot;"):
            assert hidden not in html
        assert "need the permission to view job payloads" in html
        assert "tests.testapp.tasks.always_fails" in html
        # The list's tooltip holds the first line only.
        listing = client.get(reverse(CHANGELIST)).text
        assert "SMTPError: refused ada@example.com" in listing
        assert "Ada Lovelace" not in listing
        # Nor the admin's history page (its messages name payloads), nor the edit form.
        history = client.get(reverse("admin:django_outbox_job_history", args=[job.pk]))
        assert history.status_code == 403

    def test_without_it_the_edit_form_is_refused(self, client):
        job = self.failed_job()
        client.force_login(staff_with("view_job", "change_job"))
        edit = reverse("admin:django_outbox_job_edit_payload", args=[job.pk])
        assert client.get(edit).status_code == 403
        assert client.post(edit, {"payload": "{}"}).status_code == 403
        job.refresh_from_db()
        assert job.payload == {"email": "ada@example.com"}
        # Retry needs no payload: it is offered.
        assert "outbox-retry" in page(client, job)
        assert 'outbox-edit-payload"' not in page(client, job)

    def test_with_it_a_user_sees_payload_whole_error_and_traceback(self, client):
        job = self.failed_job()
        client.force_login(staff_with("view_job", "view_job_payload"))
        html = page(client, job)
        for shown in ("Ada Lovelace", "secret frame", "&quot;email&quot;"):
            assert shown in html


@pytest.mark.django_db(transaction=True)
def test_an_attempt_s_duration_is_measured_on_the_database_s_clock(monkeypatch):
    """A worker whose clock is an hour ahead records when its attempt ended by the database's
    clock, as the claim recorded when it started: the history's "took" is the attempt's."""
    from django.utils import timezone as django_timezone

    from tests.helpers import run_worker

    real_now = django_timezone.now
    monkeypatch.setattr(django_timezone, "now", lambda: real_now() + datetime.timedelta(hours=1))
    job = tasks.always_fails.enqueue()
    run_worker()
    monkeypatch.setattr(django_timezone, "now", real_now)
    job.refresh_from_db()
    entry = job.errors[0]
    took = datetime.datetime.fromisoformat(entry["at"]) - datetime.datetime.fromisoformat(
        entry["started_at"]
    )
    assert datetime.timedelta(0) <= took < datetime.timedelta(seconds=30), entry
