"""The job table: one row per job, from enqueue to its final status."""

from __future__ import annotations

import datetime
from typing import Any

from django.core.checks import CheckMessage
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from .validation.text import WORKER_ID_MAX_LENGTH


class JobStatus(models.TextChoices):
    """Where a job is in its life: ready -> running -> succeeded, or via retrying to failed.

    A handler may also snooze (back to ready, later) or halt its job (halted until
    ``resume()``); ``cancel()`` ends a job that has not finished as cancelled.
    """

    # Waiting for its run_at; a worker may claim it then.
    READY = "ready", _("Ready")
    # Claimed by a worker, whose lease (token and expiry) fences every later write.
    RUNNING = "running", _("Running")
    # An attempt failed and another is due at run_at.
    RETRYING = "retrying", _("Retrying")
    # The handler returned; with atomic=True its writes committed with this status.
    SUCCEEDED = "succeeded", _("Succeeded")
    # Attempts used up, or the task gave up. Kept for inspection and the admin's retry.
    FAILED = "failed", _("Failed")
    # The handler raised Halt: waiting for an outside event, until resume() makes it ready.
    HALTED = "halted", _("Halted")
    # Cancelled by cancel() or the admin: it never runs (again) unless retried by hand.
    CANCELLED = "cancelled", _("Cancelled")


#: The statuses a worker may claim (when run_at has come). The claim indexes' condition.
CLAIMABLE = (JobStatus.READY, JobStatus.RETRYING)
#: Statuses after which a job never runs again unless retried by hand.
FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
#: Statuses ``cancel()`` ends at once (a running job is asked to stop instead).
CANCELLABLE = (JobStatus.READY, JobStatus.RETRYING, JobStatus.HALTED)
#: Jobs that will run (again) without anyone retrying them: a unique key's default scope.
PENDING = (JobStatus.READY, JobStatus.RETRYING, JobStatus.HALTED)
#: Statuses in which a job holds its place in the line of its lock key (enqueue(lock=...)):
#: the jobs behind it wait until it has finished.
IN_LINE = (JobStatus.READY, JobStatus.RETRYING, JobStatus.RUNNING, JobStatus.HALTED)


class PayloadField(models.JSONField):
    """A JSON column that loads whatever a row holds: the text itself if it can't be parsed.

    A row is written by other code than ``enqueue`` at times (a script, a hand edit, an older
    version): loading it through the ORM, as the admin does, must not fail on its payload (one
    nested thousands of levels deep raises RecursionError, which JSONField lets through). The
    worker reads payloads its own way and fails such a job with the reason.
    """

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except (RecursionError, ValueError):
            return value

    def deconstruct(self) -> Any:
        # The column is a plain JSONField's: no migration, no table rebuild on SQLite.
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


#: Django's warnings that MariaDB and MySQL build no partial index (W037) and MariaDB no index
#: on expressions (W043): migrations 0017, 0019 and 0020 build composite indexes in their place
#: there (for the job, message and inbox tables), so the warnings would only alarm.
INDEXES_BUILT_ELSEWHERE = ("models.W037", "models.W043")


def without_index_warnings(messages: list[CheckMessage]) -> list[CheckMessage]:
    """A model's check messages but ``INDEXES_BUILT_ELSEWHERE``."""
    return [message for message in messages if message.id not in INDEXES_BUILT_ELSEWHERE]


MILLISECOND = models.Value(datetime.timedelta(milliseconds=1))


