"""The job admin for operators: what the list and a job's page show, and the
job page's actions: retry now, cancel, edit the payload and retry (a poison message fixed)."""

import datetime
import decimal
import json
import time

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import constants as message_levels
from django.urls import reverse
from django.utils import timezone

import django_outbox
from django_outbox import retry_with_payload
from django_outbox.exceptions import (
    JobNotFound,
    JobStateError,
    PayloadDecodeError,
    PayloadError,
    PayloadValidationError,
    UnknownTaskError,
)
from django_outbox.models import Job, JobStatus
from tests.admin.helpers import (
    CHANGELIST,
    make_failed,
    make_running,
    make_succeeded,
    sent_messages,
    staff_with,
)
from tests.helpers import run_worker
from tests.processes import wait_until
from tests.testapp import tasks
from tests.testapp.models import Note

CHANGE = "admin:django_outbox_job_change"
EDIT = "admin:django_outbox_job_edit_payload"
RETRY = "admin:django_outbox_job_retry"
CANCEL = "admin:django_outbox_job_cancel"


def poison_invoice():
    """An invoice job that failed on its data (no email) after both its attempts."""
    job = tasks.sends_invoice.enqueue({"number": 7, "customer": {"name": "Ada"}})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    return job


def edit(client, job, text):
    return client.post(reverse(EDIT, args=[job.pk]), {"payload": text}, follow=True)


@pytest.mark.django_db
class TestList:
    def test_shows_status_in_colour_and_words_age_attempts_and_the_errors_first_line(
        self, admin_client
    ):
        job = make_failed(
            tasks.always_fails.enqueue(),
            error="KeyError: 'email'\nwhile sending <b>zebra</b> 7",
        )
        Job.objects.filter(pk=job.pk).update(
            enqueued_at=timezone.now() - datetime.timedelta(hours=3)
        )
        response = admin_client.get(reverse(CHANGELIST))
        assert 'class="outbox-status outbox-status-failed"' in response.text
        assert ">Failed</span>" in response.text
        assert ">3 h 0 min</time>" in response.text
        assert "3 / 3" in response.text
        # The first line in the cell; the start of the error, escaped, in its tooltip.
        assert (
            '<span class="outbox-clip outbox-error" title="KeyError: &#x27;email&#x27;\n'
            'while sending &lt;b&gt;zebra&lt;/b&gt; 7">KeyError: &#x27;email&#x27;</span>'
        ) in response.text
        assert "<b>zebra" not in response.text

    def test_reads_only_the_start_of_the_last_error(self, admin_client):
        make_failed(tasks.always_fails.enqueue(), error="E" * 5_000 + " the end")
        response = admin_client.get(reverse(CHANGELIST))
        [job] = response.context["cl"].result_list
        assert len(job.last_error_head) == 500
        assert " the end" not in response.text


@pytest.mark.django_db(transaction=True)
class TestJobPage:
    def test_shows_the_payload_pretty_printed_the_traceback_and_every_attempt(self, admin_client):
        job = poison_invoice()
        page = admin_client.get(reverse(CHANGE, args=[job.pk])).text
        assert "&quot;customer&quot;: {\n" in page
        assert "Traceback (most recent call last)" in page
        assert "KeyError: &#x27;email&#x27;" in page
        assert page.count("attempt 1 failed") == 1
        assert page.count("attempt 2 failed") == 1
        # Each attempt: when it started, how long it took, which worker.
        assert job.errors[0]["started_at"]
        assert job.errors[0]["worker"] in page
        assert " ms</td>" in page or " s</td>" in page

    def test_shows_the_attempt_that_succeeded_from_the_row(self, admin_client):
        job = tasks.noop.enqueue()
        run_worker()
        job.refresh_from_db()
        page = admin_client.get(reverse(CHANGE, args=[job.pk])).text
        assert "attempt 1 succeeded" in page
        assert job.worker_id in page

    def test_offers_the_actions_that_apply_to_users_who_may_change_jobs(self, admin_client, client):
        failed = make_failed(tasks.always_fails.enqueue())
        ready = tasks.noop.enqueue()
        failed_page = admin_client.get(reverse(CHANGE, args=[failed.pk])).text
        assert reverse(EDIT, args=[failed.pk]) in failed_page
        assert reverse(RETRY, args=[failed.pk]) in failed_page
        assert reverse(CANCEL, args=[failed.pk]) not in failed_page
        ready_page = admin_client.get(reverse(CHANGE, args=[ready.pk])).text
        assert reverse(EDIT, args=[ready.pk]) not in ready_page
        assert reverse(CANCEL, args=[ready.pk]) in ready_page
        client.force_login(staff_with("view_job"))
        viewer_page = client.get(reverse(CHANGE, args=[failed.pk])).text
        assert reverse(EDIT, args=[failed.pk]) not in viewer_page
        assert reverse(RETRY, args=[failed.pk]) not in viewer_page

    def test_escapes_every_value_it_shows(self, admin_client):
        job = make_failed(
            tasks.always_fails.enqueue({"note": "<script>alert(1)</script>"}),
            error="<script>alert(2)</script>",
            traceback="<script>alert(3)</script>",
        )
        Job.objects.filter(pk=job.pk).update(
            errors=[
                {
                    "attempt": 1,
                    "at": "2026-01-01T00:00:01+00:00",
                    "started_at": "2026-01-01T00:00:00+00:00",
                    "worker": "<script>alert(4)</script>",
                    "error": "<script>alert(5)</script>",
                    "traceback": "<script>alert(6)</script>",
                }
            ],
            worker_id="<script>alert(7)</script>",
        )
        for url in (reverse(CHANGE, args=[job.pk]), reverse(EDIT, args=[job.pk])):
            page = admin_client.get(url).text
            assert "<script>alert(" not in page
        page = admin_client.get(reverse(CHANGE, args=[job.pk])).text
        for n in range(1, 7):
            assert f"&lt;script&gt;alert({n})&lt;/script&gt;" in page, n


