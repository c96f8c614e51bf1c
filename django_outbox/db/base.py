"""The interface every database's queries implement, and the one path their SQL runs through."""

from __future__ import annotations

import copy
import datetime
import enum
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.checks import CheckMessage
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q
from django.db.models.functions import Now

from ..models import Job, JobStatus
from .fair_rounds import ROUNDS_SQL, rounds_params, served_round

if TYPE_CHECKING:
    from ..claimed import ClaimedJob


def held_rows(jobs: Sequence[ClaimedJob]) -> Q:
    """The rows of ``jobs`` still held by their attempts (same lease token, still running)."""
    condition = Q()
    for job in jobs:
        condition |= Q(pk=job.id, lease_token=job.lease_token)
    return condition & Q(status=JobStatus.RUNNING)


def _database_time_in(seconds: float) -> models.Expression:
    """The database's current time plus ``seconds``, as an expression."""
    return models.ExpressionWrapper(
        Now() + models.Value(datetime.timedelta(seconds=seconds)),
        output_field=models.DateTimeField(),
    )


class ClaimKind(enum.Enum):
    """Which jobs a claim takes (``ClaimPolicy`` chooses)."""

    #: Jobs without a lock key, dependencies or fair key: the cheapest claim (PostgreSQL).
    PLAIN = "plain"
    #: Every job but fair ones, lock keys' lines and dependencies checked.
    FULL = "full"
    #: Fair jobs (enqueue(fair_key=...)) alone, by round.
    FAIR = "fair"
    #: Jobs under a concurrency cap or rate limit (a limit key): chosen by
    #: ``django_outbox.limits``, which counts each limit's use, then claimed by id.
    LIMITED = "limited"


@dataclass(frozen=True)
class LimitedCandidate:
    """A runnable limited job, as the limited claim weighs it."""

    id: int
    task_name: str
    queue: str
    limit_key: str


@dataclass(frozen=True)
class WholeLimit:
    """A whole task's or queue's limit, as a claim in one round trip checks it: its cap (jobs
    running at once) and its rate's refill (tokens a second) and bucket (most tokens), each
    None where not declared."""

    kind: str
    name: str
    cap: int | None
    per_second: float | None
    burst: float | None


@dataclass(frozen=True)
class LimitedAsk:
    """What a limited claim asks for: up to ``count`` limited jobs of ``queues`` (all but
    ``excluded_queues``; retrying ones of ``paused_retries`` left out), leased for
    ``lease_seconds`` to ``worker_id``."""

    worker_id: str
    queues: Sequence[str] | None
    count: int
    lease_seconds: float
    paused_retries: Sequence[str] = ()
    excluded_queues: Sequence[str] = ()


@dataclass(frozen=True)
class HeldBack:
    """Limited jobs a claim passes over: those of the tasks and queues in ``tasks`` and
    ``queues`` (a limit of the whole is used up or paused), and of the (name, key) pairs in
    ``task_keys`` and ``queue_keys`` (a per-key limit is)."""

    tasks: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    task_keys: frozenset[tuple[str, str]] = frozenset()
    queue_keys: frozenset[tuple[str, str]] = frozenset()

    def __or__(self, other: HeldBack) -> HeldBack:
        return HeldBack(
            tasks=self.tasks | other.tasks,
            queues=self.queues | other.queues,
            task_keys=self.task_keys | other.task_keys,
            queue_keys=self.queue_keys | other.queue_keys,
        )


#: What a statement gave: the number of rows it changed, and the rows it returned.
Result = tuple[int, list[Sequence[Any]]]

#: The longest a worker's own statements (claims, heartbeats, rescues, completions, pruning)
#: wait for another transaction's lock, whatever the heartbeat interval...
WORKER_LOCK_WAIT_MAX_SECONDS = 5.0
#: ...and the shortest: a lock held for less than this is a busy moment, not a fault.
WORKER_LOCK_WAIT_MIN_SECONDS = 1.0


def application_name_of(worker_id: str) -> str:
    """The name a worker gives its own connections (PostgreSQL keeps 63 bytes of it)."""
    return f"outbox {worker_id}".encode()[:63].decode(errors="ignore")


