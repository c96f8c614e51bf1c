"""The list's actions on many jobs: asked for confirmation when they destroy or reach every job,
done a chunk at a time, and written to the admin log job by job.

An action on "every job this list matches" may reach a million rows. Each chunk's jobs are read,
locked and changed in one short transaction, so that the log names exactly the jobs changed
(not those a worker took meanwhile), and no transaction holds a million row locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from ..db import write_transaction
from ..models import Job

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

#: Jobs read, locked and changed per transaction.
CHUNK_SIZE = 500
#: The form field a confirmation page posts back.
CONFIRMED = "outbox_confirmed"


def act_in_chunks(
    queryset: QuerySet[Job], candidates: Q, act: Callable[[QuerySet[Job]], Any]
) -> list[Job]:
    """Run ``act`` on the jobs of ``queryset`` that match ``candidates``, a chunk at a time, in
    id order; return those it was run on (id, task and status as they were before)."""
    using = queryset.db
    matching = queryset.filter(candidates).order_by("pk").values_list("pk", flat=True)
    done: list[Job] = []
    after: int | None = None
    while True:
        page = matching if after is None else matching.filter(pk__gt=after)
        ids = list(page[:CHUNK_SIZE])
        if not ids:
            return done
        with write_transaction(using):
            # Read again under the lock: a job may have changed since the list was read.
            jobs = Job.objects.using(using).filter(candidates, pk__in=ids)
            locked = list(jobs.select_for_update().only("pk", "task_name", "status").order_by("pk"))
            if locked:
                act(Job.objects.using(using).filter(pk__in=[job.pk for job in locked]))
        done += locked
        after = ids[-1]
        if len(ids) < CHUNK_SIZE:
            return done


def log_changes(request: HttpRequest, jobs: list[Job], message: str) -> None:
    """One admin log entry per job, written at once."""
    if jobs and request.user.pk is not None:
        LogEntry.objects.log_actions(
            user_id=request.user.pk, queryset=jobs, action_flag=CHANGE, change_message=message
        )


def confirmed(request: HttpRequest) -> bool:
    return request.POST.get(CONFIRMED) == "yes"


def confirmation(
    model_admin: ModelAdmin[Job],
    request: HttpRequest,
    queryset: QuerySet[Job],
    *,
    title: str,
    consequence: str,
    button: str,
) -> TemplateResponse:
    """A page that says what the action will do to how many jobs, and asks to go on.

    It posts the selection back as the list's form did (the selected ids, or "every job the
    list matches" with the list's search and filters in its URL), with ``CONFIRMED``.
    """
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "consequence": consequence,
        "button": button,
        "count": queryset.count(),
        "action": request.POST.get("action", ""),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "confirmed_field": CONFIRMED,
        "back": request.get_full_path(),
    }
    return TemplateResponse(request, "admin/django_outbox/job/confirm_action.html", context)
