"""MariaDB (10.6+) and MySQL (8+): claims with FOR UPDATE SKIP LOCKED, in two statements.

Neither database has UPDATE ... RETURNING, partial indexes or LISTEN. So a claim is a short
transaction: a locking read of the candidates (SKIP LOCKED: concurrent claimers pass over each
other's rows), then an UPDATE of those rows by primary key, then COMMIT. The claims read
indexes led by a generated column per lane (migration 0023: ``plain_lane``, ``fair_lane``,
``limited_lane``: the lane's number for a claimable job of the lane, NULL for every other job),
which hold the lane's jobs first, in the claims' order; a claim, which takes a job out of its
lane, rewrites the entries of that lane's indexes alone. Workers poll: no enqueue wakes a
worker of another process.

Times are the database's clock in UTC (``UTC_TIMESTAMP(6)``), as Django stores datetimes on
these databases with ``USE_TZ``: never the session's time zone, which ``NOW()`` would follow.

The queue needs READ COMMITTED (Django's default on these databases): each statement reads
what is committed when it starts, so an enqueuer that waited for another sees its job, and a
claim's checks of lock keys and dependencies see the latest state. A system check refuses
other isolation levels (see ``checks``).
"""

from __future__ import annotations

import datetime
import json
import uuid
import weakref
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ...claimed import ClaimedJob
from ...models import CLAIMABLE, Job, JobDependency, JobStatus, LimitState
from ..base import (
    ClaimKind,
    DatabaseQueries,
    Heartbeat,
    HeldBack,
    InsertedJobs,
    LimitedAsk,
    LimitedCandidate,
    Result,
    WholeLimit,
)
from ..fair_rounds import rounds_params, served_round
from ..limited import limited_candidates_sql
from ..limited_steps import read_room, spend_tokens
from ..rows import CLAIM_ORDER, CLAIMS, DEPENDENCY_CONDITION, and_terms, queue_conditions

TABLE = Job._meta.db_table
#: The database's clock, in UTC as Django stores datetimes here.
NOW = "UTC_TIMESTAMP(6)"
#: The oldest servers supported: FOR UPDATE SKIP LOCKED came with MariaDB 10.6 and MySQL 8.0.
MARIADB_OLDEST = (10, 6)
MYSQL_OLDEST = (8, 0)
#: The claim lanes (migration 0023): each lane's number, and the generated column that holds
#: it for the lane's claimable jobs (NULL for every other job) and leads the lane's indexes.
PLAIN_LANE = 1
FAIR_LANE = 2
LIMITED_LANE = 3
LANE_COLUMNS = {PLAIN_LANE: "plain_lane", FAIR_LANE: "fair_lane", LIMITED_LANE: "limited_lane"}
#: The column of claimable fair and limited jobs (their lane's number), which leads the index
#: of their due times (``outbox_job_claim_special``): whether either lane has jobs due.
KEYED_LANE_COLUMN = "keyed_lane"
#: The rows enqueuers lock to wait for each other (migration 0017), keys hashed into them.
ENQUEUE_LOCK_TABLE = "django_outbox_enqueue_lock"
ENQUEUE_LOCK_SLOTS = 4096

#: What a claim reads of each candidate, besides what it writes.
PICKED_COLUMNS = (
    "id, task_name, queue, payload, attempts, max_attempts, priority, resume_data, context"
)


#: What the limited candidates' SQL reads, and what the limited claim in one transaction reads
#: instead: what a claim reads, and the limit key.
LIMITED_CANDIDATE_COLUMNS = "SELECT id, task_name, queue, limit_key FROM"
LIMITED_PICKED_COLUMNS = f"SELECT {PICKED_COLUMNS}, limit_key FROM"
#: The rows of whole tasks' and queues' limits, locked in the order every limited claim locks
#: them (``limits.state._lock``): no two claims wait for each other.
LOCK_WHOLES_SQL = f"""
SELECT id FROM {LimitState._meta.db_table}
WHERE `key` = '' AND ({{wholes}})
ORDER BY kind, name, `key`
FOR UPDATE
"""


