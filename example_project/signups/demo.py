"""The walk-through behind ``manage.py demo``: signups, a rollback, a worker, a report.

Every number in the report is read back from the database after the worker ran.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core import mail
from django.db import connection, transaction
from django.db.models import Count, Min
from django.utils import timezone

from django_outbox.models import Job, JobQuerySet, JobStatus, Message
from django_outbox.relay.loop import Relay
from django_outbox.testing import relayed_messages
from django_outbox.worker.loop import Worker, WorkerStats
from django_outbox.worker.runner import Outcome

from .models import WelcomeEmail
from .services import sign_up
from .tasks import BOUNCING_DOMAIN, send_welcome_email

Say = Callable[[str], None]

#: Every demo user's name starts with this, so a new run can remove the last run's users.
PREFIX = "demo-"
SIGNUPS = [
    *((name, f"{name}@example.com") for name in (
        "ada", "grace", "alan", "barbara", "edsger", "margaret",
        "donald", "frances", "ken", "radia", "linus",
    )),
    ("mallory", f"mallory{BOUNCING_DOMAIN}"),
]  # fmt: skip
ROLLED_BACK = ("rollback", "rollback@example.com")
CONCURRENCY = 4
#: Longest the worker phase may take before the demo gives up waiting for retries.
TIME_LIMIT = 60.0
ADMIN_HINT = (
    "Look at them in the admin: python example_project/manage.py createsuperuser && "
    "python example_project/manage.py runserver, then /admin/django_outbox/job/"
)


class SignupStepFailed(Exception):
    """A step of the signup after the enqueue failed (simulated)."""


@dataclass
class Demo:
    say: Say

    def run(self) -> bool:
        """Run the demo and print its report; return whether everything went as promised."""
        where = connection.settings_dict["NAME"]
        self.say(f"django-outbox demo on {connection.vendor} ({where})")
        self.remove_previous_run()
        users = self.sign_up_users()
        rollback_left_nothing = self.sign_up_and_roll_back()
        jobs = welcome_jobs([user.pk for user in users])
        finished = self.run_worker(jobs)
        events = self.relay_events(users)
        self.report(users, jobs, rollback_left_nothing)
        return finished and rollback_left_nothing and events

    def remove_previous_run(self) -> None:
        users = get_user_model().objects.filter(username__startswith=PREFIX)
        jobs = welcome_jobs(list(users.values_list("pk", flat=True)))
        job_count, _ = jobs.delete()
        user_count = users.count()
        if user_count or job_count:
            users.delete()
            self.say(f"Removed {user_count} users and {job_count} jobs of an earlier run.")

    def sign_up_users(self) -> list[AbstractBaseUser]:
        self.say(
            f"\n1. {len(SIGNUPS)} signups. Each creates a user and enqueues a welcome email in "
            "one transaction:"
        )
        users: list[AbstractBaseUser] = []
        for name, email in SIGNUPS:
            user, job = sign_up(PREFIX + name, email)
            users.append(user)
            self.say(f"   {user.get_username():<16} {email:<26} user #{user.pk:<4} job #{job.pk}")
        return users

    def sign_up_and_roll_back(self) -> bool:
        """Sign a user up in a transaction that then fails; return whether no trace is left."""
        name, email = ROLLED_BACK
        self.say("\n2. A signup whose transaction rolls back after the enqueue:")
        try:
            with transaction.atomic():
                user, job = sign_up(PREFIX + name, email)
                self.say(f"   inside the transaction: user #{user.pk} and job #{job.pk} written")
                raise SignupStepFailed("a later step of the signup failed")
        except SignupStepFailed as error:
            self.say(f"   then {error}: the transaction rolled back")
        user_left = get_user_model().objects.filter(username=PREFIX + name).exists()
        job_left = Job.objects.filter(pk=job.pk).exists()
        event_left = Message.objects.filter(payload__username=PREFIX + name).exists()
        self.say(
            f"   after the rollback: user {PREFIX + name} exists: {yes_no(user_left)}; "
            f"job #{job.pk} exists: {yes_no(job_left)}; its event exists: {yes_no(event_left)}"
        )
        return not (user_left or job_left or event_left)

    def relay_events(self, users: Sequence[AbstractBaseUser]) -> bool:
        """Send the signups' UserSignedUp events to the broker; return whether all arrived."""
        self.say(
            "\n4. The relay sends each signup's UserSignedUp event to the broker (here one in "
            "memory), in order per user, and deletes it once confirmed:"
        )
        stats = Relay(housekeeping=False).drain()
        usernames = {user.get_username() for user in users}
        arrived = [
            (envelope, payload)
            for envelope, payload in relayed_messages()
            if payload.get("username") in usernames
        ]
        for envelope, payload in arrived[:3]:
            self.say(f"   {envelope.type} key={envelope.key} id={envelope.id} {payload}")
        if len(arrived) > 3:
            self.say(f"   ... and {len(arrived) - 3} more")
        self.say(f"   relayed {stats.sent}; waiting still: {Message.objects.count()}")
        return len(arrived) == len(users)

    def run_worker(self, jobs: JobQuerySet) -> bool:
        """Run burst workers until every job of ``jobs`` is finished; return whether they are."""
        self.say(
            f"\n3. A worker ({CONCURRENCY} threads) runs the jobs in bursts until all are "
            "finished.\n   Its log of retries and failures goes to stderr."
        )
        started = time.monotonic()
        for burst in range(1, 1000):
            stats = Worker(burst=True, concurrency=CONCURRENCY).run()
            elapsed = time.monotonic() - started
            self.say(f"   burst {burst} at {elapsed:4.1f} s: {describe(stats)}")
            if not jobs.unfinished().exists():
                self.say(f"   every job finished after {elapsed:.1f} s")
                return True
            wait = seconds_until_next_run(jobs)
            if elapsed + wait > TIME_LIMIT:
                break
            time.sleep(wait)
        self.say(f"   gave up after {time.monotonic() - started:.1f} s: jobs remain unfinished")
        return False

    def report(
        self, users: Sequence[AbstractBaseUser], jobs: JobQuerySet, rollback_left_nothing: bool
    ) -> None:
        by_status = dict(jobs.values_list("status").annotate(count=Count("pk")).order_by())
        retried = jobs.filter(attempts__gt=1)
        emails = WelcomeEmail.objects.filter(user__in=[user.pk for user in users])
        succeeded = by_status.get(JobStatus.SUCCEEDED, 0)
        statuses = ", ".join(
            f"{by_status[status]} {status.label.lower()}"
            for status in JobStatus
            if status in by_status
        )
        self.say("\nReport (read from the database)")
        signed_up = get_user_model().objects.filter(username__startswith=PREFIX).count()
        self.say(f"   signups:        {signed_up} users")
        self.say(
            f"   jobs enqueued:  {jobs.count()} "
            f"(the rolled-back signup left {'none' if rollback_left_nothing else 'A TRACE'})"
        )
        self.say(f"   jobs by status: {statuses}")
        self.say(f"   events sent:    {len(relayed_messages())} UserSignedUp to the broker")
        self.say(
            f"   retried:        {retried.count()} jobs took more than one attempt "
            f"({retried.succeeded().count()} then succeeded, {retried.failed().count()} failed)"
        )
        self.say(
            f"   emails sent:    {emails.count()} ({emails.filter(attempt__gt=1).count()} on a "
            f"retry); {'one per succeeded job' if emails.count() == succeeded else 'MISMATCH'}"
        )
        if hasattr(mail, "outbox"):
            # Django's locmem backend keeps the messages sent in this process.
            self.say(f"   in the locmem mail outbox: {len(mail.outbox)} messages")
        for job in jobs.failed().order_by("pk"):
            user = get_user_model().objects.get(pk=job.decoded_payload()["user_id"])
            self.say(
                f"   failed job #{job.pk} ({user.get_username()} <{user.email}>) after "
                f"{job.attempts} of {job.max_attempts} attempts:"
            )
            for entry in job.errors:
                self.say(f"      attempt {entry['attempt']}: {entry['error']}")
        self.say(f"\n{ADMIN_HINT}")


def welcome_jobs(user_ids: list[int]) -> JobQuerySet:
    """Return the welcome-email jobs of the users ``user_ids``."""
    return Job.objects.filter(task_name=send_welcome_email.name, payload__user_id__in=user_ids)


def seconds_until_next_run(jobs: JobQuerySet) -> float:
    """Return the seconds until the earliest waiting job of ``jobs`` may run."""
    next_run = jobs.claimable().aggregate(next_run=Min("run_at"))["next_run"]
    if next_run is None:
        # Running in another worker (a run_outbox_worker started alongside): check back soon.
        return 0.5
    wait: float = (next_run - timezone.now()).total_seconds()
    return max(wait, 0.0) + 0.05


def describe(stats: WorkerStats) -> str:
    outcomes = [
        f"{stats.outcomes[outcome]} {outcome.value.replace('_', ' ')}"
        for outcome in Outcome
        if stats.outcomes[outcome]
    ]
    jobs = "1 job" if stats.claimed == 1 else f"{stats.claimed} jobs"
    return f"ran {jobs}: {', '.join(outcomes) or 'nothing was runnable'}"


def yes_no(value: bool) -> str:
    return "yes" if value else "no"
