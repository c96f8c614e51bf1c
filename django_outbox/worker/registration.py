"""The registry of running workers: each writes its row (``WorkerProcess``) at every heartbeat
(the first, one heartbeat after it starts, inserts it), and deletes it when it stops gracefully.

It costs one UPDATE per heartbeat (an INSERT when the row is missing), on the heartbeat
thread's connection, and one more for the jobs it finished per queue and minute
(``django_outbox.activity``); the jobs are counted in memory and written with the beat, never
per job. A worker killed without stopping leaves its row: its heartbeat ages, readers call it
stale (``Registered.stale``), and other workers' heartbeats delete it an hour later. The
registry never stops a worker: its errors are logged (once per run of them) and the next
heartbeat tries again.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from ..conf import get_settings
from ..db import queries_for, retry_while_locked
from ..db.outage import ErrorBackoff, first_line
from ..jobs.transitions import database_time_in
from ..models import WorkerProcess
from .activity import ActivityCounter, forget_old_activity
from .health import WorkerHealth, is_healthy

logger = logging.getLogger(__name__)

#: A worker whose last heartbeat is older than this many of its heartbeat intervals is stale...
STALE_HEARTBEATS = 3
#: ...and never sooner than this: a busy SQLite file can hold a heartbeat back for a while.
STALE_MIN_SECONDS = 30.0
#: A worker whose last heartbeat is older than this many of its intervals is late...
LATE_HEARTBEATS = 2
#: ...and never sooner than this (a heartbeat's own statements may take a moment).
LATE_MIN_SECONDS = 2.0
#: Rows of workers silent this long are deleted by other workers' heartbeats.
FORGET_SECONDS = 3600.0
#: Longest wait for a lock on the registry's row (less, with short heartbeats).
LOCK_WAIT_SECONDS = 2.0
#: How often a worker deletes such rows.
CLEANUP_EVERY = 60.0


class Registration:
    """One running worker's row: ``beat()`` writes it, ``leave()`` deletes it.

    ``counts`` returns the jobs the worker finished so far and the failed ones among them.
    """

    def __init__(
        self,
        *,
        using: str,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        heartbeat_seconds: float,
        health: WorkerHealth,
        counts: Callable[[], tuple[int, int]],
        activity: ActivityCounter | None = None,
    ) -> None:
        self.using = using
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.heartbeat_seconds = heartbeat_seconds
        self.health = health
        self.counts = counts
        self.activity = activity
        self.instance = uuid.uuid4()
        self.started_at = timezone.now()
        self.host = socket.gethostname()[:255]
        self.pid = os.getpid()
        self._next_cleanup = 0.0
        self._taken_over = False
        self._errors = ErrorBackoff(
            f"registering the worker worker={worker_id}",
            logger,
            first_delay=heartbeat_seconds,
        )

    def beat(self) -> None:
        """Write the row (insert it if it is missing) and the activity counts; once a minute,
        delete silent workers' rows and old activity. On a database error, log and go on."""
        try:
            self._briefly(self._write)
            # Only with something to write: an idle worker's beats stay one statement.
            if self.activity is not None and self.activity.has_counts():
                self._briefly(partial(self.activity.write, self.using))
            if time.monotonic() >= self._next_cleanup:
                self._next_cleanup = time.monotonic() + CLEANUP_EVERY
                self._briefly(partial(forget_silent_workers, self.using))
                self._briefly(partial(forget_old_activity, self.using))
        except DatabaseError as exc:
            # Jobs run on regardless; a broken connection is replaced at the next beat.
            connections[self.using].close()
            self._errors.failed(exc)
        else:
            self._errors.succeeded()

    def leave(self) -> None:
        """Write the last counts; delete the row, unless a newer worker with the same id has
        taken it over."""
        try:
            if self.activity is not None:
                self._briefly(partial(self.activity.write, self.using))
            self._briefly(
                lambda: (
                    WorkerProcess.objects.using(self.using)
                    .filter(worker_id=self.worker_id, instance=self.instance)
                    .delete()
                )
            )
        except DatabaseError as exc:
            # Its heartbeat stops: readers call it stale, and others delete it later.
            logger.warning(
                "could not remove the worker from the registry worker=%s: %s",
                self.worker_id,
                first_line(exc),
            )
        finally:
            connections[self.using].close()

    def _briefly(self, operation: Callable[[], object]) -> None:
        """Run ``operation``, waiting for locks only briefly.

        A lock on the registry must not hold the heartbeat (and so the leases) up, nor a
        stopping worker: on SQLite, its own handler's transaction may hold the write lock until
        the handler ends. A beat missed is made up by the next one.
        """
        connection = connections[self.using]
        wait = min(self.heartbeat_seconds / 2, LOCK_WAIT_SECONDS)
        with queries_for(connection).lock_wait(connection, wait):
            retry_while_locked(operation, give_up_after=wait)

    def _write(self) -> None:
        done, failed = self.counts()
        in_error_for = self.health.in_error_for()
        last_error, last_error_ago = self.health.last_error()
        fields = {
            "instance": self.instance,
            "host": self.host,
            "pid": self.pid,
            "queues": self.queues,
            "concurrency": self.concurrency,
            "started_at": self.started_at,
            "heartbeat_seconds": self.heartbeat_seconds,
            "jobs_done": done,
            "jobs_failed": failed,
            "in_error_since": None if in_error_for is None else database_time_in(-in_error_for),
            "last_error_at": None if last_error_ago is None else database_time_in(-last_error_ago),
            "last_error": last_error,
        }
        rows = WorkerProcess.objects.using(self.using)
        # The row is this worker's, or an older worker's with the same id (restarted under it,
        # after a crash): take it. A newer one's is left alone.
        mine = Q(instance=self.instance) | Q(started_at__lt=self.started_at)
        if rows.filter(mine, worker_id=self.worker_id).update(last_heartbeat_at=Now(), **fields):
            self._taken_over = False
            return
        try:
            with transaction.atomic(using=self.using):
                rows.create(worker_id=self.worker_id, **fields)
        except IntegrityError:
            if not self._taken_over:
                self._taken_over = True
                logger.warning(
                    "another worker registered with the same id worker=%s; give each worker an "
                    "id of its own (--worker-id)",
                    self.worker_id,
                )