def in_lane(lane: int) -> str:
    """The condition that a job is claimable in ``lane``: the lead of the lane's indexes."""
    return f"{LANE_COLUMNS[lane]} = {lane}"


# The candidates, locked; rows other claimers hold are skipped, not waited for. The lane is
# the claim kind's (``in_lane``: the first column of its indexes); the queue filter follows
# it, so that a worker of given queues reads the index of (lane, queue, order).
PICK_SQL = f"""
SELECT {PICKED_COLUMNS}
FROM {TABLE} AS candidate {{index_hint}}
WHERE {{in_lane}} AND run_at <= {NOW}
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

# Whether jobs of a lane (fair, limited) are due: every other claim is full here. Along the
# index of both lanes' due times (``outbox_job_claim_special``).
LANE_WAITING_SQL = f"""
SELECT 1 FROM {TABLE}
WHERE {KEYED_LANE_COLUMN} = {{lane}} AND run_at <= {NOW} {{queue_filter}}
LIMIT 1
"""
FAIR_WAITING_SQL = LANE_WAITING_SQL.replace("{lane}", str(FAIR_LANE))

SUCCEEDED_SET = f"""
SET status = '{JobStatus.SUCCEEDED}', finished_at = {NOW}, lease_token = NULL,
    lease_expires_at = NULL
"""

MARK_SUCCEEDED_SQL = f"""
UPDATE {TABLE} {SUCCEEDED_SET}
WHERE id = %s AND lease_token = %s AND status = '{JobStatus.RUNNING}'
  AND NOT cancel_requested
"""

# A batch: the rows whose lease still holds are read (locked) first, for want of RETURNING.
# By the primary key, as every statement that changes a running job's row reads it: InnoDB
# locks the index entries a statement reads, in the order it reads them, and a read through the
# index of (status, id) locks that entry before the row, where an outcome's UPDATE (by id) holds
# the row and then needs that entry (it changes the status): a deadlock, and the job's whole
# transaction, handler's writes included, was its victim as often as not.
HELD_LEASES_SQL = f"""
SELECT id, lease_token FROM {TABLE} FORCE INDEX (PRIMARY)
WHERE id IN ({{ids}}) AND status = '{JobStatus.RUNNING}' AND NOT cancel_requested
FOR UPDATE SKIP LOCKED
"""
MARK_MANY_SUCCEEDED_SQL = f"UPDATE {TABLE} {SUCCEEDED_SET} WHERE id IN ({{ids}})"

# The heartbeat: the leases it may extend are locked first (HELD_LEASES_SQL, by the primary
# key), passing over rows another transaction holds, so that a row lock never makes it wait.
EXTEND_LEASES_SQL = f"""
UPDATE {TABLE} SET lease_expires_at = {NOW} + INTERVAL %s MICROSECOND WHERE id IN ({{ids}})
"""

# One job, as the ORM's save() would insert it, for a fraction of its Python; times are the
# database's clock in UTC (a column's default, CURRENT_TIMESTAMP, is the session's time zone).
INSERT_COLUMNS = """task_name, queue, payload, status, priority, run_at, attempts, max_attempts,
    worker_id, enqueued_at, last_error, last_traceback, errors, unique_key, context, lock_key,
    has_dependencies, fair_key, limit_key, fair_round"""
INSERT_ROW = f"""(%s, %s, %s, '{JobStatus.READY}', %s, COALESCE(%s, {NOW}), 0, %s, '', {NOW},
    '', '', '[]', %s, %s, %s, %s, %s, %s, %s)"""
INSERT_JOB_SQL = f"INSERT INTO {TABLE} ({INSERT_COLUMNS}) VALUES {INSERT_ROW}"
#: MariaDB returns what the row got; MySQL reads it back by the id.
RETURNING = " RETURNING id, run_at, enqueued_at"
INSERTED_SQL = f"SELECT id, run_at, enqueued_at FROM {TABLE} WHERE id = %s"

# The fair rounds' four looks (``fair_rounds.ROUNDS_SQL``), along the fair lane's indexes:
# MariaDB cannot tell that ``status IN (...) AND fair_key IS NOT NULL`` is the fair lane.
ROUNDS_SQL = f"""
SELECT
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE status = '{JobStatus.RUNNING}' AND queue = %s AND fair_key IS NOT NULL) AS running,
    (SELECT fair_round FROM {TABLE}
     WHERE {in_lane(FAIR_LANE)} AND queue = %s AND run_at <= {NOW}
     ORDER BY fair_round LIMIT 1) AS next_due,
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE {in_lane(FAIR_LANE)} AND queue = %s) AS last_waiting,
    (SELECT MAX(fair_round) FROM {TABLE}
     WHERE {in_lane(FAIR_LANE)} AND queue = %s AND fair_key = %s) AS key_last
