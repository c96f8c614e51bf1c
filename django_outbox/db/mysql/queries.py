"""MariaDB (10.6+) and MySQL (8+): claims with FOR UPDATE SKIP LOCKED, in two statements.

Neither database has UPDATE ... RETURNING, partial indexes or LISTEN. So a claim is a short
transaction: a locking read of the candidates (SKIP LOCKED: concurrent claimers pass over each
other's rows), then an UPDATE of those rows by primary key, then COMMIT. The claims read the
indexes migration 0015 builds on the generated column ``claim_lane`` (1: a claimable job that
is not fair, 2: a claimable fair job), which hold the claimable jobs first, in the claims'
order. Workers poll: no enqueue wakes a worker of another process.

Times are the database's clock in UTC (``UTC_TIMESTAMP(6)``), as Django stores datetimes on
these databases with ``USE_TZ``: never the session's time zone, which ``NOW()`` would follow.

The queue needs READ COMMITTED (Django's default on these databases): each statement reads
what is committed when it starts, so an enqueuer that waited for another sees its job, and a
claim's checks of lock keys and dependencies see the latest state. A system check refuses
other isolation levels (see ``checks``).
"""

from __future__ import annotations

import datetime
import uuid
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ...claimed import ClaimedJob
from ...models import Job, JobStatus
from ..base import ClaimKind, DatabaseQueries, InsertedJobs, Result
from ..fair_rounds import rounds_params, served_round
from ..rows import CLAIMS

TABLE = Job._meta.db_table
#: The database's clock, in UTC as Django stores datetimes here.
NOW = "UTC_TIMESTAMP(6)"
#: The generated column's lanes (migration 0015).
PLAIN_LANE = 1
FAIR_LANE = 2
#: The rows enqueuers lock to wait for each other (migration 0015), keys hashed into them.
ENQUEUE_LOCK_TABLE = "django_outbox_enqueue_lock"
ENQUEUE_LOCK_SLOTS = 4096

#: What a claim reads of each candidate, besides what it writes.
PICKED_COLUMNS = (
    "id, task_name, queue, payload, attempts, max_attempts, priority, resume_data, context"
)

# The candidates, locked; rows other claimers hold are skipped, not waited for. The lane is
# the claim kind's (the first column of every claim index); the queue filter follows it, so
# that a worker of given queues reads the index of (lane, queue, order).
PICK_SQL = f"""
SELECT {PICKED_COLUMNS}
FROM {TABLE} AS candidate
WHERE claim_lane = {{lane}} AND run_at <= {NOW}
  {{queue_filter}}{{pick}}
ORDER BY {{order}}
LIMIT %s
FOR UPDATE SKIP LOCKED
"""

# The rows picked, by primary key. max_attempts first: MySQL assigns left to right, and each
# assignment sees the ones before it. A row made claimable with its attempts used up gets one
# more attempt rather than failing the claim on the attempts-within-max constraint.
CLAIM_UPDATE_SQL = f"""
UPDATE {TABLE}
SET max_attempts = GREATEST(max_attempts, attempts + 1),
    attempts = attempts + 1,
    status = '{JobStatus.RUNNING}',
    lease_token = CASE id {{tokens}} END,
    lease_expires_at = {NOW} + INTERVAL %s MICROSECOND,
    worker_id = %s,
    started_at = {NOW},
    finished_at = NULL
WHERE id IN ({{ids}})
"""

# Whether fair jobs are due (every other claim is full here).
FAIR_WAITING_SQL = f"""
SELECT 1 FROM {TABLE}
WHERE claim_lane = {FAIR_LANE} AND run_at <= {NOW} {{queue_filter}}
LIMIT 1
"""

SUCCEEDED_SET = f"""
SET status = '{JobStatus.SUCCEEDED}', finished_at = {NOW}, lease_token = NULL,
    lease_expires_at = NULL
"""

