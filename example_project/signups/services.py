"""Signing a user up: the user and the job for the welcome email, in one transaction."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from django_outbox.models import Job

from .tasks import send_welcome_email


def sign_up(username: str, email: str) -> tuple[AbstractBaseUser, Job]:
    """Create the user and enqueue their welcome email; return both.

    Both rows commit together or not at all: no email for a signup that rolled back, and no
    signup whose email is lost because a broker was down. A worker sends it after the commit.
    """
    with transaction.atomic():
        user = get_user_model().objects.create_user(username=username, email=email)
        job = send_welcome_email.enqueue({"user_id": user.pk})
    return user, job
