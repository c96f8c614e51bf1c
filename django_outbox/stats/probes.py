"""``manage.py outbox_health``'s checks: the database, the workers, and where dead rows wait for
vacuum (PostgreSQL) what slows every claim down (a long open transaction, dead tuples in the job
table).

Each check ends ``ok``, ``warning`` or ``unhealthy``; the report is unhealthy when any check is.
A long transaction anywhere in the database pins the MVCC horizon: the rows of finished and
deleted jobs cannot be vacuumed away while it lasts, and every claim steps over them, so claims
slow down the longer it stays open.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from django.db import DatabaseError, connections
from django.utils import timezone

from ..conf import get_settings
from ..db import reports_for
from ..db.base import application_name_of
from ..db.outage import first_line
from ..db.reports import LockWait
from ..models import Job, Message
from ..worker.registration import Registered, registered_workers

Status = Literal["ok", "warning", "unhealthy"]

#: Defaults of the command's thresholds.
WARN_TRANSACTION_SECONDS = 300.0
WARN_DEAD_TUPLES = 1_000_000
WARN_UNSENT_SECONDS = 60.0


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthReport:
    checks: list[Check]

    @property
    def healthy(self) -> bool:
        return all(check.status != "unhealthy" for check in self.checks)

    def problems(self) -> list[Check]:
        return [check for check in self.checks if check.status == "unhealthy"]

    def as_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "checks": [asdict(check) for check in self.checks]}

    def as_text(self) -> str:
        lines = [f"outbox_health: {'healthy' if self.healthy else 'UNHEALTHY'}"]
        lines += [f"  {check.status:<9}  {check.name}: {check.message}" for check in self.checks]
        return "\n".join(lines)


@dataclass(frozen=True)
class Thresholds:
    """What the command's options ask for. None leaves a check's ``unhealthy`` level out."""

    worker_id: str | None = None
    require_workers: int = 0
    warn_transaction_seconds: float | None = WARN_TRANSACTION_SECONDS
    max_transaction_seconds: float | None = None
    warn_dead_tuples: int | None = WARN_DEAD_TUPLES
    max_dead_tuples: int | None = None
    warn_unsent_seconds: float | None = WARN_UNSENT_SECONDS
    max_unsent_seconds: float | None = None


def check_health(thresholds: Thresholds | None = None, *, using: str | None = None) -> HealthReport:
    """Run every check against ``using`` (default ``OUTBOX["DATABASE"]``)."""
    thresholds = thresholds or Thresholds()
    using = using or get_settings().database
    database = _database(using)
    if database.status != "ok":
        # Nothing else can be read.
        return HealthReport([database])
    checks = [database, *_workers(using, thresholds)]
    if get_settings().brokers:
        checks.append(_relay(using, thresholds))
    if reports_for(connections[using]).has_vacuum:
        checks += [_oldest_transaction(using, thresholds), _dead_tuples(using, thresholds)]
    return HealthReport(checks)


def _database(using: str) -> Check:
    started = time.monotonic()
    try:
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return Check("database", "unhealthy", f"unreachable: {first_line(exc)}")
    milliseconds = (time.monotonic() - started) * 1000
    return Check(
        "database",
        "ok",
        f"reachable ({connections[using].display_name}, {milliseconds:.0f} ms)",
        {"milliseconds": round(milliseconds, 1)},
    )


def _workers(using: str, thresholds: Thresholds) -> Iterator[Check]:
    try:
        workers = registered_workers(using=using)
    except DatabaseError as exc:
        # The registry's table is missing (migrations not applied) or unreadable.
        yield Check("workers", "unhealthy", f"cannot read the registry: {first_line(exc)}")
        return
    allowed = get_settings().health["ALLOWED_ERROR_SECONDS"]
    if thresholds.worker_id is not None:
        yield from _one_worker(workers, thresholds.worker_id, allowed, using)
        return
    live = [worker for worker in workers if not worker.stale]
    waits = _lock_waits([worker for worker in live if worker.late], using)
    for worker in live:
        if not worker.healthy or worker.late:
            yield _worker_check(worker, allowed, waits)
    stale = [worker.row.worker_id for worker in workers if worker.stale]
    healthy = sum(worker.healthy for worker in live)
    late = [worker.row.worker_id for worker in live if worker.late]
    message = f"{len(live)} live ({healthy} healthy, {len(late)} late), {len(stale)} stale"
    details = {"live": len(live), "healthy": healthy, "late": late, "stale": stale}
    if healthy < thresholds.require_workers:
        yield Check(
            "workers",
            "unhealthy",
            f"{message}; at least {thresholds.require_workers} healthy required",
            details,
        )
    elif stale:
        yield Check(
            "workers",
            "warning",
            f"{message}: stopped heartbeating without stopping ({', '.join(stale[:5])})",
            details,
        )
    else:
        yield Check("workers", "ok", message, details)


def _lock_waits(workers: list[Registered], using: str) -> dict[str, list[LockWait]]:
    """The lock waits of ``workers``' own sessions, by worker id (where the database tells)."""
    if not workers:
        return {}
    names = {application_name_of(worker.row.worker_id): worker.row.worker_id for worker in workers}
    connection = connections[using]
    try:
        found = reports_for(connection).lock_waits(connection, list(names))
    except DatabaseError:
        # Only a detail of the report: pg_stat_activity may be closed to this role.
        return {}
    waits: dict[str, list[LockWait]] = {}
    for wait in found:
        waits.setdefault(names[wait.application_name], []).append(wait)
    return waits


