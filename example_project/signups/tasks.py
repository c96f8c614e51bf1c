"""The welcome email, sent by an outbox worker after the signup's transaction committed."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage

from django_outbox import current_job, task

from .models import WelcomeEmail

#: Addresses at this domain never accept mail: their jobs use up their attempts and fail.
BOUNCING_DOMAIN = "@bounce.invalid"


class MailboxUnavailable(Exception):
    """The mail server refused the recipient."""


@task(queue="emails", max_attempts=4)
def send_welcome_email(payload: dict[str, Any]) -> None:
    """Send the welcome email to the user ``payload["user_id"]`` and record it.

    The task is atomic (the default): the WelcomeEmail row commits with the job's success, and
    a failed attempt leaves none. The email itself can't be rolled back, so it goes out last.
    """
    job = current_job()
    user = get_user_model().objects.get(pk=payload["user_id"])
    if WelcomeEmail.objects.filter(user=user).exists():
        return  # An earlier run of this job committed: running again must not email twice.
    if user.email.endswith(BOUNCING_DOMAIN):
        # A real handler would list a permanent error in give_up_on=(...) to fail at once;
        # here it uses up its attempts, so the admin shows the whole error history.
        raise MailboxUnavailable(f"550 5.1.1 <{user.email}>: mailbox unavailable")
    if user.pk % 3 == 0 and job.attempts == 1:
        # Every third user finds the mail server busy the first time: the job retries.
        raise ConnectionError("SMTP server busy, try again")
    WelcomeEmail.objects.create(user=user, job_id=job.id, attempt=job.attempts)
    EmailMessage(
        subject="Welcome!",
        body=f"Hello {user.username}, thanks for signing up.",
        to=[user.email],
        # The job's id stays the same across its attempts: a mail provider that deduplicates
        # can drop a copy sent by an attempt whose success was never recorded (a crash or a
        # lost lease after sending), which then ran again.
        headers={"X-Idempotency-Key": f"welcome-email-{job.id}"},
    ).send()