MARK_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE id = %s AND lease_token = %s AND status = '{JobStatus.RUNNING}'
"""

# A batch: the rows whose lease still holds are read (locked) first, for want of RETURNING.
HELD_LEASES_SQL = f"""
SELECT id, lease_token FROM {TABLE}
WHERE id IN ({{ids}}) AND status = '{JobStatus.RUNNING}'
FOR UPDATE
"""
MARK_MANY_SUCCEEDED_SQL = f"UPDATE {TABLE} {SUCCEEDED_SET} WHERE id IN ({{ids}})"

# The fair rounds' four looks (``fair_rounds.ROUNDS_SQL``), along the claim lane's indexes:
# MariaDB cannot tell that ``status IN (...) AND fair_key IS NOT NULL`` is ``claim_lane = 2``.
ROUNDS_SQL = f"""
SELECT
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE status = '{JobStatus.RUNNING}' AND queue = %s AND fair_key IS NOT NULL) AS running,
    (SELECT fair_round FROM {TABLE}
     WHERE claim_lane = {FAIR_LANE} AND queue = %s AND run_at <= {NOW}
     ORDER BY fair_round LIMIT 1) AS next_due,
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE claim_lane = {FAIR_LANE} AND queue = %s) AS last_waiting,
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE claim_lane = {FAIR_LANE} AND queue = %s AND fair_key = %s) AS key_last
"""


def enqueue_lock_slot(key: str) -> int:
    """The row of ``ENQUEUE_LOCK_TABLE`` that enqueuers of ``key`` lock; two keys that share
    one only wait for each other."""
    return zlib.crc32(key.encode()) % ENQUEUE_LOCK_SLOTS


class MySQLQueries(DatabaseQueries):
    vendor: ClassVar[str] = "mysql"
    placeholder: ClassVar[str] = "%s"
    due_by: ClassVar[str] = NOW

    def _execute(self, connection: BaseDatabaseWrapper, sql: str, params: Any) -> Result:
        # Django's cursor: mysqlclient has no server-side prepared statements to gain from.
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount, list(cursor.fetchall()) if cursor.description else []

    def runs_on_django_cursor(self, connection: BaseDatabaseWrapper) -> bool:
        return True

    @contextmanager
    def _short_transaction(self, connection: BaseDatabaseWrapper) -> Iterator[None]:
        """A transaction for a claim's or a batch's statements.

        Outside Django's ``atomic`` (a worker's own connection), a plain START TRANSACTION and
        COMMIT: ``atomic`` would also switch autocommit off and on again, two more round trips
        per claim. Inside one, a savepoint.
        """
        if connection.in_atomic_block:
            with transaction.atomic(using=connection.alias):
                yield
            return
        self.execute(connection, "START TRANSACTION", ())
        try:
            yield
        except BaseException:
            try:
                self.execute(connection, "ROLLBACK", ())
            except DatabaseError:
                # A broken connection rolled back with it; Django replaces it.
                connection.close()
            raise
        self.execute(connection, "COMMIT", ())

    def _token_value(self, connection: BaseDatabaseWrapper, token: uuid.UUID) -> Any:
        """``token`` as the lease_token column stores it: MariaDB 10.7+ has a UUID type,
        earlier versions and MySQL a CHAR(32) of hex digits."""
        return str(token) if connection.features.has_native_uuid_field else token.hex

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        lease_seconds: float,
        paused_retries: Sequence[str] = (),
        kind: ClaimKind = ClaimKind.FULL,
    ) -> list[ClaimedJob]:
        # Never plain: the full claim's conditions cost nothing for a job without a lock key
        # or dependencies, and a plain claim would need an index of its own.
        pick, order = CLAIMS[ClaimKind.FULL if kind is ClaimKind.PLAIN else kind]
        lane = FAIR_LANE if kind is ClaimKind.FAIR else PLAIN_LANE
        queues = list(queues or ())
        paused = list(paused_retries)
        queue_filter = f"AND queue IN ({', '.join(['%s'] * len(queues))})" if queues else ""
        if paused:
            queue_filter += (
                f" AND NOT (status = '{JobStatus.RETRYING}' "
                f"AND queue IN ({', '.join(['%s'] * len(paused))}))"
            )
        sql = PICK_SQL.format(lane=lane, queue_filter=queue_filter, pick=pick, order=order)
        with self._short_transaction(connection):
            _, rows = self.execute(connection, sql, [*queues, *paused, limit])
            if not rows:
                return []
            tokens = {row[0]: uuid.uuid4() for row in rows}
            ids = ", ".join(str(int(job_id)) for job_id in tokens)
            update = CLAIM_UPDATE_SQL.format(
                tokens=" ".join(["WHEN %s THEN %s"] * len(tokens)), ids=ids
            )
            params: list[Any] = []
            for job_id, token in tokens.items():
                params += [job_id, self._token_value(connection, token)]
            params += [round(lease_seconds * 1_000_000), worker_id]
            self.execute(connection, update, params)
        jobs = []
        for (
            job_id,
            task_name,
            queue,
            payload,
            attempts,
            max_attempts,
            priority,
            resumed,
            context,
        ) in rows:
            jobs.append(
                ClaimedJob(
                    id=job_id,
                    task_name=task_name,
                    queue=queue,
                    stored_payload=payload,
                    attempts=attempts + 1,
                    max_attempts=max(max_attempts, attempts + 1),
                    priority=priority,
                    lease_token=tokens[job_id],
                    worker_id=worker_id,
                    stored_resume_data=resumed,
                    stored_context=context,
                )
            )
        jobs.sort(key=lambda job: (-job.priority, job.id))
        return jobs

    def waiting_kinds(
        self, connection: BaseDatabaseWrapper, queues: Sequence[str] | None
    ) -> set[ClaimKind]:
        queues = list(queues or ())
        queue_filter = f"AND queue IN ({', '.join(['%s'] * len(queues))})" if queues else ""
        _, rows = self.execute(
            connection, FAIR_WAITING_SQL.format(queue_filter=queue_filter), queues
        )
        return {ClaimKind.FAIR} if rows else set()

    def mark_succeeded(self, connection: BaseDatabaseWrapper, job: ClaimedJob) -> bool:
        rowcount, _ = self.execute(
            connection, MARK_SUCCEEDED_SQL, [job.id, self._token_value(connection, job.lease_token)]
        )
        return rowcount == 1

    def mark_many_succeeded(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob]
    ) -> set[int]:
        if not jobs:
            return set()
        tokens = {job.id: job.lease_token for job in jobs}
        ids = ", ".join(str(int(job_id)) for job_id in tokens)
        with self._short_transaction(connection):
            _, rows = self.execute(connection, HELD_LEASES_SQL.format(ids=ids), ())
            held = {
                job_id
                for job_id, token in rows
                if token is not None and _as_uuid(token) == tokens[job_id]
            }
            if held:
                self.execute(
                    connection,
                    MARK_MANY_SUCCEEDED_SQL.format(ids=", ".join(str(job_id) for job_id in held)),
                    (),
                )
        return held

    def first_fair_round(self, connection: BaseDatabaseWrapper, queue: str, key: str) -> int:
        _, rows = self.execute(connection, ROUNDS_SQL, rounds_params(queue, key))
        return served_round(*rows[0])

    def serialize_enqueuers(self, connection: BaseDatabaseWrapper, key: str) -> None:
        # A row lock, held until the transaction ends; the reads that follow (READ COMMITTED)
        # see every job the transactions that held it before committed.
        self.execute(
            connection,
            f"SELECT slot FROM {ENQUEUE_LOCK_TABLE} WHERE slot = %s FOR UPDATE",
            [enqueue_lock_slot(key)],
        )

    def insert_jobs(
        self, connection: BaseDatabaseWrapper, template: Job, payloads: Sequence[Any]
    ) -> InsertedJobs:
        # One INSERT, the ids back from it (MariaDB's INSERT ... RETURNING).
        return self.insert_jobs_with_orm(connection, template, payloads)

    def on_conflict_add(self, table: str, keys: Sequence[str], added: Sequence[str]) -> str:
        # On any unique key's conflict: the table's is (keys).
        sums = ", ".join(f"{column} = {column} + VALUES({column})" for column in added)
        return f"ON DUPLICATE KEY UPDATE {sums}"

    def on_database_clock(self, when: datetime.datetime) -> datetime.datetime:
        """The claim compares ``run_at`` with UTC: without ``USE_TZ``, ``when`` is naive local
        time (``TIME_ZONE``), which would end a delay early or late by the zone's offset."""
        if settings.USE_TZ:
            return when
        local = timezone.make_aware(when, timezone.get_default_timezone())
        return timezone.make_naive(local, datetime.timezone.utc)

    def write_transaction(self, connection: BaseDatabaseWrapper) -> Any:
        """A plain transaction: row locks (SELECT ... FOR UPDATE) serialize what must be."""
        return transaction.atomic(using=connection.alias)

    @contextmanager
    def lock_wait(self, connection: BaseDatabaseWrapper, seconds: float) -> Iterator[None]:
        """Wait at most ``seconds`` (whole, at least one) for row locks within the block."""
        _, rows = self.execute(connection, "SELECT @@SESSION.innodb_lock_wait_timeout", ())
        configured = int(rows[0][0])
        wanted = max(1, min(configured, round(seconds)))
        self.execute(connection, f"SET SESSION innodb_lock_wait_timeout = {wanted}", ())
        try:
            yield
        finally:
            try:
                self.execute(connection, f"SET SESSION innodb_lock_wait_timeout = {configured}", ())
            except DatabaseError:
                # A broken connection is replaced, and a new one has the server's default.
                connection.close()


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


queries = MySQLQueries()