"""


#: What the limited candidates' SQL (``limited.limited_candidates_sql``) says, which the
#: limited lane and its index replace here.
LIMITED_CANDIDATES_FROM = f"FROM {TABLE} AS candidate"
CLAIMABLE_CONDITION = "status IN ({})".format(", ".join(f"'{status}'" for status in CLAIMABLE))


def limited_hint(queues: Sequence[str] | None) -> str:
    """The limited claim's index: of its one queue, or of every queue."""
    if not queues:
        return "FORCE INDEX (outbox_job_limited_any)"
    if len(queues) == 1:
        return "FORCE INDEX (outbox_job_limited_queue)"
    return ""


def claim_index_hint(kind: ClaimKind, queues: int) -> str:
    """The index a claim reads its candidates along, in its order, stopping at its limit.

    Named, not left to the optimizer: MariaDB's estimates of a LIMIT read of a few thousand
    due jobs vary with the table's statistics, and its other choices sort every due job at
    each claim (an index led by the lane and the due time), or read all of another queue's
    backlog to find the worker's (the index of every queue, for a worker of one). A worker of
    several queues is left to the optimizer: each index of a queue is read in order, not the
    union of them.
    """
    fair = kind is ClaimKind.FAIR
    if queues == 0:
        return f"FORCE INDEX ({'outbox_job_fair_any' if fair else 'outbox_job_claim_any'})"
    if queues == 1:
        return f"FORCE INDEX ({'outbox_job_fair_queue' if fair else 'outbox_job_claim_queue'})"
    return ""


#: The claim's checks of a candidate, each along the index of its lookup (MariaDB may read a
#: key's line along the status instead).
LOOKUP_HINTS = {
    f"{JobDependency._meta.db_table} AS dependency": "FORCE INDEX (outbox_dependency_once)",
    f"{TABLE} AS ahead": "FORCE INDEX (outbox_job_lock_line)",
}
#: The dependency check as a count, not NOT EXISTS: MariaDB turns ``NOT EXISTS (... WHERE
#: dependency.job_id = candidate.id ...)`` into ``candidate.id NOT IN (...)`` (exists_to_in),
#: and then reads the whole dependency table for each dependent candidate (1,000 entries per
#: candidate at 1,000 dependencies). A scalar subquery stays a lookup by the job's id.
DEPENDENCY_COUNTED = DEPENDENCY_CONDITION.replace(
    "NOT EXISTS (\n          SELECT 1 FROM", "0 = (\n          SELECT count(*) FROM"
)
assert DEPENDENCY_COUNTED != DEPENDENCY_CONDITION, "rows.DEPENDENCY_CONDITION changed"


def with_lookup_hints(pick: str) -> str:
    """A claim's conditions (``rows.CLAIMS``) as MariaDB reads them best: the dependency
    check counted, and the indexes of the lookups named."""
    pick = pick.replace(DEPENDENCY_CONDITION, DEPENDENCY_COUNTED)
    for table, hint in LOOKUP_HINTS.items():
        pick = pick.replace(table, f"{table} {hint}")
    return pick