def worker_lock_wait_seconds(heartbeat_seconds: float) -> float:
    """How long a worker beating every ``heartbeat_seconds`` lets its own statements wait
    for a lock: at most a heartbeat (a lease spans at least three), within the bounds above."""
    return max(WORKER_LOCK_WAIT_MIN_SECONDS, min(heartbeat_seconds, WORKER_LOCK_WAIT_MAX_SECONDS))


@dataclass(frozen=True)
class Heartbeat:
    """What extending a worker's leases found out about its jobs."""

    # Taken over by another worker (the lease expired and was rescued), or gone.
    lost: frozenset[int] = frozenset()
    # Asked to stop by cancel(): their leases are no longer extended.
    cancel_requested: frozenset[int] = frozenset()
    # Still this worker's, but their rows were locked by another transaction (an operator's
    # SELECT ... FOR UPDATE, a caller's open transaction): skipped, extended at a later beat.
    locked: frozenset[int] = frozenset()
    # Among ``locked``: those whose lease has run out meanwhile, by the database's clock.
    expired: frozenset[int] = frozenset()


@dataclass(frozen=True)
class InsertedJobs:
    """The rows ``insert_jobs`` wrote: their ids, and the saved jobs where the insert built
    them (else when they were enqueued, to build them from)."""

    ids: list[int]
    jobs: list[Job] | None = None
    enqueued_at: datetime.datetime | None = None


