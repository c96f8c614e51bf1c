"""Who may read what in the job admin.

Payloads, tracebacks, whole error messages, return values and resume data often hold personal
data (e-mail addresses, names). The view permission shows a job's metadata and its error's first
line; reading the rest needs ``view_job_payload`` too (``Job.Meta.permissions``).
"""

from __future__ import annotations

from django.http import HttpRequest

#: The permission to read jobs' payloads, tracebacks, whole errors and return values.
PAYLOAD_PERMISSION = "django_outbox.view_job_payload"


def may_read_payload(request: HttpRequest) -> bool:
    """Whether the user may read payloads and tracebacks."""
    return bool(request.user.has_perm(PAYLOAD_PERMISSION))