class JobQuerySet(models.QuerySet["Job"]):
    def claimable(self) -> JobQuerySet:
        """Jobs waiting for a worker, whether or not their run_at has come."""
        return self.filter(status__in=CLAIMABLE)

    def runnable(self) -> JobQuerySet:
        """Jobs a worker may claim now."""
        # Up to the end of this millisecond, as the claim compares: SQLite's clock reads
        # milliseconds ('...26.074') while a run_at computed from it is written with
        # microseconds ('...26.074000'), which sorts after it.
        return self.claimable().filter(run_at__lte=Now() + MILLISECOND)

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def expired_leases(self) -> JobQuerySet:
        """Running jobs whose worker stopped extending the lease (crashed, killed, cut off)."""
        return self.running().filter(lease_expires_at__lt=Now())

    def unfinished(self) -> JobQuerySet:
        return self.exclude(status__in=FINISHED)

    def succeeded(self) -> JobQuerySet:
        return self.filter(status=JobStatus.SUCCEEDED)

    def failed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.FAILED)

    def halted(self) -> JobQuerySet:
        return self.filter(status=JobStatus.HALTED)

    def cancelled(self) -> JobQuerySet:
        return self.filter(status=JobStatus.CANCELLED)


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    task_name = models.CharField(_("task"), max_length=255)
    queue = models.CharField(_("queue"), max_length=100)
    payload = PayloadField(_("payload"), null=True, blank=True)
    status = models.CharField(
        _("status"), max_length=16, choices=JobStatus.choices, default=JobStatus.READY
    )
    # Higher runs first among jobs due at the same time.
    priority = models.IntegerField(_("priority"), default=0)
    # The database's clock by default: the one workers compare run_at with.
    run_at = models.DateTimeField(_("run at"), db_default=Now())
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    max_attempts = models.PositiveIntegerField(_("max attempts"))
    # A new token for every claim: writes about an attempt match it, so a worker that lost its
    # lease cannot overwrite the new owner's state. A per-attempt idempotency key too.
    lease_token = models.UUIDField(_("lease token"), null=True, blank=True)
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    worker_id = models.CharField(_("worker"), max_length=WORKER_ID_MAX_LENGTH, blank=True)
    enqueued_at = models.DateTimeField(_("enqueued at"), db_default=Now())
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    last_traceback = models.TextField(_("last traceback"), blank=True)
    # The newest attempts' errors: [{"attempt", "at", "worker", "error", "traceback",
    # "started_at"}, ...] ("at" is when the attempt ended; rows written by early versions may
    # lack "started_at").
    errors = models.JSONField(_("errors"), default=list, blank=True)
    # Set by cancel() while the job runs: the handler may stop early (current_job()), and the
    # attempt ends as cancelled. Database defaults: the hot INSERTs leave these columns out.
    cancel_requested = models.BooleanField(_("cancel requested"), default=False, db_default=False)
    # Why the handler halted the job (Halt's reason), while it waits to be resumed.
    halt_reason = models.TextField(_("halt reason"), blank=True, default="", db_default="")
    # What resume() passed, encoded as payloads are: the handler's next run reads it.
    resume_data = PayloadField(_("resume data"), null=True, blank=True)
    # enqueue(unique_key=...): no second job with this key is enqueued while this one waits.
    # NULL, not "", for no key: the index leaves such rows out, and the INSERTs the column.
    unique_key = models.CharField(  # noqa: DJ001
        _("unique key"), max_length=255, null=True, blank=True
    )

    # enqueue(lock=...): jobs with one key run one at a time, in order (priority, then id).
    lock_key = models.CharField(  # noqa: DJ001 (NULL for none: the index leaves those out)
        _("lock key"), max_length=255, null=True, blank=True
    )
    # enqueue(depends_on=...): the claim takes this job only once every job it depends on
    # (JobDependency rows) has succeeded. False for most jobs: the claim's check is skipped.
    has_dependencies = models.BooleanField(_("has dependencies"), default=False, db_default=False)
    # enqueue(fair_key=...): workers serve the keys of a queue in turn (one job of each key per
    # round), so one key's backlog cannot hold the others up.
    fair_key = models.CharField(  # noqa: DJ001 (NULL for none: the indexes leave those out)
        _("fair key"), max_length=255, null=True, blank=True
    )
    # The round of its queue in which a fair job is served: its key's previous waiting job's
    # round plus one, or the round being served now if that is later (fairness.py).
    fair_round = models.BigIntegerField(_("fair round"), null=True, blank=True)
    # Under a concurrency cap or rate limit (django_outbox.limits): claimed by the limited
    # claim alone, which counts each limit's use. The key that partitions per-key limits
    # (enqueue(limit_key=...), else the fair key), "" for none; NULL for a job under no limit.
    limit_key = models.CharField(  # noqa: DJ001 (NULL for none: the indexes leave those out)
        _("limit key"), max_length=255, null=True, blank=True
    )
    # Another job depends on this one: the retention pruner keeps it while that one waits.
    has_dependents = models.BooleanField(_("has dependents"), default=False, db_default=False)
    # What a Django task (django.tasks, via django_outbox.backends) returned.
    return_value = models.JSONField(_("return value"), null=True, blank=True)
    # OUTBOX["CONTEXT"]'s variables as the enqueuer had them: {dotted path: encoded value}.
    context = PayloadField(_("context"), null=True, blank=True)

    #: True on the job that enqueue(unique_key=...) returned instead of enqueueing another.
    is_duplicate = False

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ["-id"]
        # Payloads, tracebacks and return values often hold personal data (e-mail addresses,
        # names): the admin shows them only to users with this permission.
        permissions = [("view_job_payload", _("Can view job payloads and tracebacks"))]
        indexes = [
            # The claim's filter and order, for workers of given queues. Partial: finished
            # jobs, however many, never enter it; nor fair jobs, which the fair claim takes
            # along indexes of their own (a backlog of them would be passed over row by row).
            models.Index(
                F("queue"),
                F("priority").desc(),
                F("run_at"),
                F("id"),
                name="outbox_job_claim_queue",
                condition=Q(status__in=CLAIMABLE, fair_key__isnull=True, limit_key__isnull=True),
            ),
            # The same for workers of every queue.
            models.Index(
                F("priority").desc(),
                F("run_at"),
                F("id"),
                name="outbox_job_claim_any",
                condition=Q(status__in=CLAIMABLE, fair_key__isnull=True, limit_key__isnull=True),
            ),
            models.Index(
                F("lease_expires_at"),
                name="outbox_job_lease",
                condition=Q(status=JobStatus.RUNNING),
            ),
            # The claim's check that no job of the same lock key is ahead of a candidate.
            models.Index(
                F("lock_key"),
                F("priority").desc(),
                F("id"),
                name="outbox_job_lock_line",
                condition=Q(lock_key__isnull=False, status__in=IN_LINE),
            ),
            # Whether a full claim is needed (ClaimPolicy): keyed or dependent jobs due.
            models.Index(
                F("run_at"),
                name="outbox_job_claim_special",
                condition=Q(status__in=CLAIMABLE)
                & (Q(lock_key__isnull=False) | Q(has_dependencies=True)),
            ),
            # The fair claim's filter and order (fair jobs are claimed apart from the others),
            # for workers of given queues and of every queue.
            models.Index(
                F("queue"),
                F("priority").desc(),
                F("fair_round"),
                F("id"),
                name="outbox_job_fair_queue",
                condition=Q(status__in=CLAIMABLE, fair_key__isnull=False, limit_key__isnull=True),
            ),
            models.Index(
                F("priority").desc(),
                F("fair_round"),
                F("id"),
                name="outbox_job_fair_any",
                condition=Q(status__in=CLAIMABLE, fair_key__isnull=False, limit_key__isnull=True),
            ),
            # The limited claim's filter and order (limited jobs are claimed apart, each limit's
            # use counted), for workers of given queues and of every queue. Fair ones by round.
            models.Index(
                F("queue"),
                F("priority").desc(),
                F("fair_round"),
                F("run_at"),
                F("id"),
                name="outbox_job_limited_queue",
                condition=Q(status__in=CLAIMABLE, limit_key__isnull=False),
            ),
            models.Index(
                F("priority").desc(),
                F("fair_round"),
                F("run_at"),
                F("id"),
                name="outbox_job_limited_any",
                condition=Q(status__in=CLAIMABLE, limit_key__isnull=False),
            ),
            # An enqueue's look for the round being served and for its key's last round.
            models.Index(
                F("queue"),
                F("fair_round"),
                name="outbox_job_fair_round",
                condition=Q(status__in=CLAIMABLE, fair_key__isnull=False),
            ),
            models.Index(
                F("queue"),
                F("fair_key"),
                F("fair_round"),
                name="outbox_job_fair_key",
                condition=Q(status__in=CLAIMABLE, fair_key__isnull=False),
            ),
            # enqueue(unique_key=...) looks for a waiting job with the key.
            models.Index(
                F("unique_key"),
                name="outbox_job_unique_key",
                condition=Q(unique_key__isnull=False),
            ),
            # The admin's list of jobs of one waiting status, newest first (the status filter
            # repeats this condition, so that SQLite uses the index too). Partial: one entry
            # per enqueue, retry, snooze or halt; none for running or finished jobs.
            models.Index(
                F("status"),
                F("id"),
                name="outbox_job_pending",
                condition=Q(status__in=PENDING),
            ),
            # The admin's list of one queue without a status filter, newest first. Along the
            # primary key alone, a queue of a few old jobs among millions was found by reading
            # the table from its newest job back to them (150-500 ms at 1,000,000 jobs). Not
            # partial: a queue's jobs of every status. Its key never changes, so updates that
            # PostgreSQL can make in place (HOT) stay so; the others write one entry more.
            # Columns, not expressions: MariaDB, which builds no index on expressions, has it too.
            models.Index(fields=["queue", "id"], name="outbox_job_queue"),
            # The same for a task's list (a task renamed, or one that rarely runs, holds a few
            # old jobs among millions). Every enqueue, claim and completion writes one entry in
            # it, as in outbox_job_queue (docs/performance.md measures what that costs).
            models.Index(fields=["task_name", "id"], name="outbox_job_task"),
            # The admin's search of error messages (error:TEXT) has on PostgreSQL a trigram
            # index of its own where pg_trgm can be installed: migration 0021 builds it (the
            # extension is not known to every server, so the model does not declare it).
            # The admin's failed jobs of one task or queue, the latest failure first: what an
            # operator looks for (a job that fails again comes back to the top). An entry only
            # when a job fails.
            models.Index(
                F("task_name"),
                F("finished_at"),
                F("id"),
                name="outbox_job_failed_task",
                condition=Q(status=JobStatus.FAILED),
            ),
            models.Index(
                F("queue"),
                F("finished_at"),
                F("id"),
                name="outbox_job_failed_queue",
                condition=Q(status=JobStatus.FAILED),
            ),
            # Halted jobs by queue (django_outbox.stats, django_outbox.dashboard): the one
            # status no other partial index holds by queue; without it the count reads every
            # finished job. Written only when a job halts, never by claims or completions.
            models.Index(
                F("queue"),
                name="outbox_job_halted",
                condition=Q(status=JobStatus.HALTED),
            ),
            # The pruner's look for old finished jobs that other jobs depend on (few): without
            # it, each batch read every expired job to find none. Written only for such jobs.
            models.Index(
                F("status"),
                F("finished_at"),
                name="outbox_job_finished_parents",
                condition=Q(status__in=FINISHED, has_dependents=True),
            ),
            # Retention pruning: the oldest finished jobs of a status, without a table scan;
            # and the admin's list of one finished status by when the jobs finished (the failed
            # list's order), with the id as the tie-break its keyset pages go by.
            models.Index(
                F("status"),
                F("finished_at"),
                F("id"),
                name="outbox_job_finished",
                condition=Q(status__in=FINISHED),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="outbox_job_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="outbox_job_max_attempts_positive"
            ),
            models.CheckConstraint(
                condition=Q(attempts__lte=F("max_attempts")),
                name="outbox_job_attempts_within_max",
            ),
            models.CheckConstraint(
                condition=~Q(status=JobStatus.RUNNING)
                | Q(lease_token__isnull=False, lease_expires_at__isnull=False),
                name="outbox_job_running_has_lease",
            ),
            # A fair job has its round, and is claimed by the fair claim alone, which checks
            # neither lock keys nor dependencies: enqueue() refuses those together.
            models.CheckConstraint(
                condition=Q(fair_key__isnull=True)
                | Q(fair_round__isnull=False, lock_key__isnull=True, has_dependencies=False),
                name="outbox_job_fair_alone",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_name} #{self.pk} ({self.status})"

    @classmethod
    def check(cls, **kwargs: Any) -> list[CheckMessage]:
        return without_index_warnings(super().check(**kwargs))

    def decoded_payload(self) -> Any:
        """Return the payload as the task receives it (datetimes, Decimals... restored)."""
        from .serialization import decode

        return decode(self.payload)


class JobDependency(models.Model):
    """``job`` may not start before ``depends_on`` has succeeded (enqueue(depends_on=...))."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies")
    # No foreign key constraint: the retention pruner deletes finished jobs without looking
    # here, except that it keeps those an unfinished job still waits on.
    depends_on = models.ForeignKey(
        Job, on_delete=models.DO_NOTHING, db_constraint=False, related_name="dependents"
    )

    class Meta:
        verbose_name = _("job dependency")
        verbose_name_plural = _("job dependencies")
        constraints = [
            models.UniqueConstraint(fields=["job", "depends_on"], name="outbox_dependency_once")
        ]

    def __str__(self) -> str:
        return f"#{self.job_id} after #{self.depends_on_id}"


class LimitState(models.Model):
    """One limit's shared state: a rate limit's token bucket, and a pause.

    One row per limit and key (a task's or a queue's, ``key`` "" for the whole task or queue),
    created when first needed. The limited claim locks the rows of the limits it counts, in
    order, so that claims of one limit take turns across every worker and host (SQLite's write
    lock does it there), and takes its tokens in the same short transaction.
    """

    id = models.BigAutoField(primary_key=True)
    # "task" or "queue", its name, and the key of a per-key limit ("" for the whole).
    kind = models.CharField(_("kind"), max_length=16)
    name = models.CharField(_("name"), max_length=255)
    key = models.CharField(_("key"), max_length=255, blank=True, default="")
    # Times are seconds since the epoch by the database's clock (``database_seconds``): one
    # clock for every worker, and arithmetic free of time zones and of SQLite's text dates.
    # The bucket's tokens when last refilled (a start takes one; they refill at the rate).
    tokens = models.FloatField(_("tokens"), null=True, blank=True)
    refilled_at = models.FloatField(_("refilled at"), null=True, blank=True)
    # RateLimited(retry_after=...): no job of the limit starts before then.
    paused_until = models.FloatField(_("paused until"), null=True, blank=True)

    class Meta:
        verbose_name = _("limit")
        verbose_name_plural = _("limits")
        constraints = [
            models.UniqueConstraint(fields=["kind", "name", "key"], name="outbox_limit_once")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}" + (f" [{self.key}]" if self.key else "")


class CronState(models.Model):
    """What workers know of one cron entry: since when it runs, and the last tick enqueued.

    One row per entry name. A worker enqueues a tick only by moving ``last_tick`` forward, with
    a conditional UPDATE in the transaction that writes the job: of workers racing for a tick,
    one moves it and the others update no row (PostgreSQL re-reads the row once the winner
    commits; SQLite's write lock serializes them), so each tick is enqueued once.
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(_("name"), max_length=200, unique=True)
    # The expression and its time zone ("0 3 * * * UTC"): another schedule starts afresh.
    schedule = models.CharField(_("schedule"), max_length=255)
    # When a worker first saw this schedule: earlier ticks never run.
    since = models.DateTimeField(_("since"))
    last_tick = models.DateTimeField(_("last tick"), null=True, blank=True)
    # No foreign key: the retention pruner deletes finished jobs without looking here.
    last_job_id = models.BigIntegerField(_("last job"), null=True, blank=True)
    last_enqueued_at = models.DateTimeField(_("last enqueued at"), null=True, blank=True)

    class Meta:
        verbose_name = _("cron entry")
        verbose_name_plural = _("cron entries")

    def __str__(self) -> str:
        return f"{self.name} ({self.schedule})"


class WorkerProcess(models.Model):
    """A running worker, as it registered itself: written at every heartbeat (the first inserts
    it), and deleted when it stops gracefully (``django_outbox.workers``).

    A worker killed without a chance to stop leaves its row behind: its heartbeat stops, the
    dashboard and ``outbox_health`` call it stale, and other workers delete it later.
    """

    worker_id = models.CharField(_("worker"), max_length=WORKER_ID_MAX_LENGTH, primary_key=True)
    # A new token for every Worker.run(): a worker restarted under the same id takes the row
    # over, and the one it replaced cannot delete it on its way out.
    instance = models.UUIDField(_("instance"))
    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("process id"))
    # The queues it runs ([]: every queue) and its threads.
    queues = models.JSONField(_("queues"), default=list)
    concurrency = models.PositiveIntegerField(_("concurrency"))
    # The worker's clock: when it started. The heartbeat is the database's clock, the one
    # its staleness is judged by.
    started_at = models.DateTimeField(_("started at"))
    last_heartbeat_at = models.DateTimeField(_("last heartbeat at"), db_default=Now())
    # How often it beats: its row is stale after a few beats missed.
    heartbeat_seconds = models.FloatField(_("heartbeat seconds"))
    # Attempts it finished (every outcome), and those that failed (to be retried or for good).
    jobs_done = models.BigIntegerField(_("jobs done"), default=0)
    jobs_failed = models.BigIntegerField(_("jobs failed"), default=0)
    # Since when its claims or heartbeats fail (NULL: they work), and its latest such error.
    in_error_since = models.DateTimeField(_("in error since"), null=True, blank=True)
    last_error_at = models.DateTimeField(_("last error at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True, default="")

    class Meta:
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        ordering = ["worker_id"]

    def __str__(self) -> str:
        return f"{self.worker_id} ({self.host}, pid {self.pid})"


class QueueActivity(models.Model):
    """Attempts that workers finished in one minute, per queue and outcome.

    Workers count in memory and add their counts here at each heartbeat
    (``django_outbox.activity``), so the dashboard's charts read a row per queue and minute
    however many jobs ran or are kept. Rows older than two days are deleted.
    """

    id = models.BigAutoField(primary_key=True)
    # The minute's start (UTC, by the worker's clock).
    minute = models.DateTimeField(_("minute"))
    queue = models.CharField(_("queue"), max_length=100)
    succeeded = models.BigIntegerField(_("succeeded"), default=0)
    # Attempts that failed, to be retried; and those that failed the job for good.
    retried = models.BigIntegerField(_("retried"), default=0)
    failed = models.BigIntegerField(_("failed"), default=0)

    class Meta:
        verbose_name = _("queue activity")
        verbose_name_plural = _("queue activity")
        constraints = [
            # The workers' upsert's conflict target, and the dashboard's range of minutes.
            models.UniqueConstraint(fields=["minute", "queue"], name="outbox_activity_minute")
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.minute:%Y-%m-%d %H:%M}"


class Dashboard(Job):
    """The admin's dashboard (queues, charts, workers): a proxy, so that it has its place in
    the admin index. No table of its own."""

    class Meta:
        proxy = True
        verbose_name = _("dashboard")
        verbose_name_plural = _("dashboard")
        default_permissions = ()


class MessageStatus(models.TextChoices):
    """Where a message is on its way to its broker: pending until confirmed, or blocked."""

    # Waiting for a relay, or held by one (lease_token set) while it publishes.
    PENDING = "pending", _("Pending")
    # The broker refused it for good (too large, unroutable): its key's later messages wait
    # behind it until the admin retries it or skips it.
    BLOCKED = "blocked", _("Blocked")
    # The broker confirmed it; kept only when OUTBOX["RELAY"]["RETENTION"] asks for it.
    SENT = "sent", _("Sent")


class MessageQuerySet(models.QuerySet["Message"]):
    def unsent(self) -> MessageQuerySet:
        """Messages the broker has not confirmed: pending or blocked."""
        return self.exclude(status=MessageStatus.SENT)

    def pending(self) -> MessageQuerySet:
        return self.filter(status=MessageStatus.PENDING)

    def blocked(self) -> MessageQuerySet:
        return self.filter(status=MessageStatus.BLOCKED)

    def sent(self) -> MessageQuerySet:
        return self.filter(status=MessageStatus.SENT)


class Message(models.Model):
    """A message for a broker, written by ``publish()`` in the caller's transaction.

    The relay (``django_outbox.relay``) publishes it after that commits, and deletes it once
    the broker confirmed it. The id is a UUIDv7, time-ordered: it is the broker's message id
    (consumers drop duplicates by it) and the order of a key's messages.
    """

    id = models.UUIDField(_("id"), primary_key=True)
    # The broker's destination: an exchange's routing key, a stream, a subject, a Kafka topic.
    topic = models.CharField(_("topic"), max_length=255)
    # Messages with one key reach the broker in the order of their ids, one relay at a time;
    # NULL (no key) travels in parallel. Kafka's partition key.
    key = models.CharField(  # noqa: DJ001 (NULL for none: the key order's index leaves those out)
        _("key"), max_length=255, null=True, blank=True
    )
    type = models.CharField(_("type"), max_length=255, blank=True, default="")
    headers = PayloadField(_("headers"), default=dict, blank=True)
    payload = PayloadField(_("payload"), null=True, blank=True)
    # The name of its broker in OUTBOX["BROKERS"].
    broker = models.CharField(_("broker"), max_length=100)
    status = models.CharField(
        _("status"), max_length=16, choices=MessageStatus.choices, default=MessageStatus.PENDING
    )
    created_at = models.DateTimeField(_("created at"), db_default=Now())
    # Times the broker refused it (not outages: those cost nothing).
    attempts = models.PositiveIntegerField(_("attempts"), default=0, db_default=0)
    # A new token for every claim: the relay deletes or marks only rows that still carry its
    # token, so a relay that lost its lease (paused past it) changes nothing.
    lease_token = models.UUIDField(_("lease token"), null=True, blank=True)
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    # While pending: publish no earlier than this (after a refusal the broker may take back).
    available_at = models.DateTimeField(_("available at"), null=True, blank=True)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True, default="", db_default="")

    objects = MessageQuerySet.as_manager()

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["-id"]
        indexes = [
            # The relay's claim: pending messages in id order. Partial: sent ones, however
            # many are kept, never enter it.
            models.Index(
                F("id"),
                name="outbox_message_pending",
                condition=Q(status=MessageStatus.PENDING),
            ),
            # The claim's check that no earlier message of a candidate's key holds it back
            # (leased, blocked, or waiting for a retry): only such messages are in it, so the
            # check reads a few entries however long the key's backlog. By lease token before
            # the id: the check passes over the batch its relay is sending as a range.
            models.Index(
                F("broker"),
                F("topic"),
                F("key"),
                F("lease_token"),
                F("id"),
                name="outbox_message_key_holds",
                condition=Q(key__isnull=False)
                & (
                    Q(lease_token__isnull=False)
                    | Q(status=MessageStatus.BLOCKED)
                    | Q(available_at__isnull=False)
                ),
            ),
            # The admin's and outbox_health's blocked messages.
            models.Index(
                F("id"),
                name="outbox_message_blocked",
                condition=Q(status=MessageStatus.BLOCKED),
            ),
            # Retention pruning of sent messages.
            models.Index(
                F("sent_at"),
                name="outbox_message_sent",
                condition=Q(status=MessageStatus.SENT),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=MessageStatus.values), name="outbox_message_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic} {self.id}"

    @classmethod
    def check(cls, **kwargs: Any) -> list[CheckMessage]:
        return without_index_warnings(super().check(**kwargs))


class InboxEntry(models.Model):
    """A message a consumer has handled (``receive_once``): its second delivery does nothing.

    Written in the consumer's own transaction, with its effects: both commit or neither.
    Pruned after ``OUTBOX["RELAY"]["INBOX_RETENTION"]`` seconds.
    """

    id = models.BigAutoField(primary_key=True)
    consumer = models.CharField(_("consumer"), max_length=255)
    message_id = models.CharField(_("message id"), max_length=255)
    received_at = models.DateTimeField(_("received at"), db_default=Now())

    class Meta:
        verbose_name = _("inbox entry")
        verbose_name_plural = _("inbox entries")
        constraints = [
            # The race's arbiter: of two deliveries in flight, the second waits for the first
            # one's transaction and then finds the id taken.
            models.UniqueConstraint(fields=["consumer", "message_id"], name="outbox_inbox_once")
        ]
        indexes = [models.Index(F("received_at"), name="outbox_inbox_received")]

    def __str__(self) -> str:
        return f"{self.consumer} {self.message_id}"

    @classmethod
    def check(cls, **kwargs: Any) -> list[CheckMessage]:
        return without_index_warnings(super().check(**kwargs))