def forget_silent_workers(using: str) -> int:
    """Delete the rows of workers whose heartbeat stopped more than ``FORGET_SECONDS`` ago."""
    deleted, _ = (
        WorkerProcess.objects.using(using)
        .filter(last_heartbeat_at__lt=database_time_in(-FORGET_SECONDS))
        .delete()
    )
    return deleted


@dataclass(frozen=True)
class Registered:
    """A registry row as readers see it, judged by the database's clock."""

    row: WorkerProcess
    #: Seconds since its last heartbeat.
    heartbeat_age: float
    #: Seconds since it started.
    running_for: float
    #: Seconds it has been in error, as of now (None: not in error at its last heartbeat).
    in_error_for: float | None

    @property
    def stale(self) -> bool:
        """Its heartbeat stopped: killed, hung, or cut off from the database."""
        return self.heartbeat_age > stale_after(self.row.heartbeat_seconds)

    @property
    def late(self) -> bool:
        """Its heartbeat is overdue (more than ``LATE_HEARTBEATS`` intervals) without being
        stale yet: stuck on something, a lock say, or busy."""
        return not self.stale and self.heartbeat_age > late_after(self.row.heartbeat_seconds)

    @property
    def healthy(self) -> bool:
        """Live, and not in error for longer than allowed (OUTBOX["HEALTH"])."""
        health = get_settings().health
        return not self.stale and is_healthy(
            in_error_for=self.in_error_for,
            running_for=self.running_for,
            allowed_error_seconds=health["ALLOWED_ERROR_SECONDS"],
            grace_seconds=health["GRACE_SECONDS"],
        )


def late_after(heartbeat_seconds: float) -> float:
    """Seconds without a heartbeat after which a worker beating this often is late."""
    return max(LATE_HEARTBEATS * heartbeat_seconds, LATE_MIN_SECONDS)


def stale_after(heartbeat_seconds: float) -> float:
    """Seconds without a heartbeat after which a worker beating this often is stale."""
    return max(STALE_HEARTBEATS * heartbeat_seconds, STALE_MIN_SECONDS)


def registered_workers(*, using: str | None = None, limit: int = 1000) -> list[Registered]:
    """Every row of the registry (at most ``limit``), by worker id, stale ones included."""
    rows = list(
        WorkerProcess.objects.using(using or get_settings().database)
        .annotate(database_now=Now())
        .order_by("worker_id")[:limit]
    )
    workers = []
    for row in rows:
        now: datetime.datetime = row.database_now
        heartbeat_age = max(0.0, (now - row.last_heartbeat_at).total_seconds())
        in_error_for = (
            None if row.in_error_since is None else (now - row.in_error_since).total_seconds()
        )
        workers.append(
            Registered(
                row=row,
                heartbeat_age=heartbeat_age,
                running_for=max(0.0, (now - row.started_at).total_seconds()),
                in_error_for=in_error_for,
            )
        )
    return workers
