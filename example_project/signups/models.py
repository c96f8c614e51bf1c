"""What the welcome-email task leaves behind: one row per email sent."""

from django.conf import settings
from django.db import models


class WelcomeEmail(models.Model):
    """A welcome email sent to a user, written in the same transaction as its job's success."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="welcome_emails"
    )
    # The job that sent it; kept when old jobs are deleted.
    job = models.ForeignKey(
        "django_outbox.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    attempt = models.PositiveIntegerField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-sent_at"]

    def __str__(self) -> str:
        return f"Welcome email to {self.user} (attempt {self.attempt})"
