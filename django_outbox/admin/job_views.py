"""The job page's own actions: retry now, cancel, and edit the payload then retry.

"Edit payload and retry" is for a job that failed on its data (a poison message): the operator
corrects the stored JSON, which is checked as ``enqueue`` checks a payload (the task's
``validate_payload`` and codec, the JSON rules) by ``control.retry_with_payload``. What the page
refuses (invalid JSON, a payload the task refuses, a job that is no longer failed) is shown on
the form with the text as typed: nothing is lost. Each action is written to the admin's log,
which the job's page shows in its history.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..exceptions import EnqueueError, JobNotFound, JobStateError, PayloadDecodeError
from ..jobs.control import cancel_jobs
from ..jobs.transitions import RETRYABLE, retry_failed
from ..models import Job, JobStatus
from ..serialization import MAX_PAYLOAD_SIZE
from ..tasks.enqueue import retry_with_payload
from ..tasks.registry import get_task
from .permissions import may_read_payload

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    #: The job admin these views are bound to (``JobAdmin.job_urls``).
    JobAdmin = ModelAdmin[Job]

#: The longest payload text the form reads: room for the indentation it was shown with.
TEXT_MAX_LENGTH = 4 * MAX_PAYLOAD_SIZE


class PayloadForm(forms.Form):
    payload = forms.CharField(
        label=_("Payload (JSON, as stored)"),
        max_length=TEXT_MAX_LENGTH,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 20, "cols": 100, "spellcheck": "false"}),
        help_text=_(
            "The job's payload as the database stores it: JSON, with values JSON lacks written "
            'as tags such as {"$datetime": "2026-11-21T12:00:00+00:00"}. Saving checks it as '
            "enqueue() checks a payload, then retries the job now."
        ),
    )

    def clean_payload(self) -> Any:
        text = self.cleaned_data["payload"]
        try:
            return json.loads(text)
        except RecursionError:
            raise forms.ValidationError(
                gettext("The payload is nested too deep to read."), code="invalid"
            ) from None
        except ValueError as error:
            raise forms.ValidationError(
                gettext("This is not valid JSON: %(error)s.") % {"error": error}, code="invalid"
            ) from error


def payload_text(payload: Any) -> str:
    """The stored payload as the form shows it: indented JSON (a row's text that was not JSON,
    as it is)."""
    if isinstance(payload, str):
        try:
            json.loads(payload)
        except (RecursionError, ValueError):
            return payload
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _job_or_redirect(
    model_admin: JobAdmin, request: HttpRequest, object_id: str
) -> Job | HttpResponse:
    job = model_admin.get_object(request, unquote(object_id))
    if job is None:
        # The admin's own page for a missing object: back to the list, with a message.
        redirect: HttpResponse = model_admin._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]
            request, model_admin.opts, object_id
        )
        return redirect
    if not model_admin.has_change_permission(request, job):
        raise PermissionDenied
    return job


def _job_page(job: Job) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("admin:django_outbox_job_change", args=[job.pk]))


def edit_payload_view(model_admin: JobAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """Show the failed job's payload in a form; on a valid POST, store it and retry the job."""
    found = _job_or_redirect(model_admin, request, object_id)
    if not isinstance(found, Job):
        return found
    job = found
    if not may_read_payload(request):
        # The form shows the payload.
        raise PermissionDenied
    if request.method == "POST":
        form = PayloadForm(request.POST)
        if form.is_valid():
            try:
                task = get_task(job.task_name)
                payload = task.decode_payload(form.cleaned_data["payload"])
                old = retry_with_payload(job.pk, payload)
            except (EnqueueError, PayloadDecodeError, JobStateError, JobNotFound) as error:
                # The form again, with the text as typed and why it was refused.
                form.add_error("payload", str(error))
            else:
                model_admin.log_change(
                    request,
                    job,
                    gettext("Edited the payload and retried. The payload before: %(old)s")
                    % {"old": json.dumps(old, ensure_ascii=False)},
                )
                model_admin.message_user(
                    request,
                    gettext("The payload of job %(id)s was saved; the job is ready to run again.")
                    % {"id": job.pk},
                    messages.SUCCESS,
                )
                return _job_page(job)
    else:
        form = PayloadForm(initial={"payload": payload_text(job.payload)})
        if job.status not in RETRYABLE:
            messages.warning(
                request,
                gettext(
                    "Job %(id)s is %(status)s: only a failed or cancelled job can be retried "
                    "with a new payload."
                )
                % {"id": job.pk, "status": job.get_status_display()},
            )
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "original": job,
        "title": gettext("Edit the payload of job %(id)s and retry it") % {"id": job.pk},
        "form": form,
        "last_error": job.last_error,
        "retryable": job.status in RETRYABLE,
    }
    return TemplateResponse(request, "admin/django_outbox/job/edit_payload.html", context)


def retry_view(model_admin: JobAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """Make the failed or cancelled job ready to run now (POST only: see JobAdmin.job_urls)."""
    found = _job_or_redirect(model_admin, request, object_id)
    if not isinstance(found, Job):
        return found
    job = found
    if retry_failed(model_admin.get_queryset(request).filter(pk=job.pk)):
        model_admin.log_change(request, job, gettext("Retried."))
        model_admin.message_user(
            request,
            gettext("Job %(id)s is ready to run again.") % {"id": job.pk},
            messages.SUCCESS,
        )
    else:
        model_admin.message_user(
            request,
            gettext("Job %(id)s was not retried: only a failed or cancelled job can be.")
            % {"id": job.pk},
            messages.WARNING,
        )
    return _job_page(job)


def cancel_view(model_admin: JobAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """Ask whether to cancel the job (GET); cancel it, or ask its worker to stop it if it runs
    (POST, from that page)."""
    found = _job_or_redirect(model_admin, request, object_id)
    if not isinstance(found, Job):
        return found
    job = found
    if request.method != "POST":
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "original": job,
            "title": gettext("Cancel job %(id)s?") % {"id": job.pk},
            "running": job.status == JobStatus.RUNNING,
        }
        return TemplateResponse(request, "admin/django_outbox/job/cancel.html", context)
    cancelled, requested = cancel_jobs(model_admin.get_queryset(request).filter(pk=job.pk))
    if cancelled:
        model_admin.log_change(request, job, gettext("Cancelled."))
        message, level = gettext("Job %(id)s was cancelled: it will not run."), messages.SUCCESS
    elif requested:
        model_admin.log_change(request, job, gettext("Asked the running job to stop."))
        message, level = (
            gettext(
                "Job %(id)s runs: its worker was asked to stop it; it ends as cancelled at the "
                "worker's next heartbeat."
            ),
            messages.SUCCESS,
        )
    else:
        message, level = (
            gettext("Job %(id)s was not cancelled: it had finished, or was already asked to stop."),
            messages.WARNING,
        )
    model_admin.message_user(request, message % {"id": job.pk}, level)
    return _job_page(job)