@pytest.mark.django_db(transaction=True)
class TestEditPayloadAndRetry:
    def test_a_fixed_payload_is_stored_recorded_and_the_job_then_succeeds(self, admin_client):
        job = poison_invoice()
        form = admin_client.get(reverse(EDIT, args=[job.pk]))
        assert form.status_code == 200
        assert "&quot;name&quot;: &quot;Ada&quot;" in form.text
        assert 'name="csrfmiddlewaretoken"' in form.text

        fixed = {"number": 7, "customer": {"name": "Ada", "email": "ada@example.com"}}
        response = edit(admin_client, job, json.dumps(fixed))
        assert response.redirect_chain[-1][0] == reverse(CHANGE, args=[job.pk])
        assert sent_messages(response) == [
            (
                message_levels.SUCCESS,
                f"The payload of job {job.pk} was saved; the job is ready to run again.",
            )
        ]
        job.refresh_from_db()
        assert (job.status, job.payload, job.attempts, job.max_attempts) == (
            JobStatus.READY,
            fixed,
            2,
            3,
        )
        [entry] = LogEntry.objects.filter(object_id=str(job.pk))
        assert entry.user.username == "admin"
        assert "Edited the payload and retried" in entry.change_message
        assert '"name": "Ada"}' in entry.change_message  # The payload before.
        assert "Edited the payload and retried" in response.text  # In the job's history.

        run_worker()
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 3)
        assert Note.objects.get().text == "invoice 7 to ada@example.com"

    @pytest.mark.parametrize(
        ("text", "error"),
        [
            ('{"number": 7, "customer": ', "This is not valid JSON: Expecting value"),
            ('{"number": 7}', "validate_payload of tests.testapp.tasks.sends_invoice refused"),
            ('{"customer": {"$datetime": "yesterday"}}', "The payload cannot be decoded"),
            ("[" * 10_000 + "]" * 10_000, "nested too deep"),
        ],
    )
    def test_what_enqueue_would_refuse_is_refused_on_the_form_with_the_text_kept(
        self, admin_client, text, error
    ):
        job = poison_invoice()
        before = Job.objects.get(pk=job.pk)
        response = edit(admin_client, job, text)
        assert response.status_code == 200
        assert error in response.text
        # The text as typed, to correct.
        assert response.context["form"]["payload"].value() == text
        after = Job.objects.get(pk=job.pk)
        assert (after.status, after.payload, after.max_attempts) == (
            JobStatus.FAILED,
            before.payload,
            before.max_attempts,
        )
        assert not LogEntry.objects.exists()

    @pytest.mark.parametrize("make", [make_succeeded, make_running])
    def test_a_job_that_is_not_failed_or_cancelled_is_refused(self, admin_client, make):
        job = make(tasks.sends_invoice.enqueue({"number": 1, "customer": {"name": "Ada"}}))
        page = admin_client.get(reverse(EDIT, args=[job.pk]))
        assert "only a failed or cancelled job can be retried with a new payload" in page.text
        assert "disabled" in page.text
        text = '{"number": 1, "customer": {"name": "Ada", "email": "a@example.com"}}'
        response = edit(admin_client, job, text)
        assert "only a failed or cancelled job can be retried with a new payload" in response.text
        assert response.context["form"]["payload"].value() == text
        after = Job.objects.get(pk=job.pk)
        assert (after.status, after.payload) == (job.status, job.payload)

    def test_needs_the_change_permission(self, client):
        job = poison_invoice()
        client.force_login(staff_with("view_job"))
        assert client.get(reverse(EDIT, args=[job.pk])).status_code == 403
        response = client.post(reverse(EDIT, args=[job.pk]), {"payload": "{}"})
        assert response.status_code == 403
        assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED

    def test_an_unknown_job_sends_back_to_the_list_with_a_message(self, admin_client):
        response = admin_client.get(reverse(EDIT, args=[999_999]), follow=True)
        assert response.redirect_chain[-1][0].startswith(reverse("admin:index"))
        assert "999999" in sent_messages(response)[0][1]

    def test_a_codec_task_is_edited_in_its_stored_form(self, admin_client):
        job = django_outbox.enqueue(
            "tests.testapp.tasks.ships_order", tasks.Order(number=1, total=decimal.Decimal("9.50"))
        )
        make_failed(job)
        page = admin_client.get(reverse(EDIT, args=[job.pk])).text
        assert "&quot;$decimal&quot;: &quot;9.50&quot;" in page
        response = edit(admin_client, job, '{"number": 1, "total": {"$decimal": "9.50"}, "x": 1}')
        assert "the codec of tests.testapp.tasks.ships_order could not decode it" in response.text
        edit(admin_client, job, '{"number": 2, "total": {"$decimal": "12.00"}}')
        job.refresh_from_db()
        assert job.status == JobStatus.READY
        run_worker()
        assert Note.objects.get().text == "order 2 for 12.00"