def _waits_text(waits: list[LockWait]) -> str:
    return "; ".join(
        f"waits {wait.seconds:.0f} s for a lock ({wait.wait}"
        + (f", held by pid {', '.join(map(str, wait.blocked_by))}" if wait.blocked_by else "")
        + f"): {wait.statement[:120]}"
        for wait in waits[:3]
    )


def _one_worker(
    workers: list[Registered], worker_id: str, allowed: float, using: str
) -> Iterator[Check]:
    """The worker ``worker_id``, or the processes of a supervisor started with that id."""
    pattern = re.compile(rf"{re.escape(worker_id)}(-\d+)?")
    matching = [worker for worker in workers if pattern.fullmatch(worker.row.worker_id)]
    if not matching:
        yield Check(
            f"worker {worker_id}",
            "unhealthy",
            "not registered: not started yet, stopped, or unable to reach the database",
        )
    waits = _lock_waits([worker for worker in matching if worker.late or worker.stale], using)
    for worker in matching:
        yield _worker_check(worker, allowed, waits)


def _worker_check(
    worker: Registered, allowed: float, waits: dict[str, list[LockWait]] | None = None
) -> Check:
    row = worker.row
    lock_waits = (waits or {}).get(row.worker_id, [])
    details = {
        "host": row.host,
        "pid": row.pid,
        "heartbeat_age": round(worker.heartbeat_age, 1),
        "in_error_for": None if worker.in_error_for is None else round(worker.in_error_for, 1),
        "last_error": row.last_error,
        "jobs_done": row.jobs_done,
        "jobs_failed": row.jobs_failed,
        "late": worker.late,
        "lock_waits": [asdict(wait) for wait in lock_waits],
    }
    name = f"worker {row.worker_id}"
    waiting = f"; {_waits_text(lock_waits)}" if lock_waits else ""
    if worker.stale:
        return Check(
            name,
            "unhealthy",
            f"stale: no heartbeat for {worker.heartbeat_age:.0f} s{waiting}",
            details,
        )
    if not worker.healthy:
        return Check(
            name,
            "unhealthy",
            f"in error for {worker.in_error_for or 0:.0f} s (allowed {allowed:g} s): "
            f"{row.last_error}",
            details,
        )
    if worker.late:
        return Check(
            name,
            "warning",
            f"heartbeat late: {worker.heartbeat_age:.0f} s ago (beats every "
            f"{row.heartbeat_seconds:g} s){waiting}",
            details,
        )
    state = "in error" if worker.in_error_for is not None else "working"
    return Check(
        name,
        "ok",
        f"{state}, heartbeat {worker.heartbeat_age:.0f} s ago, {row.jobs_done:,} jobs done",
        details,
    )


def _level(value: float, warn: float | None, maximum: float | None) -> Status:
    if maximum is not None and value > maximum:
        return "unhealthy"
    if warn is not None and value > warn:
        return "warning"
    return "ok"


def _oldest_transaction(using: str, thresholds: Thresholds) -> Check:
    connection = connections[using]
    oldest = reports_for(connection).oldest_transaction(connection)
    if oldest is None:
        return Check("oldest transaction", "ok", "none open in other sessions", {"age": None})
    status = _level(
        oldest.age, thresholds.warn_transaction_seconds, thresholds.max_transaction_seconds
    )
    message = f"open for {oldest.age:.0f} s ({oldest.holder})"
    if status != "ok":
        message += "; it keeps vacuum from removing dead jobs, which slows every claim"
    return Check(
        "oldest transaction",
        status,
        message,
        {"age": round(oldest.age, 1), "what": oldest.holder},
    )


def _dead_tuples(using: str, thresholds: Thresholds) -> Check:
    table = Job._meta.db_table
    connection = connections[using]
    rows = reports_for(connection).dead_rows(connection, table)
    if rows is None:
        return Check("dead tuples", "ok", f"no statistics for {table} yet")
    status = _level(rows.dead, thresholds.warn_dead_tuples, thresholds.max_dead_tuples)
    since = (
        "never vacuumed" if rows.vacuumed_ago is None else f"vacuumed {rows.vacuumed_ago:.0f} s ago"
    )
    message = f"{rows.dead:,} dead, {rows.live:,} live rows in {table} ({since})"
    if status != "ok":
        message += "; look for a long transaction, or tune autovacuum for this table"
    return Check(
        "dead tuples",
        status,
        message,
        {"dead": rows.dead, "live": rows.live, "vacuumed_seconds_ago": rows.vacuumed_ago},
    )


def _relay(using: str, thresholds: Thresholds) -> Check:
    """The oldest message still waiting for its broker, and those a broker refused."""
    unsent = Message.objects.using(using).unsent()
    oldest = unsent.pending().order_by("id").values_list("created_at", flat=True).first()
    age = 0.0 if oldest is None else max(0.0, (timezone.now() - oldest).total_seconds())
    # Counted up to a bound: a blocked key is one problem however many messages it holds.
    blocked = len(unsent.blocked().values_list("pk", flat=True)[:1000])
    status = _level(age, thresholds.warn_unsent_seconds, thresholds.max_unsent_seconds)
    if oldest is None:
        message = "no message waits"
    else:
        message = f"oldest unsent message waits for {age:.0f} s"
        if status != "ok":
            message += " (is a relay running? can it reach its broker?)"
    if blocked:
        status = "warning" if status == "ok" else status
        message += f"; {blocked}{'+' if blocked == 1000 else ''} blocked (see the admin)"
    return Check("relay", status, message, {"oldest_unsent_age": round(age, 1), "blocked": blocked})