class DatabaseQueries:
    """The worker's and bulk enqueue's SQL for one database, behind one interface.

    Every statement runs through ``execute``, inside Django's error wrapping: whatever the
    driver raises reaches callers as Django's ``DatabaseError`` subclasses, so the worker's
    ``except DatabaseError`` (and ``retry_while_locked``) see every failure, and Django learns
    that the connection may be broken and replaces it.
    """

    vendor: ClassVar[str]
    #: Whether workers can be woken by enqueues in other processes (``listen``).
    listens: ClassVar[bool] = False
    #: Whether a PLAIN claim is cheaper than a FULL one (``ClaimPolicy``); where it is not,
    #: every claim of jobs that are not fair is full.
    plain_claims: ClassVar[bool] = False
    #: Whether a ``write_transaction`` holds the only write lock from its start (SQLite): what
    #: it reads stays true until it commits.
    one_writer: ClassVar[bool] = False
    #: Whether ``claim_limited_in_one_trip`` can claim limited jobs in one short transaction
    #: (one round trip on PostgreSQL; a few statements on SQLite and MariaDB).
    supports_limited_claim_in_one_trip: ClassVar[bool] = False
    #: The driver's placeholder in the SQL ``execute`` runs, and the database's clock as the
    #: claim compares ``run_at`` with it (for statements shared by both databases).
    placeholder: ClassVar[str]
    due_by: ClassVar[str]
    #: The database's clock as leases are compared with it, and in seconds since the epoch
    #: (``database_seconds``).
    clock: ClassVar[str]
    clock_seconds: ClassVar[str]

    def execute(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        """Run one statement on ``connection``; return (rows changed, rows returned)."""
        return self._checked(connection, sql, params, self._execute)

    def execute_replanned(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        """``execute``, planned at every run for the table as it is, never a kept plan: for
        statements on the project's connections whose plan made on a near-empty table would
        scan the whole table later (where the database keeps plans)."""
        return self.execute(connection, sql, params)

    def _checked(
        self,
        connection: BaseDatabaseWrapper,
        sql: str,
        params: Any,
        run: Callable[[BaseDatabaseWrapper, str, Any], Result],
    ) -> Result:
        """Call ``run(connection, sql, params)`` (an ``_execute``) with Django's checks, error
        wrapping and query log."""
        # This runs once per job: each check is the cheapest form of Django's own.
        if connection.connection is None:
            connection.ensure_connection()
        if connection.needs_rollback:
            # Django's own cursor refuses to run in a transaction that can only roll back; so
            # does this path, rather than letting a write look done that the rollback undoes.
            connection.validate_no_broken_transaction()
        if not connection.queries_logged or self.runs_on_django_cursor(connection):
            with connection.wrap_database_errors:
                return run(connection, sql, params)
        # DEBUG (or a test's CaptureQueriesContext), on the driver's own cursor: listed with
        # the ORM's statements, as Django's cursor would list it.
        started = time.monotonic()
        try:
            with connection.wrap_database_errors:
                return run(connection, sql, params)
        finally:
            connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})

    def _execute(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        raise NotImplementedError

    def runs_on_django_cursor(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether ``_execute`` uses Django's cursor (which logs queries itself)."""
        return False

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        lease_seconds: float,
        paused_retries: Sequence[str] = (),
        kind: ClaimKind = ClaimKind.FULL,
        excluded_queues: Sequence[str] = (),
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` runnable jobs of ``kind`` of ``queues`` (all queues when
        empty) but ``excluded_queues``, leaving retrying jobs of the ``paused_retries`` queues
        (see ``pacing``)."""
        raise NotImplementedError

    def claim_chosen(
        self,
        connection: BaseDatabaseWrapper,
        worker_id: str,
        ids: Sequence[int],
        lease_seconds: float,
    ) -> list[ClaimedJob]:
        """Claim the jobs ``ids`` that are still runnable (the limited claim chose them), as
        ``claim`` claims; jobs another worker took meanwhile are left out."""
        raise NotImplementedError

    def limited_candidates(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        paused_retries: Sequence[str],
        held_back: HeldBack,
        limit: int,
        excluded_queues: Sequence[str] = (),
    ) -> list[LimitedCandidate]:
        """Return up to ``limit`` runnable limited jobs of ``queues`` (but ``excluded_queues``)
        in the limited claim's order, passing over those ``held_back`` names and retrying jobs
        of ``paused_retries``
        (``limited.limited_candidates`` serves databases that read its SQL as written)."""
        raise NotImplementedError

    def claim_limited_batch(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
    ) -> list[tuple[ClaimedJob, str]]:
        """Claim what ``ask`` asks for: the first limited jobs ``limited_candidates`` would
        return but those ``held_back`` names, as they are, their limits left for the caller to
        check under their locks; return each with its limit key. Concurrent claimers pass over
        each other's jobs."""
        raise NotImplementedError

    def claim_limited_in_one_trip(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
        limits: Sequence[WholeLimit],
    ) -> tuple[list[tuple[ClaimedJob, str]], bool]:
        """Claim, in one transaction of its own (one round trip where the database can send its
        statements at once; ``limited_steps`` serves the others), what ``ask`` asks for: the
        first limited jobs ``limited_candidates`` would return (but those ``held_back`` names)
        whose ``limits`` (every whole limit declared; their rows exist) all have room for
        ``ask.count`` jobs with half their cap and
        bucket to spare, counted under the limits' row locks, and take their tokens; return
        each job with its limit key, and whether some limits had less room (their jobs were
        passed over). Only where ``supports_limited_claim_in_one_trip``."""
        raise NotImplementedError

    def database_seconds(self, connection: BaseDatabaseWrapper) -> float:
        """Return the database's clock now, in seconds since the epoch: the clock that leases
        and ``run_at`` are compared with, the same for every worker."""
        raise NotImplementedError

    def waiting_kinds(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        excluded_queues: Sequence[str] = (),
    ) -> set[ClaimKind]:
        """Which of the claims that take more than plain jobs would find some due now in
        ``queues`` but ``excluded_queues``: FULL (jobs with a lock key or dependencies, where
        ``plain_claims``), FAIR, LIMITED."""
        raise NotImplementedError

    def extend_leases(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob], lease_seconds: float
    ) -> Heartbeat:
        """Extend the leases of ``jobs`` (held by this worker), except those cancel() asked to
        stop and, where rows are locked one by one, those another transaction has locked.

        This default serves a database with one writer at a time (SQLite): the statement waits
        for the write lock (under the busy timeout), then no row can be locked by anyone else.
        """
        held = Job.objects.using(connection.alias).filter(held_rows(jobs))
        extended = held.filter(cancel_requested=False).update(
            lease_expires_at=_database_time_in(lease_seconds)
        )
        if extended == len(jobs):
            return Heartbeat()
        still_held = self.still_held(connection, jobs)
        return Heartbeat(
            lost=frozenset({job.id for job in jobs} - still_held.keys()),
            cancel_requested=frozenset(
                pk for pk, (requested, _expired) in still_held.items() if requested
            ),
        )

    def _heartbeat_missed(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob], extended: set[int]
    ) -> Heartbeat:
        """The heartbeat of a database that locks rows one by one, where the leases of
        ``jobs`` but ``extended`` were not: lost, to stop (cancel()), or locked by another
        transaction (and whether those expired meanwhile)."""
        still_held = self.still_held(connection, jobs)
        skipped = still_held.keys() - extended
        return Heartbeat(
            lost=frozenset({job.id for job in jobs} - still_held.keys()),
            cancel_requested=frozenset(job_id for job_id in skipped if still_held[job_id][0]),
            locked=frozenset(job_id for job_id in skipped if not still_held[job_id][0]),
            expired=frozenset(
                job_id for job_id in skipped if not still_held[job_id][0] and still_held[job_id][1]
            ),
        )

    def still_held(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]
    ) -> dict[int, tuple[bool, bool]]:
        """Of ``jobs``, those whose attempt still holds the row (without waiting for locks):
        by id, whether cancel() asked it to stop and whether its lease has run out."""
        rows = (
            Job.objects.using(connection.alias)
            .filter(held_rows(jobs))
            .annotate(
                expired=models.ExpressionWrapper(
                    Q(lease_expires_at__lte=Now()), output_field=models.BooleanField()
                )
            )
            .values_list("pk", "cancel_requested", "expired")
        )
        return {job_id: (requested, bool(expired)) for job_id, requested, expired in rows}

    def mark_succeeded(self, connection: BaseDatabaseWrapper, job: ClaimedJob) -> bool:
        """Mark ``job`` succeeded; return False (changing nothing) if its lease was lost."""
        raise NotImplementedError

    def mark_many_succeeded(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]
    ) -> set[int]:
        """Mark ``jobs`` succeeded, but those cancel() asked to stop and (where rows are
        locked one by one) those another transaction has locked; return the ids marked."""
        raise NotImplementedError

    def insert_job(self, connection: BaseDatabaseWrapper, job: Job) -> None:
        """Insert the unsaved ``job`` (its payload encoded) and fill in what the row got; a
        fair job without a round gets the next of its key (call with its key's enqueuers
        serialized)."""
        if job.fair_key is not None and job.fair_round is None:
            job.fair_round = self.first_fair_round(connection, job.queue, job.fair_key)
        job.save(using=connection.alias, force_insert=True)

    def first_fair_round(self, connection: BaseDatabaseWrapper, queue: str, key: str) -> int:
        """Return the round of the next job of fair ``key`` in ``queue`` (call with enqueuers
        of the key serialized, inside the enqueue's transaction; see ``fair_rounds``)."""
        sql = ROUNDS_SQL.format(p=self.placeholder, due_by=self.due_by)
        # Planned for the table as it is: a kept plan made on a nearly empty table scans it.
        _, rows = self.execute_replanned(connection, sql, rounds_params(queue, key))
        return served_round(*rows[0])

    def on_database_clock(self, when: datetime.datetime) -> datetime.datetime:
        """Return ``when``, a datetime as Django stores it, as this database's clock reads it
        (against which workers compare ``run_at``)."""
        return when

    def serialize_enqueuers(self, connection: BaseDatabaseWrapper, key: str) -> None:
        """Make other transactions that call this with ``key`` wait until this one ends.

        For checks that must see every committed job before inserting (a unique key, a
        queue's size). Call inside a transaction. This default serves a database with one
        writer at a time (SQLite): taking the write lock (a write that changes nothing) makes
        every other writer wait, and the reads that follow see every committed job.
        """
        self.execute(connection, f"UPDATE {Job._meta.db_table} SET id = id WHERE 0 = 1", ())

    def insert_jobs(
        self, connection: BaseDatabaseWrapper, template: Job, payloads: Sequence[Any]
    ) -> InsertedJobs:
        """Insert one job like ``template`` per (encoded) payload; say what was written."""
        raise NotImplementedError

    def insert_jobs_with_orm(
        self, connection: BaseDatabaseWrapper, template: Job, payloads: Sequence[Any]
    ) -> InsertedJobs:
        """``insert_jobs`` by the ORM's ``bulk_create``, for databases that return the ids of
        the rows it inserts."""
        jobs = []
        for position, payload in enumerate(payloads):
            job = copy.copy(template)
            job.payload = payload
            if template.fair_round is not None:
                # A fair key's jobs take consecutive rounds from the first one's (fairness.py).
                job.fair_round = template.fair_round + position
            jobs.append(job)
        saved = Job.objects.using(connection.alias).bulk_create(jobs)
        return InsertedJobs([job.pk for job in saved], jobs=saved)

    def on_conflict_add(self, table: str, keys: Sequence[str], added: Sequence[str]) -> str:
        """The clause of an INSERT that, where a row with the same ``keys`` exists, adds the
        new row's ``added`` columns to its own (PostgreSQL, and SQLite 3.24 and later)."""
        sums = ", ".join(f"{column} = {table}.{column} + excluded.{column}" for column in added)
        return f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sums}"

    def compatibility_problems(self, connection: BaseDatabaseWrapper) -> list[CheckMessage]:
        """What about ``connection``'s server or session the queue cannot work with (errors),
        or works with badly (warnings): for the system checks of the database."""
        return []

    def announce(self, connection: BaseDatabaseWrapper, queues: Sequence[str]) -> None:
        """Tell workers in other processes, once the open transaction commits, that jobs of
        ``queues`` became ready by other means than an INSERT (resumed, retried)."""

    def prepare_worker_connection(self, connection: BaseDatabaseWrapper) -> None:
        """Set up a worker thread's connection (once per connection or process)."""

    def configure_worker_connections(self, connection: BaseDatabaseWrapper) -> None:
        """Adjust the settings of ``connection``'s alias for a worker process, before its
        threads connect (nothing to do for an embedded database)."""

    def bound_lock_waits(
        self, connection: BaseDatabaseWrapper, seconds: float, worker_id: str = ""
    ) -> None:
        """Make every statement on ``connection``, a connection that runs only the worker's
        own statements, wait at most ``seconds`` for another transaction's lock (once per
        connection). The lock error that follows is a database error like any other: the
        loop that ran it backs off and tries again. Where the database lists its sessions,
        the connection is named after ``worker_id`` (``application_name_of``), so that
        ``outbox_health`` can tell what a late worker waits for.

        This default serves SQLite, whose only wait, for the write lock, is bounded by the
        busy timeout already (Django's ``OPTIONS["timeout"]``, 5 s by default).
        """

    def write_transaction(self, connection: BaseDatabaseWrapper) -> AbstractContextManager[None]:
        """Return a transaction for code that reads rows and then writes them."""
        raise NotImplementedError

    def transaction_broken(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether ``connection``'s open transaction can only roll back.

        Django knows when a statement failed inside one of its ``atomic`` blocks
        (``needs_rollback``); a database may know more (PostgreSQL aborts the transaction on any
        failed statement, however the error was caught).
        """
        return bool(connection.needs_rollback)

    @contextmanager
    def lock_wait(self, connection: BaseDatabaseWrapper, seconds: float) -> Iterator[None]:
        """Within the block, wait at most ``seconds`` for another transaction's locks."""
        yield

    @contextmanager
    def claim_lock_wait(self, connection: BaseDatabaseWrapper) -> Iterator[None]:
        """Within the block, claims wait for locks only as long as a stop may wait for them.

        Claims that skip locked rows never wait: nothing to do. (SQLite's wait for its one
        write lock is a single call that a stop request cannot cut short.)
        """
        yield

    def listen(
        self,
        connection: BaseDatabaseWrapper,
        on_enqueue: Callable[[str], None],
        stop: threading.Event,
        retry_seconds: float,
        channel: str = "django_outbox",
    ) -> None:
        """Call ``on_enqueue(queue)`` for enqueues in other processes until ``stop`` is set;
        ``channel`` names another kind of announcement (the relay's messages)."""
        raise NotImplementedError(f"{self.vendor} cannot announce enqueues to other processes.")