@pytest.mark.django_db
class TestRetryAndCancelButtons:
    def test_retry_now_makes_the_failed_job_ready_and_is_recorded(self, admin_client):
        job = make_failed(tasks.always_fails.enqueue())
        response = admin_client.post(reverse(RETRY, args=[job.pk]), follow=True)
        assert Job.objects.get(pk=job.pk).status == JobStatus.READY
        assert sent_messages(response) == [
            (message_levels.SUCCESS, f"Job {job.pk} is ready to run again.")
        ]
        assert LogEntry.objects.get(object_id=str(job.pk)).change_message == "Retried."
        again = admin_client.post(reverse(RETRY, args=[job.pk]), follow=True)
        assert sent_messages(again) == [
            (
                message_levels.WARNING,
                f"Job {job.pk} was not retried: only a failed or cancelled job can be.",
            )
        ]

    def test_cancel_cancels_a_waiting_job_and_asks_a_running_one_to_stop(self, admin_client):
        ready = tasks.noop.enqueue()
        running = make_running(tasks.noop.enqueue())
        admin_client.post(reverse(CANCEL, args=[ready.pk]))
        admin_client.post(reverse(CANCEL, args=[running.pk]))
        assert Job.objects.get(pk=ready.pk).status == JobStatus.CANCELLED
        assert Job.objects.get(pk=running.pk).cancel_requested
        response = admin_client.post(reverse(CANCEL, args=[ready.pk]), follow=True)
        assert sent_messages(response)[-1] == (
            message_levels.WARNING,
            f"Job {ready.pk} was not cancelled: it had finished, or was already asked to stop.",
        )

    def test_they_take_only_posts_from_users_who_may_change_jobs(self, admin_client, client):
        job = make_failed(tasks.always_fails.enqueue())
        assert admin_client.get(reverse(RETRY, args=[job.pk])).status_code == 405
        client.force_login(staff_with("view_job"))
        assert client.post(reverse(RETRY, args=[job.pk])).status_code == 403
        assert client.post(reverse(CANCEL, args=[job.pk])).status_code == 403
        assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_job_retried_from_the_admin_wakes_an_idle_worker_at_once(
    admin_client, worker_thread, settings
):
    # A poll long enough that only the NOTIFY can explain a prompt run.
    settings.OUTBOX = {**settings.OUTBOX, "POLL_SECONDS": 60}
    job = make_failed(django_outbox.enqueue("tests.testapp.tasks.noop"))
    worker_thread(concurrency=1)
    time.sleep(0.5)  # The worker is idle, waiting on its LISTEN.
    started = time.monotonic()
    admin_client.post(reverse(RETRY, args=[job.pk]))
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=10)
    assert time.monotonic() - started < 5


@pytest.mark.django_db
class TestRetryWithPayload:
    def test_stores_the_payload_retries_and_returns_the_old_one(self):
        job = make_failed(tasks.charges.enqueue({"amount": 5}))
        assert retry_with_payload(job, {"amount": 6}) == {"amount": 5}
        job.refresh_from_db()
        assert (job.status, job.payload) == (JobStatus.READY, {"amount": 6})

    def test_refuses_what_it_cannot_do_and_changes_nothing(self):
        failed = make_failed(tasks.charges.enqueue({"amount": 5}))
        ready = tasks.charges.enqueue({"amount": 5})
        with pytest.raises(JobNotFound):
            retry_with_payload(999_999, {"amount": 1})
        with pytest.raises(JobStateError):
            retry_with_payload(ready, {"amount": 1})
        with pytest.raises(PayloadValidationError):
            retry_with_payload(failed, {"amount": -1})
        with pytest.raises(PayloadError):
            retry_with_payload(failed, {"amount": 10**700})  # More digits than a payload may have.
        Job.objects.filter(pk=failed.pk).update(task_name="gone.task")
        with pytest.raises(UnknownTaskError):
            retry_with_payload(failed, {"amount": 1})
        assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED
        assert Job.objects.get(pk=failed.pk).payload == {"amount": 5}
        assert Job.objects.get(pk=ready.pk).payload == {"amount": 5}

    def test_the_task_decodes_what_it_encoded(self):
        stored = tasks.ships_order.encode_payload(
            tasks.Order(number=3, total=decimal.Decimal("1.5"))
        )
        assert tasks.ships_order.decode_payload(stored) == tasks.Order(
            number=3, total=decimal.Decimal("1.5")
        )
        with pytest.raises(PayloadDecodeError):
            tasks.ships_order.decode_payload({"number": 3})
