"""Signing a user up: the user, the job for the welcome email and the event other services
hear of, in one transaction."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from django_outbox import publish
from django_outbox.models import Job

from .tasks import send_welcome_email


def sign_up(username: str, email: str) -> tuple[AbstractBaseUser, Job]:
    """Create the user, enqueue their welcome email and publish ``UserSignedUp``; return the
    user and the job.

    The rows commit together or not at all: no email and no event for a signup that rolled
    back, and no signup whose email or event is lost because a broker was down. A worker sends
    the email, and its relay the event, after the commit.
    """
    with transaction.atomic():
        user = get_user_model().objects.create_user(username=username, email=email)
        job = send_welcome_email.enqueue({"user_id": user.pk})
        publish(
            "users",
            {"user_id": user.pk, "username": user.get_username()},
            key=f"user-{user.pk}",
            type="UserSignedUp",
        )
    return user, job