# The worker's own connections whose lock waits are bounded, and the bound (seconds).
_bounded_connections: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def enqueue_lock_slot(key: str) -> int:
    """The row of ``ENQUEUE_LOCK_TABLE`` that enqueuers of ``key`` lock; two keys that share
    one only wait for each other."""
    return zlib.crc32(key.encode()) % ENQUEUE_LOCK_SLOTS


class MySQLQueries(DatabaseQueries):
    vendor: ClassVar[str] = "mysql"
    placeholder: ClassVar[str] = "%s"
    due_by: ClassVar[str] = NOW
    clock: ClassVar[str] = NOW
    # UNIX_TIMESTAMP() reads NOW() in the session's time zone: the epoch, whatever it is.
    clock_seconds: ClassVar[str] = "UNIX_TIMESTAMP(NOW(6))"
    supports_limited_claim_in_one_trip: ClassVar[bool] = True

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

    def _queue_filter(
        self,
        queues: Sequence[str],
        excluded_queues: Sequence[str] = (),
        paused_retries: Sequence[str] = (),
    ) -> tuple[str, list[Any]]:
        """The claims' conditions on the queue, and their parameters in order."""
        terms, params = queue_conditions("%s", queues, excluded_queues, paused_retries)
        return and_terms(terms), list(params)

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
        # Never plain: the full claim's conditions cost nothing for a job without a lock key
        # or dependencies, and a plain claim would need an index of its own.
        pick, order = CLAIMS[ClaimKind.FULL if kind is ClaimKind.PLAIN else kind]
        queues = list(queues or ())
        queue_filter, params = self._queue_filter(queues, excluded_queues, paused_retries)
        sql = PICK_SQL.format(
            in_lane=in_lane(FAIR_LANE if kind is ClaimKind.FAIR else PLAIN_LANE),
            queue_filter=queue_filter,
            pick=with_lookup_hints(pick),
            order=order,
            index_hint=claim_index_hint(kind, len(queues)),
        )
        return self._claim_picked(connection, sql, [*params, limit], worker_id, lease_seconds)

    def claim_chosen(
        self,
        connection: BaseDatabaseWrapper,
        worker_id: str,
        ids: Sequence[int],
        lease_seconds: float,
    ) -> list[ClaimedJob]:
        if not ids:
            return []
        # By primary key, if still runnable; rows another worker holds are skipped.
        sql = f"""
SELECT {PICKED_COLUMNS} FROM {TABLE}
WHERE id IN ({", ".join(str(int(job_id)) for job_id in ids)})
  AND {in_lane(LIMITED_LANE)} AND run_at <= {NOW}
ORDER BY {CLAIM_ORDER}
FOR UPDATE SKIP LOCKED
"""
        return self._claim_picked(connection, sql, (), worker_id, lease_seconds)

    def _claim_picked(
        self,
        connection: BaseDatabaseWrapper,
        pick_sql: str,
        params: Any,
        worker_id: str,
        lease_seconds: float,
    ) -> list[ClaimedJob]:
        """Lock the rows ``pick_sql`` reads (``PICKED_COLUMNS``), claim them by primary key,
        commit; return the jobs."""
        rows: list[Any] = []
        tokens: dict[int, uuid.UUID] = {}
        try:
            with self._short_transaction(connection):
                rows, tokens = self._update_picked(
                    connection, pick_sql, params, worker_id, lease_seconds
                )
        except DatabaseError:
            committed = self._rows_committed(connection, rows, tokens)
            if committed is None:
                raise
            rows = committed
        return self._jobs_of(rows, tokens, worker_id)

    def _update_picked(
        self,
        connection: BaseDatabaseWrapper,
        pick_sql: str,
        params: Any,
        worker_id: str,
        lease_seconds: float,
    ) -> tuple[list[Any], dict[int, uuid.UUID]]:
        """In the caller's transaction, lock the rows ``pick_sql`` reads (``PICKED_COLUMNS``
        first) and claim them by primary key; return the rows and their lease tokens."""
        _, rows = self.execute(connection, pick_sql, params)
        if not rows:
            return [], {}
        tokens = {row[0]: uuid.uuid4() for row in rows}
        ids = ", ".join(str(int(job_id)) for job_id in tokens)
        update = CLAIM_UPDATE_SQL.format(
            tokens=" ".join(["WHEN %s THEN %s"] * len(tokens)), ids=ids
        )
        update_params: list[Any] = []
        for job_id, token in tokens.items():
            update_params += [job_id, self._token_value(connection, token)]
        update_params += [round(lease_seconds * 1_000_000), worker_id]
        self.execute(connection, update, update_params)
        return rows, tokens

    def _rows_committed(
        self, connection: BaseDatabaseWrapper, rows: list[Any], tokens: dict[int, uuid.UUID]
    ) -> list[Any] | None:
        """Of a claim's ``rows``, those whose claim committed, its transaction having failed;
        None where that cannot be told (the caller raises the error).

        The connection may have died after the server committed and before its answer came (a
        killed connection, a restart): the jobs would then run under this worker's id with no
        thread to run them, and a live worker's jobs are not taken back. The tokens are this
        claim's own: look for them on a new connection.
        """
        if not tokens or connection.in_atomic_block:
            return None
        claimed = self._committed_claim(connection, tokens)
        if claimed is None:
            return None
        return [row for row in rows if row[0] in claimed]

    def _jobs_of(
        self, rows: list[Any], tokens: dict[int, uuid.UUID], worker_id: str
    ) -> list[ClaimedJob]:
        """The jobs of a claim's ``rows`` (``PICKED_COLUMNS`` first), highest priority first,
        then oldest."""
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
            *_,
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

    def _committed_claim(
        self, connection: BaseDatabaseWrapper, tokens: dict[int, uuid.UUID]
    ) -> set[int] | None:
        """The jobs of ``tokens`` that a claim whose COMMIT's answer was lost did claim; None
        if the database cannot say (it is still away)."""
        connection.close()
        ids = ", ".join(str(int(job_id)) for job_id in tokens)
        try:
            # A locking read: it waits for the lost connection's transaction to end, if the
            # server is still finishing it, then reads what it left.
            with self._short_transaction(connection):
                _, found = self.execute(
                    connection,
                    f"SELECT id, lease_token FROM {TABLE} WHERE id IN ({ids}) "
                    f"AND status = '{JobStatus.RUNNING}' FOR UPDATE",
                    (),
                )
        except DatabaseError:
            connection.close()
            return None
        return {
            job_id
            for job_id, token in found
            if token is not None and _as_uuid(token) == tokens[job_id]
        }

    def limited_candidates(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        paused_retries: Sequence[str],
        held_back: HeldBack,
        limit: int,
        excluded_queues: Sequence[str] = (),
    ) -> list[LimitedCandidate]:
        sql, params = self._limited_candidates_sql(
            queues, paused_retries, held_back, limit, excluded_queues
        )
        _, rows = self.execute(connection, sql, params)
        return [LimitedCandidate(*row) for row in rows]

    def claim_limited_batch(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
    ) -> list[tuple[ClaimedJob, str]]:
        sql, params = self._limited_candidates_sql(
            ask.queues, ask.paused_retries, held_back, ask.count, ask.excluded_queues
        )
        # Locked, rows other claimers hold skipped: concurrent batches take different jobs.
        _, rows = self.execute(connection, f"{sql}FOR UPDATE SKIP LOCKED\n", params)
        keys = {job_id: limit_key for job_id, _task_name, _queue, limit_key in rows}
        jobs = self.claim_chosen(connection, ask.worker_id, list(keys), ask.lease_seconds)
        return [(job, keys[job.id]) for job in jobs]

    def claim_limited_in_one_trip(
        self,
        connection: BaseDatabaseWrapper,
        ask: LimitedAsk,
        held_back: HeldBack,
        limits: Sequence[WholeLimit],
    ) -> tuple[list[tuple[ClaimedJob, str]], bool]:
        """Seven round trips (``limited_steps``): START TRANSACTION, the wholes' rows locked,
        the read under the locks, the jobs picked (rows other claimers hold skipped) and
        claimed by primary key, the tokens' UPDATE, COMMIT: the plain claim's four, and
        three."""
        rows: list[Any] = []
        tokens: dict[int, uuid.UUID] = {}
        short = False
        try:
            with self._short_transaction(connection):
                if limits:
                    self.execute(
                        connection,
                        LOCK_WHOLES_SQL.format(
                            wholes=" OR ".join(["(kind = %s AND name = %s)"] * len(limits))
                        ),
                        [value for whole in limits for value in (whole.kind, whole.name)],
                    )
                room = read_room(self, connection)
                passed_over = room.held_back(limits, ask.count, held_back)
                if passed_over is None:
                    return [], True
                held, short = passed_over
                sql, params = self._limited_candidates_sql(
                    ask.queues, ask.paused_retries, held, ask.count, ask.excluded_queues
                )
                pick = sql.replace(LIMITED_CANDIDATE_COLUMNS, LIMITED_PICKED_COLUMNS, 1)
                rows, tokens = self._update_picked(
                    connection,
                    f"{pick}FOR UPDATE SKIP LOCKED\n",
                    params,
                    ask.worker_id,
                    ask.lease_seconds,
                )
                # PICKED_COLUMNS (id, task_name, queue, ...), then limit_key.
                spend_tokens(self, connection, room, limits, ((row[1], row[2]) for row in rows))
        except DatabaseError:
            committed = self._rows_committed(connection, rows, tokens)
            if committed is None:
                raise
            rows = committed
        keys = {row[0]: row[-1] for row in rows}
        jobs = self._jobs_of(rows, tokens, ask.worker_id)
        return [(job, keys[job.id]) for job in jobs], short

    def _limited_candidates_sql(
        self,
        queues: Sequence[str] | None,
        paused_retries: Sequence[str],
        held_back: HeldBack,
        limit: int,
        excluded_queues: Sequence[str],
    ) -> tuple[str, list[Any]]:
        sql, params = limited_candidates_sql(
            self.placeholder,
            self.due_by,
            queues,
            paused_retries,
            held_back,
            limit,
            excluded_queues,
        )
        # Along the limited lane's indexes (migration 0023): the lane stands for the partial
        # indexes' condition, and the index is named as the claims' are.
        sql = sql.replace(
            LIMITED_CANDIDATES_FROM, f"{LIMITED_CANDIDATES_FROM} {limited_hint(queues)}"
        )
        sql = sql.replace(CLAIMABLE_CONDITION, in_lane(LIMITED_LANE))
        return with_lookup_hints(sql), params

    def database_seconds(self, connection: BaseDatabaseWrapper) -> float:
        _, rows = self.execute(connection, f"SELECT {self.clock_seconds}", ())
        return float(rows[0][0])

    def waiting_kinds(
        self,
        connection: BaseDatabaseWrapper,
        queues: Sequence[str] | None,
        excluded_queues: Sequence[str] = (),
    ) -> set[ClaimKind]:
        # Every claim of jobs that are neither fair nor limited is full here.
        queue_filter, params = self._queue_filter(list(queues or ()), excluded_queues)
        waiting = set()
        for lane, kind in ((FAIR_LANE, ClaimKind.FAIR), (LIMITED_LANE, ClaimKind.LIMITED)):
            sql = LANE_WAITING_SQL.format(lane=lane, queue_filter=queue_filter)
            _, rows = self.execute(connection, sql, params)
            if rows:
                waiting.add(kind)
        return waiting

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
        # Rows another transaction has locked are passed over (the completer tries them again
        # later), as are those cancel() asked to stop.
        return self._update_held(connection, jobs, MARK_MANY_SUCCEEDED_SQL, ())

    def extend_leases(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob], lease_seconds: float
    ) -> Heartbeat:
        extended = self._update_held(
            connection, jobs, EXTEND_LEASES_SQL, [round(lease_seconds * 1_000_000)]
        )
        if len(extended) == len(jobs):
            return Heartbeat()
        return self._heartbeat_missed(connection, jobs, extended)

    def _update_held(
        self, connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob], update: str, params: Any
    ) -> set[int]:
        """Lock the rows of ``jobs`` whose attempts still hold them, but those locked by
        another transaction and those cancel() asked to stop (``HELD_LEASES_SQL``); run
        ``update`` (its ``{ids}`` theirs) on them; return their ids."""
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
                held_ids = ", ".join(str(job_id) for job_id in held)
                self.execute(connection, update.format(ids=held_ids), params)
        return held

    def bound_lock_waits(
        self, connection: BaseDatabaseWrapper, seconds: float, worker_id: str = ""
    ) -> None:
        """Set the session's ``innodb_lock_wait_timeout`` (whole seconds, at least one) once
        per connection: a connection of the worker's own never waits longer for a row lock."""
        connection.ensure_connection()
        driver_connection = connection.connection
        wanted = max(1, round(seconds))
        if _bounded_connections.get(driver_connection) != wanted:
            self.execute(connection, f"SET SESSION innodb_lock_wait_timeout = {wanted}", ())
            _bounded_connections[driver_connection] = wanted

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

    def _row_params(self, job: Job, payload: Any, fair_round: int | None) -> list[Any]:
        """One row's values for ``INSERT_ROW``."""
        run_at = job.run_at if isinstance(job.run_at, datetime.datetime) else None
        if run_at is not None and settings.USE_TZ:
            run_at = timezone.make_naive(run_at, datetime.timezone.utc)
        return [
            job.task_name,
            job.queue,
            None if payload is None else json.dumps(payload),
            job.priority,
            run_at,
            job.max_attempts,
            job.unique_key,
            None if job.context is None else json.dumps(job.context),
            job.lock_key,
            job.has_dependencies,
            job.fair_key,
            job.limit_key,
            fair_round,
        ]

    def _stored_time(self, value: datetime.datetime) -> datetime.datetime:
        return timezone.make_aware(value, datetime.timezone.utc) if settings.USE_TZ else value

    def insert_job(self, connection: BaseDatabaseWrapper, job: Job) -> None:
        if job.fair_key is not None and job.fair_round is None:
            job.fair_round = self.first_fair_round(connection, job.queue, job.fair_key)
        params = self._row_params(job, job.payload, job.fair_round)
        mariadb: bool = connection.mysql_is_mariadb  # type: ignore[attr-defined]
        # Django's cursor: this runs in the caller's transaction, as the ORM's writes do.
        with connection.cursor() as cursor:
            if mariadb:
                cursor.execute(INSERT_JOB_SQL + RETURNING, params)
            else:
                cursor.execute(INSERT_JOB_SQL, params)
                cursor.execute(INSERTED_SQL, [cursor.lastrowid])
            job_id, run_at, enqueued_at = cursor.fetchone()
        job.id = job_id
        job.run_at = self._stored_time(run_at)
        job.enqueued_at = self._stored_time(enqueued_at)
        job._state.adding = False
        job._state.db = connection.alias

    def insert_jobs(
        self, connection: BaseDatabaseWrapper, template: Job, payloads: Sequence[Any]
    ) -> InsertedJobs:
        rows: list[Any] = []
        for position, payload in enumerate(payloads):
            fair_round = None if template.fair_round is None else template.fair_round + position
            rows += self._row_params(template, payload, fair_round)
        sql = f"INSERT INTO {TABLE} ({INSERT_COLUMNS}) VALUES " + ", ".join(
            [INSERT_ROW] * len(payloads)
        )
        mariadb: bool = connection.mysql_is_mariadb  # type: ignore[attr-defined]
        # Every row's enqueued_at is the statement's time (UTC_TIMESTAMP is read once per
        # statement).
        with connection.cursor() as cursor:
            if mariadb:
                # The rows come back in the order they were inserted.
                cursor.execute(sql + " RETURNING id, enqueued_at", rows)
                returned = cursor.fetchall()
                ids = [row[0] for row in returned]
                enqueued_at = returned[0][1]
            else:
                # The ids of one multi-row INSERT are consecutive (one step apart), from the
                # first.
                cursor.execute(sql, rows)
                first = cursor.lastrowid
                cursor.execute(
                    f"SELECT enqueued_at, @@SESSION.auto_increment_increment FROM {TABLE} "
                    "WHERE id = %s",
                    [first],
                )
                enqueued_at, step = cursor.fetchone()
                ids = list(range(first, first + len(payloads) * step, step))
        return InsertedJobs(ids, enqueued_at=self._stored_time(enqueued_at))

    def on_conflict_add(self, table: str, keys: Sequence[str], added: Sequence[str]) -> str:
        # On any unique key's conflict: the table's is (keys).
        sums = ", ".join(f"{column} = {column} + VALUES({column})" for column in added)
        return f"ON DUPLICATE KEY UPDATE {sums}"

    def compatibility_problems(self, connection: BaseDatabaseWrapper) -> list[CheckMessage]:
        mariadb: bool = connection.mysql_is_mariadb  # type: ignore[attr-defined]
        version: tuple[int, ...] = connection.mysql_version  # type: ignore[attr-defined]
        name = "MariaDB" if mariadb else "MySQL"
        shown = ".".join(map(str, version))
        if version < (MARIADB_OLDEST if mariadb else MYSQL_OLDEST):
            oldest = ".".join(map(str, MARIADB_OLDEST if mariadb else MYSQL_OLDEST))
            return [
                Error(
                    f"django-outbox needs {name} {oldest} or later; database "
                    f"{connection.alias!r} is {name} {shown}.",
                    hint="Claims need FOR UPDATE SKIP LOCKED (MariaDB 10.6, MySQL 8.0) and "
                    "enqueues INSERT ... RETURNING (MariaDB). Upgrade the server, or use "
                    "PostgreSQL or SQLite.",
                    id="django_outbox.E050",
                )
            ]
        problems: list[CheckMessage] = []
        _, rows = self.execute(
            connection,
            "SELECT @@SESSION.transaction_isolation, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())"
            if not mariadb or version >= (11, 1)
            else "SELECT @@SESSION.tx_isolation, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())",
            (),
        )
        isolation, offset = rows[0]
        if isolation != "READ-COMMITTED":
            problems.append(
                Error(
                    f"django-outbox needs the READ COMMITTED isolation level; database "
                    f"{connection.alias!r} ({name}) runs transactions at {isolation}.",
                    hint='Remove "isolation_level" from the database\'s OPTIONS (Django '
                    'defaults to READ COMMITTED), or set "OPTIONS": {"isolation_level": '
                    '"read committed"}. Under REPEATABLE READ an enqueuer that waited for '
                    "another would not see its job (two jobs with one unique key), and gap "
                    "locks make claims deadlock.",
                    id="django_outbox.E051",
                )
            )
        if settings.USE_TZ and offset:
            problems.append(
                Warning(
                    f"Database {connection.alias!r} ({name}) has the session time zone "
                    f"{offset:+d} seconds from UTC: column defaults and Now() write local time, "
                    "where Django and the queue's claims read UTC.",
                    hint='Set "OPTIONS": {"init_command": "SET time_zone = \'+00:00\'"} '
                    "(or the server's default_time_zone to '+00:00').",
                    id="django_outbox.W050",
                )
            )
        if mariadb and version < (10, 8):
            problems.append(
                Warning(
                    f"Database {connection.alias!r} is MariaDB {shown}, which builds "
                    "descending index columns ascending: each claim sorts the due jobs "
                    "instead of reading them in order from the claim index.",
                    hint="MariaDB 10.8 or later claims along the index, however long the backlog.",
                    id="django_outbox.W051",
                )
            )
        return problems

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
